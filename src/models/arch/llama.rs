//! llama (llama.cpp's `LLM_ARCH_LLAMA`): SmolLM2, TinyLlama, Llama 2 and 3.x, Mistral 7B and Mixtral (their files
//! say `llama`). Rope on adjacent pairs (the converter permuted Q and K for it), SwiGLU, sliding-window attention
//! on every layer when the file gives a window (`llama.attention.sliding_window`, Mistral v0.1's 4096), and a
//! mixture of experts in place of the feed-forward where `llama.expert_count` says (Mixtral: softmax over all
//! experts, the top K renormalized, each expert `feed_forward_length` wide).
//!
//! Reference: Hugging Face's `modeling_llama.py`, `modeling_mistral.py` and `modeling_mixtral.py`; llama.cpp's
//! `llm_build_llama`.

use super::common::{self, Extras};
use super::graph::llama_layer;
use super::loader::Loader;
use super::moe::{self, MoeDefaults, Width};
use super::row::Arch;
use super::spec::{Activation, Block, DecoderConfig, Gating};
use crate::error::Result;
use crate::models::arch::hparams::Hparams;

pub(crate) const LLAMA: Arch = Arch {
    name: "llama",
    models: "SmolLM2, TinyLlama, Llama 2 and 3.x, Mistral, Mixtral",
    configure,
    block,
    layer: llama_layer,
};

fn configure(h: &Hparams, cfg: &mut DecoderConfig) -> Result<()> {
    let rope = (cfg.rope_base, cfg.rope_scale);
    common::sliding_window(h, cfg, |_| true, rope)?;
    let defaults = MoeDefaults {
        required: false,
        width: Width::FeedForward,
        gating: Gating::Softmax,
        norm_weights: true,
        shared: false,
        act: Activation::Silu,
    };
    cfg.experts = moe::read(h, cfg, defaults)?;
    Ok(())
}

fn block(ld: &Loader, l: usize, cfg: &DecoderConfig) -> Result<Block> {
    common::block(ld, l, cfg, Extras::default())
}
