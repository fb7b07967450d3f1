//! `webtensor bench generate --model FILE.gguf`: llama-bench's pp512 and tg128 (a 512-token prompt in one
//! prefill; then 128 decode steps, one token each, fixed pseudo-random tokens, no sampling), webtensor and
//! llama.cpp (through the `llama_cpp` Python module, when importable) interleaved round by round, the same
//! thread count, with peak resident memory. Prints a markdown table: median tokens/s with the min-max spread.

use super::helper::{load_average, median, summary, Helper};
use crate::cli::device::{choose_device, describe};
use crate::cli::error::CliError;
use crate::cli::util::{emit, SplitMix64};
use serde_json::json;
use std::time::Instant;
use webtensor::models::{LanguageModel, LanguageModelOptions};

const SCRIPT: &str = include_str!("../../../scripts/peer_llama.py");

#[derive(clap::Args)]
pub struct GenerateBenchArgs {
    /// The model: a GGUF language model of an architecture webtensor runs (`webtensor inspect FILE` says).
    #[arg(long, value_name = "FILE.gguf|NAME", value_parser = crate::cli::models::gguf_path)]
    model: String,
    /// Prompt tokens of the prefill test (llama-bench's -p).
    #[arg(long, default_value_t = 512)]
    prompt_tokens: usize,
    /// Tokens of the decode test (llama-bench's -n).
    #[arg(long, default_value_t = 128)]
    gen_tokens: usize,
    /// Rounds; each runs every test of every library once.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Python with llama_cpp (`pip install llama-cpp-python`); `none` to skip the peer.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Device to run on. Without the flag, Device::best() decides and honours WEBTENSOR_BACKEND.
    #[arg(long, value_parser = crate::cli::device::backend_parser())]
    backend: Option<webtensor::BackendKind>,
    /// KV-cache lengths L at which a decode step's cost is timed (a prefill fills the cache to L, then
    /// 16 steps are timed one by one; their median), to show how a step's cost grows with the context.
    #[arg(long, value_delimiter = ',', default_value = "16,2048")]
    decode_at: Vec<usize>,
    /// Compile webtensor's plans without fusion (one dispatch per op, as the model's graph is built), to measure
    /// what fusion gains on this device.
    #[arg(long)]
    no_fusion: bool,
    /// After the timed runs, the prefill's and a decode step's (at each --decode-at length) GPU time by kernel,
    /// from timestamp queries around each dispatch (GPU adapters that have them).
    #[arg(long)]
    profile: bool,
}

/// Decode steps timed at each of `--decode-at`'s KV lengths.
const DEPTH_STEPS: usize = 16;

fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = s.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The decode step plan's dispatches and the weight bytes it reads per token (empty before a decode step ran).
fn decode_step_line(model: &LanguageModel, gpu: bool) -> String {
    let Some((_, st)) = model.plan_stats().into_iter().find(|(t, _)| *t == 1) else { return String::new() };
    let layers = model.config.n_layers.max(1);
    let mut line = format!(
        "webtensor's decode step: {} dispatches ({:.1} a layer); {}\n",
        st.dispatches,
        st.dispatches as f64 / layers as f64,
        crate::cli::generate::weights_read(&st, 1)
    );
    // the CPU backend's host time is its whole run
    if let Some((host, ahead)) = model.decode_host_us().filter(|_| gpu && st.dispatches > 0) {
        let d = st.dispatches as f64;
        line += &format!(
            "its host time in the last step: {host:.0} µs until submitted ({:.2} µs a dispatch), {ahead:.0} µs \
             encoding the next step ahead, while the device ran ({:.2} µs a dispatch)\n",
            host / d,
            ahead / d
        );
    }
    line
}

