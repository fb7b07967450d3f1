//! Several sequences decoded in one step, with continuous batching (llama-server's slots): each sequence has a
//! slot with its own KV cache; a step runs prompt chunks of the sequences still reading their prompts (up to
//! [`BatchOptions::prefill_tokens`] tokens in all, so a long prompt is read over several steps while the others
//! go on decoding; the chunks are those of a whole prefill, so an answer does not depend on the others), then ONE
//! decode plan for every decoding sequence at once, each at its own position and KV
//! length (run-time values: no recompile as sequences join and leave), so the weights are read once per step for
//! all of them; then each sequence's sampler. A sequence joins or leaves between steps.
//!
//! ```no_run
//! # fn main() -> webtensor::Result<()> {
//! use webtensor::models::decoder::batch::{Batch, BatchEvent, BatchOptions};
//! use webtensor::models::{GenerateOptions, LanguageModel, LanguageModelOptions};
//! let model = LanguageModel::load(&webtensor::Device::cpu(), "SmolLM2-135M-Instruct.Q4_1.gguf", LanguageModelOptions::default())?;
//! let mut batch = Batch::new(model, BatchOptions { slots: 4, ..Default::default() })?;
//! let opts = GenerateOptions { max_tokens: 16, ..Default::default() };
//! for text in ["The capital of France is", "1, 2, 3,"] {
//!     let prompt = batch.model().tokenizer.encode(text)?;
//!     batch.add(&prompt, &opts)?;
//! }
//! while batch.active() > 0 {
//!     for event in batch.step()? {
//!         if let BatchEvent::Finished(id, generation) = event {
//!             println!("{id}: {}", generation.text);
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Reference: llama.cpp's `llama-server` (slots, `n_parallel`, continuous batching) and `llama_batch`.

use std::collections::HashMap;

use super::stream::{now_ms, GenerateOptions, Generation, Pending, Token, TokenStream};
use super::StepOut;
use super::{new_cache, pow2_floor, LanguageModel, StepPlan};
use crate::device::Plan;
use crate::error::{Error, Result};
use crate::models::arch::graph::{build_decode_batch, causal_mask, BatchGraph};
use crate::models::arch::row::KvCache;
use crate::run::{Fetch, Value};

/// How a [`Batch`] is set up.
#[derive(Clone, Debug)]
pub struct BatchOptions {
    /// Sequences decoded at once (slots, each with a KV cache of the model's context).
    pub slots: usize,
    /// Prompt tokens read per step, over all sequences still reading theirs (chunks of powers of two, at most
    /// [`LanguageModelOptions::max_chunk`](super::LanguageModelOptions::max_chunk) each).
    pub prefill_tokens: usize,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions { slots: 4, prefill_tokens: 256 }
    }
}

/// A sequence's id in a [`Batch`], unique for the batch's lifetime.
pub type SeqId = u64;

/// What a [`Batch::step`] produced for one sequence.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchEvent {
    /// A new token and the text it releases (as [`LanguageModel::next_token_async`] returns them).
    Token(SeqId, Token),
    /// The sequence ended (the reason in [`Generation::stop`]); its slot is free.
    Finished(SeqId, Generation),
}

struct Seq {
    id: SeqId,
    stream: TokenStream,
    /// Prompt tokens not read yet.
    todo: Vec<u32>,
}

struct Slot {
    /// Step plans over this slot's cache rows, by token count.
    plans: HashMap<usize, StepPlan>,
    /// The tokens the cache holds, in position order (kept after a sequence ends, for a next prompt that
    /// starts the same way).
    cached: Vec<u32>,
    /// Leading cached positions computed by prompt chunks as a whole prefill from position 0 would compute them
    /// (the only ones a next prompt reuses, so that its answer is the same as without the cache).
    canonical: usize,
    seq: Option<Seq>,
}

struct DecodePlan {
    plan: Plan,
    g: BatchGraph,
    /// The graph's inputs the plan reads (see `StepPlan::deps`).
    deps: Vec<crate::graph::Tensor>,
}

/// A model decoding several sequences at once (see the [module docs](crate::models::decoder::batch)).
pub struct Batch {
    model: LanguageModel,
    /// Every slot's KV cache, slot `s` in rows `s · context ..` of each state.
    cache: KvCache,
    slots: Vec<Slot>,
    /// Decode plans by their row count B (slots `0..B`).
    decode: HashMap<usize, DecodePlan>,
    prefill_tokens: usize,
    next_id: SeqId,
}

