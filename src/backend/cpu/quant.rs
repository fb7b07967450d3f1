//! Kernels on storage formats (bf16, ggml's block-quantized types) on the CPU: dequantization, get_rows from a
//! quantized table, and `x @ t(w)` with a quantized weight, multithreaded over w's rows: for a few rows of x
//! (decode) one pass over w, each row dotted with x in integer arithmetic where the type has a kernel
//! (`qdot`: x rounded to 8-bit blocks, as llama.cpp does) or else decoded into a short f32 buffer; for many rows
//! (prefill) panels of 16 rows of w unpacked to bytes and multiplied in integer arithmetic where the CPU has
//! AVX-512 VNNI and the type a panel form (`qdot/panel.rs`), else panels of w decoded to f32 and multiplied by the
//! `gemm` crate. A resident weight of a type with a repacked form (`qdot/repack.rs`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
//! Q6_K)
//! on a CPU with AVX-512 VNNI takes neither path: it is repacked on the first compile that uses it, and one
//! kernel multiplies it with any number of rows, each row's result the same bits whatever that number.

use super::buffer::Memory;
use super::elementwise::epilogue;
use super::matmul::transpose_into;
use super::parallel::{for_chunks, for_ranges, rows_per_task};
use super::qdot::{self, Q8Row};
use super::target::{epilogue as epilogue_leaves, leaf, CpuFamily, CpuTarget, Leaf, VEC_ROWS};
use crate::compile::ir::{Expr, Program, Step};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{NodeId, Op};
use crate::ops::MatmulPrecision;
use crate::quant::decode;

use super::qdot::dot_f32 as dot;

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

/// The weight behind `t(w)` (layout `[K, N]`, strides `[1, K]`) and N.
fn weight_of_transposed(p: &Program, b: NodeId) -> (Weight, usize) {
    let l = &p.nodes[b].layout;
    let (k, n) = (l.shape[0], l.shape[1]);
    (Weight { storage: p.nodes[b].storage, dtype: p.nodes[b].dtype, row0: l.offset / k, k }, n)
}

/// The weight of a row-major `[.., K]` tensor (rows of a storage format) and its number of rows.
fn weight_of_rows(p: &Program, x: NodeId) -> (Weight, usize) {
    let l = &p.nodes[x].layout;
    let k = l.shape.last().copied().unwrap_or(1);
    (Weight { storage: p.nodes[x].storage, dtype: p.nodes[x].dtype, row0: l.offset / k, k }, l.numel() / k)
}

impl Weight {
    /// The block bytes of row `r`.
    pub(crate) fn bytes<'m>(&self, mem: &'m Memory, r: usize) -> &'m [u8] {
        let blocks = self.k / self.dtype.block_size();
        let first = (self.row0 + r) * blocks;
        mem.block_bytes(self.storage, self.dtype, first..first + blocks)
    }

    /// Decodes row `r` into `out` (`k` values); f16 rows by vector instructions.
    pub(crate) fn row(&self, mem: &Memory, r: usize, out: &mut [f32]) {
        let bytes = self.bytes(mem, r);
        if self.dtype == DType::F16 {
            if let Ok(h) = bytemuck::try_cast_slice::<u8, half::f16>(bytes) {
                return super::widen::widen_f16(h, out);
            }
        }
        if self.dtype == DType::BF16 {
            // a loop the compiler vectorizes
            let widen = |c: &[u8]| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16);
            return out.iter_mut().zip(bytes.chunks_exact(2)).for_each(|(o, c)| *o = widen(c));
        }
        decode(self.dtype, bytes, out);
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

impl CpuFamily for DequantizeKernel {
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::Dequantize { x } = p.nodes[id].step else { return None };
        let (w, rows) = weight_of_rows(p, x);
        Some(DequantizeKernel { out: id, out_dtype: p.nodes[id].dtype, w, rows })
    }

    fn run(&self, mem: &Memory) -> Result<()> {
        let out = mem.view(self.out, self.out_dtype);
        let mut row = vec![0f32; self.w.k];
        for r in 0..self.rows {
            self.w.row(mem, r, &mut row);
            row.iter().enumerate().for_each(|(j, &v)| out.set(r * self.w.k + j, v));
        }
        Ok(())
    }
}