/// Milliseconds of a decode step with each of `lengths` tokens in the KV cache, webtensor's and the peer's
/// (NaN where it is absent): the median of [`DEPTH_STEPS`] steps timed one by one after a prefill of that many
/// tokens (so a step that crosses an attention split into a new one does not decide the figure).
fn step_ms_at(
    model: &mut LanguageModel,
    peer: &mut Result<Helper, String>,
    lengths: &[usize],
    tokens: &[u32],
) -> Result<Vec<(usize, f64, f64)>, CliError> {
    let mut out = Vec::new();
    for &l in lengths {
        model.reset();
        if l > 0 {
            model.logits(&tokens[..l])?;
        }
        let mut ms = Vec::with_capacity(DEPTH_STEPS);
        for &tok in &tokens[l..l + DEPTH_STEPS] {
            let t = Instant::now();
            model.step(tok)?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let theirs = match peer {
            Ok(p) => {
                let req = json!({"cmd": "depth", "tokens": tokens, "length": l, "steps": DEPTH_STEPS});
                let r = p.ask(req).map_err(CliError::Msg)?;
                let v: Vec<f64> = r["ms"].as_array().map_or(vec![], |a| a.iter().filter_map(|x| x.as_f64()).collect());
                median(&v)
            }
            Err(_) => f64::NAN,
        };
        out.push((l, median(&ms), theirs));
    }
    Ok(out)
}

/// `webtensor's decode step by KV length (…): L = 16: 4.10 ms, L = 2048: 5.02 ms (1.22x L = 16)`, and the
/// peer's line where it ran.
fn depth_lines(at: &[(usize, f64, f64)]) -> String {
    let Some(&(l0, ours0, theirs0)) = at.first() else { return String::new() };
    let line = |who: &str, first: f64, pick: &dyn Fn(&(usize, f64, f64)) -> f64| {
        let cells: Vec<String> = at
            .iter()
            .map(|a| {
                let (l, ms) = (a.0, pick(a));
                let vs = if l == l0 { String::new() } else { format!(" ({:.2}x L = {l0})", ms / first) };
                format!("L = {l}: {ms:.2} ms{vs}")
            })
            .collect();
        format!("{who} decode step by KV length (median of {DEPTH_STEPS} steps): {}\n", cells.join(", "))
    };
    let mut out = line("webtensor's", ours0, &|a| a.1);
    if theirs0.is_finite() {
        out += &line("llama.cpp's", theirs0, &|a| a.2);
    }
    out
}

/// The markdown table of the rounds' tokens/s (`[pp, tg, llama.cpp's pp, llama.cpp's tg]`) and each side's peak
/// resident memory (MiB).
fn table(
    args: &GenerateBenchArgs,
    peer: &Result<Helper, String>,
    [pp, tg, lpp, ltg]: [&[f64]; 4],
    (ours_rss, peer_rss): (Option<f64>, Option<f64>),
) -> String {
    let mut out = String::new();
    let rss = |m: Option<f64>| m.map_or("—".into(), |m| format!("{m:.0}"));
    let ratio =
        |a: &[f64], b: &[f64]| if b.is_empty() { "—".into() } else { format!("{:.2}x", median(a) / median(b)) };
    out += &format!(
        "| library | pp{} tokens/s | tg{} tokens/s | peak RSS MiB |\n|---|---|---|---|\n",
        args.prompt_tokens, args.gen_tokens
    );
    let ours = if args.no_fusion { "webtensor, unfused (--no-fusion)" } else { "webtensor" };
    out += &format!("| {ours} | {} | {} | {} |\n", summary(pp), summary(tg), rss(ours_rss));
    match &peer {
        Ok(p) => {
            out += &format!(
                "| llama.cpp {} (llama-cpp-python) | {} | {} | {} |\n",
                p.hello["version"].as_str().unwrap_or("?"),
                summary(lpp),
                summary(ltg),
                rss(peer_rss)
            )
        }
        Err(why) => out += &format!("| llama.cpp | absent: {why} | | |\n"),
    }
    out += &format!("| webtensor / llama.cpp | {} | {} | |\n", ratio(pp, lpp), ratio(tg, ltg));
    out += "\nmedian (min-max) over the rounds; peak RSS is each process's VmHWM (llama.cpp's includes its Python)\n";
    out
}

/// Refuses a `--decode-at` length past the positions the model in `path` was trained for: a KV cache sized past
/// them would only time positions it was never meant to see (and a mistyped length would allocate it all first).
fn check_depth(path: &str, deepest: usize) -> Result<(), CliError> {
    let file = webtensor::gguf::GgufFile::open(path)?;
    let trained = webtensor::models::decoder::DecoderConfig::from_gguf(&file)?.n_ctx_train;
    if deepest + DEPTH_STEPS > trained {
        return Err(CliError::Msg(format!(
            "--decode-at {deepest}: a step there needs {} positions, past the {trained} the model was trained for ({path})",
            deepest + DEPTH_STEPS
        )));
    }
    Ok(())
}

/// llama.cpp (through llama-cpp-python) with the model loaded, or why not (said on stderr).
fn load_peer(args: &GenerateBenchArgs, n_ctx: usize, threads: usize) -> Result<Helper, String> {
    let mut peer = Helper::start(&args.python, SCRIPT);
    if let Ok(p) = &mut peer {
        let req = json!({"cmd": "load", "path": args.model, "n_ctx": n_ctx, "threads": threads, "batch": 512});
        if let Err(e) = p.ask(req) {
            peer = Err(format!("llama_cpp could not load the model: {e}"));
        }
    }
    if let Err(why) = &peer {
        eprintln!("llama.cpp: absent ({why})");
    }
    peer
}

/// `--repeats` rounds of pp (`prompt`) and tg (`gen`), ours then the peer's in each round: tokens/s of each,
/// as [ours pp, ours tg, peer pp, peer tg].
fn rounds(
    args: &GenerateBenchArgs,
    model: &mut LanguageModel,
    peer: &mut Result<Helper, String>,
    (prompt, gen): (&[u32], &[u32]),
) -> Result<[Vec<f64>; 4], CliError> {
    let (mut pp, mut tg, mut lpp, mut ltg) = (vec![], vec![], vec![], vec![]);
    let peer_ms = |p: &mut Helper, cmd: &str, tokens: &[u32]| -> Result<f64, CliError> {
        Ok(p.ask(json!({"cmd": cmd, "tokens": tokens})).map_err(CliError::Msg)?["ms"].as_f64().unwrap_or(f64::NAN))
    };
    for round in 0..args.repeats {
        eprintln!("round {}/{}", round + 1, args.repeats);
        model.reset();
        let t = Instant::now();
        model.logits(prompt)?;
        pp.push(args.prompt_tokens as f64 / t.elapsed().as_secs_f64());
        if let Ok(p) = peer.as_mut() {
            lpp.push(args.prompt_tokens as f64 / (peer_ms(p, "pp", prompt)? / 1e3));
        }
        model.reset();
        model.step(gen[0])?;
        let t = Instant::now();
        for &tok in &gen[1..] {
            model.step(tok)?;
        }
        tg.push(args.gen_tokens as f64 / t.elapsed().as_secs_f64());
        if let Ok(p) = peer.as_mut() {
            ltg.push(args.gen_tokens as f64 / (peer_ms(p, "tg", gen)? / 1e3));
        }
    }
    Ok([pp, tg, lpp, ltg])
}

pub fn run(args: &GenerateBenchArgs) -> Result<(), CliError> {
    let chosen = choose_device(args.backend)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let deepest = args.decode_at.iter().copied().max().unwrap_or(0);
    let n_ctx = (args.prompt_tokens + args.gen_tokens + 8).max(deepest + DEPTH_STEPS + 8);
    check_depth(&args.model, deepest)?;
    let mut model = LanguageModel::load(
        &chosen.device,
        &args.model,
        LanguageModelOptions {
            context: n_ctx,
            max_chunk: 512,
            compile: webtensor::CompileOptions { no_fusion: args.no_fusion, ..Default::default() },
            ..Default::default()
        },
    )?;
    let mut rng = SplitMix64::new(42);
    let vocab = model.config.n_vocab as u64;
    let mut tokens = |n: usize| -> Vec<u32> { (0..n).map(|_| (rng.next_u64() % vocab) as u32).collect() };
    let (prompt, gen, deep) = (tokens(args.prompt_tokens), tokens(args.gen_tokens + 1), tokens(deepest + DEPTH_STEPS));
    // DEPTH_STEPS covers a profile's steps at the deepest length too
    const _: () = assert!(DEPTH_STEPS >= super::profile::PROFILE_STEPS);
    let mut peer = load_peer(args, n_ctx, threads);
    let load = load_average();
    if load.is_some_and(|l| l > threads as f64) {
        eprintln!(
            "warning: load average {:.2} above {threads} cores: llama.cpp's spinning threads slow down most",
            load.unwrap_or(0.0)
        );
    }
    eprintln!("warming up (compiles every plan once) ...");
    model.reset();
    model.logits(&prompt)?;
    let [pp, tg, lpp, ltg] = rounds(args, &mut model, &mut peer, (&prompt, &gen))?;
    let ours_rss = peak_rss_mib();
    let peer_rss = peer
        .as_mut()
        .ok()
        .and_then(|p| p.ask(json!({"cmd": "rss"})).ok())
        .and_then(|r| r["kib"].as_f64())
        .map(|k| k / 1024.0);
    let host_line = decode_step_line(&model, !chosen.device.is_cpu());
    eprintln!("timing decode steps at KV lengths {:?} ...", args.decode_at);
    let depth = depth_lines(&step_ms_at(&mut model, &mut peer, &args.decode_at, &deep)?);
    let profile = if args.profile {
        super::profile::profile_lines(&mut model, &prompt, &args.decode_at, &deep)?
    } else {
        String::new()
    };
    let mut out = String::new();
    out += &format!(
        "\nbench generate: {} on {}, {threads} threads, {} rounds, load average {:.2} at start\n\n",
        args.model,
        describe(&chosen.device),
        args.repeats,
        load.unwrap_or(f64::NAN)
    );
    out += &table(args, &peer, [&pp, &tg, &lpp, &ltg], (ours_rss, peer_rss));
    out += &host_line;
    out += &depth;
    out += &profile;
    emit(&out);
    Ok(())
}
