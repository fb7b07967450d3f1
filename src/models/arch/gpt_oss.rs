//! gpt-oss (llama.cpp's `LLM_ARCH_OPENAI_MOE`, `general.architecture` `gpt-oss`): gpt-oss-20b and gpt-oss-120b.
//! Attention with biases on Q, K, V and the output, a sink logit per head in each softmax's denominator
//! (`attn_sinks`), sliding-window attention on every other layer from the first (`attention.sliding_window`, 128;
//! `attention.sliding_window_pattern`, 2), YaRN on every layer, head width 64 apart from E / H; the pre-FFN norm
//! is named `post_attention_norm`; every feed-forward is a mixture of experts: the router's (biased) top K logits,
//! softmax over those K, the experts' biased projections with the clamped SwiGLU (`swiglu_oai`), their matrices
//! usually MXFP4.
//!
//! Reference: Hugging Face's `modeling_gpt_oss.py`; llama.cpp's `llm_build_openai_moe_iswa`.

use super::common::{self, Extras};
use super::graph::llama_layer;
use super::hparams::Hparams;
use super::moe::{self, MoeDefaults, Width};
use super::row::Arch;
use super::spec::{Activation, DecoderConfig, Gating};
use crate::error::Result;
use crate::ops::RopeMode;

pub(crate) const GPT_OSS: Arch = Arch {
    name: "gpt-oss",
    models: "gpt-oss-20b, gpt-oss-120b",
    configure,
    block: |ld, l, cfg| {
        let extras = Extras {
            qkv_bias: true,
            wo_bias: true,
            sinks: true,
            ffn_norm: Some("post_attention_norm"),
            expert_biases: true,
            ..Extras::default()
        };
        common::block(ld, l, cfg, extras)
    },
    layer: llama_layer,
};

fn configure(h: &Hparams, cfg: &mut DecoderConfig) -> Result<()> {
    cfg.rope_mode = RopeMode::Neox;
    // llama.cpp's set_swa_pattern(n): layer l slides unless l % n == n − 1
    let n = h.count("attention.sliding_window_pattern", Some(2), cfg.n_layers.max(1))?;
    let base_swa = h.number("rope.freq_base_swa", cfg.rope_base, |x| x > 1.0, "above 1")?;
    common::sliding_window(h, cfg, |l| l % n != n - 1, (base_swa, cfg.rope_scale))?;
    if cfg.sliding_window.is_none() {
        return Err(h.error(format!("metadata {}.attention.sliding_window is missing", h.arch)));
    }
    let defaults = MoeDefaults {
        required: true,
        width: Width::Required,
        gating: Gating::SoftmaxWeight,
        norm_weights: false,
        shared: false,
        act: Activation::SwigluOai,
    };
    cfg.experts = moe::read(h, cfg, defaults)?;
    Ok(())
}
