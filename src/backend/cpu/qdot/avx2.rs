//! AVX2 kernels (with FMA and F16C): 32 weights a step, unpacked to bytes, multiplied with the int8
//! activations by `vpmaddubsw` (unsigned × signed pairs into i16) and `vpmaddwd` (pairs into i32) — or with
//! AVX-512 VNNI by one `vpdpbusd` — converted and accumulated in f32 with the block's two scales. Signed weights go
//! through `vpsignb` (|w| × sign(w)·a), as llama.cpp's kernels do. Each matches its scalar definition
//! (`scalar.rs`) to rounding. The kernels are written once (`kernels!`) and compiled for both feature sets.

use super::row::{DotFn, DotRowsFn};
use crate::dtype::DType;

/// Whether this CPU runs the AVX2 kernels, and whether it has AVX-512 VNNI for them (checked once).
pub(super) fn available() -> bool {
    features().0
}

fn features() -> (bool, bool) {
    static FEATURES: std::sync::OnceLock<(bool, bool)> = std::sync::OnceLock::new();
    *FEATURES.get_or_init(|| {
        let avx2 =
            is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
        (avx2, avx2 && is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl"))
    })
}

pub(super) fn dot_fn(dtype: DType) -> Option<DotFn> {
    if vnni_on() {
        vnni::dot_fn(dtype)
    } else {
        avx2::dot_fn(dtype)
    }
}

/// The kernels of a weight row with several activation rows, for the types that have one (Q4_1, Q8_0).
pub(super) fn dot_rows_fn(dtype: DType) -> Option<DotRowsFn> {
    if vnni_on() {
        vnni::dot_rows_fn(dtype)
    } else {
        avx2::dot_rows_fn(dtype)
    }
}

fn vnni_on() -> bool {
    features().1 && std::env::var_os("WEBTENSOR_CPU_NO_VNNI").is_none()
}

/// `Σ u[i] * s[i]` in 8 i32 lanes with AVX2: pairs into i16 (`vpmaddubsw`; the products of Q8 activations and
/// weights below 128 never saturate), then pairs of those into i32.
#[inline(always)]
unsafe fn maddubs(u: std::arch::x86_64::__m256i, s: std::arch::x86_64::__m256i) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
}

/// The same with one AVX-512 VNNI instruction (`vpdpbusd`: groups of four into i32).
#[inline(always)]
unsafe fn dpbusd(u: std::arch::x86_64::__m256i, s: std::arch::x86_64::__m256i) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
}

/// Bytes ahead of the block being read that the kernels prefetch (rows are read
/// front to back, one after another).
const PREFETCH: usize = 4096;

