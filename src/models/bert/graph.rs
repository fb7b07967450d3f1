//! The graph of a BERT encoder over a padded batch `[B, T]` (Hugging Face's `BertModel`, post-LayerNorm):
//! embeddings, the layers, then the pooled sentence vectors `[B, E]`.

use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{Attention, Graph, Tensor};
use crate::models::arch::spec::Qkv;
use crate::models::nn;
use crate::ops::UnaryOp;
use crate::resident::Resident;

/// `x · wᵀ + b` and LayerNorm weights, resident.
pub(crate) struct Linear {
    pub w: Resident,
    pub b: Resident,
}

pub(crate) struct Norm {
    pub w: Resident,
    pub b: Resident,
}

pub(crate) struct Layer {
    /// Q, K and V: one matmul where their weights share a dtype (the loaders concatenate them), three otherwise.
    pub qkv: Qkv,
    pub o: Linear,
    pub attn_norm: Norm,
    pub up: Linear,
    pub down: Linear,
    pub out_norm: Norm,
}

/// sentence-transformers' `Dense` module after pooling: `act(p · wᵀ + b)`.
pub(crate) struct Dense {
    pub linear: Linear,
    /// `tanh` (the module's default, `torch.nn.Tanh`) or the identity.
    pub tanh: bool,
    /// Output width.
    pub out: usize,
}

pub(crate) struct Weights {
    pub word: Resident,
    pub position: Resident,
    /// Absent in models without token types.
    pub token_type: Option<Resident>,
    pub embd_norm: Norm,
    pub layers: Vec<Layer>,
    pub dense: Option<Dense>,
}

/// The encoder's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    /// Width E (`hidden_size`).
    pub hidden: usize,
    /// Heads H (`num_attention_heads`), of E / H dims each.
    pub heads: usize,
    /// Layers (`num_hidden_layers`).
    pub layers: usize,
    /// Feed-forward width (`intermediate_size`).
    pub intermediate: usize,
    /// LayerNorm epsilon (`layer_norm_eps`).
    pub eps: f32,
    /// Rows of the position table (`max_position_embeddings`).
    pub max_positions: usize,
    /// The position id of a sentence's first token: 0 for BERT; `pad_token_id + 1` for RoBERTa, XLM-R and
    /// CamemBERT (`model_type` `roberta`, `xlm-roberta`, `camembert`), whose positions count from past the
    /// padding id, as Hugging Face's `create_position_ids_from_input_ids` numbers them.
    pub position_offset: usize,
    /// Vocabulary size (`vocab_size`).
    pub vocab: usize,
}

impl BertConfig {
    /// Tokens a sentence may have at most, special tokens included: the position table's rows past the offset.
    pub fn max_tokens(&self) -> usize {
        self.max_positions - self.position_offset
    }
}

/// A batch graph's inputs and output.
pub(crate) struct BatchGraph {
    pub graph: Graph,
    /// i32 `[B·T]`: token ids, token types (where the model has them), positions.
    pub ids: Tensor,
    pub types: Option<Tensor>,
    pub pos: Tensor,
    /// f32 `[B, 1, 1, T]`: 0 for a real token, −inf for padding.
    pub mask: Tensor,
    /// f32 `[B, 1, T]`: the pooling weights (1/n on a sentence's n real tokens for mean pooling); with `max`
    /// pooling f32 `[B, T, 1]`: 0 for a real token, −inf for padding.
    pub pool: Tensor,
    /// f32 `[B, E]` (`[B, out]` after a Dense module).
    pub out: Tensor,
}

fn linear(g: &mut Graph, x: Tensor, l: &Linear) -> Result<Tensor> {
    let w = g.resident(&l.w)?;
    let wt = g.t(w)?;
    let y = g.matmul(x, wt)?;
    let b = g.resident(&l.b)?;
    g.add(y, b)
}

