//! The prefill matmul `c = a @ t(w)` with `w` block-quantized, in integer arithmetic with AVX-512 VNNI: a panel
//! of 16 weight rows is unpacked once to bytes in the order `vpdpbusd` reads them (each 64-byte vector holds four
//! consecutive values of each of the 16 rows), then every row of `a`, rounded to 8-bit blocks of 32 ([`Q8Row`],
//! as the mat-vec kernels round it), is multiplied with it eight rows at a time: one `vpdpbusd` takes four values
//! of one activation row against the 16 weight rows, so a block of 32 is 8 instructions per activation row into
//! 16 i32 lanes, then one conversion and two float multiply-adds with the block's scales. llama.cpp's prefill
//! does the same arithmetic on weights it repacks at load; here the unpacking costs a panel's size once per
//! matmul, against `m` rows of work.
//!
//! Each block of 32 weight values is `s·q − o` with `q` a byte:
//! - unsigned types (Q4_1, Q5_1, Q4_K, Q5_K: `q` from 0 to 31, `o` their offset or min) multiply `q` (unsigned)
//!   by the activations (signed) and subtract `o` times the activation block's sum;
//! - signed types (Q4_0, Q5_0, Q8_0: `q` from −128 to 127, `o` = 0) multiply the activations made unsigned
//!   (`q_a + 128`, the byte with its top bit flipped) by `q` (signed), starting each block's sums at
//!   `−128·Σ q` so that they come out exact.
//!
//! Q6_K's blocks of 32 are two groups of 16 with their own scales (signed, `q − 32`): each half has its own sums,
//! as IQ2_XS's, IQ2_S's and IQ1_M's. The IQ, TQ and MXFP4 types are signed, their groups' bytes from their grids and
//! tables (`iq::for_each_group`). Q2_K and Q3_K keep the f32 panels (`quant.rs`).

use super::row::{Q8Row, QK};
use crate::backend::cpu::parallel::for_chunks;
use crate::dtype::DType;
use crate::quant::*;
use std::arch::x86_64::*;

/// Weight rows in a panel: the 16 i32 lanes of a 512-bit vector.
pub(crate) const NR: usize = 16;
/// Activation rows multiplied with a panel at a time (accumulators in registers: 2 × MR of the 32).
const MR: usize = 8;
/// Bytes of the unpacked values of one block of 32 for the panel's 16 rows.
const GROUP_BYTES: usize = QK * NR;

/// Whether this CPU has the instructions (AVX-512 F, BW and VNNI), checked once; `WEBTENSOR_CPU_NO_VNNI` turns
/// the path off as it does the mat-vec kernels'.
pub(crate) fn available(dtype: DType) -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let has = *HAS.get_or_init(|| {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
            && std::env::var_os("WEBTENSOR_CPU_NO_VNNI").is_none()
    });
    has && signed(dtype).is_some()
}

/// Whether `dtype`'s panel values are signed (`None`: the type has no panel form).
fn signed(dtype: DType) -> Option<bool> {
    use DType::*;
    match dtype {
        Q4_0 | Q5_0 | Q8_0 | Q6_K => Some(true),
        // the IQ, TQ and MXFP4 types: signed bytes from their grids and tables (`iq::for_each_group`)
        IQ4_NL | IQ4_XS | MXFP4 | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ1_M | TQ1_0 | TQ2_0 => {
            Some(true)
        }
        Q4_1 | Q5_1 | Q4_K | Q5_K => Some(false),
        _ => None,
    }
}

/// Whether `dtype`'s two halves of a group of 32 have scales of their own.
fn halves(dtype: DType) -> bool {
    matches!(dtype, DType::Q6_K | DType::IQ2_XS | DType::IQ2_S | DType::IQ1_M)
}

/// The activations of a matmul, rounded to 8-bit blocks as [`Q8Row`] rounds them, in groups of [`MR`] rows laid
/// out as the kernel reads them: per block, the group's rows' 32 values (flipped to unsigned for the signed
/// types) one after another, and their scales and sums (`[d, s]` per row). A last group of fewer rows is padded
/// with zero rows.
pub(crate) struct Acts {
    groups: Vec<Group>,
    rows: usize,
}

