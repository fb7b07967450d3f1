//! The wasm CPU backend's f32 matmul: `C = A · B` for A `[m, k]` and B `[k, n]` of any strides, C row-major and
//! contiguous, blocked in the GotoBLAS way (B packed in panels of 8 columns for a block of 256 rows of K, A in panels
//! of 4 rows) around a 4×8 register tile of eight simd128 accumulators: 11 of the 16 vector registers V8 has on
//! x86-64, where the `gemm` crate's 12×4 tile needs 19 and spills (6×8 and 8×8 tiles measured slower too). The
//! relaxed-simd build (scripts/build-wasm.sh makes both; the package loads it where the engine validates it)
//! multiplies and adds in one `f32x4.relaxed_madd`, a fused multiply-add where the CPU has one: half the
//! arithmetic instructions, which doubles the peak on cores whose FMA units also do the plain multiplies and adds
//! (Intel's, Apple's); on AMD's Zen, with separate add pipes, it measured 1.0-1.3x in Node.js 20
//! (`node tests/e2e/bench-node.mjs`). The same code runs natively on `[f32; 4]` lanes so that its tests run
//! everywhere (`tests` below); the simd128 build is tested in Chromium (tests/wasm.rs), both builds in Node.js
//! (tests/e2e/node.mjs).
//! Reference: BLAS `sgemm` with alpha 1 and beta 0 (numpy.matmul of two 2-D operands).

use std::cell::RefCell;

/// Rows of the register tile.
const MR: usize = 4;
/// Columns of the register tile (two vectors).
const NR: usize = 8;
/// K rows of one packed block.
const KC: usize = 256;
/// A rows packed at once (a multiple of MR).
const MC: usize = 64;
/// B columns packed at once (a multiple of NR).
const NC: usize = 512;

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod lanes {
    use core::arch::wasm32::*;
    pub type V = v128;
    #[inline(always)]
    pub fn zero() -> V {
        f32x4_splat(0.0)
    }
    #[inline(always)]
    pub fn splat(x: f32) -> V {
        f32x4_splat(x)
    }
    /// SAFETY (callers): `p..p + 4` is readable.
    #[inline(always)]
    pub unsafe fn load(p: *const f32) -> V {
        v128_load(p as *const v128)
    }
    /// SAFETY (callers): `p..p + 4` is writable.
    #[inline(always)]
    pub unsafe fn store(p: *mut f32, v: V) {
        v128_store(p as *mut v128, v)
    }
    /// `a · b + c`: one fused multiply-add where the build has relaxed-simd (V8 lowers it to `vfmadd` on x86
    /// with FMA, `fmla` on Arm; elsewhere it may round twice), else a multiply and an add.
    #[inline(always)]
    pub fn madd(a: V, b: V, c: V) -> V {
        #[cfg(target_feature = "relaxed-simd")]
        return f32x4_relaxed_madd(a, b, c);
        #[cfg(not(target_feature = "relaxed-simd"))]
        f32x4_add(f32x4_mul(a, b), c)
    }
    #[inline(always)]
    pub fn add(a: V, b: V) -> V {
        f32x4_add(a, b)
    }
}

#[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
mod lanes {
    pub type V = [f32; 4];
    #[inline(always)]
    pub fn zero() -> V {
        [0.0; 4]
    }
    #[inline(always)]
    pub fn splat(x: f32) -> V {
        [x; 4]
    }
    /// SAFETY (callers): `p..p + 4` is readable.
    #[inline(always)]
    pub unsafe fn load(p: *const f32) -> V {
        std::ptr::read_unaligned(p as *const V)
    }
    /// SAFETY (callers): `p..p + 4` is writable.
    #[inline(always)]
    pub unsafe fn store(p: *mut f32, v: V) {
        std::ptr::write_unaligned(p as *mut V, v)
    }
    #[inline(always)]
    pub fn madd(a: V, b: V, c: V) -> V {
        std::array::from_fn(|i| a[i] * b[i] + c[i])
    }
    #[inline(always)]
    pub fn add(a: V, b: V) -> V {
        std::array::from_fn(|i| a[i] + b[i])
    }
}

use lanes::V;

/// A strided 2-D operand: element (i, j) at `ptr + i * rs + j * cs`.
#[derive(Clone, Copy)]
pub(crate) struct Operand {
    pub ptr: *const f32,
    pub rs: isize,
    pub cs: isize,
}

