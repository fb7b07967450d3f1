//! Generation, one state machine: a prompt's prefill (reusing the cached prefix of the conversation), then
//! decode steps with a sampler, streamed token by token, until an end-of-generation token, a stop string, the
//! token limit, the context's end or the caller's stop; and what it takes and gives (options, the result with its
//! timings, why it stopped, the stream of tokens in progress and its incremental detokenizer).
//!
//! The stream is a [`TokenStream`] that the caller pulls from ([`LanguageModel::next_token_async`]): the CLI's
//! callback loop (`LanguageModel::generate`) and the wasm package's `generate` (which lets the page run between
//! tokens) are both built on it.

use super::{LanguageModel, StepOut};
use crate::error::{Error, Result};
use crate::models::chat::Message;
use crate::models::sampling::{Sampler, SamplingOptions};
use crate::models::tokenizer::Tokenizer;

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    /// Most tokens to generate.
    pub max_tokens: usize,
    pub sampling: SamplingOptions,
    /// Generation stops when the text produced contains one of these (the text then ends before it).
    pub stop: Vec<String>,
    /// Go on past the model's end-of-generation tokens (sampling another token instead), as llama.cpp's
    /// `--ignore-eos` does: for benchmarks that need answers of a set length.
    pub ignore_eos: bool,
}

/// Stop strings a generation may have (OpenAI's API takes 4).
pub const MAX_STOP_STRINGS: usize = 16;
/// Bytes a stop string may have.
pub const MAX_STOP_BYTES: usize = 1024;

impl GenerateOptions {
    /// Checks the options: the sampling ranges ([`SamplingOptions::validate`]), no empty stop string (which
    /// would stop before the first token), at most [`MAX_STOP_STRINGS`] stop strings of at most
    /// [`MAX_STOP_BYTES`] bytes (each is looked for at every token).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the option and its valid range.
    pub fn validate(&self) -> Result<()> {
        self.sampling.validate()?;
        let invalid = |reason: String| Err(crate::error::Error::InvalidArgument { op: "generate", reason });
        if self.stop.iter().any(String::is_empty) {
            return invalid("a stop string is empty: each must have at least one character".into());
        }
        if self.stop.len() > MAX_STOP_STRINGS {
            return invalid(format!("{} stop strings: at most {MAX_STOP_STRINGS}", self.stop.len()));
        }
        if let Some(long) = self.stop.iter().find(|s| s.len() > MAX_STOP_BYTES) {
            return invalid(format!("a stop string of {} bytes: at most {MAX_STOP_BYTES}", long.len()));
        }
        Ok(())
    }
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions { max_tokens: 128, sampling: SamplingOptions::default(), stop: vec![], ignore_eos: false }
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token (not included in the output).
    EndOfGeneration,
    /// [`GenerateOptions::max_tokens`] were produced.
    MaxTokens,
    /// A stop string appeared.
    StopString,
    /// The KV cache is full ([`LanguageModel::context`](super::LanguageModel::context) positions).
    ContextFull,
    /// The callback asked to stop.
    Cancelled,
}

/// A finished generation with its timings (ms).
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// The prompt's ids.
    pub prompt: Vec<u32>,
    /// Prompt tokens actually evaluated (the rest were already in the cache).
    pub prefill_tokens: usize,
    /// The generated ids (without the end-of-generation token).
    pub tokens: Vec<u32>,
    /// Their text (special tokens left out).
    pub text: String,
    pub stop: StopReason,
    /// Time of the prefill, in ms.
    pub prefill_ms: f64,
    /// Time of the decode steps (evaluating each generated token but the last), in ms.
    pub decode_ms: f64,
    /// Decode steps run.
    pub decode_steps: usize,
}

impl Generation {
    /// Prefill speed in tokens/s.
    pub fn prefill_tokens_per_s(&self) -> f64 {
        self.prefill_tokens as f64 / (self.prefill_ms / 1e3).max(1e-9)
    }

    /// Decode speed in tokens/s.
    pub fn decode_tokens_per_s(&self) -> f64 {
        self.decode_steps as f64 / (self.decode_ms / 1e3).max(1e-9)
    }

