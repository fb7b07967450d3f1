//! Views (no data moves) and copies: reshape, permute, transpose, slice, broadcast, contiguous, cast.

use super::{Graph, Op, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::{check_shape, resolve_axis};

impl Graph {
    /// The same elements with a new shape (`torch.reshape`): a view when `x` is contiguous, else a copy first.
    ///
    /// # Shapes
    /// x `[...]` (any rank 0..=4) → `shape`, with the same element count.
    /// # DTypes
    /// Any; the output has x's dtype.
    /// # Errors
    /// [`Error::InvalidShape`] when the element counts differ or the new shape is invalid.
    /// # Reference
    /// `torch.reshape`.
    pub fn reshape(&mut self, x: Tensor, shape: &[usize]) -> Result<Tensor> {
        let (id, _, old) = self.info("reshape", x)?;
        check_shape("reshape", shape)?;
        if old.iter().product::<usize>() != shape.iter().product::<usize>() {
            return Err(Error::InvalidShape {
                op: "reshape",
                shape: shape.to_vec(),
                reason: format!("cannot view {old:?} ({} elements) as it", old.iter().product::<usize>()),
            });
        }
        match self.nodes[id].layout.reshape(shape) {
            Some(layout) => Ok(self.push_view(id, layout)),
            None => {
                let c = self.contiguous(x)?;
                self.reshape(c, shape)
            }
        }
    }

    /// Reorders dims: `out.shape[i] = x.shape[dims[i]]`. A view.
    ///
    /// # Shapes
    /// x `[d0, .., dr]` → `[d_dims[0], .., d_dims[r]]`.
    /// # DTypes
    /// Any.
    /// # Errors
    /// [`Error::InvalidAxis`] when `dims` is not a permutation of `0..rank`.
    /// # Reference
    /// `torch.permute`, `numpy.transpose(x, dims)`.
    pub fn permute(&mut self, x: Tensor, dims: &[usize]) -> Result<Tensor> {
        let (id, _, _) = self.info("permute", x)?;
        let layout = self.nodes[id].layout.permute(dims)?;
        Ok(self.push_view(id, layout))
    }

    /// Swaps axes `a` and `b` (negative counts from the end). A view.
    ///
    /// # Shapes
    /// x with dims `a` and `b` exchanged.
    /// # DTypes
    /// Any.
    /// # Errors
    /// [`Error::InvalidAxis`] for an axis outside the rank.
    /// # Reference
    /// `torch.transpose`.
    pub fn transpose(&mut self, x: Tensor, a: isize, b: isize) -> Result<Tensor> {
        let (_, _, shape) = self.info("transpose", x)?;
        let (a, b) = (resolve_axis("transpose", a, &shape)?, resolve_axis("transpose", b, &shape)?);
        let mut dims: Vec<usize> = (0..shape.len()).collect();
        dims.swap(a, b);
        self.permute(x, &dims)
    }

    /// Swaps the last two axes. A view, so `x @ t(w)` with `w` stored `[out, in]` reads `w` in place.
    ///
    /// # Shapes
    /// x `[..., M, N]` → `[..., N, M]`.
    /// # DTypes
    /// Any.
    /// # Errors
    /// [`Error::InvalidAxis`] for a rank-1 tensor.
    /// # Reference
    /// `x.mT` in PyTorch.
    pub fn t(&mut self, x: Tensor) -> Result<Tensor> {
        self.transpose(x, -2, -1)
    }

    /// `x[.., start..end, ..]` along `axis` (negative counts from the end). A view with an offset.
    ///
    /// # Shapes
    /// x with dim `axis` shortened to `end - start`.
    /// # DTypes
    /// Any.
    /// # Errors
    /// [`Error::InvalidAxis`] for a bad axis or a reversed or out-of-bounds range (start > end, or end past the
    /// dim); start == end gives an empty view.
    /// # Reference
    /// Python slicing with step 1 (`x[:, start:end]`).
    pub fn slice(&mut self, x: Tensor, axis: isize, start: usize, end: usize) -> Result<Tensor> {
        let (id, _, shape) = self.info("slice", x)?;
        let axis = resolve_axis("slice", axis, &shape)?;
        let layout = self.nodes[id].layout.slice(axis, start, end)?;
        Ok(self.push_view(id, layout))
    }

    /// Stretches `x` to `shape` by numpy broadcasting. A view with zero strides.
    ///
    /// # Shapes
    /// x broadcastable to `shape` (align right; a dim of 1 stretches).
    /// # DTypes
    /// Any.
    /// # Errors
    /// [`Error::ShapeMismatch`] when `x` does not broadcast to `shape`.
    /// # Reference
    /// `numpy.broadcast_to`.
    pub fn broadcast_to(&mut self, x: Tensor, shape: &[usize]) -> Result<Tensor> {
        let (id, _, _) = self.info("broadcast_to", x)?;
        check_shape("broadcast_to", shape)?;
        let layout = self.nodes[id].layout.broadcast_to(shape)?;
        Ok(self.push_view(id, layout))
    }

    /// A contiguous copy of `x` (always copies).
    ///
    /// # Shapes
    /// x's shape.
    /// # DTypes
    /// Any; the output has x's dtype.
    /// # Errors
    /// Only [`Error::ForeignTensor`].
    /// # Reference
    /// `torch.Tensor.contiguous` (which may skip the copy; this never does).
    pub fn contiguous(&mut self, x: Tensor) -> Result<Tensor> {
        let (id, dtype, shape) = self.info("contiguous", x)?;
        if dtype.is_storage_format() {
            let reason = "cast storage formats to f32 or f16 instead".into();
            return Err(Error::UnsupportedDType { op: "contiguous", dtype, shape, reason });
        }
        self.push(Op::Cast { x: id }, dtype, &shape)
    }

    /// `x` converted to `dtype`: round to nearest for floats; float to i32 truncates toward zero and saturates
    /// (NaN gives 0). Always a new contiguous tensor.
    ///
    /// # Shapes
    /// x's shape.
    /// # DTypes
    /// f32, f16 and i32 to any of them; a storage format (bf16, block-quantized) to f32 or f16 (dequantization,
    /// of row-major rows).
    /// # Errors
    /// [`Error::UnsupportedDType`] for a cast to a storage format, or from one to i32 or through a strided view.
    /// # Reference
    /// `numpy.ndarray.astype` (which does not saturate); ggml_cast; ggml's `dequantize_row_*` for storage formats.
    pub fn cast(&mut self, x: Tensor, dtype: DType) -> Result<Tensor> {
        let (id, from, shape) = self.info("cast", x)?;
        let rows_ok = self.nodes[id].layout.is_contiguous();
        if dtype.is_storage_format() || (from.is_storage_format() && (!dtype.is_float() || !rows_ok)) {
            let reason = format!(
                "casts from {from} to {dtype} are not supported (storage formats cast row-major to f32 or f16)"
            );
            return Err(Error::UnsupportedDType { op: "cast", dtype: from, shape, reason });
        }
        self.push(Op::Cast { x: id }, dtype, &shape)
    }
}
