//! ggml's block formats, decoded on the host (`dequantize_row_*` of ggml-quants.c, with the bit layouts of
//! ggml-common.h). The CPU backend's kernels and host-side conversions use these; every decoder is checked against
//! the `gguf` Python package's (bit for bit) in the differential suite.

use crate::DType;
use half::f16;

fn h(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

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
pub(crate) fn decode_block(dtype: DType, b: &[u8], y: &mut [f32]) {
    match dtype {
        DType::F32 => y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        DType::F16 => y[0] = h(b, 0),
        DType::I32 => y[0] = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
        DType::BF16 => y[0] = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16),
        DType::Q4_0 => q4(b, 2, h(b, 0), None, y),
        DType::Q4_1 => q4(b, 4, h(b, 0), Some(h(b, 2)), y),
        DType::Q5_0 => q5(b, 2, h(b, 0), None, y),
        DType::Q5_1 => q5(b, 4, h(b, 0), Some(h(b, 2)), y),
        DType::Q8_0 => {
            let d = h(b, 0);
            y.iter_mut().zip(&b[2..34]).for_each(|(o, &q)| *o = q as i8 as f32 * d);
        }
        DType::Q2_K => q2_k(b, y),
        DType::Q3_K => q3_k(b, y),
        DType::Q4_K => q45_k(b, false, y),
        DType::Q5_K => q45_k(b, true, y),
        DType::Q6_K => q6_k(b, y),
    }
}

/// The value of quant `q` with scale `d`: `q·d + m` (Q*_1), or centered `(q − c)·d` (Q*_0), as ggml computes them.
fn value(q: f32, d: f32, m: Option<f32>, c: f32) -> f32 {
    match m {
        Some(m) => q * d + m,
        None => (q - c) * d,
    }
}

/// Q4_0 / Q4_1: the nibbles at `qs` (low nibbles the first 16 values, high nibbles the rest).
fn q4(b: &[u8], qs: usize, d: f32, m: Option<f32>, y: &mut [f32]) {
    for j in 0..16 {
        y[j] = value((b[qs + j] & 0x0f) as f32, d, m, 8.0);
        y[j + 16] = value((b[qs + j] >> 4) as f32, d, m, 8.0);
    }
}

/// Q5_0 / Q5_1: nibbles with a fifth bit from `qh` (4 bytes before the nibbles).
fn q5(b: &[u8], qh_at: usize, d: f32, m: Option<f32>, y: &mut [f32]) {
    let qh = u32::from_le_bytes([b[qh_at], b[qh_at + 1], b[qh_at + 2], b[qh_at + 3]]);
    let qs = &b[qh_at + 4..qh_at + 20];
    for j in 0..16 {
        let h0 = (((qh >> j) << 4) & 0x10) as u8;
        let h1 = ((qh >> (j + 12)) & 0x10) as u8;
        y[j] = value(((qs[j] & 0x0f) | h0) as f32, d, m, 16.0);
        y[j + 16] = value(((qs[j] >> 4) | h1) as f32, d, m, 16.0);
    }
}

/// Q2_K: `scales[16]`, `qs[64]`, d, dmin.
fn q2_k(b: &[u8], y: &mut [f32]) {
    let (scales, qs, d, min) = (&b[0..16], &b[16..80], h(b, 80), h(b, 82));
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

/// Q3_K: `hmask[32]`, `qs[64]`, `scales[12]` (sixteen 6-bit scales), d.
fn q3_k(b: &[u8], y: &mut [f32]) {
    let (hm, qs, raw, d_all) = (&b[0..32], &b[32..96], &b[96..108], h(b, 108));
    let mut aux = [0u32; 4];
    for (k, a) in aux.iter_mut().enumerate().take(3) {
        *a = u32::from_le_bytes([raw[4 * k], raw[4 * k + 1], raw[4 * k + 2], raw[4 * k + 3]]);
    }
    let (m1, m2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
    let tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & m2) | (((tmp >> 4) & m1) << 4);
    aux[3] = ((aux[1] >> 4) & m2) | (((tmp >> 6) & m1) << 4);
    aux[0] = (aux[0] & m2) | ((tmp & m1) << 4);
    aux[1] = (aux[1] & m2) | (((tmp >> 2) & m1) << 4);
    let scales: Vec<i8> = aux.iter().flat_map(|a| a.to_le_bytes()).map(|v| v as i8).collect();
    let (mut out, mut is, mut m) = (0, 0, 1u8);
    for n in 0..2 {
        let q = &qs[n * 32..];
        for shift in [0, 2, 4, 6] {
            for half in 0..2 {
                let dl = d_all * (scales[is] as i32 - 32) as f32;
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

/// The `j`-th 6-bit scale and min of a Q4_K / Q5_K block (ggml's `get_scale_min_k4`).
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Q4_K (`d, dmin, scales[12], qs[128]`) and Q5_K (`d, dmin, scales[12], qh[32], qs[128]`).
fn q45_k(b: &[u8], five: bool, y: &mut [f32]) {
    let (d, min, scales) = (h(b, 0), h(b, 2), &b[4..16]);
    let (qh, qs) = if five { (&b[16..48], &b[48..176]) } else { (&b[0..0], &b[16..144]) };
    let (mut out, mut u1, mut u2) = (0, 1u8, 2u8);
    for j in 0..4 {
        let q = &qs[j * 32..];
        let (sc, m) = scale_min_k4(2 * j, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = scale_min_k4(2 * j + 1, scales);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        for l in 0..32 {
            let hb = if five && qh[l] & u1 != 0 { 16.0 } else { 0.0 };
            y[out + l] = d1 * ((q[l] & 0xf) as f32 + hb) - m1;
        }
        for l in 0..32 {
            let hb = if five && qh[l] & u2 != 0 { 16.0 } else { 0.0 };
            y[out + 32 + l] = d2 * ((q[l] >> 4) as f32 + hb) - m2;
        }
        out += 64;
        u1 <<= 2;
        u2 <<= 2;
    }
}

/// Q6_K: `ql[128]`, `qh[64]`, `scales[16]` (i8), d.
fn q6_k(b: &[u8], y: &mut [f32]) {
    let d = h(b, 208);
    for n in 0..2 {
        let (ql, qh, sc) = (&b[n * 64..], &b[128 + n * 32..], &b[192 + n * 8..]);
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
