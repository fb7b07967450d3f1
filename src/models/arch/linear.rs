//! The gated delta-net layer of the hybrid architectures (Qwen3.5, Qwen3-Next; llama.cpp's
//! `build_layer_attn_linear` in `delta-net-base.cpp` and the models' files): the normed rows projected to Q, K, V
//! (one matrix), the output gate z, and per value head β's and the decay's logits; Q, K, V through the causal
//! conv (its last K − 1 inputs carried per sequence) and SiLU; Q and K l2-normalized; the gated delta rule with its
//! state carried per sequence; each head's output RMS-normed (one weight for all heads) times `silu(z)`; the
//! output projection. The decay `g = ssm_a · softplus(alpha + dt_bias)` with `ssm_a = −exp(A_log)` as the
//! converter stores it; `β = sigmoid(beta)`.
//!
//! Reference: `transformers`' `Qwen3NextGatedDeltaNet` / `Qwen3_5GatedDeltaNet`; the Gated DeltaNet paper.

use super::loader::Loader;
use super::row::{Layer, View};
use super::spec::{DecoderConfig, LinearAttention, LinearConfig};
use crate::error::Result;
use crate::graph::{Graph, Tensor};
use crate::models::nn;

/// Block `l`'s gated delta-net weights.
pub(crate) fn load(ld: &Loader, l: usize, cfg: &DecoderConfig, c: &LinearConfig) -> Result<LinearAttention> {
    let (e, hv, s) = (cfg.n_embd, c.n_v_heads, c.head_dim);
    let w = |n: &str| format!("blk.{l}.{n}.weight");
    let (beta, alpha) = match c.grouped {
        true => (ld.tensor(&w("ssm_ba"), &[2 * hv, e])?, None),
        false => (ld.tensor(&w("ssm_beta"), &[hv, e])?, Some(ld.tensor(&w("ssm_alpha"), &[hv, e])?)),
    };
    Ok(LinearAttention {
        qkv: ld.tensor(&w("attn_qkv"), &[c.conv_dim(), e])?,
        z: ld.tensor(&w("attn_gate"), &[hv * s, e])?,
        beta,
        alpha,
        conv: ld.tensor(&w("ssm_conv1d"), &[c.conv_dim(), c.conv_kernel])?,
        dt_bias: ld.tensor(&format!("blk.{l}.ssm_dt.bias"), &[hv])?,
        a: ld.tensor(&format!("blk.{l}.ssm_a"), &[hv])?,
        norm: ld.tensor(&w("ssm_norm"), &[s])?,
        out: ld.tensor(&w("ssm_out"), &[e, hv * s])?,
    })
}

/// The layer's mixer over rows `h` `[R, E]`: pre-norm, the gated delta-net, the residual add. The rows are one
/// sequence's T tokens (a step: B = 1) or one token of each of B sequences (a batched decode step: T = 1), their
/// states those of the cache's slot (or slots `0..B`), which the runner zeroes where a sequence starts.
pub(crate) fn mix(g: &mut Graph, layer: &Layer, w: &LinearAttention, h: Tensor) -> Result<Tensor> {
    let Layer { cfg, l, block, cache, io, .. } = *layer;
    let c = cfg.linear.as_ref().expect("a linear layer has a linear config");
    let (hv, s, k) = (c.n_v_heads, c.head_dim, c.conv_kernel);
    let r = g.shape(h)?[0];
    let (slot, b) = match io.view {
        View::Step { first, len } => (first / len.max(1), 1),
        View::Batch { n } => (0, n),
    };
    let t = r / b;
    let (conv_state, ssm_state) = cache.recurrent(l)?;
    let x = nn::rms_norm(g, h, &block.attn_norm, cfg.rms_eps)?;
    // the conv over [carried inputs | new inputs], its last K − 1 rows carried on
    let qkv = nn::linear(g, x, &w.qkv, None)?;
    let qkv = g.reshape(qkv, &[b, t, c.conv_dim()])?;
    let cs = g.state(conv_state)?;
    let cs = g.slice(cs, 0, slot, slot + b)?;
    let xs = g.concat(&[cs, qkv], 1)?;
    let next = g.slice(xs, 1, t, t + k - 1)?;
    let next = live_rows(g, io.row_live, cs, next, 3)?;
    g.copy_into(cs, next)?;
    let conv = g.resident(&w.conv)?;
    let u = g.ssm_conv(xs, conv)?;
    let u = g.silu(u)?;
    let (q, kk, v) = split_heads(g, c, u, (b, t))?;
    let (beta, decay) = gates(g, c, w, x, (b, t))?;
    let ss = g.state(ssm_state)?;
    let ss = g.slice(ss, 0, slot, slot + b)?;
    let (o, new_state) = g.gated_delta_net(q, kk, v, decay, beta, ss, 1.0 / (s as f32).sqrt())?;
    let new_state = live_rows(g, io.row_live, ss, new_state, 4)?;
    g.copy_into(ss, new_state)?;
    // each head's output normed, times silu(z)
    let o = nn::rms_norm(g, o, &w.norm, cfg.rms_eps)?;
    let z = nn::linear(g, x, &w.z, None)?;
    let z = g.reshape(z, &[b, t, hv, s])?;
    let z = g.silu(z)?;
    let o = g.mul(o, z)?;
    let o = g.reshape(o, &[r, hv * s])?;
    let out = nn::linear(g, o, &w.out, None)?;
    g.add(h, out)
}