#[derive(Default)]
struct Group {
    q: Vec<u8>,
    ds: Vec<f32>,
}

impl Acts {
    /// `a [m, k]` (row-major) rounded for weights of `dtype`, on the CPU's threads.
    pub(crate) fn quantize(dtype: DType, a: &[f32], k: usize) -> Acts {
        let flip = if signed(dtype).unwrap_or(false) { 0x80 } else { 0 };
        let (rows, nb) = (a.len() / k, k / QK);
        let mut groups: Vec<Group> = (0..rows.div_ceil(MR)).map(|_| Group::default()).collect();
        for_chunks(&mut groups, 1, |gi, group| {
            let g = &mut group[0];
            (g.q, g.ds) = (vec![0; nb * MR * QK], vec![0.0; nb * MR * 2]);
            for i in 0..MR.min(rows - gi * MR) {
                let r = gi * MR + i;
                let row = Q8Row::quantize(&a[r * k..(r + 1) * k]);
                for b in 0..nb {
                    let dst = &mut g.q[(b * MR + i) * QK..(b * MR + i + 1) * QK];
                    dst.iter_mut().zip(&row.qs[b * QK..(b + 1) * QK]).for_each(|(d, &q)| *d = q as u8 ^ flip);
                    (g.ds[(b * MR + i) * 2], g.ds[(b * MR + i) * 2 + 1]) = (row.d[b], row.s[b]);
                }
            }
        });
        Acts { groups, rows }
    }

    /// Rows.
    pub(crate) fn len(&self) -> usize {
        self.rows
    }
}

/// Up to [`NR`] weight rows unpacked: for each block of 32, the values in `vpdpbusd`'s order
/// (`q[b][i / 4][row][i % 4]`), and per row the scales and the signed types' starting sums of its two halves
/// (`[b][half][row]`: equal scales but for Q6_K), and the offset.
pub(crate) struct Panel {
    dtype: DType,
    signed: bool,
    halves: bool,
    q: Vec<u8>,
    s: Vec<f32>,
    o: Vec<f32>,
    start: Vec<i32>,
}

impl Panel {
    /// An empty panel for rows of `k` values of `dtype` (a type [`available`] takes).
    pub(crate) fn new(dtype: DType, k: usize) -> Panel {
        let nb = k / QK;
        let (signed, halves) = (signed(dtype) == Some(true), halves(dtype));
        let (q, s, o, start) =
            (vec![0; nb * GROUP_BYTES], vec![0.0; nb * 2 * NR], vec![0.0; nb * NR], vec![0; nb * 2 * NR]);
        Panel { dtype, signed, halves, q, s, o, start }
    }

