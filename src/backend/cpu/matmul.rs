//! Matmul on the CPU through the `gemm` crate: strided operands read in place (f16 operands widened to f32 first),
//! f32 accumulation, multithreaded natively (rayon) with the widest SIMD the CPU has, chosen at run time (AVX-512
//! with the `x86-v4` feature). A fused epilogue is applied to the product before the store.

use super::buffer::Memory;
use super::elementwise::epilogue;
use super::external::CpuBytes;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use super::sgemm::sgemm;
use super::sgemm::Operand;
use super::target::{epilogue as epilogue_leaves, leaf, CpuFamily, CpuTarget, Leaf, VEC_ROWS};
use crate::compile::ir::{Expr, Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::NodeId;
use crate::resident::External;
use crate::shape::Layout;
use std::borrow::Cow;
use std::sync::Arc;

/// `out[b] = epilogue(a[b] @ b[b])` for every batch index.
#[derive(Clone, Debug)]
pub(crate) struct MatmulKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    /// `[batch.., m, k]`, broadcast to the output's batch dims.
    pub a: Leaf,
    /// `[batch.., k, n]`, broadcast likewise.
    pub b: Leaf,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// The epilogue over `Expr::Acc` and its operands (broadcast to the output's shape).
    pub epilogue: Option<(Expr, Vec<Leaf>)>,
    /// b read from the transposed copy of the resident it is `t()` of, instead of through `b`'s layout.
    pub b_transposed: Option<TransposedB>,
}

/// Columns `row0..row0 + n` of the f32 `[K, R]` copy of a resident `w [R, K]`: `t(w)`'s rows as gemm reads
/// fastest (a row-major operand is packed by vector copies, a transposed one element by element).
#[derive(Clone)]
pub(crate) struct TransposedB {
    ext: Arc<External>,
    row0: usize,
}

impl std::fmt::Debug for TransposedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TransposedB({} {:?}, row {})", self.ext.name, self.ext.shape, self.row0)
    }
}

impl TransposedB {
    /// When `layout` (b's, `[K, N]`) reads rows `row0..row0 + N` of an f32 resident `w [R, K]` as `t(w)`: that,
    /// with the resident's transposed copy made (once per resident, counted in its device's resident bytes).
    pub(crate) fn of(ext: &Arc<External>, layout: &Layout) -> Option<TransposedB> {
        let CpuBytes { bytes, transposed: copy, .. } = ext.memory.as_any().downcast_ref::<CpuBytes>()?;
        let [r, k] = ext.shape[..] else { return None };
        let transposed_view = layout.rank() == 2 && layout.shape[0] == k && layout.strides == [1, k];
        if ext.writable || ext.dtype != DType::F32 || !transposed_view || k == 0 || !layout.offset.is_multiple_of(k) {
            return None;
        }
        let row0 = layout.offset / k;
        if row0 + layout.shape[1] > r {
            return None;
        }
        copy.get_or_init(|| {
            ext.accounting.fetch_add(4 * (r * k) as u64, std::sync::atomic::Ordering::Relaxed);
            // a memory-mapped file's tensor may start at any byte
            let w: Cow<[f32]> = match bytemuck::try_cast_slice(bytes.as_slice()) {
                Ok(w) => Cow::Borrowed(w),
                Err(_) => {
                    bytes.as_slice().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
                }
            };
            transpose(&w, r, k)
        });
        Some(TransposedB { ext: ext.clone(), row0 })
    }

    /// The copy's first element of column `row0`, and its row stride (R).
    fn ptr_and_stride(&self) -> (*const f32, usize) {
        let bytes = self.ext.memory.as_any().downcast_ref::<CpuBytes>();
        let t = bytes.and_then(|b| b.transposed.get()).expect("made in `of`");
        (t[self.row0..].as_ptr(), self.ext.shape[0])
    }
}

/// `w [r, k]` (row-major) transposed to `[k, r]`.
fn transpose(w: &[f32], r: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0f32; r * k];
    transpose_into(w, r, k, &mut out);
    out
}

/// `w [r, k]` (row-major) transposed into `out [k, r]`, in 32 × 32 tiles (each read and written within the
/// cache): 8 × 8 blocks in AVX registers where the CPU has AVX, elementwise otherwise and at the edges.
pub(crate) fn transpose_into(w: &[f32], r: usize, k: usize, out: &mut [f32]) {
    assert!(w.len() == r * k && out.len() == r * k, "a transpose of [{r}, {k}]");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        let (r8, k8) = (r / 8 * 8, k / 8 * 8);
        // SAFETY: the CPU has AVX (checked); the blocks lie within w and out (asserted shapes, r8 ≤ r, k8 ≤ k).
        unsafe { transpose_blocks_avx(w, (r, k), (r8, k8), out) };
        transpose_edges(w, (r, k), (r8, k8), out);
        return;
    }
    transpose_edges(w, (r, k), (0, 0), out);
}

