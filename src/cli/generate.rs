//! `webtensor generate` and `webtensor chat`: text from a llama-architecture GGUF model, streamed to stdout,
//! timings on stderr.

use super::util::emit;
use super::{choose_device, describe, CliError};
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use webtensor::models::{GenerateOptions, Generation, Llama, LlamaOptions, Message, SamplingOptions, StopReason};

/// What both commands share: the model, the device, the sampler.
#[derive(clap::Args)]
pub struct ModelArgs {
    /// The model: a GGUF file of the llama architecture (SmolLM2, TinyLlama, Llama 3.2, ...).
    #[arg(long, value_name = "FILE.gguf")]
    model: String,
    /// Most tokens to generate (per answer, for chat).
    #[arg(short = 'n', long, default_value_t = 128)]
    max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Keep the K most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Keep the most likely tokens up to this total probability.
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Drop tokens less likely than this fraction of the most likely one.
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    /// Penalize tokens among the last 64 (1: off).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Seed of the sampler: the same seed gives the same text.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Stop when the text contains this (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// KV-cache positions (prompt + output); 0: the model's context, at most 4096.
    #[arg(long, default_value_t = 0)]
    ctx: usize,
    /// Device to run on. Without the flag, Device::best() decides and honours WEBTENSOR_BACKEND.
    #[arg(long, value_parser = super::backend_parser())]
    backend: Option<webtensor::BackendKind>,
}

#[derive(clap::Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt.
    #[arg(long)]
    prompt: String,
    /// Apply the model's chat template: the prompt is a user message.
    #[arg(long)]
    chat: bool,
    /// Print one JSON object (ids, text, timings, device) instead of streaming the text.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The system message (the template's default when absent).
    #[arg(long)]
    system: Option<String>,
}

impl ModelArgs {
    fn options(&self) -> GenerateOptions {
        let sampling = SamplingOptions {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            seed: self.seed,
            ..Default::default()
        };
        GenerateOptions { max_tokens: self.max_tokens, sampling, stop: self.stop.clone() }
    }

    fn load(&self) -> Result<(Llama, String), CliError> {
        // the file first: a bad file or another architecture fails before any device is opened
        let file = webtensor::gguf::GgufFile::open(&self.model)?;
        webtensor::models::llama::LlamaConfig::from_gguf(&file)?;
        let chosen = choose_device(self.backend)?;
        let t = std::time::Instant::now();
        eprintln!("loading {} on {} ...", self.model, describe(&chosen.device));
        let options = LlamaOptions { context: self.ctx, ..Default::default() };
        let model = Llama::from_gguf(&chosen.device, &file, options)?;
        let c = &model.config;
        eprintln!(
            "loaded in {:.0} ms: {} layers, width {}, {} heads ({} KV), vocabulary {}, context {} positions",
            t.elapsed().as_secs_f64() * 1e3,
            c.n_layers,
            c.n_embd,
            c.n_heads,
            c.n_kv_heads,
            c.n_vocab,
            model.context()
        );
        Ok((model, describe(&chosen.device)))
    }
}

fn timings(g: &Generation) -> String {
    format!(
        "prefill {} tokens in {:.1} ms ({:.1} tokens/s), decode {} tokens in {:.1} ms ({:.1} tokens/s)",
        g.prefill_tokens,
        g.prefill_ms,
        g.prefill_tokens_per_s(),
        g.decode_steps,
        g.decode_ms,
        g.decode_tokens_per_s()
    )
}

fn stop_note(g: &Generation, context: usize) -> Option<String> {
    (g.stop == StopReason::ContextFull).then(|| format!("stopped: the context of {context} positions is full"))
}

pub fn run_generate(args: &GenerateArgs) -> Result<(), CliError> {
    let (mut model, device) = args.model.load()?;
    let prompt = if args.chat {
        model.chat_prompt(&[Message::new("user", &args.prompt)])?
    } else {
        model.tokenizer.encode(&args.prompt)?
    };
    let json = args.json;
    let out = model.generate(&prompt, &args.model.options(), |piece, _| {
        if !json {
            emit(piece);
        }
        true
    })?;
    if json {
        let doc = serde_json::json!({
            "prompt_ids": out.prompt, "ids": out.tokens, "text": out.text, "stop": format!("{:?}", out.stop),
            "prefill_tokens": out.prefill_tokens, "prefill_ms": out.prefill_ms,
            "prefill_tokens_per_s": out.prefill_tokens_per_s(), "decode_steps": out.decode_steps,
            "decode_ms": out.decode_ms, "decode_tokens_per_s": out.decode_tokens_per_s(), "device": device,
        });
        emit(&format!("{doc}\n"));
    } else {
        emit("\n");
    }
    if let Some(n) = stop_note(&out, model.context()) {
        eprintln!("{n}");
    }
    eprintln!("{}", timings(&out));
    Ok(())
}

/// Set by Ctrl-C; the running answer stops at its next token.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

pub fn run_chat(args: &ChatArgs) -> Result<(), CliError> {
    let (mut model, _) = args.model.load()?;
    if model.chat_template().is_none() {
        return Err(CliError::Msg(format!("{} has no chat template (tokenizer.chat_template)", args.model.model)));
    }
    ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::SeqCst))
        .map_err(|e| CliError::Msg(format!("cannot catch Ctrl-C: {e}")))?;
    let system: Vec<Message> = args.system.iter().map(|s| Message::new("system", s)).collect();
    let mut messages = system.clone();
    eprintln!("chat: type a message; /reset starts over, Ctrl-D ends, Ctrl-C stops an answer");
    let stdin = std::io::stdin();
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).map_err(|e| CliError::Msg(format!("reading stdin: {e}")))? == 0 {
            eprintln!();
            return Ok(());
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/reset" {
            messages = system.clone();
            model.reset();
            eprintln!("(conversation reset)");
            continue;
        }
        messages.push(Message::new("user", line));
        let prompt = model.chat_prompt(&messages)?;
        if prompt.len() >= model.context() {
            eprintln!("the conversation has {} tokens, the context {}: /reset to go on", prompt.len(), model.context());
            messages.pop();
            continue;
        }
        INTERRUPTED.store(false, Ordering::SeqCst);
        let out = model.generate(&prompt, &args.model.options(), |piece, _| {
            emit(piece);
            !INTERRUPTED.load(Ordering::SeqCst)
        })?;
        emit("\n");
        if out.stop == StopReason::Cancelled {
            eprintln!("(stopped)");
        }
        if let Some(n) = stop_note(&out, model.context()) {
            eprintln!("{n}");
        }
        eprintln!("[{}]", timings(&out));
        messages.push(Message::new("assistant", &out.text));
    }
}
