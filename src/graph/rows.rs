//! Row ops over the last axis: softmax, the norms, and reductions.

use super::{Graph, NodeId, Op, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::{ReduceOp, RowOp};
use crate::shape::broadcast_shapes;

impl Graph {
    /// A float operand with at least one axis, for an op over the last axis.
    fn row_operand(&self, op: &'static str, x: Tensor) -> Result<(NodeId, DType, Vec<usize>)> {
        let (id, dtype, shape) = self.require_float(op, x)?;
        if shape.is_empty() {
            return Err(Error::InvalidShape { op, shape, reason: "a 0-d tensor has no last axis".into() });
        }
        Ok((id, dtype, shape))
    }

    /// `softmax(x)` over the last axis ([`Graph::softmax_ext`] without a mask, scale 1).
    ///
    /// # Shapes
    /// x `[..., N]` → the same shape.
    /// # DTypes
    /// f32 and f16, computed in f32; the output has x's dtype.
    /// # Errors
    /// [`Error::UnsupportedDType`] for i32; [`Error::InvalidShape`] for a 0-d x.
    /// # Reference
    /// `torch.softmax(x, -1)`; ggml_soft_max.
    pub fn softmax(&mut self, x: Tensor) -> Result<Tensor> {
        self.softmax_ext(x, None, 1.0)
    }

    /// `softmax(x·scale + mask)` over the last axis. A row whose entries are all −inf gives zeros (PyTorch would
    /// give NaN). The row's maximum is subtracted first, so large inputs do not overflow.
    ///
    /// # Shapes
    /// x `[..., N]`; mask broadcasts to x's shape (e.g. `[S, N]` for a causal mask). Output: x's shape.
    /// # DTypes
    /// x and mask f32 or f16, computed in f32; the output has x's dtype.
    /// # Errors
    /// [`Error::UnsupportedDType`] for i32; [`Error::ShapeMismatch`] when the mask does not broadcast to x;
    /// [`Error::InvalidShape`] for a 0-d x.
    /// # Reference
    /// ggml_soft_max_ext; `torch.softmax(x * scale + mask, -1)`.
    pub fn softmax_ext(&mut self, x: Tensor, mask: Option<Tensor>, scale: f32) -> Result<Tensor> {
        let (ix, dtype, shape) = self.row_operand("softmax", x)?;
        let mask = match mask {
            Some(m) => {
                let (im, _, sm) = self.require_float("softmax", m)?;
                if broadcast_shapes("softmax", &sm, &shape)? != shape {
                    return Err(Error::ShapeMismatch {
                        op: "softmax",
                        lhs: shape,
                        rhs: sm,
                        reason: "the mask must broadcast to the input's shape".into(),
                    });
                }
                Some(im)
            }
            None => None,
        };
        self.push(Op::Row { op: RowOp::Softmax, x: ix, mask, scale, eps: 0.0 }, dtype, &shape)
    }

    /// `x / √(mean(x², last axis) + eps)`; multiply by a weight with [`Graph::mul`].
    ///
    /// # Shapes
    /// x `[..., N]` → the same shape.
    /// # DTypes
    /// f32 and f16, accumulated in f32; the output has x's dtype.
    /// # Errors
    /// [`Error::UnsupportedDType`] for i32; [`Error::InvalidShape`] for a 0-d x.
    /// # Reference
    /// ggml_rms_norm; `torch.nn.functional.rms_norm(x, (N,), eps=eps)` without weight.
    pub fn rms_norm(&mut self, x: Tensor, eps: f32) -> Result<Tensor> {
        let (ix, dtype, shape) = self.row_operand("rms_norm", x)?;
        self.push(Op::Row { op: RowOp::RmsNorm, x: ix, mask: None, scale: 1.0, eps }, dtype, &shape)
    }

    /// `(x − mean) / √(var + eps)` over the last axis, biased variance; apply weight and bias with
    /// [`Graph::mul`] and [`Graph::add`].
    ///
    /// # Shapes
    /// x `[..., N]` → the same shape.
    /// # DTypes
    /// f32 and f16, accumulated in f32; the output has x's dtype.
    /// # Errors
    /// [`Error::UnsupportedDType`] for i32; [`Error::InvalidShape`] for a 0-d x.
    /// # Reference
    /// ggml_norm; `torch.nn.functional.layer_norm(x, (N,), eps=eps)` without weight and bias.
    pub fn layer_norm(&mut self, x: Tensor, eps: f32) -> Result<Tensor> {
        let (ix, dtype, shape) = self.row_operand("layer_norm", x)?;
        self.push(Op::Row { op: RowOp::LayerNorm, x: ix, mask: None, scale: 1.0, eps }, dtype, &shape)
    }

    /// `x / max(‖x‖₂, eps)` over the last axis (the q and k normalization of linear-attention layers).
    ///
    /// # Shapes
    /// x `[..., N]` → the same shape.
    /// # DTypes
    /// f32 and f16, accumulated in f32; the output has x's dtype.
    /// # Errors
    /// [`Error::UnsupportedDType`] for i32; [`Error::InvalidShape`] for a 0-d x.
    /// # Reference
    /// ggml_l2_norm; `torch.nn.functional.normalize(x, p=2, dim=-1, eps=eps)`.
    pub fn l2_norm(&mut self, x: Tensor, eps: f32) -> Result<Tensor> {
        let (ix, dtype, shape) = self.row_operand("l2_norm", x)?;
        self.push(Op::Row { op: RowOp::L2Norm, x: ix, mask: None, scale: 1.0, eps }, dtype, &shape)
    }

    /// A reduction of the table over the last axis, kept as size 1.
    ///
    /// # Shapes
    /// x `[..., N]` → `[..., 1]`.
    /// # DTypes
    /// f32 and f16, accumulated in f32 (f64 on the CPU); the output has x's dtype, i32 for `argmax`.
    /// # Errors
    /// [`Error::UnsupportedDType`] for i32; [`Error::InvalidShape`] for a 0-d x, or a last axis of length 0 in a
    /// non-empty x (numpy's `max` refuses it; its `sum` would give 0, which webtensor does not compute).
    /// # Reference
    /// `torch.sum(x, -1, keepdim=True)`, `torch.mean`, `torch.amax`, `numpy.argmax(x, -1)[..., None]`.
    pub fn reduce(&mut self, op: ReduceOp, x: Tensor) -> Result<Tensor> {
        let (ix, dtype, mut shape) = self.row_operand(op.name(), x)?;
        if shape.last() == Some(&0) && shape[..shape.len() - 1].iter().all(|&d| d > 0) {
            // numpy's max/argmax refuse an empty axis; sum and mean would need a constant, not a kernel
            let reason = "reducing an axis of length 0 to a non-empty result is not supported".into();
            return Err(Error::InvalidShape { op: op.name(), shape, reason });
        }
        *shape.last_mut().expect("rank >= 1") = 1;
        self.push(Op::Reduce { op, x: ix }, op.out_dtype(dtype), &shape)
    }
}

macro_rules! reduce_methods {
    ($(($var:ident, $method:ident, $wgsl:literal, |$row:ident| $cpu:expr, $doc:literal))*) => {
        impl Graph {
            $(
                #[doc = $doc]
                /// Over the last axis, kept as size 1 ([`Graph::reduce`] with the op).
                ///
                /// # Shapes
                /// x `[..., N]` → `[..., 1]`.
                /// # DTypes
                /// f32 and f16 (accumulated in f32 on the GPU, f64 on the CPU); the output has x's dtype (i32
                /// for argmax: [`ReduceOp::out_dtype`]).
                /// # Errors
                /// [`Error::UnsupportedDType`] for i32; [`Error::InvalidShape`] for a 0-d x.
                /// # Reference
                /// The PyTorch or numpy expression named above; the CPU function is the op's row in the
                /// reduction table (`src/ops`).
                pub fn $method(&mut self, x: Tensor) -> Result<Tensor> {
                    self.reduce(ReduceOp::$var, x)
                }
            )*
        }
    };
}
crate::ops::for_each_reduce!(reduce_methods);
