//! Kernels on storage formats (bf16, ggml's block-quantized types) on the CPU: dequantization, get_rows from a
//! quantized table, and `x @ t(w)` with a quantized weight — one pass over w's rows, each decoded once into a
//! short f32 buffer (mat-vec), or panels of rows decoded and multiplied by the `gemm` crate (prefill).

use super::buffer::Memory;
use super::elementwise::{eval, load, Leaf, CHUNK};
use crate::blocks::decode;
use crate::compile::ir::Expr;
use crate::graph::NodeId;
use crate::{DType, Error, Result};

/// `sum(a[i] * b[i])` with independent accumulators, so that it vectorizes.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = a.len() / 16 * 16;
    for (ca, cb) in a[..chunks].chunks_exact(16).zip(b[..chunks].chunks_exact(16)) {
        for j in 0..16 {
            acc[j] = ca[j].mul_add(cb[j], acc[j]);
        }
    }
    let tail: f32 = a[chunks..].iter().zip(&b[chunks..]).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// A row-major weight `[rows, k]` in a storage format: its storage, dtype and first row.
#[derive(Clone, Debug)]
pub(crate) struct Weight {
    pub storage: NodeId,
    pub dtype: DType,
    /// The row of the storage the weight's row 0 is.
    pub row0: usize,
    /// Values per row.
    pub k: usize,
}

impl Weight {
    /// Decodes row `r` into `out` (`k` values).
    pub(crate) fn row(&self, mem: &Memory, r: usize, out: &mut [f32]) {
        let blocks = self.k / self.dtype.block_size();
        let first = (self.row0 + r) * blocks;
        let v = mem.view(self.storage, self.dtype);
        decode(self.dtype, v.block_bytes(first..first + blocks), out);
    }
}

/// `out[r, :] = decode(w[r, :])` for every row.
#[derive(Clone, Debug)]
pub(crate) struct DequantizeKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    pub w: Weight,
    pub rows: usize,
}

impl DequantizeKernel {
    pub(crate) fn run(&self, mem: &Memory) {
        let out = mem.view(self.out, self.out_dtype);
        let mut row = vec![0f32; self.w.k];
        for r in 0..self.rows {
            self.w.row(mem, r, &mut row);
            row.iter().enumerate().for_each(|(j, &v)| out.set(r * self.w.k + j, v));
        }
    }
}

/// `out[i, :] = decode(table[idx[i], :])`.
#[derive(Clone, Debug)]
pub(crate) struct GetRowsQKernel {
    pub out: NodeId,
    pub table: Weight,
    pub rows: usize,
    pub idx: Leaf,
}

impl GetRowsQKernel {
    /// # Errors
    /// [`Error::BadInput`] naming the index, its position and the row count when an index is out of range.
    pub(crate) fn run(&self, mem: &Memory) -> Result<()> {
        let out = mem.view(self.out, DType::F32);
        let ix = mem.view(self.idx.storage, self.idx.dtype);
        let mut row = vec![0f32; self.table.k];
        for i in 0..self.idx.layout.numel() {
            let r = ix.get_i32(self.idx.layout.index_of(i));
            if r < 0 || r as usize >= self.rows {
                let reason =
                    format!("index {r} at position {i} is outside 0..{} of the {} table", self.rows, self.table.dtype);
                return Err(Error::BadInput { name: "get_rows".into(), reason });
            }
            self.table.row(mem, r as usize, &mut row);
            row.iter().enumerate().for_each(|(j, &v)| out.set(i * self.table.k + j, v));
        }
        Ok(())
    }
}

/// `out = epilogue(a @ t(w))` with `a [.., M, K]` float and `w [N, K]` in a storage format.
#[derive(Clone, Debug)]
pub(crate) struct QMatmulKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    /// `[.., M, K]` through its own layout.
    pub a: Leaf,
    pub w: Weight,
    pub n: usize,
    /// The epilogue over `Expr::Acc` and its operands (broadcast to the output's shape).
    pub epilogue: Option<(Expr, Vec<Leaf>)>,
}

/// Rows of w decoded at a time for a prefill panel.
const PANEL: usize = 64;

impl QMatmulKernel {
    pub(crate) fn run(&self, mem: &Memory) {
        let (k, n) = (self.w.k, self.n);
        let m = self.a.layout.numel() / k;
        let av = mem.view(self.a.storage, self.a.dtype);
        let mut a = vec![0f32; m * k];
        let st = self.a.layout.strides[self.a.layout.rank() - 1];
        for r in 0..m {
            av.row_f32(self.a.layout.index_of(r * k), st, &mut a[r * k..(r + 1) * k]);
        }
        let mut c = vec![0f32; m * n];
        if m <= 4 {
            let mut row = vec![0f32; k];
            for j in 0..n {
                self.w.row(mem, j, &mut row);
                for r in 0..m {
                    c[r * n + j] = dot(&a[r * k..(r + 1) * k], &row);
                }
            }
        } else {
            let mut panel = vec![0f32; PANEL * k];
            for j0 in (0..n).step_by(PANEL) {
                let rows = PANEL.min(n - j0);
                for j in 0..rows {
                    self.w.row(mem, j0 + j, &mut panel[j * k..(j + 1) * k]);
                }
                // c[:, j0..j0+rows] = a @ panelᵀ
                // SAFETY: a is [m, k], the panel [rows, k] (read transposed), c's block [m, rows] with row stride n:
                // every index gemm forms lies inside these buffers.
                unsafe {
                    gemm::gemm(
                        m,
                        rows,
                        k,
                        c.as_mut_ptr().add(j0),
                        1,
                        n as isize,
                        false,
                        a.as_ptr(),
                        1,
                        k as isize,
                        panel.as_ptr(),
                        k as isize,
                        1,
                        0.0f32,
                        1.0f32,
                        false,
                        false,
                        false,
                        super::matmul::parallelism(m, rows, k),
                    );
                }
            }
        }
        self.store(mem, &c);
    }

    fn store(&self, mem: &Memory, c: &[f32]) {
        let out = mem.view(self.out, self.out_dtype);
        let Some((expr, leaves)) = &self.epilogue else {
            return c.iter().enumerate().for_each(|(i, &v)| out.set(i, v));
        };
        let mut pos = vec![0usize; CHUNK];
        let mut vals = vec![vec![0f32; CHUNK]; leaves.len()];
        let mut res = vec![0f32; CHUNK];
        for i in (0..c.len()).step_by(CHUNK) {
            let len = CHUNK.min(c.len() - i);
            for (leaf, v) in leaves.iter().zip(vals.iter_mut()) {
                load(mem, leaf, i, &mut pos[..len], &mut v[..len]);
            }
            eval(expr, &vals, &c[i..i + len], &mut res[..len]);
            res[..len].iter().enumerate().for_each(|(j, &v)| out.set(i + j, v));
        }
    }
}
