//! Help texts built from the library's own lists, so that a new architecture shows in `--help` with no edit here.

use clap::Command;

/// The architectures `webtensor::models::arch::supported` names, comma-separated.
fn architectures() -> String {
    webtensor::models::arch::supported().map(|(name, _)| name).collect::<Vec<_>>().join(", ")
}

/// `cli` with the language-model commands' help naming the supported architectures.
pub(crate) fn with_architectures(cli: Command) -> Command {
    let archs = architectures();
    let model_help = format!("The model: a GGUF file of a supported architecture ({archs})");
    let with_model = |c: Command| c.mut_arg("model", |a| a.help(model_help.clone()));
    cli.mut_subcommand("generate", |c| {
        with_model(c).about(format!("Generate text with a GGUF language model ({archs}), streamed to stdout"))
    })
    .mut_subcommand("chat", |c| {
        let about =
            format!("Chat with a GGUF language model ({archs}): its chat template, the KV cache kept between turns");
        with_model(c).about(about)
    })
    .mut_subcommand("serve", |c| {
        c.mut_arg("model", |a| a.help(format!("The language model: a GGUF file of a supported architecture ({archs})")))
    })
}
