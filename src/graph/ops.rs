//! Op constructors: validate, record one node, return its handle (ggml's `ggml_add` pattern, with `Result`).
//!
//! Every constructor fails with [`Error::ForeignTensor`] for a handle of another graph, in addition to the errors
//! it lists. Shapes are numpy order; "last axis" is the innermost.

use super::{BinaryOp, Graph, NodeId, Op, ReduceOp, Tensor, UnaryOp};
use crate::shape::{broadcast_shapes, check_shape, resolve_axis, Layout};
use crate::{DType, Error, Result};

/// Output dtype of a float op on two float operands: f32 if either is f32 (numpy's promotion), else f16.
fn promote(op: &'static str, a: (DType, &[usize]), b: (DType, &[usize])) -> Result<DType> {
    match (a.0, b.0) {
        (x, y) if x == y => Ok(x),
        (x, y) if x.is_float() && y.is_float() => Ok(DType::F32),
        _ => Err(Error::DTypeMismatch { op, lhs: a.0, lhs_shape: a.1.to_vec(), rhs: b.0, rhs_shape: b.1.to_vec() }),
    }
}

impl Graph {
    fn info(&self, op: &'static str, t: Tensor) -> Result<(NodeId, DType, Vec<usize>)> {
        let n = self.node(op, t)?;
        Ok((t.id as usize, n.dtype, n.layout.shape.clone()))
    }

    fn require_float(&self, op: &'static str, t: Tensor) -> Result<(NodeId, DType, Vec<usize>)> {
        let (id, dtype, shape) = self.info(op, t)?;
        if !dtype.is_float() {
            return Err(Error::UnsupportedDType { op, dtype, shape, reason: "needs f32 or f16".into() });
        }
        Ok((id, dtype, shape))
    }

    // ---- views (no data moves) ----------------------------------------------------------------

    /// The same elements with a new shape (`torch.reshape`): a view when `x` is contiguous, else a copy first.
    ///
    /// # Errors
    /// [`Error::InvalidShape`] when the element counts differ or the new shape is invalid.
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

    /// Reorders dims: `out.shape[i] = x.shape[dims[i]]` (`torch.permute`). A view.
    ///
    /// # Errors
    /// [`Error::InvalidAxis`] when `dims` is not a permutation of `0..rank`.
    pub fn permute(&mut self, x: Tensor, dims: &[usize]) -> Result<Tensor> {
        let (id, _, _) = self.info("permute", x)?;
        let layout = self.nodes[id].layout.permute(dims)?;
        Ok(self.push_view(id, layout))
    }

    /// Swaps axes `a` and `b` (negative counts from the end; `torch.transpose`). A view.
    ///
    /// # Errors
    /// [`Error::InvalidAxis`] for an axis outside the rank.
    pub fn transpose(&mut self, x: Tensor, a: isize, b: isize) -> Result<Tensor> {
        let (_, _, shape) = self.info("transpose", x)?;
        let (a, b) = (resolve_axis("transpose", a, &shape)?, resolve_axis("transpose", b, &shape)?);
        let mut dims: Vec<usize> = (0..shape.len()).collect();
        dims.swap(a, b);
        self.permute(x, &dims)
    }

    /// Swaps the last two axes (`x.mT` in PyTorch). A view, so `x @ t(w)` with `w` stored [out, in] reads `w` in
    /// place.
    ///
    /// # Errors
    /// [`Error::InvalidAxis`] for a rank-1 tensor.
    pub fn t(&mut self, x: Tensor) -> Result<Tensor> {
        self.transpose(x, -2, -1)
    }

    /// `x[.., start..end, ..]` along `axis` (negative counts from the end). A view with an offset.
    ///
    /// # Errors
    /// [`Error::InvalidAxis`] for a bad axis or an empty or out-of-bounds range.
    pub fn slice(&mut self, x: Tensor, axis: isize, start: usize, end: usize) -> Result<Tensor> {
        let (id, _, shape) = self.info("slice", x)?;
        let axis = resolve_axis("slice", axis, &shape)?;
        let layout = self.nodes[id].layout.slice(axis, start, end)?;
        Ok(self.push_view(id, layout))
    }

    /// Stretches `x` to `shape` by numpy broadcasting (`numpy.broadcast_to`). A view with zero strides.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when `x` does not broadcast to `shape`.
    pub fn broadcast_to(&mut self, x: Tensor, shape: &[usize]) -> Result<Tensor> {
        let (id, _, _) = self.info("broadcast_to", x)?;
        check_shape("broadcast_to", shape)?;
        let layout = self.nodes[id].layout.broadcast_to(shape)?;
        Ok(self.push_view(id, layout))
    }

