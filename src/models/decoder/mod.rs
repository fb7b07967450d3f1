//! The decoder runner: GGUF language models of every architecture [`crate::models::arch`] builds (SmolLM2,
//! Llama 3.x, Qwen, Phi-3, Gemma, ...), as llama.cpp runs them: the weights resident on the device as the file stores them (block-quantized types computed on
//! directly), a KV cache of f16 states, the whole prompt in one prefill (matmuls over the prompt's rows, in
//! chunks of up to [`LanguageModelOptions::max_chunk`] tokens), then one decode step per token, reading back only the
//! last position's logits, or only their argmax when decoding greedily.
//!
//! ```no_run
//! # fn main() -> webtensor::Result<()> {
//! use webtensor::models::decoder::{LanguageModel, LanguageModelOptions};
//! use webtensor::models::GenerateOptions;
//! let mut model = LanguageModel::load(&webtensor::Device::cpu(), "SmolLM2-135M-Instruct.Q4_1.gguf", LanguageModelOptions::default())?;
//! let prompt = model.tokenizer.encode("The capital of France is")?;
//! let out = model.generate(&prompt, &GenerateOptions { max_tokens: 8, ..Default::default() }, |piece, _id| {
//!     print!("{piece}");
//!     true // go on
//! })?;
//! eprintln!("\n{:.1} tokens/s", out.decode_tokens_per_s());
//! # Ok(()) }
//! ```
//!
//! Reference: llama.cpp's `llm_build_llama` and `llama_decode`; Hugging Face's `LlamaForCausalLM`.

pub mod batch;
mod prompter;
pub mod stream;

pub use crate::models::arch::spec::DecoderConfig;
pub use prompter::{ChatTurn, Prompter};

use super::chat::ChatTemplate;
use super::tokenizer::Tokenizer;
use super::{RecommendedSampling, SamplingOptions};
use crate::device::{Device, Plan};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::io::gguf::GgufFile;
use crate::models::arch::graph::{build_step, causal_mask, StepGraph};
use crate::models::arch::row::KvCache;
use crate::models::arch::row::Weights;
use crate::options::{CompileOptions, PlanStats};
use crate::run::{Fetch, Value};

/// How a model is set up on its device.
#[derive(Clone, Debug)]
pub struct LanguageModelOptions {
    /// Positions the KV cache holds (prompt and generated tokens together); `0`: the model's training context,
    /// at most 4096.
    pub context: usize,
    /// Keep the KV cache in f32 instead of f16 (twice the memory; for checking against an f32 reference).
    pub f32_cache: bool,
    /// Largest prefill chunk in tokens; a prompt runs as chunks of powers of two up to this, one plan each,
    /// compiled on first use.
    pub max_chunk: usize,
    /// Options of every plan (`f32_activations` to keep the CPU's matmul activations in f32).
    pub compile: CompileOptions,
}

impl Default for LanguageModelOptions {
    fn default() -> Self {
        LanguageModelOptions { context: 0, f32_cache: false, max_chunk: 256, compile: CompileOptions::default() }
    }
}

/// The last position's output of a step.
pub(crate) struct StepOut {
    pub logits: Option<Vec<f32>>,
    pub argmax: u32,
    /// Every logit is finite.
    pub finite: bool,
}

/// A compiled step over T tokens.
pub(crate) struct StepPlan {
    plan: Plan,
    g: StepGraph,
    /// The graph's inputs the plan reads (an architecture may leave some unused: a soft-capped attention has no
    /// use for the KV length, a model whose every layer has a window none for the full mask).
    deps: Vec<crate::graph::Tensor>,
}

/// A loaded model with its KV cache: a conversation's state.
pub struct LanguageModel {
    pub config: DecoderConfig,
    pub tokenizer: std::sync::Arc<Tokenizer>,
    /// The tokenizer and chat template, shareable with other threads.
    prompter: Prompter,
    /// The file's `general.sampling.*` keys.
    recommended: RecommendedSampling,
    device: Device,
    weights: Weights,
    cache: KvCache,
    options: LanguageModelOptions,
    /// Step plans by their token count (powers of two).
    plans: std::collections::HashMap<usize, StepPlan>,
    /// The tokens whose keys and values the cache holds, in position order.
    cached: Vec<u32>,
}

