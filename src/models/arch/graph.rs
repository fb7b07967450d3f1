//! The graphs of a decoder's forward steps (llama.cpp's `llm_build_*`, one builder for every architecture of
//! [`crate::models::arch`]): token embedding (scaled where the architecture says), the transformer blocks writing
//! their keys and values into the KV-cache states at the tokens' positions and attending over the cached
//! positions (all, or a sliding window), then the logits (soft-capped where the architecture says) and their
//! argmax, for greedy decoding without reading the logits back.

use super::moe;
use super::row::{Io, KvCache, Layer, View, Weights};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{Graph, Tensor};
use crate::models::arch::spec::{Attention, DecoderConfig, Ffn, Mixer, Qkv};
use crate::models::nn::{self, AttendSpec};
use crate::resident::{Resident, State};

/// A step graph's inputs and outputs.
pub(crate) struct StepGraph {
    pub graph: Graph,
    /// i32 `[T]`: the new tokens.
    pub tokens: Tensor,
    /// i32 `[T]`: their positions.
    pub pos: Tensor,
    /// i32 `[T]`: the cache rows they are written to (their positions, after the sequence's first row).
    pub rows: Tensor,
    /// i32 `[1]`: positions cached after this step (the last position + 1).
    pub kv_len: Tensor,
    /// f32 `[T, capacity]`: each token's own positions (0) and the rest (−inf), where soft-capped attention
    /// needs it as an input ([`causal_mask`] without a window).
    pub mask: Option<Tensor>,
    /// f32 `[T, capacity]`: the same within the sliding window, where some layer has one.
    pub swa_mask: Option<Tensor>,
    /// f32 `[1, V]`: the last position's logits.
    pub logits: Tensor,
    /// i32 `[1]`: their argmax.
    pub argmax: Tensor,
    /// f32 `[1, 1]`: the sum of their logits, finite exactly when every logit is (greedy decoding reads the argmax
    /// only, and an argmax of NaN logits is a token like any other).
    pub logits_sum: Tensor,
}

/// The graph of a step over `t` tokens of the sequence in cache slot `slot`.
pub(crate) fn build_step(
    cfg: &DecoderConfig,
    w: &Weights,
    cache: &KvCache,
    t: usize,
    slot: usize,
) -> Result<StepGraph> {
    let cap = cache.capacity;
    let mut g = Graph::new();
    let tokens = g.input("tokens", DType::I32, &[t])?;
    let pos = g.input("pos", DType::I32, &[t])?;
    let rows = g.input("rows", DType::I32, &[t])?;
    let kv_len = g.input("kv_len", DType::I32, &[1])?;
    let mask = cfg.attn_softcap.map(|_| g.input("mask", DType::F32, &[t, cap])).transpose()?;
    let swa_mask = cfg.sliding_window.map(|_| g.input("swa_mask", DType::F32, &[t, cap])).transpose()?;
    let rope_factors = w.rope_factors.as_ref().map(|f| g.resident(f)).transpose()?;
    let view = View::Step { first: slot * cap, len: cap };
    let io = Io { pos, rows, kv_len, mask, swa_mask, view, rope_factors, row_live: None };
    let mut h = embed(&mut g, cfg, w, tokens)?;
    for (l, block) in w.blocks.iter().enumerate() {
        let last_row_only = t > 1 && l + 1 == w.blocks.len();
        h = (w.layer)(&mut g, &Layer { cfg, l, block, cache, io: &io, last_row_only }, h)?;
    }
    if g.shape(h)?[0] > 1 {
        h = g.slice(h, 0, t - 1, t)?;
    }
    let (logits, argmax, logits_sum) = head(&mut g, cfg, w, h)?;
    Ok(StepGraph { graph: g, tokens, pos, rows, kv_len, mask, swa_mask, logits, argmax, logits_sum })
}