    /// A generation of `prompt` cancelled before its prefill: nothing evaluated, no tokens.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    pub(crate) fn cancelled(prompt: &[u32]) -> Generation {
        Generation {
            prompt: prompt.to_vec(),
            prefill_tokens: 0,
            tokens: vec![],
            text: String::new(),
            stop: StopReason::Cancelled,
            prefill_ms: 0.0,
            decode_ms: 0.0,
            decode_steps: 0,
        }
    }
}

/// Milliseconds from an arbitrary start.
pub(crate) fn now_ms() -> f64 {
    #[cfg(target_arch = "wasm32")]
    {
        js_sys::Date::now()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64() * 1e3
    }
}

/// One generated token: its id and the UTF-8 text it releases (empty while a character's bytes are incomplete, or
/// while the text could be the start of a stop string; the concatenated texts always equal the final text). The
/// stream's last token may be the end-of-generation token carrying text held back for a stop string that never
/// came; it is not in [`Generation::tokens`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub id: u32,
    pub text: String,
}

/// What a stream needs before its next choice.
pub(super) enum Pending {
    /// Nothing: its step's output is there (after the prefill).
    None,
    /// The decode step of this token.
    Eval(u32),
    /// The stream ended instead, with this last token (text held back for a stop string), if any.
    Ended(Option<Token>),
}

/// A generation in progress: made by [`LanguageModel::start_async`](super::LanguageModel::start_async), advanced by
/// [`LanguageModel::next_token_async`](super::LanguageModel::next_token_async) (each call runs one decode step), ended by the
/// model's end-of-generation token, a stop string, the token limit, a full context or [`TokenStream::cancel`].
/// Holds no borrow of the model, so the caller may do other work between calls (the wasm package lets the page
/// run between tokens).
pub struct TokenStream {
    pub(super) sampler: Sampler,
    pub(super) options: GenerateOptions,
    /// The output of the last evaluation, not yet sampled from.
    pub(super) step: Option<StepOut>,
    /// A token returned but not yet evaluated (evaluated at the start of the next call).
    pub(super) pending: Option<u32>,
    pub(super) history: Vec<u32>,
    pub(super) text: TextStream,
    pub(super) out: Generation,
    pub(super) finished: bool,
    /// Bytes of `out.text` returned in tokens so far: text that could be the start of a stop string is held back
    /// until it cannot (llama-server's rule), so streamed text always equals the final text.
    pub(super) emitted: usize,
}

impl TokenStream {
    /// A stream for `prompt`, of which the last `prefill_tokens` are being evaluated (the rest were cached); its
    /// first step's output is set by the caller once the prefill has run.
    pub(super) fn new(prompt: &[u32], prefill_tokens: usize, options: &GenerateOptions) -> TokenStream {
        let out = Generation {
            prompt: prompt.to_vec(),
            prefill_tokens,
            tokens: vec![],
            text: String::new(),
            stop: StopReason::MaxTokens,
            prefill_ms: 0.0,
            decode_ms: 0.0,
            decode_steps: 0,
        };
        TokenStream {
            sampler: Sampler::new(options.sampling.clone()),
            options: options.clone(),
            step: None,
            pending: None,
            history: prompt.to_vec(),
            text: TextStream::default(),
            out,
            finished: options.max_tokens == 0,
            emitted: 0,
        }
    }

    /// Whether the next choice needs the step's logits (a sampler other than the device's argmax).
    pub(super) fn wants_logits(&self) -> bool {
        !self.options.sampling.is_greedy() || self.options.ignore_eos
    }

    /// Whether a step whose device argmax is `argmax` needs its logits after all: a sampler other than the argmax,
    /// or an argmax that ends the generation under `ignore_eos` (the choice is then among the other tokens).
    pub(super) fn needs_logits(&self, argmax: u32, tokenizer: &Tokenizer) -> bool {
        !self.options.sampling.is_greedy() || (self.options.ignore_eos && tokenizer.is_eog(argmax))
    }