/// `out[i, :] = decode(table[idx[i], :])`.
#[derive(Clone, Debug)]
pub(crate) struct GetRowsQKernel {
    pub out: NodeId,
    pub table: Weight,
    pub rows: usize,
    pub idx: Leaf,
    /// The table's resident when it is one: once a matmul has repacked it (a tied embedding, also the output
    /// head) its rows are decoded from the copy, so that the original's pages, given back, stay out of memory.
    #[cfg(target_arch = "x86_64")]
    pub resident: Option<TableResident>,
}

/// A `get_rows` table's resident (see [`GetRowsQKernel::resident`]).
#[cfg(target_arch = "x86_64")]
#[derive(Clone)]
pub(crate) struct TableResident(pub std::sync::Arc<crate::resident::External>);

#[cfg(target_arch = "x86_64")]
impl std::fmt::Debug for TableResident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TableResident({} {:?})", self.0.name, self.0.shape)
    }
}

impl CpuFamily for GetRowsQKernel {
    /// `get_rows` of a table in a storage format (read through its repacked copy once it has one, where it is a
    /// resident).
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::Op(Op::GetRows { table, idx }) = p.nodes[id].step else { return None };
        if !p.nodes[table].dtype.is_storage_format() {
            return None;
        }
        let (w, rows) = weight_of_rows(p, table);
        Some(GetRowsQKernel {
            out: id,
            table: w,
            rows,
            idx: leaf(p, idx, None),
            #[cfg(target_arch = "x86_64")]
            resident: p
                .external(p.nodes[table].storage)
                .filter(|e| !e.ext.writable)
                .map(|e| TableResident(e.ext.clone())),
        })
    }

    /// # Errors
    /// [`Error::BadInput`] naming the index, its position and the row count when an index is out of range.
    fn run(&self, mem: &Memory) -> Result<()> {
        let out = mem.view(self.out, DType::F32);
        let ix = mem.view(self.idx.storage, self.idx.dtype);
        let mut row = vec![0f32; self.table.k];
        #[cfg(target_arch = "x86_64")]
        let packed = self
            .resident
            .as_ref()
            .and_then(|e| e.0.memory.as_any().downcast_ref::<super::external::CpuBytes>())
            .and_then(|b| b.repacked.get())
            .filter(|rep| rep.k() == self.table.k && self.table.row0 + self.rows <= rep.rows());
        for i in 0..self.idx.layout.numel() {
            let r = ix.get_i32(self.idx.layout.index_of(i));
            if r < 0 || r as usize >= self.rows {
                let reason =
                    format!("index {r} at position {i} is outside 0..{} of the {} table", self.rows, self.table.dtype);
                return Err(Error::BadInput { name: "get_rows".into(), reason });
            }
            #[cfg(target_arch = "x86_64")]
            if let Some(rep) = packed {
                rep.row(self.table.row0 + r as usize, &mut row);
                out.write_f32(i * self.table.k, &row);
                continue;
            }
            self.table.row(mem, r as usize, &mut row);
            out.write_f32(i * self.table.k, &row);
        }
        Ok(())
    }
}

/// `out = epilogue(a @ t(w))` with `a [.., M, K]` float and `w [N, K]` in a storage format (or f16 for few rows
/// of a: a mat-vec that converts one row of w at a time instead of the whole weight).
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
    /// Keep the activations in f32 (no 8-bit rounding for the integer kernels).
    pub f32_activations: bool,
    /// The weight's resident repacked for the AVX-512 VNNI kernel, which then runs every row count.
    #[cfg(target_arch = "x86_64")]
    pub repacked: Option<RepackedW>,
    /// A dual matmul's second product (`Expr::Acc2` in the epilogue): the same activations times another weight
    /// of the same dtype and shape (its kernel's epilogue and output unused).
    pub second: Option<Box<QMatmulKernel>>,
}

