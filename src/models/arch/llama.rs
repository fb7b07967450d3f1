//! llama (llama.cpp's `LLM_ARCH_LLAMA`): SmolLM2, TinyLlama, Llama 2 and 3.x, Mistral 7B (its files say
//! `llama`). Rope on adjacent pairs (the converter permuted Q and K for it), SwiGLU, and sliding-window attention
//! on every layer when the file gives a window (`llama.attention.sliding_window`, Mistral v0.1's 4096).
//!
//! Reference: Hugging Face's `modeling_llama.py` and `modeling_mistral.py`; llama.cpp's `llm_build_llama`.

use super::common::{self, Extras};
use super::graph::llama_layer;
use super::loader::Loader;
use super::row::Arch;
use super::spec::{Block, DecoderConfig};
use crate::error::Result;
use crate::models::arch::hparams::Hparams;

pub(crate) const LLAMA: Arch = Arch {
    name: "llama",
    models: "SmolLM2, TinyLlama, Llama 2 and 3.x, Mistral",
    configure,
    block,
    layer: llama_layer,
};

fn configure(h: &Hparams, cfg: &mut DecoderConfig) -> Result<()> {
    let rope = (cfg.rope_base, cfg.rope_scale);
    common::sliding_window(h, cfg, |_| true, rope)
}

fn block(ld: &Loader, l: usize, cfg: &DecoderConfig) -> Result<Block> {
    common::block(ld, l, cfg, Extras::default())
}
