//! Tensors larger than one storage binding (stage 4b): a dispatch whose operands exceed the adapter's
//! `max_storage_buffer_binding_size` is split into chunks, each binding a window of the large tensors.
//!
//! Windows start at an offset aligned to `min_storage_buffer_offset_alignment` (rounded down), and the rest of
//! the way to the first element travels as an element offset in `Params` (wrapping u32 arithmetic in the shader
//! makes a negative difference work). Supported:
//! - elementwise kernels (fused or not): chunks of output elements; a large operand must be read at the output's
//!   own index (same shape, contiguous), smaller ones are bound whole;
//! - row ops (softmax, norms, reductions): chunks of whole rows of a contiguous input;
//! - get_rows: windows of table rows, each dispatch writing the outputs whose index falls in its window;
//! - matmul and mat-vec whose B is a transposed view of a row-major weight W [N, K] (`x @ t(w)`, the usual
//!   layout of linear layers and vocabulary projections): chunks of output columns, each binding a window of W's
//!   rows; and a matmul whose A is row-major (k contiguous): chunks of output rows over windows of A's rows and,
//!   when it is large, of the output.
//!
//! Anything else over the limit is an [`Error::LimitExceeded`] naming the limit and the size.

use super::kernels::{grid, Dispatch, KernelKind};
use crate::compile::memory::MemoryPlan;
use crate::compile::Program;
use crate::shape::contiguous_strides;
use crate::{Error, Result};

/// One dispatch of a split step: its uniform block, for each binding the window bound (byte offset within the
/// tensor's block, byte size; `None` = the whole block), and its grid.
#[derive(Clone, Debug)]
pub(crate) struct Chunk {
    pub params: [u32; 64],
    pub windows: Vec<Option<(u64, u64)>>,
    pub workgroups: [u32; 3],
}

fn round4(n: u64) -> u64 {
    n.div_ceil(4) * 4
}

/// The window holding elements [first, end) of a tensor of `elem` bytes each: (aligned start byte, byte size),
/// and the element offset of the window's start.
fn window(first: u64, end: u64, elem: u64, align: u64) -> ((u64, u64), u64) {
    let start = first * elem / align * align;
    ((start, round4(end * elem) - start), start / elem)
}