impl LanguageModel {
    /// Loads the GGUF file at `path` (memory-mapped) onto `device`.
    ///
    /// # Errors
    /// [`Error::Io`] and [`Error::Format`] for a file that cannot be read or is not a GGUF language model of an
    /// architecture webtensor runs (the message names the architecture), as [`LanguageModel::from_gguf`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn load(device: &Device, path: &str, options: LanguageModelOptions) -> Result<LanguageModel> {
        LanguageModel::from_gguf(device, &GgufFile::open(path)?, options)
    }

    /// The model in `file` on `device`: its weights uploaded once (on the CPU backend, used where they lie in
    /// the file's bytes), a KV cache of [`LanguageModelOptions::context`] positions.
    ///
    /// # Errors
    /// [`Error::Format`] naming the tensor or metadata key that is missing or of the wrong shape;
    /// [`Error::Unsupported`] for settings this runner does not implement; device errors from uploading.
    pub fn from_gguf(device: &Device, file: &GgufFile, options: LanguageModelOptions) -> Result<LanguageModel> {
        let config = DecoderConfig::from_gguf(file)?;
        let tokenizer = std::sync::Arc::new(Tokenizer::from_gguf(file)?);
        // compiled when a chat first needs it: a template that does not compile (or is hostile) fails chat only,
        // and plain generation never touches it
        let template_source = file.get("tokenizer.chat_template").map(|v| match v.as_str() {
            Some(src) => Ok(src.to_string()),
            None => Err(format!("tokenizer.chat_template is {}, not a string", v.a_type_name())),
        });
        let context = match options.context {
            0 => config.n_ctx_train.min(4096),
            n => n,
        };
        let weights = crate::models::arch::load_weights(device, file, &config, context)?;
        let cache = new_cache(device, &config, context, 1, options.f32_cache)?;
        let prompter = Prompter::new(tokenizer.clone(), template_source, file.source(), cache.capacity);
        let options = LanguageModelOptions { max_chunk: options.max_chunk.clamp(1, 4096), ..options };
        Ok(LanguageModel {
            config,
            tokenizer,
            prompter,
            recommended: RecommendedSampling::from_gguf(file),
            device: device.clone(),
            weights,
            cache,
            options,
            plans: Default::default(),
            cached: vec![],
        })
    }

    /// The sampler settings the file recommends (its `general.sampling.*` keys, as llama.cpp reads them).
    pub fn recommended_sampling(&self) -> &RecommendedSampling {
        &self.recommended
    }

    /// What a chat answer is sampled with by default: [`SamplingOptions::chat`] with the file's recommendations
    /// in place of its values (a model's authors know its best temperature).
    pub fn chat_sampling(&self, seed: u64) -> SamplingOptions {
        self.recommended.apply(SamplingOptions::chat(seed))
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Positions the KV cache holds.
    pub fn context(&self) -> usize {
        self.cache.capacity
    }

    /// The tokens in the KV cache, in order (the conversation so far).
    pub fn cached_tokens(&self) -> &[u32] {
        &self.cached
    }

    /// Forgets the conversation (the cache is overwritten from position 0 by the next prompt).
    pub fn reset(&mut self) {
        self.cached.clear();
    }

    /// What makes this model's prompts (its tokenizer and chat template), for use on other threads.
    pub fn prompter(&self) -> &Prompter {
        &self.prompter
    }

    /// The chat template from the file's `tokenizer.chat_template`, if it has one that compiles.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.prompter.chat_template()
    }

    /// Why the file's chat template cannot be used: it has none, or it does not compile (`None` when it can).
    pub fn chat_template_error(&self) -> Option<String> {
        self.prompter.chat_template_error()
    }

    /// The logits (f32 `[V]`) after `tokens`, run at the positions after the cached ones (which they join).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no tokens, an id outside the vocabulary, or more tokens than the context
    /// has room for; device errors from the run.
    pub async fn logits_async(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        Ok(self.eval(tokens, true).await?.logits.expect("fetched"))
    }

    /// One decode step: runs `token` at the next position and returns the argmax of its logits (computed on the
    /// device; nothing else is read back).
    ///
    /// # Errors
    /// As [`LanguageModel::logits_async`]; [`Error::InvalidArgument`] when the logits are not finite (their argmax
    /// would be a token like any other).
    pub async fn step_async(&mut self, token: u32) -> Result<u32> {
        let out = self.eval(&[token], false).await?;
        if !out.finite {
            let reason = "the model's logits are not finite (NaN or infinite): an activation overflowed or a weight \
                          is not finite"
                .to_string();
            return Err(Error::InvalidArgument { op: "step", reason });
        }
        Ok(out.argmax)
    }

    /// The statistics of the step plans compiled so far, by their token count in increasing order (1: the decode
    /// step; a prompt of 37 tokens compiles 32, 4 and 1): dispatches, pipelines, memory and each dispatch's kernel.
    pub fn plan_stats(&self) -> Vec<(usize, PlanStats)> {
        let mut v: Vec<(usize, PlanStats)> = self.plans.iter().map(|(&t, sp)| (t, sp.plan.stats())).collect();
        v.sort_by_key(|(t, _)| *t);
        v
    }

    /// The decode step plan's host times in its last run, in microseconds: until its work was submitted, and
    /// encoding the next step's work ahead after the submit ([`Plan::last_host_us`],
    /// [`Plan::last_encode_ahead_us`]); `None` before a decode step ran.
    ///
    /// [`Plan::last_host_us`]: crate::Plan::last_host_us
    /// [`Plan::last_encode_ahead_us`]: crate::Plan::last_encode_ahead_us
    pub fn decode_host_us(&self) -> Option<(f64, f64)> {
        self.plans.get(&1).map(|sp| (sp.plan.last_host_us(), sp.plan.last_encode_ahead_us()))
    }

    /// Times each dispatch of the following runs of every step plan compiled so far on the GPU, or stops (see
    /// [`Plan::set_profiling`]); plans compiled later are not profiled.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] before any step has run (plans are compiled by the first run of their token
    /// count); as [`Plan::set_profiling`] (the CPU backend, adapters without timestamp queries).
    ///
    /// [`Plan::set_profiling`]: crate::Plan::set_profiling
    pub fn set_profiling(&mut self, on: bool) -> Result<()> {
        if self.plans.is_empty() {
            let reason = "no step has run yet (plans are compiled by their first run)".to_string();
            return Err(Error::InvalidArgument { op: "set_profiling", reason });
        }
        crate::Plan::set_profiling_all(self.plans.values_mut().map(|sp| &mut sp.plan).collect(), on)
    }

    /// The last profiled run of the step plan of `tokens` tokens (1: the decode step; a prompt's chunks take
    /// powers of two): each dispatch with its kernel and GPU time ([`Plan::last_profile`]).
    ///
    /// [`Plan::last_profile`]: crate::Plan::last_profile
    pub fn step_profile(&self, tokens: usize) -> Option<Vec<crate::options::KernelTime>> {
        self.plans.get(&tokens)?.plan.last_profile()
    }

    /// Blocking form of [`LanguageModel::logits_async`] (native only).
    ///
    /// # Errors
    /// As [`LanguageModel::logits_async`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn logits(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        pollster::block_on(self.logits_async(tokens))
    }

    /// Blocking form of [`LanguageModel::step_async`] (native only).
    ///
    /// # Errors
    /// As [`LanguageModel::logits_async`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn step(&mut self, token: u32) -> Result<u32> {
        pollster::block_on(self.step_async(token))
    }

    /// Runs `tokens` at the positions after the cached ones and returns the last one's logits (when
    /// `want_logits`) and argmax; the cache then holds them too.
    pub(crate) async fn eval(&mut self, tokens: &[u32], want_logits: bool) -> Result<StepOut> {
        self.eval_with_progress(tokens, want_logits, &mut |_, _| {}).await
    }

    /// [`LanguageModel::eval`], calling `progress(done, total)` before the first chunk and after each (tokens evaluated
    /// of `tokens.len()`).
    pub(crate) async fn eval_with_progress(
        &mut self,
        tokens: &[u32],
        want_logits: bool,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<StepOut> {
        if tokens.is_empty() {
            return Err(Error::InvalidArgument { op: "llama", reason: "no tokens to evaluate".into() });
        }
        let (start, cap) = (self.cached.len(), self.cache.capacity);
        if start + tokens.len() > cap {
            let reason =
                format!("{} cached + {} new tokens exceed the context of {cap} positions", start, tokens.len());
            return Err(Error::InvalidArgument { op: "llama", reason });
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.config.n_vocab) {
            let reason = format!("token id {bad} is outside the vocabulary of {}", self.config.n_vocab);
            return Err(Error::InvalidArgument { op: "llama", reason });
        }
        let mut done = 0;
        let mut out = None;
        progress(0, tokens.len());
        while done < tokens.len() {
            let left = tokens.len() - done;
            // the largest power of two that fits: a prompt of 37 runs as 32 + 4 + 1
            let t = pow2_floor(left).min(pow2_floor(self.options.max_chunk));
            let last = done + t == tokens.len();
            out = Some(self.run_chunk(&tokens[done..done + t], start + done, last && want_logits).await?);
            done += t;
            progress(done, tokens.len());
        }
        self.cached.extend_from_slice(tokens);
        Ok(out.expect("at least one chunk"))
    }

    async fn run_chunk(&mut self, tokens: &[u32], start: usize, want_logits: bool) -> Result<StepOut> {
        let mut plans = std::mem::take(&mut self.plans);
        let out = self.run_chunk_in(&mut plans, &self.cache, 0, (tokens, start), want_logits).await;
        self.plans = plans;
        out
    }

    /// Runs `tokens` at positions `start..` of the sequence in slot `slot` of `cache` with that slot's step plans
    /// `plans` (compiling the plan of their count on first use): the last position's logits when `want_logits`,
    /// and its argmax.
    pub(crate) async fn run_chunk_in(
        &self,
        plans: &mut std::collections::HashMap<usize, StepPlan>,
        cache: &KvCache,
        slot: usize,
        (tokens, start): (&[u32], usize),
        want_logits: bool,
    ) -> Result<StepOut> {
        let t = tokens.len();
        if let std::collections::hash_map::Entry::Vacant(entry) = plans.entry(t) {
            let g = build_step(&self.config, &self.weights, cache, t, slot)?;
            let outputs = [g.logits, g.argmax, g.logits_sum];
            let plan = self.device.compile_async(&g.graph, &outputs, &self.options.compile).await?;
            entry.insert(StepPlan { deps: plan.inputs(), plan, g });
        }
        let sp = plans.get_mut(&t).expect("inserted above");
        if start == 0 {
            // a sequence starts: its slot's recurrent states from zeros (written from the host, so that nothing
            // of the slot's last sequence, not even a NaN, carries over)
            for s in cache.conv.iter().chain(&cache.ssm).flatten() {
                s.zero_rows(slot..slot + 1)?;
            }
        }
        let ids: Vec<i32> = tokens.iter().map(|&x| x as i32).collect();
        let pos: Vec<i32> = (start..start + t).map(|p| p as i32).collect();
        let base = (slot * cache.capacity) as i32;
        let rows: Vec<i32> = pos.iter().map(|p| base + p).collect();
        let kv_len = [(start + t) as i32];
        let mut inputs = vec![
            (sp.g.tokens, Value::I32(&ids)),
            (sp.g.pos, Value::I32(&pos)),
            (sp.g.rows, Value::I32(&rows)),
            (sp.g.kv_len, Value::I32(&kv_len)),
        ];
        let cap = cache.capacity;
        let mask = sp.g.mask.map(|m| (m, causal_mask(start, t, cap, None)));
        let swa_mask = sp.g.swa_mask.map(|m| (m, causal_mask(start, t, cap, self.config.sliding_window)));
        inputs.extend(mask.iter().chain(&swa_mask).map(|(m, v)| (*m, Value::F32(v))));
        inputs.retain(|(t, _)| sp.deps.contains(t));
        let fetch = [if want_logits { Fetch::All } else { Fetch::Skip }, Fetch::All, Fetch::All];
        let mut outs = sp.plan.run_with_async(&inputs, &fetch).await?;
        let argmax = outs[1].take().map(|a| a.data.to_f32()[0] as u32).unwrap_or(0);
        let finite = outs[2].take().is_some_and(|s| s.data.to_f32()[0].is_finite());
        let logits = outs[0].take().map(|l| l.data.into_f32());
        Ok(StepOut { logits, argmax, finite })
    }

    /// Drops cached tokens after the first `n` (the next evaluation overwrites their cache rows).
    pub(crate) fn truncate(&mut self, n: usize) {
        self.cached.truncate(n);
    }
}

