//! Rotary position embeddings and attention.

use super::handle::{Attention, Tensor};
use super::{Graph, NodeId, Op};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::Rope;
use crate::shape::broadcast_shapes;

impl Graph {
    /// Rotary position embedding of every head of `x` at the positions `pos`: the first `n_dims` dims of each head
    /// turn in pairs by `pos[t] · freq_scale · freq_base^(-2i / n_dims)` radians (pair `i`), in f32, with
    /// YaRN's mix and cos/sin scaling where `rope` asks for them ([`Rope`]).
    ///
    /// # Shapes
    /// x `[T, H, D]` or `[B, T, H, D]`, pos `[T]` → x's shape (contiguous).
    /// # DTypes
    /// x f32 or f16 (the output has its dtype); pos i32.
    /// # Errors
    /// [`Error::InvalidShape`] for another rank, an `n_dims` of 0, odd, or above D, or a `freq_base` or
    /// `freq_scale` not finite and above 0, or another parameter not finite; [`Error::ShapeMismatch`] when pos is
    /// not `[T]`; [`Error::UnsupportedDType`] for i32 x or non-i32 positions.
    /// # Reference
    /// ggml_rope_ext (modes normal and neox, no frequency factors; YaRN as its `ext_factor`, `attn_factor` and
    /// `ggml_rope_yarn_corr_dims` describe it).
    pub fn rope(&mut self, x: Tensor, pos: Tensor, rope: &Rope) -> Result<Tensor> {
        self.rope_ext(x, pos, None, rope)
    }

    /// [`rope`](Self::rope) with an optional frequency factor per pair: pair `i` turns by
    /// `pos[t] · freq_scale · freq_base^(-2i / n_dims) / factors[i]` radians, as Llama 3's rope scaling
    /// (`rope_freqs.weight` in its GGUF files) and LongRoPE describe it.
    ///
    /// # Shapes
    /// As [`rope`](Self::rope); factors `[n_dims / 2]`.
    /// # DTypes
    /// As [`rope`](Self::rope); factors f32.
    /// # Errors
    /// As [`rope`](Self::rope), and [`Error::ShapeMismatch`] or [`Error::UnsupportedDType`] for factors of
    /// another shape or dtype.
    /// # Reference
    /// ggml_rope_ext with its `c` (freq_factors) operand.
    pub fn rope_ext(&mut self, x: Tensor, pos: Tensor, factors: Option<Tensor>, rope: &Rope) -> Result<Tensor> {
        let (ix, dt, sx) = self.require_float("rope", x)?;
        let (ip, dp, sp) = self.info("rope", pos)?;
        if !(3..=4).contains(&sx.len())
            || !rope.n_dims.is_multiple_of(2)
            || rope.n_dims == 0
            || rope.n_dims > sx[sx.len() - 1]
        {
            let reason =
                format!("x must be [T, H, D] or [B, T, H, D] with an even n_dims ≤ D (n_dims {})", rope.n_dims);
            return Err(Error::InvalidShape { op: "rope", shape: sx, reason });
        }
        let positive = |v: f32| v.is_finite() && v > 0.0;
        let finite = [rope.ext_factor, rope.attn_factor, rope.corr_dims[0], rope.corr_dims[1]];
        if !positive(rope.freq_base) || !positive(rope.freq_scale) || !finite.iter().all(|v| v.is_finite()) {
            let reason = format!("rope parameters must be finite, freq_base and freq_scale above 0: {rope:?}");
            return Err(Error::InvalidShape { op: "rope", shape: sx, reason });
        }
        if dp != DType::I32 {
            return Err(Error::UnsupportedDType {
                op: "rope",
                dtype: dp,
                shape: sp,
                reason: "positions must be i32".into(),
            });
        }
        if sp != [sx[sx.len() - 3]] {
            let reason = "positions must be [T]".into();
            return Err(Error::ShapeMismatch { op: "rope", lhs: sx, rhs: sp, reason });
        }
        let factors = match factors {
            None => None,
            Some(f) => Some(self.rope_factors(f, rope)?),
        };
        self.push(Op::Rope { x: ix, pos: ip, factors, rope: *rope }, dt, &sx)
    }

    /// Checks rope's frequency factors: f32 `[n_dims / 2]`.
    fn rope_factors(&self, f: Tensor, rope: &Rope) -> Result<NodeId> {
        let (id, d, s) = self.info("rope", f)?;
        if d != DType::F32 {
            let reason = "frequency factors must be f32".into();
            return Err(Error::UnsupportedDType { op: "rope", dtype: d, shape: s, reason });
        }
        if s != [rope.n_dims / 2] {
            let reason = format!("frequency factors must be [n_dims / 2] = [{}]", rope.n_dims / 2);
            return Err(Error::ShapeMismatch { op: "rope", lhs: vec![rope.n_dims], rhs: s, reason });
        }
        Ok(id)
    }

