//! The portable integer dot products of the IQ, TQ and MXFP4 block types (their definitions, and the kernels of
//! CPUs without AVX2): each group of 32 weights unpacked into signed bytes (a grid row's magnitudes times its
//! signs, a 4-bit index's non-linear value, a trit) with its scale, dotted with the activations' bytes by plain
//! loops that the compiler vectorizes. IQ1_S's and IQ1_M's ±1/8 delta goes against the activations' own sums.
//! Layouts and values as `crate::quant::iq` decodes them.

use super::row::{Q8Row, QK};
#[cfg(target_arch = "x86_64")]
use crate::dtype::DType;
use crate::quant::grids::*;
use crate::quant::iq::{iq4_xs_scale, trit};
use crate::quant::*;

/// `Σ q[i] * a[i]` in i32.
#[inline(always)]
fn dot_i8(q: &[i8], a: &[i8]) -> i32 {
    q.iter().zip(a).map(|(&q, &a)| q as i32 * a as i32).sum()
}

/// `Σ a[i]` in i32.
#[inline(always)]
fn sum_i8(a: &[i8]) -> i32 {
    a.iter().map(|&a| a as i32).sum()
}

/// The activations of 32-block `b`.
#[inline(always)]
fn act(a: &Q8Row, b: usize) -> &[i8] {
    &a.qs[b * QK..(b + 1) * QK]
}

/// A 4-bit non-linear group of 32 (`table[nibble]`, low nibbles first) into `q`.
#[inline(always)]
fn unpack_nibbles(qs: &[u8; 16], table: &[i8; 16], q: &mut [i8; 32]) {
    for j in 0..16 {
        q[j] = table[(qs[j] & 15) as usize];
        q[j + 16] = table[(qs[j] >> 4) as usize];
    }
}

#[inline(always)]
pub(super) fn iq4_nl(w: &[u8], a: &Q8Row) -> f32 {
    let mut q = [0i8; 32];
    let mut sum = 0f32;
    for (b, blk) in blocks::<BlockIq4Nl>(w).iter().enumerate() {
        unpack_nibbles(&blk.qs, &KVALUES_IQ4NL, &mut q);
        sum += blk.d.get() * a.d[b] * dot_i8(&q, act(a, b)) as f32;
    }
    sum
}

#[inline(always)]
pub(super) fn mxfp4(w: &[u8], a: &Q8Row) -> f32 {
    let mut q = [0i8; 32];
    let mut sum = 0f32;
    for (b, blk) in blocks::<BlockMxfp4>(w).iter().enumerate() {
        unpack_nibbles(&blk.qs, &KVALUES_MXFP4, &mut q);
        sum += e8m0_half(blk.e) * a.d[b] * dot_i8(&q, act(a, b)) as f32;
    }
    sum
}

#[inline(always)]
pub(super) fn iq4_xs(w: &[u8], a: &Q8Row) -> f32 {
    let mut q = [0i8; 32];
    let mut sum = 0f32;
    for (sb, blk) in blocks::<BlockIq4Xs>(w).iter().enumerate() {
        let d = blk.d.get();
        for ib in 0..8 {
            let qs: &[u8; 16] = blk.qs[16 * ib..16 * ib + 16].try_into().expect("16 bytes");
            unpack_nibbles(qs, &KVALUES_IQ4NL, &mut q);
            let b = sb * 8 + ib;
            sum += d * (iq4_xs_scale(blk, ib) - 32) as f32 * a.d[b] * dot_i8(&q, act(a, b)) as f32;
        }
    }
    sum
}

/// A grid row of 8 magnitudes with its sign byte (bit j set: value j negative) into `q`.
#[inline(always)]
fn signed_row(row: u64, signs: u8, q: &mut [i8]) {
    for (j, o) in q[..8].iter_mut().enumerate() {
        let m = ((row >> (8 * j)) & 0xFF) as i8;
        *o = if signs & (1 << j) != 0 { -m } else { m };
    }
}