/// The cached positions a new prompt keeps of `cached` (`keep` of them reusable as keys and values): all of
/// them or none where the model carries recurrent states, which hold the whole cached sequence and cannot be cut
/// back to a shorter prefix (llama.cpp's recurrent memory likewise only continues a sequence).
pub(crate) fn continuation(cache: &KvCache, cached: usize, keep: usize) -> usize {
    if cache.is_recurrent() && keep != cached {
        0
    } else {
        keep
    }
}

/// A KV cache of `slots` sequences of `context` positions each for `config` on `device` (f16 states, or f32),
/// after [`check_cache_size`].
pub(crate) fn new_cache(
    device: &Device,
    config: &DecoderConfig,
    context: usize,
    slots: usize,
    f32_cache: bool,
) -> Result<KvCache> {
    let dtype = if f32_cache { DType::F32 } else { DType::F16 };
    let row = config.n_kv_heads * config.head_dim;
    let rows = context.checked_mul(slots).ok_or_else(|| Error::InvalidArgument {
        op: "llama",
        reason: format!("{slots} sequences of {context} positions overflow"),
    })?;
    check_cache_size(device, config, (rows, slots), row, dtype)?;
    let attn = |kind: &str, l: usize| match config.is_recurrent(l) {
        true => Ok(None),
        false => device.state(&format!("cache_{kind}.{l}"), dtype, &[rows, row]).map(Some),
    };
    // a gated delta-net layer's states, f32 (a sequence's whole history is in them)
    let recurrent = |kind: &str, l: usize| match (&config.linear, config.is_recurrent(l)) {
        (Some(c), true) => {
            let shape = match kind {
                "conv" => vec![slots, c.conv_kernel - 1, c.conv_dim()],
                _ => vec![slots, c.n_v_heads, c.head_dim, c.head_dim],
            };
            let s = device.state(&format!("cache_{kind}.{l}"), DType::F32, &shape)?;
            s.zero()?;
            Ok(Some(s))
        }
        _ => Ok(None),
    };
    let per_layer = |f: &dyn Fn(usize) -> Result<Option<crate::resident::State>>| {
        (0..config.n_layers).map(f).collect::<Result<Vec<_>>>()
    };
    Ok(KvCache {
        k: per_layer(&|l| attn("k", l))?,
        v: per_layer(&|l| attn("v", l))?,
        conv: per_layer(&|l| recurrent("conv", l))?,
        ssm: per_layer(&|l| recurrent("ssm", l))?,
        capacity: context,
    })
}