    /// Unpacks `rows` (each the block bytes of one weight row; at most [`NR`]); the lanes past them are zero.
    pub(crate) fn fill<'a>(&mut self, rows: impl ExactSizeIterator<Item = &'a [u8]>) {
        if rows.len() < NR {
            self.q.fill(0);
            self.s.fill(0.0);
            self.o.fill(0.0);
            self.start.fill(0);
        }
        let mut vals = [0u8; QK];
        for (r, bytes) in rows.enumerate().take(NR) {
            let mut b = 0;
            for_each_group(self.dtype, bytes, &mut vals, |vals, s, o| {
                let q = &mut self.q[b * GROUP_BYTES..(b + 1) * GROUP_BYTES];
                for (quad, v) in vals.chunks_exact(4).enumerate() {
                    q[quad * NR * 4 + r * 4..quad * NR * 4 + r * 4 + 4].copy_from_slice(v);
                }
                for half in 0..2 {
                    self.s[(2 * b + half) * NR + r] = s[half];
                    if self.signed {
                        let sum: i32 = vals[16 * half..16 * half + 16].iter().map(|&v| v as i8 as i32).sum();
                        self.start[(2 * b + half) * NR + r] = -128 * sum;
                    }
                }
                self.o[b * NR + r] = o;
                b += 1;
            });
        }
    }

    /// `c[r][j] = Σ a[r] · w[j]` for every activation row and the panel's first `cols` weight rows, written at
    /// `c + r * ldc + j`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VNNI ([`available`]); the panel and `acts` have the same `k`; every
    /// `c + r * ldc + j` (r < `acts.len()`, j < `cols` ≤ [`NR`]) is valid for writes and no other thread writes it.
    pub(crate) unsafe fn multiply(&self, acts: &Acts, c: *mut f32, ldc: usize, cols: usize) {
        for (gi, group) in acts.groups.iter().enumerate() {
            let mut out = [[0f32; NR]; MR];
            // SAFETY: the caller's features; the group and the panel have the same blocks
            unsafe {
                match (self.signed, self.halves) {
                    (true, true) => tile::<true, true>(self, group, &mut out),
                    (true, false) => tile::<true, false>(self, group, &mut out),
                    (false, _) => tile::<false, false>(self, group, &mut out),
                }
            }
            for (i, o) in out.iter().enumerate().take(acts.rows - gi * MR) {
                // SAFETY: the caller's: row gi * MR + i < acts.len(), columns < cols
                unsafe { std::ptr::copy_nonoverlapping(o.as_ptr(), c.add((gi * MR + i) * ldc), cols) };
            }
        }
    }
}

/// A group of activation rows times the panel into `out` (MR × 16); with `HALVES`, each block's two halves
/// summed and scaled apart.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const SIGNED: bool, const HALVES: bool>(p: &Panel, g: &Group, out: &mut [[f32; NR]; MR]) {
    let nb = p.o.len() / NR;
    let mut acc = [_mm512_setzero_ps(); MR];
    let (aq, ads, wq) = (g.q.as_ptr(), g.ds.as_ptr(), p.q.as_ptr());
    for b in 0..nb {
        // SAFETY (the loads): the panel holds nb groups of GROUP_BYTES bytes and NR scales each, the group nb
        // blocks of MR rows of 32 bytes and MR pairs of floats
        unsafe {
            let start = |half: usize| _mm512_loadu_si512(p.start.as_ptr().add((2 * b + half) * NR).cast());
            let (lo, hi) = match (SIGNED, HALVES) {
                (true, true) => (start(0), start(1)),
                (true, false) => (_mm512_add_epi32(start(0), start(1)), _mm512_setzero_si512()),
                (false, _) => (_mm512_setzero_si512(), _mm512_setzero_si512()),
            };
            // one set of sums per block, or the halves' (the second half's quads into `sums_hi`)
            let (mut sums, mut sums_hi) = ([lo; MR], [hi; MR]);
            let (qa, qw) = (aq.add(b * MR * QK), wq.add(b * GROUP_BYTES));
            for quad in 0..QK / 4 {
                let w = _mm512_loadu_si512(qw.add(quad * NR * 4).cast());
                let into = if HALVES && quad >= QK / 8 { &mut sums_hi } else { &mut sums };
                for (i, sum) in into.iter_mut().enumerate() {
                    let x = _mm512_set1_epi32(std::ptr::read_unaligned(qa.add(i * QK + quad * 4).cast::<i32>()));
                    *sum = if SIGNED { _mm512_dpbusd_epi32(*sum, x, w) } else { _mm512_dpbusd_epi32(*sum, w, x) };
                }
            }
            let s = _mm512_loadu_ps(p.s.as_ptr().add(2 * b * NR));
            let s_hi = _mm512_loadu_ps(p.s.as_ptr().add((2 * b + 1) * NR));
            let o = _mm512_loadu_ps(p.o.as_ptr().add(b * NR));
            let ds = ads.add(b * MR * 2);
            for (i, a) in acc.iter_mut().enumerate() {
                let d = _mm512_set1_ps(*ds.add(2 * i));
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[i]), _mm512_mul_ps(s, d), *a);
                if HALVES {
                    *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums_hi[i]), _mm512_mul_ps(s_hi, d), *a);
                }
                if !SIGNED {
                    *a = _mm512_fnmadd_ps(o, _mm512_set1_ps(*ds.add(2 * i + 1)), *a);
                }
            }
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: o holds 16 floats
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), a) };
    }
}

