//! The `webtensor` CLI: argument parsing (clap derive), logging (env_logger, default level warn, `RUST_LOG`
//! respected), device choice, and the error report.
//!
//! Every failure — a [`webtensor::Error`], a bad argument, a failed check — ends as ONE line on stderr,
//! `error: ...`, and a non-zero exit: 1 for a failed command, 2 for bad usage. A panic would be a bug; the
//! panic hook still reports it as one line, without a backtrace.

mod bench;
mod demo;
mod embed;
mod generate;
mod info;
mod inspect;
mod matmul;
mod serve;
mod util;

use clap::{Parser, Subcommand};
use std::fmt;
use std::process::ExitCode;
use webtensor::{BackendKind, Device, BACKEND_ENV};

/// Tensor graphs compiled to WGSL compute pipelines on wgpu, with a CPU backend.
#[derive(Parser)]
#[command(name = "webtensor", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List every GPU adapter (limits, features, dtypes) and the device `Device::best()` picks.
    Info(info::InfoArgs),
    /// Run ggml's seed example, then an NxN f32 matmul checked against the CPU backend, with timings.
    Demo(demo::DemoArgs),
    /// Print a .gguf, .safetensors or .npy file's metadata and tensors (names, shapes, dtypes, bytes).
    Inspect(inspect::InspectArgs),
    /// Multiply two tensors read from .npy or .safetensors files and write the product as .npy.
    Matmul(matmul::MatmulArgs),
    /// Sentence embeddings from a sentence-transformers directory or a BERT GGUF file (JSON, .npy, or texts ranked by
    /// a query).
    Embed(embed::EmbedArgs),
    /// Generate text with a GGUF language model (llama, qwen2, qwen3, phi3, gemma, gemma2, gemma3), streamed to stdout.
    Generate(generate::GenerateArgs),
    /// Chat with a GGUF language model (llama, qwen2, qwen3, phi3, gemma, gemma2, gemma3) (its chat template, the KV cache kept between turns).
    Chat(generate::ChatArgs),
    /// An OpenAI-compatible HTTP server (chat, completions, embeddings) with continuous batching.
    Serve(serve::ServeArgs),
    /// Benchmarks against the peers on this machine (numpy, PyTorch): `webtensor bench matmul --help`.
    Bench(bench::BenchArgs),
}

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

/// `name [backend, type]` of a device, for one-line messages.
pub fn describe(device: &Device) -> String {
    let c = device.capabilities();
    if device.is_cpu() {
        format!("CPU backend ({})", c.name)
    } else {
        format!("{} [{}, {}]", c.name, c.backend, c.device_type)
    }
}

/// Why a command failed. Displayed as one line after `error: `.
#[derive(Debug)]
pub enum CliError {
    /// From the library: file, shape, dtype, device errors.
    Lib(webtensor::Error),
    /// From the CLI itself: a failed check, an argument the library would not explain well.
    Msg(String),
}

impl CliError {
    /// The error naming the file `path` (the model a command loaded), where its text does not already: a prompt
    /// too long, logits or embeddings that are not finite, a KV cache that cannot be allocated.
    pub(crate) fn naming(self, path: &str) -> CliError {
        let m = self.to_string();
        if m.contains(path) {
            self
        } else {
            CliError::Msg(format!("{path}: {m}"))
        }
    }
}

impl From<webtensor::Error> for CliError {
    fn from(e: webtensor::Error) -> CliError {
        CliError::Lib(e)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Lib(e) => write!(f, "{e}"),
            CliError::Msg(m) => f.write_str(m),
        }
    }
}

/// Collapses a message onto one line (a library or clap message could carry newlines).
fn one_line(msg: &str) -> String {
    msg.split('\n').map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Prints `error: msg` on one line of its own, with anything a file could have put in it escaped.
pub(crate) fn report(msg: &str) {
    let msg = util::escape_control(&one_line(msg));
    let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
    if util::MID_LINE.swap(false, std::sync::atomic::Ordering::Relaxed) {
        eprintln!();
    }
    eprintln!("error: {msg}");
}

/// Reports a panic as one line and no backtrace. Reaching it is a bug in webtensor.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        report(&format!("internal error (a bug in webtensor; please report it): {msg}{at}"));
    }));
}

/// What is logged unless RUST_LOG says otherwise: warnings, webtensor's progress lines; not wgpu's and naga's own
/// messages, which adapter probing produces on every machine without that driver (EGL's "failed to load
/// driver") and which webtensor reports as errors of its own where they matter (`RUST_LOG=wgpu_hal=warn` shows
/// them).
const DEFAULT_LOG: &str = "warn,webtensor::progress=info,wgpu_hal=off,wgpu_core=off,naga=off";

/// Mesa's Vulkan and EGL drivers print "error: XDG_RUNTIME_DIR is invalid or not set in the environment" when it
/// is missing (a container, a CI job, `su`): harmless, but it reads as webtensor failing. Without a usable one
/// the CLI points it at a 0700 folder of its own in the temporary directory, before any driver loads (and leaves
/// it unset where that folder exists but is not this user's private one).
#[cfg(all(unix, not(target_os = "macos")))]
fn ensure_runtime_dir() {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else { return };
    let private = |p: &std::path::Path| {
        std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.permissions().mode() & 0o077 == 0)
    };
    if std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| std::path::Path::new(&d).is_dir()) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("webtensor-runtime-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    if private(&dir) {
        // the process has one thread here: nothing reads the environment while it changes
        std::env::set_var("XDG_RUNTIME_DIR", &dir);
    }
}

/// The CLI's entry point: parse, run, report.
pub fn main() -> ExitCode {
    #[cfg(all(unix, not(target_os = "macos")))]
    ensure_runtime_dir();
    install_panic_hook();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(DEFAULT_LOG))
        .format_timestamp(None)
        .init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                let _ = e.print();
                return ExitCode::from(2);
            }
            // clap's message is a paragraph plus usage and tips; keep the paragraph, on one line.
            let text = e.render().to_string();
            let first = text.split("\n\n").next().unwrap_or_default();
            report(&format!("{} (see 'webtensor --help')", one_line(first)));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Info(args) => info::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::Matmul(args) => matmul::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Embed(args) => embed::run(&args),
        Command::Generate(args) => generate::run_generate(&args),
        Command::Chat(args) => generate::run_chat(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Bench(args) => bench::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report(&e.to_string());
            ExitCode::FAILURE
        }
    }
}