/// The next state of each row: `new` where the row decodes, `old` where it is idle (`live` 0: a batched
/// decode step's rows that do not decode keep their sequences' states), `new` for every row without `live`.
fn live_rows(g: &mut Graph, live: Option<Tensor>, old: Tensor, new: Tensor, rank: usize) -> Result<Tensor> {
    let Some(live) = live else { return Ok(new) };
    let b = g.shape(live)?[0];
    let shape: Vec<usize> = std::iter::once(b).chain(std::iter::repeat_n(1, rank - 1)).collect();
    let m = g.reshape(live, &shape)?;
    let d = g.sub(new, old)?;
    let d = g.mul(d, m)?;
    g.add(old, d)
}

/// Q, K `[B, T, Hv or Hk, S]` (l2-normalized) and V `[B, T, Hv, S]` from the conv's output `[B, T, conv_dim]`;
/// for grouped heads (Qwen3-Next) Q and K repeated to one per value head (value head j reads key head j / r).
fn split_heads(g: &mut Graph, c: &LinearConfig, u: Tensor, (b, t): (usize, usize)) -> Result<(Tensor, Tensor, Tensor)> {
    let (hk, hv, s) = (c.n_k_heads, c.n_v_heads, c.head_dim);
    let kd = hk * s;
    let mut part = |from: usize, heads: usize| -> Result<Tensor> {
        let p = g.slice(u, 2, from, from + heads * s)?;
        let p = g.contiguous(p)?;
        g.reshape(p, &[b, t, heads, s])
    };
    let (q, k, v) = (part(0, hk)?, part(kd, hk)?, part(2 * kd, hv)?);
    let (q, k) = (g.l2_norm(q, 1e-6)?, g.l2_norm(k, 1e-6)?);
    if !c.grouped || hk == hv {
        return Ok((q, k, v));
    }
    let mut repeat = |x: Tensor| -> Result<Tensor> {
        let x = g.reshape(x, &[b * t, hk, 1, s])?;
        let x = g.broadcast_to(x, &[b * t, hk, hv / hk, s])?;
        let x = g.contiguous(x)?;
        g.reshape(x, &[b, t, hv, s])
    };
    Ok((repeat(q)?, repeat(k)?, v))
}

/// β = sigmoid(beta logits) and the log-decays `ssm_a · softplus(alpha logits + dt_bias)`, each `[B, T, Hv]`.
fn gates(
    g: &mut Graph,
    c: &LinearConfig,
    w: &LinearAttention,
    x: Tensor,
    (b, t): (usize, usize),
) -> Result<(Tensor, Tensor)> {
    let hv = c.n_v_heads;
    let (beta, alpha) = match &w.alpha {
        Some(alpha) => (nn::linear(g, x, &w.beta, None)?, nn::linear(g, x, alpha, None)?),
        None => {
            // per key head: its r value heads' β logits, then their decay logits
            let (hk, r) = (c.n_k_heads, hv / c.n_k_heads);
            let ba = nn::linear(g, x, &w.beta, None)?;
            let ba = g.reshape(ba, &[b * t, hk, 2 * r])?;
            let (bl, al) = (g.slice(ba, 2, 0, r)?, g.slice(ba, 2, r, 2 * r)?);
            (g.contiguous(bl)?, g.contiguous(al)?)
        }
    };
    let beta = g.reshape(beta, &[b, t, hv])?;
    let beta = g.sigmoid(beta)?;
    let alpha = g.reshape(alpha, &[b, t, hv])?;
    let dt = g.resident(&w.dt_bias)?;
    let a = g.resident(&w.a)?;
    let alpha = g.add(alpha, dt)?;
    let sp = g.softplus(alpha)?;
    let decay = g.mul(sp, a)?;
    Ok((beta, decay))
}
