//! `webtensor bench embed --model DIR`: sentences/s of a sentence-transformers model at batch 1 and batch 32
//! (sentences of about 12 words), webtensor and sentence-transformers on PyTorch's CPU (when importable)
//! interleaved round by round, the same thread count. Prints a markdown table: median sentences/s with the
//! min-max spread.

use super::helper::{load_average, median, summary, Helper};
use crate::cli::device::{choose_device, describe};
use crate::cli::error::CliError;
use crate::cli::util::emit;
use serde_json::json;
use std::time::Instant;
use webtensor::models::bert::{EmbedderOptions, SentenceEmbedder};

const SCRIPT: &str = include_str!("../../../scripts/peer_embed.py");

#[derive(clap::Args)]
pub struct EmbedBenchArgs {
    /// A sentence-transformers directory.
    #[arg(long, value_name = "DIR|NAME", value_parser = crate::cli::models::any_path)]
    model: String,
    /// Sentences per measurement.
    #[arg(long, default_value_t = 64)]
    sentences: usize,
    /// Rounds; each runs every test of every library once.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Python with sentence_transformers; `none` to skip the peer.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Device to run on. Without the flag, Device::best() decides and honours WEBTENSOR_BACKEND.
    #[arg(long, value_parser = crate::cli::device::backend_parser())]
    backend: Option<webtensor::BackendKind>,
    /// After the timed rounds, each batch plan's GPU time by kernel (the sentences embedded once more at batch 1
    /// and 32), from timestamp queries around each dispatch (GPU adapters that have them).
    #[arg(long)]
    profile: bool,
}

/// Sentences of about 12 words, varied.
fn sentences(n: usize) -> Vec<String> {
    let subjects = ["The old fisherman", "A small child", "Our new neighbour", "The tired engineer", "My sister"];
    let verbs = ["carefully repaired", "quietly watched", "happily painted", "slowly carried", "proudly showed"];
    let objects = ["the broken wooden boat", "a bright red kite", "the garden fence", "an old leather map"];
    let tails = ["before the storm arrived.", "near the river at dawn.", "for the village festival.", "after lunch."];
    (0..n)
        .map(|i| format!("{} {} {} {}", subjects[i % 5], verbs[(i / 5) % 5], objects[(i / 25) % 4], tails[(i / 3) % 4]))
        .collect()
}

pub fn run(args: &EmbedBenchArgs) -> Result<(), CliError> {
    let chosen = choose_device(args.backend)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut e = SentenceEmbedder::load(&chosen.device, &args.model, EmbedderOptions::default())?;
    let texts = sentences(args.sentences.max(1));
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut peer = Helper::start(&args.python, SCRIPT);
    // on a hardware GPU the peer runs on CUDA where torch has it (on the CPU otherwise, and it says so)
    let caps = chosen.device.capabilities();
    let want = if !chosen.device.is_cpu() && caps.device_type != webtensor::DeviceType::Cpu { "cuda" } else { "cpu" };
    let mut peer_device = "cpu".to_string();
    if let Ok(p) = &mut peer {
        match p.ask(json!({"cmd": "load", "path": args.model, "threads": threads, "device": want})) {
            Ok(r) => peer_device = r["device"].as_str().unwrap_or("cpu").to_string(),
            Err(err) => peer = Err(format!("sentence_transformers could not load the model: {err}")),
        }
    }
    if let Err(why) = &peer {
        eprintln!("sentence-transformers: absent ({why})");
    }
    let load = load_average();
    if load.is_some_and(|l| l > threads as f64) {
        eprintln!("warning: load average {:.2} above {threads} cores: figures are noisy", load.unwrap_or(0.0));
    }
    eprintln!("warming up (compiles every plan once) ...");
    e.embed_batched(&refs, 1)?;
    e.embed_batched(&refs, 32)?;
    let batches = [1usize, 32];
    let mut ours = vec![vec![]; 2];
    let mut theirs = vec![vec![]; 2];
    for round in 0..args.repeats {
        eprintln!("round {}/{}", round + 1, args.repeats);
        for (i, &b) in batches.iter().enumerate() {
            let t = Instant::now();
            e.embed_batched(&refs, b)?;
            ours[i].push(refs.len() as f64 / t.elapsed().as_secs_f64());
            if let Ok(p) = &mut peer {
                let ms =
                    p.ask(json!({"cmd": "embed", "texts": texts, "batch": b})).map_err(CliError::Msg)?["ms"].as_f64();
                theirs[i].push(refs.len() as f64 / (ms.unwrap_or(f64::NAN) / 1e3));
            }
        }
    }
    let mut out = format!(
        "\nbench embed: {} on {}, {threads} threads, {} sentences of ~12 words, {} rounds, load average {:.2}\n\n",
        args.model,
        describe(&chosen.device),
        refs.len(),
        args.repeats,
        load.unwrap_or(f64::NAN)
    );
    out += "| library | batch 1 sentences/s | batch 32 sentences/s |\n|---|---|---|\n";
    out += &format!("| webtensor | {} | {} |\n", summary(&ours[0]), summary(&ours[1]));
    match &peer {
        Ok(p) => {
            let name = format!(
                "{} (torch {}, {peer_device})",
                p.hello["version"].as_str().unwrap_or("?"),
                p.hello["torch"].as_str().unwrap_or("?")
            );
            out += &format!("| sentence-transformers {name} | {} | {} |\n", summary(&theirs[0]), summary(&theirs[1]));
            let r = |i: usize| format!("{:.2}x", median(&ours[i]) / median(&theirs[i]));
            out += &format!("| webtensor / sentence-transformers | {} | {} |\n", r(0), r(1));
        }
        Err(why) => out += &format!("| sentence-transformers | absent: {why} | |\n"),
    }
    out += "\nmedian (min-max) over the rounds\n";
    out += &plans_line(&e);
    if args.profile {
        out += &super::profile::embed_profile_lines(&mut e, &refs)?;
    }
    emit(&out);
    Ok(())
}

/// The embedder's plans (batch x padded length): their dispatches, and a layer's share of them.
fn plans_line(e: &SentenceEmbedder) -> String {
    let layers = e.config.layers.max(1) as f64;
    let plans: Vec<String> = e
        .plan_stats()
        .iter()
        .map(|((b, t), st)| {
            format!("{b} x {t} tokens: {} ({:.1} a layer)", st.dispatches, st.dispatches as f64 / layers)
        })
        .collect();
    format!("webtensor's plans, dispatches by batch x padded length: {}\n", plans.join("; "))
}
