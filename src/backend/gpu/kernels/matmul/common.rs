//! What the four matmul kernels share: their parameters, their bindings and the epilogue function each calls.

use super::super::elementwise::epilogue_fn;
use crate::backend::gpu::kernel::{Binding, KernelKey};
use crate::backend::gpu::params::params;
use crate::compile::ir::Expr;

params! {
    /// The matmul kernels (`matmul.wgsl`, `matmul_tiled.wgsl`, `matmul_coop.wgsl`, `matvec.wgsl`):
    /// `C[b, m, n] = epilogue(Σ_k A[b, m, k] · B[b, k, n])`.
    MatmulParams {
        /// Rows of C this dispatch computes.
        m: u32,
        /// Columns of C this dispatch computes (columns `n0 .. n0 + n`).
        n: u32,
        /// The contracted dimension.
        k: u32,
        /// Size of batch dim 1: workgroup z = b0 · batch1 + b1.
        batch1: u32,
        /// A's strides (batch0, batch1, row, col), broadcast batch dims 0.
        a_strides: [u32; 4],
        /// B's strides (batch0, batch1, row, col).
        b_strides: [u32; 4],
        /// A's offset within its binding.
        a_offset: u32,
        /// B's offset within its binding.
        b_offset: u32,
        /// First output column of this dispatch (a B larger than one binding is split by columns).
        n0: u32,
        /// Output row stride: all of the output's columns.
        ldc: u32,
        /// First output row of this dispatch (an A larger than one binding is split by rows).
        m0: u32,
        /// Index of the output binding's first element when the output is bound as a window.
        out_window: u32,
        /// First batch of this dispatch: workgroup z is batch `batch0 + z` (more batches than one dispatch's
        /// z may count are dispatched in groups).
        batch0: u32,
        /// A dual matmul's second B's offset within its binding (`b2_in`; its strides are B's).
        b2_offset: u32,
        /// Strides of epilogue operand k, broadcast to C's coordinates (b0, b1, m, n).
        epi_strides: [[u32; 4]; 5],
        /// Offset of epilogue operand k, at `epi_offsets[k / 4][k % 4]`.
        epi_offsets: [[u32; 4]; 2],
    }
}

/// `batch_of(z)`: the batch a workgroup computes and where A and B start for it, appended to every matmul kernel.
pub(crate) const BATCH: &str = include_str!("matmul_batch.wgsl");
/// Every matmul kernel's first lines, for its `{{BATCH_LETS}}`: sizes, batch, strides and bases
/// (`matmul_batch_lets.wgsl` after its header comment).
pub(crate) fn batch_lets() -> &'static str {
    const LETS: &str = include_str!("matmul_batch_lets.wgsl");
    LETS.find("    let").map_or(LETS, |i| &LETS[i..]).trim_end()
}

/// A matmul kernel's bindings: the output `out` (`c_out` or `y_out`), A (`a_in` or `x_in`) and B (`b_in`), vec4
/// as given, then the epilogue's operands `e0..` (scalar).
pub(crate) fn bindings(key: &KernelKey, names: [&str; 2], out_vec4: bool, in_vec4: bool) -> Vec<Binding> {
    let mut v = vec![
        Binding::output(names[0], key.out).vec4(out_vec4),
        Binding::input(names[1], key.ins[0]).vec4(in_vec4),
        Binding::input("b_in", key.ins[1]).vec4(in_vec4),
    ];
    v.extend(key.ins.iter().enumerate().skip(2).map(|(k, &d)| Binding::input(format!("e{}", k - 2), d)));
    v
}

/// The `epilogue(acc, coords)` function of a matmul variant: [`epilogue_fn`] over the operands after A and B.
pub(crate) fn epilogue(key: &KernelKey, epi: Option<&Expr>) -> String {
    epilogue_fn(key.ins.len() - 2, epi)
}

/// `+epilogue` when an epilogue is fused, for kernel names.
pub(crate) fn epi_suffix(epi: &Option<Expr>) -> &'static str {
    if epi.is_some() {
        "+epilogue"
    } else {
        ""
    }
}
