//! `webtensor generate` and `webtensor chat`: text from a GGUF language model of any supported architecture, streamed to stdout,
//! timings on stderr.

use super::device::{choose_device, describe};
use super::error::CliError;
use super::util::{emit, escape_control};
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use webtensor::models::reasoning::{Part, ReasoningFormat, ReasoningSplitter};
use webtensor::models::{
    GenerateOptions, Generation, LanguageModel, LanguageModelOptions, Message, SamplingOptions, StopReason,
};

/// What both commands share: the model, the device, the sampler.
#[derive(clap::Args)]
pub struct ModelArgs {
    /// The model: a GGUF file of a supported architecture.
    #[arg(long, value_name = "FILE.gguf|NAME", value_parser = super::models::gguf_path)]
    model: String,
    /// Most tokens to generate (per answer, for chat). Default: until the model ends its answer or the context
    /// (--ctx) is full, as llama-cli's conversation mode and Ollama run.
    #[arg(short = 'n', long)]
    max_tokens: Option<usize>,
    /// Sampling temperature; 0 is greedy. Default: greedy for plain generation; for chat (`chat`, `--chat`) 0.7
    /// with the other chat defaults (top-k 40, top-p 0.9, min-p 0.05, repetition penalty 1.1, as Ollama's).
    #[arg(long, allow_negative_numbers = true)]
    temperature: Option<f32>,
    /// Keep the K most likely tokens (0: all).
    #[arg(long)]
    top_k: Option<usize>,
    /// Keep the most likely tokens up to this total probability.
    #[arg(long, allow_negative_numbers = true)]
    top_p: Option<f32>,
    /// Drop tokens less likely than this fraction of the most likely one.
    #[arg(long, allow_negative_numbers = true)]
    min_p: Option<f32>,
    /// Penalize tokens among the last 64 (1: off).
    #[arg(long, allow_negative_numbers = true)]
    repeat_penalty: Option<f32>,
    /// Seed of the sampler: the same seed gives the same text (default: a new one each run, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Stop when the text contains this (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// KV-cache positions (prompt + output); 0: the model's context, at most 4096.
    #[arg(long, default_value_t = 0)]
    ctx: usize,
    /// Device to run on. Without the flag, Device::best() decides and honours WEBTENSOR_BACKEND.
    #[arg(long, value_parser = crate::cli::device::backend_parser())]
    backend: Option<webtensor::BackendKind>,
    /// With a chat template: also print the model's reasoning (a thinking model's `<think>` block, gpt-oss's
    /// analysis channel) on stderr, before its answer; by default only the answer is printed.
    #[arg(long)]
    reasoning: bool,
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
    /// Also print each compiled step plan's statistics (the decode step's is the 1-token plan): dispatches, per
    /// layer, pipelines, memory and how many of its steps each kernel runs.
    #[arg(long)]
    stats: bool,
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
    /// The seed: `--seed`, else one from the clock (said with the settings, so the answer can be repeated).
    fn seed(&self) -> u64 {
        self.seed.unwrap_or_else(|| {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            t.as_nanos() as u64 % 1_000_000
        })
    }

    /// The options: `base` (the chat defaults, or greedy decoding) with every flag given taking precedence.
    fn options(&self, base: SamplingOptions) -> GenerateOptions {
        let sampling = SamplingOptions {
            temperature: self.temperature.unwrap_or(base.temperature),
            top_k: self.top_k.unwrap_or(base.top_k),
            top_p: self.top_p.unwrap_or(base.top_p),
            min_p: self.min_p.unwrap_or(base.min_p),
            repetition_penalty: self.repeat_penalty.unwrap_or(base.repetition_penalty),
            ..base
        };
        let max_tokens = self.max_tokens.unwrap_or(usize::MAX);
        GenerateOptions { max_tokens, sampling, stop: self.stop.clone(), ignore_eos: false }
    }