/// Whether `a @ b` runs the quantized matmul kernel: b in a storage format, or f16 for few rows (a mat-vec over an
/// f16 weight read as `t(w)`, w `[N, K]` row-major: converted a row at a time, not as a whole as `gemm`'s path
/// would).
fn quantized_matmul(p: &Program, a: NodeId, b: NodeId) -> bool {
    let lb = &p.nodes[b].layout;
    let k = lb.shape[0];
    let half_mat_vec = p.nodes[b].dtype == DType::F16
        && lb.rank() == 2
        && lb.strides == [1, k]
        && lb.offset.is_multiple_of(k)
        && p.nodes[a].layout.numel() / k.max(1) <= VEC_ROWS;
    p.nodes[b].dtype.is_storage_format() || half_mat_vec
}

impl CpuFamily for QMatmulKernel {
    /// A matmul whose weight is in a storage format (or a half mat-vec), and a dual one over two such weights of
    /// one dtype (its activations rounded once and, repacked, both weights' panels in one parallel pass).
    fn lower(p: &Program, id: NodeId, t: &CpuTarget) -> Option<Self> {
        let Step::MatMul { a, b, b2, epilogue, prec, norm: None } = &p.nodes[id].step else { return None };
        let dual_ok = b2.is_none_or(|b2| quantized_matmul(p, *a, b2) && p.nodes[*b].dtype == p.nodes[b2].dtype);
        if !quantized_matmul(p, *a, *b) || !dual_ok {
            return None;
        }
        let f32_activations = t.f32_activations || *prec == MatmulPrecision::F32;
        let mut k = qmatmul_kernel(p, id, (*a, *b), epilogue.as_ref(), f32_activations);
        k.second = b2.map(|b2| Box::new(qmatmul_kernel(p, id, (*a, b2), None, f32_activations)));
        Some(k)
    }

    fn run(&self, mem: &Memory) -> Result<()> {
        self.compute(mem);
        Ok(())
    }
}

/// The kernel of a matmul whose weight `b` is stored in a block or half format (or a half mat-vec).
fn qmatmul_kernel(
    p: &Program,
    out: NodeId,
    (a, b): (NodeId, NodeId),
    epilogue: Option<&(Expr, Vec<NodeId>)>,
    f32_activations: bool,
) -> QMatmulKernel {
    let node = &p.nodes[out];
    let (w, n) = weight_of_transposed(p, b);
    #[cfg(target_arch = "x86_64")]
    let repacked = match p.external(p.nodes[b].storage) {
        Some(r) if !f32_activations => RepackedW::of(&r.ext, &p.nodes[b].layout),
        _ => None,
    };
    QMatmulKernel {
        out,
        out_dtype: node.dtype,
        a: leaf(p, a, None),
        w,
        n,
        epilogue: epilogue_leaves(p, epilogue, &node.layout.shape),
        f32_activations,
        #[cfg(target_arch = "x86_64")]
        repacked,
        second: None,
    }
}

/// Rows `row0..` of a block-quantized resident through its repacked copy (`qdot/repack.rs`).
#[cfg(target_arch = "x86_64")]
#[derive(Clone)]
pub(crate) struct RepackedW {
    ext: std::sync::Arc<crate::resident::External>,
    row0: usize,
}

#[cfg(target_arch = "x86_64")]
impl std::fmt::Debug for RepackedW {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RepackedW({} {:?}, row {})", self.ext.name, self.ext.shape, self.row0)
    }
}