    /// Scaled dot-product attention, `softmax(q·kᵀ·scale + mask)·v` over the keys, in one op: flash attention on
    /// the GPU (online softmax, one pass over K and V, f32 accumulation), a multithreaded kernel on the CPU, never
    /// a `[heads, T, S]` tensor of scores. Query head `h` uses K/V head `h / (H / Hkv)` (grouped-query attention,
    /// without copies); K and V may be views of a KV-cache state. A query whose keys are all masked gives zeros.
    /// Keys that the mask hides with −inf after the last one a query sees are not read (as ggml_flash_attn_ext
    /// skips masked keys; on a GPU, after the last one any query of its workgroup sees — the heads sharing a K/V
    /// head), so a batched row masked to its own length costs that length. With sinks, head h's softmax has one
    /// more logit, `sinks[h]`, whose value is zero: `Σ_s e^(x_s)·v_s / (Σ_s e^(x_s) + e^(sinks[h]))`.
    ///
    /// # Shapes
    /// q `[.., H, T, D]`, k `[.., Hkv, S, D]`, v `[.., Hkv, S, Dv]` with the same leading (batch) dims and H a
    /// multiple of Hkv → `[.., T, H, Dv]` (ggml_flash_attn_ext's layout, so `[T, H·Dv]` is a free reshape).
    /// # DTypes
    /// q, k, v, mask f32 or f16 in any mix, accumulated in f32; the output has q's dtype. kv_len i32, sinks f32
    /// `[H]`.
    /// # Errors
    /// [`Error::InvalidShape`] or [`Error::ShapeMismatch`] for shapes that do not fit; [`Error::UnsupportedDType`]
    /// for i32 operands, a non-i32 kv_len or non-f32 sinks.
    /// # Reference
    /// ggml_flash_attn_ext (with ggml_flash_attn_ext_add_sinks; Hugging Face's gpt-oss `eager_attention_forward`
    /// for the sinks); `torch.nn.functional.scaled_dot_product_attention(q, k, v, mask, is_causal,
    /// scale=scale, enable_gqa=True).transpose(-3, -2)`.
    pub fn attention(&mut self, q: Tensor, k: Tensor, v: Tensor, a: &Attention) -> Result<Tensor> {
        let (iq, dq, sq) = self.require_float("attention", q)?;
        let (ik, _, sk) = self.require_float("attention", k)?;
        let (iv, _, sv) = self.require_float("attention", v)?;
        let r = sq.len();
        let fits = (3..=4).contains(&r)
            && sk.len() == r
            && sv.len() == r
            && sq[..r - 3] == sk[..r - 3]
            && sq[..r - 3] == sv[..r - 3]
            && sk[r - 3] == sv[r - 3]
            && sk[r - 2] == sv[r - 2]
            && sq[r - 1] == sk[r - 1]
            && sk[r - 3] > 0
            && sq[r - 3] % sk[r - 3] == 0;
        if !fits {
            let reason =
                format!("q [.., H, T, D], k [.., Hkv, S, D], v [.., Hkv, S, Dv] with H a multiple of Hkv; v {sv:?}");
            return Err(Error::ShapeMismatch { op: "attention", lhs: sq, rhs: sk, reason });
        }
        let (h, t, s, dv) = (sq[r - 3], sq[r - 2], sk[r - 2], sv[r - 1]);
        let out_numel = sq[..r - 1].iter().product::<usize>() * dv;
        if s * sq[r - 1] == 0 && out_numel > 0 {
            // softmax over no keys has no value (PyTorch gives NaN): refused rather than computed from nothing
            let reason = "no keys (KV length 0, or head_dim 0) for a non-empty output".into();
            return Err(Error::ShapeMismatch { op: "attention", lhs: sq, rhs: sk, reason });
        }
        let mask = match a.mask {
            Some(m) => {
                let (im, _, sm) = self.require_float("attention", m)?;
                let full = [&sq[..r - 3], &[h, t, s][..]].concat();
                if broadcast_shapes("attention", &sm, &full).ok().as_deref() != Some(&full[..]) {
                    let reason = format!("the mask must broadcast to {full:?}");
                    return Err(Error::ShapeMismatch { op: "attention", lhs: full, rhs: sm, reason });
                }
                Some(im)
            }
            None => None,
        };
        let kv_len = match a.kv_len {
            Some(l) => Some(self.length_input(l)?),
            None => None,
        };
        let sinks = match a.sinks {
            Some(s) => Some(self.sinks_input(s, h)?),
            None => None,
        };
        let mut shape = sq[..r - 3].to_vec();
        shape.extend([t, h, dv]);
        let op = Op::Attention { q: iq, k: ik, v: iv, mask, kv_len, sinks, scale: a.scale, causal: a.causal };
        self.push(op, dq, &shape)
    }

    /// Attention sinks: f32 `[H]`, a logit per query head.
    fn sinks_input(&self, s: Tensor, h: usize) -> Result<NodeId> {
        let (id, d, shape) = self.info("attention", s)?;
        if d != DType::F32 {
            let reason = "sinks must be f32".into();
            return Err(Error::UnsupportedDType { op: "attention", dtype: d, shape, reason });
        }
        if shape != [h] {
            let reason = format!("sinks must be [H] = [{h}], a logit per query head");
            return Err(Error::ShapeMismatch { op: "attention", lhs: vec![h], rhs: shape, reason });
        }
        Ok(id)
    }

    /// A run-time length: an i32 tensor of one element.
    fn length_input(&self, l: Tensor) -> Result<NodeId> {
        let (il, dl, sl) = self.info("attention", l)?;
        if dl != DType::I32 || sl.iter().product::<usize>() != 1 {
            let reason = "the KV length must be an i32 tensor of one element".into();
            return Err(Error::UnsupportedDType { op: "attention", dtype: dl, shape: sl, reason });
        }
        Ok(il)
    }
}