/// Splits `d` (lowered from a step of `program`) so that every binding fits `max_binding` bytes.
pub(crate) fn split(
    d: &Dispatch,
    program: &Program,
    mem: &MemoryPlan,
    max_binding: u64,
    align: u64,
    max_groups: u32,
) -> Result<Vec<Chunk>> {
    let bytes: Vec<u64> = d.bindings.iter().map(|n| round4(mem.blocks[n].size)).collect();
    let whole = vec![None; d.bindings.len()];
    if bytes.iter().all(|&b| b <= max_binding) {
        return Ok(vec![Chunk { params: d.params, windows: whole, workgroups: d.workgroups }]);
    }
    let node = &program.nodes[d.bindings[0]];
    let too_big = |what: String, size: u64| Error::LimitExceeded {
        what,
        size,
        limit_name: "max_storage_buffer_binding_size",
        limit: max_binding,
    };
    let elem = |i: usize| program.nodes[d.bindings[i]].dtype.size_bytes() as u64;
    let describe = |i: usize| {
        let n = &program.nodes[d.bindings[i]];
        format!(
            "{} ({} {:?}) of {} {:?}",
            d.key.kind.name(),
            n.dtype,
            n.layout.shape,
            node.op.name(),
            node.layout.shape
        )
    };
    // room for the data of one chunk: the binding limit less the alignment slack at the window's start
    let room = max_binding.saturating_sub(2 * align);
    match &d.key.kind {
        KernelKind::Elementwise { .. } => {
            let numel = node.layout.numel() as u64;
            let (pshape, _) = node.layout.padded4();
            let mut same_index = contiguous_strides(&pshape);
            for (s, &n) in same_index.iter_mut().zip(&pshape) {
                if n == 1 {
                    *s = 0;
                }
            }
            let per_chunk = room / 4;
            if per_chunk == 0 {
                return Err(too_big(describe(0), bytes[0]));
            }
            for (k, &b) in bytes.iter().enumerate().skip(1) {
                let strides: Vec<usize> = (0..4).map(|j| d.params[(2 + 2 * (k - 1)) * 4 + j] as usize).collect();
                if b > max_binding && strides != same_index {
                    return Err(too_big(format!("{} (read through a broadcast or strided view)", describe(k)), b));
                }
            }
            let mut chunks = Vec::new();
            let mut s = 0u64;
            while s < numel {
                let e = (s + per_chunk).min(numel);
                let mut p = d.params;
                let mut windows = whole.clone();
                p[0] = (e - s) as u32;
                p[1] = s as u32;
                p[2] = s as u32; // output offset when the output is bound whole
                if bytes[0] > max_binding {
                    let (w, base) = window(s, e, elem(0), align);
                    windows[0] = Some(w);
                    p[2] = (s - base) as u32;
                }
                for k in 1..d.bindings.len() {
                    if bytes[k] <= max_binding {
                        continue;
                    }
                    let slot = (3 + 2 * (k - 1)) * 4;
                    let off = p[slot] as u64;
                    let (w, base) = window(off + s, off + e, elem(k), align);
                    windows[k] = Some(w);
                    p[slot] = (off as u32).wrapping_sub(base as u32);
                }
                chunks.push(Chunk {
                    params: p,
                    windows,
                    workgroups: grid("elementwise", (e - s).div_ceil(256), max_groups)?,
                });
                s = e;
            }
            Ok(chunks)
        }
        KernelKind::Rows { op, .. } => {
            let n = d.params[0] as u64;
            let rows = d.params[1] as u64;
            if d.bindings.len() > 2 && bytes[2] > max_binding {
                return Err(too_big(describe(2), bytes[2]));
            }
            // the view as the kernel reads it: shape v[1], strides v[2]
            let shape: Vec<usize> = d.params[4..8].iter().map(|&v| v as usize).collect();
            let strides: Vec<usize> = d.params[8..12].iter().map(|&v| v as usize).collect();
            let contiguous = crate::shape::Layout { shape, strides, offset: 0 }.is_contiguous();
            if bytes[1] > max_binding && !contiguous {
                return Err(too_big(format!("{} (a strided view)", describe(1)), bytes[1]));
            }
            let per_chunk = room / (n * 4);
            if per_chunk == 0 {
                return Err(too_big(format!("one row of {n} elements of {}", describe(1)), n * elem(1)));
            }
            let out_per_row = if *op >= 3 { 1 } else { n };
            let mut chunks = Vec::new();
            let mut r0 = 0u64;
            while r0 < rows {
                let r1 = (r0 + per_chunk).min(rows);
                let mut p = d.params;
                let mut windows = whole.clone();
                p[1] = (r1 - r0) as u32;
                p[18] = r0 as u32;
                p[19] = (r0 * out_per_row) as u32; // output offset when the output is bound whole
                if bytes[0] > max_binding {
                    let (w, base) = window(r0 * out_per_row, r1 * out_per_row, elem(0), align);
                    windows[0] = Some(w);
                    p[19] = (r0 * out_per_row - base) as u32;
                }
                if bytes[1] > max_binding {
                    let off = p[2] as u64;
                    let (w, base) = window(off + r0 * n, off + r1 * n, elem(1), align);
                    windows[1] = Some(w);
                    p[2] = (off as u32).wrapping_sub(base as u32);
                }
                chunks.push(Chunk { params: p, windows, workgroups: grid("rows", r1 - r0, max_groups)? });
                r0 = r1;
            }
            Ok(chunks)
        }
        KernelKind::GetRows => {
            if bytes[0] > max_binding || bytes[2] > max_binding {
                let i = if bytes[0] > max_binding { 0 } else { 2 };
                return Err(too_big(describe(i), bytes[i]));
            }
            // the table view as the kernel reads it: V = v[0].z rows of D = v[0].y, strides v[3].y and v[3].z
            let (v, dim) = (d.params[2] as u64, d.params[1] as u64);
            if d.params[13] as u64 != dim || d.params[14] != 1 {
                return Err(too_big(format!("{} (a strided view)", describe(1)), bytes[1]));
            }
            let per_chunk = room / (dim * 4);
            if per_chunk == 0 {
                return Err(too_big(format!("one row of {dim} elements of {}", describe(1)), dim * elem(1)));
            }
            let mut chunks = Vec::new();
            let mut lo = 0u64;
            while lo < v {
                let hi = (lo + per_chunk).min(v);
                let mut p = d.params;
                let off = p[3] as u64;
                let (w, base) = window(off + lo * dim, off + hi * dim, elem(1), align);
                let mut windows = whole.clone();
                windows[1] = Some(w);
                p[3] = (off as u32).wrapping_sub(base as u32);
                p[16] = lo as u32;
                p[17] = hi as u32;
                chunks.push(Chunk { params: p, windows, workgroups: d.workgroups });
                lo = hi;
            }
            Ok(chunks)
        }
        KernelKind::MatMul { .. }
        | KernelKind::MatMulTiled { .. }
        | KernelKind::MatMulCoop { .. }
        | KernelKind::MatVec { .. } => {
            if bytes[1] > max_binding && !matches!(d.key.kind, KernelKind::MatVec { .. }) {
                return split_matmul_rows(d, &bytes, max_binding, room, align, elem(1), elem(0), &too_big, &describe);
            }
            // otherwise only B may be large, read as columns of contiguous K (x @ W^T with W [N, K]), one batch
            if let Some(i) = (0..bytes.len()).find(|&i| i != 2 && bytes[i] > max_binding) {
                return Err(too_big(describe(i), bytes[i]));
            }
            let (n, k) = (d.params[1] as u64, d.params[2] as u64);
            let (k_stride, n_stride) = (d.params[10] as u64, d.params[11] as u64);
            if d.workgroups[2] != 1 || k_stride != 1 || n_stride < k {
                let why = "(over the binding limit and not the transposed view of a row-major [N, K] weight)";
                return Err(too_big(format!("{} {why}", describe(2)), bytes[2]));
            }
            let per_chunk = room / (n_stride * elem(2)) / 64 * 64;
            if per_chunk == 0 {
                return Err(too_big(format!("64 columns of {}", describe(2)), 64 * n_stride * elem(2)));
            }
            let mut chunks = Vec::new();
            let mut n0 = 0u64;
            while n0 < n {
                let n1 = (n0 + per_chunk).min(n);
                let mut p = d.params;
                let off = p[13] as u64;
                let (w, base) = window(off + n0 * n_stride, off + (n1 - 1) * n_stride + k, elem(2), align);
                let mut windows = whole.clone();
                windows[2] = Some(w);
                p[1] = (n1 - n0) as u32;
                p[13] = ((off + n0 * n_stride) as u32).wrapping_sub(base as u32);
                p[14] = n0 as u32;
                let cols = n1 - n0;
                let workgroups = match (&d.key.kind, d.key.kind.matmul_tile()) {
                    (KernelKind::MatVec { b_ncontig, .. }, _) => {
                        grid("matmul (mat-vec)", cols.div_ceil(if *b_ncontig { 64 } else { 8 }), max_groups)?
                    }
                    (_, tile) => [cols.div_ceil(tile.expect("a matmul kernel").1) as u32, d.workgroups[1], 1],
                };
                chunks.push(Chunk { params: p, windows, workgroups });
                n0 = n1;
            }
            Ok(chunks)
        }
        _ => {
            let i = (0..bytes.len()).find(|&i| bytes[i] > max_binding).expect("some binding is too large");
            Err(too_big(describe(i), bytes[i]))
        }
    }
}