#[cfg(target_arch = "x86_64")]
impl RepackedW {
    /// When `layout` (`[K, N]`) reads rows `row0..row0 + N` of a read-only resident `w [R, K]` of a type with a
    /// repacked form on this CPU as `t(w)`: that, with the resident repacked (once per resident, counted in its
    /// device's resident bytes).
    pub(crate) fn of(ext: &std::sync::Arc<crate::resident::External>, layout: &crate::shape::Layout) -> Option<Self> {
        use super::external::CpuBytes;
        use qdot::repack::{self, Repacked};
        let CpuBytes { bytes, repacked, .. } = ext.memory.as_any().downcast_ref::<CpuBytes>()?;
        let [r, k] = ext.shape[..] else { return None };
        let view = layout.rank() == 2 && layout.shape[0] == k && layout.strides == [1, k];
        let whole_blocks = k.is_multiple_of(qdot::QK) && layout.offset.is_multiple_of(k.max(1));
        if ext.writable || !repack::available(ext.dtype) || !view || k == 0 || !whole_blocks {
            return None;
        }
        let row0 = layout.offset / k;
        if row0 + layout.shape[1] > r || bytes.len() < ext.dtype.bytes_of_shape(&ext.shape)? {
            return None;
        }
        let rep = repacked.get_or_init(|| {
            // the matmuls read the copy from now on: a mapped file's pages of the original can go, slab by slab
            let rep = Repacked::new(ext.dtype, bytes.as_slice(), r, k, &|range| bytes.page_out(range));
            ext.accounting.fetch_add(rep.bytes() as u64, std::sync::atomic::Ordering::Relaxed);
            rep
        });
        // the copy is of this resident, whose shape does not change
        debug_assert_eq!((rep.rows(), rep.k()), (r, k));
        Some(RepackedW { ext: ext.clone(), row0 })
    }

    fn packed(&self) -> &qdot::repack::Repacked {
        let bytes = self.ext.memory.as_any().downcast_ref::<super::external::CpuBytes>();
        bytes.and_then(|b| b.repacked.get()).expect("made in `of`")
    }
}

/// A pointer the prefill's tasks share, each writing its own columns through it.
struct SendPtr(*mut f32);
// SAFETY: the tasks write disjoint elements, and the buffer outlives them (`for_ranges` returns after all).
unsafe impl Sync for SendPtr {}
unsafe impl Send for SendPtr {}

impl SendPtr {
    /// The pointer `i` elements on (through a method, so that closures capture the whole `SendPtr`).
    ///
    /// # Safety
    /// `i` lies within the buffer.
    unsafe fn at(&self, i: usize) -> *mut f32 {
        // SAFETY: the caller's
        unsafe { self.0.add(i) }
    }
}

/// Rows of w decoded at a time for a prefill panel.
const PANEL: usize = 128;

impl QMatmulKernel {
    /// The product, then the epilogue and the store.
    fn compute(&self, mem: &Memory) {
        let k = self.w.k;
        let m = self.a.layout.numel() / k;
        let a = self.activations(mem, m);
        if let Some(second) = &self.second {
            let (c, c2) = self.products(second, mem, &a, m);
            let (expr, leaves) = self.epilogue.as_ref().expect("a dual matmul has an epilogue");
            return epilogue(mem, (self.out, self.out_dtype, m * self.n), expr, leaves, (Some(&c), &c2));
        }
        #[cfg(target_arch = "x86_64")]
        // (lowering gives no repacked weight to f32 activations)
        if let Some(w) = &self.repacked {
            let out = mem.view(self.out, self.out_dtype);
            return match out.f32_mut_ptr().filter(|_| out.len() == m * self.n) {
                // straight into an f32 output, the epilogue then over it in place (a matmul never writes in place:
                // the output is no operand's storage)
                Some(p) => {
                    self.repacked(&[(w, &SendPtr(p))], &a, m);
                    if let Some((expr, leaves)) = &self.epilogue {
                        epilogue(mem, (self.out, self.out_dtype, m * self.n), expr, leaves, (None, &[]));
                    }
                }
                None => {
                    let c = self.product(mem, &a, m);
                    self.store(mem, &c);
                }
            };
        }
        let c = self.product(mem, &a, m);
        self.store(mem, &c);
    }