/// The elements of `w [r, k]` outside its first `r8` rows' first `k8` columns, transposed into `out`.
fn transpose_edges(w: &[f32], (r, k): (usize, usize), (r8, k8): (usize, usize), out: &mut [f32]) {
    const T: usize = 32;
    for i0 in (0..r).step_by(T) {
        for j0 in (0..k).step_by(T) {
            for i in i0..(i0 + T).min(r) {
                let from = if i < r8 { j0.max(k8) } else { j0 };
                for j in from..(j0 + T).min(k) {
                    out[j * r + i] = w[i * k + j];
                }
            }
        }
    }
}

/// The first `r8` rows' first `k8` columns of `w [r, k]` transposed into `out [k, r]`, 8 × 8 blocks at a time
/// (unpack, shuffle and lane permutes), in 32 × 32 tiles.
///
/// # Safety
/// The CPU has AVX; `w` and `out` hold `r · k` values; `r8 ≤ r` and `k8 ≤ k` are multiples of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose_blocks_avx(w: &[f32], (r, k): (usize, usize), (r8, k8): (usize, usize), out: &mut [f32]) {
    use std::arch::x86_64::*;
    let (src, dst) = (w.as_ptr(), out.as_mut_ptr());
    for i0 in (0..r8).step_by(32) {
        for j0 in (0..k8).step_by(32) {
            for i in (i0..(i0 + 32).min(r8)).step_by(8) {
                for j in (j0..(j0 + 32).min(k8)).step_by(8) {
                    let row = |a: usize| _mm256_loadu_ps(src.add((i + a) * k + j));
                    let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
                    let (r4, r5, r6, r7) = (row(4), row(5), row(6), row(7));
                    let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
                    let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
                    let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
                    let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
                    let (u0, u1) = (_mm256_shuffle_ps::<0x44>(t0, t2), _mm256_shuffle_ps::<0xee>(t0, t2));
                    let (u2, u3) = (_mm256_shuffle_ps::<0x44>(t1, t3), _mm256_shuffle_ps::<0xee>(t1, t3));
                    let (u4, u5) = (_mm256_shuffle_ps::<0x44>(t4, t6), _mm256_shuffle_ps::<0xee>(t4, t6));
                    let (u6, u7) = (_mm256_shuffle_ps::<0x44>(t5, t7), _mm256_shuffle_ps::<0xee>(t5, t7));
                    let column = [
                        _mm256_permute2f128_ps::<0x20>(u0, u4),
                        _mm256_permute2f128_ps::<0x20>(u1, u5),
                        _mm256_permute2f128_ps::<0x20>(u2, u6),
                        _mm256_permute2f128_ps::<0x20>(u3, u7),
                        _mm256_permute2f128_ps::<0x31>(u0, u4),
                        _mm256_permute2f128_ps::<0x31>(u1, u5),
                        _mm256_permute2f128_ps::<0x31>(u2, u6),
                        _mm256_permute2f128_ps::<0x31>(u3, u7),
                    ];
                    for (c, v) in column.into_iter().enumerate() {
                        _mm256_storeu_ps(dst.add((j + c) * r + i), v);
                    }
                }
            }
        }
    }
}

/// The operand's storage as f32, borrowed when it is f32 already.
fn as_f32<'a>(mem: &'a Memory, leaf: &Leaf) -> Cow<'a, [f32]> {
    let v = mem.view(leaf.storage, leaf.dtype);
    match v.f32_ptr() {
        // SAFETY: the view covers `v.len()` f32 elements of live storage for the run; nothing writes it while this
        // step runs (a matmul never writes in place).
        Some(p) => Cow::Borrowed(unsafe { std::slice::from_raw_parts(p, v.len()) }),
        None => Cow::Owned(v.widen_to_f32()),
    }
}

pub(crate) fn parallelism(m: usize, n: usize, k: usize) -> gemm::Parallelism {
    #[cfg(not(target_arch = "wasm32"))]
    if (m * n * k) >= 64 * 64 * 64 {
        return gemm::Parallelism::Rayon(0);
    }
    let _ = (m, n, k);
    gemm::Parallelism::None
}

/// `dst = a · b` (`[m, k] · [k, n]`, dst row-major): on wasm with simd128, [`sgemm`] from 16 rows (below that
/// `gemm`'s mat-vec paths read B once, where packing it would copy it); else the `gemm` crate.
///
/// # Safety
/// As [`sgemm`]: the operands' strides address only their storage.
pub(crate) unsafe fn product(m: usize, n: usize, k: usize, a: Operand, b: Operand, dst: &mut [f32]) {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if m >= 16 {
        return sgemm(m, n, k, a, b, dst);
    }
    gemm::gemm(
        m,
        n,
        k,
        dst.as_mut_ptr(),
        1,
        n as isize,
        false,
        a.ptr,
        a.cs,
        a.rs,
        b.ptr,
        b.cs,
        b.rs,
        0.0f32,
        1.0f32,
        false,
        false,
        false,
        parallelism(m, n, k),
    );
}

/// Element offset of batch `bi`'s first element in a layout `[batch.., rows, cols]`.
fn batch_offset(l: &Layout, bi: usize) -> usize {
    let r = l.rank();
    let mut rem = bi;
    let mut off = l.offset;
    for d in (0..r - 2).rev() {
        off += (rem % l.shape[d]) * l.strides[d];
        rem /= l.shape[d];
    }
    off
}

