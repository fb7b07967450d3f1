//! The check llama.cpp's loader makes of a file's tensors (`ggml_validate_row_data`, on with `--check-tensors`):
//! every f32, f16 and bf16 value finite, and every block's f16 scale (and min) finite. A NaN or infinite weight
//! would otherwise flow through the kernels into logits or embeddings that are NaN, or worse, finite and wrong:
//! an activation quantized for an integer dot product rounds NaN to 0, and a softmax's max skips it.

use super::blocks::{blocks, BlockIq1M, BlockMxfp4, F16Le};
use crate::dtype::DType;

/// The first value of `bytes` (little-endian `dtype` data, whole elements or blocks) that is not finite: its
/// element index (for a block type, the first element of the block whose scale or min it is) and the value.
pub(crate) fn first_non_finite(dtype: DType, bytes: &[u8]) -> Option<(usize, f32)> {
    match dtype {
        DType::F32 => bytes
            .chunks_exact(4)
            .position(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & 0x7f80_0000 == 0x7f80_0000)
            .map(|i| (i, f32_at(bytes, i))),
        DType::F16 => bytes
            .chunks_exact(2)
            .position(|b| half_bits(b) & 0x7c00 == 0x7c00)
            .map(|i| (i, F16Le([bytes[2 * i], bytes[2 * i + 1]]).get())),
        DType::BF16 => bytes
            .chunks_exact(2)
            .position(|b| u16::from_le_bytes([b[0], b[1]]) & 0x7f80 == 0x7f80)
            .map(|i| (i, half::bf16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]).to_f32())),
        DType::I32 => None,
        DType::IQ1_M => blocks::<BlockIq1M>(bytes).iter().enumerate().find_map(|(i, b)| {
            let d = b.d();
            (!d.is_finite()).then_some((i * 256, d))
        }),
        // an E8M0 exponent of 0xFF is OCP's NaN (ggml's loader refuses the block too)
        DType::MXFP4 => blocks::<BlockMxfp4>(bytes).iter().position(|b| b.e == 0xFF).map(|i| (i * 32, f32::NAN)),
        _ => first_non_finite_scale(dtype, bytes),
    }
}

fn f32_at(bytes: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]])
}

fn half_bits(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}

/// The first block of `bytes` (whole blocks of block type `dtype`) with a scale or min that is not finite: the
/// block's first element and the value.
fn first_non_finite_scale(dtype: DType, bytes: &[u8]) -> Option<(usize, f32)> {
    bytes.chunks_exact(dtype.block_bytes()).enumerate().find_map(|(i, b)| {
        let scale = |&o: &usize| F16Le([b[o], b[o + 1]]);
        let bad = dtype.scale_offsets().iter().map(scale).find(|h| half_bits(&h.0) & 0x7c00 == 0x7c00);
        bad.map(|h| (i * dtype.block_size(), h.get()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_value_or_scale_that_is_not_finite() {
        let f32s: Vec<u8> = [1.0f32, 2.0, f32::NAN, f32::INFINITY].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(first_non_finite(DType::F32, &f32s).map(|(i, _)| i), Some(2));
        assert_eq!(first_non_finite(DType::F32, &f32s[..8]), None);
        let f16s: Vec<u8> =
            [1.0f32, -65504.0, f32::NEG_INFINITY].iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
        assert_eq!(first_non_finite(DType::F16, &f16s), Some((2, f32::NEG_INFINITY)));
        let bf16s: Vec<u8> =
            [3.0e38f32, f32::NAN].iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect();
        assert_eq!(first_non_finite(DType::BF16, &bf16s).map(|(i, _)| i), Some(1));
        // Q4_1 blocks of 20 bytes: d then m; the second block's m is NaN
        let mut q = vec![0u8; 40];
        q[20..22].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        q[22..24].copy_from_slice(&half::f16::NAN.to_le_bytes());
        assert_eq!(first_non_finite(DType::Q4_1, &q).map(|(i, _)| i), Some(32));
        assert_eq!(first_non_finite(DType::Q4_1, &q[..20]), None);
        // a finite extreme quant scale is fine: only the scale's own value is checked
        q[22..24].copy_from_slice(&half::f16::MAX.to_le_bytes());
        assert_eq!(first_non_finite(DType::Q4_1, &q), None);
    }
}
