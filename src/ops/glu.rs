//! The GLU table: ggml's gated linear units, `act(a) · b`.

use super::UnaryOp;

macro_rules! define_glu {
    ($(($var:ident, $method:ident, $act:ident, $doc:literal))*) => {
        /// Gated linear units, `act(a) · b` (ggml's `ggml_glu` family), computed in f32 and rounded once. Each
        /// has a split form over two operands and a fused form that halves the last axis.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum GluOp {
            $(#[doc = $doc] $var,)*
        }

        impl GluOp {
            /// Every GLU op, in table order.
            pub const ALL: &'static [GluOp] = &[$(GluOp::$var),*];

            /// ggml's name (`swiglu`).
            pub fn name(self) -> &'static str {
                match self { $(GluOp::$var => stringify!($method),)* }
            }

            /// The activation applied to the gate `a`.
            pub fn activation(self) -> UnaryOp {
                match self { $(GluOp::$var => UnaryOp::$act,)* }
            }
        }
    };
}

define_glu! {
    (SwiGlu, swiglu, Silu, "`silu(a) · b` (ggml_swiglu, LLaMA's feed-forward gate).")
    (GeGlu, geglu, Gelu, "`gelu(a) · b` with GELU's tanh form (ggml_geglu).")
    (GeGluErf, geglu_erf, GeluErf, "`gelu_erf(a) · b` (ggml_geglu_erf).")
    (GeGluQuick, geglu_quick, GeluQuick, "`gelu_quick(a) · b` (ggml_geglu_quick).")
}

impl GluOp {
    /// The WGSL expression over gate `a` and value `b`.
    pub(crate) fn wgsl(self, a: &str, b: &str) -> String {
        format!("({} * {b})", self.activation().wgsl(a, 0, 0))
    }
}
