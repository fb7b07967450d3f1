//! What the decoder architectures share: the hyperparameters every one has under its own `{arch}.` prefix, read
//! and checked as llama.cpp's loader reads them, and the block whose tensors every one names alike
//! (`blk.N.attn_q`, ...), with the parts some add.

use super::loader::Loader;
use super::spec::{Activation, Attention, Block, DecoderConfig, Ffn, Mixer, Qkv};
use crate::error::Result;
use crate::io::gguf::MetaValue;
use crate::io::gguf::TensorInfo;
use crate::models::arch::hparams::Hparams;
use crate::ops::{Rope, RopeMode};
use crate::resident::Resident;

/// Largest values a hostile file may claim (no real model comes near): widths, heads, layers, positions.
const MAX_WIDTH: usize = 1 << 20;
const MAX_HEADS: usize = 1 << 14;
const MAX_LAYERS: usize = 1 << 12;
const MAX_CONTEXT: usize = 1 << 24;

/// The hyperparameters under `h.arch`'s prefix, checked: every count an integer from 1 to a bound, epsilons
/// and rope bases finite and positive, widths that fit together without overflow, a token embedding `[V, E]`
/// matching the vocabulary, and no setting the runner would ignore (experts, a separate value width, an EOS
/// appended to prompts). The architecture's own settings start at llama's (rope on
/// adjacent pairs, SwiGLU, no soft-capping, no sliding window).
pub(crate) fn read(h: &Hparams) -> Result<DecoderConfig> {
    let f = h.f;
    let n_embd = h.count("embedding_length", None, MAX_WIDTH)?;
    let n_heads = h.count("attention.head_count", None, MAX_HEADS)?;
    let n_kv_heads = h.count("attention.head_count_kv", Some(n_heads), MAX_HEADS)?;
    if n_heads % n_kv_heads != 0 {
        return Err(h.error(format!("{n_heads} query heads are no multiple of {n_kv_heads} KV heads")));
    }
    let head_dim = match has(h, "attention.key_length") {
        true => h.count("attention.key_length", None, MAX_WIDTH)?,
        false if n_embd % n_heads == 0 => n_embd / n_heads,
        false => return Err(h.error(format!("width {n_embd} is no multiple of {n_heads} heads"))),
    };
    let value_dim = h.count("attention.value_length", Some(head_dim), MAX_WIDTH)?;
    if value_dim != head_dim {
        return Err(h.unsupported(format!("values of {value_dim} dims with keys of {head_dim}")));
    }
    h.product("query width (heads × head dims)", n_heads, head_dim)?;
    let rope_dims = h.count("rope.dimension_count", Some(head_dim), MAX_WIDTH)?;
    if rope_dims > head_dim || rope_dims % 2 != 0 {
        return Err(h.error(format!("rope over {rope_dims} dims does not fit heads of {head_dim} (even, at most D)")));
    }
    let n_ctx_train = h.count("context_length", Some(2048), MAX_CONTEXT)?;
    // a base of 1 or less turns every rotation into one of a radian or more a position, highest dims fastest
    let rope_base = h.number("rope.freq_base", 10000.0, |x| x > 1.0, "above 1")?;
    let n_ctx_orig = h.count("rope.scaling.original_context_length", Some(n_ctx_train), MAX_CONTEXT)?;
    // as llama.cpp: linear unless the file says otherwise, the factor under its current or its old key
    let scaling = h.text("rope.scaling.type")?.unwrap_or("linear");
    let factor = match has(h, "rope.scaling.factor") {
        true => h.number("rope.scaling.factor", 1.0, |x| x > 0.0, "above 0")?,
        false => h.number("rope.scale_linear", 1.0, |x| x > 0.0, "above 0")?,
    };
    let (rope_scale, rope_yarn) = match scaling {
        "none" => (1.0, None),
        "linear" => (1.0 / factor, None),
        "yarn" => (1.0 / factor, Some(yarn(h, rope_dims, rope_base, n_ctx_orig)?)),
        other => return Err(h.unsupported(format!("rope scaling '{other}' (factor {factor})"))),
    };
    let rope_attn_factor = h.number("rope.scaling.attn_factor", 1.0, |x| x > 0.0, "above 0")?;
    refuse_unsupported(h)?;
    let n_vocab = vocabulary(h, n_embd)?;
    Ok(DecoderConfig {
        arch: h.arch.to_string(),
        n_layers: h.count("block_count", None, MAX_LAYERS)?,
        n_embd,
        n_heads,
        n_kv_heads,
        head_dim,
        n_ff: h.count("feed_forward_length", None, MAX_WIDTH << 4)?,
        n_vocab,
        n_ctx_train,
        rms_eps: h.number("attention.layer_norm_rms_epsilon", 1e-5, |x| x > 0.0 && x < 1.0, "above 0, below 1")?,
        rope_base,
        rope_scale,
        rope_yarn,
        rope_attn_factor,
        n_ctx_orig,
        rope_dims,
        rope_mode: RopeMode::Normal,
        tied_output: f.tensor("output.weight").is_none(),
        ffn_act: Activation::Silu,
        embd_scale: None,
        attn_scale: 1.0 / (head_dim as f32).sqrt(),
        attn_softcap: None,
        final_softcap: None,
        sliding_window: None,
        swa_layers: vec![],
        rope_swa: (0.0, 0.0),
        experts: None,
        linear: None,
    })
}

