//! What generation takes and gives: options, the result with its timings, why it stopped.

use crate::models::sampling::SamplingOptions;

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    /// Most tokens to generate.
    pub max_tokens: usize,
    pub sampling: SamplingOptions,
    /// Generation stops when the text produced contains one of these (the text then ends before it).
    pub stop: Vec<String>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions { max_tokens: 128, sampling: SamplingOptions::default(), stop: vec![] }
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
    /// The KV cache is full ([`Llama::context`](super::Llama::context) positions).
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
