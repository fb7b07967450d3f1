//! AVX2 kernels of the IQ grid types, the ternary types and IQ4_XS, expanded into each feature set's module of
//! `avx2.rs` (`iq_kernels!`, whose helpers they use). A group of 32 weights becomes 32 bytes in one register: grid
//! rows gathered by four (or eight) 64-bit (32-bit) loads of the table, their signs applied to the activations
//! (`vpsignb` with ±1 bytes: a table's for the even-parity sign indices, explicit sign bits spread by `sign_bits`),
//! then the unsigned magnitudes dotted with the signed activations as the other types' kernels do. Each matches its
//! portable definition (`iq.rs`) to rounding.

/// Bit j of index i as byte j: 0xff (−1) where set, 0x01 where clear: the ±1 bytes `vpsignb` applies.
static SIGN_BYTES: [u64; 256] = sign_bytes();

const fn sign_bytes() -> [u64; 256] {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut j = 0;
        while j < 8 {
            let byte: u64 = if i & (1 << j) != 0 { 0xff } else { 0x01 };
            t[i] |= byte << (8 * j);
            j += 1;
        }
        i += 1;
    }
    t
}

/// The ±1 bytes of each 7-bit even-parity sign index (ggml's ksigns_iq2xs: the index, its parity in bit 7).
static EVEN_SIGN_BYTES: [u64; 128] = even_sign_bytes();

const fn even_sign_bytes() -> [u64; 128] {
    let mut t = [0u64; 128];
    let mut i = 0;
    while i < 128 {
        t[i] = SIGN_BYTES[i | ((i.count_ones() as usize & 1) << 7)];
        i += 1;
    }
    t
}

/// The ±1 bytes of the 7-bit even-parity sign index in the low bits of `index`.
#[inline(always)]
pub(crate) fn even_signs(index: u32) -> u64 {
    EVEN_SIGN_BYTES[(index & 127) as usize]
}

/// IQ1S_GRID's rows in eighths: each byte (−1, 0, 1) times 8, so that a row's delta is one byte add.
pub(crate) static IQ1S_EIGHTHS: [u64; 2048] = iq1s_eighths();

const fn iq1s_eighths() -> [u64; 2048] {
    let mut t = [0u64; 2048];
    let mut i = 0;
    while i < 2048 {
        let mut j = 0;
        while j < 8 {
            let byte = ((crate::quant::grids::IQ1S_GRID[i] >> (8 * j)) & 0xff) as u8 as i8;
            t[i] |= ((byte * 8) as u8 as u64) << (8 * j);
            j += 1;
        }
        i += 1;
    }
    t
}

/// An IQ1 grid row's ±1 delta as 8 bytes: −1 where `negative`, else 1.
#[inline(always)]
pub(crate) fn delta_bytes(negative: bool) -> u64 {
    if negative {
        u64::MAX
    } else {
        0x0101_0101_0101_0101
    }
}