/// YaRN's `ext_factor` and ramp as llama.cpp sets them from the file: `ext_factor` 1 and betas 32 and 1 unless
/// the file says otherwise, over the `n_ctx_orig` positions of the original training. DeepSeek's log multiplier
/// is refused.
fn yarn(h: &Hparams, rope_dims: usize, base: f32, n_ctx_orig: usize) -> Result<(f32, [f32; 2])> {
    if h.number("rope.scaling.yarn_log_multiplier", 0.0, |_| true, "")? != 0.0 {
        return Err(h.unsupported("YaRN with a log multiplier (rope.scaling.yarn_log_multiplier)".into()));
    }
    let ext_factor = h.number("rope.scaling.yarn_ext_factor", 1.0, |x| (0.0..=1.0).contains(&x), "from 0 to 1")?;
    let beta_fast = h.number("rope.scaling.yarn_beta_fast", 32.0, |x| x > 0.0, "above 0")?;
    let beta_slow = h.number("rope.scaling.yarn_beta_slow", 1.0, |x| x > 0.0, "above 0")?;
    Ok((ext_factor, Rope::yarn_corr_dims(rope_dims, n_ctx_orig, base, beta_fast, beta_slow)))
}

fn has(h: &Hparams, key: &str) -> bool {
    h.f.get(&format!("{}.{key}", h.arch)).is_some()
}

/// Settings of real files that would change what the model computes, which this runner does not implement
/// (experts where the architecture has none: [`super::moe::refuse_unread`]).
fn refuse_unsupported(h: &Hparams) -> Result<()> {
    let f = h.f;
    if f.get("tokenizer.ggml.add_eos_token").and_then(MetaValue::as_bool) == Some(true) {
        return Err(h.unsupported("a tokenizer that appends EOS to prompts (tokenizer.ggml.add_eos_token)".into()));
    }
    Ok(())
}

/// V: the rows of `token_embd.weight` `[V, E]`, which the token list and `{arch}.vocab_size` must agree with.
fn vocabulary(h: &Hparams, n_embd: usize) -> Result<usize> {
    let f = h.f;
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
    let v = h.count("vocab_size", Some(n_vocab), usize::MAX)?;
    if v != n_vocab {
        return Err(h.error(format!("{}.vocab_size is {v} but token_embd.weight has {n_vocab} rows", h.arch)));
    }
    Ok(n_vocab)
}

