//! Integer dot products of a block-quantized weight row with activations rounded to 8-bit blocks, as llama.cpp's
//! CPU backend computes them (`ggml_vec_dot_q4_1_q8_1` and its kin): the activations of a row are quantized once
//! per run into [`Q8Row`] blocks of 32 (a scale, 32 int8 values and their sum), then every weight row of that
//! type is dotted with them in integer arithmetic, one float multiply-add per block. That reads each weight byte
//! once at the speed of memory, where decoding to f32 first is bound by the arithmetic.
//!
//! Every block type has an integer kernel: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4 (blocks of 32) and Q2_K,
//! Q3_K, Q4_K, Q5_K, Q6_K, the other IQ types, TQ1_0, TQ2_0 (super-blocks of 256). A portable scalar kernel defines
//! each (`scalar.rs`, `iq.rs`); where the CPU has AVX2, FMA and F16C kernels chosen at run time: hand-written
//! intrinsics for the K-quants, the Q*_0/Q*_1 types, IQ4_NL, IQ4_XS and MXFP4 (a 16-value table looked up by
//! `vpshufb`), and for the grid and ternary types the portable kernels (each group unpacked to bytes, then plain
//! dot loops) compiled with AVX2, which the compiler vectorizes. On wasm, simd128 kernels (Q4_0, Q4_1, Q8_0) where the
//! build enables simd128 (it does: `.cargo/config.toml`). bf16 and f16 weights decode to f32 (`quant.rs`).
//!
//! With AVX-512 VNNI, the weights of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K are repacked at first use and every matmul with them,
//! from one row of activations to a prefill's hundreds, runs one kernel (`repack.rs`); the other types' prefill
//! (many rows) has its own integer kernel, which unpacks panels of weights per matmul (`panel.rs`).
//!
//! Accuracy: rounding activations to 8 bits (relative error up to 1/254 of a block's largest value) moves a
//! dot product by about 0.3% of its magnitude; `CompileOptions::f32_activations` turns it off.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_iq;
mod iq;
#[cfg(target_arch = "x86_64")]
pub(crate) mod panel;
#[cfg(target_arch = "x86_64")]
pub(crate) mod repack;
mod row;
mod scalar;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128;

use crate::dtype::DType;
#[cfg(target_arch = "x86_64")]
pub(crate) use row::QK;
pub(crate) use row::{DotFn, DotRowsFn, Q8Row};

/// `Σ a[i] * b[i]` in f32 with 16 independent sums (vectorized; with FMA where the CPU has it).
pub(crate) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        // SAFETY: the CPU has AVX2 and FMA (checked)
        return unsafe { dot_f32_fma(a, b) };
    }
    dot_f32_portable(a, b)
}

/// [`dot_f32`] compiled with FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot_f32_fma(a: &[f32], b: &[f32]) -> f32 {
    dot_f32_portable(a, b)
}

/// Whether this CPU has AVX2 and FMA (and F16C): the kernels compiled with them may run.
#[cfg(target_arch = "x86_64")]
pub(crate) fn fma_available() -> bool {
    avx2::available()
}

/// [`dot_f32`]'s sums, inlined into the caller (which may be compiled with wider vectors).
#[inline(always)]
pub(crate) fn dot_f32_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = a.len() / 16 * 16;
    for (ca, cb) in a[..chunks].chunks_exact(16).zip(b[..chunks].chunks_exact(16)) {
        for j in 0..16 {
            // a multiply and an add (mul_add would be a library call where FMA is absent)
            acc[j] += ca[j] * cb[j];
        }
    }
    let tail: f32 = a[chunks..].iter().zip(&b[chunks..]).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// The fastest dot product for weights of `dtype` this CPU has, if `dtype` has an integer kernel.
pub(crate) fn dot_fn(dtype: DType) -> Option<DotFn> {
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        return avx2::dot_fn(dtype);
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if let Some(f) = simd128::dot_fn(dtype) {
        return Some(f);
    }
    scalar::dot_fn(dtype)
}

/// A kernel of one weight row with several activation rows that shares the weight's unpacking among them, where
/// this CPU and `dtype` have one; each row's result is bitwise the [`dot_fn`] kernel's.
pub(crate) fn dot_rows_fn(dtype: DType) -> Option<DotRowsFn> {
    #[cfg(target_arch = "x86_64")]
    if avx2::available() {
        return avx2::dot_rows_fn(dtype);
    }
    let _ = dtype;
    None
}

/// The portable kernels, for tests of the SIMD ones.
#[cfg(test)]
pub(crate) fn scalar_dot_fn(dtype: DType) -> Option<DotFn> {
    scalar::dot_fn(dtype)
}

#[cfg(test)]
mod tests {
    use super::row::QK;
    use super::*;
    use crate::quant::decode;

