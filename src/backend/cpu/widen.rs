//! f16 → f32 widening of contiguous rows (exact): with F16C eight values an instruction, inlined into the loop;
//! elsewhere half's conversion. (half's own F16C path converts through a copy and a call per eight values: 10%
//! of a batched decode step went there.)

use half::f16;

/// `out[i] = src[i]` widened to f32 (`src.len() == out.len()`).
#[inline]
pub(crate) fn widen_f16(src: &[f16], out: &mut [f32]) {
    assert_eq!(src.len(), out.len(), "widen_f16: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if super::qdot::fma_available() {
        // SAFETY: the CPU has F16C and AVX (checked with AVX2 and FMA); the lengths are equal (checked).
        return unsafe { widen_f16c(src, out) };
    }
    use half::slice::HalfFloatSliceExt;
    src.convert_to_f32_slice(out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn widen_f16c(src: &[f16], out: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
    let n = out.len() / 8 * 8;
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= both lengths; unaligned loads and stores.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i) as *const __m128i);
            _mm256_storeu_ps(out.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
    }
    for (o, h) in out[n..].iter_mut().zip(&src[n..]) {
        *o = h.to_f32();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_is_exact_for_every_f16() {
        let src: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        // odd lengths and offsets: the vector loop and the tail
        for (start, len) in [(0, 65536), (3, 13), (7, 65521)] {
            let mut out = vec![f32::NAN; len];
            widen_f16(&src[start..start + len], &mut out);
            for (o, h) in out.iter().zip(&src[start..]) {
                let want = h.to_f32();
                assert!(o.to_bits() == want.to_bits() || (o.is_nan() && want.is_nan()), "{h:?}: {o} vs {want}");
            }
        }
    }
}