    /// The options, checked: a value out of range is an error naming the flag and its range.
    fn checked_options(&self, base: SamplingOptions) -> Result<GenerateOptions, CliError> {
        let options = self.options(base);
        options.validate().map_err(|e| {
            let reason = match e {
                webtensor::Error::InvalidArgument { reason, .. } => reason,
                e => return CliError::Lib(e),
            };
            let flags = [
                ("temperature", "--temperature"),
                ("top_p", "--top-p"),
                ("min_p", "--min-p"),
                ("repetition_penalty", "--repeat-penalty"),
                ("a stop string", "--stop"),
            ];
            let named = flags.iter().find_map(|(field, flag)| Some(format!("{flag}{}", reason.strip_prefix(field)?)));
            CliError::Msg(named.unwrap_or(reason))
        })?;
        Ok(options)
    }

    fn load(&self) -> Result<(LanguageModel, String), CliError> {
        // the file first: a bad file or another architecture fails before any device is opened
        let file = webtensor::gguf::GgufFile::open(&self.model)?;
        webtensor::models::decoder::DecoderConfig::from_gguf(&file)?;
        let chosen = choose_device(self.backend)?;
        let t = std::time::Instant::now();
        eprintln!("loading {} on {} ...", self.model, describe(&chosen.device));
        let options = LanguageModelOptions { context: self.ctx, ..Default::default() };
        let model = LanguageModel::from_gguf(&chosen.device, &file, options)
            .map_err(|e| CliError::from(e).naming(&self.model))?;
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

/// Why generation stopped, as the page says it: "stopped: max tokens (-n 128)".
fn stop_note(g: &Generation, context: usize, max_tokens: usize) -> String {
    let why = match g.stop {
        StopReason::EndOfGeneration => "end of the answer (the model's end-of-generation token)".to_string(),
        StopReason::MaxTokens => format!("max tokens (-n {max_tokens})"),
        StopReason::StopString => "a stop string (--stop)".to_string(),
        StopReason::ContextFull => format!("the context of {context} positions is full (--ctx)"),
        StopReason::Cancelled => "interrupted".to_string(),
    };
    format!("stopped: {why}")
}

/// The sampler settings of a run: the flags over the defaults (`chat`: the model's chat defaults, else greedy),
/// with one line saying them, where the model file's recommendations came in and which of them were unusable.
fn sampling_for(model: &LanguageModel, args: &ModelArgs, chat: bool, seed: u64) -> Result<GenerateOptions, CliError> {
    let rec = model.recommended_sampling();
    for bad in &rec.ignored {
        log::warn!("the model file's {} is out of range: ignored", escape_control(bad));
    }
    let base = if chat { model.chat_sampling(seed) } else { SamplingOptions { seed, ..Default::default() } };
    let options = args.checked_options(base)?;
    let from_file =
        if chat && !rec.is_empty() { format!("; the model file recommends {}", rec.describe()) } else { String::new() };
    if !options.sampling.is_greedy() {
        eprintln!("sampling: {} (--seed {} repeats it{from_file})", options.sampling.describe(), options.sampling.seed);
    }
    Ok(options)
}

pub fn run_generate(args: &GenerateArgs) -> Result<(), CliError> {
    let seed = args.model.seed();
    // the flags are checked before the file is read
    let generic = if args.chat { SamplingOptions::chat(seed) } else { SamplingOptions { seed, ..Default::default() } };
    args.model.checked_options(generic)?;
    let (mut model, device) = args.model.load()?;
    let options = sampling_for(&model, &args.model, args.chat, seed)?;
    let file = &args.model.model;
    let (prompt, splitter) = if args.chat {
        let turn =
            model.chat_turn(&[Message::new("user", &args.prompt)]).map_err(|e| CliError::from(e).naming(file))?;
        (turn.ids, turn.reasoning)
    } else {
        let ids = model.tokenizer.encode_within(&args.prompt, model.context());
        (ids.map_err(|e| CliError::from(e).naming(file))?, ReasoningSplitter::new(ReasoningFormat::None, ""))
    };
    let json = args.json;
    let mut printer = PartPrinter::new(splitter.clone(), args.model.reasoning);
    let out = model
        .generate(&prompt, &options, |piece, _| {
            if !json {
                printer.push(piece);
            }
            true
        })
        .map_err(|e| CliError::from(e).naming(file))?;
    printer.finish();
    if json {
        let (reasoning, answer) = splitter.split(&out.text);
        let doc = serde_json::json!({
            "prompt_ids": out.prompt, "ids": out.tokens, "text": out.text, "answer": answer, "reasoning": reasoning,
            "stop": format!("{:?}", out.stop),
            "prefill_tokens": out.prefill_tokens, "prefill_ms": out.prefill_ms,
            "prefill_tokens_per_s": out.prefill_tokens_per_s(), "decode_steps": out.decode_steps,
            "decode_ms": out.decode_ms, "decode_tokens_per_s": out.decode_tokens_per_s(), "device": device,
            "sampling": options.sampling.describe(),
        });
        emit(&format!("{doc}\n"));
    } else {
        emit("\n");
    }
    eprintln!("{}", stop_note(&out, model.context(), options.max_tokens));
    eprintln!("{}", timings(&out));
    if args.stats {
        plan_report(&model).iter().for_each(|line| eprintln!("{line}"));
    }
    Ok(())
}

/// One line per compiled step plan: its dispatches (per layer), pipelines and memory, and its steps by kernel.
fn plan_report(model: &LanguageModel) -> Vec<String> {
    let layers = model.config.n_layers.max(1);
    model
        .plan_stats()
        .into_iter()
        .map(|(t, s)| {
            let mut counts: Vec<(String, usize)> = Vec::new();
            for k in &s.kernels {
                match counts.iter_mut().find(|(name, _)| name == k) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((k.clone(), 1)),
                }
            }
            counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let kernels: Vec<String> = counts.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
            let what = if t == 1 { "decode step" } else { "prefill chunk" };
            format!(
                "plan of {t} token(s) ({what}): {} dispatches ({:.1} a layer), {} pipelines, {:.1} MiB; {}; steps: {}",
                s.dispatches,
                s.dispatches as f64 / layers as f64,
                s.pipelines,
                s.memory_bytes as f64 / (1u64 << 20) as f64,
                weights_read(&s, t),
                kernels.join(", ")
            )
        })
        .collect()
}

/// The weight bytes a run of a plan of `t` tokens reads, per token, against the weights it uses (1.00x: each
/// weight read once a step, the ideal of a decode step).
pub(crate) fn weights_read(s: &webtensor::PlanStats, t: usize) -> String {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let per_token = s.resident_read_bytes as f64 / t.max(1) as f64;
    format!(
        "weights read {:.1} MiB a token of {:.1} MiB ({:.2}x a step)",
        per_token / (1u64 << 20) as f64,
        mib(s.resident_bytes),
        s.resident_read_bytes as f64 / s.resident_bytes.max(1) as f64
    )
}

/// Set by Ctrl-C; the running answer stops at its next token.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

pub fn run_chat(args: &ChatArgs) -> Result<(), CliError> {
    let seed = args.model.seed();
    args.model.checked_options(SamplingOptions::chat(seed))?;
    let (mut model, _) = args.model.load()?;
    if let Some(why) = model.chat_template_error() {
        return Err(CliError::Msg(format!("{why}; plain generation (webtensor generate without --chat) works")));
    }
    ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::SeqCst))
        .map_err(|e| CliError::Msg(format!("cannot catch Ctrl-C: {e}")))?;
    let system: Vec<Message> = args.system.iter().map(|s| Message::new("system", s)).collect();
    let mut messages = system.clone();
    eprintln!("chat: type a message; /reset starts over, Ctrl-D ends, Ctrl-C stops an answer");
    let options = sampling_for(&model, &args.model, true, seed)?;
    let stdin = std::io::stdin();
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stdin());
    // the exit status is the last turn's, as a shell's is its last command's
    let mut last_failed = false;
    loop {
        eprint!("> ");
        super::util::MID_LINE.store(true, Ordering::Relaxed);
        let mut line = String::new();
        let read = stdin.lock().read_line(&mut line).map_err(|e| CliError::Msg(format!("reading stdin: {e}")))?;
        // a terminal echoes the user's Enter; piped input leaves the prompt's line open
        super::util::MID_LINE.store(!interactive || read == 0, Ordering::Relaxed);
        if read == 0 {
            eprintln!();
            return match last_failed {
                true => Err(CliError::Msg("the conversation's last turn failed".into())),
                false => Ok(()),
            };
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
        last_failed = false;
        match answer(&mut model, &messages, &options, args.model.reasoning) {
            Ok(text) => messages.push(Message::new("assistant", &text)),
            Err(e) => {
                // one turn failed (a template that cannot render this conversation, a device error): said on a
                // line of its own, and the conversation goes on without that message
                super::error::report(&e.naming(&args.model.model).to_string());
                messages.pop();
                last_failed = true;
            }
        }
    }
}