/// A matmul whose A (row-major, k contiguous) is larger than one binding: chunks of output rows, each binding a
/// window of A's rows and, when the output is large too, of the output's rows; B and the epilogue operands are
/// bound whole.
#[allow(clippy::too_many_arguments)]
fn split_matmul_rows(
    d: &Dispatch,
    bytes: &[u64],
    max_binding: u64,
    room: u64,
    align: u64,
    a_elem: u64,
    out_elem: u64,
    too_big: &dyn Fn(String, u64) -> Error,
    describe: &dyn Fn(usize) -> String,
) -> Result<Vec<Chunk>> {
    if let Some(i) = (2..bytes.len()).find(|&i| bytes[i] > max_binding) {
        return Err(too_big(format!("{} (with a large A too)", describe(i)), bytes[i]));
    }
    let (m, k, ldc) = (d.params[0] as u64, d.params[2] as u64, d.params[15] as u64);
    let (row_stride, k_stride) = (d.params[6] as u64, d.params[7] as u64);
    if d.workgroups[2] != 1 || k_stride != 1 || row_stride < k {
        return Err(too_big(format!("{} (not a row-major A of one batch)", describe(1)), bytes[1]));
    }
    let tile_rows = d.key.kind.matmul_tile().expect("a 2-D matmul kernel").0;
    let out_row = ldc * out_elem;
    let per_chunk = room / (row_stride * a_elem).max(out_row) / tile_rows * tile_rows;
    if per_chunk == 0 {
        return Err(too_big(format!("{} rows of {}", tile_rows, describe(1)), tile_rows * row_stride * a_elem));
    }
    let mut chunks = Vec::new();
    let mut m0 = 0u64;
    while m0 < m {
        let m1 = (m0 + per_chunk).min(m);
        let mut p = d.params;
        let mut windows = vec![None; bytes.len()];
        let off = p[12] as u64;
        let (w, base) = window(off + m0 * row_stride, off + (m1 - 1) * row_stride + k, a_elem, align);
        windows[1] = Some(w);
        p[0] = (m1 - m0) as u32;
        p[12] = ((off + m0 * row_stride) as u32).wrapping_sub(base as u32);
        p[60] = m0 as u32;
        if bytes[0] > max_binding {
            let (w, base) = window(m0 * ldc, m1 * ldc, out_elem, align);
            windows[0] = Some(w);
            p[61] = base as u32;
        }
        let workgroups = [d.workgroups[0], (m1 - m0).div_ceil(tile_rows) as u32, 1];
        chunks.push(Chunk { params: p, windows, workgroups });
        m0 = m1;
    }
    Ok(chunks)
}

#[cfg(test)]
mod tests {
    use super::window;

    #[test]
    fn windows_start_aligned_and_cover_the_range() {
        for align in [4u64, 32, 256] {
            for (first, end, elem) in [(0u64, 10u64, 4u64), (37, 1000, 4), (33_554_431, 37_500_000, 4), (7, 9, 2)] {
                let ((start, size), base) = window(first, end, elem, align);
                assert_eq!(start % align, 0);
                assert!(start <= first * elem && start + size >= end * elem && size % 4 == 0);
                assert_eq!(base * elem, start);
            }
        }
    }
}
