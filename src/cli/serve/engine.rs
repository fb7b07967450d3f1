//! The generation engine: a thread owning the model as a [`Batch`], admitting queued requests into free slots
//! between steps, running steps while any sequence is active, and sending each request its tokens over its own
//! channel. A request whose channel is closed (the client went away) is cancelled before the next step.

use super::api::{ApiError, Metrics};
use crate::cli::error::CliError;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use tokio::sync::mpsc::UnboundedSender;
use webtensor::models::decoder::batch::{Batch, BatchEvent, BatchOptions, SeqId};
use webtensor::models::reasoning::{ReasoningFormat, ReasoningSplitter};
use webtensor::models::{
    ChatTurn, GenerateOptions, Generation, LanguageModel, LanguageModelOptions, Message, Prompter, SamplingOptions,
};
use webtensor::Device;

pub(crate) struct Config {
    pub path: String,
    pub slots: usize,
    pub ctx: usize,
    pub queue: usize,
}

/// What a request asks to continue.
pub(crate) enum Prompt {
    /// Text, tokenized as the model's tokenizer does (with its BOS token).
    Text(String),
    /// Token ids.
    Tokens(Vec<u32>),
    /// A conversation, through the model's chat template.
    Chat(Vec<Message>),
}

impl Prompt {
    /// The prompt as ids (and, for a conversation, how the answer's reasoning is told from its text): rendered
    /// and tokenized by the caller (on the request's thread, not the engine's: a long render or tokenization does
    /// not hold up the sequences being decoded).
    pub(crate) fn ids(self, prompter: &Prompter) -> webtensor::Result<ChatTurn> {
        let plain = |ids| ChatTurn { ids, reasoning: ReasoningSplitter::new(ReasoningFormat::None, "") };
        match self {
            Prompt::Text(t) => prompter.text(&t).map(plain),
            Prompt::Tokens(ids) => Ok(plain(ids)),
            Prompt::Chat(messages) => prompter.chat_turn(&messages),
        }
    }
}

/// A request for the engine.
pub(crate) struct Job {
    /// The prompt's ids.
    pub prompt: Vec<u32>,
    pub options: GenerateOptions,
    pub tx: UnboundedSender<Out>,
}

/// What the engine sends a request, in order: `Started` (or `Failed`), its text pieces, `Done`.
pub(crate) enum Out {
    /// The request has a slot; its prompt has this many tokens.
    Started {
        prompt_tokens: usize,
    },
    /// New text (possibly empty while a character's bytes are incomplete).
    Text(String),
    Done(Generation),
    Failed(ApiError),
}

/// The server's side of the engine.
pub(crate) struct Handle {
    tx: mpsc::Sender<Job>,
    /// Positions a sequence's KV cache holds.
    pub context: usize,
    /// The model's chat sampler settings (its file's recommendations over the generic chat defaults).
    pub chat_defaults: SamplingOptions,
    /// The model's tokenizer and chat template.
    pub prompter: Prompter,
    /// Prompts being rendered and tokenized at once (each render holds a thread with a 256 MiB stack
    /// reserved and up to its 16 MiB budget): at most the CPU's threads, the others wait.
    pub prompting: Arc<tokio::sync::Semaphore>,
    queue: usize,
    metrics: Arc<Metrics>,
}

impl Handle {
    /// Queues `job`, or refuses it when the queue is full (503) or the engine has stopped (500).
    pub(crate) fn submit(&self, job: Job) -> Result<(), ApiError> {
        let waiting = self.metrics.queued.load(Ordering::Relaxed);
        if waiting >= self.queue {
            let msg = format!("the server is busy: {waiting} requests are waiting for a slot; retry shortly");
            return Err(ApiError::unavailable(msg));
        }
        self.metrics.queued.fetch_add(1, Ordering::Relaxed);
        self.tx.send(job).map_err(|_| {
            self.metrics.queued.fetch_sub(1, Ordering::Relaxed);
            ApiError::server("the generation engine has stopped".into())
        })
    }
}

