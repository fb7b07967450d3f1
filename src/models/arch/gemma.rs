//! gemma, gemma2 and gemma3 (llama.cpp's `LLM_ARCH_GEMMA*`): Gemma 1, 2 and 3 text models. Token embeddings
//! scaled by √E, GeGLU (GELU's tanh form), NeoX rope, a tied head; the converter stores each RMS norm's weight as
//! `1 + w`, so it multiplies as is. Gemma 2 and 3 add norms of the attention's and the feed-forward's outputs
//! and sliding-window attention on some layers (every other one from the first in Gemma 2; five of every six in
//! Gemma 3, whose local layers rope with base 10000 and no scaling); Gemma 2 soft-caps attention and output
//! logits (`c · tanh(x / c)`), Gemma 3 RMS-normalizes each head's queries and keys instead.
//!
//! Reference: Hugging Face's `modeling_gemma.py`, `modeling_gemma2.py` and `modeling_gemma3.py`; llama.cpp's
//! `llm_build_gemma*`.

use super::common::{self, Extras, QkNorm};
use super::graph::llama_layer;
use super::row::Arch;
use super::spec::{Activation, DecoderConfig};
use crate::error::Result;
use crate::models::arch::hparams::Hparams;
use crate::ops::RopeMode;

pub(crate) const GEMMA: Arch = Arch {
    name: "gemma",
    models: "Gemma",
    configure: |h, cfg| configure(h, cfg, None),
    block: |ld, l, cfg| common::block(ld, l, cfg, Extras::default()),
    layer: llama_layer,
};

pub(crate) const GEMMA2: Arch = Arch {
    name: "gemma2",
    models: "Gemma 2",
    configure: |h, cfg| configure(h, cfg, Some((2, 46))),
    block: |ld, l, cfg| common::block(ld, l, cfg, Extras { post_norms: true, ..Extras::default() }),
    layer: llama_layer,
};

pub(crate) const GEMMA3: Arch = Arch {
    name: "gemma3",
    models: "Gemma 3 (text)",
    configure: |h, cfg| configure(h, cfg, Some((6, 62))),
    block: |ld, l, cfg| {
        common::block(ld, l, cfg, Extras { post_norms: true, qk_norm: QkNorm::PerHead, ..Extras::default() })
    },
    layer: llama_layer,
};

/// Gemma's settings; `swa`: (n, layers of the 27B model) where layer l attends over the window unless
/// `l % n == n − 1` (llama.cpp's `set_swa_pattern(n)`), and the 27B model scales queries by 1/√(E / H) rather
/// than 1/√D (its `query_pre_attn_scalar`; llama.cpp tells it by its layer count).
fn configure(h: &Hparams, cfg: &mut DecoderConfig, swa: Option<(usize, usize)>) -> Result<()> {
    cfg.rope_mode = RopeMode::Neox;
    cfg.ffn_act = Activation::GeluTanh;
    cfg.embd_scale = Some((cfg.n_embd as f32).sqrt());
    cfg.attn_softcap = common::softcap(h, "attn_logit_softcapping")?;
    cfg.final_softcap = common::softcap(h, "final_logit_softcapping")?;
    let Some((n, layers_27b)) = swa else { return Ok(()) };
    if cfg.n_layers == layers_27b {
        cfg.attn_scale = 1.0 / ((cfg.n_embd / cfg.n_heads) as f32).sqrt();
    }
    // Gemma 3's local layers rope as the model was pretrained (base 10000, no scaling); Gemma 2's as the others
    let rope_swa = if n == 6 { (10000.0, 1.0) } else { (cfg.rope_base, cfg.rope_scale) };
    common::sliding_window(h, cfg, |l| l % n != n - 1, rope_swa)
}
