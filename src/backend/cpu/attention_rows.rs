//! Attention of a few query rows sharing a KV head (a decode step's heads of one group, a short prefill's rows),
//! with AVX2, FMA and F16C: the K and V rows read in place, f16 or f32, each converted once for up to four query
//! rows at a time (its scores, then its share of the weighted sum), where a row at a time converted every key once
//! per query head and summed each score's 16 partial sums in order.
//! The row softmax (`softmax_in_place`) is shared with the portable row of `attention.rs`.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use half::f16;

use crate::ops::reduce::running_max;
use crate::ops::unary::exp;

#[cfg(target_arch = "x86_64")]
/// Keys or values in place: row `j` at `base + j·stride` elements, `width` contiguous elements each.
#[derive(Clone, Copy)]
pub(crate) struct Rows<T> {
    pub base: *const T,
    pub stride: usize,
    pub width: usize,
}

#[cfg(target_arch = "x86_64")]
/// An element type the kernel reads: eight of them as eight f32.
pub(crate) trait Lane: Copy {
    /// # Safety
    /// `p..p + 8` is readable; the caller has AVX and F16C.
    unsafe fn load8(p: *const Self) -> __m256;
}

#[cfg(target_arch = "x86_64")]
impl Lane for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        // SAFETY: as the trait says
        unsafe { _mm256_loadu_ps(p) }
    }
}

#[cfg(target_arch = "x86_64")]
impl Lane for f16 {
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> __m256 {
        // SAFETY: as the trait says
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
}

#[cfg(target_arch = "x86_64")]
/// Query rows of one block: `q [R, D]` f32, each row's visible keys and its mask (empty, or its visible length).
pub(crate) struct Block<'a, const R: usize> {
    pub q: &'a [f32],
    pub visible: [usize; R],
    pub masks: [&'a [f32]; R],
}

#[cfg(target_arch = "x86_64")]
/// `out[r] = softmax(q[r]·kᵀ·scale + mask[r])·v` over row `r`'s visible keys, for the `R` rows of `blk` (`out
/// [R, Dv]`, `sc` at least `R × max visible` scores). D and Dv are multiples of 8 (`k.width`, `v.width`). A row
/// with no visible key, or all masked to −inf, gives zeros; a NaN score gives NaN (as PyTorch's softmax). Each
/// row's result depends on its own keys only (not on the other rows or on keys past its visible ones).
/// Returns each row's softmax statistics as [`softmax_in_place`]'s: (largest score, sum of its exponentials).
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `k` and `v` address `max visible` readable rows.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn attend<T: Lane, const R: usize>(
    blk: &Block<R>,
    (k, v): (Rows<T>, Rows<T>),
    scale: f32,
    sc: &mut [f32],
    out: &mut [f32],
) -> [(f32, f32); R] {
    let (d, dv) = (k.width, v.width);
    let n = blk.visible.iter().copied().max().unwrap_or(0);
    assert!(d % 8 == 0 && dv % 8 == 0 && blk.q.len() == R * d && out.len() == R * dv && sc.len() >= R * n);
    let q = blk.q.as_ptr();
    // scores two keys at a time (eight or fewer independent sums in flight)
    let mut j = 0;
    while j < n {
        let two = j + 1 < n;
        prefetch_rows(k, j + PREFETCH, 2);
        // SAFETY: rows j and j + 1 < n of k are readable (the caller's promise); q holds R rows of d.
        let s =
            unsafe { dots::<T, R>(q, [k.base.add(j * k.stride), k.base.add((j + usize::from(two)) * k.stride)], d) };
        for r in 0..R {
            sc[r * n + j] = s[0][r] * scale;
            if two {
                sc[r * n + j + 1] = s[1][r] * scale;
            }
        }
        j += 2;
    }
    let stats: [(f32, f32); R] =
        std::array::from_fn(|r| softmax_in_place(&mut sc[r * n..r * n + blk.visible[r]], blk.masks[r]));
    // the weighted sum 32 (with four rows 16, the accumulators in 16 registers) or 8 columns at a time, its
    // sums in registers over the keys
    let cols = if R <= 3 { 32 } else { 16 };
    let mut c = 0;
    while c < dv {
        let wide = c + cols <= dv;
        // SAFETY: columns c.. c + 8 (cols when wide) < dv of v's first n rows are readable; out holds R rows of dv.
        unsafe {
            match (wide, cols) {
                (true, 32) => weighted::<T, R, 4>(&sc[..R * n], (n, blk.visible), (v, c), out),
                (true, _) => weighted::<T, R, 2>(&sc[..R * n], (n, blk.visible), (v, c), out),
                (false, _) => weighted::<T, R, 1>(&sc[..R * n], (n, blk.visible), (v, c), out),
            }
        }
        c += if wide { cols } else { 8 };
    }
    for (row, (_, sum)) in out.chunks_exact_mut(dv).zip(stats) {
        let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
        row.iter_mut().for_each(|a| *a *= inv);
    }
    stats
}

#[cfg(target_arch = "x86_64")]
/// The dot products of the R query rows `q [R, D]` with two key rows (equal for one key): each in eight lanes over
/// the columns in order, then the lanes' sum.
#[inline(always)]
unsafe fn dots<T: Lane, const R: usize>(q: *const f32, kp: [*const T; 2], d: usize) -> [[f32; R]; 2] {
    // SAFETY: the caller's: both key rows and R query rows of d readable; AVX2, FMA and F16C
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); R]; 2];
        for c in (0..d).step_by(8) {
            let kc = [T::load8(kp[0].add(c)), T::load8(kp[1].add(c))];
            let [a0, a1] = &mut acc;
            for (r, (x0, x1)) in a0.iter_mut().zip(a1.iter_mut()).enumerate() {
                let qc = _mm256_loadu_ps(q.add(r * d + c));
                *x0 = _mm256_fmadd_ps(qc, kc[0], *x0);
                *x1 = _mm256_fmadd_ps(qc, kc[1], *x1);
            }
        }
        [std::array::from_fn(|r| hsum(acc[0][r])), std::array::from_fn(|r| hsum(acc[1][r]))]
    }
}