/// The graph of one decode step of the sequences in cache slots `0..n`: their tokens embedded and projected as
/// the `[n, E]` rows of one matmul per weight (the weights read once for all), each row's keys and values written
/// at its own cache row (one write for all), and one attention of each row over its own slot's positions: the
/// first `kv_len` (the longest sequence's) with a mask hiding each row's positions past its own length.
pub(crate) fn build_decode_batch(cfg: &DecoderConfig, w: &Weights, cache: &KvCache, n: usize) -> Result<BatchGraph> {
    let cap = cache.capacity;
    let mut g = Graph::new();
    let tokens = g.input("tokens", DType::I32, &[n])?;
    let pos = g.input("pos", DType::I32, &[n])?;
    let rows = g.input("rows", DType::I32, &[n])?;
    let mask = g.input("mask", DType::F32, &[n, 1, 1, cap])?;
    let kv_len = g.input("kv_len", DType::I32, &[1])?;
    let swa_mask = cfg.sliding_window.map(|_| g.input("swa_mask", DType::F32, &[n, 1, 1, cap])).transpose()?;
    let rope_factors = w.rope_factors.as_ref().map(|f| g.resident(f)).transpose()?;
    let view = View::Batch { n };
    let row_live = cache.is_recurrent().then(|| g.input("row_live", DType::F32, &[n])).transpose()?;
    let mask = Some(mask);
    let io = Io { pos, rows, kv_len, mask, swa_mask, view, rope_factors, row_live };
    let mut x = embed(&mut g, cfg, w, tokens)?;
    for (l, block) in w.blocks.iter().enumerate() {
        x = (w.layer)(&mut g, &Layer { cfg, l, block, cache, io: &io, last_row_only: false }, x)?;
    }
    let (logits, argmax, logits_sum) = head(&mut g, cfg, w, x)?;
    let mask = io.mask.expect("set above");
    Ok(BatchGraph { graph: g, tokens, pos, rows, mask, swa_mask, row_live, kv_len, logits, argmax, logits_sum })
}

/// A batched decode step's inputs and outputs (B sequences).
pub(crate) struct BatchGraph {
    pub graph: Graph,
    /// i32 `[B]`: each sequence's token.
    pub tokens: Tensor,
    /// i32 `[B]`: their positions.
    pub pos: Tensor,
    /// i32 `[B]`: the cache row each writes (its slot's first row + its position).
    pub rows: Tensor,
    /// f32 `[B, 1, 1, capacity]`: 0 for each row's own positions (its position + 1 of them), −inf past them.
    pub mask: Tensor,
    /// f32 `[B, 1, 1, capacity]`: the same within the sliding window, where some layer has one.
    pub swa_mask: Option<Tensor>,
    /// f32 `[B]`: 1 for the rows that decode, 0 for idle ones (see [`Io::row_live`]), where the model has
    /// recurrent states.
    pub row_live: Option<Tensor>,
    /// i32 `[1]`: positions the attention spans (the longest row's).
    pub kv_len: Tensor,
    /// f32 `[B, V]`: each sequence's logits.
    pub logits: Tensor,
    /// i32 `[B, 1]`: their argmax.
    pub argmax: Tensor,
    /// f32 `[B, 1]`: each row's sum of logits (see [`StepGraph::logits_sum`]).
    pub logits_sum: Tensor,
}

/// An additive mask `[T, capacity]` for tokens at positions `start..start + t`: 0 where a token sees a key (its
/// own position and earlier ones, within `window` positions when there is one), −inf elsewhere.
pub(crate) fn causal_mask(start: usize, t: usize, cap: usize, window: Option<usize>) -> Vec<f32> {
    let mut m = vec![f32::NEG_INFINITY; t * cap];
    for i in 0..t {
        let p = start + i;
        let from = window.map_or(0, |w| (p + 1).saturating_sub(w));
        m[i * cap + from..i * cap + p + 1].fill(0.0);
    }
    m
}

/// The token embeddings of `tokens` (scaled by the architecture's factor).
fn embed(g: &mut Graph, cfg: &DecoderConfig, w: &Weights, tokens: Tensor) -> Result<Tensor> {
    let embd = g.resident(&w.token_embd)?;
    let h = g.get_rows(embd, tokens)?;
    match cfg.embd_scale {
        Some(s) => g.scale(h, s),
        None => Ok(h),
    }
}

/// The output norm, the head (soft-capped where the architecture says), the argmax and the sum of the logits
/// of rows `x`.
fn head(g: &mut Graph, cfg: &DecoderConfig, w: &Weights, x: Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let x = nn::rms_norm(g, x, &w.output_norm, cfg.rms_eps)?;
    let head = w.output.as_ref().unwrap_or(&w.token_embd);
    let mut logits = nn::linear(g, x, head, None)?;
    if let Some(c) = cfg.final_softcap {
        logits = nn::softcap(g, logits, c)?;
    }
    let argmax = g.argmax(logits)?;
    let sum = g.sum(logits)?;
    Ok((logits, argmax, sum))
}

