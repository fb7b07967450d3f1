//! The reduction table: reductions over the last axis, keeping it as size 1.

macro_rules! define_reduce {
    ($(($var:ident, $method:ident, $wgsl:literal, |$row:ident| $cpu:expr, $doc:literal))*) => {
        /// Reductions over the last axis, keeping it as size 1 (accumulated in f32 on the GPU, f64 on the CPU);
        /// see the [`Graph`](crate::Graph) method of each.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ReduceOp {
            $(#[doc = $doc] $var,)*
        }

        impl ReduceOp {
            /// Every reduction, in table order.
            pub const ALL: &'static [ReduceOp] = &[$(ReduceOp::$var),*];

            /// The numpy-style name (`argmax`).
            pub fn name(self) -> &'static str {
                match self { $(ReduceOp::$var => stringify!($method),)* }
            }

            /// The op's constant in `src/backend/gpu/kernels/rows.wgsl`, which selects its code there.
            pub(crate) fn wgsl_const(self) -> &'static str {
                match self { $(ReduceOp::$var => $wgsl,)* }
            }

            /// The value of a row, in f64 (the CPU backend's function; argmax's index as f64).
            pub(crate) fn eval(self, row: &[f64]) -> f64 {
                match self {
                    $(ReduceOp::$var => {
                        let f = |$row: &[f64]| -> f64 { $cpu };
                        f(row)
                    })*
                }
            }
        }
    };
}

/// The reduction table. `$callback!` receives every row as
/// `(Variant, method, "WGSL constant", |row| cpu f64 value, "doc")`; the enum, the `Graph` methods and the wasm
/// package's methods are generated from it.
macro_rules! for_each_reduce {
    ($callback:ident) => {
        $callback! {
            (Sum, sum, "SUM", |row| row.iter().sum(), "`Σ x` (`torch.sum(x, -1, keepdim=True)`).")
            (Mean, mean, "MEAN", |row| row.iter().sum::<f64>() / row.len() as f64,
                "`Σ x / N` (`torch.mean(x, -1, keepdim=True)`).")
            (Max, max, "MAX", |row| row[first_max(row)],
                "`max x`, NaN where the row has one (`torch.amax(x, -1, keepdim=True)`).")
            (ArgMax, argmax, "ARGMAX", |row| first_max(row) as f64,
                "Index of the first maximum (of the first NaN where there is one), as i32 (`numpy.argmax(x, -1)[..., None]`).")
        }
    };
}
pub(crate) use for_each_reduce;

for_each_reduce!(define_reduce);

/// The index of the first maximum of `row` (NaN never wins).
fn first_max(row: &[f64]) -> usize {
    // a NaN is the largest, as numpy.argmax and torch.amax take it
    if let Some(j) = row.iter().position(|e| e.is_nan()) {
        return j;
    }
    let (mut best, mut arg) = (row[0], 0);
    for (j, &e) in row.iter().enumerate() {
        if e > best {
            (best, arg) = (e, j);
        }
    }
    arg
}

impl ReduceOp {
    /// The output dtype for an input of `dtype`.
    pub fn out_dtype(self, dtype: crate::dtype::DType) -> crate::dtype::DType {
        if self == ReduceOp::ArgMax {
            crate::dtype::DType::I32
        } else {
            dtype
        }
    }
}
