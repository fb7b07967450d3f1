//! ggml's block formats, decoded on the host (`dequantize_row_*` of ggml-quants.c), reading the typed blocks of
//! [`super::blocks`] by field. The CPU backend's kernels and host-side conversions use these; every decoder is
//! checked against the `gguf` Python package's (bit for bit) in the differential suite.

use super::blocks::*;
use super::iq;
use crate::dtype::DType;

/// Decodes whole blocks of `dtype` from `bytes` into `out` (`out.len()` values: `bytes.len() / block_bytes` blocks).
/// Plain types are converted (bf16 and f16 widened, i32 rounded).
///
/// # Panics
/// When `bytes` and `out` do not hold the same number of whole blocks (a bug in the caller).
pub(crate) fn decode(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    let (bs, bb) = (dtype.block_size(), dtype.block_bytes());
    assert!(bytes.len().is_multiple_of(bb) && bytes.len() / bb * bs == out.len(), "whole blocks of {dtype}");
    for (blk, o) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(bs)) {
        decode_block(dtype, blk, o);
    }
}

/// Decodes one block.
fn decode_block(dtype: DType, b: &[u8], y: &mut [f32]) {
    match dtype {
        DType::F32 => y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        DType::F16 => y[0] = F16Le([b[0], b[1]]).get(),
        DType::I32 => y[0] = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
        DType::BF16 => y[0] = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16),
        DType::Q4_0 => {
            let b: &BlockQ4_0 = block(b);
            q4(&b.qs, b.d.get(), None, y)
        }
        DType::Q4_1 => {
            let b: &BlockQ4_1 = block(b);
            q4(&b.qs, b.d.get(), Some(b.m.get()), y)
        }
        DType::Q5_0 => {
            let b: &BlockQ5_0 = block(b);
            q5(b.qh, &b.qs, b.d.get(), None, y)
        }
        DType::Q5_1 => {
            let b: &BlockQ5_1 = block(b);
            q5(b.qh, &b.qs, b.d.get(), Some(b.m.get()), y)
        }
        DType::Q8_0 => {
            let b: &BlockQ8_0 = block(b);
            let d = b.d.get();
            y.iter_mut().zip(&b.qs).for_each(|(o, &q)| *o = q as i8 as f32 * d);
        }
        DType::Q2_K => q2_k(block(b), y),
        DType::Q3_K => q3_k(block(b), y),
        DType::Q4_K => {
            let b: &BlockQ4K = block(b);
            q45_k((b.d.get(), b.dmin.get(), &b.scales), None, &b.qs, y)
        }
        DType::Q5_K => {
            let b: &BlockQ5K = block(b);
            q45_k((b.d.get(), b.dmin.get(), &b.scales), Some(&b.qh), &b.qs, y)
        }
        DType::Q6_K => q6_k(block(b), y),
        DType::IQ4_NL => iq::iq4_nl(block(b), y),
        DType::IQ4_XS => iq::iq4_xs(block(b), y),
        DType::IQ2_XXS => iq::iq2_xxs(block(b), y),
        DType::IQ2_XS => iq::iq2_xs(block(b), y),
        DType::IQ2_S => iq::iq2_s(block(b), y),
        DType::IQ3_XXS => iq::iq3_xxs(block(b), y),
        DType::IQ3_S => iq::iq3_s(block(b), y),
        DType::IQ1_S => iq::iq1_s(block(b), y),
        DType::IQ1_M => iq::iq1_m(block(b), y),
        DType::TQ1_0 => iq::tq1_0(block(b), y),
        DType::TQ2_0 => iq::tq2_0(block(b), y),
        DType::MXFP4 => iq::mxfp4(block(b), y),
    }
}

/// The value of quant `q` with scale `d`: `q·d + m` (Q*_1), or centered `(q − c)·d` (Q*_0), as ggml computes them.
fn value(q: f32, d: f32, m: Option<f32>, c: f32) -> f32 {
    match m {
        Some(m) => q * d + m,
        None => (q - c) * d,
    }
}

