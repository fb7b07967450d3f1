//! The decoders of ggml's importance-matrix (IQ), ternary (TQ) and MXFP4 block types (`dequantize_row_iq*`,
//! `_tq*` and `_mxfp4` of ggml-quants.c), reading the typed blocks of [`super::blocks`] and the tables of
//! [`super::grids`]. Every value these types encode is exact in f32 (an f16 scale times a small integer, or a
//! power of two times one), so the order of the products does not change a bit; each is checked against the
//! `gguf` Python package's decoder in the differential suite.
//!
//! The grid types share a shape: 8 groups of 32 values, each group 4 rows of 8 (a grid row of 8, or two of 4),
//! each row's values a grid byte times a sign and the group's (or half-group's) scale.

use super::blocks::*;
use super::grids::*;

/// Byte `j` of a packed grid row.
#[inline(always)]
fn byte(row: u64, j: usize) -> f32 {
    ((row >> (8 * j)) & 0xFF) as f32
}

/// ±1 from bit `j` of a sign byte (set: negative).
#[inline(always)]
fn sign(s: u8, j: usize) -> f32 {
    if s & (1 << j) != 0 {
        -1.0
    } else {
        1.0
    }
}

/// `scale · grid row · signs` into 8 values.
#[inline(always)]
fn grid_row(scale: f32, row: u64, signs: u8, y: &mut [f32]) {
    for (j, o) in y[..8].iter_mut().enumerate() {
        *o = scale * byte(row, j) * sign(signs, j);
    }
}

/// A 4-bit non-linear group: `scale · table[nibble]`, low nibbles the first 16 values, high nibbles the next.
#[inline(always)]
fn nibbles(qs: &[u8; 16], table: &[i8; 16], scale: f32, y: &mut [f32]) {
    for (j, &q) in qs.iter().enumerate() {
        y[j] = scale * table[(q & 15) as usize] as f32;
        y[j + 16] = scale * table[(q >> 4) as usize] as f32;
    }
}

pub(super) fn iq4_nl(b: &BlockIq4Nl, y: &mut [f32]) {
    nibbles(&b.qs, &KVALUES_IQ4NL, b.d.get(), y);
}

pub(super) fn mxfp4(b: &BlockMxfp4, y: &mut [f32]) {
    nibbles(&b.qs, &KVALUES_MXFP4, e8m0_half(b.e), y);
}

/// IQ4_XS's 6-bit scale of group `ib` (0..64; the value is `ls − 32`).
#[inline(always)]
pub(crate) fn iq4_xs_scale(b: &BlockIq4Xs, ib: usize) -> i32 {
    let low = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 15;
    let high = (u16::from_le_bytes(b.scales_h) >> (2 * ib)) & 3;
    (low as i32) | ((high as i32) << 4)
}

pub(super) fn iq4_xs(b: &BlockIq4Xs, y: &mut [f32]) {
    let d = b.d.get();
    for ib in 0..8 {
        let qs: &[u8; 16] = b.qs[16 * ib..16 * ib + 16].try_into().expect("16 bytes");
        nibbles(qs, &KVALUES_IQ4NL, d * (iq4_xs_scale(b, ib) - 32) as f32, &mut y[32 * ib..]);
    }
}

/// The little-endian u32 at byte `at` of `bytes`.
#[inline(always)]
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

pub(super) fn iq2_xxs(b: &BlockIq2Xxs, y: &mut [f32]) {
    let d = b.d.get();
    for ib in 0..8 {
        let chunk = &b.qs[8 * ib..8 * ib + 8];
        let aux = u32_at(chunk, 4);
        let scale = d * (0.5 + (aux >> 28) as f32) * 0.25;
        for l in 0..4 {
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
            grid_row(scale, IQ2XXS_GRID[chunk[l] as usize], signs, &mut y[32 * ib + 8 * l..]);
        }
    }
}

/// A 4-bit scale per 16 values (IQ2_XS, IQ2_S): group `ib`'s first half's in the low nibble, its second's high.
#[inline(always)]
fn half_scales(d: f32, sc: u8) -> [f32; 2] {
    [d * (0.5 + (sc & 15) as f32) * 0.25, d * (0.5 + (sc >> 4) as f32) * 0.25]
}

pub(super) fn iq2_xs(b: &BlockIq2Xs, y: &mut [f32]) {
    let d = b.d.get();
    for ib in 0..8 {
        let scale = half_scales(d, b.scales[ib]);
        for l in 0..4 {
            let at = 2 * (4 * ib + l);
            let q = u16::from_le_bytes([b.qs[at], b.qs[at + 1]]);
            let row = IQ2XS_GRID[(q & 511) as usize];
            grid_row(scale[l / 2], row, KSIGNS_IQ2XS[(q >> 9) as usize], &mut y[32 * ib + 8 * l..]);
        }
    }
}

pub(super) fn iq2_s(b: &BlockIq2S, y: &mut [f32]) {
    let d = b.d.get();
    for ib in 0..8 {
        let scale = half_scales(d, b.scales[ib]);
        for l in 0..4 {
            let idx = b.qs[4 * ib + l] as usize | ((((b.qh[ib] >> (2 * l)) & 3) as usize) << 8);
            grid_row(scale[l / 2], IQ2S_GRID[idx], b.signs[4 * ib + l], &mut y[32 * ib + 8 * l..]);
        }
    }
}