/// Checks, before anything is allocated, that a KV cache of `context` positions (keys and values of `row` elements
/// of `dtype` per layer and position) can exist on `device`: its size computed without overflow, each layer's
/// state within a GPU buffer, and the whole within the memory the machine has available (natively, Linux's
/// `MemAvailable`, for the CPU backend and for software adapters, whose memory is the host's).
fn check_cache_size(
    device: &Device,
    config: &DecoderConfig,
    (context, slots): (usize, usize),
    row: usize,
    dtype: DType,
) -> Result<()> {
    let layers = config.attention_layers();
    let per_state = context.checked_mul(row).and_then(|n| n.checked_mul(dtype.size_bytes()));
    let recurrent = config.recurrent_state_bytes().checked_mul(slots);
    let total = per_state.and_then(|b| b.checked_mul(2 * layers)).zip(recurrent).and_then(|(a, b)| a.checked_add(b));
    let what = |bytes: String| {
        let state = match config.recurrent_state_bytes() {
            0 => String::new(),
            b => format!(", and {slots} × {b} bytes of recurrent state"),
        };
        format!(
            "a KV cache of {context} positions ({bytes}: 2 × {layers} layers × {context} × {row} × {} bytes{state})",
            dtype.size_bytes()
        )
    };
    let (Some(per_state), Some(total)) = (per_state, total) else {
        return Err(Error::InvalidArgument { op: "llama", reason: format!("{} overflows", what("its size".into())) });
    };
    let caps = device.capabilities();
    if !device.is_cpu() && per_state as u64 > caps.max_buffer_bytes {
        let what = what(format!("{per_state} bytes a layer's keys"));
        return Err(Error::LimitExceeded {
            what,
            size: per_state as u64,
            unit: "bytes",
            limit_name: "max_buffer_size",
            limit: caps.max_buffer_bytes,
        });
    }
    let host = device.is_cpu() || caps.device_type == crate::caps::DeviceType::Cpu;
    if let Some(avail) = available_memory().filter(|&a| host && total as u64 > a) {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let reason = format!(
            "{} exceeds the {:.1} GiB of memory available; pass a smaller context",
            what(format!("{:.1} GiB", gib(total as u64))),
            gib(avail)
        );
        return Err(Error::InvalidArgument { op: "llama", reason });
    }
    Ok(())
}

/// The memory available to new allocations, in bytes (Linux's `MemAvailable`), where the platform says.
fn available_memory() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let info = std::fs::read_to_string("/proc/meminfo").ok()?;
        let kib: u64 =
            info.lines().find(|l| l.starts_with("MemAvailable:"))?.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// The largest power of two not above `x` (≥ 1).
fn pow2_floor(x: usize) -> usize {
    1usize << (usize::BITS - 1 - x.max(1).leading_zeros())
}