/// Calls `f(values, [s_lo, s_hi], o)` for each block of 32 of a weight row (`bytes`, whole blocks of `dtype`), its
/// values as bytes (two's complement for the signed types) with `value = s·q − o`, `s` the first half's scale
/// for the first 16 values and the second's for the rest (the same but for Q6_K).
pub(super) fn for_each_group(
    dtype: DType,
    bytes: &[u8],
    vals: &mut [u8; QK],
    mut f: impl FnMut(&[u8; QK], [f32; 2], f32),
) {
    let nibbles = |qs: &[u8; 16], vals: &mut [u8; QK], sub: u8| {
        for j in 0..16 {
            vals[j] = (qs[j] & 0x0f).wrapping_sub(sub);
            vals[j + 16] = (qs[j] >> 4).wrapping_sub(sub);
        }
    };
    // the fifth bits, added to nibbles already offset (wrapping: the sum is the offset 5-bit value)
    let fifth = |qh: [u8; 4], vals: &mut [u8; QK]| {
        let qh = u32::from_le_bytes(qh);
        for j in 0..16 {
            vals[j] = vals[j].wrapping_add(((qh >> j) << 4) as u8 & 0x10);
            vals[j + 16] = vals[j + 16].wrapping_add(((qh >> (j + 12)) & 0x10) as u8);
        }
    };
    match dtype {
        DType::Q4_0 => blocks::<BlockQ4_0>(bytes).iter().for_each(|b| {
            nibbles(&b.qs, vals, 8);
            f(vals, [b.d.get(); 2], 0.0)
        }),
        DType::Q4_1 => blocks::<BlockQ4_1>(bytes).iter().for_each(|b| {
            nibbles(&b.qs, vals, 0);
            f(vals, [b.d.get(); 2], -b.m.get())
        }),
        DType::Q5_0 => blocks::<BlockQ5_0>(bytes).iter().for_each(|b| {
            nibbles(&b.qs, vals, 16);
            fifth(b.qh, vals);
            f(vals, [b.d.get(); 2], 0.0)
        }),
        DType::Q5_1 => blocks::<BlockQ5_1>(bytes).iter().for_each(|b| {
            nibbles(&b.qs, vals, 0);
            fifth(b.qh, vals);
            f(vals, [b.d.get(); 2], -b.m.get())
        }),
        DType::Q8_0 => blocks::<BlockQ8_0>(bytes).iter().for_each(|b| {
            vals.copy_from_slice(&b.qs);
            f(vals, [b.d.get(); 2], 0.0)
        }),
        DType::Q6_K => blocks::<BlockQ6K>(bytes).iter().for_each(|b| q6_k_groups(b, vals, &mut f)),
        DType::Q4_K => blocks::<BlockQ4K>(bytes)
            .iter()
            .for_each(|b| k_groups((b.d.get(), b.dmin.get()), &b.scales, None, &b.qs, vals, &mut f)),
        DType::Q5_K => blocks::<BlockQ5K>(bytes)
            .iter()
            .for_each(|b| k_groups((b.d.get(), b.dmin.get()), &b.scales, Some(&b.qh), &b.qs, vals, &mut f)),
        _ => {
            let known = super::iq::for_each_group(dtype, bytes, |q, s| {
                vals.iter_mut().zip(q).for_each(|(v, &x)| *v = x as u8);
                f(vals, s, 0.0)
            });
            debug_assert!(known, "{dtype} has no panel form");
        }
    }
}