/// Sliding-window attention from `{arch}.attention.sliding_window` (none when absent), on the layers
/// `is_swa(l)` marks; those layers' rope is `rope_swa` (base, linear scale).
pub(crate) fn sliding_window(
    h: &Hparams,
    cfg: &mut DecoderConfig,
    is_swa: impl Fn(usize) -> bool,
    rope_swa: (f32, f32),
) -> Result<()> {
    if !has(h, "attention.sliding_window") {
        return Ok(());
    }
    cfg.sliding_window = Some(h.count("attention.sliding_window", None, MAX_CONTEXT)?);
    cfg.swa_layers = (0..cfg.n_layers).map(is_swa).collect();
    cfg.rope_swa = rope_swa;
    Ok(())
}

/// `{arch}.{key}` as a soft-capping value (finite, at least 1: Gemma 2's are 30 and 50; a cap of 1e-45 made
/// every logit tie), if present.
pub(crate) fn softcap(h: &Hparams, key: &str) -> Result<Option<f32>> {
    if !has(h, key) {
        return Ok(None);
    }
    h.number(key, 0.0, |x| x >= 1.0, "at least 1").map(Some)
}

/// The parts a block has beyond llama's.
#[derive(Clone, Copy, Default)]
pub(crate) struct Extras {
    /// Biases of Q, K and V (`blk.N.attn_{q,k,v}.bias`).
    pub qkv_bias: bool,
    /// RMS norms of Q and K (`blk.N.attn_{q,k}_norm.weight`).
    pub qk_norm: QkNorm,
    /// Norms of the attention's and the feed-forward's outputs (`blk.N.post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    /// The output projection's bias (`blk.N.attn_output.bias`).
    pub wo_bias: bool,
    /// Attention sinks (`blk.N.attn_sinks.weight`, f32 `[H]`).
    pub sinks: bool,
    /// The pre-feed-forward norm's name, when not `ffn_norm` (gpt-oss: `post_attention_norm`).
    pub ffn_norm: Option<&'static str>,
    /// Biases of the router and the experts (`blk.N.ffn_gate_inp.bias`, `blk.N.ffn_{gate,up,down}_exps.bias`).
    pub expert_biases: bool,
    /// Q's projection gives each head its queries and its output gate's logits (see [`Attention::gated_q`]).
    pub gated_q: bool,
}

/// Where Q and K are RMS-normalized (before rope).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum QkNorm {
    #[default]
    None,
    /// Each head's D values (`[D]` weights: Qwen3, Gemma 3).
    PerHead,
    /// Each whole projection (`[H · D]` and `[Hkv · D]` weights: OLMoE).
    Whole,
}

/// Block `l` with llama's tensor names (`attn_norm`, `attn_q`, `attn_k`, `attn_v`, `attn_output`, `ffn_norm`,
/// then `ffn_gate`, `ffn_up`, `ffn_down`, or the experts where `cfg` has them) and the `extras` the architecture
/// has, every one required.
pub(crate) fn block(ld: &Loader, l: usize, cfg: &DecoderConfig, extras: Extras) -> Result<Block> {
    let (e, hd, kv, d) = (cfg.n_embd, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim, cfg.head_dim);
    let w = |s: &str| format!("blk.{l}.{s}.weight");
    let opt = |on: bool, name: String, shape: &[usize]| on.then(|| ld.tensor(&name, shape)).transpose();
    let b = |s: &str| format!("blk.{l}.{s}.bias");
    let (qn, kn) = match extras.qk_norm {
        QkNorm::None => (None, None),
        QkNorm::PerHead => (Some(d), Some(d)),
        QkNorm::Whole => (Some(hd), Some(kv)),
    };
    let q_rows = if extras.gated_q { 2 * hd } else { hd };
    Ok(Block {
        attn_norm: ld.tensor(&w("attn_norm"), &[e])?,
        mixer: Mixer::Attention(Attention {
            qkv: {
                let (wn, bn) = (["attn_q", "attn_k", "attn_v"].map(w), ["attn_q", "attn_k", "attn_v"].map(b));
                let biases = extras.qkv_bias.then(|| bn.each_ref().map(String::as_str));
                qkv(ld, wn.each_ref().map(String::as_str), biases, [q_rows, kv, kv], e)?
            },
            gated_q: extras.gated_q,
            q_norm: qn.map(|n| ld.tensor(&w("attn_q_norm"), &[n])).transpose()?,
            k_norm: kn.map(|n| ld.tensor(&w("attn_k_norm"), &[n])).transpose()?,
            wo: ld.tensor(&w("attn_output"), &[e, hd])?,
            wo_bias: opt(extras.wo_bias, b("attn_output"), &[e])?,
            sinks: extras.sinks.then(|| ld.f32_vector(&w("attn_sinks"), cfg.n_heads)).transpose()?,
        }),
        post_attn_norm: opt(extras.post_norms, w("post_attention_norm"), &[e])?,
        ffn_norm: ld.tensor(&w(extras.ffn_norm.unwrap_or("ffn_norm")), &[e])?,
        ffn: match &cfg.experts {
            Some(x) => Ffn::Experts(Box::new(super::moe::experts(ld, l, cfg, x, extras.expert_biases)?)),
            None => dense_ffn(ld, l, cfg)?,
        },
        post_ffn_norm: opt(extras.post_norms, w("post_ffw_norm"), &[e])?,
    })
}