/// The little-endian u32 at byte `at` of `bytes`.
#[inline(always)]
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// `Σ` over the 8 groups of 32 of each super-block of `(scale(blk, ib) as a f32 multiple of d, unpack(blk, ib, q))`.
#[inline(always)]
fn grid_dot<B: Block>(
    w: &[u8],
    a: &Q8Row,
    d: impl Fn(&B) -> f32,
    group: impl Fn(&B, usize, &mut [i8; 32]) -> [f32; 2],
) -> f32 {
    let mut q = [0i8; 32];
    let mut sum = 0f32;
    for (sb, blk) in blocks::<B>(w).iter().enumerate() {
        let d = d(blk);
        for ib in 0..8 {
            let [s0, s1] = group(blk, ib, &mut q);
            let (b, x) = (sb * 8 + ib, act(a, sb * 8 + ib));
            let halves = s0 * dot_i8(&q[..16], &x[..16]) as f32 + s1 * dot_i8(&q[16..], &x[16..]) as f32;
            sum += d * a.d[b] * halves;
        }
    }
    sum
}

#[inline(always)]
pub(super) fn iq2_xxs(w: &[u8], a: &Q8Row) -> f32 {
    grid_dot(w, a, |b: &BlockIq2Xxs| b.d.get(), iq2_xxs_group)
}

/// Group `ib` of an IQ2_XXS block into `q`; its scales as multiples of d.
#[inline(always)]
fn iq2_xxs_group(b: &BlockIq2Xxs, ib: usize, q: &mut [i8; 32]) -> [f32; 2] {
    let chunk = &b.qs[8 * ib..8 * ib + 8];
    let aux = u32_at(chunk, 4);
    for l in 0..4 {
        let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
        signed_row(IQ2XXS_GRID[chunk[l] as usize], signs, &mut q[8 * l..]);
    }
    let s = (0.5 + (aux >> 28) as f32) * 0.25;
    [s, s]
}

/// A 4-bit scale per 16 values (IQ2_XS, IQ2_S): the first half's in the low nibble, the second's high.
#[inline(always)]
fn half_scales(sc: u8) -> [f32; 2] {
    [(0.5 + (sc & 15) as f32) * 0.25, (0.5 + (sc >> 4) as f32) * 0.25]
}

#[inline(always)]
pub(super) fn iq2_xs(w: &[u8], a: &Q8Row) -> f32 {
    grid_dot(w, a, |b: &BlockIq2Xs| b.d.get(), iq2_xs_group)
}

#[inline(always)]
fn iq2_xs_group(b: &BlockIq2Xs, ib: usize, q: &mut [i8; 32]) -> [f32; 2] {
    for l in 0..4 {
        let at = 2 * (4 * ib + l);
        let g = u16::from_le_bytes([b.qs[at], b.qs[at + 1]]);
        signed_row(IQ2XS_GRID[(g & 511) as usize], KSIGNS_IQ2XS[(g >> 9) as usize], &mut q[8 * l..]);
    }
    half_scales(b.scales[ib])
}

#[inline(always)]
pub(super) fn iq2_s(w: &[u8], a: &Q8Row) -> f32 {
    grid_dot(w, a, |b: &BlockIq2S| b.d.get(), iq2_s_group)
}

#[inline(always)]
fn iq2_s_group(b: &BlockIq2S, ib: usize, q: &mut [i8; 32]) -> [f32; 2] {
    for l in 0..4 {
        let idx = b.qs[4 * ib + l] as usize | ((((b.qh[ib] >> (2 * l)) & 3) as usize) << 8);
        signed_row(IQ2S_GRID[idx], b.signs[4 * ib + l], &mut q[8 * l..]);
    }
    half_scales(b.scales[ib])
}

#[inline(always)]
pub(super) fn iq3_xxs(w: &[u8], a: &Q8Row) -> f32 {
    grid_dot(w, a, |b: &BlockIq3Xxs| b.d.get(), iq3_xxs_group)
}

#[inline(always)]
fn iq3_xxs_group(b: &BlockIq3Xxs, ib: usize, q: &mut [i8; 32]) -> [f32; 2] {
    let aux = u32_at(&b.scales_signs, 4 * ib);
    for l in 0..4 {
        let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
        let (i1, i2) = (b.qs[8 * ib + 2 * l] as usize, b.qs[8 * ib + 2 * l + 1] as usize);
        let row = IQ3XXS_GRID[i1] as u64 | ((IQ3XXS_GRID[i2] as u64) << 32);
        signed_row(row, signs, &mut q[8 * l..]);
    }
    let s = (0.5 + (aux >> 28) as f32) * 0.5;
    [s, s]
}

