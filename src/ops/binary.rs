//! The binary table: elementwise functions of two operands with numpy broadcasting.

use super::common::{fill, Accepts};

macro_rules! define_binary {
    ($(($var:ident, $method:ident, $acc:ident, |$x:ident, $y:ident| $cpu:expr, $int:expr, $wgsl:literal,
        $doc:literal))*) => {
        /// Elementwise functions of two operands, broadcast by numpy's rule; see the [`Graph`](crate::Graph)
        /// method of each.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum BinaryOp {
            $(#[doc = $doc] $var,)*
        }

        impl BinaryOp {
            /// Every binary op, in table order.
            pub const ALL: &'static [BinaryOp] = &[$(BinaryOp::$var),*];

            /// The numpy-style name (`add`).
            pub fn name(self) -> &'static str {
                match self { $(BinaryOp::$var => stringify!($method),)* }
            }

            /// The element types the op accepts.
            pub fn accepts(self) -> Accepts {
                match self { $(BinaryOp::$var => Accepts::$acc,)* }
            }

            /// The op's f32 function (the CPU backend's) of `xs[i]` and `ys[i]` into `xs[i]`: one loop per op,
            /// vectorized where it can be.
            pub(crate) fn eval_slice(self, xs: &mut [f32], ys: &[f32]) {
                match self {
                    $(BinaryOp::$var => {
                        let f = |$x: f32, $y: f32| -> f32 { $cpu };
                        xs.iter_mut().zip(ys).for_each(|(x, &y)| *x = f(*x, y));
                    })*
                }
            }

            /// The wrapping i32 value, for the ops that accept integers.
            #[allow(unused_variables)]
            pub(crate) fn eval_i32(self, a: i32, b: i32) -> Option<i32> {
                match self { $(BinaryOp::$var => { let f: fn(i32, i32) -> Option<i32> = $int; f(a, b) })* }
            }

            /// The WGSL expression over `{x}` and `{y}`.
            pub(crate) fn wgsl(self, x: &str, y: &str) -> String {
                let t = match self { $(BinaryOp::$var => $wgsl,)* };
                fill(t, &[("x", x), ("y", y)])
            }
        }
    };
}

/// The binary table. `$callback!` receives every row as
/// `(Variant, method, accepts, |x, y| cpu f32 expression, |a, b| wrapping i32 value or None, "WGSL of {x} {y}",
/// "doc")`; the enum, the `Graph` methods and the wasm package's methods are generated from it.
macro_rules! for_each_binary {
    ($callback:ident) => {
        $callback! {
            (Add, add, FloatOrInt, |x, y| x + y, |a, b| Some(a.wrapping_add(b)), "({x} + {y})",
                "`a + b` (`numpy.add`).")
            (Sub, sub, FloatOrInt, |x, y| x - y, |a, b| Some(a.wrapping_sub(b)), "({x} - {y})",
                "`a − b` (`numpy.subtract`).")
            (Mul, mul, FloatOrInt, |x, y| x * y, |a, b| Some(a.wrapping_mul(b)), "({x} * {y})",
                "`a · b`, elementwise (`numpy.multiply`).")
            (Div, div, Float, |x, y| x / y, |_, _| None, "div_rn({x}, {y})",
                "`a / b`, IEEE (x/0 = ±inf; `numpy.divide`); floats only.")
        }
    };
}
pub(crate) use for_each_binary;

for_each_binary!(define_binary);
