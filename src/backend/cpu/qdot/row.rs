//! The activation side of the integer dot products: rows rounded to 8-bit blocks, the kernels' signature and
//! the f16 scale table. A leaf module, shared by the portable and the SIMD kernels.

/// Elements per activation block.
pub(crate) const QK: usize = 32;

/// A row of activations rounded to 8-bit blocks of [`QK`]: `x[i] ≈ d[i / QK] * qs[i]`, and `s[b] = d[b] * Σ qs`
/// over block `b` (ggml's Q8_1: the sum serves the weight types with an offset, Q4_1's `m` and the K-quants' mins).
#[derive(Clone, Debug, Default)]
pub(crate) struct Q8Row {
    pub qs: Vec<i8>,
    pub d: Vec<f32>,
    pub s: Vec<f32>,
    /// `[d[0], s[0], d[1], s[1], ..]`: a pair of blocks' scales in one 128-bit load (the Q4_1 kernel's).
    pub ds: Vec<f32>,
    /// `Σ qs` of each block (the repacked kernels' offset of the signed types, `repack.rs`).
    pub sum: Vec<i32>,
}

impl Q8Row {
    /// `x` (a multiple of [`QK`] long) rounded to 8-bit blocks, as ggml's `quantize_row_q8_1` rounds it (halves
    /// away from zero, as C's `roundf`).
    pub(crate) fn quantize(x: &[f32]) -> Q8Row {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked)
            return unsafe { quantize_avx2(x) };
        }
        quantize_portable(x)
    }
}

/// [`Q8Row::quantize`] with AVX2: each finite block rounded by vector instructions (`block_avx2`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn quantize_avx2(x: &[f32]) -> Q8Row {
    quantize_with(x, |xs, qs| {
        // SAFETY: the CPU has AVX2 (this function's feature); xs and qs are QK long (chunks_exact below).
        unsafe { block_avx2(xs, qs) }
    })
}

/// `x − trunc(x)` is exact: rounded to the nearest integer, halves away from zero (`f32::round`), by a truncation
/// and a comparison.
#[inline(always)]
fn round_half_away(x: f32) -> f32 {
    let t = x.trunc();
    if (x - t).abs() >= 0.5 {
        t + 1f32.copysign(x)
    } else {
        t
    }
}

#[inline(always)]
fn quantize_portable(x: &[f32]) -> Q8Row {
    quantize_with(x, block_portable)
}

/// `x` rounded block by block with `block`.
#[inline(always)]
fn quantize_with(x: &[f32], block: impl Fn(&[f32], &mut [i8]) -> (f32, [i32; 3])) -> Q8Row {
    let nb = x.len() / QK;
    let mut row =
        Q8Row { qs: vec![0; nb * QK], d: vec![0.0; nb], s: vec![0.0; nb], ds: vec![0.0; 2 * nb], sum: vec![0; nb] };
    for ((b, xs), qs) in x.chunks_exact(QK).enumerate().zip(row.qs.chunks_exact_mut(QK)) {
        let (d, [sum, _, _]) = block(xs, qs);
        row.d[b] = d;
        row.sum[b] = sum;
        row.s[b] = d * sum as f32;
        (row.ds[2 * b], row.ds[2 * b + 1]) = (d, row.s[b]);
    }
    row
}

/// [`block_portable`] by the fastest path this CPU has (`xs` and `qs` [`QK`] long).
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn quantize_block(xs: &[f32], qs: &mut [i8]) -> (f32, [i32; 3]) {
    assert!(xs.len() == QK && qs.len() == QK, "a block of {QK}");
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked); both are QK long (checked)
        return unsafe { block_avx2(xs, qs) };
    }
    block_portable(xs, qs)
}

/// One block of [`QK`] values rounded into `qs`: its scale `d` and the sums of its values (all, first half,
/// second half).
#[inline(always)]
pub(crate) fn block_portable(xs: &[f32], qs: &mut [i8]) -> (f32, [i32; 3]) {
    let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
    // a NaN would round to 0 and vanish (ggml's rounding drops it): the block's scale carries it instead
    let d = if xs.iter().any(|v| v.is_nan()) { f32::NAN } else { amax / 127.0 };
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sums = [0i32; 3];
    for (i, (q, &v)) in qs.iter_mut().zip(xs).enumerate() {
        *q = round_half_away(v * id) as i8;
        sums[0] += *q as i32;
        sums[1 + i / (QK / 2)] += *q as i32;
    }
    (d, sums)
}

