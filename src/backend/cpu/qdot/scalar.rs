//! The portable integer dot products: the definition of each kernel (block layouts from ggml-common.h, as
//! `src/blocks.rs` decodes them), and the kernels of CPUs without AVX2 (and of wasm).

use super::row::{DotFn, Q8Row, QK};
use crate::DType;

pub(super) fn dot_fn(dtype: DType) -> Option<DotFn> {
    Some(match dtype {
        DType::Q4_0 => q4_0,
        DType::Q4_1 => q4_1,
        DType::Q8_0 => q8_0,
        DType::Q4_K => q4_k,
        DType::Q6_K => q6_k,
        _ => return None,
    })
}

#[inline]
pub(super) fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// `Σ lo(q[j]) a[j] + hi(q[j]) a[j + 16]` over a 32-block whose 16 bytes hold nibbles (low: the first 16
/// elements), with `off` subtracted from each nibble.
#[inline]
fn nibble_dot(q: &[u8], a: &[i8], off: i32) -> i32 {
    (0..16).map(|j| ((q[j] & 15) as i32 - off) * a[j] as i32 + ((q[j] >> 4) as i32 - off) * a[j + 16] as i32).sum()
}

fn q4_0(w: &[u8], a: &Q8Row) -> f32 {
    w.chunks_exact(18)
        .enumerate()
        .map(|(b, blk)| f16_at(blk, 0) * a.d[b] * nibble_dot(&blk[2..], &a.qs[b * QK..], 8) as f32)
        .sum()
}

fn q4_1(w: &[u8], a: &Q8Row) -> f32 {
    w.chunks_exact(20)
        .enumerate()
        .map(|(b, blk)| {
            f16_at(blk, 0) * a.d[b] * nibble_dot(&blk[4..], &a.qs[b * QK..], 0) as f32 + f16_at(blk, 2) * a.s[b]
        })
        .sum()
}

fn q8_0(w: &[u8], a: &Q8Row) -> f32 {
    w.chunks_exact(34)
        .enumerate()
        .map(|(b, blk)| {
            let dot: i32 = (0..QK).map(|j| blk[2 + j] as i8 as i32 * a.qs[b * QK + j] as i32).sum();
            f16_at(blk, 0) * a.d[b] * dot as f32
        })
        .sum()
}

/// Scale and min `j` (0..8) of a Q4_K/Q5_K block's 12 packed scale bytes (ggml's `get_scale_min_k4`).
#[inline]
pub(super) fn scale_min_k4(s: &[u8], j: usize) -> (f32, f32) {
    if j < 4 {
        ((s[j] & 63) as f32, (s[j + 4] & 63) as f32)
    } else {
        let d = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        let m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        (d as f32, m as f32)
    }
}

fn q4_k(w: &[u8], a: &Q8Row) -> f32 {
    let mut sum = 0f32;
    for (sb, blk) in w.chunks_exact(144).enumerate() {
        let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
        for j in 0..4 {
            let q = &blk[16 + 32 * j..16 + 32 * j + 32];
            for (h, shift) in [(0usize, 0u8), (1, 4)] {
                let b = sb * 8 + 2 * j + h;
                let (sc, m) = scale_min_k4(&blk[4..16], 2 * j + h);
                let dot: i32 = (0..QK).map(|l| ((q[l] >> shift) & 15) as i32 * a.qs[b * QK + l] as i32).sum();
                sum += d * sc * a.d[b] * dot as f32 - dmin * m * a.s[b];
            }
        }
    }
    sum
}

fn q6_k(w: &[u8], a: &Q8Row) -> f32 {
    let mut sum = 0f32;
    for (sb, blk) in w.chunks_exact(210).enumerate() {
        let d = f16_at(blk, 208);
        for n in 0..2 {
            let (ql, qh, sc) = (&blk[64 * n..], &blk[128 + 32 * n..], &blk[192 + 8 * n..]);
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
