//! Matrix products.

use super::elementwise::promote;
use super::{Graph, Op, Tensor};
use crate::error::{Error, Result};
use crate::ops::MatmulPrecision;
use crate::shape::broadcast_shapes;

impl Graph {
    /// Matrix product with `numpy.matmul` semantics: `C[..., m, n] = Σ_k A[..., m, k] · B[..., k, n]`.
    ///
    /// # Shapes
    /// A `[..., M, K]`, B `[..., K, N]` → C `[batch..., M, N]`, batch dims broadcast by numpy's rule. A rank-1 A
    /// is treated as `[1, K]` and a rank-1 B as `[K, 1]`, and that dim is dropped from the result (so two rank-1
    /// operands give numpy's 0-d dot product). Either operand may be a strided view (`g.t(w)`), read in place.
    /// # DTypes
    /// f32 and f16 in any mix, accumulated in f32; the output is f32 unless both are f16. B may also be a weight
    /// in a storage format (bf16, a block-quantized type: ggml's `ggml_mul_mat` on quantized weights) when it is
    /// `t(w)` of a row-major `w [N, K]` (a resident weight, or rows of one); the output then has A's dtype and
    /// the blocks are computed on directly, never dequantized whole.
    /// # Errors
    /// [`Error::ShapeMismatch`] when K differs, batch dims do not broadcast, or K = 0 with a non-empty result
    /// (numpy gives zeros; webtensor refuses it); [`Error::UnsupportedDType`] for i32,
    /// or for a weight in a storage format used otherwise than as `t(w)`; [`Error::InvalidShape`] for a 0-d
    /// operand.
    /// # Reference
    /// `numpy.matmul`; ggml's `ggml_mul_mat(a, b)` is `matmul(b, t(a))` here.
    pub fn matmul(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        if self.dtype(b)?.is_storage_format() {
            return self.matmul_weight(a, b);
        }
        let (_, da, sa) = self.require_float("matmul", a)?;
        let (_, db, sb) = self.require_float("matmul", b)?;
        for s in [&sa, &sb] {
            if s.is_empty() {
                return Err(Error::InvalidShape {
                    op: "matmul",
                    shape: vec![],
                    reason: "0-d operands have no matrix dimensions (numpy.matmul refuses them too)".into(),
                });
            }
        }
        if sa.len() == 1 || sb.len() == 1 {
            // promote to matrices, multiply, drop the promoted dims from the result
            let a2 = if sa.len() == 1 { self.reshape(a, &[1, sa[0]])? } else { a };
            let b2 = if sb.len() == 1 { self.reshape(b, &[sb[0], 1])? } else { b };
            let c = self.matmul(a2, b2)?;
            let cs = self.shape(c)?.to_vec();
            let r = cs.len();
            let s = match (sa.len() == 1, sb.len() == 1) {
                (true, true) => vec![],
                (true, false) => [&cs[..r - 2], &cs[r - 1..]].concat(),
                _ => cs[..r - 1].to_vec(),
            };
            return self.reshape(c, &s);
        }
        let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
        let (k2, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
        if k != k2 {
            return Err(Error::ShapeMismatch {
                op: "matmul",
                lhs: sa,
                rhs: sb,
                reason: format!("inner dimensions differ: {k} vs {k2}"),
            });
        }
        let mut shape =
            broadcast_shapes("matmul", &sa[..sa.len() - 2], &sb[..sb.len() - 2]).map_err(|_| Error::ShapeMismatch {
                op: "matmul",
                lhs: sa.clone(),
                rhs: sb.clone(),
                reason: "batch dimensions do not broadcast".into(),
            })?;
        shape.extend([m, n]);
        if k == 0 && shape.iter().all(|&d| d > 0) {
            // numpy gives zeros: a constant, not a kernel's result, which webtensor does not compute
            let reason = "K = 0 with a non-empty result is not supported".into();
            return Err(Error::ShapeMismatch { op: "matmul", lhs: sa, rhs: sb, reason });
        }
        let dtype = promote("matmul", (da, &sa), (db, &sb))?;
        self.push(Op::MatMul { a: a.id as usize, b: b.id as usize, prec: MatmulPrecision::Default }, dtype, &shape)
    }
}

impl Graph {
    /// `a @ t(w)` with `w [N, K]` in a storage format: `b` must be that transposed view.
    fn matmul_weight(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        let (_, da, sa) = self.require_float("matmul", a)?;
        let (ib, db, sb) = self.info("matmul", b)?;
        let lb = &self.nodes[ib].layout;
        let transposed_rows =
            sb.len() == 2 && lb.strides[0] == 1 && lb.strides[1] == sb[0] && lb.offset.is_multiple_of(sb[0]);
        if !transposed_rows {
            let reason =
                format!("a {db} weight must be used as x @ t(w) with w [N, K] stored row-major (ggml's layout)");
            return Err(Error::UnsupportedDType { op: "matmul", dtype: db, shape: sb, reason });
        }
        let (k, n) = (sb[0], sb[1]);
        if sa.is_empty() || sa[sa.len() - 1] != k {
            let reason = format!("inner dimensions differ: {:?} vs {k}", sa.last());
            return Err(Error::ShapeMismatch { op: "matmul", lhs: sa, rhs: sb, reason });
        }
        let mut shape = sa.clone();
        *shape.last_mut().expect("rank >= 1") = n;
        if sa.len() == 1 {
            let a2 = self.reshape(a, &[1, k])?;
            let c = self.push(Op::MatMul { a: a2.index(), b: ib, prec: MatmulPrecision::Default }, da, &[1, n])?;
            return self.reshape(c, &[n]);
        }
        self.push(Op::MatMul { a: a.id as usize, b: ib, prec: MatmulPrecision::Default }, da, &shape)
    }

    /// Sets the precision of the matmul that computes `t` (through any views of it), as ggml's
    /// `ggml_mul_mat_set_prec` does: [`MatmulPrecision::F32`] keeps its activations in f32 on the CPU backend,
    /// where the default rounds them to 8-bit blocks for the integer kernels of block-quantized weights (GPU
    /// backends compute every matmul in f32 already). For the matmuls a model's answer hangs on, such as the
    /// output head (llama.cpp keeps some of its own in higher precision).
    ///
    /// # Shapes
    /// Any: `t` keeps its shape; only how its matmul is computed changes.
    /// # DTypes
    /// Any matmul; the setting matters only where B is block-quantized and the backend is the CPU.
    /// # Reference
    /// ggml's `ggml_mul_mat_set_prec(t, GGML_PREC_F32)`.
    /// # Errors
    /// [`Error::InvalidArgument`] when `t` is not a matmul's result; [`Error::ForeignTensor`] for another graph's
    /// tensor.
    pub fn set_matmul_precision(&mut self, t: Tensor, precision: MatmulPrecision) -> Result<()> {
        let (mut id, _, _) = self.info("set_matmul_precision", t)?;
        loop {
            match &mut self.nodes[id].op {
                Op::MatMul { prec, .. } => {
                    *prec = precision;
                    return Ok(());
                }
                Op::View { src } => id = *src,
                _ => {
                    let reason = "the tensor is not a matmul's result (or a view of one)".to_string();
                    return Err(Error::InvalidArgument { op: "set_matmul_precision", reason });
                }
            }
        }
    }
}