impl Batch {
    /// Takes `model` (its KV cache is given up) and gives each of `options.slots` slots a KV cache of the
    /// model's context.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for 0 slots or 0 prefill tokens; the cache-size errors of
    /// [`LanguageModel::from_gguf`] (for all slots' caches together) and device errors.
    pub fn new(mut model: LanguageModel, options: BatchOptions) -> Result<Batch> {
        if options.slots == 0 || options.prefill_tokens == 0 {
            let reason =
                format!("slots ({}) and prefill tokens ({}) must be ≥ 1", options.slots, options.prefill_tokens);
            return Err(Error::InvalidArgument { op: "batch", reason });
        }
        let context = model.context();
        // the single-sequence cache and plans go: the batch's cache holds every slot
        model.cache = KvCache { k: vec![], v: vec![], conv: vec![], ssm: vec![], capacity: context };
        model.plans.clear();
        model.cached.clear();
        let cache = new_cache(&model.device, &model.config, context, options.slots, model.options.f32_cache)?;
        let slots = (0..options.slots)
            .map(|_| Slot { plans: HashMap::new(), cached: vec![], canonical: 0, seq: None })
            .collect();
        Ok(Batch { model, cache, slots, decode: HashMap::new(), prefill_tokens: options.prefill_tokens, next_id: 0 })
    }

    /// The model (its tokenizer, chat template, config).
    pub fn model(&self) -> &LanguageModel {
        &self.model
    }

    /// Slots in all.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Sequences in the batch (reading their prompts or decoding).
    pub fn active(&self) -> usize {
        self.slots.iter().filter(|s| s.seq.is_some()).count()
    }

    /// Whether [`Batch::add`] has a slot for another sequence.
    pub fn has_free_slot(&self) -> bool {
        self.active() < self.slots.len()
    }