/// Q4_0 / Q4_1: nibbles (low nibbles the first 16 values, high nibbles the rest).
fn q4(qs: &[u8; 16], d: f32, m: Option<f32>, y: &mut [f32]) {
    for j in 0..16 {
        y[j] = value((qs[j] & 0x0f) as f32, d, m, 8.0);
        y[j + 16] = value((qs[j] >> 4) as f32, d, m, 8.0);
    }
}

/// Q5_0 / Q5_1: nibbles with a fifth bit from `qh`.
fn q5(qh: [u8; 4], qs: &[u8; 16], d: f32, m: Option<f32>, y: &mut [f32]) {
    let qh = u32::from_le_bytes(qh);
    for j in 0..16 {
        let h0 = (((qh >> j) << 4) & 0x10) as u8;
        let h1 = ((qh >> (j + 12)) & 0x10) as u8;
        y[j] = value(((qs[j] & 0x0f) | h0) as f32, d, m, 16.0);
        y[j + 16] = value(((qs[j] >> 4) | h1) as f32, d, m, 16.0);
    }
}

/// Q2_K.
fn q2_k(b: &BlockQ2K, y: &mut [f32]) {
    let (scales, qs, d, min) = (&b.scales, &b.qs, b.d.get(), b.dmin.get());
    let mut out = 0;
    let mut is = 0;
    for n in 0..2 {
        let q = &qs[n * 32..];
        for shift in [0, 2, 4, 6] {
            for half in 0..2 {
                let sc = scales[is];
                is += 1;
                let (dl, ml) = (d * (sc & 0xf) as f32, min * (sc >> 4) as f32);
                for l in 0..16 {
                    y[out] = dl * ((q[l + 16 * half] >> shift) & 3) as i8 as f32 - ml;
                    out += 1;
                }
            }
        }
    }
}

/// Q3_K.
fn q3_k(b: &BlockQ3K, y: &mut [f32]) {
    let (hm, qs, d_all, scales) = (&b.hmask, &b.qs, b.d.get(), b.scales());
    let (mut out, mut is, mut m) = (0, 0, 1u8);
    for n in 0..2 {
        let q = &qs[n * 32..];
        for shift in [0, 2, 4, 6] {
            for half in 0..2 {
                let dl = d_all * scales[is] as f32;
                is += 1;
                for l in 0..16 {
                    let i = l + 16 * half;
                    let v = ((q[i] >> shift) & 3) as i8 - if hm[i] & m != 0 { 0 } else { 4 };
                    y[out] = dl * v as f32;
                    out += 1;
                }
            }
            m <<= 1;
        }
    }
}

/// Q4_K (`qh` None) and Q5_K: `(d, dmin, scales)`, the fifth bits, the nibbles.
fn q45_k((d, min, scales): (f32, f32, &[u8; 12]), qh: Option<&[u8; 32]>, qs: &[u8; 128], y: &mut [f32]) {
    let bit = |l: usize, mask: u8| qh.is_some_and(|qh| qh[l] & mask != 0);
    let (mut out, mut u1, mut u2) = (0, 1u8, 2u8);
    for j in 0..4 {
        let q = &qs[j * 32..];
        let (sc, m) = scale_min_k4(scales, 2 * j);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = scale_min_k4(scales, 2 * j + 1);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        for l in 0..32 {
            let hb = if bit(l, u1) { 16.0 } else { 0.0 };
            y[out + l] = d1 * ((q[l] & 0xf) as f32 + hb) - m1;
        }
        for l in 0..32 {
            let hb = if bit(l, u2) { 16.0 } else { 0.0 };
            y[out + 32 + l] = d2 * ((q[l] >> 4) as f32 + hb) - m2;
        }
        out += 64;
        u1 <<= 2;
        u2 <<= 2;
    }
}

/// Q6_K.
fn q6_k(b: &BlockQ6K, y: &mut [f32]) {
    let d = b.d.get();
    for n in 0..2 {
        let (ql, qh, sc) = (&b.ql[n * 64..], &b.qh[n * 32..], &b.scales[n * 8..]);
        let yo = &mut y[n * 128..];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xf) | ((qh[l] & 3) << 4)) as i8 - 32;
            let q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            yo[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            yo[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            yo[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            yo[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}
