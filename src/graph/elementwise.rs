//! Elementwise ops: the unary table's methods (generated from `crate::ops`), binary ops with broadcasting, and
//! the gated linear units.

use super::{Graph, Op, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::{for_each_binary, for_each_unary, BinaryOp, GluOp, UnaryOp};
use crate::shape::broadcast_shapes;

/// Output dtype of a float op on two float operands: f32 if either is f32 (numpy's promotion), else f16.
pub(crate) fn promote(op: &'static str, a: (DType, &[usize]), b: (DType, &[usize])) -> Result<DType> {
    match (a.0, b.0) {
        (x, y) if x == y => Ok(x),
        (x, y) if x.is_float() && y.is_float() => Ok(DType::F32),
        _ => Err(Error::DTypeMismatch { op, lhs: a.0, lhs_shape: a.1.to_vec(), rhs: b.0, rhs_shape: b.1.to_vec() }),
    }
}

macro_rules! accepts_doc {
    (Float) => {
        "f32 and f16, computed in f32 and rounded once to the input's dtype, which the output has."
    };
    (FloatOrInt) => {
        "f32, f16 (computed in f32, rounded once) and i32 (wrapping); the output has the input's dtype."
    };
}

macro_rules! unary_method {
    (0, $var:ident, $method:ident, $acc:ident, $doc:literal) => {
        #[doc = $doc]
        ///
        /// # Shapes
        /// x `[...]` → the same shape; x may be any view.
        /// # DTypes
        #[doc = accepts_doc!($acc)]
        /// # Errors
        /// [`Error::UnsupportedDType`] for a dtype the op does not accept.
        /// # Reference
        /// The PyTorch function named above; the CPU function is the op's row in the unary table (`src/ops`).
        pub fn $method(&mut self, x: Tensor) -> Result<Tensor> {
            self.unary(UnaryOp::$var, x, &[])
        }
    };
    ($params:literal, $($rest:tt)*) => {};
}

macro_rules! unary_methods {
    ($(($var:ident, $method:ident, $js:literal, $acc:ident, |$x:ident, $a:ident, $b:ident| $cpu:expr,
        $wgsl:literal, $doc:literal, $params:tt))*) => {
        impl Graph {
            $(unary_method!($params, $var, $method, $acc, $doc);)*
        }
    };
}
for_each_unary!(unary_methods);

macro_rules! binary_accepts_doc {
    (Float) => {
        "f32 and f16 (f16 with f32 gives f32), computed in f32 and rounded once to the output's dtype."
    };
    (FloatOrInt) => {
        "As [`Graph::binary`]: equal dtypes give that dtype, f16 with f32 gives f32, i32 only with i32 (wrapping)."
    };
}

macro_rules! binary_methods {
    ($(($var:ident, $method:ident, $acc:ident, |$x:ident, $y:ident| $cpu:expr, $int:expr, $wgsl:literal,
        $doc:literal))*) => {
        impl Graph {
            $(
                #[doc = $doc]
                ///
                /// # Shapes
                /// a, b broadcast by numpy's rule → the broadcast shape.
                /// # DTypes
                #[doc = binary_accepts_doc!($acc)]
                /// # Errors
                /// As [`Graph::binary`]: [`Error::ShapeMismatch`] when the shapes do not broadcast,
                /// [`Error::DTypeMismatch`] for int with float, [`Error::UnsupportedDType`] for a dtype the op
                /// does not accept.
                /// # Reference
                /// The numpy function named above; the CPU function is the op's row in the binary table
                /// (`src/ops`).
                pub fn $method(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
                    self.binary(BinaryOp::$var, a, b)
                }
            )*
        }
    };
}
for_each_binary!(binary_methods);

impl Graph {
    /// Any op of the unary table with its f32 parameters (`scale`: `[s]`, `clamp`: `[lo, hi]`, others none).
    ///
    /// # Shapes
    /// x `[...]` → the same shape.
    /// # DTypes
    /// As [`UnaryOp::accepts`] says; the output has x's dtype.
    /// # Errors
    /// [`Error::UnsupportedDType`] for a dtype the op does not accept; [`Error::InvalidArgument`] when `params`
    /// does not have [`UnaryOp::params`] values.
    /// # Reference
    /// The PyTorch function of the op's name.
    pub fn unary(&mut self, op: UnaryOp, x: Tensor, params: &[f32]) -> Result<Tensor> {
        let (id, dtype, shape) = self.info(op.name(), x)?;
        if !op.accepts().dtype(dtype) {
            return Err(Error::UnsupportedDType { op: op.name(), dtype, shape, reason: "needs f32 or f16".into() });
        }
        if params.len() != op.params() {
            return Err(Error::InvalidArgument {
                op: op.name(),
                reason: format!("takes {} parameter(s), {} given", op.params(), params.len()),
            });
        }
        let p = |i: usize| params.get(i).map_or(0, |v| v.to_bits());
        self.push(Op::Unary { op, x: id, a: p(0), b: p(1) }, dtype, &shape)
    }

    /// `x · s` (ggml_scale).
    ///
    /// # Shapes
    /// x `[...]` → the same shape.
    /// # DTypes
    /// f32 and f16, computed in f32; the output has x's dtype.
    /// # Errors
    /// [`Error::UnsupportedDType`] for i32.
    /// # Reference
    /// ggml_scale, `x * s` in PyTorch.
    pub fn scale(&mut self, x: Tensor, s: f32) -> Result<Tensor> {
        self.unary(UnaryOp::Scale, x, &[s])
    }

    /// `min(max(x, lo), hi)`.
    ///
    /// # Shapes
    /// x `[...]` → the same shape.
    /// # DTypes
    /// f32 and f16, computed in f32; the output has x's dtype.
    /// # Errors
    /// [`Error::UnsupportedDType`] for i32.
    /// # Reference
    /// `torch.clamp(x, lo, hi)`, ggml_clamp.
    pub fn clamp(&mut self, x: Tensor, lo: f32, hi: f32) -> Result<Tensor> {
        self.unary(UnaryOp::Clamp, x, &[lo, hi])
    }

    /// Any op of the binary table, `op(a, b)`, with numpy broadcasting.
    ///
    /// # Shapes
    /// a, b broadcast by numpy's rule (align right, a dim of 1 stretches) → the broadcast shape.
    /// # DTypes
    /// Equal dtypes give that dtype; f16 with f32 gives f32; i32 only with i32, for the ops that accept it.
    /// # Errors
    /// [`Error::ShapeMismatch`] when the shapes do not broadcast; [`Error::DTypeMismatch`] for int with float;
    /// [`Error::UnsupportedDType`] for i32 `div`.
    /// # Reference
    /// The numpy function of the op's name (`numpy.add`, ...).
    pub fn binary(&mut self, op: BinaryOp, a: Tensor, b: Tensor) -> Result<Tensor> {
        let name = op.name();
        let (ia, da, sa) = self.info(name, a)?;
        let (ib, db, sb) = self.info(name, b)?;
        let dtype = promote(name, (da, &sa), (db, &sb))?;
        if !op.accepts().dtype(dtype) {
            return Err(Error::UnsupportedDType { op: name, dtype, shape: sa, reason: "integer division".into() });
        }
        let shape = broadcast_shapes(name, &sa, &sb)?;
        self.push(Op::Binary { op, a: ia, b: ib }, dtype, &shape)
    }

    /// A gated linear unit, split form: `act(a) · b` with the activation of `op` (computed in f32, rounded once).
    ///
    /// # Shapes
    /// a, b broadcast by numpy's rule → the broadcast shape.
    /// # DTypes
    /// f32 and f16 in any mix (f16 with f32 gives f32).
    /// # Errors
    /// [`Error::UnsupportedDType`] for i32; [`Error::ShapeMismatch`] when the shapes do not broadcast.
    /// # Reference
    /// ggml's `ggml_glu_split` (`ggml_swiglu_split`, ...); `F.silu(a) * b` in PyTorch for swiglu.
    pub fn glu(&mut self, op: GluOp, a: Tensor, b: Tensor) -> Result<Tensor> {
        let name = op.name();
        let (ia, da, sa) = self.require_float(name, a)?;
        let (ib, db, sb) = self.require_float(name, b)?;
        let dtype = promote(name, (da, &sa), (db, &sb))?;
        let shape = broadcast_shapes(name, &sa, &sb)?;
        self.push(Op::Glu { op, a: ia, b: ib }, dtype, &shape)
    }

    /// A gated linear unit, fused form: the last axis of `x` is halved into the gate `a = x[..., :n/2]` and the
    /// value `b = x[..., n/2:]` (two views, no copy), and the result is `act(a) · b`.
    ///
    /// # Shapes
    /// x `[..., 2·n]` → `[..., n]`.
    /// # DTypes
    /// f32 and f16.
    /// # Errors
    /// [`Error::UnsupportedDType`] for i32; [`Error::InvalidShape`] when the last axis has odd length, or for a 0-d x.
    /// # Reference
    /// ggml's `ggml_glu` (`ggml_swiglu(x)`, ...).
    pub fn glu_fused(&mut self, op: GluOp, x: Tensor) -> Result<Tensor> {
        let (_, _, shape) = self.require_float(op.name(), x)?;
        let Some(&n) = shape.last() else {
            let reason = "a 0-d tensor has no last axis to halve".into();
            return Err(Error::InvalidShape { op: op.name(), shape, reason });
        };
        if n % 2 != 0 {
            return Err(Error::InvalidShape {
                op: op.name(),
                shape,
                reason: "the last axis must have even length to halve it into gate and value".into(),
            });
        }
        let a = self.slice(x, -1, 0, n / 2)?;
        let b = self.slice(x, -1, n / 2, n)?;
        self.glu(op, a, b)
    }

    /// `silu(a) · b` ([`Graph::glu`] with [`GluOp::SwiGlu`]).
    ///
    /// # Shapes
    /// a, b broadcast by numpy's rule → the broadcast shape.
    /// # DTypes
    /// f32 and f16 in any mix (f16 with f32 gives f32).
    /// # Errors
    /// As [`Graph::glu`].
    /// # Reference
    /// ggml_swiglu_split; `F.silu(a) * b`, LLaMA's feed-forward gate.
    pub fn swiglu(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.glu(GluOp::SwiGlu, a, b)
    }

    /// `gelu(a) · b` ([`Graph::glu`] with [`GluOp::GeGlu`]).
    ///
    /// # Shapes
    /// a, b broadcast by numpy's rule → the broadcast shape.
    /// # DTypes
    /// f32 and f16 in any mix (f16 with f32 gives f32).
    /// # Errors
    /// As [`Graph::glu`].
    /// # Reference
    /// ggml_geglu_split (GELU's tanh form).
    pub fn geglu(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        self.glu(GluOp::GeGlu, a, b)
    }
}
