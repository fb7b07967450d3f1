//! The `webtensor` CLI's dispatcher: the commands (clap derive), parsed, set up (`setup`: logging with
//! env_logger, default level warn, `RUST_LOG` respected) and run; each command's code in its own module,
//! choosing the device in `device`, failing through `error`.
//!
//! Every failure — a [`webtensor::Error`], a bad argument, a failed check — ends as ONE line on stderr,
//! `error: ...`, and a non-zero exit: 1 for a failed command, 2 for bad usage. A panic would be a bug; the
//! panic hook still reports it as one line, without a backtrace.

mod bench;
mod demo;
mod device;
mod embed;
mod error;
mod generate;
mod help;
mod info;
mod inspect;
mod matmul;
mod models;
mod serve;
mod setup;
mod util;

use clap::{FromArgMatches, Parser, Subcommand};
use error::{one_line, report};
use std::process::ExitCode;

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
    /// Generate text with a GGUF language model, streamed to stdout.
    Generate(generate::GenerateArgs),
    /// Chat with a GGUF language model (its chat template, the KV cache kept between turns).
    Chat(generate::ChatArgs),
    /// An OpenAI-compatible HTTP server (chat, completions, embeddings) with continuous batching.
    Serve(serve::ServeArgs),
    /// The models installed Python packages ship (GGUF files, sentence-transformers directories), which `--model
    /// NAME` finds, as `ollama list` lists its models.
    Models(models::ModelsArgs),
    /// Benchmarks against the peers on this machine (numpy, PyTorch): `webtensor bench matmul --help`.
    Bench(bench::BenchArgs),
}

/// The CLI's entry point: parse, run, report.
pub fn main() -> ExitCode {
    #[cfg(all(unix, not(target_os = "macos")))]
    setup::ensure_runtime_dir();
    setup::install_panic_hook();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(setup::DEFAULT_LOG))
        .format_timestamp(None)
        .init();
    let parsed = help::with_architectures(<Cli as clap::CommandFactory>::command())
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
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
        Command::Models(args) => models::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report(&e.to_string());
            ExitCode::FAILURE
        }
    }
}