    /// Random blocks of `dtype` with finite, small f16 scales (the fields at `scales`), `rows` rows of `k`.
    pub(super) fn blocks(dtype: DType, k: usize, seed: u64) -> Vec<u8> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut next = move || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 33) as u32
        };
        let nb = k / dtype.block_size();
        let bb = dtype.block_bytes();
        let mut out: Vec<u8> = (0..nb * bb).map(|_| next() as u8).collect();
        for b in 0..nb {
            let blk = &mut out[b * bb..(b + 1) * bb];
            for &off in dtype.scale_offsets() {
                let v = half::f16::from_f32(0.001 + (next() % 1000) as f32 * 2e-5);
                blk[off..off + 2].copy_from_slice(&v.to_le_bytes());
            }
            if dtype == DType::MXFP4 {
                blk[0] = 115 + (next() % 10) as u8; // an exponent near 2^-12
            }
            if dtype == DType::IQ1_M {
                // the f16 scale's nibbles in the top bits of the four u16 sub-scale words (bytes 48..56)
                let d = half::f16::from_f32(0.001 + (next() % 1000) as f32 * 2e-5).to_bits();
                for k in 0..4 {
                    let w =
                        u16::from_le_bytes([blk[48 + 2 * k], blk[49 + 2 * k]]) & 0x0fff | ((d >> (4 * k)) & 15) << 12;
                    blk[48 + 2 * k..50 + 2 * k].copy_from_slice(&w.to_le_bytes());
                }
            }
        }
        out
    }

    /// Each kernel (scalar and the CPU's own) against decoding to f32 and a float64 dot with the rounded
    /// activations; and the rounding's own error against the f32 activations, within 1% of the magnitude.
    #[test]
    fn integer_dots_match_decoding() {
        use DType::*;
        let types =
            [Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS, MXFP4, IQ2_XXS, IQ2_XS];
        for dtype in types.into_iter().chain([IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0]) {
            for (k, seed) in [(256usize, 1u64), (512, 2), (2048, 3)] {
                let w = blocks(dtype, k, seed);
                let mut wf = vec![0f32; k];
                decode(dtype, &w, &mut wf);
                let x: Vec<f32> = (0..k).map(|i| ((i * 37 + seed as usize) % 101) as f32 / 50.0 - 1.0).collect();
                let a = Q8Row::quantize(&x);
                let rounded: f64 = (0..k).map(|i| wf[i] as f64 * a.d[i / QK] as f64 * a.qs[i] as f64).sum::<f64>();
                let exact: f64 = (0..k).map(|i| wf[i] as f64 * x[i] as f64).sum();
                let scale: f64 = (0..k).map(|i| (wf[i] as f64 * x[i] as f64).abs()).sum();
                for (name, f) in [("scalar", scalar_dot_fn(dtype)), ("best", dot_fn(dtype))] {
                    let got = f.expect("an integer kernel")(&w, &a) as f64;
                    assert!((got - rounded).abs() <= 1e-5 * scale, "{dtype} k={k} {name}: {got} vs {rounded}");
                }
                assert!((rounded - exact).abs() <= 0.01 * scale, "{dtype} k={k}: rounding {rounded} vs {exact}");
            }
        }
    }

    /// The several-row kernels give each row bitwise what the one-row kernel gives it (so a batched decode step
    /// computes what each sequence's own step would), for 1 to 9 rows and odd and even block counts.
    #[test]
    fn several_rows_equal_one_row_bitwise() {
        for dtype in [DType::Q4_1, DType::Q8_0] {
            let (Some(rows), Some(one)) = (dot_rows_fn(dtype), dot_fn(dtype)) else { continue };
            for (k, seed) in [(224usize, 4u64), (576, 5), (1536, 6)] {
                let w = blocks(dtype, k, seed);
                let a: Vec<Q8Row> = (0..9)
                    .map(|r| {
                        let x: Vec<f32> = (0..k).map(|i| ((i * 31 + r * 17) % 97) as f32 / 40.0 - 1.2).collect();
                        Q8Row::quantize(&x)
                    })
                    .collect();
                for m in 1..=9 {
                    let mut out = vec![f32::NAN; m];
                    rows(&w, &a[..m], &mut out);
                    for r in 0..m {
                        assert_eq!(out[r].to_bits(), one(&w, &a[r]).to_bits(), "{dtype} k={k} m={m} row {r}");
                    }
                }
            }
        }
    }

    #[test]
    fn quantize_rounds_like_ggml() {
        let x: Vec<f32> = (0..64).map(|i| i as f32 - 20.0).collect();
        let a = Q8Row::quantize(&x);
        assert_eq!(a.d[0], 20.0 / 127.0);
        assert_eq!(a.qs[0], -127);
        assert_eq!(a.qs[31], ((11.0f32 * 127.0 / 20.0).round()) as i8);
        let zero = Q8Row::quantize(&[0.0; 32]);
        assert_eq!((zero.d[0], zero.s[0], zero.qs[5]), (0.0, 0.0, 0));
        // halves away from zero, as roundf: a block scaled so that x·127/amax lands on every quarter
        let x: Vec<f32> = (0..32).map(|i| if i == 0 { 127.0 } else { (i as f32 - 16.0) * 4.25 }).collect();
        let a = Q8Row::quantize(&x);
        for (i, &v) in x.iter().enumerate() {
            assert_eq!(a.qs[i], (v * (1.0 / a.d[0])).round() as i8, "value {v}");
        }
        assert_eq!(a.sum[0], a.qs[..32].iter().map(|&q| q as i32).sum::<i32>());
    }
}
