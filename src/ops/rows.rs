//! The row-op table: ops over the last axis that give a row for each row (softmax and the norms).

use super::reduce::sum_f64;

/// The parameters a row op may use: softmax's scale, the norms' epsilon.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct RowParams {
    pub scale: f32,
    pub eps: f32,
}

macro_rules! define_rows {
    ($(($var:ident, $method:ident, $js:literal, [$($param:ident),*], $wgsl:literal, |$row:ident, $p:ident| $cpu:block,
        $doc:literal))*) => {
        /// Ops over the last axis that give a row for each row, computed in f32 on the GPU and f64 on the CPU;
        /// see the [`Graph`](crate::Graph) method of each.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum RowOp {
            $(#[doc = $doc] $var,)*
        }

        impl RowOp {
            /// Every row op, in table order.
            pub const ALL: &'static [RowOp] = &[$(RowOp::$var),*];

            /// The PyTorch-style name (`rms_norm`).
            pub fn name(self) -> &'static str {
                match self { $(RowOp::$var => stringify!($method),)* }
            }

            /// The op's constant in `src/backend/gpu/kernels/rows.wgsl`, which selects its code there.
            pub(crate) fn wgsl_const(self) -> &'static str {
                match self { $(RowOp::$var => $wgsl,)* }
            }

            /// Replaces `row` (already scaled and masked for softmax) by the op's result, in f64 (the CPU
            /// backend's function).
            pub(crate) fn eval(self, row: &mut [f64], p: RowParams) {
                match self {
                    $(RowOp::$var => {
                        let f = |$row: &mut [f64], $p: RowParams| $cpu;
                        f(row, p)
                    })*
                }
            }
        }
    };
}

/// Calls `$callback!` with the row-op table: per op its variant, its `Graph` method, its JavaScript name, the
/// parameters its method takes after x (`eps` for the norms), its `rows.wgsl` constant, its f64 function and its
/// doc. The `RowOp` enum, the wasm methods and the differential cases are generated from it.
macro_rules! for_each_row {
    ($callback:ident) => {
        $callback! {
            (Softmax, softmax, "softmax", [], "SOFTMAX", |row, _p| {
                // a NaN makes the row NaN (f64::max drops it: the row became zeros), as torch.softmax
                if row.iter().any(|e| e.is_nan()) {
                    row.iter_mut().for_each(|e| *e = f64::NAN);
                    return;
                }
                let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                row.iter_mut().for_each(|e| *e = if max == f64::NEG_INFINITY { 0.0 } else { (*e - max).exp() });
                let s = sum_f64(row, |x| x);
                row.iter_mut().for_each(|e| *e = if s > 0.0 { *e / s } else { 0.0 });
            }, "`softmax(x·scale + mask)`; a row of −inf gives zeros (ggml_soft_max_ext), a row with a NaN NaN (torch.softmax).")
            (RmsNorm, rms_norm, "rmsNorm", [eps], "RMS_NORM", |row, p| {
                let inv = 1.0 / (sum_f64(row, |x| x * x) / row.len() as f64 + p.eps as f64).sqrt();
                row.iter_mut().for_each(|e| *e *= inv);
            }, "`x / √(mean(x²) + eps)` (ggml_rms_norm).")
            (LayerNorm, layer_norm, "layerNorm", [eps], "LAYER_NORM", |row, p| {
                let n = row.len() as f64;
                let mean = sum_f64(row, |x| x) / n;
                let var = sum_f64(row, |x| (x - mean) * (x - mean)) / n;
                let inv = 1.0 / (var + p.eps as f64).sqrt();
                row.iter_mut().for_each(|e| *e = (*e - mean) * inv);
            }, "`(x − mean) / √(var + eps)`, biased variance (ggml_norm).")
            (L2Norm, l2_norm, "l2Norm", [eps], "L2_NORM", |row, p| {
                let inv = 1.0 / sum_f64(row, |x| x * x).sqrt().max(p.eps as f64);
                row.iter_mut().for_each(|e| *e *= inv);
            }, "`x / max(‖x‖₂, eps)` (ggml_l2_norm, `torch.nn.functional.normalize(x, dim=-1, eps=eps)`).")
        }
    };
}
pub(crate) use for_each_row;

for_each_row!(define_rows);
