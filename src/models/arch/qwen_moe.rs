//! qwen2moe and qwen3moe (llama.cpp's `LLM_ARCH_QWEN2MOE`, `LLM_ARCH_QWEN3MOE`): Qwen1.5-MoE-A2.7B and
//! Qwen2-57B-A14B; Qwen3-30B-A3B, Qwen3-235B-A22B and Qwen3-Coder-30B-A3B. Their attention is Qwen2's (Q, K and V
//! biased) and Qwen3's (per-head Q and K norms, a head width of its own); every block's feed-forward is a mixture
//! of experts: softmax over all experts, the top K, their probabilities as they are (qwen2moe, plus a shared
//! expert gated by a sigmoid) or renormalized to sum to 1 (qwen3moe).
//!
//! Reference: Hugging Face's `modeling_qwen2_moe.py` and `modeling_qwen3_moe.py`; llama.cpp's
//! `llm_build_qwen2moe`, `llm_build_qwen3moe`.

use super::common::{self, Extras, QkNorm};
use super::graph::llama_layer;
use super::hparams::Hparams;
use super::moe::{self, MoeDefaults, Width};
use super::row::Arch;
use super::spec::{Activation, DecoderConfig, Gating};
use crate::error::Result;
use crate::ops::RopeMode;

pub(crate) const QWEN2MOE: Arch = Arch {
    name: "qwen2moe",
    models: "Qwen1.5-MoE, Qwen2-57B-A14B",
    configure: |h, cfg| configure(h, cfg, false),
    block: |ld, l, cfg| common::block(ld, l, cfg, Extras { qkv_bias: true, ..Extras::default() }),
    layer: llama_layer,
};

pub(crate) const QWEN3MOE: Arch = Arch {
    name: "qwen3moe",
    models: "Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder",
    configure: |h, cfg| configure(h, cfg, true),
    block: |ld, l, cfg| common::block(ld, l, cfg, Extras { qk_norm: QkNorm::PerHead, ..Extras::default() }),
    layer: llama_layer,
};

/// NeoX rope and the experts; `qwen3`: renormalized weights and no shared expert (qwen2moe: as they are, and one).
fn configure(h: &Hparams, cfg: &mut DecoderConfig, qwen3: bool) -> Result<()> {
    cfg.rope_mode = RopeMode::Neox;
    let defaults = MoeDefaults {
        required: true,
        width: Width::PerUsedExpert,
        gating: Gating::Softmax,
        norm_weights: qwen3,
        shared: !qwen3,
        act: Activation::Silu,
    };
    cfg.experts = moe::read(h, cfg, defaults)?;
    Ok(())
}
