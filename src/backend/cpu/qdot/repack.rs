//! Weights repacked once, at their first use, for the AVX-512 VNNI kernel of every matmul with a quantized
//! weight: decode (one row of activations), several sequences decoded together (a few rows) and prefill (many),
//! as llama.cpp's CPU backend repacks Q4_0 and its kin at load (`ggml-cpu/repack.cpp`).
//!
//! The rows of a weight are taken 16 at a time (a panel, the 16 i32 lanes of a 512-bit vector). For each block
//! of 32 values, the panel's 16 rows are stored interleaved as `vpdpbusd` reads them: 64-byte chunks whose lane
//! `r` holds four consecutive bytes of row `r`. A Q4 block's 16 bytes hold values `i` (low nibble) and `i + 16`
//! (high nibble), so one chunk gives two sets of four values with an `and` and a shift; Q8_0's 32 bytes are
//! stored with their top bit flipped (`q + 128`, unsigned). After the values, the 16 rows' f16 scales (and Q4_1's
//! offsets) for the block. The layout holds the same bytes as the original (Q8_0: the same count), so decode
//! reads no more memory than before.
//!
//! Arithmetic, per activation row and weight row: for each block, the exact integer `Σ q·qa` (the unsigned
//! values' sum less the offset of the signed types times `Σ qa`), converted to f32 and accumulated by one fused
//! multiply-add with `d·da`, then Q4_1's `m·sa` by another: block after block, one accumulator per output. The
//! operations, and so every bit of the result, are those of the prefill panel kernel (`panel.rs`) and do not
//! depend on how many rows of activations a run has: a sequence decoded alone and decoded with others, or a
//! prompt read in one chunk or several, multiplies its rows identically.

use super::row::{Q8Row, QK};
use crate::backend::cpu::parallel::for_chunks;
use crate::dtype::DType;
use crate::quant::{blocks, BlockQ4_0, BlockQ4_1, BlockQ8_0, F16Le};
use std::arch::x86_64::*;

/// Weight rows in a panel.
pub(crate) const NR: usize = 16;
/// Activation rows multiplied at a time (their accumulators in registers).
const MR: usize = 8;
/// Bytes ahead of the block being read that the kernel prefetches.
const PREFETCH: usize = 4096;

/// Whether `dtype` has a repacked form and this CPU the instructions for it (AVX-512 F, BW and VNNI; off with
/// `WEBTENSOR_CPU_NO_VNNI`, as the other VNNI kernels).
pub(crate) fn available(dtype: DType) -> bool {
    kind(dtype).is_some() && super::panel::available(dtype)
}

/// The repacked types, as the kernel's const parameter.
const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q8_0: u8 = 2;

fn kind(dtype: DType) -> Option<u8> {
    match dtype {
        DType::Q4_0 => Some(Q4_0),
        DType::Q4_1 => Some(Q4_1),
        DType::Q8_0 => Some(Q8_0),
        _ => None,
    }
}

/// Bytes of one block's values for a panel, bytes of a panel's block (values and scales), and the integer
/// offset of the stored values (`value = d·(q − offset)`, Q4_1's `+ m` aside).
const fn block_form(kind: u8) -> (usize, usize, i32) {
    match kind {
        Q4_0 => (8 * QK, 8 * QK + 2 * NR, 8),
        Q4_1 => (8 * QK, 8 * QK + 4 * NR, 0),
        _ => (16 * QK, 16 * QK + 2 * NR, 128),
    }
}

/// The activations of a matmul rounded to 8-bit blocks as [`Q8Row`] rounds them, in groups of [`MR`] rows laid
/// out as the kernel reads them: per block, the group's rows' 32 values one after another, then their scales,
/// scaled sums and integer sums. A last group of fewer rows has zeros after them.
pub(crate) struct Acts {
    groups: Vec<Group>,
}

#[derive(Default)]
struct Group {
    rows: usize,
    /// `[block][row][32]`
    q: Vec<i8>,
    /// `[block][d of MR rows, s of MR rows]`
    ds: Vec<f32>,
    /// `[block][row]`
    sum: Vec<i32>,
}

impl Acts {
    /// `a [m, k]` (row-major), on the CPU's threads.
    pub(crate) fn quantize(a: &[f32], k: usize) -> Acts {
        let (m, nb) = (a.len() / k.max(1), k / QK);
        let mut groups: Vec<Group> = (0..m.div_ceil(MR)).map(|_| Group::default()).collect();
        for_chunks(&mut groups, 1, |gi, group| {
            let g = &mut group[0];
            g.rows = MR.min(m - gi * MR);
            (g.q, g.ds, g.sum) = (vec![0; nb * MR * QK], vec![0.0; nb * 2 * MR], vec![0; nb * MR]);
            for i in 0..g.rows {
                let r = gi * MR + i;
                let row = Q8Row::quantize(&a[r * k..(r + 1) * k]);
                for b in 0..nb {
                    g.q[(b * MR + i) * QK..(b * MR + i + 1) * QK].copy_from_slice(&row.qs[b * QK..(b + 1) * QK]);
                    (g.ds[b * 2 * MR + i], g.ds[b * 2 * MR + MR + i]) = (row.d[b], row.s[b]);
                    g.sum[b * MR + i] = row.sum[b];
                }
            }
        });
        Acts { groups }
    }
}