/// Loads the model on its own thread and starts the engine there; returns once it is loaded (or failed to).
pub(crate) fn start(device: Device, cfg: Config, metrics: Arc<Metrics>) -> Result<Handle, CliError> {
    let (tx, rx) = mpsc::channel::<Job>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let m = metrics.clone();
    let (path, slots, ctx) = (cfg.path.clone(), cfg.slots, cfg.ctx);
    std::thread::Builder::new()
        .name("webtensor-engine".into())
        .spawn(move || {
            let loaded =
                LanguageModel::load(&device, &path, LanguageModelOptions { context: ctx, ..Default::default() })
                    .and_then(|model| Batch::new(model, BatchOptions { slots, ..Default::default() }));
            match loaded {
                Ok(batch) => {
                    let m0 = batch.model();
                    eprintln!("{}", slot_cost(&m0.config, m0.context(), slots));
                    let _ = ready_tx.send(Ok((m0.context(), m0.chat_sampling(0), m0.prompter().clone())));
                    m.slots_total.store(slots, Ordering::Relaxed);
                    run(batch, rx, &m);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
        })
        .map_err(|e| CliError::Msg(format!("cannot start the engine thread: {e}")))?;
    let (context, chat_defaults, prompter) =
        ready_rx.recv().map_err(|_| CliError::Msg("the engine thread ended while loading the model".into()))??;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2);
    let prompting = Arc::new(tokio::sync::Semaphore::new(threads));
    Ok(Handle { tx, context, chat_defaults, prompter, prompting, queue: cfg.queue, metrics })
}

/// A request in a slot.
struct Live {
    tx: UnboundedSender<Out>,
}

fn run(mut batch: Batch, rx: mpsc::Receiver<Job>, metrics: &Metrics) {
    let mut waiting: VecDeque<Job> = VecDeque::new();
    let mut live: HashMap<SeqId, Live> = HashMap::new();
    loop {
        if batch.active() == 0 && waiting.is_empty() {
            match rx.recv() {
                Ok(job) => waiting.push_back(job),
                Err(_) => return, // the server has stopped and every request is answered
            }
        }
        waiting.extend(rx.try_iter());
        while batch.has_free_slot() {
            let Some(job) = waiting.pop_front() else { break };
            metrics.queued.fetch_sub(1, Ordering::Relaxed);
            admit(&mut batch, job, &mut live);
        }
        // clients that went away free their slots before the step
        let gone: Vec<SeqId> = live.iter().filter(|(_, l)| l.tx.is_closed()).map(|(&id, _)| id).collect();
        for id in gone {
            batch.cancel(id);
            live.remove(&id);
            metrics.disconnected.fetch_add(1, Ordering::Relaxed);
        }
        metrics.slots_busy.store(batch.active(), Ordering::Relaxed);
        if batch.active() == 0 {
            continue;
        }
        match batch.step() {
            Ok(events) => deliver(events, &mut live, metrics),
            Err(e) => {
                // a device error ends every request in flight; the next ones are tried afresh
                log::error!("step failed: {e}");
                for (id, l) in live.drain() {
                    batch.cancel(id);
                    let _ = l.tx.send(Out::Failed(ApiError::server(format!("generation failed: {e}"))));
                }
            }
        }
        metrics.slots_busy.store(batch.active(), Ordering::Relaxed);
    }
}

/// Gives `job` a slot, or answers it with the error.
fn admit(batch: &mut Batch, job: Job, live: &mut HashMap<SeqId, Live>) {
    if job.tx.is_closed() {
        return;
    }
    match batch.add(&job.prompt, &job.options) {
        Ok(id) => {
            let _ = job.tx.send(Out::Started { prompt_tokens: job.prompt.len() });
            live.insert(id, Live { tx: job.tx });
        }
        Err(e) => {
            let _ = job.tx.send(Out::Failed(ApiError::invalid(e.to_string())));
        }
    }
}

fn deliver(events: Vec<BatchEvent>, live: &mut HashMap<SeqId, Live>, metrics: &Metrics) {
    for e in events {
        match e {
            BatchEvent::Token(id, t) => {
                if let Some(l) = live.get(&id) {
                    let _ = l.tx.send(Out::Text(t.text));
                }
            }
            BatchEvent::Finished(id, g) => {
                metrics.prompt_tokens.fetch_add(g.prefill_tokens, Ordering::Relaxed);
                metrics.tokens_predicted.fetch_add(g.tokens.len(), Ordering::Relaxed);
                if let Some(l) = live.remove(&id) {
                    let _ = l.tx.send(Out::Done(g));
                }
            }
        }
    }
}

/// What a slot costs: its f16 KV cache of `context` positions, and a hybrid model's recurrent state (the same at
/// any length).
fn slot_cost(c: &webtensor::models::decoder::DecoderConfig, context: usize, slots: usize) -> String {
    let size = |b: usize| match b < 1 << 20 {
        true => format!("{:.1} KiB", b as f64 / 1024.0),
        false => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
    };
    let kv = 2 * c.attention_layers() * c.n_kv_heads * c.head_dim * 2 * context;
    let state = c.recurrent_state_bytes();
    let rec = if state > 0 { format!(" + {} recurrent state", size(state)) } else { String::new() };
    format!("{slots} slots of {context} positions, each {} ({} f16 KV cache{rec})", size(kv + state), size(kv))
}
