//! Mixtures of experts, as llama.cpp's `build_moe_ffn` runs them: the settings read from a file's metadata
//! ([`read`]: `{arch}.expert_count` and the keys with it, each architecture's defaults where a key is absent), the
//! stacked expert weights of a block ([`experts`]), and the feed-forward's graph ([`moe_ffn`]): router logits,
//! gating, top-k selection, the selected experts' gated feed-forwards by `mul_mat_id` (each selected expert's
//! weight read once a step), and their outputs summed, each times its weight.
//!
//! Reference: llama.cpp's `src/llama-graph.cpp` (`build_moe_ffn`); Hugging Face's Mixtral, Qwen2-MoE, Qwen3-MoE,
//! OLMoE and gpt-oss sparse blocks.

use super::hparams::Hparams;
use super::loader::Loader;
use super::spec::{Activation, DecoderConfig, Experts, ExpertsConfig, GateUp, Gating, SharedExpert};
use crate::error::Result;
use crate::graph::{Graph, Tensor};
use crate::io::gguf::MetaValue;
use crate::models::nn;
use crate::resident::Resident;

/// Most experts a file may declare (llama.cpp's `LLAMA_MAX_EXPERTS`).
pub(crate) const MAX_EXPERTS: usize = 512;
/// Widest expert a file may declare.
const MAX_WIDTH: usize = 1 << 24;
/// The smallest renormalizing sum (the smallest normal f16, 6.103515625e-5, as llama.cpp clamps it).
const MIN_WEIGHT_SUM: f32 = 1.0 / 16384.0;

/// What an architecture's graph builder passes to llama.cpp's `build_moe_ffn`, which a file's keys override.
#[derive(Clone, Copy)]
pub(crate) struct MoeDefaults {
    /// Whether the architecture is always a mixture (qwen2moe, qwen3moe, olmoe, gpt-oss) or one only where
    /// `expert_count` says so (llama: Mixtral).
    pub required: bool,
    /// The expert width without `expert_feed_forward_length`.
    pub width: Width,
    pub gating: Gating,
    pub norm_weights: bool,
    /// Whether the architecture has a shared expert (qwen2moe).
    pub shared: bool,
    pub act: Activation,
}

/// An architecture's expert width where the file does not say it.
#[derive(Clone, Copy)]
pub(crate) enum Width {
    /// `feed_forward_length` (llama, olmoe).
    FeedForward,
    /// `feed_forward_length / expert_used_count` (qwen2moe, qwen3moe, as llama.cpp defaults it).
    PerUsedExpert,
    /// The key is required (gpt-oss).
    Required,
}

/// The mixture of experts `cfg`'s file describes under `h.arch`, or `None` for a dense model of an
/// architecture whose experts are optional.
///
/// # Errors
/// [`crate::Error::Format`] naming the file and key: an expert count of 0 (where experts are required) or past
/// [`MAX_EXPERTS`], a used count of 0 or past the expert count, widths out of range, an unknown gating
/// function, a non-finite weight scale, shared experts where the architecture has none or more than one.
pub(crate) fn read(h: &Hparams, cfg: &DecoderConfig, d: MoeDefaults) -> Result<Option<ExpertsConfig>> {
    let key = |k: &str| h.f.get(&format!("{}.{k}", h.arch));
    if !d.required && key("expert_count").and_then(MetaValue::as_u64).is_none_or(|n| n == 0) {
        // a dense model: a file with a router nevertheless says its count wrong
        if let Some(router) = h.f.tensor("blk.0.ffn_gate_inp.weight") {
            let n = key("expert_count").map_or("missing".into(), |v| format!("{}", v.as_u64().unwrap_or(0)));
            let name = format!("{}.expert_count", h.arch);
            return Err(h.error(format!("metadata {name} is {n} but the file has experts ({})", router.name)));
        }
        return Ok(None);
    }
    let n_expert = h.count("expert_count", None, MAX_EXPERTS)?;
    let n_expert_used = h.count("expert_used_count", None, n_expert)?;
    let default_width = match d.width {
        Width::FeedForward => Some(cfg.n_ff),
        Width::PerUsedExpert => Some((cfg.n_ff / n_expert_used).max(1)),
        Width::Required => None,
    };
    let n_ff_exp = h.count("expert_feed_forward_length", default_width, MAX_WIDTH)?;
    let shared = match key("expert_shared_count") {
        None => d.shared,
        Some(_) => match h.integer("expert_shared_count")? {
            0 => false,
            1 if d.shared => true,
            n => return Err(h.unsupported(format!("{n} shared experts ({}.expert_shared_count)", h.arch))),
        },
    };
    let n_ff_shexp =
        shared.then(|| h.count("expert_shared_feed_forward_length", Some(cfg.n_ff), MAX_WIDTH)).transpose()?;
    let gating = match key("expert_gating_func") {
        None => d.gating,
        Some(_) => match h.integer("expert_gating_func")? {
            1 => Gating::Softmax,
            2 => Gating::Sigmoid,
            3 => Gating::SoftmaxWeight,
            n => {
                let name = format!("{}.expert_gating_func", h.arch);
                return Err(h.error(format!(
                    "metadata {name} is {n}: not a known gating function (1 softmax, 2 sigmoid, 3 softmax over \
                     the selected experts)"
                )));
            }
        },
    };
    let norm_weights = h.flag("expert_weights_norm")?.unwrap_or(d.norm_weights);
    // as llama.cpp: a scale of 0 (its default) is none
    let scale = h.number("expert_weights_scale", 0.0, |x| x >= 0.0, "at least 0")?;
    let weights_scale = if scale == 0.0 { 1.0 } else { scale };
    Ok(Some(ExpertsConfig {
        n_expert,
        n_expert_used,
        n_ff_exp,
        n_ff_shexp,
        gating,
        norm_weights,
        weights_scale,
        act: d.act,
    }))
}