/// A weight `[rows, k]` of a repacked type, repacked (see the module docs).
pub(crate) struct Repacked {
    kind: u8,
    k: usize,
    rows: usize,
    data: Vec<u8>,
}

impl Repacked {
    /// Repacks `bytes` (`rows` rows of `k` values of `dtype`, a type [`available`] takes), on the CPU's threads.
    pub(crate) fn new(dtype: DType, bytes: &[u8], rows: usize, k: usize) -> Repacked {
        let kind = kind(dtype).expect("a repacked type");
        let (nb, (qbytes, bb, _)) = (k / QK, block_form(kind));
        let row_bytes = nb * dtype.block_bytes();
        let mut data = vec![0u8; rows.div_ceil(NR) * nb * bb];
        for_chunks(&mut data, (nb * bb).max(1), |p, panel| {
            for r in 0..NR.min(rows - p * NR) {
                let row = &bytes[(p * NR + r) * row_bytes..(p * NR + r + 1) * row_bytes];
                for (b, dst) in panel.chunks_exact_mut(bb).enumerate() {
                    // lane r of chunk c: bytes 4c..4c + 4 of the block's values
                    let mut put = |qs: &[u8], flip: u8| {
                        for (c, quad) in qs.chunks_exact(4).enumerate() {
                            let at = c * 4 * NR + 4 * r;
                            dst[at..at + 4].iter_mut().zip(quad).for_each(|(d, &q)| *d = q ^ flip);
                        }
                    };
                    let scales: &[F16Le] = match kind {
                        Q4_0 => {
                            let blk = &blocks::<BlockQ4_0>(row)[b];
                            put(&blk.qs, 0);
                            &[blk.d]
                        }
                        Q4_1 => {
                            let blk = &blocks::<BlockQ4_1>(row)[b];
                            put(&blk.qs, 0);
                            &[blk.d, blk.m]
                        }
                        _ => {
                            let blk = &blocks::<BlockQ8_0>(row)[b];
                            put(&blk.qs, 0x80);
                            &[blk.d]
                        }
                    };
                    for (i, s) in scales.iter().enumerate() {
                        let at = qbytes + i * 2 * NR + 2 * r;
                        dst[at..at + 2].copy_from_slice(&s.0);
                    }
                }
            }
        });
        Repacked { kind, k, rows, data }
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Rows of the weight.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Values per row.
    pub(crate) fn k(&self) -> usize {
        self.k
    }

    /// `c[i][j] = Σ acts[i] · w[panel·16 + lanes.start + j]` for every activation row and the panel's lanes in
    /// `lanes`, written at `c + i·ldc + j`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VNNI ([`available`]); every row of `acts` has this weight's `k` values;
    /// `panel` is a panel of the weight and `lanes` within 0..16; every `c + i·ldc + j` (i < `acts.len()`,
    /// j < `lanes.len()`) is valid for writes and no other thread writes it.
    pub(crate) unsafe fn multiply(
        &self,
        panel: usize,
        acts: &Acts,
        c: *mut f32,
        ldc: usize,
        lanes: std::ops::Range<usize>,
    ) {
        let (nb, (_, bb, _)) = (self.k / QK, block_form(self.kind));
        let data = &self.data[panel * nb * bb..(panel + 1) * nb * bb];
        // several groups (prefill): a Q4 panel's nibbles unpacked to bytes once for all of them
        let unpacked = (self.kind != Q8_0 && acts.groups.len() > 1).then(|| {
            let mut bytes = vec![0u8; nb * 8 * 4 * NR];
            // SAFETY: the caller's features; `data` holds nb blocks of bb bytes, `bytes` nb blocks of 512
            unsafe { unpack_nibbles(data, bb, &mut bytes) };
            bytes
        });
        // the weights stream from memory for the first group (prefetched); later groups find them in the cache
        let mut prefetch = true;
        for (g, group) in acts.groups.iter().enumerate() {
            debug_assert!(group.q.len() == nb * MR * QK && group.ds.len() == nb * 2 * MR && group.sum.len() == nb * MR);
            let mut out = [[0f32; NR]; MR];
            let values = unpacked.as_ref().map(|u| u.as_ptr());
            // SAFETY: the caller's features and row lengths; the panel's data holds nb blocks, and `values` nb
            // blocks of 512 bytes
            unsafe { tile_fn(self.kind, group.rows)(data.as_ptr(), values, nb, group, &mut out, prefetch) };
            prefetch = false;
            for (i, o) in out.iter().enumerate().take(group.rows) {
                // SAFETY: the caller's: row g·MR + i < the activations' rows, lanes.len() columns
                unsafe {
                    let dst = c.add((g * MR + i) * ldc);
                    std::ptr::copy_nonoverlapping(o[lanes.clone()].as_ptr(), dst, lanes.len());
                }
            }
        }
    }
}

type TileFn = unsafe fn(*const u8, Option<*const u8>, usize, &Group, &mut [[f32; NR]; MR], bool);

/// The kernel of `rows` (1 to [`MR`]) activation rows for type `kind`.
fn tile_fn(kind: u8, rows: usize) -> TileFn {
    macro_rules! by_rows {
        ($k:expr) => {
            match rows {
                1 => tile::<1, { $k }>,
                2 => tile::<2, { $k }>,
                3 => tile::<3, { $k }>,
                4 => tile::<4, { $k }>,
                5 => tile::<5, { $k }>,
                6 => tile::<6, { $k }>,
                7 => tile::<7, { $k }>,
                _ => tile::<8, { $k }>,
            }
        };
    }
    match kind {
        Q4_0 => by_rows!(Q4_0),
        Q4_1 => by_rows!(Q4_1),
        _ => by_rows!(Q8_0),
    }
}

/// A Q4 panel's values unpacked to bytes: `out` holds, per block, the eight 64-byte chunks the kernel multiplies.
///
/// # Safety
/// The CPU has the features; `data` holds whole blocks of `bb` bytes, `out` 512 bytes for each.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn unpack_nibbles(data: &[u8], bb: usize, out: &mut [u8]) {
    let low = _mm512_set1_epi8(0x0f);
    for (blk, dst) in data.chunks_exact(bb).zip(out.chunks_exact_mut(8 * 4 * NR)) {
        for c in 0..4 {
            // SAFETY: a block's first 256 bytes are its nibbles; dst holds 8 chunks of 64 bytes
            unsafe {
                let x = _mm512_loadu_si512(blk.as_ptr().add(64 * c).cast());
                _mm512_storeu_si512(dst.as_mut_ptr().add(64 * c).cast(), _mm512_and_si512(x, low));
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(x), low);
                _mm512_storeu_si512(dst.as_mut_ptr().add(64 * (c + 4)).cast(), hi);
            }
        }
    }
}

