//! The portable integer dot products: the definition of each kernel (block layouts from ggml-common.h, as
//! `crate::quant` types and decodes them), and the kernels of CPUs without AVX2 (and of wasm). Blocks are read by
//! field from the typed block structs.

use super::iq;
use super::row::{DotFn, Q8Row, QK};
use crate::dtype::DType;
use crate::quant::*;

pub(super) fn dot_fn(dtype: DType) -> Option<DotFn> {
    Some(match dtype {
        DType::Q4_0 => q4_0,
        DType::Q4_1 => q4_1,
        DType::Q8_0 => q8_0,
        DType::Q4_K => q4_k,
        DType::Q6_K => q6_k,
        DType::Q5_0 => |w, a| q5_0(w, a),
        DType::Q5_1 => |w, a| q5_1(w, a),
        DType::Q2_K => |w, a| q2_k(w, a),
        DType::Q3_K => |w, a| q3_k(w, a),
        DType::Q5_K => |w, a| q5_k(w, a),
        DType::IQ4_NL => |w, a| iq::iq4_nl(w, a),
        DType::IQ4_XS => |w, a| iq::iq4_xs(w, a),
        DType::MXFP4 => |w, a| iq::mxfp4(w, a),
        DType::IQ2_XXS => |w, a| iq::iq2_xxs(w, a),
        DType::IQ2_XS => |w, a| iq::iq2_xs(w, a),
        DType::IQ2_S => |w, a| iq::iq2_s(w, a),
        DType::IQ3_XXS => |w, a| iq::iq3_xxs(w, a),
        DType::IQ3_S => |w, a| iq::iq3_s(w, a),
        DType::IQ1_S => |w, a| iq::iq1_s(w, a),
        DType::IQ1_M => |w, a| iq::iq1_m(w, a),
        DType::TQ1_0 => |w, a| iq::tq1_0(w, a),
        DType::TQ2_0 => |w, a| iq::tq2_0(w, a),
        _ => return None,
    })
}

// Q5_0, Q5_1, Q2_K, Q3_K and Q5_K: each block is unpacked into signed bytes on the stack, then dotted with the
// activations' bytes by plain loops (`dot_i8`), which the compiler vectorizes; `avx2.rs` compiles these same
// functions (`#[inline(always)]`) with AVX2, where they become `vpmaddwd` loops.

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

/// A Q5_0 / Q5_1 block's 32 values (offset by `off`): nibbles with a fifth bit from `qh`.
#[inline(always)]
fn unpack_q5(qh: [u8; 4], qs: &[u8; 16], off: i8, q: &mut [i8; 32]) {
    let qh = u32::from_le_bytes(qh);
    for j in 0..16 {
        q[j] = ((qs[j] & 15) | ((((qh >> j) & 1) as u8) << 4)) as i8 - off;
        q[j + 16] = ((qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4)) as i8 - off;
    }
}

#[inline(always)]
pub(super) fn q5_0(w: &[u8], a: &Q8Row) -> f32 {
    let mut q = [0i8; 32];
    let mut sum = 0f32;
    for (b, blk) in blocks::<BlockQ5_0>(w).iter().enumerate() {
        unpack_q5(blk.qh, &blk.qs, 16, &mut q);
        sum += blk.d.get() * a.d[b] * dot_i8(&q, &a.qs[b * QK..(b + 1) * QK]) as f32;
    }
    sum
}

#[inline(always)]
pub(super) fn q5_1(w: &[u8], a: &Q8Row) -> f32 {
    let mut q = [0i8; 32];
    let mut sum = 0f32;
    for (b, blk) in blocks::<BlockQ5_1>(w).iter().enumerate() {
        // unpacked with Q5_0's offset of 16, which the compiler vectorizes (with 0 it unrolls to scalar code),
        // and the 16 added back through the activations' sum: d·Σ(q + 16)·x = d·Σq·x + 16·d·s
        unpack_q5(blk.qh, &blk.qs, 16, &mut q);
        let (d, m) = (blk.d.get(), blk.m.get());
        let dot = dot_i8(&q, &a.qs[b * QK..(b + 1) * QK]) as f32;
        sum += d * a.d[b] * dot + (16.0 * d + m) * a.s[b];
    }
    sum
}

