//! The hyperparameters of a llama-architecture model, read from its GGUF metadata (llama.cpp's `llm_load_hparams`
//! for `LLM_ARCH_LLAMA`).

use crate::gguf::{GgufFile, MetaValue};
use crate::{Error, Result, RopeMode};

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

fn get_u(f: &GgufFile, key: &str) -> Result<Option<usize>> {
    match f.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(|x| Some(x as usize)).ok_or_else(|| bad(f, key, v, "an unsigned integer")),
    }
}

fn get_f(f: &GgufFile, key: &str) -> Result<Option<f32>> {
    match f.get(key) {
        None => Ok(None),
        Some(v) => v.as_f64().map(|x| Some(x as f32)).ok_or_else(|| bad(f, key, v, "a number")),
    }
}

fn bad(f: &GgufFile, key: &str, v: &MetaValue, want: &str) -> Error {
    Error::Format { path: f.source().into(), message: format!("metadata {key} is {}, not {want}", v.type_name()) }
}

fn need(f: &GgufFile, key: &str) -> Result<usize> {
    get_u(f, key)?
        .ok_or_else(|| Error::Format { path: f.source().into(), message: format!("metadata {key} is missing") })
}

impl LlamaConfig {
    /// The configuration of the model in `f`.
    ///
    /// # Errors
    /// [`Error::Format`] naming the architecture when `general.architecture` is not `llama`, naming the key when a
    /// required value is missing or of the wrong type, and when the widths do not fit together (H not a multiple
    /// of Hkv, rope dims above D, a token embedding that is not `[V, E]`); [`Error::Unsupported`] for rope scaling
    /// other than linear and for rope frequency factors (`rope_freqs.weight`, Llama 3.1's long-context scaling).
    pub fn from_gguf(f: &GgufFile) -> Result<LlamaConfig> {
        let fmt = |message: String| Error::Format { path: f.source().into(), message };
        let arch = f.get("general.architecture").and_then(MetaValue::as_str).unwrap_or("(none)");
        if arch != "llama" {
            return Err(fmt(format!("architecture '{arch}' is not supported (webtensor::models::llama runs 'llama')")));
        }
        let n_embd = need(f, "llama.embedding_length")?;
        let n_heads = need(f, "llama.attention.head_count")?;
        let n_kv_heads = get_u(f, "llama.attention.head_count_kv")?.unwrap_or(n_heads);
        if n_heads == 0 || n_kv_heads == 0 || n_heads % n_kv_heads != 0 || n_embd % n_heads != 0 {
            return Err(fmt(format!("{n_heads} query heads, {n_kv_heads} KV heads and width {n_embd} do not fit")));
        }
        let head_dim = get_u(f, "llama.attention.key_length")?.unwrap_or(n_embd / n_heads);
        let rope_dims = get_u(f, "llama.rope.dimension_count")?.unwrap_or(head_dim);
        if rope_dims > head_dim || rope_dims % 2 != 0 || head_dim == 0 {
            return Err(fmt(format!("rope over {rope_dims} dims does not fit heads of {head_dim}")));
        }
        let scaling = f.get("llama.rope.scaling.type").and_then(MetaValue::as_str).unwrap_or("none");
        let factor = get_f(f, "llama.rope.scaling.factor")?.unwrap_or(1.0);
        let rope_scale = match scaling {
            "none" => 1.0,
            "linear" if factor > 0.0 => 1.0 / factor,
            other => return Err(unsupported(format!("rope scaling '{other}' (factor {factor})"))),
        };
        if f.tensor("rope_freqs.weight").is_some() {
            return Err(unsupported("rope frequency factors (rope_freqs.weight, Llama 3.1 scaling)".into()));
        }
        let embd = f.tensor("token_embd.weight").ok_or_else(|| fmt("no tensor token_embd.weight".into()))?;
        if embd.shape.len() != 2 || embd.shape[1] != n_embd {
            return Err(fmt(format!("token_embd.weight is {:?}, not [vocab, {n_embd}]", embd.shape)));
        }
        Ok(LlamaConfig {
            n_layers: need(f, "llama.block_count")?,
            n_embd,
            n_heads,
            n_kv_heads,
            head_dim,
            n_ff: need(f, "llama.feed_forward_length")?,
            n_vocab: embd.shape[0],
            n_ctx_train: get_u(f, "llama.context_length")?.unwrap_or(2048),
            rms_eps: get_f(f, "llama.attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5),
            rope_base: get_f(f, "llama.rope.freq_base")?.unwrap_or(10000.0),
            rope_scale,
            rope_dims,
            rope_mode: RopeMode::Normal,
            tied_output: f.tensor("output.weight").is_none(),
        })
    }
}

fn unsupported(what: String) -> Error {
    Error::Unsupported {
        op: "llama".into(),
        backend: "webtensor::models::llama".into(),
        reason: format!("{what} is not supported"),
    }
}