/// The eight groups of 32 of a Q4_K (`qh` None) or Q5_K super-block: `d·sc·q − dmin·m`.
fn k_groups(
    (d, dmin): (f32, f32),
    scales: &[u8; 12],
    qh: Option<&[u8; 32]>,
    qs: &[u8; 128],
    vals: &mut [u8; QK],
    f: &mut impl FnMut(&[u8; QK], [f32; 2], f32),
) {
    for j in 0..8 {
        let (sc, m) = scale_min_k4(scales, j);
        let q = &qs[(j / 2) * 32..(j / 2) * 32 + 32];
        let shift = if j % 2 == 0 { 0 } else { 4 };
        for l in 0..32 {
            let high = qh.map_or(0, |qh| ((qh[l] >> j) & 1) << 4);
            vals[l] = ((q[l] >> shift) & 0x0f) | high;
        }
        f(vals, [d * sc as f32; 2], dmin * m as f32);
    }
}

/// The eight blocks of 32 of a Q6_K super-block: `d·sc·(q − 32)`, a scale for each 16 (as ggml's decoder orders
/// them: in each half of 128, value l + 32·j takes bits from `ql`/`qh` by j and the scale `2·j + l / 16`).
fn q6_k_groups(b: &BlockQ6K, vals: &mut [u8; QK], f: &mut impl FnMut(&[u8; QK], [f32; 2], f32)) {
    let d = b.d.get();
    for n in 0..2 {
        let (ql, qh, sc) = (&b.ql[n * 64..n * 64 + 64], &b.qh[n * 32..n * 32 + 32], &b.scales[n * 8..n * 8 + 8]);
        for j in 0..4 {
            for l in 0..32 {
                let lowq = match j {
                    0 => ql[l] & 0xf,
                    1 => ql[l + 32] & 0xf,
                    2 => ql[l] >> 4,
                    _ => ql[l + 32] >> 4,
                };
                let q = lowq | (((qh[l] >> (2 * j)) & 3) << 4);
                vals[l] = (q as i8 - 32) as u8;
            }
            let scale = |h: usize| d * (sc[2 * j + h] as i8) as f32;
            f(vals, [scale(0), scale(1)], 0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::decode;

    /// The panel product against decoding the weights to f32 and a float64 product with the rounded activations,
    /// for every type with a panel form, full and partial panels and tiles.
    #[test]
    fn panels_match_decoding_and_rounded_activations() {
        use DType::*;
        for dtype in [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K] {
            if !available(dtype) {
                println!("SKIPPED: this CPU lacks AVX-512 VNNI (or WEBTENSOR_CPU_NO_VNNI is set)");
                return;
            }
            let k = 512;
            let rows = 13;
            let bb = k / dtype.block_size() * dtype.block_bytes();
            let w = super::super::tests::blocks(dtype, k * rows, 7 + k as u64 + bb as u64);
            let mut wf = vec![0f32; k * rows];
            decode(dtype, &w, &mut wf);
            let m = 11;
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 37 + 5) % 101) as f32 / 50.0 - 1.0).collect();
            let acts = Acts::quantize(dtype, &a, k);
            let mut panel = Panel::new(dtype, k);
            panel.fill((0..rows).map(|r| &w[r * bb..(r + 1) * bb]));
            let mut c = vec![f32::NAN; m * rows];
            // SAFETY: available() checked; c is [m, rows]
            unsafe { panel.multiply(&acts, c.as_mut_ptr(), rows, rows) };
            for r in 0..m {
                let q = Q8Row::quantize(&a[r * k..(r + 1) * k]);
                for j in 0..rows {
                    let wr = &wf[j * k..(j + 1) * k];
                    let want: f64 = (0..k).map(|i| wr[i] as f64 * q.d[i / QK] as f64 * q.qs[i] as f64).sum();
                    let scale: f64 = (0..k).map(|i| (wr[i] as f64 * a[r * k + i] as f64).abs()).sum();
                    let got = c[r * rows + j] as f64;
                    assert!((got - want).abs() <= 1e-5 * scale, "{dtype} row {r} col {j}: {got} vs {want}");
                }
            }
        }
    }
}