    /// Before a decode step: the token returned last, to evaluate now, unless the stream ends first (its token
    /// limit reached, or the KV cache's `cached` of `context` positions full).
    pub(super) fn take_pending(&mut self, cached: usize, context: usize) -> Pending {
        let Some(prev) = self.pending.take() else { return Pending::None };
        if self.out.tokens.len() >= self.options.max_tokens {
            return Pending::Ended(self.end(StopReason::MaxTokens, prev));
        }
        if cached >= context {
            return Pending::Ended(self.end(StopReason::ContextFull, prev));
        }
        Pending::Eval(prev)
    }

    /// After an evaluation (`step` set): chooses the next token and returns it with the text it releases, or
    /// ends the stream (an end-of-generation token, a stop string, the token limit).
    pub(super) fn accept(&mut self, tokenizer: &Tokenizer) -> Result<Option<Token>> {
        let step = self.step.take().expect("an evaluated step to sample from");
        if !step.finite || step.logits.as_ref().is_some_and(|l| l.iter().any(|x| !x.is_finite())) {
            let reason = format!(
                "the model's logits are not finite (NaN or infinite) at token {} of the answer: an activation \
                 overflowed or a weight is not finite",
                self.out.tokens.len()
            );
            return Err(Error::InvalidArgument { op: "generate", reason });
        }
        // greedy under ignore_eos: the device's argmax unless it ends the generation (a greedy sampler's choice
        // over finite logits is that argmax)
        let logits = step.logits.as_ref().filter(|_| self.needs_logits(step.argmax, tokenizer));
        let mut next = match logits {
            Some(l) => self.sampler.sample(l, &self.history),
            None => step.argmax,
        };
        if let (true, Some(l)) = (self.options.ignore_eos && tokenizer.is_eog(next), logits) {
            // the choice among the tokens that do not end the generation (the logits are read when ignore_eos)
            let mut l = l.clone();
            for (i, x) in l.iter_mut().enumerate() {
                if tokenizer.is_eog(i as u32) {
                    *x = f32::NEG_INFINITY;
                }
            }
            next = self.sampler.sample(&l, &self.history);
        }
        if tokenizer.is_eog(next) {
            return Ok(self.end(StopReason::EndOfGeneration, next));
        }
        self.out.tokens.push(next);
        self.history.push(next);
        let piece = self.text.step(tokenizer, next)?;
        let before = self.out.text.len();
        self.out.text.push_str(&piece);
        // a stop string not found before ends in the new piece: only the text from its length back is searched
        let longest = self.options.stop.iter().map(String::len).max().unwrap_or(0);
        let mut from = before.saturating_sub(longest.saturating_sub(1));
        while !self.out.text.is_char_boundary(from) {
            from -= 1;
        }
        let window = &self.out.text[from..];
        if let Some(at) = self.options.stop.iter().filter_map(|x| window.find(x.as_str())).min().map(|i| from + i) {
            // what comes before the stop string and was held back goes out with this token
            self.out.text.truncate(at.max(self.emitted));
            let text = self.release(true);
            self.finish(StopReason::StopString);
            return Ok(Some(Token { id: next, text }));
        }
        self.pending = Some(next);
        let last = self.out.tokens.len() >= self.options.max_tokens;
        if last {
            self.flush_text();
        }
        let text = self.release(last);
        if last {
            self.finish(StopReason::MaxTokens);
        }
        Ok(Some(Token { id: next, text }))
    }

    /// The generation so far (all of it once the stream has ended).
    pub fn generation(&self) -> &Generation {
        &self.out
    }

    /// Whether the stream has ended (the next call returns `None`).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Ends the stream (stop reason [`StopReason::Cancelled`]); the tokens returned so far stay in the cache, and
    /// the final text is what was returned (text held back for a possible stop string is dropped).
    pub fn cancel(&mut self) {
        if !self.finished {
            self.out.text.truncate(self.emitted);
        }
        self.finish(StopReason::Cancelled);
    }

    /// The text of `out.text` not returned yet that can be returned now: all of it when `all` (the stream ends
    /// without a stop string), else up to the longest tail that could begin one of the stop strings.
    pub(super) fn release(&mut self, all: bool) -> String {
        let text = &self.out.text[self.emitted..];
        let held = if all {
            0
        } else {
            self.options
                .stop
                .iter()
                .flat_map(|st| {
                    st.char_indices().skip(1).take_while(|&(k, _)| k <= text.len()).map(move |(k, _)| &st[..k])
                })
                .filter(|prefix| text.ends_with(prefix))
                .map(str::len)
                .max()
                .unwrap_or(0)
        };
        let end = self.out.text.len() - held;
        let piece = self.out.text[self.emitted..end].to_string();
        self.emitted = end;
        piece
    }