/// One chat turn: the model's answer to `messages`, streamed (with its reasoning on stderr where
/// `show_reasoning`); the answer's text.
fn answer(
    model: &mut LanguageModel,
    messages: &[Message],
    options: &GenerateOptions,
    show_reasoning: bool,
) -> Result<String, CliError> {
    let turn = model.chat_turn(messages)?;
    if turn.ids.len() >= model.context() {
        let (n, c) = (turn.ids.len(), model.context());
        return Err(CliError::Msg(format!("the conversation has {n} tokens, the context {c}: /reset to go on")));
    }
    INTERRUPTED.store(false, Ordering::SeqCst);
    let mut printer = PartPrinter::new(turn.reasoning, show_reasoning);
    let out = model.generate(&turn.ids, options, |piece, _| {
        // a token that arrives after Ctrl-C is not printed: the answer stops where the user stopped it
        if INTERRUPTED.load(Ordering::SeqCst) {
            return false;
        }
        printer.push(piece);
        true
    })?;
    let answer = printer.finish();
    emit("\n");
    eprintln!("[{}; {}]", stop_note(&out, model.context(), options.max_tokens), timings(&out));
    Ok(answer)
}

/// Prints a chat's output as it streams: the answer on stdout, the reasoning on stderr where asked (labelled),
/// keeping the answer's text for the conversation's history.
struct PartPrinter {
    splitter: ReasoningSplitter,
    show_reasoning: bool,
    /// Reasoning was printed and its line not yet ended.
    thinking: bool,
    answer: String,
}

impl PartPrinter {
    fn new(splitter: ReasoningSplitter, show_reasoning: bool) -> PartPrinter {
        PartPrinter { splitter, show_reasoning, thinking: false, answer: String::new() }
    }

    fn push(&mut self, piece: &str) {
        let parts = self.splitter.push(piece);
        self.print(parts);
    }

    /// Prints what was held back; the answer's whole text.
    fn finish(&mut self) -> String {
        let parts = self.splitter.finish();
        self.print(parts);
        self.end_thinking();
        std::mem::take(&mut self.answer)
    }

    fn print(&mut self, parts: Vec<Part>) {
        for part in parts {
            match part {
                Part::Reasoning(r) if self.show_reasoning => {
                    if !self.thinking {
                        eprint!("(reasoning) ");
                        self.thinking = true;
                    }
                    eprint!("{r}");
                }
                Part::Reasoning(_) => {}
                Part::Answer(a) => {
                    self.end_thinking();
                    emit(&a);
                    self.answer.push_str(&a);
                }
            }
        }
    }

    fn end_thinking(&mut self) {
        if std::mem::take(&mut self.thinking) {
            eprintln!();
        }
    }
}
