//! The decoder architectures the runner ([`crate::models::decoder::LanguageModel`]) runs, each from GGUF metadata alone,
//! as llama.cpp does: one file per family maps its metadata keys and tensor names onto one [`DecoderConfig`] and
//! one block layout, whose parts (biases, q/k norms, post-norms, soft-capping, sliding windows, GeGLU, NeoX rope,
//! embedding scaling) the shared graph builds. Adding an architecture is a file here and a line in `ARCHS`.
//!
//! | `general.architecture` | models |
//! |---|---|
//! | `llama` | SmolLM2, TinyLlama, Llama 2, Llama 3.x (with its rope frequency factors), Mistral |
//! | `qwen2`, `qwen3` | Qwen2, Qwen2.5, Qwen3 (dense) |
//! | `phi3` | Phi-3, Phi-3.5 mini (their 128k models' LongRoPE included) |
//! | `gemma`, `gemma2`, `gemma3` | Gemma 1, 2, 3 (text) |
//! | `llama` with `llama.expert_count` | Mixtral 8x7B, 8x22B |
//! | `qwen2moe`, `qwen3moe` | Qwen1.5-MoE, Qwen2-57B-A14B; Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder |
//! | `olmoe` | OLMoE |
//! | `gpt-oss` | gpt-oss-20b, gpt-oss-120b (attention sinks, MXFP4 experts) |
//! | `qwen35`, `qwen35moe`, `qwen3next` | Qwen3.5 (dense and MoE), Qwen3-Next (gated delta-net layers beside full attention) |

pub(crate) mod common;
mod gemma;
mod gpt_oss;
pub(crate) mod graph;
pub(crate) mod hparams;
mod linear;
mod llama;
pub(crate) mod loader;
pub(crate) mod moe;
mod olmoe;
mod phi3;
mod qwen;
mod qwen35;
mod qwen_moe;
pub(crate) mod row;
pub(crate) mod spec;

use self::loader::Loader;
use self::row::{Arch, Weights};
use self::spec::DecoderConfig;
use crate::device::Device;
use crate::error::Result;
use crate::io::gguf::{GgufFile, MetaValue};
use crate::models::arch::hparams::Hparams;

/// Every architecture, by `general.architecture`.
const ARCHS: &[Arch] = &[
    llama::LLAMA,
    qwen::QWEN2,
    qwen::QWEN3,
    phi3::PHI3,
    gemma::GEMMA,
    gemma::GEMMA2,
    gemma::GEMMA3,
    qwen_moe::QWEN2MOE,
    qwen_moe::QWEN3MOE,
    olmoe::OLMOE,
    gpt_oss::GPT_OSS,
    qwen35::QWEN35,
    qwen35::QWEN35MOE,
    qwen35::QWEN3NEXT,
];

/// LongRoPE's factors for `context` positions, when the file has them (both or neither).
fn long_rope(ld: &Loader, cfg: &DecoderConfig, context: usize) -> Result<Option<crate::resident::Resident>> {
    let n = cfg.rope_dims / 2;
    let (long, short) = (ld.factors("rope_factors_long.weight", n)?, ld.factors("rope_factors_short.weight", n)?);
    match (long, short) {
        (None, None) => Ok(None),
        (Some(long), Some(short)) => Ok(Some(if context > cfg.n_ctx_orig { long } else { short })),
        _ => Err(ld.error("LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight".into())),
    }
}

/// The `general.architecture` names the runner supports, with the models each is known by.
pub fn supported() -> impl Iterator<Item = (&'static str, &'static str)> {
    ARCHS.iter().map(|a| (a.name, a.models))
}

/// The file's `general.architecture` (`(none)` when it has none).
pub fn architecture(f: &GgufFile) -> &str {
    f.get("general.architecture").and_then(MetaValue::as_str).unwrap_or("(none)")
}

fn find(f: &GgufFile) -> Result<&'static Arch> {
    let h = Hparams { f, arch: "general" };
    match f.get("general.architecture") {
        Some(v) if v.as_str().is_none() => {
            return Err(h.error(format!("metadata general.architecture is {}, not a string", v.a_type_name())))
        }
        None => return Err(h.error("metadata general.architecture is missing".into())),
        _ => {}
    }
    let name = architecture(f);
    ARCHS.iter().find(|a| a.name == name).ok_or_else(|| {
        let known: Vec<&str> = ARCHS.iter().map(|a| a.name).collect();
        h.error(format!("architecture '{name}' is not supported (webtensor runs {})", known.join(", ")))
    })
}

impl DecoderConfig {
    /// The configuration of the model in `f`, for any architecture of [`supported`], checked: every count an
    /// integer from 1 to a bound, epsilons and rope bases finite and positive, widths that fit together without
    /// overflow, the tensors of the shapes and dtypes the metadata implies (checked again as they are uploaded),
    /// and no setting this runner would ignore (mixtures of experts, a separate value width, an EOS appended to
    /// prompts).
    ///
    /// # Errors
    /// [`Error::Format`](crate::Error::Format) naming the file and the key or tensor: an architecture not in
    /// [`supported`] (named), a required value missing, of the wrong type or out of range, widths that do not
    /// fit together (H not a multiple of Hkv, rope dims above D, a token embedding that is not `[V, E]`, a
    /// vocabulary whose token list has another length), and for what the runner does not implement, saying so:
    /// rope scaling other than linear or YaRN, experts, a value width other than the key width, an EOS appended
    /// to prompts.
    pub fn from_gguf(f: &GgufFile) -> Result<DecoderConfig> {
        let arch = find(f)?;
        let h = Hparams { f, arch: arch.name };
        let mut cfg = common::read(&h)?;
        (arch.configure)(&h, &mut cfg)?;
        if cfg.experts.is_none() {
            moe::refuse_unread(&h)?;
        }
        Ok(cfg)
    }
}

/// The weights of the model in `f`, of `cfg`'s architecture, uploaded to `device`, for a KV cache of `context`
/// positions: rope's frequency factors are `rope_freqs.weight` (Llama 3) or, for LongRoPE (Phi-3's 128k models),
/// `rope_factors_long.weight` when `context` exceeds the original context and `rope_factors_short.weight`
/// otherwise, as llama.cpp chooses them.
pub(crate) fn load_weights(device: &Device, f: &GgufFile, cfg: &DecoderConfig, context: usize) -> Result<Weights> {
    let arch = find(f)?;
    let ld = Loader::new(device, f);
    let (e, v) = (cfg.n_embd, cfg.n_vocab);
    let blocks = (0..cfg.n_layers).map(|l| (arch.block)(&ld, l, cfg)).collect::<Result<Vec<_>>>()?;
    // trailing multi-token-prediction blocks: in the file, not in the forward pass
    for l in cfg.n_layers..cfg.n_layers + cfg.linear.as_ref().map_or(0, |c| c.mtp_layers) {
        ld.skip(&format!("blk.{l}."));
    }
    let weights = Weights {
        token_embd: ld.tensor("token_embd.weight", &[v, e])?,
        blocks,
        output_norm: ld.tensor("output_norm.weight", &[e])?,
        output: if cfg.tied_output { None } else { Some(ld.tensor("output.weight", &[v, e])?) },
        rope_factors: match ld.factors("rope_freqs.weight", cfg.rope_dims / 2)? {
            Some(factors) => Some(factors),
            None => long_rope(&ld, cfg, context)?,
        },
        layer: arch.layer,
    };
    ld.all_used()?;
    Ok(weights)
}