/// The first `R` rows of a group of activations times a panel (`nb` blocks at `w`) into `out[..R]`, prefetching
/// the weights ahead where `prefetch`; a Q4 panel's values read from `values` where given (unpacked to bytes,
/// [`unpack_nibbles`]).
///
/// # Safety
/// The CPU has the features; `w` holds `nb` blocks of the kind's form, `values` (if any) `nb` blocks of 512 bytes;
/// the group has `nb` blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const R: usize, const KIND: u8>(
    w: *const u8,
    values: Option<*const u8>,
    nb: usize,
    g: &Group,
    out: &mut [[f32; NR]; MR],
    prefetch: bool,
) {
    let (qbytes, bb, offset) = block_form(KIND);
    let mut acc = [_mm512_setzero_ps(); R];
    let low = _mm512_set1_epi8(0x0f);
    let (aq, ads, asum) = (g.q.as_ptr(), g.ds.as_ptr(), g.sum.as_ptr());
    for b in 0..nb {
        // SAFETY (the loads): block b of the panel lies within its nb·bb bytes; the group holds nb blocks of MR rows
        unsafe {
            let blk = w.add(b * bb);
            if prefetch {
                // the stream a few blocks ahead (a panel's blocks, then the next panel's, lie one after another)
                for line in (0..bb).step_by(64) {
                    _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(PREFETCH + line).cast());
                }
            }
            let mut q = [_mm512_setzero_si512(); 8];
            if KIND == Q8_0 || values.is_some() {
                let from = values.map_or(blk, |v| v.add(b * 8 * 4 * NR));
                for (c, q) in q.iter_mut().enumerate() {
                    *q = _mm512_loadu_si512(from.add(64 * c).cast());
                }
            } else {
                for c in 0..4 {
                    let x = _mm512_loadu_si512(blk.add(64 * c).cast());
                    q[c] = _mm512_and_si512(x, low);
                    q[c + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(x), low);
                }
            }
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(qbytes).cast()));
            let m = if KIND == Q4_1 {
                _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(qbytes + 2 * NR).cast()))
            } else {
                _mm512_setzero_ps()
            };
            let (qa, ds, asums) = (aq.add(b * MR * QK), ads.add(b * 2 * MR), asum.add(b * MR));
            // each row's integer sums in two chains where the rows are few (their latencies overlap), one chunk
            // of values at a time for every row (independent instructions side by side)
            let split = R < 4;
            let mut sums = [[_mm512_setzero_si512(); 2]; R];
            if offset != 0 {
                for (i, s) in sums.iter_mut().enumerate() {
                    s[0] = _mm512_set1_epi32(-offset * *asums.add(i));
                }
            }
            for (c, q) in q.iter().enumerate() {
                for (i, s) in sums.iter_mut().enumerate() {
                    let x = _mm512_set1_epi32(std::ptr::read_unaligned(qa.add(i * QK + 4 * c).cast::<i32>()));
                    let chain = if split { c % 2 } else { 0 };
                    s[chain] = _mm512_dpbusd_epi32(s[chain], *q, x);
                }
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                // integer additions: exact, so the split changes no bit
                let sum = if split { _mm512_add_epi32(sums[i][0], sums[i][1]) } else { sums[i][0] };
                let da = _mm512_set1_ps(*ds.add(i));
                *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d, da), *acc);
                if KIND == Q4_1 {
                    *acc = _mm512_fmadd_ps(m, _mm512_set1_ps(*ds.add(MR + i)), *acc);
                }
            }
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: o holds 16 floats
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
}