#[inline(always)]
pub(super) fn iq3_s(w: &[u8], a: &Q8Row) -> f32 {
    grid_dot(w, a, |b: &BlockIq3S| b.d.get(), iq3_s_group)
}

#[inline(always)]
fn iq3_s_group(b: &BlockIq3S, ib: usize, q: &mut [i8; 32]) -> [f32; 2] {
    for l in 0..4 {
        let hi = |k: usize| (((b.qh[ib] >> k) & 1) as usize) << 8;
        let i1 = b.qs[8 * ib + 2 * l] as usize | hi(2 * l);
        let i2 = b.qs[8 * ib + 2 * l + 1] as usize | hi(2 * l + 1);
        let row = IQ3S_GRID[i1] as u64 | ((IQ3S_GRID[i2] as u64) << 32);
        signed_row(row, b.signs[4 * ib + l], &mut q[8 * l..]);
    }
    let s = (1 + 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 15) as i32) as f32;
    [s, s]
}

/// An IQ1 grid row (values −1, 0, 1 as signed bytes) into `q`.
#[inline(always)]
fn iq1_row(row: u64, q: &mut [i8]) {
    for (j, o) in q[..8].iter_mut().enumerate() {
        *o = ((row >> (8 * j)) & 0xFF) as u8 as i8;
    }
}

#[inline(always)]
pub(super) fn iq1_s(w: &[u8], a: &Q8Row) -> f32 {
    let mut q = [0i8; 32];
    let mut sum = 0f32;
    for (sb, blk) in blocks::<BlockIq1S>(w).iter().enumerate() {
        let d = blk.d.get();
        for ib in 0..8 {
            let h = u16::from_le_bytes([blk.qh[2 * ib], blk.qh[2 * ib + 1]]);
            for l in 0..4 {
                let idx = blk.qs[4 * ib + l] as usize | ((((h >> (3 * l)) & 7) as usize) << 8);
                iq1_row(IQ1S_GRID[idx], &mut q[8 * l..]);
            }
            let delta = if h & 0x8000 != 0 { -0.125 } else { 0.125 };
            let (b, x) = (sb * 8 + ib, act(a, sb * 8 + ib));
            let dl = d * (2 * ((h >> 12) & 7) + 1) as f32;
            sum += dl * a.d[b] * (dot_i8(&q, x) as f32 + delta * sum_i8(x) as f32);
        }
    }
    sum
}

