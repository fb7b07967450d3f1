//! Choosing the device a command runs on (`--backend`, `Device::best()`), and saying which it is and why.

use super::error::CliError;
use webtensor::{BackendKind, Device, BACKEND_ENV};

/// `--backend`: which device to run on, parsed into [`BackendKind`] (exact lowercase names; `--help` and the
/// error for a bad value list them). Without the flag, `Device::best()` decides (and honours
/// `WEBTENSOR_BACKEND`); `auto` picks the best GPU adapter, else the CPU, ignoring the variable. `webgpu`
/// exists only in the browser, so it is not offered.
pub fn backend_parser() -> impl clap::builder::TypedValueParser<Value = BackendKind> {
    use clap::builder::TypedValueParser;
    use BackendKind::*;
    let names = [Auto, Cpu, Vulkan, Gl, Metal, Dx12].map(BackendKind::name);
    clap::builder::PossibleValuesParser::new(names).try_map(|s| s.parse::<BackendKind>())
}

/// A device and, in words, how it was chosen.
pub struct Chosen {
    pub device: Device,
    /// e.g. `Device::best()`, `--backend vulkan`, `WEBTENSOR_BACKEND=cpu`.
    pub how: String,
    /// True when an automatic choice found no usable GPU adapter and fell back to the CPU backend.
    pub fell_back: bool,
}

/// Opens the device `--backend` asks for, or `Device::best()` without the flag.
pub fn choose_device(backend: Option<BackendKind>) -> Result<Chosen, CliError> {
    let (device, how, automatic) = match backend {
        None => {
            let env = std::env::var(BACKEND_ENV).ok().filter(|v| !v.is_empty());
            let auto = env.as_deref().is_none_or(|v| v.eq_ignore_ascii_case("auto"));
            let how = match &env {
                Some(v) => format!("Device::best() with {BACKEND_ENV}={v}"),
                None => "Device::best()".to_string(),
            };
            (Device::best()?, how, auto)
        }
        Some(b) => (Device::with_backend(b)?, format!("--backend {b}"), b == BackendKind::Auto),
    };
    let fell_back = automatic && device.is_cpu();
    Ok(Chosen { device, how, fell_back })
}

/// Why an automatic choice fell back to the CPU, in words: no adapter at all, only software ones (which the CPU
/// backend outruns; `--backend` still runs on one), or adapters that cannot run compute shaders, each with its
/// reason.
pub fn fallback_reason(adapters: &[webtensor::Capabilities]) -> String {
    let software: Vec<String> = adapters
        .iter()
        .filter(|a| a.unusable.is_none() && a.device_type == webtensor::DeviceType::Cpu)
        .map(|a| format!("{} on {}", a.name, a.backend))
        .collect();
    let unusable: Vec<String> = adapters
        .iter()
        .filter_map(|a| Some(format!("{} on {}: {}", a.name, a.backend, a.unusable.as_ref()?)))
        .collect();
    let mut parts = vec![];
    if !software.is_empty() {
        let backend = adapters.iter().find(|a| a.device_type == webtensor::DeviceType::Cpu).map(|a| a.backend);
        parts.push(format!(
            "only software adapters were found ({}), which the CPU backend outruns (--backend {} runs on one)",
            software.join(", "),
            backend.map_or("vulkan".to_string(), |b| b.to_string())
        ));
    }
    if !unusable.is_empty() {
        parts.push(format!("the adapters found cannot compute ({})", unusable.join("; ")));
    }
    if parts.is_empty() {
        return "no GPU adapter was found".into();
    }
    parts.join("; ")
}

/// A device's short name, once [`describe`] has said the rest: "the CPU backend", or the adapter's name.
pub fn short_name(device: &Device) -> String {
    match device.is_cpu() {
        true => "the CPU backend".into(),
        false => device.capabilities().name.clone(),
    }
}

/// `name [backend, type]` of a device, for one-line messages.
pub fn describe(device: &Device) -> String {
    let c = device.capabilities();
    if device.is_cpu() {
        format!("CPU backend ({})", c.name)
    } else {
        format!("{} [{}, {}]", c.name, c.backend, c.device_type)
    }
}
