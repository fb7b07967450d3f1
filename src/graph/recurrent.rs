//! The ops of linear-attention (recurrent) layers: the causal depthwise conv over the sequence and the gated
//! delta rule (ggml's `ggml_ssm_conv` and `ggml_gated_delta_net`), each carrying its state from call to call as
//! a tensor the caller keeps (a model's state cache).

use super::{Graph, Op, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};

impl Graph {
    /// The causal depthwise conv1d over the sequence: `out[b, t, c] = Σ_k w[c, k] · x[b, t + k, c]`, where x is
    /// the previous `K − 1` inputs (the carried conv state, zeros at a sequence's start) followed by the T new
    /// ones. The next state is x's last `K − 1` rows ([`Graph::slice`]); no bias and no activation (apply SiLU
    /// with [`Graph::silu`]).
    ///
    /// # Shapes
    /// x `[B, T + K − 1, C]` (or `[T + K − 1, C]`), w `[C, K]` → `[B, T, C]` (or `[T, C]`).
    /// # DTypes
    /// x and w f32 or f16, accumulated in f32; the output is f32.
    /// # Errors
    /// [`Error::InvalidShape`] for other ranks or K = 0; [`Error::ShapeMismatch`] when C differs or x has
    /// fewer than K − 1 rows; [`Error::UnsupportedDType`] for i32 or storage formats.
    /// # Reference
    /// ggml_ssm_conv; `torch.nn.functional.conv1d(x, w[:, None, :], groups=C)` over the time axis (no padding:
    /// x carries its own K − 1 leading rows), as Mamba's and Gated DeltaNet's `causal_conv1d`.
    pub fn ssm_conv(&mut self, x: Tensor, w: Tensor) -> Result<Tensor> {
        let (ix, _, sx) = self.require_float("ssm_conv", x)?;
        let (iw, _, sw) = self.require_float("ssm_conv", w)?;
        if !(sx.len() == 2 || sx.len() == 3) || sw.len() != 2 || sw[1] == 0 {
            let reason = "x [B, T + K − 1, C] or [T + K − 1, C] and w [C, K] with K ≥ 1".into();
            let shape = if sw.len() != 2 || sw[1] == 0 { sw } else { sx };
            return Err(Error::InvalidShape { op: "ssm_conv", shape, reason });
        }
        let (rows, c, k) = (sx[sx.len() - 2], sx[sx.len() - 1], sw[1]);
        if c != sw[0] || rows + 1 < k {
            let reason = format!("x needs {} channels and at least K − 1 = {} rows", sw[0], k - 1);
            return Err(Error::ShapeMismatch { op: "ssm_conv", lhs: sx, rhs: sw, reason });
        }
        let (x, w) = (self.f32_rows(ix)?, self.f32_rows(iw)?);
        let mut out = sx.clone();
        out[sx.len() - 2] = rows + 1 - k;
        self.push(Op::SsmConv { x, w }, DType::F32, &out)
    }