#[cfg(test)]
mod tests {
    use super::super::panel::{Acts, Panel};
    use super::Acts as RepackedActs;
    use super::*;
    use crate::quant::decode;

    /// The repacked kernel gives every bit the prefill panel kernel gives, for 1 to 11 activation rows, a weight
    /// of rows not a multiple of 16 and lanes from a panel's middle; and agrees with decoding the weights.
    #[test]
    fn repacked_equals_the_panel_kernel_bitwise() {
        for dtype in [DType::Q4_0, DType::Q4_1, DType::Q8_0] {
            if !available(dtype) {
                println!("SKIPPED: this CPU lacks AVX-512 VNNI (or WEBTENSOR_CPU_NO_VNNI is set)");
                return;
            }
            let (k, rows) = (256, 37);
            let bb = k / dtype.block_size() * dtype.block_bytes();
            let w = super::super::tests::blocks(dtype, k * rows, 11 + bb as u64);
            let rep = Repacked::new(dtype, &w, rows, k);
            assert_eq!((rep.rows(), rep.k()), (rows, k));
            let mut wf = vec![0f32; k * rows];
            decode(dtype, &w, &mut wf);
            for m in [1, 2, 3, 7, 8, 11] {
                let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 + 5 * m) % 101) as f32 / 50.0 - 1.0).collect();
                let rows_q: Vec<Q8Row> = a.chunks_exact(k).map(Q8Row::quantize).collect();
                let acts = RepackedActs::quantize(&a, k);
                for p in 0..rows.div_ceil(NR) {
                    let lanes = 0..NR.min(rows - p * NR);
                    let (mut got, mut want) = (vec![f32::NAN; m * NR], vec![f32::NAN; m * NR]);
                    // SAFETY: available() checked; got is [m, 16]
                    unsafe { rep.multiply(p, &acts, got.as_mut_ptr(), NR, lanes.clone()) };
                    let mut panel = Panel::new(dtype, k);
                    panel.fill(lanes.clone().map(|j| &w[(p * NR + j) * bb..(p * NR + j + 1) * bb]));
                    // SAFETY: as above
                    unsafe { panel.multiply(&Acts::quantize(dtype, &a, k), want.as_mut_ptr(), NR, lanes.len()) };
                    for r in 0..m {
                        for j in lanes.clone() {
                            let (g, x) = (got[r * NR + j], want[r * NR + j]);
                            assert_eq!(g.to_bits(), x.to_bits(), "{dtype} m {m} row {r} col {}", p * NR + j);
                            let wr = &wf[(p * NR + j) * k..(p * NR + j + 1) * k];
                            let q = &rows_q[r];
                            let exact: f64 = (0..k).map(|i| wr[i] as f64 * q.d[i / QK] as f64 * q.qs[i] as f64).sum();
                            let scale: f64 = (0..k).map(|i| (wr[i] as f64 * a[r * k + i] as f64).abs()).sum();
                            assert!((g as f64 - exact).abs() <= 1e-5 * scale, "{dtype}: {g} vs {exact}");
                        }
                    }
                    // a panel's middle lanes land at the first column
                    if lanes.len() > 5 {
                        let mut mid = vec![f32::NAN; m * 3];
                        // SAFETY: as above; mid is [m, 3]
                        unsafe { rep.multiply(p, &acts, mid.as_mut_ptr(), 3, 2..5) };
                        for r in 0..m {
                            assert_eq!(&mid[r * 3..r * 3 + 3], &got[r * NR + 2..r * NR + 5]);
                        }
                    }
                }
            }
        }
    }
}
