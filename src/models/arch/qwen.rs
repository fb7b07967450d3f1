//! qwen2 and qwen3 (llama.cpp's `LLM_ARCH_QWEN2`, `LLM_ARCH_QWEN3`): Qwen2, Qwen2.5 and Qwen3 dense models.
//! Both rotate halves of each head (NeoX rope) and use SwiGLU; Qwen2 adds biases to the Q, K and V projections,
//! Qwen3 drops them and RMS-normalizes each head's queries and keys before rope (`attn_q_norm`, `attn_k_norm`),
//! with a head width of its own (`qwen3.attention.key_length`, 128 where E / H is 64).
//!
//! Reference: Hugging Face's `modeling_qwen2.py` and `modeling_qwen3.py`; llama.cpp's `llm_build_qwen2`,
//! `llm_build_qwen3`.

use super::common::{self, Extras, QkNorm};
use super::graph::llama_layer;
use super::loader::Loader;
use super::row::Arch;
use super::spec::{Block, DecoderConfig};
use crate::error::Result;
use crate::models::arch::hparams::Hparams;
use crate::ops::RopeMode;

pub(crate) const QWEN2: Arch = Arch {
    name: "qwen2",
    models: "Qwen2, Qwen2.5",
    configure,
    block: |ld, l, cfg| common::block(ld, l, cfg, Extras { qkv_bias: true, ..Extras::default() }),
    layer: llama_layer,
};

pub(crate) const QWEN3: Arch =
    Arch { name: "qwen3", models: "Qwen3", configure, block: qwen3_block, layer: llama_layer };

fn configure(_: &Hparams, cfg: &mut DecoderConfig) -> Result<()> {
    cfg.rope_mode = RopeMode::Neox;
    Ok(())
}

fn qwen3_block(ld: &Loader, l: usize, cfg: &DecoderConfig) -> Result<Block> {
    common::block(ld, l, cfg, Extras { qk_norm: QkNorm::PerHead, ..Extras::default() })
}