macro_rules! kernels {
    ($name:ident, $features:literal, $dot:ident) => {
        mod $name {
            use crate::backend::cpu::qdot::avx2::PREFETCH;
            use crate::backend::cpu::qdot::row::{f16_table, DotFn, DotRowsFn, Q8Row, QK};
            use crate::dtype::DType;
            use crate::quant::*;
            use std::arch::x86_64::*;

            pub(super) fn dot_fn(dtype: DType) -> Option<DotFn> {
                // SAFETY (each wrapper): only called after `features()` found this module's features on the CPU;
                // the kernels read whole blocks of `w` and the matching elements of `a`, whose lengths the
                // callers match.
                Some(match dtype {
                    DType::Q4_0 => |w, a| unsafe { q4_0(w, a) },
                    DType::Q4_1 => |w, a| unsafe { q4_1(w, a) },
                    DType::Q8_0 => |w, a| unsafe { q8_0(w, a) },
                    DType::Q4_K => |w, a| unsafe { q4_k(w, a) },
                    DType::Q6_K => |w, a| unsafe { q6_k(w, a) },
                    DType::Q5_0 => |w, a| unsafe { q5_0(w, a) },
                    DType::Q5_1 => |w, a| unsafe { q5_1(w, a) },
                    DType::Q2_K => |w, a| unsafe { q2_k(w, a) },
                    DType::Q3_K => |w, a| unsafe { q3_k(w, a) },
                    DType::Q5_K => |w, a| unsafe { q5_k(w, a) },
                    DType::IQ4_NL => |w, a| unsafe { iq4_nl(w, a) },
                    DType::IQ4_XS => |w, a| unsafe { iq4_xs(w, a) },
                    DType::MXFP4 => |w, a| unsafe { mxfp4(w, a) },
                    DType::IQ2_XXS => |w, a| unsafe { iq2_xxs(w, a) },
                    DType::IQ2_XS => |w, a| unsafe { iq2_xs(w, a) },
                    DType::IQ2_S => |w, a| unsafe { iq2_s(w, a) },
                    DType::IQ3_XXS => |w, a| unsafe { iq3_xxs(w, a) },
                    DType::IQ3_S => |w, a| unsafe { iq3_s(w, a) },
                    DType::IQ1_S => |w, a| unsafe { iq1_s(w, a) },
                    DType::IQ1_M => |w, a| unsafe { iq1_m(w, a) },
                    DType::TQ1_0 => |w, a| unsafe { tq1_0(w, a) },
                    DType::TQ2_0 => |w, a| unsafe { tq2_0(w, a) },
                    _ => return None,
                })
            }

            pub(super) fn dot_rows_fn(dtype: DType) -> Option<DotRowsFn> {
                // SAFETY: as dot_fn's
                Some(match dtype {
                    DType::Q4_1 => |w, a, out| unsafe { q4_1_many(w, a, out) },
                    DType::Q8_0 => |w, a, out| unsafe { q8_0_many(w, a, out) },
                    _ => return None,
                })
            }

            /// 0xff in byte j of the result where bit j of `bits` is set, 0 elsewhere (ggml's `bytes_from_bits_32`).
            #[inline]
            #[target_feature(enable = $features)]
            fn bytes_from_bits(bits: [u8; 4]) -> __m256i {
                let spread =
                    _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000);
                let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(i32::from_le_bytes(bits)), spread);
                // every bit but bit (j mod 8) set in byte j: all ones exactly where that bit was set
                let others = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
                _mm256_cmpeq_epi8(others, _mm256_set1_epi64x(-1))
            }

            /// Q5_0: each value `(nibble | fifth bit << 4) − 16`, formed as the nibble with 0xf0 or-ed in where the
            /// fifth bit is clear (so the byte reads as `nibble − 16`), dotted with the activations as Q4_0 is.
            #[target_feature(enable = $features)]
            fn q5_0(w: &[u8], a: &Q8Row) -> f32 {
                let t = f16_table();
                let bytes = w;
                let w = blocks::<BlockQ5_0>(w);
                four_way(w.len(), |b| {
                    prefetch(bytes, b * size_of::<BlockQ5_0>() + PREFETCH);
                    let high = _mm256_andnot_si256(bytes_from_bits(w[b].qh), _mm256_set1_epi8(0xf0u8 as i8));
                    let q = _mm256_or_si256(nibbles(&w[b].qs), high);
                    let dot = _mm256_cvtepi32_ps(dot_i8_i8(q, load32(&a.qs, b * QK)));
                    (dot, f16_of(t, w[b].d) * a.d[b])
                })
            }

            /// Q5_1: each value `nibble | fifth bit << 4` (0..32, unsigned against the signed activations), plus the
            /// block's offset `m` against the activations' sum.
            #[target_feature(enable = $features)]
            fn q5_1(w: &[u8], a: &Q8Row) -> f32 {
                let t = f16_table();
                let bytes = w;
                let w = blocks::<BlockQ5_1>(w);
                let dots = four_way(w.len(), |b| {
                    prefetch(bytes, b * size_of::<BlockQ5_1>() + PREFETCH);
                    let high = _mm256_and_si256(bytes_from_bits(w[b].qh), _mm256_set1_epi8(0x10));
                    let q = _mm256_or_si256(nibbles(&w[b].qs), high);
                    let dot = _mm256_cvtepi32_ps(dot_u8_i8(q, load32(&a.qs, b * QK)));
                    (dot, f16_of(t, w[b].d) * a.d[b])
                });
                // the offsets: the row's blocks are in the cache now
                dots + w.iter().zip(&a.s).map(|(blk, s)| f16_of(t, blk.m) * s).sum::<f32>()
            }

            /// The two 16-element halves of a 32-lane product of pairs (`maddubs`' 16 i16 sums: the low 128 bits
            /// are the first half) weighted by `lo` and `hi` and summed into 8 i32 lanes.
            #[inline]
            #[target_feature(enable = $features)]
            fn weigh_halves(pairs: __m256i, lo: i16, hi: i16) -> __m256i {
                _mm256_madd_epi16(pairs, _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo)))
            }

            /// Q2_K: per 32-block of activations, two 16-groups `d·(sc & 15)·q − dmin·(sc >> 4)` with q the 2 bits at
            /// `2·j` of 32 bytes of `qs`: the products and the activations' own pair sums (for the mins) weighted by
            /// each half's scale in one `madd`.
            #[target_feature(enable = $features)]
            fn q2_k(w: &[u8], a: &Q8Row) -> f32 {
                let t = f16_table();
                let (mut acc, mut mins) = ([_mm256_setzero_ps(); 2], [_mm256_setzero_ps(); 2]);
                let (m2, ones) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
                for (sb, blk) in blocks::<BlockQ2K>(w).iter().enumerate() {
                    prefetch_span(w, sb * size_of::<BlockQ2K>() + PREFETCH, size_of::<BlockQ2K>());
                    let (d, dmin) = (f16_of(t, blk.d), f16_of(t, blk.dmin));
                    for n in 0..2 {
                        let bits = load32(&blk.qs, 32 * n);
                        for j in 0..4 {
                            let q = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * j as i32)), m2);
                            let b = sb * 8 + 4 * n + j;
                            let y = load32(&a.qs, b * QK);
                            let (s0, s1) = (blk.scales[8 * n + 2 * j], blk.scales[8 * n + 2 * j + 1]);
                            let dot = weigh_halves(_mm256_maddubs_epi16(q, y), (s0 & 15) as i16, (s1 & 15) as i16);
                            let sum = weigh_halves(_mm256_maddubs_epi16(ones, y), (s0 >> 4) as i16, (s1 >> 4) as i16);
                            acc[j % 2] =
                                _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d * a.d[b]), acc[j % 2]);
                            mins[j % 2] =
                                _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(dmin * a.d[b]), mins[j % 2]);
                        }
                    }
                }
                hsum(_mm256_add_ps(acc[0], acc[1])) - hsum(_mm256_add_ps(mins[0], mins[1]))
            }

            /// Q3_K: per 32-block of activations, two 16-groups `d·sc·q` with q the 2 bits at `2·j` of 32 bytes of
            /// `qs`, less 4 where the group's `hmask` bit is clear (−4..4, signed: dotted as Q6_K is).
            #[target_feature(enable = $features)]
            fn q3_k(w: &[u8], a: &Q8Row) -> f32 {
                let t = f16_table();
                let mut acc = [_mm256_setzero_ps(); 2];
                let (m2, four) = (_mm256_set1_epi8(3), _mm256_set1_epi8(4));
                for (sb, blk) in blocks::<BlockQ3K>(w).iter().enumerate() {
                    prefetch_span(w, sb * size_of::<BlockQ3K>() + PREFETCH, size_of::<BlockQ3K>());
                    let (d, scales, hm) = (f16_of(t, blk.d), blk.scales(), load32(&blk.hmask, 0));
                    for n in 0..2 {
                        let bits = load32(&blk.qs, 32 * n);
                        for j in 0..4 {
                            let low = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * j as i32)), m2);
                            let bit = _mm256_set1_epi8((1u8 << (4 * n + j)) as i8);
                            let clear = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), _mm256_setzero_si256());
                            let q = _mm256_sub_epi8(low, _mm256_and_si256(clear, four));
                            let b = sb * 8 + 4 * n + j;
                            let y = load32(&a.qs, b * QK);
                            let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
                            let (s0, s1) = (scales[8 * n + 2 * j], scales[8 * n + 2 * j + 1]);
                            let dot = weigh_halves(pairs, s0 as i16, s1 as i16);
                            acc[j % 2] =
                                _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d * a.d[b]), acc[j % 2]);
                        }
                    }
                }
                hsum(_mm256_add_ps(acc[0], acc[1]))
            }

            /// A block's f16 field through the conversion table (a scalar `vcvtph2ps` costs a dependency on the
            /// register it merges into, which the compiler may tie to an accumulator).
            #[inline(always)]
            fn f16_of(t: &[f32; 65536], h: F16Le) -> f32 {
                t[u16::from_le_bytes(h.0) as usize]
            }

            #[inline]
            #[target_feature(enable = $features)]
            fn hsum(v: __m256) -> f32 {
                let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
                let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
                _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
            }

            /// `Σ u[i] * s[i]` of 32 unsigned and 32 signed bytes, as 8 i32 lanes (lane k: elements 4k..4k+4).
            #[inline]
            #[target_feature(enable = $features)]
            fn dot_u8_i8(u: __m256i, s: __m256i) -> __m256i {
                // SAFETY: this function's features include the instruction's
                unsafe { super::$dot(u, s) }
            }

            /// `Σ x[i] * y[i]` of 32 signed bytes each (x never -128).
            #[inline]
            #[target_feature(enable = $features)]
            fn dot_i8_i8(x: __m256i, y: __m256i) -> __m256i {
                dot_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
            }

            /// 32 bytes of `s` from byte `at` (bounds-checked).
            #[inline]
            #[target_feature(enable = $features)]
            fn load32<T: Copy>(s: &[T], at: usize) -> __m256i {
                let bytes = &s[at..at + 32 / size_of::<T>()];
                // SAFETY: `bytes` is 32 bytes long; the load is unaligned.
                unsafe { _mm256_loadu_si256(bytes.as_ptr() as *const __m256i) }
            }

            /// The 32 nibbles of a 32-block's 16 bytes, low nibbles (the first 16 elements) first.
            #[inline]
            #[target_feature(enable = $features)]
            fn nibbles(bytes: &[u8; 16]) -> __m256i {
                // SAFETY: `bytes` is 16 bytes long; the load is unaligned.
                let x = unsafe { _mm_loadu_si128(bytes.as_ptr() as *const __m128i) };
                _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(0x0f))
            }

            /// `Σ` over blocks of `w` (`bb` bytes each) of `dot(b) · scale(b)`, in four accumulators so that the
            /// multiply-adds' 4-cycle latency does not bound the loop (one accumulator: a block every 4 cycles).
            #[inline]
            #[target_feature(enable = $features)]
            fn four_way(nb: usize, block: impl Fn(usize) -> (__m256, f32)) -> f32 {
                let mut acc = [_mm256_setzero_ps(); 4];
                for b4 in 0..nb / 4 {
                    for (j, acc) in acc.iter_mut().enumerate() {
                        let (dot, scale) = block(4 * b4 + j);
                        *acc = _mm256_fmadd_ps(dot, _mm256_set1_ps(scale), *acc);
                    }
                }
                for b in nb / 4 * 4..nb {
                    let (dot, scale) = block(b);
                    acc[0] = _mm256_fmadd_ps(dot, _mm256_set1_ps(scale), acc[0]);
                }
                hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])))
            }

            #[target_feature(enable = $features)]
            fn q4_0(w: &[u8], a: &Q8Row) -> f32 {
                let t = f16_table();
                let bytes = w;
                let w = blocks::<BlockQ4_0>(w);
                four_way(w.len(), |b| {
                    prefetch(bytes, b * size_of::<BlockQ4_0>() + PREFETCH);
                    let q = _mm256_sub_epi8(nibbles(&w[b].qs), _mm256_set1_epi8(8));
                    let dot = _mm256_cvtepi32_ps(dot_i8_i8(q, load32(&a.qs, b * QK)));
                    (dot, f16_of(t, w[b].d) * a.d[b])
                })
            }

            /// A 4-bit non-linear group's 32 values (`table[nibble]`, low nibbles first) by one `vpshufb` of the
            /// 16-entry table in both lanes.
            #[inline]
            #[target_feature(enable = $features)]
            fn lookup(table: __m256i, qs: &[u8; 16]) -> __m256i {
                _mm256_shuffle_epi8(table, nibbles(qs))
            }

            /// A 16-entry i8 table in both 128-bit lanes.
            #[inline]
            #[target_feature(enable = $features)]
            fn table16(t: &[i8; 16]) -> __m256i {
                // SAFETY: `t` is 16 bytes long; the load is unaligned.
                let x = unsafe { _mm_loadu_si128(t.as_ptr() as *const __m128i) };
                _mm256_set_m128i(x, x)
            }

            /// IQ4_NL: Q4_0's kernel with the values looked up in `kvalues_iq4nl` (never −128: `vpsignb` is safe).
            #[target_feature(enable = $features)]
            fn iq4_nl(w: &[u8], a: &Q8Row) -> f32 {
                let (t, table) = (f16_table(), table16(&grids::KVALUES_IQ4NL));
                let bytes = w;
                let w = blocks::<BlockIq4Nl>(w);
                four_way(w.len(), |b| {
                    prefetch(bytes, b * size_of::<BlockIq4Nl>() + PREFETCH);
                    let dot = _mm256_cvtepi32_ps(dot_i8_i8(lookup(table, &w[b].qs), load32(&a.qs, b * QK)));
                    (dot, f16_of(t, w[b].d) * a.d[b])
                })
            }

            /// MXFP4: IQ4_NL's kernel with the doubled E2M1 values and the E8M0 exponent's halved scale.
            #[target_feature(enable = $features)]
            fn mxfp4(w: &[u8], a: &Q8Row) -> f32 {
                let table = table16(&grids::KVALUES_MXFP4);
                let bytes = w;
                let w = blocks::<BlockMxfp4>(w);
                four_way(w.len(), |b| {
                    prefetch(bytes, b * size_of::<BlockMxfp4>() + PREFETCH);
                    let dot = _mm256_cvtepi32_ps(dot_i8_i8(lookup(table, &w[b].qs), load32(&a.qs, b * QK)));
                    (dot, e8m0_half(w[b].e) * a.d[b])
                })
            }

            /// IQ4_XS: eight IQ4_NL groups a super-block, each scaled by `d·(ls − 32)`: the eight 6-bit `ls` taken
            /// at once (lane `ib` shifting the low nibbles by `4·ib`, the high bit pairs by `2·ib`) and folded with
            /// `d` and the groups' activation scales into one vector, a group's lane broadcast by a permute.
            #[target_feature(enable = $features)]
            fn iq4_xs(w: &[u8], a: &Q8Row) -> f32 {
                let (t, table) = (f16_table(), table16(&grids::KVALUES_IQ4NL));
                let (low_shift, high_shift) =
                    (_mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
                let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                for (sb, blk) in blocks::<BlockIq4Xs>(w).iter().enumerate() {
                    prefetch_span(w, sb * size_of::<BlockIq4Xs>() + PREFETCH, size_of::<BlockIq4Xs>());
                    let low = _mm256_srlv_epi32(_mm256_set1_epi32(i32::from_le_bytes(blk.scales_l)), low_shift);
                    let high =
                        _mm256_srlv_epi32(_mm256_set1_epi32(u16::from_le_bytes(blk.scales_h) as i32), high_shift);
                    let ls = _mm256_or_si256(
                        _mm256_and_si256(low, _mm256_set1_epi32(15)),
                        _mm256_slli_epi32(_mm256_and_si256(high, _mm256_set1_epi32(3)), 4),
                    );
                    let ls = _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)));
                    let d = _mm256_set1_ps(f16_of(t, blk.d));
                    let scales = _mm256_mul_ps(_mm256_mul_ps(ls, d), loadu8(&a.d, sb * 8));
                    for ib in (0..8).step_by(2) {
                        let (b0, b1) = (sb * 8 + ib, sb * 8 + ib + 1);
                        let q = lookup(table, blk.qs[16 * ib..16 * ib + 16].try_into().expect("16 bytes"));
                        let dot = _mm256_cvtepi32_ps(dot_i8_i8(q, load32(&a.qs, b0 * QK)));
                        let scale = _mm256_permutevar8x32_ps(scales, _mm256_set1_epi32(ib as i32));
                        acc0 = _mm256_fmadd_ps(dot, scale, acc0);
                        let q = lookup(table, blk.qs[16 * ib + 16..16 * ib + 32].try_into().expect("16 bytes"));
                        let dot = _mm256_cvtepi32_ps(dot_i8_i8(q, load32(&a.qs, b1 * QK)));
                        let scale = _mm256_permutevar8x32_ps(scales, _mm256_set1_epi32(ib as i32 + 1));
                        acc1 = _mm256_fmadd_ps(dot, scale, acc1);
                    }
                }
                hsum(_mm256_add_ps(acc0, acc1))
            }

            // the grid and ternary types (`avx2_iq.rs`)
            crate::backend::cpu::qdot::avx2_iq::iq_kernels!($features);

            /// Two Q4_1 blocks' scales and offsets as `[d0, m0, d1, m1]`, by one `vcvtph2ps` (no table lookups in
            /// the loop).
            #[inline]
            #[target_feature(enable = $features)]
            fn f16_pairs(b0: &BlockQ4_1, b1: &BlockQ4_1) -> __m128 {
                let word = |b: &BlockQ4_1| i32::from_le_bytes([b.d.0[0], b.d.0[1], b.m.0[0], b.m.0[1]]);
                _mm_cvtph_ps(_mm_set_epi32(0, 0, word(b1), word(b0)))
            }

            #[target_feature(enable = $features)]
            fn q4_1(w: &[u8], a: &Q8Row) -> f32 {
                let t = f16_table();
                // two blocks a step into two accumulators, so that the multiply-adds' latencies overlap; the
                // blocks' four f16 scales converted together, multiplied by the activations' d and s together
                let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
                let mut offs = _mm_setzero_ps();
                let bytes = w;
                let w = blocks::<BlockQ4_1>(w);
                let pairs = w.chunks_exact(2).zip(a.qs.chunks_exact(2 * QK)).zip(a.ds.chunks_exact(4));
                for (p, ((blk, qa), dsa)) in pairs.enumerate() {
                    prefetch(bytes, 2 * p * size_of::<BlockQ4_1>() + PREFETCH);
                    let dot0 = _mm256_cvtepi32_ps(dot_u8_i8(nibbles(&blk[0].qs), load32(qa, 0)));
                    let dot1 = _mm256_cvtepi32_ps(dot_u8_i8(nibbles(&blk[1].qs), load32(qa, QK)));
                    // [d0·da0, m0·sa0, d1·da1, m1·sa1]; dsa is [da0, sa0, da1, sa1]
                    // SAFETY: dsa holds 4 f32 (chunks_exact); the load is unaligned.
                    let ds = _mm_mul_ps(f16_pairs(&blk[0], &blk[1]), unsafe { _mm_loadu_ps(dsa.as_ptr()) });
                    acc0 = _mm256_fmadd_ps(dot0, _mm256_broadcastss_ps(ds), acc0);
                    acc1 = _mm256_fmadd_ps(dot1, _mm256_broadcastss_ps(_mm_movehl_ps(ds, ds)), acc1);
                    offs = _mm_add_ps(offs, ds);
                }
                // lanes 1 and 3 of offs: the offsets' sum
                let odd = _mm_shuffle_ps::<0b11_01_11_01>(offs, offs);
                let mut off = _mm_cvtss_f32(_mm_add_ss(odd, _mm_movehdup_ps(odd)));
                let nb = w.len();
                if nb % 2 == 1 {
                    let (b, blk) = (nb - 1, &w[nb - 1]);
                    let dot = _mm256_cvtepi32_ps(dot_u8_i8(nibbles(&blk.qs), load32(&a.qs, b * QK)));
                    acc0 = _mm256_fmadd_ps(dot, _mm256_set1_ps(f16_of(t, blk.d) * a.d[b]), acc0);
                    off += f16_of(t, blk.m) * a.s[b];
                }
                hsum(_mm256_add_ps(acc0, acc1)) + off
            }

            /// `q4_1` of one weight row with each of `R` activation rows, the weight's nibbles and scales
            /// unpacked once: each row's sum is formed by the same operations in the same order as `q4_1` forms
            /// it, so each result is bitwise `q4_1`'s (a batch's rows compute what each would alone).
            #[inline]
            #[target_feature(enable = $features)]
            fn q4_1_rows<const R: usize>(w: &[u8], a: [&Q8Row; R], out: &mut [f32]) {
                let t = f16_table();
                let (mut acc0, mut acc1) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
                let mut offs = [_mm_setzero_ps(); R];
                let bytes = w;
                let w = blocks::<BlockQ4_1>(w);
                for (p, blk) in w.chunks_exact(2).enumerate() {
                    prefetch(bytes, 2 * p * size_of::<BlockQ4_1>() + PREFETCH);
                    let (n0, n1) = (nibbles(&blk[0].qs), nibbles(&blk[1].qs));
                    let scales = f16_pairs(&blk[0], &blk[1]);
                    for r in 0..R {
                        let qa = &a[r].qs[2 * p * QK..2 * (p + 1) * QK];
                        let dot0 = _mm256_cvtepi32_ps(dot_u8_i8(n0, load32(qa, 0)));
                        let dot1 = _mm256_cvtepi32_ps(dot_u8_i8(n1, load32(qa, QK)));
                        let dsa = &a[r].ds[4 * p..4 * p + 4];
                        // SAFETY: dsa holds 4 f32; the load is unaligned.
                        let ds = _mm_mul_ps(scales, unsafe { _mm_loadu_ps(dsa.as_ptr()) });
                        acc0[r] = _mm256_fmadd_ps(dot0, _mm256_broadcastss_ps(ds), acc0[r]);
                        acc1[r] = _mm256_fmadd_ps(dot1, _mm256_broadcastss_ps(_mm_movehl_ps(ds, ds)), acc1[r]);
                        offs[r] = _mm_add_ps(offs[r], ds);
                    }
                }
                let nb = w.len();
                for r in 0..R {
                    let odd = _mm_shuffle_ps::<0b11_01_11_01>(offs[r], offs[r]);
                    let mut off = _mm_cvtss_f32(_mm_add_ss(odd, _mm_movehdup_ps(odd)));
                    if nb % 2 == 1 {
                        let (b, blk) = (nb - 1, &w[nb - 1]);
                        let dot = _mm256_cvtepi32_ps(dot_u8_i8(nibbles(&blk.qs), load32(&a[r].qs, b * QK)));
                        acc0[r] = _mm256_fmadd_ps(dot, _mm256_set1_ps(f16_of(t, blk.d) * a[r].d[b]), acc0[r]);
                        off += f16_of(t, blk.m) * a[r].s[b];
                    }
                    out[r] = hsum(_mm256_add_ps(acc0[r], acc1[r])) + off;
                }
            }

            #[target_feature(enable = $features)]
            fn q4_1_many(w: &[u8], a: &[Q8Row], out: &mut [f32]) {
                let mut r = 0;
                while r + 4 <= a.len() {
                    q4_1_rows::<4>(w, [&a[r], &a[r + 1], &a[r + 2], &a[r + 3]], &mut out[r..r + 4]);
                    r += 4;
                }
                if r + 2 <= a.len() {
                    q4_1_rows::<2>(w, [&a[r], &a[r + 1]], &mut out[r..r + 2]);
                    r += 2;
                }
                if r < a.len() {
                    out[r] = q4_1(w, &a[r]);
                }
            }

            /// `q8_0` of one weight row with each of `R` activation rows, the weight's bytes loaded once; each
            /// row's sum formed as `q8_0` (`four_way`) forms it, so each result is bitwise `q8_0`'s.
            #[inline]
            #[target_feature(enable = $features)]
            fn q8_0_rows<const R: usize>(w: &[u8], a: [&Q8Row; R], out: &mut [f32]) {
                let t = f16_table();
                let bytes = w;
                let w = blocks::<BlockQ8_0>(w);
                let nb = w.len();
                let mut acc = [[_mm256_setzero_ps(); 4]; R];
                for b in 0..nb {
                    prefetch(bytes, b * size_of::<BlockQ8_0>() + PREFETCH);
                    // four_way's accumulator of block b
                    let j = if b < nb / 4 * 4 { b % 4 } else { 0 };
                    let x = load32(&w[b].qs, 0);
                    let ax = _mm256_sign_epi8(x, x);
                    let d = f16_of(t, w[b].d);
                    for r in 0..R {
                        let y = _mm256_sign_epi8(load32(&a[r].qs, b * QK), x);
                        let dot = _mm256_cvtepi32_ps(dot_u8_i8(ax, y));
                        acc[r][j] = _mm256_fmadd_ps(dot, _mm256_set1_ps(d * a[r].d[b]), acc[r][j]);
                    }
                }
                for r in 0..R {
                    let [a0, a1, a2, a3] = acc[r];
                    out[r] = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
                }
            }

            #[target_feature(enable = $features)]
            fn q8_0_many(w: &[u8], a: &[Q8Row], out: &mut [f32]) {
                let mut r = 0;
                while r + 2 <= a.len() {
                    q8_0_rows::<2>(w, [&a[r], &a[r + 1]], &mut out[r..r + 2]);
                    r += 2;
                }
                if r < a.len() {
                    out[r] = q8_0(w, &a[r]);
                }
            }

            #[target_feature(enable = $features)]
            fn q8_0(w: &[u8], a: &Q8Row) -> f32 {
                let t = f16_table();
                let bytes = w;
                let w = blocks::<BlockQ8_0>(w);
                four_way(w.len(), |b| {
                    prefetch(bytes, b * size_of::<BlockQ8_0>() + PREFETCH);
                    let dot = _mm256_cvtepi32_ps(dot_i8_i8(load32(&w[b].qs, 0), load32(&a.qs, b * QK)));
                    (dot, f16_of(t, w[b].d) * a.d[b])
                })
            }

            /// Q4_K: per super-block, its eight scales and mins unpacked together and turned into f32 vectors
            /// (`d·sc·da` for each 32-block's dot, `dmin·m` against the activations' sums: one vector multiply-add
            /// for all eight mins), so the loop over the 32-blocks is vector work only: a dot, a conversion and a
            /// multiply-add by the block's scale, broadcast from memory.
            #[target_feature(enable = $features)]
            fn q4_k(w: &[u8], a: &Q8Row) -> f32 {
                let t = f16_table();
                // four accumulators: independent multiply-add chains
                let mut acc = [_mm256_setzero_ps(); 4];
                let mut mins = _mm256_setzero_ps();
                let m4 = _mm256_set1_epi8(0x0f);
                for (sb, blk) in blocks::<BlockQ4K>(w).iter().enumerate() {
                    prefetch_span(w, sb * size_of::<BlockQ4K>() + PREFETCH, size_of::<BlockQ4K>());
                    let (d, dmin) = (f16_of(t, blk.d), f16_of(t, blk.dmin));
                    let sm = scales_mins_k4(&blk.scales);
                    let widen = |at: usize| {
                        let bytes = i64::from_le_bytes(sm[at..at + 8].try_into().expect("8 bytes"));
                        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi64x(0, bytes)))
                    };
                    let b0 = sb * 8;
                    let (ad, sa) = (loadu8(&a.d, b0), loadu8(&a.s, b0));
                    // (d·sc)·da per 32-block, as the scalar kernel rounds it
                    let mut scale = [0f32; 8];
                    let ds = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(d), widen(0)), ad);
                    // SAFETY: scale holds 8 f32; the store is unaligned.
                    unsafe { _mm256_storeu_ps(scale.as_mut_ptr(), ds) };
                    mins = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), widen(8)), sa, mins);
                    for j in 0..4 {
                        let q = load32(&blk.qs, 32 * j);
                        let b = b0 + 2 * j;
                        let lo = _mm256_cvtepi32_ps(dot_u8_i8(_mm256_and_si256(q, m4), load32(&a.qs, b * QK)));
                        let hi = _mm256_cvtepi32_ps(dot_u8_i8(
                            _mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                            load32(&a.qs, (b + 1) * QK),
                        ));
                        acc[j % 2] = _mm256_fmadd_ps(lo, _mm256_set1_ps(scale[2 * j]), acc[j % 2]);
                        acc[2 + j % 2] = _mm256_fmadd_ps(hi, _mm256_set1_ps(scale[2 * j + 1]), acc[2 + j % 2]);
                    }
                }
                hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) - hsum(mins)
            }

            /// Q5_K: Q4_K's scheme (scales and mins unpacked a word at a time into f32 vectors) with each 32-block's
            /// fifth bit, bit `sub` of the super-block's 32 `qh` bytes, turned into 16 by a compare.
            #[target_feature(enable = $features)]
            fn q5_k(w: &[u8], a: &Q8Row) -> f32 {
                let t = f16_table();
                let mut acc = [_mm256_setzero_ps(); 4];
                let mut mins = _mm256_setzero_ps();
                let (m4, sixteen) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(16));
                for (sb, blk) in blocks::<BlockQ5K>(w).iter().enumerate() {
                    prefetch_span(w, sb * size_of::<BlockQ5K>() + PREFETCH, size_of::<BlockQ5K>());
                    let (d, dmin) = (f16_of(t, blk.d), f16_of(t, blk.dmin));
                    let sm = scales_mins_k4(&blk.scales);
                    let widen = |at: usize| {
                        let bytes = i64::from_le_bytes(sm[at..at + 8].try_into().expect("8 bytes"));
                        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi64x(0, bytes)))
                    };
                    let b0 = sb * 8;
                    let (ad, sa) = (loadu8(&a.d, b0), loadu8(&a.s, b0));
                    let mut scale = [0f32; 8];
                    let ds = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(d), widen(0)), ad);
                    // SAFETY: scale holds 8 f32; the store is unaligned.
                    unsafe { _mm256_storeu_ps(scale.as_mut_ptr(), ds) };
                    mins = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), widen(8)), sa, mins);
                    let qh = load32(&blk.qh, 0);
                    let fifth = |sub: i32| {
                        let bit = _mm256_set1_epi8((1u8 << sub) as i8);
                        _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit), sixteen)
                    };
                    for j in 0..4 {
                        let q = load32(&blk.qs, 32 * j);
                        let b = b0 + 2 * j;
                        let lo = _mm256_or_si256(_mm256_and_si256(q, m4), fifth(2 * j as i32));
                        let hi =
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), fifth(2 * j as i32 + 1));
                        let lo = _mm256_cvtepi32_ps(dot_u8_i8(lo, load32(&a.qs, b * QK)));
                        let hi = _mm256_cvtepi32_ps(dot_u8_i8(hi, load32(&a.qs, (b + 1) * QK)));
                        acc[j % 2] = _mm256_fmadd_ps(lo, _mm256_set1_ps(scale[2 * j]), acc[j % 2]);
                        acc[2 + j % 2] = _mm256_fmadd_ps(hi, _mm256_set1_ps(scale[2 * j + 1]), acc[2 + j % 2]);
                    }
                }
                hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))) - hsum(mins)
            }

            /// Asks for the cache line `at` bytes into `w` (or past its end: a prefetch never faults) ahead of use.
            #[inline]
            #[target_feature(enable = $features)]
            fn prefetch(w: &[u8], at: usize) {
                _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().wrapping_add(at) as *const i8);
            }

            /// [`prefetch`] of every cache line of `len` bytes from `at`.
            #[inline]
            #[target_feature(enable = $features)]
            fn prefetch_span(w: &[u8], at: usize, len: usize) {
                for line in (0..len + 63).step_by(64) {
                    prefetch(w, at + line.min(len - 1));
                }
            }

            /// 8 f32 of `s` from element `at` (bounds-checked).
            #[inline]
            #[target_feature(enable = $features)]
            fn loadu8(s: &[f32], at: usize) -> __m256 {
                let v = &s[at..at + 8];
                // SAFETY: `v` holds 8 f32; the load is unaligned.
                unsafe { _mm256_loadu_ps(v.as_ptr()) }
            }

            /// Bits `shift`, `shift + 1` of each byte of `h`, moved to bits 4 and 5 (Q6_K's high bits).
            #[inline]
            #[target_feature(enable = $features)]
            fn high_bits(h: __m256i, shift: i32) -> __m256i {
                let bits = match shift {
                    0 => h,
                    2 => _mm256_srli_epi16(h, 2),
                    4 => _mm256_srli_epi16(h, 4),
                    _ => _mm256_srli_epi16(h, 6),
                };
                _mm256_slli_epi16(_mm256_and_si256(bits, _mm256_set1_epi8(3)), 4)
            }

            #[target_feature(enable = $features)]
            fn q6_k(w: &[u8], a: &Q8Row) -> f32 {
                let t = f16_table();
                // four accumulators (one per group): independent multiply-add chains
                let mut acc = [_mm256_setzero_ps(); 4];
                let (m4, c32) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(32));
                for (sb, blk) in blocks::<BlockQ6K>(w).iter().enumerate() {
                    prefetch_span(w, sb * size_of::<BlockQ6K>() + PREFETCH, size_of::<BlockQ6K>());
                    let d = f16_of(t, blk.d);
                    for n in 0..2 {
                        let (l0, l1, h) =
                            (load32(&blk.ql, 64 * n), load32(&blk.ql, 64 * n + 32), load32(&blk.qh, 32 * n));
                        let groups = [
                            _mm256_or_si256(_mm256_and_si256(l0, m4), high_bits(h, 0)),
                            _mm256_or_si256(_mm256_and_si256(l1, m4), high_bits(h, 2)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), high_bits(h, 4)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), high_bits(h, 6)),
                        ];
                        for (g, q) in groups.into_iter().enumerate() {
                            let b = sb * 8 + 4 * n + g;
                            let q = _mm256_sub_epi8(q, c32);
                            let y = load32(&a.qs, b * QK);
                            let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
                            // the first 16 elements' pairs fill the low 128 bits: one scale each half
                            let (s0, s1) = (blk.scales[8 * n + 2 * g] as i8, blk.scales[8 * n + 2 * g + 1] as i8);
                            let scales = _mm256_set_m128i(_mm_set1_epi16(s1 as i16), _mm_set1_epi16(s0 as i16));
                            let dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, scales));
                            acc[g] = _mm256_fmadd_ps(dot, _mm256_set1_ps(d * a.d[b]), acc[g]);
                        }
                    }
                }
                hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])))
            }
        }
    };
}

kernels!(avx2, "avx2,fma,f16c", maddubs);
kernels!(vnni, "avx2,fma,f16c,avx512vnni,avx512vl", dpbusd);