/// A file of an architecture without experts whose metadata declares some: refused, not run as a dense model.
pub(crate) fn refuse_unread(h: &Hparams) -> Result<()> {
    let key = format!("{}.expert_count", h.arch);
    match h.f.get(&key).and_then(MetaValue::as_u64) {
        Some(n) if n > 0 => Err(h.unsupported(format!("a mixture of experts ({key} {n})"))),
        _ => Ok(()),
    }
}

/// Block `l`'s experts: the router `ffn_gate_inp` `[X, E]`, the stacked `ffn_gate_exps`, `ffn_up_exps`
/// `[X, Fe, E]` and `ffn_down_exps` `[X, E, Fe]` (with the router's and the experts' biases where `biases`), and
/// the shared expert where `x` has one.
///
/// # Errors
/// As [`Loader::tensor`] for each (a missing tensor, one of another shape: experts stacked along another axis, a
/// router of another width); experts stored one tensor each (GGUF files from before April 2024) are refused,
/// saying so.
pub(crate) fn experts(ld: &Loader, l: usize, cfg: &DecoderConfig, x: &ExpertsConfig, biases: bool) -> Result<Experts> {
    let (e, n, fe) = (cfg.n_embd, x.n_expert, x.n_ff_exp);
    let w = |s: &str| format!("blk.{l}.{s}.weight");
    let b = |s: &str| format!("blk.{l}.{s}.bias");
    if ld.f.tensor(&w("ffn_gate_exps")).is_none() && ld.f.tensor(&w("ffn_gate.0")).is_some() {
        return Err(ld.error(format!(
            "the experts are stored one tensor each ({}, from llama.cpp before April 2024): convert the model \
             again with a current llama.cpp",
            w("ffn_gate.0")
        )));
    }
    let biases = if biases {
        Some([
            ld.tensor(&b("ffn_gate_exps"), &[n, fe])?,
            ld.tensor(&b("ffn_up_exps"), &[n, fe])?,
            ld.tensor(&b("ffn_down_exps"), &[n, e])?,
        ])
    } else {
        None
    };
    Ok(Experts {
        router: ld.tensor(&w("ffn_gate_inp"), &[n, e])?,
        router_bias: biases.is_some().then(|| ld.tensor(&b("ffn_gate_inp"), &[n])).transpose()?,
        gate_up: match ld.f.tensor(&w("ffn_gate_up_exps")) {
            Some(_) if biases.is_none() => GateUp::Fused(ld.tensor(&w("ffn_gate_up_exps"), &[n, 2 * fe, e])?),
            _ => GateUp::Split {
                gate: ld.tensor(&w("ffn_gate_exps"), &[n, fe, e])?,
                up: ld.tensor(&w("ffn_up_exps"), &[n, fe, e])?,
            },
        },
        down: ld.tensor(&w("ffn_down_exps"), &[n, e, fe])?,
        biases,
        shared: x.n_ff_shexp.map(|fs| shared_expert(ld, l, e, fs)).transpose()?,
        config: x.clone(),
    })
}

/// Block `l`'s shared expert of width `fs` and its gate (`[E]`, or `[1, E]` as some converters write it), if the
/// file has one.
fn shared_expert(ld: &Loader, l: usize, e: usize, fs: usize) -> Result<SharedExpert> {
    let w = |s: &str| format!("blk.{l}.{s}.weight");
    let gate_name = w("ffn_gate_inp_shexp");
    let gate_inp = match ld.f.tensor(&gate_name).map(|t| t.shape.len()) {
        None => None,
        Some(2) => Some(ld.tensor(&gate_name, &[1, e])?),
        Some(_) => Some(ld.tensor(&gate_name, &[e])?),
    };
    Ok(SharedExpert {
        gate_inp,
        gate: ld.tensor(&w("ffn_gate_shexp"), &[fs, e])?,
        up: ld.tensor(&w("ffn_up_shexp"), &[fs, e])?,
        down: ld.tensor(&w("ffn_down_shexp"), &[e, fs])?,
    })
}