#[inline(always)]
pub(super) fn iq1_m(w: &[u8], a: &Q8Row) -> f32 {
    let mut q = [0i8; 32];
    let mut sum = 0f32;
    for (sb, blk) in blocks::<BlockIq1M>(w).iter().enumerate() {
        let d = blk.d();
        for ib in 0..8 {
            let sc = u16::from_le_bytes([blk.scales[2 * (ib / 2)], blk.scales[2 * (ib / 2) + 1]]) >> (6 * (ib % 2));
            let (b, x) = (sb * 8 + ib, act(a, sb * 8 + ib));
            let mut part = 0f32;
            for l in 0..4 {
                let nib = (blk.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15;
                iq1_row(IQ1S_GRID[blk.qs[4 * ib + l] as usize | (((nib & 7) as usize) << 8)], &mut q[8 * l..]);
                let delta = if nib & 8 != 0 { -0.125 } else { 0.125 };
                let xs = &x[8 * l..8 * l + 8];
                let scale = (2 * ((sc >> (3 * (l / 2))) & 7) + 1) as f32;
                part += scale * (dot_i8(&q[8 * l..8 * l + 8], xs) as f32 + delta * sum_i8(xs) as f32);
            }
            sum += d * a.d[b] * part;
        }
    }
    sum
}

#[inline(always)]
pub(super) fn tq1_0(w: &[u8], a: &Q8Row) -> f32 {
    let mut q = [0i8; 256];
    let mut sum = 0f32;
    for (sb, blk) in blocks::<BlockTq1_0>(w).iter().enumerate() {
        tq1_0_values(blk, &mut q);
        sum += blk.d.get() * ternary_dot(&q, a, sb);
    }
    sum
}

/// A TQ1_0 block's 256 trits as −1, 0, 1.
#[inline(always)]
fn tq1_0_values(blk: &BlockTq1_0, q: &mut [i8; 256]) {
    for n in 0..5u32 {
        for m in 0..32 {
            q[32 * n as usize + m] = (trit(blk.qs[m], n) - 1) as i8;
        }
        for m in 0..16 {
            q[160 + 16 * n as usize + m] = (trit(blk.qs[32 + m], n) - 1) as i8;
        }
    }
    for n in 0..4u32 {
        for j in 0..4 {
            q[240 + 4 * n as usize + j] = (trit(blk.qh[j], n) - 1) as i8;
        }
    }
}

#[inline(always)]
pub(super) fn tq2_0(w: &[u8], a: &Q8Row) -> f32 {
    let mut q = [0i8; 256];
    let mut sum = 0f32;
    for (sb, blk) in blocks::<BlockTq2_0>(w).iter().enumerate() {
        tq2_0_values(blk, &mut q);
        sum += blk.d.get() * ternary_dot(&q, a, sb);
    }
    sum
}

/// A TQ2_0 block's 256 2-bit values less 1.
#[inline(always)]
fn tq2_0_values(blk: &BlockTq2_0, q: &mut [i8; 256]) {
    for h in 0..2 {
        for l in 0..4 {
            for m in 0..32 {
                q[128 * h + 32 * l + m] = ((blk.qs[32 * h + m] >> (2 * l)) & 3) as i8 - 1;
            }
        }
    }
}

/// `Σ_b a.d[b] · Σ q·x` over the eight 32-blocks of super-block `sb` (the super-block's scale applied by the caller).
#[inline(always)]
fn ternary_dot(q: &[i8; 256], a: &Q8Row, sb: usize) -> f32 {
    (0..8).map(|ib| a.d[sb * 8 + ib] * dot_i8(&q[32 * ib..32 * ib + 32], act(a, sb * 8 + ib)) as f32).sum()
}

/// Calls `f(values, [s_lo, s_hi])` for each group of 32 of a weight row (`bytes`, whole blocks of `dtype`, one of
/// the IQ, TQ and MXFP4 types): the group's values as signed bytes with `value = s·q`, `s_lo` the first 16 values'
/// scale and `s_hi` the rest's (equal but for IQ2_XS, IQ2_S and IQ1_M). IQ1_S's and IQ1_M's ±1/8 deltas are
/// exact in eighths (`q = 8·grid ± 1`). Returns false, calling nothing, for another type.
#[cfg(target_arch = "x86_64")]
pub(super) fn for_each_group(dtype: DType, bytes: &[u8], mut f: impl FnMut(&[i8; 32], [f32; 2])) -> bool {
    let mut q = [0i8; 32];
    match dtype {
        DType::IQ4_NL => blocks::<BlockIq4Nl>(bytes).iter().for_each(|b| {
            unpack_nibbles(&b.qs, &KVALUES_IQ4NL, &mut q);
            f(&q, [b.d.get(); 2]);
        }),
        DType::MXFP4 => blocks::<BlockMxfp4>(bytes).iter().for_each(|b| {
            unpack_nibbles(&b.qs, &KVALUES_MXFP4, &mut q);
            f(&q, [e8m0_half(b.e); 2]);
        }),
        DType::IQ4_XS => blocks::<BlockIq4Xs>(bytes).iter().for_each(|b| {
            for ib in 0..8 {
                let qs: &[u8; 16] = b.qs[16 * ib..16 * ib + 16].try_into().expect("16 bytes");
                unpack_nibbles(qs, &KVALUES_IQ4NL, &mut q);
                f(&q, [b.d.get() * (iq4_xs_scale(b, ib) - 32) as f32; 2]);
            }
        }),
        DType::IQ1_S => blocks::<BlockIq1S>(bytes).iter().for_each(|b| {
            for ib in 0..8 {
                let h = u16::from_le_bytes([b.qh[2 * ib], b.qh[2 * ib + 1]]);
                let delta = if h & 0x8000 != 0 { -1 } else { 1 };
                for l in 0..4 {
                    let idx = b.qs[4 * ib + l] as usize | ((((h >> (3 * l)) & 7) as usize) << 8);
                    iq1_row(IQ1S_GRID[idx], &mut q[8 * l..]);
                }
                q.iter_mut().for_each(|v| *v = 8 * *v + delta);
                f(&q, [b.d.get() * (2 * ((h >> 12) & 7) + 1) as f32 / 8.0; 2]);
            }
        }),
        DType::IQ1_M => blocks::<BlockIq1M>(bytes).iter().for_each(|b| iq1_m_groups(b, &mut q, &mut f)),
        DType::TQ1_0 => blocks::<BlockTq1_0>(bytes).iter().for_each(|b| {
            let mut v = [0i8; 256];
            tq1_0_values(b, &mut v);
            v.chunks_exact(32).for_each(|g| f(g.try_into().expect("32 values"), [b.d.get(); 2]));
        }),
        DType::TQ2_0 => blocks::<BlockTq2_0>(bytes).iter().for_each(|b| {
            let mut v = [0i8; 256];
            tq2_0_values(b, &mut v);
            v.chunks_exact(32).for_each(|g| f(g.try_into().expect("32 values"), [b.d.get(); 2]));
        }),
        _ => return grid_groups(dtype, bytes, &mut q, &mut f),
    }
    true
}

/// IQ1_M's groups (see [`for_each_group`]): a 3-bit scale per 16 values, a delta sign per 8.
#[cfg(target_arch = "x86_64")]
fn iq1_m_groups(b: &BlockIq1M, q: &mut [i8; 32], f: &mut impl FnMut(&[i8; 32], [f32; 2])) {
    let d = b.d();
    for ib in 0..8 {
        let sc = u16::from_le_bytes([b.scales[2 * (ib / 2)], b.scales[2 * (ib / 2) + 1]]) >> (6 * (ib % 2));
        for l in 0..4 {
            let nib = (b.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 15;
            iq1_row(IQ1S_GRID[b.qs[4 * ib + l] as usize | (((nib & 7) as usize) << 8)], &mut q[8 * l..]);
            let delta = if nib & 8 != 0 { -1 } else { 1 };
            q[8 * l..8 * l + 8].iter_mut().for_each(|v| *v = 8 * *v + delta);
        }
        let scale = |half: u16| d * (2 * ((sc >> (3 * half)) & 7) + 1) as f32 / 8.0;
        f(q, [scale(0), scale(1)]);
    }
}

/// The grid types' groups (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S), as their dot products above unpack them.
#[cfg(target_arch = "x86_64")]
fn grid_groups(dtype: DType, bytes: &[u8], q: &mut [i8; 32], f: &mut impl FnMut(&[i8; 32], [f32; 2])) -> bool {
    fn each<B: Block>(
        bytes: &[u8],
        d: impl Fn(&B) -> f32,
        group: impl Fn(&B, usize, &mut [i8; 32]) -> [f32; 2],
        q: &mut [i8; 32],
        f: &mut impl FnMut(&[i8; 32], [f32; 2]),
    ) {
        for blk in blocks::<B>(bytes) {
            for ib in 0..8 {
                let [s0, s1] = group(blk, ib, q);
                f(q, [d(blk) * s0, d(blk) * s1]);
            }
        }
    }
    match dtype {
        DType::IQ2_XXS => each(bytes, |b: &BlockIq2Xxs| b.d.get(), iq2_xxs_group, q, f),
        DType::IQ2_XS => each(bytes, |b: &BlockIq2Xs| b.d.get(), iq2_xs_group, q, f),
        DType::IQ2_S => each(bytes, |b: &BlockIq2S| b.d.get(), iq2_s_group, q, f),
        DType::IQ3_XXS => each(bytes, |b: &BlockIq3Xxs| b.d.get(), iq3_xxs_group, q, f),
        DType::IQ3_S => each(bytes, |b: &BlockIq3S| b.d.get(), iq3_s_group, q, f),
        _ => return false,
    }
    true
}
