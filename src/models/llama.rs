//! The decoder runner's names before it was named for what it runs (every architecture of [`super::arch`], not
//! only Llama's): kept for one release as deprecated aliases of [`super::decoder`]'s.

/// Renamed [`LanguageModel`](super::decoder::LanguageModel).
#[deprecated(since = "0.2.0", note = "renamed webtensor::models::LanguageModel")]
pub type Llama = super::decoder::LanguageModel;

/// Renamed [`LanguageModelOptions`](super::decoder::LanguageModelOptions).
#[deprecated(since = "0.2.0", note = "renamed webtensor::models::LanguageModelOptions")]
pub type LlamaOptions = super::decoder::LanguageModelOptions;

/// Renamed [`DecoderConfig`](super::decoder::DecoderConfig).
#[deprecated(since = "0.2.0", note = "renamed webtensor::models::decoder::DecoderConfig")]
pub type LlamaConfig = super::decoder::DecoderConfig;

pub use super::decoder::stream::{GenerateOptions, Generation, StopReason, Token, TokenStream};
pub use super::decoder::{batch, Prompter};