impl Operand {
    /// SAFETY (callers): (i, j) lies inside the operand.
    #[inline(always)]
    unsafe fn at(&self, i: usize, j: usize) -> f32 {
        *self.ptr.offset(i as isize * self.rs + j as isize * self.cs)
    }
}

thread_local! {
    /// The packing buffers (A block, B block), kept between calls.
    static PACKS: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// `c[i * n + j] = Σ_p a(i, p) · b(p, j)` for i < m, j < n (`c.len() == m * n`).
///
/// # Safety
/// Every (i, p) with i < m, p < k is inside `a` and every (p, j) with p < k, j < n inside `b`.
pub(crate) unsafe fn sgemm(m: usize, n: usize, k: usize, a: Operand, b: Operand, c: &mut [f32]) {
    assert_eq!(c.len(), m * n, "sgemm: C holds m·n elements");
    if k == 0 {
        c.fill(0.0);
        return;
    }
    PACKS.with(|packs| {
        let (ap, bp) = &mut *packs.borrow_mut();
        ap.resize(MC * KC, 0.0);
        bp.resize(KC * NC, 0.0);
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            for pc in (0..k).step_by(KC) {
                let kc = KC.min(k - pc);
                pack_b(b, pc, kc, jc, nc, bp);
                for ic in (0..m).step_by(MC) {
                    let mc = MC.min(m - ic);
                    pack_a(a, ic, mc, pc, kc, ap);
                    let block = Block { kc, first: pc == 0, n, rows: mc, cols: nc };
                    block.multiply(ap, bp, &mut c[ic * n + jc..]);
                }
            }
        }
    });
}

/// A into `ap`: panels of MR rows, each `kc` steps of MR values (rows past `mc` zero).
unsafe fn pack_a(a: Operand, ic: usize, mc: usize, pc: usize, kc: usize, ap: &mut [f32]) {
    for (panel, dst) in ap.chunks_exact_mut(MR * kc).take(mc.div_ceil(MR)).enumerate() {
        let r0 = panel * MR;
        let rows = MR.min(mc - r0);
        for (p, d) in dst.chunks_exact_mut(MR).enumerate() {
            for (r, v) in d.iter_mut().enumerate() {
                *v = if r < rows { a.at(ic + r0 + r, pc + p) } else { 0.0 };
            }
        }
    }
}

/// B into `bp`: panels of NR columns, each `kc` steps of NR values (columns past `nc` zero).
unsafe fn pack_b(b: Operand, pc: usize, kc: usize, jc: usize, nc: usize, bp: &mut [f32]) {
    for (panel, dst) in bp.chunks_exact_mut(NR * kc).take(nc.div_ceil(NR)).enumerate() {
        let c0 = panel * NR;
        let cols = NR.min(nc - c0);
        for (p, d) in dst.chunks_exact_mut(NR).enumerate() {
            if cols == NR && b.cs == 1 {
                let src = b.ptr.offset((pc + p) as isize * b.rs + (jc + c0) as isize);
                d.copy_from_slice(std::slice::from_raw_parts(src, NR));
            } else {
                for (j, v) in d.iter_mut().enumerate() {
                    *v = if j < cols { b.at(pc + p, jc + c0 + j) } else { 0.0 };
                }
            }
        }
    }
}

/// One packed block: `rows` × `cols` of C (row stride `n`) from `kc` steps; `first` overwrites C, else adds.
struct Block {
    kc: usize,
    first: bool,
    n: usize,
    rows: usize,
    cols: usize,
}

impl Block {
    fn multiply(&self, ap: &[f32], bp: &[f32], c: &mut [f32]) {
        for jr in (0..self.cols).step_by(NR) {
            let b = &bp[jr * self.kc..(jr + NR) * self.kc];
            for ir in (0..self.rows).step_by(MR) {
                let a = &ap[ir * self.kc..(ir + MR) * self.kc];
                let acc = tile(self.kc, a, b);
                self.store(acc, &mut c[ir * self.n + jr..], MR.min(self.rows - ir), NR.min(self.cols - jr));
            }
        }
    }

