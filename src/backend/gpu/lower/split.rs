//! Tensors larger than one storage binding (compile pass 6 for the GPU): a dispatch whose operands exceed the
//! adapter's `max_storage_buffer_binding_size` is split into several, each binding a window of the large tensors.
//!
//! Windows start at an offset aligned to `min_storage_buffer_offset_alignment` (rounded down), and the rest of
//! the way to the first element travels as an element offset in the parameters (wrapping u32 arithmetic in the
//! shader makes a negative difference work). Supported:
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

use crate::backend::gpu::kernel::{Dispatch, MatmulKernel, SplitRule, SCRATCH, TABLES};
use crate::backend::gpu::kernels::elementwise::ElementwiseParams;
use crate::backend::gpu::kernels::get_rows::GetRowsParams;
use crate::backend::gpu::kernels::matmul::MatmulParams;
use crate::backend::gpu::kernels::rows::RowsParams;
use crate::backend::gpu::params::{get_packed, set_packed, Params, ParamsBlock};
use crate::backend::gpu::target::{grid, GpuTarget};
use crate::backend::gpu::wgsl::GRID_WORDS;
use crate::compile::ir::Program;
use crate::compile::memory::MemoryPlan;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::contiguous_strides;

fn round4(n: u64) -> u64 {
    n.div_ceil(4) * 4
}

/// The window holding elements [first, end) of a tensor of `dtype`: (aligned start byte, byte size), and the
/// element offset of the window's start. For block types `first` and `end` are whole blocks (rows are), and the
/// window starts at a block that is also aligned, so its first element is a whole number of blocks in.
fn window(first: u64, end: u64, dtype: DType, align: u64) -> ((u64, u64), u64) {
    let (bs, bb) = (dtype.block_size() as u64, dtype.block_bytes() as u64);
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let unit = align / gcd(align, bb); // blocks per aligned start: lcm(align, bb) / bb
    let start_block = first / bs / unit * unit;
    let start = start_block * bb;
    ((start, round4(end / bs * bb) - start), start_block * bs)
}

/// Bytes a window's start may move back to land on an aligned whole block: lcm(align, block bytes) for block types.
fn lcm_slack(dtype: DType, align: u64) -> u64 {
    let bb = dtype.block_bytes() as u64;
    if dtype.block_size() == 1 {
        return 0;
    }
    let mut g = (align, bb);
    while g.1 != 0 {
        g = (g.1, g.0 % g.1);
    }
    align / g.0 * bb
}

/// What every family's splitter needs.
struct Splitter<'a> {
    d: &'a Dispatch,
    program: &'a Program,
    /// Bytes of each binding's block, rounded to 4.
    bytes: Vec<u64>,
    max_binding: u64,
    align: u64,
    max_groups: u32,
    /// Room for the data of one chunk: the binding limit less the alignment slack at the window's start.
    room: u64,
}