/// Q, K and V `[R, E]` of rows `x`: column views of one matmul's `[R, 3E]` where the weights are one matrix.
fn qkv(g: &mut Graph, x: Tensor, w: &Qkv, e: usize) -> Result<(Tensor, Tensor, Tensor)> {
    match w {
        Qkv::Fused { w, bias } => {
            let y = nn::linear(g, x, w, bias.as_ref())?;
            Ok((g.slice(y, 1, 0, e)?, g.slice(y, 1, e, 2 * e)?, g.slice(y, 1, 2 * e, 3 * e)?))
        }
        Qkv::Split { w, bias } => {
            let mut p = w.iter().enumerate().map(|(i, w)| nn::linear(g, x, w, bias.as_ref().map(|b| &b[i])));
            let mut next = || p.next().expect("three projections");
            Ok((next()?, next()?, next()?))
        }
    }
}

fn norm(g: &mut Graph, x: Tensor, n: &Norm, eps: f32) -> Result<Tensor> {
    let y = g.layer_norm(x, eps)?;
    let w = g.resident(&n.w)?;
    let y = g.mul(y, w)?;
    let b = g.resident(&n.b)?;
    g.add(y, b)
}

/// The encoder over `b` sentences padded to `t` tokens; `max` pools the largest value of each dimension over the
/// real tokens instead of a weighted sum.
pub(crate) fn build_batch(cfg: &BertConfig, w: &Weights, b: usize, t: usize, max: bool) -> Result<BatchGraph> {
    let mut g = Graph::new();
    let (e, h) = (cfg.hidden, cfg.heads);
    let d = e / h;
    let ids = g.input("ids", DType::I32, &[b * t])?;
    let types = w.token_type.as_ref().map(|_| g.input("types", DType::I32, &[b * t])).transpose()?;
    let pos = g.input("pos", DType::I32, &[b * t])?;
    let mask = g.input("mask", DType::F32, &[b, 1, 1, t])?;
    let pool_shape = if max { [b, t, 1] } else { [b, 1, t] };
    let pool = g.input("pool", DType::F32, &pool_shape)?;
    let tables = [(Some(&w.word), Some(ids)), (Some(&w.position), Some(pos)), (w.token_type.as_ref(), types)];
    let mut x: Option<Tensor> = None;
    for (table, idx) in tables.into_iter().filter_map(|(t, i)| Some((t?, i?))) {
        let tt = g.resident(table)?;
        let rows = g.get_rows(tt, idx)?;
        x = Some(match x {
            Some(acc) => g.add(acc, rows)?,
            None => rows,
        });
    }
    let mut x = norm(&mut g, x.expect("the word table"), &w.embd_norm, cfg.eps)?;
    let heads = |g: &mut Graph, y: Tensor| -> Result<Tensor> {
        let y = g.reshape(y, &[b, t, h, d])?;
        g.permute(y, &[0, 2, 1, 3]) // [B, H, T, D]
    };
    for l in &w.layers {
        let (q, k, v) = qkv(&mut g, x, &l.qkv, e)?;
        let (q, k, v) = (heads(&mut g, q)?, heads(&mut g, k)?, heads(&mut g, v)?);
        let a =
            Attention { scale: 1.0 / (d as f32).sqrt(), causal: false, mask: Some(mask), kv_len: None, sinks: None };
        let o = g.attention(q, k, v, &a)?; // [B, T, H, D]
        let o = g.reshape(o, &[b * t, e])?;
        let o = linear(&mut g, o, &l.o)?;
        let r = g.add(x, o)?;
        x = norm(&mut g, r, &l.attn_norm, cfg.eps)?;
        let f = linear(&mut g, x, &l.up)?;
        let f = g.unary(UnaryOp::GeluErf, f, &[])?;
        let f = linear(&mut g, f, &l.down)?;
        let r = g.add(x, f)?;
        x = norm(&mut g, r, &l.out_norm, cfg.eps)?;
    }
    let x = g.reshape(x, &[b, t, e])?;
    let pooled = if max {
        let masked = g.add(x, pool)?; // padding at −inf
        let by_dim = g.permute(masked, &[0, 2, 1])?; // [B, E, T]
        g.max(by_dim)? // [B, E, 1]
    } else {
        g.matmul(pool, x)? // [B, 1, E]
    };
    let mut out = g.reshape(pooled, &[b, e])?;
    if let Some(d) = &w.dense {
        out = linear(&mut g, out, &d.linear)?;
        if d.tanh {
            out = g.tanh(out)?;
        }
    }
    Ok(BatchGraph { graph: g, ids, types, pos, mask, pool, out })
}
