//! The hyperparameters of a llama-architecture model, read from its GGUF metadata (llama.cpp's `llm_load_hparams`
//! for `LLM_ARCH_LLAMA`).

use crate::error::{Error, Result};
use crate::io::gguf::{GgufFile, MetaValue};
use crate::models::hparams::Hparams;
use crate::ops::RopeMode;

/// A llama-architecture model's shape. Widths in elements.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Transformer blocks (`llama.block_count`).
    pub n_layers: usize,
    /// Residual-stream width E (`llama.embedding_length`).
    pub n_embd: usize,
    /// Query heads H (`llama.attention.head_count`).
    pub n_heads: usize,
    /// Key/value heads Hkv, dividing H (`llama.attention.head_count_kv`; H when absent).
    pub n_kv_heads: usize,
    /// Dims per head D (`llama.attention.key_length`; E / H when absent).
    pub head_dim: usize,
    /// Feed-forward width F (`llama.feed_forward_length`).
    pub n_ff: usize,
    /// Vocabulary size V (rows of `token_embd.weight`).
    pub n_vocab: usize,
    /// Positions the model was trained for (`llama.context_length`).
    pub n_ctx_train: usize,
    /// RMS norm epsilon (`llama.attention.layer_norm_rms_epsilon`).
    pub rms_eps: f32,
    /// Rope θ base (`llama.rope.freq_base`, 10000 when absent).
    pub rope_base: f32,
    /// Linear rope scaling: positions are multiplied by this (1 / `llama.rope.scaling.factor`).
    pub rope_scale: f32,
    /// Dims of each head that rotate (`llama.rope.dimension_count`; D when absent).
    pub rope_dims: usize,
    /// llama's rope turns adjacent pairs (ggml's mode "normal": llama.cpp's converter permutes Q and K for it).
    pub rope_mode: RopeMode,
    /// Whether the output head is its own tensor (`output.weight`) or the token embedding (tied).
    pub tied_output: bool,
}

/// Largest values a hostile file may claim (no real model comes near): widths, heads, layers, positions.
const MAX_WIDTH: usize = 1 << 20;
const MAX_HEADS: usize = 1 << 14;
const MAX_LAYERS: usize = 1 << 12;
const MAX_CONTEXT: usize = 1 << 24;