impl Splitter<'_> {
    fn dtype(&self, i: usize) -> DType {
        self.program.nodes[self.d.bindings[i]].dtype
    }

    /// Bytes of `n` elements of binding `i` (whole blocks for block types).
    fn bytes_of(&self, i: usize, n: u64) -> u64 {
        self.dtype(i).bytes_of(n as usize).unwrap_or(usize::MAX) as u64
    }

    fn large(&self, i: usize) -> bool {
        self.bytes[i] > self.max_binding
    }

    /// The dispatch's kernel as a matmul kernel (the split rules for matmuls are only a matmul kernel's).
    fn matmul(&self) -> Result<&dyn MatmulKernel> {
        self.d.key.kind.as_matmul().ok_or_else(|| Error::Unsupported {
            op: self.d.key.kind.name(),
            backend: "GPU".into(),
            reason: "a matmul split rule on a kernel that is no matmul".into(),
        })
    }

    fn describe(&self, i: usize) -> String {
        let n = &self.program.nodes[self.d.bindings[i]];
        let out = &self.program.nodes[self.d.bindings[0]];
        format!(
            "{} ({} {:?}) of {} {:?}",
            self.d.key.kind.name(),
            n.dtype,
            n.layout.shape,
            out.step.name(),
            out.layout.shape
        )
    }

    fn too_big(&self, what: String, size: u64) -> Error {
        Error::LimitExceeded {
            what,
            size,
            unit: "bytes",
            limit_name: "max_storage_buffer_binding_size",
            limit: self.max_binding,
        }
    }

    fn chunk(&self, params: Params, windows: Vec<Option<(u64, u64)>>, workgroups: [u32; 3]) -> Dispatch {
        Dispatch {
            key: self.d.key.clone(),
            params,
            bindings: self.d.bindings.clone(),
            windows,
            workgroups,
            dynamic: None, // split kernels (elementwise, matmul, rows) have static grids
            scratch: self.d.scratch,
        }
    }

    fn elementwise(&self, p0: &ElementwiseParams, per_invocation: u64) -> Result<Vec<Dispatch>> {
        let node = &self.program.nodes[self.d.bindings[0]];
        let numel = node.layout.numel() as u64;
        let (pshape, _) = node.layout.padded4();
        let mut same_index = contiguous_strides(&pshape);
        for (s, &n) in same_index.iter_mut().zip(&pshape) {
            if n == 1 {
                *s = 0;
            }
        }
        let same_index: Vec<u32> = same_index.iter().map(|&s| s as u32).collect();
        // whole invocations a chunk (the vec4 variant's chunks start at a multiple of 4, as windows do)
        let per_chunk = self.room / 4 / per_invocation * per_invocation;
        if per_chunk == 0 {
            return Err(self.too_big(self.describe(0), self.bytes[0]));
        }
        for k in 1..self.bytes.len() {
            if self.large(k) && p0.in_strides[k - 1].as_slice() != same_index.as_slice() {
                let what = format!("{} (read through a broadcast or strided view)", self.describe(k));
                return Err(self.too_big(what, self.bytes[k]));
            }
        }
        let mut chunks = Vec::new();
        let mut s = 0u64;
        while s < numel {
            let e = (s + per_chunk).min(numel);
            let mut p = *p0;
            let mut windows = vec![None; self.bytes.len()];
            p.count = (e - s) as u32;
            p.first = s as u32;
            p.out_offset = s as u32; // output offset when the output is bound whole
            if self.large(0) {
                let (w, base) = window(s, e, self.dtype(0), self.align);
                windows[0] = Some(w);
                p.out_offset = (s - base) as u32;
            }
            for (k, win) in windows.iter_mut().enumerate().skip(1) {
                if !self.large(k) {
                    continue;
                }
                let off = get_packed(&p.in_offsets, k - 1) as u64;
                let (w, base) = window(off + s, off + e, self.dtype(k), self.align);
                *win = Some(w);
                set_packed(&mut p.in_offsets, k - 1, (off as u32).wrapping_sub(base as u32) as usize);
            }
            let workgroups = grid("elementwise", (e - s).div_ceil(256 * per_invocation), self.max_groups)?;
            chunks.push(self.chunk(Params::new(p), windows, workgroups));
            s = e;
        }
        Ok(chunks)
    }

    fn rows(&self, p0: &RowsParams, reduces: bool) -> Result<Vec<Dispatch>> {
        let (n, rows) = (p0.n as u64, p0.rows as u64);
        // the mask and the epilogue's operands are bound whole
        if let Some(i) = (2..self.bytes.len()).find(|&i| self.large(i)) {
            return Err(self.too_big(self.describe(i), self.bytes[i]));
        }
        let shape: Vec<usize> = p0.x_shape.iter().map(|&v| v as usize).collect();
        let strides: Vec<usize> = p0.x_strides.iter().map(|&v| v as usize).collect();
        let contiguous = crate::shape::Layout { shape, strides, offset: 0 }.is_contiguous();
        if self.large(1) && !contiguous {
            return Err(self.too_big(format!("{} (a strided view)", self.describe(1)), self.bytes[1]));
        }
        let per_chunk = self.room / (n * 4);
        if per_chunk == 0 {
            let what = format!("one row of {n} elements of {}", self.describe(1));
            return Err(self.too_big(what, self.bytes_of(1, n)));
        }
        let out_per_row = if reduces { 1 } else { n };
        let mut chunks = Vec::new();
        let mut r0 = 0u64;
        while r0 < rows {
            let r1 = (r0 + per_chunk).min(rows);
            let mut p = *p0;
            let mut windows = vec![None; self.bytes.len()];
            p.rows = (r1 - r0) as u32;
            p.first_row = r0 as u32;
            p.out_offset = (r0 * out_per_row) as u32; // output offset when the output is bound whole
            if self.large(0) {
                let (w, base) = window(r0 * out_per_row, r1 * out_per_row, self.dtype(0), self.align);
                windows[0] = Some(w);
                p.out_offset = (r0 * out_per_row - base) as u32;
            }
            if self.large(1) {
                let off = p.x_offset as u64;
                let (w, base) = window(off + r0 * n, off + r1 * n, self.dtype(1), self.align);
                windows[1] = Some(w);
                p.x_offset = (off as u32).wrapping_sub(base as u32);
            }
            let workgroups = grid("rows", r1 - r0, self.max_groups)?;
            chunks.push(self.chunk(Params::new(p), windows, workgroups));
            r0 = r1;
        }
        Ok(chunks)
    }

    fn get_rows(&self, p0: &GetRowsParams) -> Result<Vec<Dispatch>> {
        if self.large(0) || self.large(2) {
            let i = if self.large(0) { 0 } else { 2 };
            return Err(self.too_big(self.describe(i), self.bytes[i]));
        }
        let (v, dim) = (p0.rows as u64, p0.dim as u64);
        if p0.row_stride as u64 != dim || p0.col_stride != 1 {
            return Err(self.too_big(format!("{} (a strided view)", self.describe(1)), self.bytes[1]));
        }
        // rows per window, less one aligned unit of slack at the start for block types
        let per_chunk = self.room.saturating_sub(lcm_slack(self.dtype(1), self.align)) / self.bytes_of(1, dim).max(1);
        if per_chunk == 0 {
            let what = format!("one row of {dim} elements of {}", self.describe(1));
            return Err(self.too_big(what, self.bytes_of(1, dim)));
        }
        let mut chunks = Vec::new();
        let mut lo = 0u64;
        while lo < v {
            let hi = (lo + per_chunk).min(v);
            let mut p = *p0;
            let off = p.table_offset as u64;
            let (w, base) = window(off + lo * dim, off + hi * dim, self.dtype(1), self.align);
            let mut windows = vec![None; self.bytes.len()];
            windows[1] = Some(w);
            p.table_offset = (off as u32).wrapping_sub(base as u32);
            p.window_lo = lo as u32;
            p.window_hi = hi as u32;
            chunks.push(self.chunk(Params::new(p), windows, self.d.workgroups));
            lo = hi;
        }
        Ok(chunks)
    }

    /// A matmul or mat-vec whose B (binding 2) is the transposed view of a row-major weight W [N, K]: chunks of
    /// output columns, each binding a window of W's rows.
    fn matmul_columns(&self, p0: &MatmulParams) -> Result<Vec<Dispatch>> {
        if let Some(i) = (0..self.bytes.len()).find(|&i| i != 2 && self.large(i)) {
            return Err(self.too_big(self.describe(i), self.bytes[i]));
        }
        let (n, k) = (p0.n as u64, p0.k as u64);
        let (k_stride, n_stride) = (p0.b_strides[2] as u64, p0.b_strides[3] as u64);
        if self.d.workgroups[2] != 1 || k_stride != 1 || n_stride < k {
            let why = "(over the binding limit and not the transposed view of a row-major [N, K] weight)";
            return Err(self.too_big(format!("{} {why}", self.describe(2)), self.bytes[2]));
        }
        let row = self.bytes_of(2, n_stride);
        let per_chunk = self.room.saturating_sub(lcm_slack(self.dtype(2), self.align)) / row.max(1) / 64 * 64;
        if per_chunk == 0 {
            let what = format!("64 columns of {}", self.describe(2));
            return Err(self.too_big(what, 64 * row));
        }
        let mut chunks = Vec::new();
        let mut n0 = 0u64;
        while n0 < n {
            let n1 = (n0 + per_chunk).min(n);
            let mut p = *p0;
            let off = p.b_offset as u64;
            let (w, base) = window(off + n0 * n_stride, off + (n1 - 1) * n_stride + k, self.dtype(2), self.align);
            let mut windows = vec![None; self.bytes.len()];
            windows[2] = Some(w);
            p.n = (n1 - n0) as u32;
            p.b_offset = ((off + n0 * n_stride) as u32).wrapping_sub(base as u32);
            p.n0 = n0 as u32;
            let cols = n1 - n0;
            let workgroups = self.matmul()?.column_grid(cols, self.d.workgroups, self.max_groups)?;
            chunks.push(self.chunk(Params::new(p), windows, workgroups));
            n0 = n1;
        }
        Ok(chunks)
    }

    /// A matmul whose A (row-major, k contiguous) is larger than one binding: chunks of output rows, each binding
    /// a window of A's rows and, when the output is large too, of the output's rows; B and the epilogue operands
    /// are bound whole.
    fn matmul_rows(&self, p0: &MatmulParams) -> Result<Vec<Dispatch>> {
        if let Some(i) = (2..self.bytes.len()).find(|&i| self.large(i)) {
            return Err(self.too_big(format!("{} (with a large A too)", self.describe(i)), self.bytes[i]));
        }
        let (m, k, ldc) = (p0.m as u64, p0.k as u64, p0.ldc as u64);
        let (row_stride, k_stride) = (p0.a_strides[2] as u64, p0.a_strides[3] as u64);
        if self.d.workgroups[2] != 1 || k_stride != 1 || row_stride < k {
            return Err(self.too_big(format!("{} (not a row-major A of one batch)", self.describe(1)), self.bytes[1]));
        }
        let (a_elem, out_elem) = (self.bytes_of(1, 1), self.bytes_of(0, 1));
        let tile_rows = self.matmul()?.tile().0;
        let out_row = ldc * out_elem;
        let per_chunk = self.room / (row_stride * a_elem).max(out_row) / tile_rows * tile_rows;
        if per_chunk == 0 {
            let what = format!("{} rows of {}", tile_rows, self.describe(1));
            return Err(self.too_big(what, tile_rows * row_stride * a_elem));
        }
        let mut chunks = Vec::new();
        let mut m0 = 0u64;
        while m0 < m {
            let m1 = (m0 + per_chunk).min(m);
            let mut p = *p0;
            let mut windows = vec![None; self.bytes.len()];
            let off = p.a_offset as u64;
            let (w, base) = window(off + m0 * row_stride, off + (m1 - 1) * row_stride + k, self.dtype(1), self.align);
            windows[1] = Some(w);
            p.m = (m1 - m0) as u32;
            p.a_offset = ((off + m0 * row_stride) as u32).wrapping_sub(base as u32);
            p.m0 = m0 as u32;
            if self.large(0) {
                let (w, base) = window(m0 * ldc, m1 * ldc, self.dtype(0), self.align);
                windows[0] = Some(w);
                p.out_window = base as u32;
            }
            let workgroups = [self.d.workgroups[0], (m1 - m0).div_ceil(tile_rows) as u32, 1];
            chunks.push(self.chunk(Params::new(p), windows, workgroups));
            m0 = m1;
        }
        Ok(chunks)
    }
}