impl CpuFamily for MatmulKernel {
    /// A matmul of float operands (not a dual nor a normed one); listed after the quantized kernel, which takes
    /// the mat-vecs over an f16 weight first.
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::MatMul { a, b, b2: None, epilogue: epi, norm: None, .. } = &p.nodes[id].step else { return None };
        let (a, b) = (*a, *b);
        if p.nodes[b].dtype.is_storage_format() {
            return None;
        }
        let node = &p.nodes[id];
        let shape = &node.layout.shape;
        let r = shape.len();
        let (m, n) = (shape[r - 2], shape[r - 1]);
        let k = p.nodes[a].layout.shape[p.nodes[a].layout.rank() - 1];
        let batch = &shape[..r - 2];
        let la = leaf(p, a, Some(&[batch, &[m, k]].concat()));
        let lb = leaf(p, b, Some(&[batch, &[k, n]].concat()));
        let epilogue = epilogue_leaves(p, epi.as_ref(), shape);
        // many rows against an f32 weight read as t(w): the weight's transposed copy (a few rows: gemm reads each
        // weight row once either way, and the copy would double the weight's memory for nothing)
        let b_transposed = match p.external(p.nodes[b].storage) {
            Some(r) if m > VEC_ROWS => TransposedB::of(&r.ext, &p.nodes[b].layout),
            _ => None,
        };
        Some(MatmulKernel { out: id, out_dtype: node.dtype, a: la, b: lb, m, k, n, epilogue, b_transposed })
    }

    /// Every batch of the product, then the epilogue and the store.
    fn run(&self, mem: &Memory) -> Result<()> {
        let (m, k, n) = (self.m, self.k, self.n);
        let a = as_f32(mem, &self.a);
        let b = match self.b_transposed {
            Some(_) => Cow::Borrowed(&[][..]),
            None => as_f32(mem, &self.b),
        };
        let out = mem.view(self.out, self.out_dtype);
        let total = out.len();
        // the product goes straight into an f32 output (the epilogue then runs over it in place: a matmul's output
        // never shares storage with an operand), else through a temporary
        let direct = out.f32_mut_ptr();
        let mut tmp = if direct.is_some() { Vec::new() } else { vec![0f32; total] };
        let c: &mut [f32] = match direct {
            // SAFETY: the output's storage holds `total` f32 elements and nothing else reads or writes it while this
            // step runs (a matmul never writes in place).
            Some(p) => unsafe { std::slice::from_raw_parts_mut(p, total) },
            None => &mut tmp,
        };
        let (la, lb) = (&self.a.layout, &self.b.layout);
        let (ra, rb) = (la.rank(), lb.rank());
        for bi in 0..total / (m * n).max(1) {
            let (oa, ob) = (batch_offset(la, bi), batch_offset(lb, bi));
            // b's pointer and (column, row) strides: a 2-D b is the same for every batch
            let (b_ptr, b_cs, b_rs) = match &self.b_transposed {
                Some(t) => {
                    let (p, rs) = t.ptr_and_stride();
                    (p, 1, rs as isize)
                }
                // SAFETY: as below; `ob` is an element offset inside b's storage
                None => (unsafe { b.as_ptr().add(ob) }, lb.strides[rb - 1] as isize, lb.strides[rb - 2] as isize),
            };
            let dst = &mut c[bi * m * n..(bi + 1) * m * n];
            let a = Operand {
                ptr: unsafe { a.as_ptr().add(oa) },
                rs: la.strides[ra - 2] as isize,
                cs: la.strides[ra - 1] as isize,
            };
            let b = Operand { ptr: b_ptr, rs: b_rs, cs: b_cs };
            // SAFETY: every index formed is `offset + i*rs + j*cs` for i < rows, j < cols, which is inside the
            // storage because the layouts were validated against it; dst is an exclusive slice of m*n elements.
            unsafe { product(m, n, k, a, b, dst) };
        }
        let acc = if direct.is_some() { None } else { Some(&*c) };
        match (&self.epilogue, acc) {
            (None, None) => {}
            (None, Some(c)) => out.write_f32(0, c),
            (Some((expr, leaves)), acc) => epilogue(mem, (self.out, self.out_dtype, total), expr, leaves, (acc, &[])),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// Every element lands at its transposed place, in 8 × 8 blocks and at the edges of every shape around them.
    #[test]
    fn transpose_into_transposes() {
        for (r, k) in [(1, 1), (8, 8), (7, 9), (9, 7), (16, 40), (33, 17), (128, 264), (3, 70)] {
            let w: Vec<f32> = (0..r * k).map(|i| i as f32).collect();
            let mut out = vec![f32::NAN; r * k];
            super::transpose_into(&w, r, k, &mut out);
            for i in 0..r {
                for j in 0..k {
                    assert_eq!(out[j * r + i], w[i * k + j], "[{r}, {k}] at ({i}, {j})");
                }
            }
        }
    }
}
