//! olmoe (llama.cpp's `LLM_ARCH_OLMOE`): OLMoE-1B-7B and its instruct models. llama's block with NeoX rope, Q and K
//! RMS-normalized over each whole projection (not per head) before rope, and a mixture of experts in place of the
//! feed-forward: softmax over all experts, the top K, their probabilities as they are; the experts' width is
//! `olmoe.feed_forward_length`.
//!
//! Reference: Hugging Face's `modeling_olmoe.py`; llama.cpp's `llm_build_olmoe`.

use super::common::{self, Extras, QkNorm};
use super::graph::llama_layer;
use super::hparams::Hparams;
use super::moe::{self, MoeDefaults, Width};
use super::row::Arch;
use super::spec::{Activation, DecoderConfig, Gating};
use crate::error::Result;
use crate::ops::RopeMode;

pub(crate) const OLMOE: Arch = Arch {
    name: "olmoe",
    models: "OLMoE",
    configure,
    block: |ld, l, cfg| common::block(ld, l, cfg, Extras { qk_norm: QkNorm::Whole, ..Extras::default() }),
    layer: llama_layer,
};

fn configure(h: &Hparams, cfg: &mut DecoderConfig) -> Result<()> {
    cfg.rope_mode = RopeMode::Neox;
    let defaults = MoeDefaults {
        required: true,
        width: Width::FeedForward,
        gating: Gating::Softmax,
        norm_weights: false,
        shared: false,
        act: Activation::Silu,
    };
    cfg.experts = moe::read(h, cfg, defaults)?;
    Ok(())
}
