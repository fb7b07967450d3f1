//! phi3 (llama.cpp's `LLM_ARCH_PHI3`): Phi-3 and Phi-3.5 mini. One fused QKV projection (`attn_qkv`: Q's rows,
//! then K's, then V's), multiplied as it is, and one fused gate-and-up (`ffn_up`: F gate rows, then F up rows),
//! split into its parts at load (one dual matmul reads both); NeoX rope; SwiGLU; sliding-window attention on
//! every layer when the file gives a window.
//! The 128k-context models' LongRoPE (factors long and short, and `rope.scaling.attn_factor`) as llama.cpp
//! applies it: see `load_weights`.
//!
//! Reference: Hugging Face's `modeling_phi3.py`; llama.cpp's `llm_build_phi3`.

use super::common;
use super::graph::llama_layer;
use super::loader::Loader;
use super::row::Arch;
use super::spec::{Attention, Block, DecoderConfig, Ffn, Mixer, Qkv};
use crate::error::Result;
use crate::models::arch::hparams::Hparams;
use crate::ops::RopeMode;

pub(crate) const PHI3: Arch =
    Arch { name: "phi3", models: "Phi-3, Phi-3.5 mini", configure, block, layer: llama_layer };

fn configure(h: &Hparams, cfg: &mut DecoderConfig) -> Result<()> {
    cfg.rope_mode = RopeMode::Neox;
    let rope = (cfg.rope_base, cfg.rope_scale);
    common::sliding_window(h, cfg, |_| true, rope)
}

fn block(ld: &Loader, l: usize, cfg: &DecoderConfig) -> Result<Block> {
    let (e, hd, kv, ff) = (cfg.n_embd, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim, cfg.n_ff);
    let w = |s: &str| format!("blk.{l}.{s}.weight");
    let mut gate_up = ld.split_rows(&w("ffn_up"), &[2 * ff, e], &[ff, ff])?.into_iter();
    let next = |parts: &mut std::vec::IntoIter<_>| parts.next().expect("split_rows gives one per part");
    Ok(Block {
        attn_norm: ld.tensor(&w("attn_norm"), &[e])?,
        mixer: Mixer::Attention(Attention {
            qkv: Qkv::Fused { w: ld.tensor(&w("attn_qkv"), &[hd + 2 * kv, e])?, bias: None },
            gated_q: false,
            q_norm: None,
            k_norm: None,
            wo: ld.tensor(&w("attn_output"), &[e, hd])?,
            wo_bias: None,
            sinks: None,
        }),
        post_attn_norm: None,
        ffn_norm: ld.tensor(&w("ffn_norm"), &[e])?,
        ffn: Ffn::Dense {
            gate: next(&mut gate_up),
            up: next(&mut gate_up),
            down: ld.tensor(&w("ffn_down"), &[e, ff])?,
        },
        post_ffn_norm: None,
    })
}
