//! The graph of one forward step over T new tokens (llama.cpp's `llm_build_llama`): token embedding, the
//! transformer blocks writing their keys and values into the KV-cache states at the tokens' positions and
//! attending over the first `kv_len` cached positions, then the last position's logits (and their argmax, for
//! greedy decoding without reading the logits back).

use super::config::LlamaConfig;
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{Attention, Graph, Tensor};
use crate::ops::Rope;
use crate::resident::{Resident, State};

/// One block's weights, resident on the device (GGUF names `blk.N.*`; matrices `[out, in]`).
pub(crate) struct Block {
    pub attn_norm: Resident,
    pub wq: Resident,
    pub wk: Resident,
    pub wv: Resident,
    pub wo: Resident,
    pub ffn_norm: Resident,
    pub w_gate: Resident,
    pub w_up: Resident,
    pub w_down: Resident,
}

/// Every weight of the model, resident.
pub(crate) struct Weights {
    pub token_embd: Resident,
    pub blocks: Vec<Block>,
    pub output_norm: Resident,
    /// `output.weight`, or `None` when the head is tied to the token embedding.
    pub output: Option<Resident>,
}

/// The KV cache of `slots` sequences: per block, keys and values `[slots · capacity, Hkv · D]`, sequence `s` in
/// rows `s · capacity ..` (a row per position).
pub(crate) struct KvCache {
    pub k: Vec<State>,
    pub v: Vec<State>,
    /// Positions per sequence.
    pub capacity: usize,
    pub slots: usize,
}

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
    /// f32 `[1, V]`: the last position's logits.
    pub logits: Tensor,
    /// i32 `[1]`: their argmax.
    pub argmax: Tensor,
}

/// The graph of a step over `t` tokens of the sequence in cache slot `slot`.
pub(crate) fn build_step(cfg: &LlamaConfig, w: &Weights, cache: &KvCache, t: usize, slot: usize) -> Result<StepGraph> {
    let mut g = Graph::new();
    let tokens = g.input("tokens", DType::I32, &[t])?;
    let pos = g.input("pos", DType::I32, &[t])?;
    let rows = g.input("rows", DType::I32, &[t])?;
    let kv_len = g.input("kv_len", DType::I32, &[1])?;
    let embd = g.resident(&w.token_embd)?;
    let mut h = g.get_rows(embd, tokens)?;
    let window = (slot * cache.capacity, cache.capacity);
    for (l, b) in w.blocks.iter().enumerate() {
        let x = norm(&mut g, h, &b.attn_norm, cfg.rms_eps)?;
        let (q, k, v) = qkv(&mut g, cfg, b, x, pos)?;
        let (kc, vc) = write_kv(&mut g, (&cache.k[l], &cache.v[l]), rows, k, v)?;
        let o = attend(&mut g, cfg, q, (kc, vc), window, kv_len)?;
        let a = linear(&mut g, o, &b.wo)?;
        h = g.add(h, a)?;
        let x = norm(&mut g, h, &b.ffn_norm, cfg.rms_eps)?;
        let f = feed_forward(&mut g, b, x)?;
        h = g.add(h, f)?;
    }
    let last = g.slice(h, 0, t - 1, t)?;
    let x = norm(&mut g, last, &w.output_norm, cfg.rms_eps)?;
    let head = w.output.as_ref().unwrap_or(&w.token_embd);
    let logits = linear(&mut g, x, head)?;
    let argmax = g.argmax(logits)?;
    Ok(StepGraph { graph: g, tokens, pos, rows, kv_len, logits, argmax })
}

/// `rms_norm(x) · weight`.
fn norm(g: &mut Graph, x: Tensor, weight: &Resident, eps: f32) -> Result<Tensor> {
    let n = g.rms_norm(x, eps)?;
    let w = g.resident(weight)?;
    g.mul(n, w)
}

/// `x · wᵀ` for a weight stored `[out, in]`.
fn linear(g: &mut Graph, x: Tensor, w: &Resident) -> Result<Tensor> {
    let w = g.resident(w)?;
    let wt = g.t(w)?;
    g.matmul(x, wt)
}

/// The Q `[T, H, D]`, K and V `[T, Hkv · D]` projections of `[T, E]` rows, Q and K roped at `pos`.
fn qkv(g: &mut Graph, cfg: &LlamaConfig, b: &Block, x: Tensor, pos: Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let t = g.shape(x)?[0];
    let (h, hkv, d) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
    let rope =
        Rope { n_dims: cfg.rope_dims, mode: cfg.rope_mode, freq_base: cfg.rope_base, freq_scale: cfg.rope_scale };
    let q = linear(g, x, &b.wq)?;
    let q = g.reshape(q, &[t, h, d])?;
    let q = g.rope(q, pos, &rope)?;
    let k = linear(g, x, &b.wk)?;
    let k = g.reshape(k, &[t, hkv, d])?;
    let k = g.rope(k, pos, &rope)?;
    let k = g.reshape(k, &[t, hkv * d])?;
    let v = linear(g, x, &b.wv)?;
    Ok((q, k, v))
}