/// The llama-shaped block over rows `h` `[R, E]` (llama.cpp's `llm_build_llama` and the builders that follow
/// it): self-attention (with its keys and values written to the cache) and the gated feed-forward or the mixture
/// of experts, each pre-normed, post-normed where the architecture says, and added to the residual.
pub(crate) fn llama_layer(g: &mut Graph, layer: &Layer, h: Tensor) -> Result<Tensor> {
    let (cfg, b) = (layer.cfg, layer.block);
    let mut h = match &b.mixer {
        Mixer::Attention(_) => self_attention(g, layer, h)?,
        Mixer::Linear(w) => super::linear::mix(g, layer, w, h)?,
    };
    if layer.last_row_only {
        let r = g.shape(h)?[0];
        h = g.slice(h, 0, r - 1, r)?;
    }
    let x = nn::rms_norm(g, h, &b.ffn_norm, cfg.rms_eps)?;
    let f = match &b.ffn {
        Ffn::Dense { gate, up, down } => nn::gated_ffn(g, x, (gate, up, down), cfg.ffn_act)?,
        Ffn::Experts(experts) => moe::moe_ffn(g, experts, x)?,
    };
    let f = nn::maybe_rms_norm(g, f, b.post_ffn_norm.as_ref(), cfg.rms_eps)?;
    g.add(h, f)
}

/// The attention half of a block over rows `h`: pre-norm, Q, K and V (the keys and values written to the
/// cache), attention over the cache, the output projection, post-norm where the architecture says, and the
/// residual add.
pub(crate) fn self_attention(g: &mut Graph, layer: &Layer, h: Tensor) -> Result<Tensor> {
    let Layer { cfg, l, block: b, cache, io, .. } = *layer;
    let a = b.attention().ok_or_else(|| crate::Error::Unsupported {
        op: "self_attention".into(),
        backend: cfg.arch.clone(),
        reason: format!("block {l} is a linear-attention layer"),
    })?;
    let (Some(kc), Some(vc)) = (&cache.k[l], &cache.v[l]) else {
        let reason = format!("block {l} has no KV cache");
        return Err(crate::Error::Unsupported { op: "self_attention".into(), backend: cfg.arch.clone(), reason });
    };
    let x = nn::rms_norm(g, h, &b.attn_norm, cfg.rms_eps)?;
    let (q, k, v, gate) = qkv(g, cfg, (l, a), x, io)?;
    let (kc, vc) = write_kv(g, (kc, vc), io.rows, k, v)?;
    let sinks = a.sinks.as_ref().map(|s| g.resident(s)).transpose()?;
    let mut o = attention(g, (cfg, l, sinks), q, (kc, vc), cache.capacity, io)?;
    if let Some(gate) = gate {
        o = nn::sigmoid_gate(g, o, gate)?;
    }
    let a = nn::linear(g, o, &a.wo, a.wo_bias.as_ref())?;
    let a = nn::maybe_rms_norm(g, a, b.post_attn_norm.as_ref(), cfg.rms_eps)?;
    g.add(h, a)
}

