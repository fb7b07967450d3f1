//! The mixture-of-experts ops: top-k selection along the last axis, gathering along it, and the matmul over
//! selected experts (ggml's `ggml_top_k`, `ggml_get_rows` over a row's own entries, `ggml_mul_mat_id`).

use super::{Graph, Op, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::check_shape;

impl Graph {
    /// The indices of the `k` largest values along the last axis, largest first. Ties go to the lower index
    /// first (a stable descending sort); a NaN counts as larger than every number, as `torch.topk` orders it.
    ///
    /// # Shapes
    /// x `[..., N]` (rank ≥ 1) → `[..., k]`, `1 ≤ k ≤ N`.
    /// # DTypes
    /// x f32 or f16; the output is i32.
    /// # Errors
    /// [`Error::InvalidShape`] for a 0-d x; [`Error::InvalidArgument`] for k of 0 or past N;
    /// [`Error::UnsupportedDType`] for i32 or a storage format.
    /// # Reference
    /// `torch.topk(x, k, dim=-1).indices` (with `sorted=True`); ggml_top_k (ggml_argsort_top_k).
    pub fn top_k(&mut self, x: Tensor, k: usize) -> Result<Tensor> {
        let (ix, _, shape) = self.require_float("top_k", x)?;
        let Some(&n) = shape.last() else {
            let reason = "a 0-d tensor has no last axis".into();
            return Err(Error::InvalidShape { op: "top_k", shape, reason });
        };
        if k == 0 || k > n {
            let reason = format!("k = {k} must be between 1 and the last axis's {n}");
            return Err(Error::InvalidArgument { op: "top_k", reason });
        }
        let mut out = shape.clone();
        *out.last_mut().expect("rank >= 1") = k;
        check_shape("top_k", &out)?;
        self.push(Op::TopK { x: ix, k }, DType::I32, &out)
    }

    /// `out[..., j] = x[..., idx[..., j]]`: entries of each row of x picked by the same row of idx.
    ///
    /// # Shapes
    /// x `[..., N]`, idx `[..., J]` with the same leading dims → `[..., J]`.
    /// # DTypes
    /// x f32, f16 or i32 (the output has it); idx i32.
    /// # Errors
    /// [`Error::ShapeMismatch`] when the leading dims differ; [`Error::UnsupportedDType`] for non-i32 indices or
    /// x in a storage format; [`Error::InvalidShape`] for 0-d operands. At run time an index outside `0..N` is an
    /// [`Error::BadInput`] on the CPU and gives 0 on the GPU (which never reads outside the row).
    /// # Reference
    /// `numpy.take_along_axis(x, idx, axis=-1)`; `torch.gather(x, -1, idx)`.
    pub fn take_along_axis(&mut self, x: Tensor, idx: Tensor) -> Result<Tensor> {
        let (ix, dx, sx) = self.info("take_along_axis", x)?;
        let (ii, di, si) = self.info("take_along_axis", idx)?;
        if di != DType::I32 || dx.is_storage_format() {
            let (dtype, shape) = if di != DType::I32 { (di, si) } else { (dx, sx) };
            let reason = "indices must be i32, and values f32, f16 or i32".into();
            return Err(Error::UnsupportedDType { op: "take_along_axis", dtype, shape, reason });
        }
        if sx.is_empty() || si.is_empty() {
            let reason = "0-d operands have no last axis".into();
            return Err(Error::InvalidShape {
                op: "take_along_axis",
                shape: if sx.is_empty() { sx } else { si },
                reason,
            });
        }
        if sx[..sx.len() - 1] != si[..si.len() - 1] {
            let reason = "every dim but the last must match".into();
            return Err(Error::ShapeMismatch { op: "take_along_axis", lhs: sx, rhs: si, reason });
        }
        if sx[sx.len() - 1] == 0 && si.iter().product::<usize>() > 0 {
            let reason = "the rows are empty: there is nothing to take".into();
            return Err(Error::InvalidShape { op: "take_along_axis", shape: sx, reason });
        }
        self.push(Op::TakeAlongAxis { x: ix, idx: ii }, dx, &si)
    }

    /// The matmul over selected experts: `out[t, j, :] = a[t, j mod A, :] @ w[ids[t, j]]ᵀ`, each token's row
    /// multiplied by the weights of the experts its ids name (a mixture-of-experts layer's projections).
    ///
    /// # Shapes
    /// a `[T, A, K]` with A 1 (every selected expert reads the token's one row) or U (each its own row), w
    /// `[E, N, K]` (E experts, each a weight stored `[out, in]` as `matmul`'s `t(w)` reads one), ids `[T, U]` →
    /// out `[T, U, N]`.
    /// # DTypes
    /// a f32 or f16; w f32, f16, or a storage format (bf16, the block-quantized types: stored row-major, computed
    /// on as stored); ids i32. The output is f32.
    /// # Errors
    /// [`Error::ShapeMismatch`] when K, T or A do not fit; [`Error::UnsupportedDType`] for other dtypes or a
    /// w that is not row-major; [`Error::InvalidShape`] for other ranks, or E = 0 with ids. At run time an id
    /// outside `0..E` is an [`Error::BadInput`] on the CPU and gives zeros on the GPU.
    /// # Reference
    /// ggml_mul_mat_id (as `ggml_mul_mat_id(ctx, w, a, ids)` with ggml's reversed dims);
    /// `torch.einsum("tjk,tjnk->tjn", a.expand(T, U, K), w[ids])`.
    pub fn mul_mat_id(&mut self, a: Tensor, w: Tensor, ids: Tensor) -> Result<Tensor> {
        let (ia, _, sa) = self.require_float("mul_mat_id", a)?;
        let (iw, dw, sw) = self.info("mul_mat_id", w)?;
        let (ii, di, si) = self.info("mul_mat_id", ids)?;
        if sa.len() != 3 || sw.len() != 3 || si.len() != 2 {
            let reason = format!("a [T, A, K], w [E, N, K] and ids [T, U] (got ids {si:?})");
            let shape = if sa.len() != 3 { sa } else { sw };
            return Err(Error::InvalidShape { op: "mul_mat_id", shape, reason });
        }
        if di != DType::I32 || dw == DType::I32 || !self.nodes[iw].layout.is_contiguous() {
            let reason = "ids must be i32, and w a row-major float or storage-format weight".into();
            let (dtype, shape) = if di != DType::I32 { (di, si) } else { (dw, sw) };
            return Err(Error::UnsupportedDType { op: "mul_mat_id", dtype, shape, reason });
        }
        let (t, u, k, n) = (si[0], si[1], sw[2], sw[1]);
        if sa[2] != k || sa[0] != t || (sa[1] != 1 && sa[1] != u) {
            let reason = format!("a must be [{t}, 1 or {u}, {k}] for w {sw:?} and ids {si:?}");
            return Err(Error::ShapeMismatch { op: "mul_mat_id", lhs: sa, rhs: sw, reason });
        }
        if sw[0] == 0 && t * u > 0 {
            let reason = "no experts to select".into();
            return Err(Error::InvalidShape { op: "mul_mat_id", shape: sw, reason });
        }
        if k == 0 && t * u * n > 0 {
            let reason =
                "K = 0: the products would be zeros from empty sums (numpy gives them; webtensor refuses)".into();
            return Err(Error::ShapeMismatch { op: "mul_mat_id", lhs: sa, rhs: sw, reason });
        }
        if k % dw.block_size() != 0 {
            let reason = format!("rows of {k} are no whole number of {dw} blocks");
            return Err(Error::UnsupportedDType { op: "mul_mat_id", dtype: dw, shape: sw, reason });
        }
        self.push(Op::MulMatId { a: ia, w: iw, ids: ii }, DType::F32, &[t, u, n])
    }
}
