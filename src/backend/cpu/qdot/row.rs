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

/// [`Q8Row::quantize`] compiled with AVX2: the rounding becomes vector instructions (not a `roundf` call per value).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn quantize_avx2(x: &[f32]) -> Q8Row {
    quantize_portable(x)
}

/// `x` rounded to the nearest integer, halves away from zero (`f32::round`), by a truncation and a comparison that
/// compilers vectorize: `x − trunc(x)` is exact.
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
    let nb = x.len() / QK;
    let mut row =
        Q8Row { qs: vec![0; nb * QK], d: vec![0.0; nb], s: vec![0.0; nb], ds: vec![0.0; 2 * nb], sum: vec![0; nb] };
    for ((b, xs), qs) in x.chunks_exact(QK).enumerate().zip(row.qs.chunks_exact_mut(QK)) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        // a NaN would round to 0 and vanish (ggml's rounding drops it): the block's scale carries it instead
        let d = if xs.iter().any(|v| v.is_nan()) { f32::NAN } else { amax / 127.0 };
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in qs.iter_mut().zip(xs) {
            *q = round_half_away(v * id) as i8;
            sum += *q as i32;
        }
        row.d[b] = d;
        row.sum[b] = sum;
        row.s[b] = d * sum as f32;
        (row.ds[2 * b], row.ds[2 * b + 1]) = (d, row.s[b]);
    }
    row
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