/// Block `l`'s dense feed-forward (`ffn_gate`, `ffn_up` `[F, E]`, `ffn_down` `[E, F]`).
pub(crate) fn dense_ffn(ld: &Loader, l: usize, cfg: &DecoderConfig) -> Result<Ffn> {
    let (e, ff) = (cfg.n_embd, cfg.n_ff);
    let w = |s: &str| format!("blk.{l}.{s}.weight");
    Ok(Ffn::Dense {
        gate: ld.tensor(&w("ffn_gate"), &[ff, e])?,
        up: ld.tensor(&w("ffn_up"), &[ff, e])?,
        down: ld.tensor(&w("ffn_down"), &[e, ff])?,
    })
}

/// The Q, K and V projections `names` (weights `[rows[i], in]`; biases `[rows[i]]` under `biases` where
/// given), as one matrix `[Σ rows, in]` where the three share a dtype (and the biases one) and fit one storage
/// binding of the device: their bytes one after another (a row of any dtype is whole bytes), copied once at
/// load, so that one matmul reads the normed rows for all three. Three residents otherwise.
///
/// # Errors
/// As [`Loader::tensor`], for each of the six.
pub(crate) fn qkv(
    ld: &Loader,
    names: [&str; 3],
    biases: Option<[&str; 3]>,
    rows: [usize; 3],
    inputs: usize,
) -> Result<Qkv> {
    let w = names.iter().zip(rows).map(|(n, r)| ld.info(n, &[r, inputs])).collect::<Result<Vec<_>>>()?;
    let b = match biases {
        Some(b) => Some(b.iter().zip(rows).map(|(n, r)| ld.info(n, &[r])).collect::<Result<Vec<_>>>()?),
        None => None,
    };
    let one_dtype = |ts: &[&TensorInfo]| ts.iter().all(|t| t.dtype == ts[0].dtype);
    // one binding holds the three (else each apart: a matmul of a weight over a binding splits its columns)
    let fits = w.iter().map(|t| t.bytes).sum::<u64>() <= ld.device.capabilities().max_storage_binding_bytes;
    if !(fits && one_dtype(&w) && b.as_deref().is_none_or(one_dtype)) {
        let upload = |ts: &[&TensorInfo], names: [&str; 3]| -> Result<[Resident; 3]> {
            let mut r = names.iter().zip(ts).map(|(n, t)| ld.resident(n, t));
            let mut next = || r.next().expect("three names, three tensors");
            Ok([next()?, next()?, next()?])
        };
        let bias = match (&b, biases) {
            (Some(b), Some(names)) => Some(upload(b, names)?),
            _ => None,
        };
        return Ok(Qkv::Split { w: upload(&w, names)?, bias });
    }
    let name = names.join("+");
    let total = rows.iter().sum::<usize>();
    let w = ld.concat(&name, &w, &names, &[total, inputs])?;
    let bias = match (&b, biases) {
        (Some(b), Some(names)) => Some(ld.concat(&names.join("+"), b, &names, &[total])?),
        _ => None,
    };
    Ok(Qkv::Fused { w, bias })
}