/// The Q `[R, H, D]`, K and V `[R, Hkv · D]` projections of `[R, E]` rows (biased, and Q and K normed per head,
/// where the block has those), Q and K roped at `io.pos` (with the sliding-window layers' rope on those, and the
/// model's frequency factors where it has them), and the output gate's logits `[R, H · D]` where Q has them.
fn qkv(
    g: &mut Graph,
    cfg: &DecoderConfig,
    (l, b): (usize, &Attention),
    x: Tensor,
    io: &Io,
) -> Result<(Tensor, Tensor, Tensor, Option<Tensor>)> {
    let r = g.shape(x)?[0];
    let (h, hkv, d) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
    let rope = cfg.rope(l);
    let (q, k, v) = match &b.qkv {
        Qkv::Fused { w, bias } => {
            // one matmul, Q, K and V column views of its rows
            let y = nn::linear(g, x, w, bias.as_ref())?;
            let (nq, nkv) = (if b.gated_q { 2 * h * d } else { h * d }, hkv * d);
            (g.slice(y, 1, 0, nq)?, g.slice(y, 1, nq, nq + nkv)?, g.slice(y, 1, nq + nkv, nq + 2 * nkv)?)
        }
        Qkv::Split { w, bias } => {
            let mut p = w.iter().enumerate().map(|(i, w)| nn::linear(g, x, w, bias.as_ref().map(|b| &b[i])));
            let mut next = || p.next().expect("three projections");
            (next()?, next()?, next()?)
        }
    };
    // a norm of D values normalizes each head (Qwen3, Gemma 3), a wider one each whole projection (OLMoE)
    fn part(n: &Option<Resident>, d: usize, per_head: bool) -> Option<&Resident> {
        n.as_ref().filter(|w| (w.shape() == [d]) == per_head)
    }
    let per_head = |n| part(n, d, true);
    let whole = |n| part(n, d, false);
    let (q, gate) = match b.gated_q {
        // each head's D queries, then its D gate logits
        true => {
            let q = g.reshape(q, &[r, h, 2 * d])?;
            let gate = g.slice(q, 2, d, 2 * d)?;
            let gate = g.contiguous(gate)?;
            (g.slice(q, 2, 0, d)?, Some(g.reshape(gate, &[r, h * d])?))
        }
        false => (q, None),
    };
    let q = nn::maybe_rms_norm(g, q, whole(&b.q_norm), cfg.rms_eps)?;
    let q = g.reshape(q, &[r, h, d])?;
    let q = nn::maybe_rms_norm(g, q, per_head(&b.q_norm), cfg.rms_eps)?;
    let q = g.rope_ext(q, io.pos, io.rope_factors, &rope)?;
    let k = nn::maybe_rms_norm(g, k, whole(&b.k_norm), cfg.rms_eps)?;
    let k = g.reshape(k, &[r, hkv, d])?;
    let k = nn::maybe_rms_norm(g, k, per_head(&b.k_norm), cfg.rms_eps)?;
    let k = g.rope_ext(k, io.pos, io.rope_factors, &rope)?;
    let k = g.reshape(k, &[r, hkv * d])?;
    Ok((q, k, v, gate))
}

/// K and V `[R, Hkv · D]` written into the cache states' rows `rows` (i32 `[R]`), in place: the written states,
/// which the attention then reads (so it runs after the writes).
fn write_kv(g: &mut Graph, (kc, vc): (&State, &State), rows: Tensor, k: Tensor, v: Tensor) -> Result<(Tensor, Tensor)> {
    let kc = g.state(kc)?;
    let kc = g.set_rows(kc, rows, k)?;
    let vc = g.state(vc)?;
    let vc = g.set_rows(vc, rows, v)?;
    Ok((kc, vc))
}

/// Layer `l`'s attention `[R, H · D]` of queries `[R, H, D]` over the written cache states: one sequence's
/// rows `first..first + len` (causal), or each of `n` rows over its own slot (masked to its own length); with the
/// layer's sinks where it has them.
fn attention(
    g: &mut Graph,
    (cfg, l, sinks): (&DecoderConfig, usize, Option<Tensor>),
    q: Tensor,
    (kc, vc): (Tensor, Tensor),
    cap: usize,
    io: &Io,
) -> Result<Tensor> {
    let r = g.shape(q)?[0];
    let (h, hkv, d) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
    let (k, v, qh) = match io.view {
        View::Step { first, len } => {
            let view = |g: &mut Graph, c: Tensor| -> Result<Tensor> {
                let c = if g.shape(c)?[0] == len { c } else { g.slice(c, 0, first, first + len)? };
                let c = g.reshape(c, &[len, hkv, d])?;
                g.permute(c, &[1, 0, 2])
            };
            (view(g, kc)?, view(g, vc)?, g.permute(q, &[1, 0, 2])?)
        }
        View::Batch { n } => {
            let view = |g: &mut Graph, c: Tensor| -> Result<Tensor> {
                let c = if g.shape(c)?[0] == n * cap { c } else { g.slice(c, 0, 0, n * cap)? };
                let c = g.reshape(c, &[n, cap, hkv, d])?;
                g.permute(c, &[0, 2, 1, 3])
            };
            (view(g, kc)?, view(g, vc)?, g.reshape(q, &[n, h, 1, d])?)
        }
    };
    let mask = if cfg.is_swa(l) { io.swa_mask } else { io.mask };
    let (scale, softcap, kv_len) = (cfg.attn_scale, cfg.attn_softcap, Some(io.kv_len));
    let spec = AttendSpec { scale, softcap, causal: true, mask, kv_len, sinks };
    let o = nn::attend(g, qh, k, v, &spec)?; // [T, H, D] or [n, 1, H, D]
    g.reshape(o, &[r, h * d])
}