    /// The gated delta rule over T tokens, a state carried per sequence and value head: for each token, with
    /// `S` a head's `[Dv, Dk]` state (a row per value index),
    /// `S ← exp(g)·S; δ = β·(v − S·k); S ← S + δ ⊗ k; out = scale · S·q`
    /// (the decay first, the read of `S·k` after it, the output from the updated state). Value head h reads
    /// query and key head `h mod Hk` (Hv a multiple of Hk: heads tiled, as ggml broadcasts; a model whose heads
    /// are grouped repeats q and k first). Returns `(out, new_state)`.
    ///
    /// # Shapes
    /// q, k `[B, T, Hk, Dk]`, v `[B, T, Hv, Dv]`, g and beta `[B, T, Hv]`, state `[B, Hv, Dv, Dk]` → out
    /// `[B, T, Hv, Dv]` and the new state `[B, Hv, Dv, Dk]` (views of one result).
    /// # DTypes
    /// f32 or f16 operands, computed in f32; the results are f32.
    /// # Errors
    /// [`Error::InvalidShape`] for other ranks; [`Error::ShapeMismatch`] when a dim disagrees or Hk does not
    /// divide Hv; [`Error::UnsupportedDType`] for i32 or storage formats.
    /// # Reference
    /// ggml_gated_delta_net (its result the same output and state, concatenated); the Gated DeltaNet paper (Yang
    /// et al. 2024) and `transformers`' `torch_recurrent_gated_delta_rule` (with q and k already l2-normalized,
    /// `scale` = 1/√Dk, g the log of the decay, the state there `[Dk, Dv]`: the transpose of this one).
    #[allow(clippy::too_many_arguments)]
    pub fn gated_delta_net(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        g: Tensor,
        beta: Tensor,
        state: Tensor,
        scale: f32,
    ) -> Result<(Tensor, Tensor)> {
        let op = "gated_delta_net";
        let [q, k, v, g, beta, state] = [q, k, v, g, beta, state].map(|t| self.require_float(op, t));
        let ((iq, _, sq), (ik, _, sk), (iv, _, sv)) = (q?, k?, v?);
        let ((ig, _, sg), (ib, _, sb), (is, _, ss)) = (g?, beta?, state?);
        if sq.len() != 4 || sv.len() != 4 || sg.len() != 3 || ss.len() != 4 {
            let reason = "q, k [B, T, Hk, Dk], v [B, T, Hv, Dv], g, beta [B, T, Hv], state [B, Hv, Dv, Dk]".into();
            let shape = [&sq, &sv, &sg, &ss].into_iter().find(|s| s.len() != 4).unwrap_or(&sg).clone();
            return Err(Error::InvalidShape { op, shape, reason });
        }
        let (b, t, hk, dk, hv, dv) = (sq[0], sq[1], sq[2], sq[3], sv[2], sv[3]);
        let mismatch = |lhs: &[usize], rhs: &[usize], reason: String| Error::ShapeMismatch {
            op,
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
            reason,
        };
        if sk != sq {
            return Err(mismatch(&sq, &sk, "q and k must have one shape".into()));
        }
        if sv[..2] != sq[..2] || hk == 0 || hv % hk != 0 {
            return Err(mismatch(&sq, &sv, "v needs q's [B, T] and a multiple of its Hk heads".into()));
        }
        if sg != [b, t, hv] || sb != sg {
            return Err(mismatch(&sv, &sg, format!("g and beta must be [{b}, {t}, {hv}]")));
        }
        if ss != [b, hv, dv, dk] {
            return Err(mismatch(&sv, &ss, format!("the state must be [{b}, {hv}, {dv}, {dk}]")));
        }
        let [q, k, v, g, beta, state] = [iq, ik, iv, ig, ib, is].map(|id| self.f32_rows(id));
        let step = Op::GatedDeltaNet { q: q?, k: k?, v: v?, g: g?, beta: beta?, state: state?, scale };
        let (outs, states) = (b * t * hv * dv, b * hv * dv * dk);
        let both = self.push(step, DType::F32, &[outs + states])?;
        let out = self.slice(both, 0, 0, outs)?;
        let out = self.reshape(out, &[b, t, hv, dv])?;
        let new_state = self.slice(both, 0, outs, outs + states)?;
        let new_state = self.reshape(new_state, &[b, hv, dv, dk])?;
        Ok((out, new_state))
    }

    /// Node `id`, or a contiguous f32 copy of it when it is f16 or strided (the recurrent kernels read f32 rows).
    fn f32_rows(&mut self, id: usize) -> Result<usize> {
        if self.nodes[id].dtype == DType::F32 && self.nodes[id].layout.is_contiguous() {
            return Ok(id);
        }
        let t = self.handle(id);
        Ok(self.cast(t, DType::F32)?.id as usize)
    }
}
