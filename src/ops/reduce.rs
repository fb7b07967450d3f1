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

            /// The value of a non-empty row of f32 values, in f64 (the CPU backend's function; argmax's index as
            /// f64).
            pub(crate) fn eval(self, row: &[f32]) -> f64 {
                match self {
                    $(ReduceOp::$var => {
                        let f = |$row: &[f32]| -> f64 { $cpu };
                        f(row)
                    })*
                }
            }
        }
    };
}

/// The reduction table. `$callback!` receives every row as
/// `(Variant, method, "WGSL constant", |row| cpu f64 value of an f32 row, "doc")`; the enum, the `Graph` methods and the wasm
/// package's methods are generated from it.
macro_rules! for_each_reduce {
    ($callback:ident) => {
        $callback! {
            (Sum, sum, "SUM", |row| sum_f64(row, |x| x), "`Σ x` (`torch.sum(x, -1, keepdim=True)`).")
            (Mean, mean, "MEAN", |row| sum_f64(row, |x| x) / row.len() as f64,
                "`Σ x / N` (`torch.mean(x, -1, keepdim=True)`).")
            (Max, max, "MAX", |row| row[first_max(row)] as f64,
                "`max x`, NaN where the row has one (`torch.amax(x, -1, keepdim=True)`).")
            (ArgMax, argmax, "ARGMAX", |row| first_max(row) as f64,
                "Index of the first maximum (of the first NaN where there is one), as i32 (`numpy.argmax(x, -1)[..., None]`).")
        }
    };
}
pub(crate) use for_each_reduce;

for_each_reduce!(define_reduce);

/// `Σ f(x)` over `row` in f64, in eight partial sums (independent, so a loop runs at the adds' throughput, not
/// their latency: a row of 49152 logits or 576 activations was 4 cycles an element), added at the end, then the
/// tail. Against one running sum only the order of the additions differs (~1e-16 relative, far under f32's
/// rounding).
pub(crate) fn sum_f64<T: Copy + Into<f64>>(row: &[T], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [0f64; 8];
    let chunks = row.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += f(x.into());
        }
    }
    acc.iter().sum::<f64>() + tail.iter().map(|&x| f(x.into())).sum::<f64>()
}

/// The largest comparable value of `row` in eight running maxima (a loop that vectorizes; `init` when there is
/// none larger), and whether the row holds a NaN (which no comparison keeps).
#[inline(always)]
pub(crate) fn running_max<T: Copy + PartialOrd>(row: &[T], init: T) -> (T, bool) {
    // a NaN is the only value not comparable with itself
    let is_nan = |e: &T| e.partial_cmp(e).is_none();
    let mut m = [init; 8];
    let mut nan = false;
    let chunks = row.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &e) in m.iter_mut().zip(c) {
            *a = if e > *a { e } else { *a };
            nan |= is_nan(&e);
        }
    }
    let max = m.iter().chain(tail).fold(init, |a, &e| if e > a { e } else { a });
    (max, nan || tail.iter().any(is_nan))
}

/// The index of the first maximum of a non-empty row of f32 or f64 values, or of its first NaN (a NaN is the
/// largest, as numpy.argmax and torch.amax take it).
pub(crate) fn first_max<T: Copy + PartialOrd>(row: &[T]) -> usize {
    let (best, nan) = running_max(row, row[0]);
    if nan {
        return row.iter().position(|e| e.partial_cmp(e).is_none()).unwrap_or(0);
    }
    row.iter().position(|&e| e == best).unwrap_or(0)
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

#[cfg(test)]
mod tests {
    /// `first_max` against the plain scan (first index of the largest; the first NaN wins), on rows with ties,
    /// signed zeros, infinities and NaNs, at every length around the eight running maxima.
    #[test]
    fn first_max_is_the_first_largest_or_the_first_nan() {
        let values = [0.0f32, -0.0, 1.0, -1.0, 3.5, 3.5, f32::INFINITY, f32::NEG_INFINITY, 2.0];
        let mut state = 0x9e37_79b9u32;
        let mut nans = 0;
        for len in 1..40 {
            for _ in 0..200 {
                let row: Vec<f32> = (0..len)
                    .map(|_| {
                        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                        // a NaN one time in 64, so that most rows have none
                        let k = (state >> 16) as usize % 64;
                        if k == 63 {
                            f32::NAN
                        } else {
                            values[k % values.len()]
                        }
                    })
                    .collect();
                nans += usize::from(row.iter().any(|e| e.is_nan()));
                let want = row.iter().position(|e| e.is_nan()).unwrap_or_else(|| {
                    let mut arg = 0;
                    for (j, &e) in row.iter().enumerate() {
                        if e > row[arg] {
                            arg = j;
                        }
                    }
                    arg
                });
                assert_eq!(super::first_max(&row), want, "{row:?}");
            }
        }
        assert!(nans > 100, "rows with a NaN: {nans}");
    }
}