/// Two grid rows of 4 (IQ3_XXS, IQ3_S) as one row of 8.
#[inline(always)]
fn rows4(g1: u32, g2: u32) -> u64 {
    g1 as u64 | ((g2 as u64) << 32)
}

pub(super) fn iq3_xxs(b: &BlockIq3Xxs, y: &mut [f32]) {
    let d = b.d.get();
    for ib in 0..8 {
        let aux = u32_at(&b.scales_signs, 4 * ib);
        let scale = d * (0.5 + (aux >> 28) as f32) * 0.5;
        for l in 0..4 {
            let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
            let (i1, i2) = (b.qs[8 * ib + 2 * l] as usize, b.qs[8 * ib + 2 * l + 1] as usize);
            grid_row(scale, rows4(IQ3XXS_GRID[i1], IQ3XXS_GRID[i2]), signs, &mut y[32 * ib + 8 * l..]);
        }
    }
}

pub(super) fn iq3_s(b: &BlockIq3S, y: &mut [f32]) {
    let d = b.d.get();
    for ib in 0..8 {
        let scale = d * (1 + 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 15) as i32) as f32;
        for l in 0..4 {
            let hi = |k: usize| (((b.qh[ib] >> k) & 1) as usize) << 8;
            let i1 = b.qs[8 * ib + 2 * l] as usize | hi(2 * l);
            let i2 = b.qs[8 * ib + 2 * l + 1] as usize | hi(2 * l + 1);
            grid_row(scale, rows4(IQ3S_GRID[i1], IQ3S_GRID[i2]), b.signs[4 * ib + l], &mut y[32 * ib + 8 * l..]);
        }
    }
}

/// `scale · (grid value + delta)` for a row of `IQ1S_GRID` (values −1, 0, 1 as signed bytes).
#[inline(always)]
fn iq1_row(scale: f32, row: u64, delta: f32, y: &mut [f32]) {
    for (j, o) in y[..8].iter_mut().enumerate() {
        *o = scale * (((row >> (8 * j)) & 0xFF) as u8 as i8 as f32 + delta);
    }
}

pub(super) fn iq1_s(b: &BlockIq1S, y: &mut [f32]) {
    let d = b.d.get();
    for ib in 0..8 {
        let h = u16::from_le_bytes([b.qh[2 * ib], b.qh[2 * ib + 1]]);
        let scale = d * (2 * ((h >> 12) & 7) + 1) as f32;
        let delta = if h & 0x8000 != 0 { -0.125 } else { 0.125 };
        for l in 0..4 {
            let idx = b.qs[4 * ib + l] as usize | ((((h >> (3 * l)) & 7) as usize) << 8);
            iq1_row(scale, IQ1S_GRID[idx], delta, &mut y[32 * ib + 8 * l..]);
        }
    }
}

pub(super) fn iq1_m(b: &BlockIq1M, y: &mut [f32]) {
    let d = b.d();
    for ib in 0..8 {
        let sc = u16::from_le_bytes([b.scales[2 * (ib / 2)], b.scales[2 * (ib / 2) + 1]]) >> (6 * (ib % 2));
        let scales = [d * (2 * (sc & 7) + 1) as f32, d * (2 * ((sc >> 3) & 7) + 1) as f32];
        for l in 0..4 {
            // group l's high index bits and delta sign: a nibble of qh's two bytes for this group of 32
            let nib = (b.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15;
            let idx = b.qs[4 * ib + l] as usize | (((nib & 7) as usize) << 8);
            let delta = if nib & 8 != 0 { -0.125 } else { 0.125 };
            iq1_row(scales[l / 2], IQ1S_GRID[idx], delta, &mut y[32 * ib + 8 * l..]);
        }
    }
}

/// Trit `n` (0 the most significant) of a byte holding 5 (or 4) base-3 digits as a fixed-point fraction.
#[inline(always)]
pub(crate) fn trit(x: u8, n: u32) -> i32 {
    ((x.wrapping_mul(3u8.pow(n)) as u32 * 3) >> 8) as i32
}

pub(super) fn tq1_0(b: &BlockTq1_0, y: &mut [f32]) {
    let d = b.d.get();
    for n in 0..5 {
        for m in 0..32 {
            y[32 * n as usize + m] = (trit(b.qs[m], n) - 1) as f32 * d;
        }
        for m in 0..16 {
            y[160 + 16 * n as usize + m] = (trit(b.qs[32 + m], n) - 1) as f32 * d;
        }
    }
    for n in 0..4 {
        for j in 0..4 {
            y[240 + 4 * n as usize + j] = (trit(b.qh[j], n) - 1) as f32 * d;
        }
    }
}

pub(super) fn tq2_0(b: &BlockTq2_0, y: &mut [f32]) {
    let d = b.d.get();
    for h in 0..2 {
        for l in 0..4 {
            for m in 0..32 {
                let q = (b.qs[32 * h + m] >> (2 * l)) & 3;
                y[128 * h + 32 * l + m] = (q as i32 - 1) as f32 * d;
            }
        }
    }
}