    /// Adds a sequence generating a continuation of `prompt` (token ids); it starts with the next step. It takes
    /// the free slot whose cache holds the longest start of `prompt` (read again only from there), else the
    /// lowest free one.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for options out of range, an empty prompt, one that does not fit the context
    /// (naming both lengths), an id outside the vocabulary, or no free slot.
    pub fn add(&mut self, prompt: &[u32], options: &GenerateOptions) -> Result<SeqId> {
        options.validate()?;
        let cap = self.model.context();
        if prompt.is_empty() || prompt.len() >= cap {
            let reason = format!("the prompt has {} tokens; the context holds {cap} (prompt + output)", prompt.len());
            return Err(Error::InvalidArgument { op: "generate", reason });
        }
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= self.model.config.n_vocab) {
            let reason = format!("token id {bad} is outside the vocabulary of {}", self.model.config.n_vocab);
            return Err(Error::InvalidArgument { op: "generate", reason });
        }
        // a cached start is reused in whole chunks of the largest size, so that the rest of the prompt is read in
        // the same chunks as without the cache (chunks of other sizes round differently)
        let unit = pow2_floor(self.model.options.max_chunk);
        let reusable = |s: &Slot| {
            let common = s.cached.iter().zip(prompt).take_while(|(a, b)| a == b).count();
            // at least the prompt's last token is read again, for its logits
            let keep = common.min(s.canonical).min(prompt.len() - 1) / unit * unit;
            super::continuation(&self.cache, s.cached.len(), keep)
        };
        let free = self.slots.iter().enumerate().filter(|(_, s)| s.seq.is_none());
        // the longest reusable start; among equals the lowest slot (fewer decode rows)
        let Some((i, _)) = free.max_by_key(|&(i, s)| (reusable(s), std::cmp::Reverse(i))) else {
            let reason = format!("all {} slots are busy", self.slots.len());
            return Err(Error::InvalidArgument { op: "batch", reason });
        };
        let keep = reusable(&self.slots[i]);
        let slot = &mut self.slots[i];
        slot.cached.truncate(keep);
        slot.canonical = keep;
        let id = self.next_id;
        self.next_id += 1;
        let stream = TokenStream::new(prompt, prompt.len() - keep, options);
        slot.seq = Some(Seq { id, stream, todo: prompt[keep..].to_vec() });
        Ok(id)
    }

    /// Ends sequence `id` now (stop reason [`StopReason::Cancelled`](super::stream::StopReason::Cancelled)) and frees its
    /// slot; returns its generation, or `None` for an id not in the batch.
    pub fn cancel(&mut self, id: SeqId) -> Option<Generation> {
        let slot = self.slots.iter_mut().find(|s| s.seq.as_ref().is_some_and(|q| q.id == id))?;
        let mut seq = slot.seq.take()?;
        if !seq.todo.is_empty() {
            seq.stream.out.prefill_tokens -= seq.todo.len();
        }
        seq.stream.cancel();
        Some(seq.stream.into_generation())
    }

    /// One step: prompt chunks, one decode step of every decoding sequence, their samplers. Returns each
    /// sequence's new token or end.
    ///
    /// # Errors
    /// Device errors from the runs, tokenizer errors; the batch should then be dropped.
    pub async fn step_async(&mut self) -> Result<Vec<BatchEvent>> {
        let mut events = vec![];
        self.prefill().await?;
        let t0 = now_ms();
        let mut decoding = vec![];
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(seq) = slot.seq.as_mut().filter(|q| q.todo.is_empty()) else { continue };
            match seq.stream.take_pending(slot.cached.len(), self.cache.capacity) {
                Pending::None => {}
                Pending::Eval(token) => decoding.push((i, token)),
                Pending::Ended(end) => {
                    let id = seq.id;
                    events.extend(end.map(|t| BatchEvent::Token(id, t)));
                    let seq = slot.seq.take().expect("checked above");
                    events.push(BatchEvent::Finished(id, seq.stream.into_generation()));
                }
            }
        }
        if !decoding.is_empty() {
            self.decode(&decoding).await?;
            let ms = now_ms() - t0;
            for &(i, _) in &decoding {
                let s = &mut self.slots[i].seq.as_mut().expect("decoding").stream;
                s.out.decode_ms += ms;
                s.out.decode_steps += 1;
            }
        }
        self.sample(&mut events)?;
        Ok(events)
    }

    /// Blocking form of [`Batch::step_async`] (native only).
    ///
    /// # Errors
    /// As [`Batch::step_async`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn step(&mut self) -> Result<Vec<BatchEvent>> {
        pollster::block_on(self.step_async())
    }

    /// Reads prompt chunks of the sequences still reading theirs, oldest first, up to the step's budget (at least
    /// one chunk a step); a sequence whose prompt is read has its first step's output. The chunks are those of a
    /// whole prefill ([`LanguageModel::eval`]'s: the largest power of two left, at most `max_chunk`), whatever the
    /// budget, so a prompt's answer does not depend on the other sequences.
    async fn prefill(&mut self) -> Result<()> {
        let mut budget = self.prefill_tokens;
        let mut order: Vec<usize> =
            (0..self.slots.len()).filter(|&i| self.slots[i].seq.as_ref().is_some_and(|q| !q.todo.is_empty())).collect();
        order.sort_by_key(|&i| self.slots[i].seq.as_ref().map(|q| q.id));
        let mut ran = false;
        for i in order {
            loop {
                let slot = &mut self.slots[i];
                let seq = slot.seq.as_mut().expect("reading its prompt");
                if seq.todo.is_empty() {
                    break;
                }
                let t = pow2_floor(seq.todo.len()).min(pow2_floor(self.model.options.max_chunk));
                if t > budget && ran {
                    return Ok(());
                }
                let last = t == seq.todo.len();
                let want = last && seq.stream.wants_logits();
                let chunk: Vec<u32> = seq.todo.drain(..t).collect();
                let t0 = now_ms();
                let start = slot.cached.len();
                let out = self.model.run_chunk_in(&mut slot.plans, &self.cache, i, (&chunk, start), want).await?;
                slot.cached.extend_from_slice(&chunk);
                slot.canonical = slot.cached.len();
                seq.stream.out.prefill_ms += now_ms() - t0;
                if last {
                    seq.stream.step = Some(out);
                }
                budget = budget.saturating_sub(t);
                ran = true;
            }
        }
        Ok(())
    }

    /// One decode step of `rows` (slot, token). One sequence runs its slot's own one-token step plan; several,
    /// the decode plan of slots `0..=max` (compiled on first use), the other slots' rows idle (each writes the
    /// next free row of its own slot, which its next prompt chunk overwrites, and attends over one position).
    async fn decode(&mut self, rows: &[(usize, u32)]) -> Result<()> {
        if let [(i, token)] = *rows {
            let want = self.slots[i].seq.as_ref().is_some_and(|q| q.stream.wants_logits());
            let slot = &mut self.slots[i];
            let start = slot.cached.len();
            let out = self.model.run_chunk_in(&mut slot.plans, &self.cache, i, (&[token], start), want).await?;
            slot.cached.push(token);
            slot.seq.as_mut().expect("decoding").stream.step = Some(out);
            return Ok(());
        }
        let n = rows.iter().map(|&(i, _)| i + 1).max().expect("rows to decode");
        let cap = self.cache.capacity;
        if let std::collections::hash_map::Entry::Vacant(entry) = self.decode.entry(n) {
            let g = build_decode_batch(&self.model.config, &self.model.weights, &self.cache, n)?;
            let outputs = [g.logits, g.argmax, g.logits_sum];
            let plan = self.model.device.compile_async(&g.graph, &outputs, &self.model.options.compile).await?;
            entry.insert(DecodePlan { deps: plan.inputs(), plan, g });
        }
        let (mut tokens, mut pos, mut cache_rows) = (vec![0i32; n], vec![0i32; n], vec![0i32; n]);
        // each row sees its own positions (an idle row its first only: a softmax over none has no value)
        let mut mask = vec![f32::NEG_INFINITY; n * cap];
        let recurrent = self.cache.is_recurrent();
        for (i, slot) in self.slots[..n].iter_mut().enumerate() {
            if slot.cached.len() >= cap {
                // an idle full cache gives up its last row; a recurrent state cannot give up a token, so such a
                // slot keeps nothing (its next sequence starts from zeros)
                match recurrent {
                    true => slot.cached.clear(),
                    false => _ = slot.cached.pop(),
                }
                slot.canonical = slot.canonical.min(slot.cached.len());
            }
            pos[i] = slot.cached.len() as i32;
            cache_rows[i] = (i * cap + slot.cached.len()) as i32;
            mask[i * cap] = 0.0;
        }
        let mut kv_len = 1;
        for &(i, token) in rows {
            tokens[i] = token as i32;
            let len = pos[i] as usize + 1;
            mask[i * cap..i * cap + len].fill(0.0);
            kv_len = kv_len.max(len);
        }
        // the sliding window's rows: each row's own last `window` positions (an idle row's first, as above)
        let window = self.model.config.sliding_window;
        let swa_mask: Option<Vec<f32>> = window.map(|_| {
            (0..n)
                .flat_map(|i| {
                    let p = if rows.iter().any(|&(r, _)| r == i) { pos[i] as usize } else { 0 };
                    causal_mask(p, 1, cap, window)
                })
                .collect()
        });
        let want_logits =
            rows.iter().any(|&(i, _)| self.slots[i].seq.as_ref().is_some_and(|q| q.stream.wants_logits()));
        let dp = self.decode.get_mut(&n).expect("inserted above");
        let kv_len = [kv_len as i32];
        let live: Vec<f32> = (0..n).map(|i| if rows.iter().any(|&(r, _)| r == i) { 1.0 } else { 0.0 }).collect();
        let inputs = [
            (dp.g.tokens, Value::I32(&tokens)),
            (dp.g.pos, Value::I32(&pos)),
            (dp.g.rows, Value::I32(&cache_rows)),
            (dp.g.mask, Value::F32(&mask)),
            (dp.g.kv_len, Value::I32(&kv_len)),
        ]
        .into_iter()
        .chain(dp.g.swa_mask.zip(swa_mask.as_deref()).map(|(m, v)| (m, Value::F32(v))))
        .chain(dp.g.row_live.map(|m| (m, Value::F32(&live))))
        .filter(|(t, _)| dp.deps.contains(t))
        .collect::<Vec<_>>();
        let fetch = [if want_logits { Fetch::All } else { Fetch::Skip }, Fetch::All, Fetch::All];
        let mut outs = dp.plan.run_with_async(&inputs, &fetch).await?;
        let argmax = outs[1].take().map(|a| a.data.to_f32()).unwrap_or_default();
        let sums = outs[2].take().map(|s| s.data.to_f32()).unwrap_or_default();
        let logits = outs[0].take().map(|l| l.data.into_f32());
        let vocab = self.model.config.n_vocab;
        for &(i, token) in rows {
            let slot = &mut self.slots[i];
            slot.cached.push(token);
            let seq = slot.seq.as_mut().expect("decoding");
            let argmax = argmax.get(i).map_or(0, |&a| a as u32);
            let wants = seq.stream.needs_logits(argmax, &self.model.tokenizer);
            let logits = logits.as_ref().filter(|_| wants).map(|l| l[i * vocab..(i + 1) * vocab].to_vec());
            seq.stream.step = Some(StepOut { logits, argmax, finite: sums.get(i).is_some_and(|s| s.is_finite()) });
        }
        Ok(())
    }

    /// Each sequence with a step's output chooses its next token; those that end free their slots.
    fn sample(&mut self, events: &mut Vec<BatchEvent>) -> Result<()> {
        for slot in &mut self.slots {
            let Some(seq) = slot.seq.as_mut().filter(|q| q.stream.step.is_some()) else { continue };
            let id = seq.id;
            // a stream of max_tokens 0 is finished from the start: its prompt is read, nothing is sampled
            if !seq.stream.finished {
                if let Some(t) = seq.stream.accept(&self.model.tokenizer)? {
                    events.push(BatchEvent::Token(id, t));
                }
            }
            if seq.stream.finished {
                let seq = slot.seq.take().expect("checked above");
                events.push(BatchEvent::Finished(id, seq.stream.into_generation()));
            }
        }
        Ok(())
    }
}