    // ---- elementwise --------------------------------------------------------------------------

    fn unary(&mut self, op: UnaryOp, name: &'static str, x: Tensor) -> Result<Tensor> {
        let (id, dtype, shape) = match op {
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sqr | UnaryOp::Copy => self.info(name, x)?,
            _ => self.require_float(name, x)?,
        };
        self.push(Op::Unary { op, x: id }, dtype, &shape)
    }

    /// A contiguous copy of `x` (`torch.Tensor.contiguous`, always copies).
    pub fn contiguous(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryOp::Copy, "contiguous", x)
    }

    /// `x` converted to `dtype` (round to nearest; float to i32 truncates toward zero and saturates,
    /// like `numpy.astype`). Always a new contiguous tensor.
    pub fn cast(&mut self, x: Tensor, dtype: DType) -> Result<Tensor> {
        let (id, _, shape) = self.info("cast", x)?;
        self.push(Op::Unary { op: UnaryOp::Copy, x: id }, dtype, &shape)
    }

    /// `x * s` (`ggml_scale`). # Errors: [`Error::UnsupportedDType`] for i32.
    pub fn scale(&mut self, x: Tensor, s: f32) -> Result<Tensor> {
        self.unary(UnaryOp::Scale(s.to_bits()), "scale", x)
    }
    /// `-x`.
    pub fn neg(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryOp::Neg, "neg", x)
    }
    /// `|x|`.
    pub fn abs(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryOp::Abs, "abs", x)
    }
    /// `x²`.
    pub fn sqr(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryOp::Sqr, "sqr", x)
    }
    /// `√x` (NaN for x < 0, like numpy). # Errors: [`Error::UnsupportedDType`] for i32.
    pub fn sqrt(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryOp::Sqrt, "sqrt", x)
    }
    /// `eˣ`. # Errors: [`Error::UnsupportedDType`] for i32.
    pub fn exp(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryOp::Exp, "exp", x)
    }
    /// Natural log (−inf at 0, NaN below). # Errors: [`Error::UnsupportedDType`] for i32.
    pub fn log(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryOp::Log, "log", x)
    }
    /// `tanh x`, finite for every finite x. # Errors: [`Error::UnsupportedDType`] for i32.
    pub fn tanh(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryOp::Tanh, "tanh", x)
    }
    /// `max(x, 0)`. # Errors: [`Error::UnsupportedDType`] for i32.
    pub fn relu(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryOp::Relu, "relu", x)
    }
    /// GELU, tanh form: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (ggml_gelu, PyTorch `approximate="tanh"`).
    pub fn gelu(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryOp::Gelu, "gelu", x)
    }
    /// GELU, erf form: `0.5·x·(1 + erf(x/√2))` (ggml_gelu_erf, PyTorch's default `gelu`).
    pub fn gelu_erf(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryOp::GeluErf, "gelu_erf", x)
    }
    /// `x·σ(x)` (`torch.nn.functional.silu`).
    pub fn silu(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryOp::Silu, "silu", x)
    }
    /// `1 / (1 + e⁻ˣ)`, stable for large |x|.
    pub fn sigmoid(&mut self, x: Tensor) -> Result<Tensor> {
        self.unary(UnaryOp::Sigmoid, "sigmoid", x)
    }

    fn binary(&mut self, op: BinaryOp, name: &'static str, a: Tensor, b: Tensor) -> Result<Tensor> {
        let (ia, da, sa) = self.info(name, a)?;
        let (ib, db, sb) = self.info(name, b)?;
        let dtype = promote(name, (da, &sa), (db, &sb))?;
        if op == BinaryOp::Div && dtype == DType::I32 {
            return Err(Error::UnsupportedDType { op: name, dtype, shape: sa, reason: "integer division".into() });
        }
        let shape = broadcast_shapes(name, &sa, &sb)?;
        self.push(Op::Binary { op, a: ia, b: ib }, dtype, &shape)
    }

    /// `a + b` with numpy broadcasting; f16 with f32 gives f32.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when the shapes do not broadcast; [`Error::DTypeMismatch`] for int with float.
    pub fn add(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Add, "add", a, b)
    }
    /// `a - b`, broadcast like [`Graph::add`].
    pub fn sub(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Sub, "sub", a, b)
    }
    /// `a * b` (elementwise), broadcast like [`Graph::add`].
    pub fn mul(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Mul, "mul", a, b)
    }
    /// `a / b`, broadcast like [`Graph::add`]; float dtypes only (IEEE: x/0 = ±inf).
    pub fn div(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Div, "div", a, b)
    }

    // ---- matmul -------------------------------------------------------------------------------

    /// Matrix product with `numpy.matmul` semantics: `C[..., m, n] = Σ_k A[..., m, k] · B[..., k, n]`.
    ///
    /// # Shapes
    /// A `[..., M, K]`, B `[..., K, N]` → C `[batch..., M, N]`, batch dims broadcast by numpy's rule. A rank-1 A
    /// is treated as `[1, K]` and a rank-1 B as `[K, 1]`, and that dim is dropped from the result.
    /// Either operand may be a strided view (`g.t(w)`), read in place.
    /// # DTypes
    /// f32 and f16 in any mix, accumulated in f32; the output is f32 unless both are f16.
    /// # Errors
    /// [`Error::ShapeMismatch`] when K differs or batch dims do not broadcast; [`Error::UnsupportedDType`] for i32.
    /// # Reference
    /// `numpy.matmul`; ggml's `ggml_mul_mat(a, b)` is `matmul(b, t(a))` here.
    pub fn matmul(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        let (_, da, sa) = self.require_float("matmul", a)?;
        let (_, db, sb) = self.require_float("matmul", b)?;
        if sa.len() == 1 {
            let a2 = self.reshape(a, &[1, sa[0]])?;
            let c = self.matmul(a2, b)?;
            let mut s = self.shape(c)?.to_vec();
            s.remove(s.len() - 2);
            return if s.is_empty() { self.reshape(c, &[1]) } else { self.reshape(c, &s) };
        }
        if sb.len() == 1 {
            let b2 = self.reshape(b, &[sb[0], 1])?;
            let c = self.matmul(a, b2)?;
            let mut s = self.shape(c)?.to_vec();
            s.pop();
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
        let dtype = promote("matmul", (da, &sa), (db, &sb))?;
        self.push(Op::MatMul { a: a.id as usize, b: b.id as usize }, dtype, &shape)
    }

    // ---- row ops ------------------------------------------------------------------------------

    /// `softmax(x)` over the last axis.
    pub fn softmax(&mut self, x: Tensor) -> Result<Tensor> {
        self.softmax_ext(x, None, 1.0)
    }

    /// `softmax(x·scale + mask)` over the last axis (ggml_soft_max_ext). A row whose entries are all −inf gives
    /// zeros (PyTorch would give NaN). The max is subtracted first, so large inputs do not overflow.
    ///
    /// # Shapes
    /// x `[..., N]`; mask broadcasts to x's shape (e.g. `[S, N]` for a causal mask). Output: x's shape.
    /// # Errors
    /// [`Error::UnsupportedDType`] for i32; [`Error::ShapeMismatch`] when the mask does not broadcast to x.
    pub fn softmax_ext(&mut self, x: Tensor, mask: Option<Tensor>, scale: f32) -> Result<Tensor> {
        let (ix, dtype, shape) = self.require_float("softmax", x)?;
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
        self.push(Op::Softmax { x: ix, mask, scale }, dtype, &shape)
    }

    /// `x / √(mean(x², last axis) + eps)` (ggml_rms_norm; multiply by a weight with [`Graph::mul`]).
    /// # Errors: [`Error::UnsupportedDType`] for i32.
    pub fn rms_norm(&mut self, x: Tensor, eps: f32) -> Result<Tensor> {
        let (ix, dtype, shape) = self.require_float("rms_norm", x)?;
        self.push(Op::RmsNorm { x: ix, eps }, dtype, &shape)
    }

    /// `(x − mean) / √(var + eps)` over the last axis, biased variance (ggml_norm; `torch.nn.functional.layer_norm`
    /// without weight and bias; apply those with [`Graph::mul`] and [`Graph::add`]).
    /// # Errors: [`Error::UnsupportedDType`] for i32.
    pub fn layer_norm(&mut self, x: Tensor, eps: f32) -> Result<Tensor> {
        let (ix, dtype, shape) = self.require_float("layer_norm", x)?;
        self.push(Op::LayerNorm { x: ix, eps }, dtype, &shape)
    }

    fn reduce(&mut self, op: ReduceOp, name: &'static str, x: Tensor) -> Result<Tensor> {
        let (ix, dtype, mut shape) = self.require_float(name, x)?;
        *shape.last_mut().expect("rank >= 1") = 1;
        let out = if op == ReduceOp::ArgMax { DType::I32 } else { dtype };
        self.push(Op::Reduce { op, x: ix }, out, &shape)
    }

    /// Sum over the last axis, kept as size 1 (`torch.sum(x, -1, keepdim=True)`), accumulated in f32.
    pub fn sum(&mut self, x: Tensor) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, "sum", x)
    }
    /// Mean over the last axis, kept as size 1 (`torch.mean(x, -1, keepdim=True)`).
    pub fn mean(&mut self, x: Tensor) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, "mean", x)
    }
    /// Maximum over the last axis, kept as size 1 (`torch.amax(x, -1, keepdim=True)`).
    pub fn max(&mut self, x: Tensor) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, "max", x)
    }
    /// Index of the first maximum over the last axis, as i32, kept as size 1 (`numpy.argmax(x, -1)[..., None]`).
    pub fn argmax(&mut self, x: Tensor) -> Result<Tensor> {
        self.reduce(ReduceOp::ArgMax, "argmax", x)
    }

    // ---- gather and join ----------------------------------------------------------------------

    /// Embedding lookup: `out[i..., :] = table[idx[i...], :]` (ggml_get_rows, `torch.nn.functional.embedding`).
    ///
    /// # Shapes
    /// table `[V, D]`, idx of rank ≤ 3 → out `idx.shape + [D]`.
    /// # DTypes
    /// table any dtype; idx i32. An index outside `0..V` yields an error on the CPU and zeros on the GPU.
    /// # Errors
    /// [`Error::InvalidShape`] for a table of rank ≠ 2 or idx of rank 4; [`Error::UnsupportedDType`] for
    /// non-i32 indices.
    pub fn get_rows(&mut self, table: Tensor, idx: Tensor) -> Result<Tensor> {
        let (it, dt, st) = self.info("get_rows", table)?;
        let (ii, di, si) = self.info("get_rows", idx)?;
        if st.len() != 2 {
            return Err(Error::InvalidShape { op: "get_rows", shape: st, reason: "the table must be [V, D]".into() });
        }
        if di != DType::I32 {
            return Err(Error::UnsupportedDType {
                op: "get_rows",
                dtype: di,
                shape: si,
                reason: "indices must be i32".into(),
            });
        }
        let mut shape = si.clone();
        shape.push(st[1]);
        check_shape("get_rows", &shape)?;
        self.push(Op::GetRows { table: it, idx: ii }, dt, &shape)
    }

    /// Joins tensors along `axis` (`numpy.concatenate`); negative axes count from the end.
    ///
    /// # Errors
    /// [`Error::InvalidShape`] for an empty list; [`Error::ShapeMismatch`] when ranks or other dims differ;
    /// [`Error::DTypeMismatch`] when dtypes differ; [`Error::InvalidAxis`] for a bad axis.
    pub fn concat(&mut self, xs: &[Tensor], axis: isize) -> Result<Tensor> {
        let (&first, rest) = xs.split_first().ok_or(Error::InvalidShape {
            op: "concat",
            shape: vec![],
            reason: "no tensors given".into(),
        })?;
        let mut acc = first;
        for &x in rest {
            let (ia, da, sa) = self.info("concat", acc)?;
            let (ib, db, sb) = self.info("concat", x)?;
            let ax = resolve_axis("concat", axis, &sa)?;
            if da != db {
                return Err(Error::DTypeMismatch { op: "concat", lhs: da, lhs_shape: sa, rhs: db, rhs_shape: sb });
            }
            if sa.len() != sb.len() || (0..sa.len()).any(|d| d != ax && sa[d] != sb[d]) {
                return Err(Error::ShapeMismatch {
                    op: "concat",
                    lhs: sa,
                    rhs: sb,
                    reason: format!("all dims but axis {ax} must match"),
                });
            }
            let mut shape = sa.clone();
            shape[ax] += sb[ax];
            acc = self.push(Op::Concat { a: ia, b: ib, axis: ax }, da, &shape)?;
        }
        if rest.is_empty() {
            self.info("concat", first)?;
        }
        Ok(acc)
    }
}

/// The layout an operand is read through for an op whose output has `shape`: the operand's own layout,
/// broadcast to `shape` (used by kernels on every backend).
pub(crate) fn operand_layout(layout: &Layout, shape: &[usize]) -> Layout {
    layout.broadcast_to(shape).expect("validated when the node was built")
}
