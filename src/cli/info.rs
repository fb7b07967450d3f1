//! `webtensor info [--json]`: every adapter wgpu sees, its limits and features, the device `Device::best()`
//! picks, and the CPU backend.

use super::device::choose_device;
use super::error::CliError;
use super::util::{bytes, outln};
use serde::Serialize;
use webtensor::gpu::{tuned_kernels, uses_cooperative_matrices};
use webtensor::{Capabilities, Device, BACKEND_ENV};

#[derive(clap::Args)]
pub struct InfoArgs {
    /// Print the same facts as one JSON object (`adapters`, `best`, `cpu`).
    #[arg(long)]
    json: bool,
}

/// [`Capabilities`], field for field, for serde, and the adapter's tuned matmul kernels.
#[derive(Serialize)]
struct CapsJson<'a> {
    backend: &'a str,
    name: &'a str,
    device_type: &'a str,
    driver: &'a str,
    max_storage_binding_bytes: u64,
    max_buffer_bytes: u64,
    max_workgroup_storage_bytes: u32,
    max_invocations_per_workgroup: u32,
    max_workgroups_per_dimension: u32,
    min_storage_offset_alignment: u32,
    min_uniform_offset_alignment: u32,
    shader_f16: bool,
    subgroups: bool,
    /// `[min, max]` in invocations; `[0, 0]` when unknown.
    subgroup_size: (u32, u32),
    cooperative_matrix: &'a [String],
    dtypes: Vec<&'static str>,
    /// Why webtensor cannot run on the adapter; null when it can.
    unusable: Option<&'a str>,
    /// The tuning cache's matmul choices for the adapter (absent for the CPU backend).
    #[serde(skip_serializing_if = "Option::is_none")]
    tuned: Option<TunedJson>,
}

/// [`webtensor::gpu::TunedKernels`] for serde: null where not tuned yet.
#[derive(Serialize)]
struct TunedJson {
    f32: Option<String>,
    f32_why: Option<String>,
    f16_coop: Option<String>,
    f16_coop_why: Option<String>,
}

impl<'a> From<&'a Capabilities> for CapsJson<'a> {
    fn from(c: &'a Capabilities) -> CapsJson<'a> {
        CapsJson {
            backend: c.backend.name(),
            name: &c.name,
            device_type: c.device_type.name(),
            driver: &c.driver,
            max_storage_binding_bytes: c.max_storage_binding_bytes,
            max_buffer_bytes: c.max_buffer_bytes,
            max_workgroup_storage_bytes: c.max_workgroup_storage_bytes,
            max_invocations_per_workgroup: c.max_invocations_per_workgroup,
            max_workgroups_per_dimension: c.max_workgroups_per_dimension,
            min_storage_offset_alignment: c.min_storage_offset_alignment,
            min_uniform_offset_alignment: c.min_uniform_offset_alignment,
            shader_f16: c.shader_f16,
            subgroups: c.subgroups,
            subgroup_size: c.subgroup_size,
            cooperative_matrix: &c.cooperative_matrix,
            dtypes: c.dtypes.iter().map(|d| d.name()).collect(),
            unusable: c.unusable.as_deref(),
            tuned: (c.backend != webtensor::BackendKind::Cpu).then(|| {
                let t = tuned_kernels(c);
                TunedJson { f32: t.tiled, f32_why: t.tiled_why, f16_coop: t.coop, f16_coop_why: t.coop_why }
            }),
        }
    }
}

#[derive(Serialize)]
struct BestJson<'a> {
    /// How the choice was made, e.g. `Device::best()` or `Device::best() with WEBTENSOR_BACKEND=cpu`.
    chosen_by: &'a str,
    /// True when no GPU adapter was usable and `best` fell back to the CPU backend.
    fell_back_to_cpu: bool,
    device: CapsJson<'a>,
}

#[derive(Serialize)]
struct InfoJson<'a> {
    adapters: Vec<CapsJson<'a>>,
    best: BestJson<'a>,
    cpu: CapsJson<'a>,
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn dtypes(c: &Capabilities) -> String {
    c.dtypes.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
}

