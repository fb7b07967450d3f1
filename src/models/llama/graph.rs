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

/// The KV cache: per block, keys and values `[capacity, Hkv · D]` (a row per position).
pub(crate) struct KvCache {
    pub k: Vec<State>,
    pub v: Vec<State>,
    pub capacity: usize,
}

/// A step graph's inputs and outputs.
pub(crate) struct StepGraph {
    pub graph: Graph,
    /// i32 `[T]`: the new tokens.
    pub tokens: Tensor,
    /// i32 `[T]`: their positions.
    pub pos: Tensor,
    /// i32 `[1]`: positions cached after this step (the last position + 1).
    pub kv_len: Tensor,
    /// f32 `[1, V]`: the last position's logits.
    pub logits: Tensor,
    /// i32 `[1]`: their argmax.
    pub argmax: Tensor,
}

/// The graph of a step over `t` tokens.
pub(crate) fn build_step(cfg: &LlamaConfig, w: &Weights, cache: &KvCache, t: usize) -> Result<StepGraph> {
    let mut g = Graph::new();
    let tokens = g.input("tokens", DType::I32, &[t])?;
    let pos = g.input("pos", DType::I32, &[t])?;
    let kv_len = g.input("kv_len", DType::I32, &[1])?;
    let embd = g.resident(&w.token_embd)?;
    let mut h = g.get_rows(embd, tokens)?;
    for (l, b) in w.blocks.iter().enumerate() {
        let x = norm(&mut g, h, &b.attn_norm, cfg.rms_eps)?;
        let a = attention_block(&mut g, cfg, b, x, pos, kv_len, (&cache.k[l], &cache.v[l]), cache.capacity)?;
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
    Ok(StepGraph { graph: g, tokens, pos, kv_len, logits, argmax })
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

/// Self-attention of the step's `[T, E]` rows: Q, K and V projections, rope at `pos`, K and V written into the
/// cache rows `pos`, attention over the first `kv_len` cached positions (causal), the output projection.
#[allow(clippy::too_many_arguments)]
fn attention_block(
    g: &mut Graph,
    cfg: &LlamaConfig,
    b: &Block,
    x: Tensor,
    pos: Tensor,
    kv_len: Tensor,
    cache: (&State, &State),
    capacity: usize,
) -> Result<Tensor> {
    let (q, k, v) = qkv(g, cfg, b, x, pos)?;
    let o = attend(g, cfg, (q, k, v), pos, kv_len, cache, capacity)?;
    linear(g, o, &b.wo)
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

/// One sequence's attention `[T, H · D]`: its K and V rows written into its cache rows `rows` (i32 `[T]`), its
/// queries `[T, H, D]` attending over the first `kv_len` cached positions (causal).
fn attend(
    g: &mut Graph,
    cfg: &LlamaConfig,
    (q, k, v): (Tensor, Tensor, Tensor),
    rows: Tensor,
    kv_len: Tensor,
    (k_cache, v_cache): (&State, &State),
    capacity: usize,
) -> Result<Tensor> {
    let t = g.shape(q)?[0];
    let (h, hkv, d) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
    // written in place; the views below read the written states, so the attention runs after the writes
    let kc = g.state(k_cache)?;
    let kc = g.set_rows(kc, rows, k)?;
    let vc = g.state(v_cache)?;
    let vc = g.set_rows(vc, rows, v)?;
    let kview = g.reshape(kc, &[capacity, hkv, d])?;
    let kview = g.permute(kview, &[1, 0, 2])?;
    let vview = g.reshape(vc, &[capacity, hkv, d])?;
    let vview = g.permute(vview, &[1, 0, 2])?;
    let qh = g.permute(q, &[1, 0, 2])?;
    let a = Attention { scale: 1.0 / (d as f32).sqrt(), causal: true, mask: None, kv_len: Some(kv_len) };
    let o = g.attention(qh, kview, vview, &a)?; // [T, H, D]
    g.reshape(o, &[t, h * d])
}

/// The graph of one decode step of B sequences, sequence `b` in `caches[b]` (its own KV cache): their tokens
/// embedded and projected as the `[B, E]` rows of one matmul per weight (the weights read once for all), each
/// row's keys and values written at its own position and its attention over its own first `kv_len[b]` positions;
/// every row's logits and argmax.
pub(crate) fn build_decode_batch(cfg: &LlamaConfig, w: &Weights, caches: &[&KvCache]) -> Result<BatchGraph> {
    let n = caches.len();
    let mut g = Graph::new();
    let tokens = g.input("tokens", DType::I32, &[n])?;
    let pos = g.input("pos", DType::I32, &[n])?;
    let rows = (0..n).map(|b| g.input(&format!("row.{b}"), DType::I32, &[1])).collect::<Result<Vec<_>>>()?;
    let kv_len = (0..n).map(|b| g.input(&format!("kv_len.{b}"), DType::I32, &[1])).collect::<Result<Vec<_>>>()?;
    let embd = g.resident(&w.token_embd)?;
    let mut h = g.get_rows(embd, tokens)?;
    for (l, blk) in w.blocks.iter().enumerate() {
        let x = norm(&mut g, h, &blk.attn_norm, cfg.rms_eps)?;
        let (q, k, v) = qkv(&mut g, cfg, blk, x, pos)?;
        let mut outs = Vec::with_capacity(n);
        for (b, cache) in caches.iter().enumerate() {
            let row = |g: &mut Graph, t: Tensor| g.slice(t, 0, b, b + 1);
            let qkv_b = (row(&mut g, q)?, row(&mut g, k)?, row(&mut g, v)?);
            let (kc, vc) = (&cache.k[l], &cache.v[l]);
            outs.push(attend(&mut g, cfg, qkv_b, rows[b], kv_len[b], (kc, vc), cache.capacity)?);
        }
        let o = g.concat(&outs, 0)?;
        let a = linear(&mut g, o, &blk.wo)?;
        h = g.add(h, a)?;
        let x = norm(&mut g, h, &blk.ffn_norm, cfg.rms_eps)?;
        let f = feed_forward(&mut g, blk, x)?;
        h = g.add(h, f)?;
    }
    let x = norm(&mut g, h, &w.output_norm, cfg.rms_eps)?;
    let head = w.output.as_ref().unwrap_or(&w.token_embd);
    let logits = linear(&mut g, x, head)?;
    let argmax = g.argmax(logits)?;
    Ok(BatchGraph { graph: g, tokens, pos, rows, kv_len, logits, argmax })
}

/// A batched decode step's inputs and outputs (B sequences).
pub(crate) struct BatchGraph {
    pub graph: Graph,
    /// i32 `[B]`: each sequence's token.
    pub tokens: Tensor,
    /// i32 `[B]`: their positions.
    pub pos: Tensor,
    /// i32 `[1]` each: the cache row sequence `b` writes (its position).
    pub rows: Vec<Tensor>,
    /// i32 `[1]` each: positions sequence `b` attends over (its position + 1).
    pub kv_len: Vec<Tensor>,
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