/// Splits `d` (lowered from a step of `program`) so that every binding fits one storage binding.
pub(super) fn split(d: Dispatch, program: &Program, mem: &MemoryPlan, t: &GpuTarget) -> Result<Vec<Dispatch>> {
    let bytes: Vec<u64> = d
        .bindings
        .iter()
        .map(|n| match *n {
            SCRATCH => d.scratch,
            TABLES => 4 * GRID_WORDS,
            _ => round4(mem.blocks[n].size),
        })
        .collect();
    if bytes.iter().all(|&b| b <= t.max_binding) {
        return Ok(vec![d]);
    }
    let room = t.max_binding.saturating_sub(2 * t.align);
    let s =
        Splitter { d: &d, program, bytes, max_binding: t.max_binding, align: t.align, max_groups: t.max_groups, room };
    let split = match d.key.kind.split() {
        SplitRule::Elements { per_invocation } => params(&d).map(|p| s.elementwise(&p, per_invocation)),
        SplitRule::Rows { reduces } => params(&d).map(|p| s.rows(&p, reduces)),
        SplitRule::TableRows => params(&d).map(|p| s.get_rows(&p)),
        SplitRule::Columns => params(&d).map(|p| s.matmul_columns(&p)),
        SplitRule::RowsOrColumns if s.large(1) => params(&d).map(|p| s.matmul_rows(&p)),
        SplitRule::RowsOrColumns => params(&d).map(|p| s.matmul_columns(&p)),
        SplitRule::None => None,
    };
    split.unwrap_or_else(|| {
        let i = (0..s.bytes.len()).find(|&i| s.large(i)).expect("some binding is too large");
        Err(s.too_big(s.describe(i), s.bytes[i]))
    })
}

