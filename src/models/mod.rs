//! Model runners built on the graph API: GGUF language models of every architecture [`arch`] builds ([`decoder`]
//! runs them), sentence embedders ([`bert`]), with their tokenizers ([`tokenizer`], through Hugging Face's `tokenizers` crate), chat templates
//! ([`chat`], through `minijinja`) and samplers ([`sampling`]). Enabled by the `models` feature (on by default).

pub mod arch;
pub mod bert;
pub mod chat;
pub mod decoder;
pub mod llama;
pub(crate) mod nn;
pub mod reasoning;
mod recommended;
pub mod sampling;
pub mod tokenizer;

pub use chat::{ChatTemplate, Message};
pub use decoder::stream::{
    GenerateOptions, Generation, StopReason, Token, TokenStream, MAX_STOP_BYTES, MAX_STOP_STRINGS,
};
pub use decoder::{ChatTurn, LanguageModel, LanguageModelOptions, Prompter};
pub use recommended::RecommendedSampling;
pub use sampling::{Sampler, SamplingOptions};
pub use tokenizer::Tokenizer;
