//! qwen35, qwen35moe and qwen3next (llama.cpp's `LLM_ARCH_QWEN35`, `LLM_ARCH_QWEN35MOE`, `LLM_ARCH_QWEN3NEXT`):
//! Qwen3.5 (dense and MoE sizes) and Qwen3-Next. Hybrid stacks: gated delta-net layers ([`super::linear`]) with
//! one full-attention layer every `full_attention_interval` (4 unless the file says, or the layers marked in
//! `attention.recurrent_layers`); the attention's Q projection gives each head its queries and an output gate
//! (`[H, 2·D]`), its Q and K RMS-normed per head, rope NeoX over the first `rope.dimension_count` dims (Qwen3.5's
//! sectioned rope is that for text, its sections all on the token's position); the pre-feed-forward norm named
//! `post_attention_norm`; SwiGLU, or a mixture of experts (softmax, top K renormalized) with a sigmoid-gated
//! shared expert. The converters fold the `1 + w` of these models' RMS norms into the weights, except the delta
//! net's own norm. Qwen3.5's files order the value heads so that value head j reads key head j mod Hk;
//! Qwen3-Next's keep them grouped (key head j / r) and hold β's and the decay's logits in one `ssm_ba`.
//! Trailing multi-token-prediction blocks (`nextn_predict_layers`) are not part of the forward pass and are
//! skipped, as llama.cpp skips them.
//!
//! Reference: `transformers`' `modeling_qwen3_next.py` and `modeling_qwen3_5.py`; llama.cpp's `qwen35.cpp`,
//! `qwen35moe.cpp`, `qwen3next.cpp`, `delta-net-base.cpp`.

use super::common::{self, Extras, QkNorm};
use super::graph::llama_layer;
use super::hparams::Hparams;
use super::loader::Loader;
use super::moe::{self, MoeDefaults, Width};
use super::row::Arch;
use super::spec::{Activation, Block, DecoderConfig, Ffn, Gating, LinearConfig, Mixer};
use crate::error::Result;
use crate::ops::RopeMode;

pub(crate) const QWEN35: Arch = Arch {
    name: "qwen35",
    models: "Qwen3.5 (dense)",
    configure: |h, cfg| configure(h, cfg, Family::Qwen35),
    block,
    layer: llama_layer,
};

pub(crate) const QWEN35MOE: Arch = Arch {
    name: "qwen35moe",
    models: "Qwen3.5 MoE",
    configure: |h, cfg| configure(h, cfg, Family::Qwen35Moe),
    block,
    layer: llama_layer,
};

pub(crate) const QWEN3NEXT: Arch = Arch {
    name: "qwen3next",
    models: "Qwen3-Next-80B-A3B",
    configure: |h, cfg| configure(h, cfg, Family::Qwen3Next),
    block,
    layer: llama_layer,
};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Qwen35,
    Qwen35Moe,
    Qwen3Next,
}

const MAX_HEADS: usize = 1 << 12;
const MAX_WIDTH: usize = 1 << 16;

fn configure(h: &Hparams, cfg: &mut DecoderConfig, family: Family) -> Result<()> {
    cfg.rope_mode = RopeMode::Neox;
    if family != Family::Qwen35 {
        let defaults = MoeDefaults {
            required: true,
            width: Width::PerUsedExpert,
            gating: Gating::Softmax,
            norm_weights: true,
            shared: true,
            act: Activation::Silu,
        };
        cfg.experts = moe::read(h, cfg, defaults)?;
    }
    let mtp = match h.f.get(&format!("{}.nextn_predict_layers", h.arch)) {
        Some(_) => h.integer("nextn_predict_layers")? as usize,
        None => 0,
    };
    if mtp >= cfg.n_layers {
        let key = format!("{}.nextn_predict_layers", h.arch);
        return Err(h.error(format!("metadata {key} is {mtp}: it leaves none of the {} blocks", cfg.n_layers)));
    }
    cfg.n_layers -= mtp;
    let n_k_heads = h.count("ssm.group_count", None, MAX_HEADS)?;
    let n_v_heads = h.count("ssm.time_step_rank", None, MAX_HEADS)?;
    let head_dim = h.count("ssm.state_size", None, MAX_WIDTH)?;
    let inner = h.count("ssm.inner_size", None, MAX_HEADS * MAX_WIDTH)?;
    let conv_kernel = h.count("ssm.conv_kernel", None, 64)?;
    if n_v_heads % n_k_heads != 0 || inner != n_v_heads * head_dim || conv_kernel < 2 {
        return Err(h.error(format!(
            "ssm.inner_size {inner} must be ssm.time_step_rank {n_v_heads} × ssm.state_size {head_dim}, the value \
             heads a multiple of ssm.group_count {n_k_heads}, and ssm.conv_kernel {conv_kernel} at least 2"
        )));
    }
    let layers = recurrent_layers(h, cfg.n_layers, mtp)?;
    rope_sections(h, cfg.rope_dims)?;
    let grouped = family == Family::Qwen3Next;
    cfg.linear = Some(LinearConfig { conv_kernel, n_k_heads, n_v_heads, head_dim, grouped, layers, mtp_layers: mtp });
    Ok(())
}