    /// The kernel of `a @ t(w)` for rows `a` given by the caller ([`QMatmulKernel::product`]): a weight `w` of any
    /// dtype (decoded a row at a time where it has no integer kernel) and its `n` rows, no epilogue, no repacked
    /// copy (the experts of `mul_mat_id`).
    pub(crate) fn of_rows(w: Weight, n: usize, f32_activations: bool) -> QMatmulKernel {
        let a = Leaf { storage: w.storage, dtype: DType::F32, layout: crate::shape::Layout::contiguous(&[0]) };
        QMatmulKernel {
            out: w.storage,
            out_dtype: DType::F32,
            a,
            w,
            n,
            epilogue: None,
            f32_activations,
            #[cfg(target_arch = "x86_64")]
            repacked: None,
            second: None,
        }
    }

    /// `c [m, N] = a @ t(w)` by the path this weight and row count take.
    pub(crate) fn product(&self, mem: &Memory, a: &[f32], m: usize) -> Vec<f32> {
        #[cfg(target_arch = "x86_64")]
        if let Some(w) = &self.repacked {
            let mut c = vec![0f32; m * self.n];
            self.repacked(&[(w, &SendPtr(c.as_mut_ptr()))], a, m);
            return c;
        }
        if m <= VEC_ROWS {
            return self.mat_vec(mem, a, m);
        }
        #[cfg(target_arch = "x86_64")]
        if qdot::panel::available(self.w.dtype) && !self.f32_activations {
            return self.int_panels(mem, a, m);
        }
        self.panels(mem, a, m)
    }

    /// A dual matmul's two products, `a @ t(w)` and `a @ t(second.w)`: repacked, with the activations rounded
    /// once and both weights' panels in one parallel pass; else one after the other.
    fn products(&self, second: &QMatmulKernel, mem: &Memory, a: &[f32], m: usize) -> (Vec<f32>, Vec<f32>) {
        #[cfg(target_arch = "x86_64")]
        if let (Some(w), Some(w2)) = (&self.repacked, &second.repacked) {
            let (mut c, mut c2) = (vec![0f32; m * self.n], vec![0f32; m * self.n]);
            self.repacked(&[(w, &SendPtr(c.as_mut_ptr())), (w2, &SendPtr(c2.as_mut_ptr()))], a, m);
            return (c, c2);
        }
        (self.product(mem, a, m), second.product(mem, a, m))
    }