/// The mixture-of-experts feed-forward of rows `x` `[R, E]` → `[R, E]`: the router's logits (biased where it is),
/// gated and the top K experts selected ([`Gating`]), the weights renormalized and scaled where the config says,
/// each selected expert's gated feed-forward (`mul_mat_id`, biased where the experts are), and the outputs summed
/// times their weights; plus the shared expert (times its sigmoid gate) where there is one.
pub(crate) fn moe_ffn(g: &mut Graph, ex: &Experts, x: Tensor) -> Result<Tensor> {
    let c = &ex.config;
    let (r, e) = (g.shape(x)?[0], g.shape(x)?[1]);
    let logits = nn::linear(g, x, &ex.router, ex.router_bias.as_ref())?; // [R, X]
    let (selected, weights) = select(g, c, logits)?; // i32 [R, K], [R, K]
    let x3 = g.reshape(x, &[r, 1, e])?;
    let (gate, up) = match &ex.gate_up {
        GateUp::Split { gate, up } => (
            expert_matmul(g, x3, (gate, ex.biases.as_ref().map(|b| &b[0])), selected)?,
            expert_matmul(g, x3, (up, ex.biases.as_ref().map(|b| &b[1])), selected)?,
        ),
        GateUp::Fused(w) => {
            // [R, K, 2·Fe]: each selected expert's gate outputs, then its up outputs
            let gu = expert_matmul(g, x3, (w, None), selected)?;
            let fe = c.n_ff_exp;
            (g.slice(gu, 2, 0, fe)?, g.slice(gu, 2, fe, 2 * fe)?)
        }
    };
    let act = nn::glu(g, gate, up, c.act)?; // [R, K, Fe]
    let down = expert_matmul(g, act, (&ex.down, ex.biases.as_ref().map(|b| &b[2])), selected)?; // [R, K, E]
    let w = g.reshape(weights, &[r, 1, c.n_expert_used])?;
    let out = g.matmul(w, down)?; // [R, 1, E]
    let out = g.reshape(out, &[r, e])?;
    let Some(sh) = &ex.shared else { return Ok(out) };
    let s = nn::gated_ffn(g, x, (&sh.gate, &sh.up, &sh.down), Activation::Silu)?;
    let s = match &sh.gate_inp {
        Some(gi) => {
            let w = g.resident(gi)?;
            let w = g.reshape(w, &[e, 1])?;
            let logit = g.matmul(x, w)?; // [R, 1]
            let gate = g.sigmoid(logit)?;
            g.mul(s, gate)?
        }
        None => s,
    };
    g.add(out, s)
}

/// The experts each row takes (i32 `[R, K]`, best first) and their weights `[R, K]` from the router's logits
/// `[R, X]`, as `c.gating`, `c.norm_weights` and `c.weights_scale` say.
fn select(g: &mut Graph, c: &ExpertsConfig, logits: Tensor) -> Result<(Tensor, Tensor)> {
    let k = c.n_expert_used;
    let (selected, mut weights) = match c.gating {
        Gating::Softmax | Gating::Sigmoid => {
            let probs = if c.gating == Gating::Softmax { g.softmax(logits)? } else { g.sigmoid(logits)? };
            let selected = g.top_k(probs, k)?;
            (selected, g.take_along_axis(probs, selected)?)
        }
        Gating::SoftmaxWeight => {
            let selected = g.top_k(logits, k)?;
            let picked = g.take_along_axis(logits, selected)?;
            (selected, g.softmax(picked)?)
        }
    };
    if c.norm_weights {
        let sum = g.sum(weights)?;
        let sum = g.clamp(sum, MIN_WEIGHT_SUM, f32::MAX)?;
        weights = g.div(weights, sum)?;
    }
    if c.weights_scale != 1.0 {
        weights = g.scale(weights, c.weights_scale)?;
    }
    Ok((selected, weights))
}

/// `mul_mat_id` of rows `a` `[R, 1 or K, in]` by the selected experts' matrices `w` `[X, out, in]` →
/// `[R, K, out]`, plus each selected expert's bias row (`[X, out]`) where there are biases.
fn expert_matmul(g: &mut Graph, a: Tensor, (w, bias): (&Resident, Option<&Resident>), ids: Tensor) -> Result<Tensor> {
    let wt = g.resident(w)?;
    let y = g.mul_mat_id(a, wt, ids)?;
    let Some(b) = bias else { return Ok(y) };
    let shape = g.shape(y)?.to_vec();
    let b = g.resident(b)?;
    let flat = g.reshape(ids, &[shape[0] * shape[1]])?;
    let rows = g.get_rows(b, flat)?; // [R·K, out]
    let rows = g.reshape(rows, &shape)?;
    g.add(y, rows)
}