/// Q5_K: 8 sub-blocks of 32, each `d·sc·q − dmin·m` with q in 0..32 (4 bits in `qs`, the fifth in `qh`).
#[inline(always)]
pub(super) fn q5_k(w: &[u8], a: &Q8Row) -> f32 {
    let mut q = [0i8; 32];
    let mut sum = 0f32;
    for (sb, blk) in blocks::<BlockQ5K>(w).iter().enumerate() {
        let (d, dmin, qh, qs) = (blk.d.get(), blk.dmin.get(), &blk.qh, &blk.qs);
        for sub in 0..8 {
            let (j, shift) = (sub / 2, 4 * (sub % 2) as u32);
            for l in 0..32 {
                q[l] = (((qs[32 * j + l] >> shift) & 15) | (((qh[l] >> sub) & 1) << 4)) as i8;
            }
            let b = sb * 8 + sub;
            let (sc, m) = scale_min_k4(&blk.scales, sub);
            sum += d * sc as f32 * a.d[b] * dot_i8(&q, &a.qs[b * QK..(b + 1) * QK]) as f32 - dmin * m as f32 * a.s[b];
        }
    }
    sum
}

/// Q2_K: 16 sub-blocks of 16, each `d·(sc & 15)·q − dmin·(sc >> 4)` with q in 0..4 (2 bits of `qs`).
#[inline(always)]
pub(super) fn q2_k(w: &[u8], a: &Q8Row) -> f32 {
    let mut q = [0i8; 16];
    let mut sum = 0f32;
    for (sb, blk) in blocks::<BlockQ2K>(w).iter().enumerate() {
        let (scales, qs, d, dmin) = (&blk.scales, &blk.qs, blk.d.get(), blk.dmin.get());
        for (is, &sc) in scales.iter().enumerate() {
            // sub-block `is` = elements 16·is..: bits `2·shift` of bytes 32·n + 16·half + l
            let (n, shift, half) = (is / 8, 2 * ((is / 2) % 4) as u32, is % 2);
            for l in 0..16 {
                q[l] = ((qs[32 * n + 16 * half + l] >> shift) & 3) as i8;
            }
            let at = sb * 256 + 16 * is;
            let x = &a.qs[at..at + 16];
            let part = d * (sc & 15) as f32 * dot_i8(&q, x) as f32 - dmin * (sc >> 4) as f32 * sum_i8(x) as f32;
            sum += a.d[at / QK] * part;
        }
    }
    sum
}

/// Q3_K: 16 sub-blocks of 16, each `d·scale·q` with q in −4..4 (2 bits of `qs`, and −4 where `hmask`'s bit is
/// clear).
#[inline(always)]
pub(super) fn q3_k(w: &[u8], a: &Q8Row) -> f32 {
    let mut q = [0i8; 16];
    let mut sum = 0f32;
    for (sb, blk) in blocks::<BlockQ3K>(w).iter().enumerate() {
        let (hm, qs, d, scales) = (&blk.hmask, &blk.qs, blk.d.get(), blk.scales());
        for (is, &sc) in scales.iter().enumerate() {
            // sub-block `is`: bits `2·j` of bytes 32·n + 16·half + l, the high bit in hmask's bit 4·n + j
            let (n, j, half) = (is / 8, (is / 2) % 4, is % 2);
            let bit = (4 * n + j) as u32;
            for (l, q) in q.iter_mut().enumerate() {
                let i = 16 * half + l;
                let low = ((qs[32 * n + i] >> (2 * j)) & 3) as i8;
                *q = low - (((hm[i] >> bit) & 1) ^ 1) as i8 * 4;
            }
            let at = sb * 256 + 16 * is;
            sum += a.d[at / QK] * d * sc as f32 * dot_i8(&q, &a.qs[at..at + 16]) as f32;
        }
    }
    sum
}

