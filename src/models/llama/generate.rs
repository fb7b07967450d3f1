//! Generation: a prompt's prefill (reusing the cached prefix of the conversation), then decode steps with a
//! sampler, streamed token by token, until an end-of-generation token, a stop string, the token limit, the
//! context's end or the caller's stop.

use super::generation::{now_ms, GenerateOptions, Generation, StopReason};
use super::Llama;
use crate::models::chat::Message;
use crate::models::sampling::Sampler;
use crate::{Error, Result};

impl Llama {
    /// Generates a continuation of `prompt` (token ids), calling `on_token(text, id)` for each token as it is
    /// produced (`text` is the new UTF-8 text, possibly empty while a character's bytes are incomplete); a `false`
    /// return stops. The cache keeps the conversation: a prompt that starts with the cached tokens evaluates only
    /// the rest (a chat's earlier turns are not evaluated again).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty prompt, one longer than the context (naming both lengths) or an id
    /// outside the vocabulary; device errors from the runs.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        options: &GenerateOptions,
        mut on_token: impl FnMut(&str, u32) -> bool,
    ) -> Result<Generation> {
        let cap = self.context();
        if prompt.is_empty() || prompt.len() >= cap {
            let reason = format!("the prompt has {} tokens; the context holds {cap} (prompt + output)", prompt.len());
            return Err(Error::InvalidArgument { op: "generate", reason });
        }
        // reuse the cached prefix, but evaluate at least the prompt's last token for its logits
        let keep = self.cached.iter().zip(prompt).take_while(|(a, b)| a == b).count().min(prompt.len() - 1);
        self.truncate(keep);
        let mut sampler = Sampler::new(options.sampling.clone());
        let greedy = options.sampling.is_greedy();
        let t0 = now_ms();
        let mut step = self.eval(&prompt[keep..], !greedy)?;
        let prefill_ms = now_ms() - t0;
        let mut out = Generation {
            prompt: prompt.to_vec(),
            prefill_tokens: prompt.len() - keep,
            tokens: vec![],
            text: String::new(),
            stop: StopReason::MaxTokens,
            prefill_ms,
            decode_ms: 0.0,
            decode_steps: 0,
        };
        let tokenizer = self.tokenizer.clone();
        let mut stream = tokenizer.inner().decode_stream(true);
        let t1 = now_ms();
        let mut history = prompt.to_vec();
        while out.tokens.len() < options.max_tokens {
            let next = match &step.logits {
                Some(l) => sampler.sample(l, &history),
                None => step.argmax,
            };
            if self.tokenizer.is_eog(next) {
                out.stop = StopReason::EndOfGeneration;
                break;
            }
            out.tokens.push(next);
            history.push(next);
            let piece =
                stream.step(next).map_err(|e| Error::InvalidArgument { op: "decode", reason: e.to_string() })?;
            let piece = piece.unwrap_or_default();
            out.text.push_str(&piece);
            if let Some(at) = options.stop.iter().filter_map(|s| out.text.find(s.as_str())).min() {
                out.text.truncate(at);
                out.stop = StopReason::StopString;
                break;
            }
            if !on_token(&piece, next) {
                out.stop = StopReason::Cancelled;
                break;
            }
            if out.tokens.len() == options.max_tokens {
                break;
            }
            if self.cached.len() >= cap {
                out.stop = StopReason::ContextFull;
                break;
            }
            step = self.eval(&[next], !greedy)?;
            out.decode_steps += 1;
        }
        out.decode_ms = now_ms() - t1;
        Ok(out)
    }

    /// The prompt of a conversation: the file's chat template applied to `messages`, ending with the
    /// assistant's turn opened, as ids.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the file has no chat template or rendering fails.
    pub fn chat_prompt(&self, messages: &[Message]) -> Result<Vec<u32>> {
        let t = self.chat_template().ok_or_else(|| Error::InvalidArgument {
            op: "chat",
            reason: "the model file has no chat template (tokenizer.chat_template)".into(),
        })?;
        let text = t.render(messages, true, &self.tokenizer.bos_text, &self.tokenizer.eos_text)?;
        let mut ids = self.tokenizer.encode(&text)?;
        // a template that writes the BOS token itself gets no second one
        if self.tokenizer.bos.is_some() && ids.len() > 1 && ids[0] == ids[1] && Some(ids[0]) == self.tokenizer.bos {
            ids.remove(0);
        }
        Ok(ids)
    }
}