/// Which of the first `n` layers are gated delta-net layers: `attention.recurrent_layers` (one entry a block,
/// the prediction blocks' included), else every layer but each `full_attention_interval`-th.
fn recurrent_layers(h: &Hparams, n: usize, mtp: usize) -> Result<Vec<bool>> {
    let key = format!("{}.attention.recurrent_layers", h.arch);
    if let Some(v) = h.f.get(&key) {
        let a = v
            .as_array()
            .filter(|a| a.len() == n + mtp)
            .ok_or_else(|| h.error(format!("metadata {key} must be an array of {} entries, one a block", n + mtp)))?;
        let flag = |i: usize| a.get(i).and_then(|e| e.as_bool().or_else(|| e.as_u64().map(|x| x != 0)));
        let layers = (0..n).map(|i| flag(i).ok_or_else(|| h.error(format!("{key}[{i}] is not a boolean"))));
        let layers = layers.collect::<Result<Vec<bool>>>()?;
        if layers.iter().all(|&r| r) {
            return Err(h.error(format!("metadata {key} marks every block recurrent: no full-attention layer")));
        }
        return Ok(layers);
    }
    let key = format!("{}.full_attention_interval", h.arch);
    let interval = h.count("full_attention_interval", Some(4), usize::MAX)?;
    if interval > n {
        let why = format!("a full-attention layer every {interval} blocks names none of the {n}");
        return Err(h.error(format!("metadata {key} is {interval}: {why}")));
    }
    Ok((0..n).map(|i| (i + 1) % interval != 0).collect())
}

/// The multimodal rope's sections (`rope.dimension_sections`, Qwen3.5's: pairs taking the token's time, height
/// and width positions, all the token's position for text), where the file has them: they must cover the rotary
/// width's pairs exactly.
fn rope_sections(h: &Hparams, rope_dims: usize) -> Result<()> {
    let key = format!("{}.rope.dimension_sections", h.arch);
    let Some(v) = h.f.get(&key) else { return Ok(()) };
    let a = v.as_array().ok_or_else(|| h.error(format!("metadata {key} is {}, not an array", v.a_type_name())))?;
    let mut sum = 0u64;
    for i in 0..a.len().min(8) {
        let n = a.get(i).and_then(|e| e.as_u64()).ok_or_else(|| h.error(format!("{key}[{i}] is not a count")))?;
        sum = sum.saturating_add(n);
    }
    if a.len() > 4 || sum != (rope_dims / 2) as u64 {
        let pairs = rope_dims / 2;
        return Err(h.error(format!(
            "metadata {key} has {} sections summing to {sum}: at most 4, summing to the {pairs} rotating pairs \
             (rope.dimension_count / 2)",
            a.len()
        )));
    }
    Ok(())
}

/// Block `l`: a gated delta-net layer or a gated full-attention layer, each with the pre-feed-forward norm
/// `post_attention_norm` and the dense or mixture-of-experts feed-forward.
fn block(ld: &Loader, l: usize, cfg: &DecoderConfig) -> Result<Block> {
    let extras =
        Extras { qk_norm: QkNorm::PerHead, gated_q: true, ffn_norm: Some("post_attention_norm"), ..Extras::default() };
    let Some(lin) = cfg.linear.as_ref().filter(|_| cfg.is_recurrent(l)) else {
        return common::block(ld, l, cfg, extras);
    };
    let e = cfg.n_embd;
    let w = |s: &str| format!("blk.{l}.{s}.weight");
    Ok(Block {
        attn_norm: ld.tensor(&w("attn_norm"), &[e])?,
        mixer: Mixer::Linear(Box::new(super::linear::load(ld, l, cfg, lin)?)),
        post_attn_norm: None,
        ffn_norm: ld.tensor(&w("post_attention_norm"), &[e])?,
        ffn: match &cfg.experts {
            Some(x) => Ffn::Experts(Box::new(moe::experts(ld, l, cfg, x, false)?)),
            None => common::dense_ffn(ld, l, cfg)?,
        },
        post_ffn_norm: None,
    })
}