/// `Σ lo(q[j]) a[j] + hi(q[j]) a[j + 16]` over a 32-block whose 16 bytes hold nibbles (low: the first 16
/// elements), with `off` subtracted from each nibble.
#[inline]
fn nibble_dot(q: &[u8], a: &[i8], off: i32) -> i32 {
    (0..16).map(|j| ((q[j] & 15) as i32 - off) * a[j] as i32 + ((q[j] >> 4) as i32 - off) * a[j + 16] as i32).sum()
}

fn q4_0(w: &[u8], a: &Q8Row) -> f32 {
    blocks::<BlockQ4_0>(w)
        .iter()
        .enumerate()
        .map(|(b, blk)| blk.d.get() * a.d[b] * nibble_dot(&blk.qs, &a.qs[b * QK..], 8) as f32)
        .sum()
}

fn q4_1(w: &[u8], a: &Q8Row) -> f32 {
    blocks::<BlockQ4_1>(w)
        .iter()
        .enumerate()
        .map(|(b, blk)| blk.d.get() * a.d[b] * nibble_dot(&blk.qs, &a.qs[b * QK..], 0) as f32 + blk.m.get() * a.s[b])
        .sum()
}

fn q8_0(w: &[u8], a: &Q8Row) -> f32 {
    blocks::<BlockQ8_0>(w)
        .iter()
        .enumerate()
        .map(|(b, blk)| {
            let dot: i32 = (0..QK).map(|j| blk.qs[j] as i8 as i32 * a.qs[b * QK + j] as i32).sum();
            blk.d.get() * a.d[b] * dot as f32
        })
        .sum()
}

fn q4_k(w: &[u8], a: &Q8Row) -> f32 {
    let mut sum = 0f32;
    for (sb, blk) in blocks::<BlockQ4K>(w).iter().enumerate() {
        let (d, dmin) = (blk.d.get(), blk.dmin.get());
        for j in 0..4 {
            let q = &blk.qs[32 * j..32 * j + 32];
            for (h, shift) in [(0usize, 0u8), (1, 4)] {
                let b = sb * 8 + 2 * j + h;
                let (sc, m) = scale_min_k4(&blk.scales, 2 * j + h);
                let dot: i32 = (0..QK).map(|l| ((q[l] >> shift) & 15) as i32 * a.qs[b * QK + l] as i32).sum();
                sum += d * sc as f32 * a.d[b] * dot as f32 - dmin * m as f32 * a.s[b];
            }
        }
    }
    sum
}

fn q6_k(w: &[u8], a: &Q8Row) -> f32 {
    let mut sum = 0f32;
    for (sb, blk) in blocks::<BlockQ6K>(w).iter().enumerate() {
        let d = blk.d.get();
        for n in 0..2 {
            let (ql, qh, sc) = (&blk.ql[64 * n..], &blk.qh[32 * n..], &blk.scales[8 * n..]);
            for g in 0..4 {
                // group g holds elements 32g..32g+32 of this half: ql's low nibbles (g = 0, 1) or high ones (2, 3)
                // of bytes 0..32 (g even) or 32..64 (g odd), and bits 2g, 2g+1 of qh; a scale per 16
                let b = sb * 8 + 4 * n + g;
                let mut total = 0i32;
                for half in 0..2 {
                    let dot: i32 = (half * 16..half * 16 + 16)
                        .map(|l| {
                            let byte = ql[l + 32 * (g % 2)];
                            let lo = if g < 2 { byte & 15 } else { byte >> 4 };
                            let q = (lo | (((qh[l] >> (2 * g)) & 3) << 4)) as i32 - 32;
                            q * a.qs[b * QK + l] as i32
                        })
                        .sum();
                    total += sc[2 * g + half] as i8 as i32 * dot;
                }
                sum += d * a.d[b] * total as f32;
            }
        }
    }
    sum
}