    /// The tile's `rows` × `cols` valid part into C (`c[0]` its first element).
    fn store(&self, acc: [V; 2 * MR], c: &mut [f32], rows: usize, cols: usize) {
        if rows == MR && cols == NR {
            for r in 0..MR {
                let row = &mut c[r * self.n..r * self.n + NR];
                // SAFETY: `row` holds NR = 8 elements, two vectors
                unsafe {
                    let p = row.as_mut_ptr();
                    let (v0, v1) = (acc[2 * r], acc[2 * r + 1]);
                    if self.first {
                        lanes::store(p, v0);
                        lanes::store(p.add(4), v1);
                    } else {
                        lanes::store(p, lanes::add(lanes::load(p), v0));
                        lanes::store(p.add(4), lanes::add(lanes::load(p.add(4)), v1));
                    }
                }
            }
            return;
        }
        let mut t = [0f32; MR * NR];
        for (r, v) in acc.iter().enumerate() {
            // SAFETY: `t` holds 2·MR vectors
            unsafe { lanes::store(t.as_mut_ptr().add(4 * r), *v) };
        }
        for r in 0..rows {
            for j in 0..cols {
                let dst = &mut c[r * self.n + j];
                *dst = if self.first { t[r * NR + j] } else { *dst + t[r * NR + j] };
            }
        }
    }
}

/// The 4×8 register tile over `kc` packed steps: `a` MR values a step, `b` NR values a step.
#[inline(always)]
fn tile(kc: usize, a: &[f32], b: &[f32]) -> [V; 2 * MR] {
    let z = lanes::zero();
    let (mut c00, mut c01, mut c10, mut c11, mut c20, mut c21, mut c30, mut c31) = (z, z, z, z, z, z, z, z);
    for (a, b) in a.chunks_exact(MR).zip(b.chunks_exact(NR)).take(kc) {
        // SAFETY: `b` holds NR = 8 elements, two vectors
        let (b0, b1) = unsafe { (lanes::load(b.as_ptr()), lanes::load(b.as_ptr().add(4))) };
        let a0 = lanes::splat(a[0]);
        c00 = lanes::madd(a0, b0, c00);
        c01 = lanes::madd(a0, b1, c01);
        let a1 = lanes::splat(a[1]);
        c10 = lanes::madd(a1, b0, c10);
        c11 = lanes::madd(a1, b1, c11);
        let a2 = lanes::splat(a[2]);
        c20 = lanes::madd(a2, b0, c20);
        c21 = lanes::madd(a2, b1, c21);
        let a3 = lanes::splat(a[3]);
        c30 = lanes::madd(a3, b0, c30);
        c31 = lanes::madd(a3, b1, c31);
    }
    [c00, c01, c10, c11, c20, c21, c30, c31]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        (ars, acs): (usize, usize),
        b: &[f32],
        (brs, bcs): (usize, usize),
    ) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * ars + p * acs] as f64 * b[p * brs + j * bcs] as f64).sum();
            }
        }
        c
    }

    /// Every edge of the blocking (m, n, k one off MR, NR, MC, NC, KC), row-major and transposed operands, into a
    /// C pre-filled with NaN, against an f64 reference.
    #[test]
    fn matches_the_reference_at_every_edge() {
        let shapes = [
            (1, 1, 1),
            (3, 7, 5),
            (4, 8, 256),
            (5, 9, 257),
            (63, 65, 17),
            (64, 512, 3),
            (65, 513, 513),
            (130, 20, 600),
        ];
        for (m, n, k) in shapes {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 + 3) % 23) as f32 / 11.0 - 1.0).collect();
                let b: Vec<f32> = (0..k * n).map(|i| ((i * 5 + 1) % 19) as f32 / 9.0 - 1.0).collect();
                let sa = if ta { (1, m) } else { (k, 1) };
                let sb = if tb { (1, k) } else { (n, 1) };
                let mut c = vec![f32::NAN; m * n];
                let op =
                    |p: &[f32], (rs, cs): (usize, usize)| Operand { ptr: p.as_ptr(), rs: rs as isize, cs: cs as isize };
                // SAFETY: the strides address m·k and k·n elements of the vectors
                unsafe { sgemm(m, n, k, op(&a, sa), op(&b, sb), &mut c) };
                let want = reference(m, n, k, &a, sa, &b, sb);
                for (i, (&got, &w)) in c.iter().zip(&want).enumerate() {
                    let tol = 1e-5 * (k as f64).sqrt() * w.abs().max(1.0);
                    assert!((got as f64 - w).abs() <= tol, "{m}x{k}x{n} ta={ta} tb={tb}: c[{i}] = {got}, want {w}");
                }
            }
        }
    }

    #[test]
    fn k_zero_gives_zeros() {
        let mut c = vec![f32::NAN; 6];
        let op = Operand { ptr: [].as_ptr(), rs: 0, cs: 1 };
        // SAFETY: k = 0 reads nothing
        unsafe { sgemm(2, 3, 0, op, op, &mut c) };
        assert_eq!(c, vec![0.0; 6]);
    }
}
