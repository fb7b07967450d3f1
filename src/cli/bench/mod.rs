//! `webtensor bench`: each benchmark against its peers on this machine, in one run (`matmul`, `generate`,
//! `embed`), with the helpers they share.

mod embed;
mod generate;
mod helper;
mod matmul;
mod peer;
mod profile;
mod report;
mod work;

use crate::cli::error::CliError;

#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Matmul (and with --matvec: mat-vec and copy bandwidth) against numpy and PyTorch, interleaved in one run;
    /// writes markdown, JSON and an SVG plot to --out and prints the table last.
    Matmul(matmul::MatmulArgs),
    /// A language model's prefill and decode speed (llama-bench's pp512 and tg128) against llama.cpp, when the
    /// llama_cpp Python module is importable.
    Generate(generate::GenerateBenchArgs),
    /// A sentence embedder's speed at batch 1 and 32 against sentence-transformers, when importable.
    Embed(embed::EmbedBenchArgs),
}

pub fn run(args: &BenchArgs) -> Result<(), CliError> {
    match &args.what {
        What::Matmul(m) => matmul::run(m),
        What::Generate(g) => generate::run(g),
        What::Embed(e) => embed::run(e),
    }
}