/// The dispatch's parameters as the struct its split rule reads (None, a bug, when they are another family's).
fn params<P: ParamsBlock>(d: &Dispatch) -> Option<P> {
    d.params.get::<P>()
}

#[cfg(test)]
mod tests {
    use super::window;
    use crate::dtype::DType;

    #[test]
    fn windows_start_aligned_and_cover_the_range() {
        for align in [4u64, 32, 256] {
            for (first, end, dtype) in [
                (0u64, 10u64, DType::F32),
                (37, 1000, DType::F32),
                (33_554_431, 37_500_000, DType::F32),
                (7, 9, DType::F16),
            ] {
                let elem = dtype.size_bytes() as u64;
                let ((start, size), base) = window(first, end, dtype, align);
                assert_eq!(start % align, 0);
                assert!(start <= first * elem && start + size >= end * elem && size % 4 == 0);
                assert_eq!(base * elem, start);
            }
            // Q8_0 (34-byte blocks): the window starts at an aligned whole block
            let ((start, size), base) = window(32 * 1000, 32 * 2000, DType::Q8_0, align);
            assert_eq!((start % align, start % 34, base % 32), (0, 0, 0));
            assert!(start <= 1000 * 34 && start + size >= 2000 * 34);
            assert_eq!(base / 32 * 34, start);
        }
    }
}