/// K and V `[T, Hkv · D]` written into the cache states' rows `rows` (i32 `[T]`), in place: the written states,
/// which the attention then reads (so it runs after the writes).
fn write_kv(g: &mut Graph, (kc, vc): (&State, &State), rows: Tensor, k: Tensor, v: Tensor) -> Result<(Tensor, Tensor)> {
    let kc = g.state(kc)?;
    let kc = g.set_rows(kc, rows, k)?;
    let vc = g.state(vc)?;
    let vc = g.set_rows(vc, rows, v)?;
    Ok((kc, vc))
}

/// One sequence's attention `[T, H · D]`: its queries `[T, H, D]` over the first `kv_len` positions of its rows
/// `window` = (first row, positions) of the written cache states (causal).
fn attend(
    g: &mut Graph,
    cfg: &LlamaConfig,
    q: Tensor,
    (kc, vc): (Tensor, Tensor),
    (first, len): (usize, usize),
    kv_len: Tensor,
) -> Result<Tensor> {
    let t = g.shape(q)?[0];
    let (h, hkv, d) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
    let view = |g: &mut Graph, c: Tensor| -> Result<Tensor> {
        let c = if g.shape(c)?[0] == len { c } else { g.slice(c, 0, first, first + len)? };
        let c = g.reshape(c, &[len, hkv, d])?;
        g.permute(c, &[1, 0, 2])
    };
    let (kview, vview) = (view(g, kc)?, view(g, vc)?);
    let qh = g.permute(q, &[1, 0, 2])?;
    let a = Attention { scale: 1.0 / (d as f32).sqrt(), causal: true, mask: None, kv_len: Some(kv_len) };
    let o = g.attention(qh, kview, vview, &a)?; // [T, H, D]
    g.reshape(o, &[t, h * d])
}

/// The graph of one decode step of the sequences in cache slots `0..n`: their tokens embedded and projected as
/// the `[n, E]` rows of one matmul per weight (the weights read once for all), each row's keys and values written
/// at its own cache row (one write for all), and one attention of each row over its own slot's positions: the
/// first `kv_len` (the longest sequence's) with a mask hiding each row's positions past its own length.
pub(crate) fn build_decode_batch(cfg: &LlamaConfig, w: &Weights, cache: &KvCache, n: usize) -> Result<BatchGraph> {
    let (cap, hkv, d, h) = (cache.capacity, cfg.n_kv_heads, cfg.head_dim, cfg.n_heads);
    let mut g = Graph::new();
    let tokens = g.input("tokens", DType::I32, &[n])?;
    let pos = g.input("pos", DType::I32, &[n])?;
    let rows = g.input("rows", DType::I32, &[n])?;
    let mask = g.input("mask", DType::F32, &[n, 1, 1, cap])?;
    let kv_len = g.input("kv_len", DType::I32, &[1])?;
    let embd = g.resident(&w.token_embd)?;
    let mut x0 = g.get_rows(embd, tokens)?;
    let view = |g: &mut Graph, c: Tensor| -> Result<Tensor> {
        let c = if n == cache.slots { c } else { g.slice(c, 0, 0, n * cap)? };
        let c = g.reshape(c, &[n, cap, hkv, d])?;
        g.permute(c, &[0, 2, 1, 3])
    };
    for (l, blk) in w.blocks.iter().enumerate() {
        let x = norm(&mut g, x0, &blk.attn_norm, cfg.rms_eps)?;
        let (q, k, v) = qkv(&mut g, cfg, blk, x, pos)?;
        let (kc, vc) = write_kv(&mut g, (&cache.k[l], &cache.v[l]), rows, k, v)?;
        let (kview, vview) = (view(&mut g, kc)?, view(&mut g, vc)?);
        let qh = g.reshape(q, &[n, h, 1, d])?;
        let a = Attention { scale: 1.0 / (d as f32).sqrt(), causal: true, mask: Some(mask), kv_len: Some(kv_len) };
        let o = g.attention(qh, kview, vview, &a)?; // [n, 1, H, D]
        let o = g.reshape(o, &[n, h * d])?;
        let a = linear(&mut g, o, &blk.wo)?;
        x0 = g.add(x0, a)?;
        let x = norm(&mut g, x0, &blk.ffn_norm, cfg.rms_eps)?;
        let f = feed_forward(&mut g, blk, x)?;
        x0 = g.add(x0, f)?;
    }
    let x = norm(&mut g, x0, &w.output_norm, cfg.rms_eps)?;
    let head = w.output.as_ref().unwrap_or(&w.token_embd);
    let logits = linear(&mut g, x, head)?;
    let argmax = g.argmax(logits)?;
    Ok(BatchGraph { graph: g, tokens, pos, rows, mask, kv_len, logits, argmax })
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
    /// i32 `[1]`: positions the attention spans (the longest row's).
    pub kv_len: Tensor,
    /// f32 `[B, V]`: each sequence's logits.
    pub logits: Tensor,
    /// i32 `[B, 1]`: their argmax.
    pub argmax: Tensor,
}

/// `down(silu(gate(x)) · up(x))`.
fn feed_forward(g: &mut Graph, b: &Block, x: Tensor) -> Result<Tensor> {
    let gate = linear(g, x, &b.w_gate)?;
    let up = linear(g, x, &b.w_up)?;
    let a = g.swiglu(gate, up)?;
    linear(g, a, &b.w_down)
}