/// [`block_portable`] by vector instructions for a finite block (bitwise the same: the same scale, product and
/// rounding); a block with a NaN or an infinity, or whose scale's inverse overflows, goes to `block_portable`.
///
/// # Safety
/// The CPU has AVX2; `xs` and `qs` are [`QK`] long.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn block_avx2(xs: &[f32], qs: &mut [i8]) -> (f32, [i32; 3]) {
    use std::arch::x86_64::*;
    debug_assert!(xs.len() == QK && qs.len() == QK);
    // SAFETY: 32 values read and 32 bytes written (the caller's promise)
    unsafe {
        let p = xs.as_ptr();
        let v = [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)), _mm256_loadu_ps(p.add(16)), _mm256_loadu_ps(p.add(24))];
        let sign = _mm256_set1_ps(-0.0);
        let abs = v.map(|x| _mm256_andnot_ps(sign, x));
        let m = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        let unord = v.map(|x| _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x));
        let nan = _mm256_or_ps(_mm256_or_ps(unord[0], unord[1]), _mm256_or_ps(unord[2], unord[3]));
        if _mm256_movemask_ps(nan) != 0 || amax == f32::INFINITY {
            return block_portable(xs, qs);
        }
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        if id == f32::INFINITY {
            // a subnormal scale: the products are infinite, which only the portable rounding saturates
            return block_portable(xs, qs);
        }
        let id = _mm256_set1_ps(id);
        let (half, one) = (_mm256_set1_ps(0.5), _mm256_set1_ps(1.0));
        let q = v.map(|x| {
            let y = _mm256_mul_ps(x, id);
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y);
            let away = _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_andnot_ps(sign, _mm256_sub_ps(y, t)), half);
            let step = _mm256_and_ps(away, _mm256_or_ps(_mm256_and_ps(y, sign), one));
            _mm256_cvttps_epi32(_mm256_add_ps(t, step))
        });
        let hsum = |a: __m256i| {
            let s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256::<1>(a));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
            _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s)))
        };
        let (h0, h1) = (hsum(_mm256_add_epi32(q[0], q[1])), hsum(_mm256_add_epi32(q[2], q[3])));
        let bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        let bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(qs.as_mut_ptr() as *mut __m256i, bytes);
        (d, [h0 + h1, h0, h1])
    }
}

/// Every f16 bit pattern as f32 (256 KiB, made on first use), for the kernels' block scales.
#[cfg(target_arch = "x86_64")]
pub(crate) fn f16_table() -> &'static [f32; 65536] {
    static TABLE: std::sync::OnceLock<Box<[f32; 65536]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Box::new([0f32; 65536]);
        t.iter_mut().enumerate().for_each(|(i, v)| *v = half::f16::from_bits(i as u16).to_f32());
        t
    })
}

/// `Σ w[i] * a[i]` over one weight row: the row's block bytes and the activations (same length).
pub(crate) type DotFn = fn(&[u8], &Q8Row) -> f32;

/// `out[r] = Σ w[i] * a[r][i]` of one weight row with several activation rows (`out.len() == a.len()`), each
/// bitwise what the type's [`DotFn`] gives for that row alone.
pub(crate) type DotRowsFn = fn(&[u8], &[Q8Row], &mut [f32]);

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector rounding is bitwise the portable one: random blocks of every magnitude, halves that round away,
    /// zeros, subnormals, and blocks with a NaN or an infinity.
    #[test]
    fn vector_blocks_equal_portable_blocks() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut blocks: Vec<[f32; QK]> = vec![[0.0; QK], [1e-40; QK], [-3.0; QK]];
        for i in 0..20000 {
            let scale = 2f32.powi((next() % 60) as i32 - 30);
            let mut b = [0f32; QK];
            for v in &mut b {
                *v = ((next() % 2001) as f32 - 1000.0) / 1000.0 * scale;
            }
            // exact halves after scaling: amax 127 makes d = 1
            if i % 3 == 0 {
                b[0] = 127.0;
                b[1 + (next() % 31) as usize] = ((next() % 254) as f32 - 127.0) + 0.5;
            }
            if i % 997 == 0 {
                b[(next() % 32) as usize] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][i % 3];
            }
            blocks.push(b);
        }
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") {
            for b in &blocks {
                let (mut q0, mut q1) = ([0i8; QK], [0i8; QK]);
                let want = block_portable(b, &mut q0);
                // SAFETY: AVX2 checked; both QK long
                let got = unsafe { block_avx2(b, &mut q1) };
                assert_eq!(q0, q1, "{b:?}");
                assert_eq!(want.1, got.1, "{b:?}");
                assert!(want.0.to_bits() == got.0.to_bits() || (want.0.is_nan() && got.0.is_nan()), "{b:?}");
            }
            return;
        }
        println!("SKIPPED: this CPU lacks AVX2");
    }
}