#[cfg(target_arch = "x86_64")]
/// `out[r][c .. c + 8·W] = Σ_j p[r][j] · v[j][c .. c + 8·W]` over row r's visible keys, in key order (`p [R, n]`).
#[inline(always)]
unsafe fn weighted<T: Lane, const R: usize, const W: usize>(
    p: &[f32],
    (n, visible): (usize, [usize; R]),
    (v, c): (Rows<T>, usize),
    out: &mut [f32],
) {
    // SAFETY: the caller's: columns c .. c + 8·W of v's first n rows readable, out holds R rows of v.width;
    // AVX2, FMA and F16C
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); W]; R];
        for j in 0..n {
            prefetch_rows(Rows { base: v.base.wrapping_add(c), width: 8 * W, ..v }, j + PREFETCH, 1);
            let vp = v.base.add(j * v.stride + c);
            let vc: [__m256; W] = std::array::from_fn(|w| T::load8(vp.add(8 * w)));
            for (r, row) in acc.iter_mut().enumerate() {
                if j < visible[r] {
                    let pr = _mm256_set1_ps(*p.get_unchecked(r * n + j));
                    for (a, x) in row.iter_mut().zip(vc) {
                        *a = _mm256_fmadd_ps(pr, x, *a);
                    }
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (w, a) in row.iter().enumerate() {
                _mm256_storeu_ps(out.as_mut_ptr().add(r * v.width + c + 8 * w), *a);
            }
        }
    }
}

/// How many rows ahead the K and V loops ask for their rows: a head's rows are a short piece of each cache row
/// (128 of 384 bytes for SmolLM2), a stride the hardware prefetchers follow poorly across pages.
#[cfg(target_arch = "x86_64")]
const PREFETCH: usize = 8;

#[cfg(target_arch = "x86_64")]
/// Asks for rows `j .. j + count` of `x` (its `width` elements) in the cache; rows past the end are never read.
#[inline(always)]
fn prefetch_rows<T>(x: Rows<T>, j: usize, count: usize) {
    let bytes = x.width * std::mem::size_of::<T>();
    for i in 0..count {
        let row = x.base.wrapping_add((j + i) * x.stride) as *const i8;
        for b in (0..bytes).step_by(64) {
            // SAFETY: a prefetch never faults, whatever the address
            unsafe { _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(b)) };
        }
    }
}

#[cfg(target_arch = "x86_64")]
/// The eight lanes' sum, in a fixed order.
#[inline(always)]
unsafe fn hsum(a: __m256) -> f32 {
    // SAFETY: the caller has AVX
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }
}

/// `x` (scores) plus `mask` (empty or as long), replaced by `exp(x − max)`; returns `max` and their sum (−inf and
/// 0 when every score is −inf or there is none: the row's output is zeros; NaN sums when a score is NaN).
#[inline(always)]
pub(super) fn softmax_in_place(x: &mut [f32], mask: &[f32]) -> (f32, f32) {
    if !mask.is_empty() {
        x.iter_mut().zip(mask).for_each(|(e, m)| *e += m);
    }
    let max = row_max(x);
    if max == f32::NEG_INFINITY {
        x.fill(0.0);
        return (max, 0.0);
    }
    x.iter_mut().for_each(|e| *e = exp(*e - max));
    (max, x.iter().sum())
}

/// The largest of `x`, NaN when one is (−inf for an empty row).
#[inline(always)]
fn row_max(x: &[f32]) -> f32 {
    match running_max(x, f32::NEG_INFINITY) {
        (_, true) => f32::NAN,
        (max, false) => max,
    }
}

/// The larger of `a` and `b`, NaN when either is (`f32::max` drops a NaN: a row of NaN scores became zeros).
#[inline(always)]
pub(super) fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.max(b)
    }
}