macro_rules! iq_kernels {
    ($features:literal) => {
        use crate::backend::cpu::qdot::avx2_iq::{delta_bytes, even_signs, IQ1S_EIGHTHS};
        use crate::quant::grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};

        /// Four 8-byte grid rows as one register, row 0 lowest.
        #[inline]
        #[target_feature(enable = $features)]
        fn rows8(r: [u64; 4]) -> __m256i {
            _mm256_set_epi64x(r[3] as i64, r[2] as i64, r[1] as i64, r[0] as i64)
        }

        /// Eight 4-byte grid rows as one register, row 0 lowest.
        #[inline]
        #[target_feature(enable = $features)]
        fn rows4(r: [u32; 8]) -> __m256i {
            let r = r.map(|x| x as i32);
            _mm256_set_epi32(r[7], r[6], r[5], r[4], r[3], r[2], r[1], r[0])
        }

        /// `acc + scale · dot`, the i32 lanes of `dot` as f32 (a function, not a closure: LLVM outlined the
        /// closures that did this, their __m256 passed through memory).
        #[inline]
        #[target_feature(enable = $features)]
        fn scaled_add(dot: __m256i, scale: f32, acc: __m256) -> __m256 {
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(scale), acc)
        }

        /// `Σ` over 32-groups of `d(blk) · Σ_half scale_half · (magnitudes · signed activations)`, the group's
        /// (magnitudes, ±1 signs, the i16 lanes of its scales: its first 16's in the low half, its last 16's in the
        /// high half) from `group`, given what `prepare` made of its super-block (its scale `d` and `P`).
        #[inline]
        #[target_feature(enable = $features)]
        fn grid_kernel<B: Block, P: Copy>(
            w: &[u8],
            a: &Q8Row,
            prepare: impl Fn(&B) -> (f32, P),
            group: impl Fn(&B, P, usize) -> (__m256i, __m256i, __m256i),
        ) -> f32 {
            // two accumulators in registers (indexed by a group's parity, they lived on the stack: a store and a
            // reload in every group's chain)
            let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for (sb, blk) in blocks::<B>(w).iter().enumerate() {
                prefetch_span(w, sb * size_of::<B>() + PREFETCH, size_of::<B>());
                let (d, p) = prepare(blk);
                for ib in (0..8).step_by(2) {
                    let (b0, b1) = (sb * 8 + ib, sb * 8 + ib + 1);
                    let (q, signs, scales) = group(blk, p, ib);
                    let y = _mm256_sign_epi8(load32(&a.qs, b0 * QK), signs);
                    let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), scales);
                    acc0 = scaled_add(dot, d * a.d[b0], acc0);
                    let (q, signs, scales) = group(blk, p, ib + 1);
                    let y = _mm256_sign_epi8(load32(&a.qs, b1 * QK), signs);
                    let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), scales);
                    acc1 = scaled_add(dot, d * a.d[b1], acc1);
                }
            }
            hsum(_mm256_add_ps(acc0, acc1))
        }

        /// A super-block's 16 scales `2·n + 1` of the nibbles of `scales` (low nibble first: a group's first 16,
        /// then its last 16) as bytes, in both 128-bit halves.
        #[inline]
        #[target_feature(enable = $features)]
        fn nibble_scales(scales: [u8; 8]) -> __m256i {
            let x = _mm_set1_epi64x(i64::from_le_bytes(scales));
            let m = _mm_set1_epi8(15);
            let v = _mm_unpacklo_epi8(_mm_and_si128(x, m), _mm_and_si128(_mm_srli_epi16(x, 4), m));
            _mm256_broadcastsi128_si256(_mm_add_epi8(_mm_add_epi8(v, v), _mm_set1_epi8(1)))
        }

        /// Group `ib`'s two scales of [`nibble_scales`] as i16 lanes, its first 16's in the low half and its last
        /// 16's in the high half: one byte shuffle (0x80 bytes give the lanes' zero high bytes).
        #[inline]
        #[target_feature(enable = $features)]
        fn half_scales(scales: __m256i, ib: usize) -> __m256i {
            let lo = (0x8000 + 2 * ib as u64) * 0x0001_0001_0001_0001;
            let hi = lo + 0x0001_0001_0001_0001;
            _mm256_shuffle_epi8(scales, _mm256_set_epi64x(hi as i64, hi as i64, lo as i64, lo as i64))
        }

        /// IQ1_M's 16 scales `2·n + 1` of the 3-bit fields of `scales` (four to each u16, above its 12th bit a nibble
        /// of the f16 scale) as bytes, in both 128-bit halves: each u16 put in four 16-bit lanes, field j brought to
        /// the lane's top by a multiply by `2^(13 − 3j)`, shifted down, packed.
        #[inline]
        #[target_feature(enable = $features)]
        fn field3_scales(scales: u64) -> __m256i {
            let lanes = _mm256_shuffle_epi8(
                _mm256_set1_epi64x(scales as i64),
                _mm256_set_epi64x(
                    0x0706_0706_0706_0706,
                    0x0504_0504_0504_0504,
                    0x0302_0302_0302_0302,
                    0x0100_0100_0100_0100,
                ),
            );
            let shift = _mm256_set1_epi64x(0x0010_0080_0400_2000);
            let n = _mm256_srli_epi16(_mm256_mullo_epi16(lanes, shift), 13);
            let v = _mm256_add_epi16(_mm256_add_epi16(n, n), _mm256_set1_epi16(1));
            _mm256_permute4x64_epi64(_mm256_packus_epi16(v, v), 0x88)
        }

        /// `Σ_half scale_half · Σ q·y` of 32 signed bytes q against the activations y, as i32 lanes.
        #[inline]
        #[target_feature(enable = $features)]
        fn signed_dot_halves(q: __m256i, y: __m256i, s0: i16, s1: i16) -> __m256i {
            weigh_halves(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q)), s0, s1)
        }

        /// The ±1 bytes of 32 explicit sign bits (bit j of byte l for element 8·l + j): the word broadcast, each
        /// byte spread over its 8 elements, its bits tested against one bit an element.
        #[inline]
        #[target_feature(enable = $features)]
        fn sign_bits(bits: u32) -> __m256i {
            let spread = _mm256_set_epi64x(0x0303_0303_0303_0303, 0x0202_0202_0202_0202, 0x0101_0101_0101_0101, 0);
            let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), spread);
            let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
            let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
            _mm256_or_si256(set, _mm256_set1_epi8(1))
        }

        /// The little-endian u32 at byte `at`.
        #[inline(always)]
        fn u32_le(b: &[u8], at: usize) -> u32 {
            u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
        }

        /// IQ2_XXS: a group's four rows of `IQ2XXS_GRID`, its even-parity signs and one scale `(2·ls + 1)/8`.
        #[target_feature(enable = $features)]
        fn iq2_xxs(w: &[u8], a: &Q8Row) -> f32 {
            let t = f16_table();
            grid_kernel(
                w,
                a,
                |b: &BlockIq2Xxs| (f16_of(t, b.d) * 0.125, ()),
                |b, _, ib| {
                    let c = &b.qs[8 * ib..8 * ib + 8];
                    let aux = u32_le(c, 4);
                    let q = rows8([0, 1, 2, 3].map(|l| IQ2XXS_GRID[c[l] as usize]));
                    let s = rows8([0, 1, 2, 3].map(|l| even_signs(aux >> (7 * l))));
                    let sc = (2 * (aux >> 28) + 1) as i16;
                    (q, s, _mm256_set1_epi16(sc))
                },
            )
        }

        /// IQ2_XS: rows of `IQ2XS_GRID` (9 bits of each u16) with even-parity signs (its other 7), a scale per 16.
        #[target_feature(enable = $features)]
        fn iq2_xs(w: &[u8], a: &Q8Row) -> f32 {
            let t = f16_table();
            grid_kernel(
                w,
                a,
                |b: &BlockIq2Xs| (f16_of(t, b.d) * 0.125, nibble_scales(b.scales)),
                |b, scales, ib| {
                    let g = [0, 1, 2, 3].map(|l| u16::from_le_bytes([b.qs[8 * ib + 2 * l], b.qs[8 * ib + 2 * l + 1]]));
                    let q = rows8(g.map(|g| IQ2XS_GRID[(g & 511) as usize]));
                    let s = rows8(g.map(|g| even_signs((g >> 9) as u32)));
                    (q, s, half_scales(scales, ib))
                },
            )
        }

        /// IQ2_S: rows of `IQ2S_GRID` (10 bits), explicit sign bytes, a scale per 16.
        #[target_feature(enable = $features)]
        fn iq2_s(w: &[u8], a: &Q8Row) -> f32 {
            let t = f16_table();
            grid_kernel(
                w,
                a,
                |b: &BlockIq2S| (f16_of(t, b.d) * 0.125, nibble_scales(b.scales)),
                |b, scales, ib| {
                    let row = |l: usize| b.qs[4 * ib + l] as usize | ((((b.qh[ib] >> (2 * l)) & 3) as usize) << 8);
                    let q = rows8([0, 1, 2, 3].map(|l| IQ2S_GRID[row(l)]));
                    let s = sign_bits(u32_le(&b.signs, 4 * ib));
                    (q, s, half_scales(scales, ib))
                },
            )
        }

        /// IQ3_XXS: eight rows of 4 of `IQ3XXS_GRID`, even-parity signs, one scale `(2·ls + 1)/4`.
        #[target_feature(enable = $features)]
        fn iq3_xxs(w: &[u8], a: &Q8Row) -> f32 {
            let t = f16_table();
            grid_kernel(
                w,
                a,
                |b: &BlockIq3Xxs| (f16_of(t, b.d) * 0.25, ()),
                |b, _, ib| {
                    let aux = u32_le(&b.scales_signs, 4 * ib);
                    let q = rows4([0, 1, 2, 3, 4, 5, 6, 7].map(|k| IQ3XXS_GRID[b.qs[8 * ib + k] as usize]));
                    let s = rows8([0, 1, 2, 3].map(|l| even_signs(aux >> (7 * l))));
                    let sc = (2 * (aux >> 28) + 1) as i16;
                    (q, s, _mm256_set1_epi16(sc))
                },
            )
        }

        /// IQ3_S: eight rows of 4 of `IQ3S_GRID` (9 bits), explicit sign bytes, one scale `2·ls + 1`.
        #[target_feature(enable = $features)]
        fn iq3_s(w: &[u8], a: &Q8Row) -> f32 {
            let t = f16_table();
            grid_kernel(
                w,
                a,
                |b: &BlockIq3S| (f16_of(t, b.d), ()),
                |b, _, ib| {
                    let row = |k: usize| b.qs[8 * ib + k] as usize | ((((b.qh[ib] >> k) & 1) as usize) << 8);
                    let q = rows4([0, 1, 2, 3, 4, 5, 6, 7].map(|k| IQ3S_GRID[row(k)]));
                    let s = sign_bits(u32_le(&b.signs, 4 * ib));
                    let sc = (1 + 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 15)) as i16;
                    (q, s, _mm256_set1_epi16(sc))
                },
            )
        }

        /// IQ1_S: rows of `IQ1S_GRID` (−1, 0, 1), a scale `2·s + 1` and a ±1/8 delta per group: the group's values
        /// in eighths ([`eighths`]), dotted as signed bytes.
        #[target_feature(enable = $features)]
        fn iq1_s(w: &[u8], a: &Q8Row) -> f32 {
            let t = f16_table();
            let mut acc = _mm256_setzero_ps();
            for (sb, blk) in blocks::<BlockIq1S>(w).iter().enumerate() {
                prefetch_span(w, sb * size_of::<BlockIq1S>() + PREFETCH, size_of::<BlockIq1S>());
                let d = f16_of(t, blk.d) * 0.125;
                for ib in 0..8 {
                    let h = u16::from_le_bytes([blk.qh[2 * ib], blk.qh[2 * ib + 1]]);
                    let row = |l: usize| blk.qs[4 * ib + l] as usize | ((((h >> (3 * l)) & 7) as usize) << 8);
                    let q = rows8([0, 1, 2, 3].map(|l| IQ1S_EIGHTHS[row(l)]));
                    let q = _mm256_add_epi8(q, _mm256_set1_epi64x(delta_bytes(h & 0x8000 != 0) as i64));
                    let b = sb * 8 + ib;
                    let sc = (2 * ((h >> 12) & 7) + 1) as i16;
                    let dot = signed_dot_halves(q, load32(&a.qs, b * QK), sc, sc);
                    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d * a.d[b]), acc);
                }
            }
            hsum(acc)
        }

        /// IQ1_M's four ±1 row deltas (bit 3 of each of `h`'s nibbles set: −1) as 8 bytes a row: `h` in every
        /// 16-bit lane, each row's lanes testing its nibble's bit.
        #[inline]
        #[target_feature(enable = $features)]
        fn row_deltas(h: u16) -> __m256i {
            let bit = _mm256_set_epi64x(
                0x8000_8000_8000_8000u64 as i64,
                0x0800_0800_0800_0800,
                0x0080_0080_0080_0080,
                0x0008_0008_0008_0008,
            );
            let set = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(h as i16), bit), bit);
            _mm256_or_si256(set, _mm256_set1_epi8(1))
        }

        /// IQ1_M: IQ1_S's rows with a scale per 16 and a delta per row of 8, in eighths as IQ1_S's; the f16 scale
        /// (a nibble atop each of `scales`' four u16s) folded into each group's float scale, two accumulators.
        #[target_feature(enable = $features)]
        fn iq1_m(w: &[u8], a: &Q8Row) -> f32 {
            let t = f16_table();
            let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for (sb, blk) in blocks::<BlockIq1M>(w).iter().enumerate() {
                prefetch_span(w, sb * size_of::<BlockIq1M>() + PREFETCH, size_of::<BlockIq1M>());
                let sc = u64::from_le_bytes(blk.scales);
                let bits = ((sc >> 12) & 0xf) | ((sc >> 24) & 0xf0) | ((sc >> 36) & 0xf00) | ((sc >> 48) & 0xf000);
                let d = t[bits as usize] * 0.125;
                let scales = field3_scales(sc);
                for ib in 0..8 {
                    // row l's nibble: bits 4·l.. of the group's two qh bytes (3 grid bits, then the delta's)
                    let h = u16::from_le_bytes([blk.qh[2 * ib], blk.qh[2 * ib + 1]]);
                    let (g, hi) = (&blk.qs[4 * ib..4 * ib + 4], h as usize);
                    let q = rows8([
                        IQ1S_EIGHTHS[g[0] as usize | ((hi & 7) << 8)],
                        IQ1S_EIGHTHS[g[1] as usize | (((hi >> 4) & 7) << 8)],
                        IQ1S_EIGHTHS[g[2] as usize | (((hi >> 8) & 7) << 8)],
                        IQ1S_EIGHTHS[g[3] as usize | (((hi >> 12) & 7) << 8)],
                    ]);
                    let q = _mm256_add_epi8(q, row_deltas(h));
                    let b = sb * 8 + ib;
                    let y = _mm256_sign_epi8(load32(&a.qs, b * QK), q);
                    let dot =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), y), half_scales(scales, ib));
                    if ib % 2 == 0 {
                        acc0 = scaled_add(dot, d * a.d[b], acc0);
                    } else {
                        acc1 = scaled_add(dot, d * a.d[b], acc1);
                    }
                }
            }
            hsum(_mm256_add_ps(acc0, acc1))
        }

        /// TQ2_0: the 2 bits at `2·l` of 32 bytes of `qs` (0..3) dotted as unsigned bytes; the 1 they stand above
        /// their value is taken off once a super-block, as `d · Σ s` over its 8 activation blocks (`s = d·Σ qs`).
        #[target_feature(enable = $features)]
        fn tq2_0(w: &[u8], a: &Q8Row) -> f32 {
            let t = f16_table();
            let m2 = _mm256_set1_epi8(3);
            let (mut acc, mut offset) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for (sb, blk) in blocks::<BlockTq2_0>(w).iter().enumerate() {
                prefetch_span(w, sb * size_of::<BlockTq2_0>() + PREFETCH, size_of::<BlockTq2_0>());
                let d = f16_of(t, blk.d);
                for h in 0..2 {
                    let bits = load32(&blk.qs, 32 * h);
                    for l in 0..4 {
                        let q = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * l as i32)), m2);
                        let b = sb * 8 + 4 * h + l;
                        acc = scaled_add(dot_u8_i8(q, load32(&a.qs, b * QK)), d * a.d[b], acc);
                    }
                }
                offset = _mm256_fmadd_ps(_mm256_set1_ps(d), loadu8(&a.s, sb * 8), offset);
            }
            hsum(acc) - hsum(offset)
        }

        /// The trit `(x·3) >> 8` of each byte `x` (a base-3 digit as a fixed-point fraction: 0, 1 or 2), by two
        /// unsigned comparisons: `x·3 ≥ 256` from 86 on, `≥ 512` from 171 on.
        #[inline]
        #[target_feature(enable = $features)]
        fn trit(x: __m256i) -> __m256i {
            let at_least = |v: i8| _mm256_cmpeq_epi8(_mm256_max_epu8(x, _mm256_set1_epi8(v)), x);
            _mm256_sub_epi8(_mm256_sub_epi8(_mm256_setzero_si256(), at_least(86)), at_least(171u8 as i8))
        }

        /// `x · 3` of each byte, modulo 256: the next digit of the fraction brought to the top.
        #[inline]
        #[target_feature(enable = $features)]
        fn times3(x: __m256i) -> __m256i {
            _mm256_add_epi8(x, _mm256_add_epi8(x, x))
        }

        /// TQ1_0: five trits of each of `qs`' first 32 bytes are groups 0..5; the next 16 bytes and `qh`'s 4 in one
        /// register give the rest: group 5 the low halves of trits 0 and 1, group 6 of trits 2 and 3, group 7 trit
        /// 4's low half and bytes 16..20 (`qh`) of trits 0..4, all in registers. The trits (0..2) are dotted as
        /// unsigned bytes and the 1 they stand above their value taken off as TQ2_0's.
        #[target_feature(enable = $features)]
        fn tq1_0(w: &[u8], a: &Q8Row) -> f32 {
            let t = f16_table();
            let (mut acc0, mut acc1, mut offset) = (_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps());
            for (sb, blk) in blocks::<BlockTq1_0>(w).iter().enumerate() {
                prefetch_span(w, sb * size_of::<BlockTq1_0>() + PREFETCH, size_of::<BlockTq1_0>());
                let d = f16_of(t, blk.d);
                let group = |ib: usize, q: __m256i, acc: __m256| {
                    let b = sb * 8 + ib;
                    scaled_add(dot_u8_i8(q, load32(&a.qs, b * QK)), d * a.d[b], acc)
                };
                let mut x = load32(&blk.qs, 0);
                for n in 0..5 {
                    if n % 2 == 0 {
                        acc0 = group(n, trit(x), acc0);
                    } else {
                        acc1 = group(n, trit(x), acc1);
                    }
                    x = times3(x);
                }
                let mut rest = [0u8; 32];
                rest[..16].copy_from_slice(&blk.qs[32..48]);
                rest[16..20].copy_from_slice(&blk.qh);
                let mut x = load32(&rest, 0);
                let r = [0, 1, 2, 3, 4].map(|_| {
                    let r = trit(x);
                    x = times3(x);
                    r
                });
                acc1 = group(5, _mm256_permute2x128_si256(r[0], r[1], 0x20), acc1);
                acc0 = group(6, _mm256_permute2x128_si256(r[2], r[3], 0x20), acc0);
                let hi = |n: usize| _mm256_extracti128_si256(r[n], 1);
                let qh = _mm_unpacklo_epi64(_mm_unpacklo_epi32(hi(0), hi(1)), _mm_unpacklo_epi32(hi(2), hi(3)));
                acc1 = group(7, _mm256_set_m128i(qh, _mm256_castsi256_si128(r[4])), acc1);
                offset = _mm256_fmadd_ps(_mm256_set1_ps(d), loadu8(&a.s, sb * 8), offset);
            }
            hsum(_mm256_add_ps(acc0, acc1)) - hsum(offset)
        }
    };
}
pub(super) use iq_kernels;