/// The tuning cache's choice for `c`'s f32 matmuls (or f16 ones on cooperative matrices, `coop`), and why the
/// generic kernel was left where it was.
fn tuned_line(c: &Capabilities, coop: bool) -> String {
    if c.unusable.is_some() {
        return "-".into();
    }
    let t = tuned_kernels(c);
    let (choice, why) = if coop { (t.coop, t.coop_why) } else { (t.tiled, t.tiled_why) };
    match (choice, why) {
        (None, _) if coop && !uses_cooperative_matrices(c) => {
            "the f32 choice (the cooperative-matrix kernel needs 16x16x16 F16->F32, shader-f16, subgroups of 32)".into()
        }
        (None, _) => "not tuned yet (the first matmul on this adapter tunes; `webtensor demo` does)".into(),
        (Some(k), None) if coop => format!("{k} (cooperative matrices)"),
        (Some(k), None) => k,
        (Some(k), Some(why)) => format!("{k}, every faster candidate failed: {why}"),
    }
}

/// One adapter as an aligned block of `label  value` lines.
fn block(title: &str, c: &Capabilities) -> String {
    let subgroups = match (c.subgroups, c.subgroup_size) {
        (false, _) => "no".to_string(),
        (true, (0, 0)) => "yes (sizes unknown)".to_string(),
        (true, (lo, hi)) if lo == hi => format!("yes (size {lo})"),
        (true, (lo, hi)) => format!("yes (sizes {lo}..{hi})"),
    };
    let coop = if c.cooperative_matrix.is_empty() { "none".to_string() } else { c.cooperative_matrix.join(", ") };
    let usable = match &c.unusable {
        None => "yes".to_string(),
        Some(why) => format!("no: {why} (Device::best() passes it over)"),
    };
    let rows: [(&str, String); 17] = [
        ("usable", usable),
        ("backend", c.backend.name().to_string()),
        ("device type", c.device_type.name().to_string()),
        ("driver", if c.driver.is_empty() { "(not reported)".into() } else { c.driver.clone() }),
        ("max storage binding", bytes(c.max_storage_binding_bytes)),
        ("max buffer", bytes(c.max_buffer_bytes)),
        ("workgroup storage", bytes(c.max_workgroup_storage_bytes.into())),
        ("invocations/workgroup", c.max_invocations_per_workgroup.to_string()),
        ("workgroups/dimension", c.max_workgroups_per_dimension.to_string()),
        ("storage offset align", bytes(c.min_storage_offset_alignment.into())),
        ("uniform offset align", bytes(c.min_uniform_offset_alignment.into())),
        ("shader-f16", yes_no(c.shader_f16).into()),
        ("subgroups", subgroups),
        ("cooperative matrix", coop),
        ("dtypes", dtypes(c)),
        ("matmul f32 (tuned)", tuned_line(c, false)),
        ("matmul f16 (tuned)", tuned_line(c, true)),
    ];
    let mut s = format!("{title}\n");
    for (label, value) in &rows {
        s += &format!("  {label:<22} {value}\n");
    }
    s
}

pub fn run(args: &InfoArgs) -> Result<(), CliError> {
    let adapters = Device::adapters();
    let cpu = Device::cpu();
    // `best` can fail only for a bad WEBTENSOR_BACKEND; list the adapters first so that they are still shown.
    if !args.json {
        if adapters.is_empty() {
            outln!("no GPU adapters: wgpu found none on this machine\n");
        }
        for (i, c) in adapters.iter().enumerate() {
            outln!("{}", block(&format!("adapter {i}: {}", c.name), c));
        }
    }
    let best = choose_device(None)?;
    let bc = best.device.capabilities();
    if args.json {
        let doc = InfoJson {
            adapters: adapters.iter().map(CapsJson::from).collect(),
            best: BestJson { chosen_by: &best.how, fell_back_to_cpu: best.fell_back, device: bc.into() },
            cpu: cpu.capabilities().into(),
        };
        let text = serde_json::to_string_pretty(&doc).map_err(|e| CliError::Msg(format!("writing JSON: {e}")))?;
        outln!("{text}");
        return Ok(());
    }
    let what = if best.device.is_cpu() {
        "the CPU backend".to_string()
    } else {
        match adapters.iter().position(|a| a.name == bc.name && a.backend == bc.backend) {
            Some(i) => format!("adapter {i}: {} ({})", bc.name, bc.backend),
            None => format!("{} ({})", bc.name, bc.backend),
        }
    };
    let note = if best.fell_back {
        format!(" — the CPU: {}", crate::cli::device::fallback_reason(&adapters))
    } else {
        String::new()
    };
    outln!("best device:  {what}, chosen by {}{note}", best.how);
    let cc = cpu.capabilities();
    outln!("CPU backend:  {} (dtypes {}; always available)", cc.name, dtypes(cc));
    if std::env::var_os(BACKEND_ENV).is_none() {
        outln!("(set {BACKEND_ENV}=cpu|vulkan|gl|metal|dx12 to force a backend)");
    }
    Ok(())
}