    /// The `m` rows of a as f32 `[m, K]`: its storage itself when that is f32 and contiguous, else a copy.
    fn activations<'a>(&self, mem: &'a Memory, m: usize) -> std::borrow::Cow<'a, [f32]> {
        let k = self.w.k;
        let (av, l) = (mem.view(self.a.storage, self.a.dtype), &self.a.layout);
        if let Some(p) = av.f32_ptr().filter(|_| l.is_contiguous() && l.offset + m * k <= av.len()) {
            // SAFETY: elements offset..offset + m·k of the live f32 storage (checked); nothing writes them while
            // this step runs (a matmul never writes in place)
            return std::borrow::Cow::Borrowed(unsafe { std::slice::from_raw_parts(p.add(l.offset), m * k) });
        }
        let mut a = vec![0f32; m * k];
        let st = l.strides[l.rank() - 1];
        for r in 0..m {
            av.row_f32(l.index_of(r * k), st, &mut a[r * k..(r + 1) * k]);
        }
        std::borrow::Cow::Owned(a)
    }

    /// Small M: each thread takes a range of w's rows and dots each with every row of a, in integer
    /// arithmetic against 8-bit activations where the type has such a kernel. Returns `c [m, n]`.
    fn mat_vec(&self, mem: &Memory, a: &[f32], m: usize) -> Vec<f32> {
        let (k, n) = (self.w.k, self.n);
        let int_dot = qdot::dot_fn(self.w.dtype).filter(|_| !self.f32_activations);
        // several rows of a: each weight row unpacked once for all of them (bitwise the one-row results)
        let rows_dot = qdot::dot_rows_fn(self.w.dtype).filter(|_| int_dot.is_some() && m > 1);
        let q8: Vec<Q8Row> = match int_dot {
            Some(_) => (0..m).map(|r| Q8Row::quantize(&a[r * k..(r + 1) * k])).collect(),
            None => Vec::new(),
        };
        // cᵀ [n, m]: a thread's rows of w give it a contiguous range
        let mut ct = vec![0f32; n * m];
        let rows = rows_per_task(n, k * self.w.dtype.block_bytes() / self.w.dtype.block_size());
        let row_bytes = k / self.w.dtype.block_size() * self.w.dtype.block_bytes();
        for_chunks(&mut ct, rows * m, |t, chunk| {
            let mut row = vec![0f32; if int_dot.is_some() { 0 } else { k }];
            // this task's rows of w, looked up once
            let task_rows = chunk.len() / m;
            let first = (self.w.row0 + t * rows) * (k / self.w.dtype.block_size());
            let blocks = first..first + task_rows * (k / self.w.dtype.block_size());
            let task_bytes = mem.block_bytes(self.w.storage, self.w.dtype, blocks);
            for (jj, cj) in chunk.chunks_exact_mut(m).enumerate() {
                let j = t * rows + jj;
                match int_dot {
                    Some(dot_q) => {
                        let bytes = &task_bytes[jj * row_bytes..(jj + 1) * row_bytes];
                        match rows_dot {
                            Some(f) => f(bytes, &q8, cj),
                            None => cj.iter_mut().zip(&q8).for_each(|(c, q)| *c = dot_q(bytes, q)),
                        }
                    }
                    None => {
                        self.w.row(mem, j, &mut row);
                        cj.iter_mut().enumerate().for_each(|(r, c)| *c = dot(&a[r * k..(r + 1) * k], &row));
                    }
                }
            }
        });
        let mut c = vec![0f32; m * n];
        for (j, cj) in ct.chunks_exact(m).enumerate() {
            cj.iter().enumerate().for_each(|(r, &v)| c[r * n + j] = v);
        }
        c
    }

    /// Large M (prefill): each task decodes a panel of w's rows to f32, transposed (`[K, rows]`, the layout
    /// `gemm` packs by vector copies), and multiplies it with `gemm` into its columns of `c [m, n]`.
    fn panels(&self, mem: &Memory, a: &[f32], m: usize) -> Vec<f32> {
        let (k, n) = (self.w.k, self.n);
        let mut c = vec![0f32; m * n];
        let dst = SendPtr(c.as_mut_ptr());
        for_ranges(n.div_ceil(PANEL), 1, |panels| {
            let mut panel = vec![0f32; PANEL * k];
            let mut panel_t = vec![0f32; PANEL * k];
            for p in panels {
                let (j0, rows) = (p * PANEL, PANEL.min(n - p * PANEL));
                for j in 0..rows {
                    self.w.row(mem, j0 + j, &mut panel[j * k..(j + 1) * k]);
                }
                transpose_into(&panel[..rows * k], rows, k, &mut panel_t[..rows * k]);
                // c[:, j0..j0 + rows] = a [m, k] @ panel_t [k, rows]
                // SAFETY: a is [m, k], panel_t [k, rows] and c [m, n] row-major with j0 + rows <= n: every index gemm
                // forms lies inside them; tasks write disjoint columns of c.
                unsafe {
                    gemm::gemm(
                        m,
                        rows,
                        k,
                        dst.at(j0),
                        1,
                        n as isize,
                        false,
                        a.as_ptr(),
                        1,
                        k as isize,
                        panel_t.as_ptr(),
                        1,
                        rows as isize,
                        0.0f32,
                        1.0f32,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    );
                }
            }
        });
        c
    }

    /// Large M with AVX-512 VNNI, for the types with a panel form (`qdot/panel.rs`): a's rows rounded to 8-bit
    /// blocks once, then each task unpacks panels of 16 rows of w to bytes and multiplies them in integer
    /// arithmetic into its columns of `c [m, n]`.
    #[cfg(target_arch = "x86_64")]
    fn int_panels(&self, mem: &Memory, a: &[f32], m: usize) -> Vec<f32> {
        use qdot::panel::{Acts, Panel, NR};
        let (k, n) = (self.w.k, self.n);
        let acts = Acts::quantize(self.w.dtype, a, k);
        debug_assert_eq!(acts.len(), m);
        let mut c = vec![0f32; m * n];
        let dst = SendPtr(c.as_mut_ptr());
        for_ranges(n.div_ceil(NR), 1, |panels| {
            let mut panel = Panel::new(self.w.dtype, k);
            for p in panels {
                let (j0, rows) = (p * NR, NR.min(n - p * NR));
                panel.fill((0..rows).map(|j| self.w.bytes(mem, j0 + j)));
                // SAFETY: available() checked the CPU; c is [m, n] with j0 + rows <= n, and tasks write disjoint
                // columns of it
                unsafe { panel.multiply(&acts, dst.at(j0), n, rows) };
            }
        });
        c
    }

    /// Every row count with AVX-512 VNNI, for the types repacked at first use (`qdot/repack.rs`): a's rows
    /// rounded to 8-bit blocks once, then each task multiplies them with its panels of 16 repacked weight rows
    /// into its columns of `c [m, N]` (`m · N` f32 elements), for each `(w, c)` of `products` (a dual matmul's
    /// two weights of one dtype and shape: their panels one parallel pass).
    #[cfg(target_arch = "x86_64")]
    fn repacked(&self, products: &[(&RepackedW, &SendPtr)], a: &[f32], m: usize) {
        use qdot::repack::NR;
        let (k, n) = (self.w.k, self.n);
        let acts = qdot::repack::Acts::quantize(a, k);
        // each product's panels, one range after the other, and its repacked copy (looked up once)
        let spans: Vec<(usize, usize)> =
            products.iter().map(|(w, _)| (w.row0 / NR, (w.row0 + n).div_ceil(NR))).collect();
        let packed: Vec<&qdot::repack::Repacked> = products.iter().map(|(w, _)| w.packed()).collect();
        let total: usize = spans.iter().map(|(p0, p1)| p1 - p0).sum();
        // at least about 16 KiB of weights times rows of a task
        let panel_bytes = NR * k / self.w.dtype.block_size() * self.w.dtype.block_bytes();
        let grain = (16 * 1024 / (panel_bytes * m).max(1)).max(1);
        for_ranges(total, grain, |panels| {
            for mut i in panels {
                let mut j = 0;
                while i >= spans[j].1 - spans[j].0 {
                    i -= spans[j].1 - spans[j].0;
                    j += 1;
                }
                let ((w, c), p) = (products[j], spans[j].0 + i);
                let (lo, hi) = ((p * NR).max(w.row0), ((p + 1) * NR).min(w.row0 + n));
                // SAFETY: `of` checked the CPU (available); acts rows have k values; columns lo - row0 .. hi - row0
                // of this product's c [m, n] are this task's alone
                unsafe { packed[j].multiply(p, &acts, c.at(lo - w.row0), n, lo - p * NR..hi - p * NR) };
            }
        });
    }

    fn store(&self, mem: &Memory, c: &[f32]) {
        let out = mem.view(self.out, self.out_dtype);
        match &self.epilogue {
            None => out.write_f32(0, c),
            Some((expr, leaves)) => epilogue(mem, (self.out, self.out_dtype, c.len()), expr, leaves, (Some(c), &[])),
        }
    }
}
