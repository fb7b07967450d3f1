//! Generation: a prompt's prefill (reusing the cached prefix of the conversation), then decode steps with a
//! sampler, streamed token by token, until an end-of-generation token, a stop string, the token limit, the
//! context's end or the caller's stop.
//!
//! The stream is a [`TokenStream`] that the caller pulls from ([`Llama::next_token_async`]): the CLI's callback
//! loop (`Llama::generate`) and the wasm package's `generate` (which lets the page run between tokens) are both
//! built on it.

use super::generation::{now_ms, GenerateOptions, Generation, Pending, Token, TokenStream};
use super::Llama;
use crate::error::{Error, Result};
use crate::models::chat::Message;

impl Llama {
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

    /// [`Llama::start_async`], calling `progress(done, total)` as the prompt is evaluated: `(0, total)` first,
    /// then after each chunk of
    /// up to [`LlamaOptions::max_chunk`](super::LlamaOptions::max_chunk) tokens (powers of two: 37 new tokens
    /// run as 32 + 4 + 1), `total` being the tokens not already in the cache. For a page's "reading the prompt"
    /// line, where a prefill on a slow device takes seconds.
    ///
    /// # Errors
    /// As [`Llama::start_async`].
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
    /// return stops. The cache keeps the conversation, as [`Llama::start_async`] says.
    ///
    /// # Errors
    /// As [`Llama::start_async`] and [`Llama::next_token_async`].
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

    /// Blocking form of [`Llama::generate_async`] (native only).
    ///
    /// # Errors
    /// As [`Llama::generate_async`].
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
}