    /// Ends the stream for `stop` (not a stop string); the held-back text, if any, comes back as a last token
    /// `id` (the token that ended it, or the last one generated).
    pub(super) fn end(&mut self, stop: StopReason, id: u32) -> Option<Token> {
        self.flush_text();
        let tail = self.release(true);
        self.finish(stop);
        (!tail.is_empty()).then_some(Token { id, text: tail })
    }

    /// At the end: the text the detokenizer held back for an incomplete character goes out as it decodes (with
    /// U+FFFD for the bytes that never completed one), as the whole generation's text decodes.
    fn flush_text(&mut self) {
        let held = std::mem::take(&mut self.text.held);
        self.out.text.push_str(&held);
    }

    /// The finished generation.
    pub fn into_generation(self) -> Generation {
        self.out
    }

    pub(super) fn finish(&mut self, stop: StopReason) {
        if !self.finished {
            self.out.stop = stop;
            self.finished = true;
        }
    }
}

/// Incremental detokenization (as the `tokenizers` crate's `DecodeStream`): the text of a window of recent ids
/// is decoded again with each new id, and only what it adds past the window's earlier text is emitted, once it
/// no longer ends in an incomplete character (U+FFFD).
#[derive(Default)]
pub(super) struct TextStream {
    ids: Vec<u32>,
    prefix: String,
    /// Ids of the window already emitted through `prefix`.
    prefix_index: usize,
    /// The window's text past `prefix` not emitted because it ends in an incomplete character.
    held: String,
}

impl TextStream {
    pub(super) fn step(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = tokenizer.decode(&self.ids, true)?;
        if text.len() <= self.prefix.len() || text.ends_with('\u{FFFD}') {
            self.held = text.get(self.prefix.len()..).unwrap_or_default().to_string();
            return Ok(String::new());
        }
        self.held.clear();
        let new = match text.strip_prefix(self.prefix.as_str()) {
            Some(n) => n.to_string(),
            None => text.get(self.prefix.len()..).unwrap_or_default().to_string(),
        };
        let new_prefix_index = self.ids.len() - self.prefix_index;
        self.ids.drain(..self.prefix_index);
        self.prefix = tokenizer.decode(&self.ids, true)?;
        self.prefix_index = new_prefix_index;
        Ok(new)
    }
}

impl LanguageModel {
    /// Starts generating a continuation of `prompt` (token ids): evaluates the prompt (only what is not already in
    /// the cache: a prompt that starts with the cached tokens evaluates the rest, so a chat's earlier turns are not
    /// evaluated again) and returns the stream to pull tokens from.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for options out of range ([`GenerateOptions::validate`]), an empty prompt, one
    /// longer than the context (naming both lengths) or an id outside the vocabulary; device errors from the run.
    pub async fn start_async(&mut self, prompt: &[u32], options: &GenerateOptions) -> Result<TokenStream> {
        self.start_with_progress_async(prompt, options, &mut |_, _| {}).await
    }