impl LlamaConfig {
    /// The configuration of the model in `f`, checked: every count an integer from 1 to a bound, epsilons and
    /// rope bases finite and positive, widths that fit together without overflow, the tensors of the shapes
    /// and dtypes the metadata implies (checked again as they are uploaded), and no setting this runner would
    /// ignore (mixtures of experts, a separate value width, an EOS appended to prompts).
    ///
    /// # Errors
    /// [`Error::Format`] naming the file and the key or tensor: `general.architecture` is not `llama`, a required
    /// value is missing, of the wrong type or out of range, or the widths do not fit together (H not a multiple
    /// of Hkv, rope dims above D, a token embedding that is not `[V, E]`, a vocabulary whose token list has
    /// another length), and for what this runner does not implement, saying so: rope scaling other than linear,
    /// rope frequency factors (`rope_freqs.weight`, Llama 3.1's long-context scaling), experts, a value width other
    /// than the key width, an EOS appended to prompts.
    pub fn from_gguf(f: &GgufFile) -> Result<LlamaConfig> {
        let arch = f.get("general.architecture").and_then(MetaValue::as_str).unwrap_or("(none)");
        let h = Hparams { f, arch: "llama" };
        if arch != "llama" {
            return Err(
                h.error(format!("architecture '{arch}' is not supported (webtensor::models::llama runs 'llama')"))
            );
        }
        let n_embd = h.count("embedding_length", None, MAX_WIDTH)?;
        let n_heads = h.count("attention.head_count", None, MAX_HEADS)?;
        let n_kv_heads = h.count("attention.head_count_kv", Some(n_heads), MAX_HEADS)?;
        if n_heads % n_kv_heads != 0 {
            return Err(h.error(format!("{n_heads} query heads are no multiple of {n_kv_heads} KV heads")));
        }
        let head_dim = match f.get("llama.attention.key_length") {
            Some(_) => h.count("attention.key_length", None, MAX_WIDTH)?,
            None if n_embd % n_heads == 0 => n_embd / n_heads,
            None => return Err(h.error(format!("width {n_embd} is no multiple of {n_heads} heads"))),
        };
        let value_dim = h.count("attention.value_length", Some(head_dim), MAX_WIDTH)?;
        if value_dim != head_dim {
            return Err(unsupported(&h, format!("values of {value_dim} dims with keys of {head_dim}")));
        }
        h.product("query width (heads × head dims)", n_heads, head_dim)?;
        let rope_dims = h.count("rope.dimension_count", Some(head_dim), MAX_WIDTH)?;
        if rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(
                h.error(format!("rope over {rope_dims} dims does not fit heads of {head_dim} (even, at most D)"))
            );
        }
        let scaling = h.text("rope.scaling.type")?.unwrap_or("none");
        let factor = h.number("rope.scaling.factor", 1.0, |x| x > 0.0, "above 0")?;
        let rope_scale = match scaling {
            "none" => 1.0,
            "linear" => 1.0 / factor,
            other => return Err(unsupported(&h, format!("rope scaling '{other}' (factor {factor})"))),
        };
        if f.tensor("rope_freqs.weight").is_some() {
            return Err(unsupported(&h, "rope frequency factors (rope_freqs.weight, Llama 3.1 scaling)".into()));
        }
        if f.get("llama.expert_count").and_then(MetaValue::as_u64).is_some_and(|n| n > 0) {
            return Err(unsupported(&h, "a mixture of experts (llama.expert_count)".into()));
        }
        if f.get("tokenizer.ggml.add_eos_token").and_then(MetaValue::as_bool) == Some(true) {
            return Err(unsupported(
                &h,
                "a tokenizer that appends EOS to prompts (tokenizer.ggml.add_eos_token)".into(),
            ));
        }
        let embd = f.tensor("token_embd.weight").ok_or_else(|| h.error("no tensor token_embd.weight".into()))?;
        if embd.shape.len() != 2 || embd.shape[1] != n_embd {
            return Err(h.error(format!("token_embd.weight is {:?}, not [vocab, {n_embd}]", embd.shape)));
        }
        let n_vocab = embd.shape[0];
        if let Some(tokens) = f.get("tokenizer.ggml.tokens").and_then(MetaValue::as_array) {
            if tokens.len() != n_vocab {
                let n = tokens.len();
                return Err(
                    h.error(format!("tokenizer.ggml.tokens has {n} entries but token_embd.weight has {n_vocab} rows"))
                );
            }
        }
        if let Some(v) = h.count("vocab_size", Some(n_vocab), usize::MAX).ok().filter(|&v| v != n_vocab) {
            return Err(h.error(format!("llama.vocab_size is {v} but token_embd.weight has {n_vocab} rows")));
        }
        Ok(LlamaConfig {
            n_layers: h.count("block_count", None, MAX_LAYERS)?,
            n_embd,
            n_heads,
            n_kv_heads,
            head_dim,
            n_ff: h.count("feed_forward_length", None, MAX_WIDTH << 4)?,
            n_vocab,
            n_ctx_train: h.count("context_length", Some(2048), MAX_CONTEXT)?,
            rms_eps: h.number("attention.layer_norm_rms_epsilon", 1e-5, |x| x > 0.0 && x < 1.0, "above 0, below 1")?,
            rope_base: h.number("rope.freq_base", 10000.0, |x| x > 0.0, "above 0")?,
            rope_scale,
            rope_dims,
            rope_mode: RopeMode::Normal,
            tied_output: f.tensor("output.weight").is_none(),
        })
    }
}

/// A setting of the file this runner does not implement, named with the file.
fn unsupported(h: &Hparams, what: String) -> Error {
    h.error(format!("{what} is not supported by webtensor::models::llama"))
}