    /// [`LanguageModel::start_async`], calling `progress(done, total)` as the prompt is evaluated: `(0, total)` first,
    /// then after each chunk of
    /// up to [`LanguageModelOptions::max_chunk`](super::LanguageModelOptions::max_chunk) tokens (powers of two: 37 new tokens
    /// run as 32 + 4 + 1), `total` being the tokens not already in the cache. For a page's "reading the prompt"
    /// line, where a prefill on a slow device takes seconds.
    ///
    /// # Errors
    /// As [`LanguageModel::start_async`].
    pub async fn start_with_progress_async(
        &mut self,
        prompt: &[u32],
        options: &GenerateOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<TokenStream> {
        options.validate()?;
        let cap = self.context();
        if prompt.is_empty() {
            let reason = "the prompt is empty (0 tokens): a model needs at least one token to continue".to_string();
            return Err(Error::InvalidArgument { op: "generate", reason });
        }
        if prompt.len() >= cap {
            let reason = format!("the prompt has {} tokens; the context holds {cap} (prompt + output)", prompt.len());
            return Err(Error::InvalidArgument { op: "generate", reason });
        }
        // reuse the cached prefix, but evaluate at least the prompt's last token for its logits
        let keep = self.cached.iter().zip(prompt).take_while(|(a, b)| a == b).count().min(prompt.len() - 1);
        let keep = super::continuation(&self.cache, self.cached.len(), keep);
        self.truncate(keep);
        let mut s = TokenStream::new(prompt, prompt.len() - keep, options);
        let t0 = now_ms();
        let step = self.eval_with_progress(&prompt[keep..], s.wants_logits(), progress).await?;
        s.out.prefill_ms = now_ms() - t0;
        s.step = Some(step);
        Ok(s)
    }

    /// The next token of `s`, or `None` once it has ended (see [`TokenStream`]; the reason is in
    /// [`Generation::stop`]). Runs the decode step of the token returned before. Decode time counts this call's
    /// own time only, not the caller's between calls.
    ///
    /// # Errors
    /// Device errors from the step, or a tokenizer error; the stream has then ended.
    pub async fn next_token_async(&mut self, s: &mut TokenStream) -> Result<Option<Token>> {
        if s.finished {
            return Ok(None);
        }
        let t0 = now_ms();
        let r = self.advance(s).await;
        if s.out.decode_steps > 0 {
            s.out.decode_ms += now_ms() - t0;
        }
        if r.is_err() {
            s.finished = true;
        }
        r
    }

    async fn advance(&mut self, s: &mut TokenStream) -> Result<Option<Token>> {
        match s.take_pending(self.cached.len(), self.context()) {
            Pending::Ended(end) => return Ok(end),
            Pending::Eval(prev) => {
                s.step = Some(self.eval(&[prev], s.wants_logits()).await?);
                s.out.decode_steps += 1;
            }
            Pending::None => {}
        }
        s.accept(&self.tokenizer)
    }

    /// Generates a continuation of `prompt` (token ids), calling `on_token(text, id)` for each token as it is
    /// produced (`text` is the new UTF-8 text, possibly empty while a character's bytes are incomplete); a `false`
    /// return stops. The cache keeps the conversation, as [`LanguageModel::start_async`] says.
    ///
    /// # Errors
    /// As [`LanguageModel::start_async`] and [`LanguageModel::next_token_async`].
    pub async fn generate_async(
        &mut self,
        prompt: &[u32],
        options: &GenerateOptions,
        mut on_token: impl FnMut(&str, u32) -> bool,
    ) -> Result<Generation> {
        let mut s = self.start_async(prompt, options).await?;
        while let Some(t) = self.next_token_async(&mut s).await? {
            if !on_token(&t.text, t.id) {
                s.cancel();
            }
        }
        Ok(s.into_generation())
    }

    /// Blocking form of [`LanguageModel::generate_async`] (native only).
    ///
    /// # Errors
    /// As [`LanguageModel::generate_async`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn generate(
        &mut self,
        prompt: &[u32],
        options: &GenerateOptions,
        on_token: impl FnMut(&str, u32) -> bool,
    ) -> Result<Generation> {
        pollster::block_on(self.generate_async(prompt, options, on_token))
    }

    /// The prompt of a conversation: the file's chat template applied to `messages`, ending with the
    /// assistant's turn opened, as ids ([`Prompter::chat`](super::Prompter::chat)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the file has no chat template, it does not compile (the message says why;
    /// plain generation works all the same), or rendering fails.
    pub fn chat_prompt(&self, messages: &[Message]) -> Result<Vec<u32>> {
        self.prompter().chat(messages)
    }

    /// [`LanguageModel::chat_prompt`] with the splitter of the answer's reasoning ([`Prompter::chat_turn`]).
    ///
    /// # Errors
    /// As [`LanguageModel::chat_prompt`].
    ///
    /// [`Prompter::chat_turn`]: super::Prompter::chat_turn
    pub fn chat_turn(&self, messages: &[Message]) -> Result<super::ChatTurn> {
        self.prompter().chat_turn(messages)
    }
}
