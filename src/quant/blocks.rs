//! ggml's block structs (`block_q4_0` ... `block_q6_K`, the IQ types, TQ1_0, TQ2_0 and MXFP4 of ggml-common.h) as typed `#[repr(C)]` structs of bytes:
//! alignment 1 and no padding, so a block is read in place from any byte offset of a file or buffer
//! ([`block`], [`blocks`]), and each struct's size is asserted against ggml's at compile time. Half-precision
//! fields are [`F16Le`]. The decoders, the CPU dot products and the tests read blocks by these fields (or by
//! `offset_of!` where a SIMD kernel loads from a base pointer).

use bytemuck::{Pod, Zeroable};

/// An IEEE half stored little-endian, as ggml's `ggml_half` is in a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
#[repr(transparent)]
pub(crate) struct F16Le(pub [u8; 2]);

impl F16Le {
    /// The value, widened to f32.
    #[inline]
    pub(crate) fn get(self) -> f32 {
        half::f16::from_le_bytes(self.0).to_f32()
    }
}

/// A block's struct: what its type's bytes hold.
pub(crate) trait Block: Pod {
    /// Values per block (ggml's `blck_size`).
    const VALUES: usize;
    /// Byte offsets of its f16 scale fields: the scale `d` first, then the min where it has one (the one place
    /// that says where a type keeps its scales: [`crate::DType::scale_offsets`]).
    const SCALES: &'static [usize];
}

macro_rules! block {
    ($(#[doc = $doc:literal])* $name:ident, $values:expr, $bytes:expr, scales [$($scale:ident),*],
     { $($(#[doc = $fdoc:literal])* $field:ident: $ty:ty),* $(,)? }) => {
        $(#[doc = $doc])*
        #[derive(Clone, Copy, Debug, Pod, Zeroable)]
        #[repr(C)]
        pub(crate) struct $name {
            $($(#[doc = $fdoc])* pub $field: $ty,)*
        }
        impl Block for $name {
            const VALUES: usize = $values;
            const SCALES: &'static [usize] = &[$(std::mem::offset_of!($name, $scale)),*];
        }
        const _: () = assert!(std::mem::size_of::<$name>() == $bytes && std::mem::align_of::<$name>() == 1);
    };
}

block!(
    /// `block_q4_0`: 32 values `(q − 8)·d`, q a nibble (low nibbles the first 16).
    BlockQ4_0, 32, 18, scales [d], { d: F16Le, qs: [u8; 16] }
);
block!(
    /// `block_q4_1`: 32 values `q·d + m`.
    BlockQ4_1, 32, 20, scales [d, m], { d: F16Le, m: F16Le, qs: [u8; 16] }
);
block!(
    /// `block_q5_0`: 32 values `(q − 16)·d`, q a nibble with a fifth bit from `qh`.
    BlockQ5_0, 32, 22, scales [d], { d: F16Le, qh: [u8; 4], qs: [u8; 16] }
);
block!(
    /// `block_q5_1`: 32 values `q·d + m`, q 5 bits as in Q5_0.
    BlockQ5_1, 32, 24, scales [d, m], { d: F16Le, m: F16Le, qh: [u8; 4], qs: [u8; 16] }
);
block!(
    /// `block_q8_0`: 32 values `q·d`, q an i8.
    BlockQ8_0, 32, 34, scales [d], { d: F16Le, qs: [u8; 32] }
);
block!(
    /// `block_q2_K`: 256 values in 16 groups of 16, `d·sc·q − dmin·m`, q 2 bits; `scales` holds each group's
    /// 4-bit scale (low nibble) and min (high nibble).
    BlockQ2K, 256, 84, scales [d, dmin], { scales: [u8; 16], qs: [u8; 64], d: F16Le, dmin: F16Le }
);
block!(
    /// `block_q3_K`: 256 values in 16 groups of 16, `d·(sc − 32)·(q − 4·!hbit)`, q 2 bits with a high bit in
    /// `hmask`; sixteen 6-bit scales packed in 12 bytes ([`BlockQ3K::scales`]).
    BlockQ3K, 256, 110, scales [d], { hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: F16Le }
);
block!(
    /// `block_q4_K`: 256 values in 8 groups of 32, `d·sc·q − dmin·m`, q a nibble; eight 6-bit scales and mins
    /// packed in 12 bytes ([`scale_min_k4`]).
    BlockQ4K, 256, 144, scales [d, dmin], { d: F16Le, dmin: F16Le, scales: [u8; 12], qs: [u8; 128] }
);
block!(
    /// `block_q5_K`: Q4_K with a fifth bit per value in `qh`.
    BlockQ5K, 256, 176, scales [d, dmin], { d: F16Le, dmin: F16Le, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128] }
);
block!(
    /// `block_q6_K`: 256 values in 16 groups of 16, `d·sc·(q − 32)`, q 6 bits (low 4 in `ql`, high 2 in `qh`),
    /// `sc` an i8.
    BlockQ6K, 256, 210, scales [d], { ql: [u8; 128], qh: [u8; 64], scales: [u8; 16], d: F16Le }
);

block!(
    /// `block_iq4_nl`: 32 values `d·kvalues_iq4nl[q]`, q a nibble (low nibbles the first 16).
    BlockIq4Nl, 32, 18, scales [d], { d: F16Le, qs: [u8; 16] }
);
block!(
    /// `block_iq4_xs`: 256 values in 8 groups of 32, `d·(ls − 32)·kvalues_iq4nl[q]`, each group's 6-bit `ls` its
    /// low 4 bits in `scales_l` and high 2 in `scales_h`; the groups' nibbles as IQ4_NL's.
    BlockIq4Xs, 256, 136, scales [d], { d: F16Le, scales_h: [u8; 2], scales_l: [u8; 4], qs: [u8; 128] }
);
block!(
    /// `block_iq2_xxs`: 256 values in 8 groups of 32, each 8 bytes: 4 grid rows (`IQ2XXS_GRID`) and a u32 of
    /// four 7-bit sign indices and the group's 4-bit scale `ls`; values `d·(2·ls + 1)/8·grid·sign`.
    BlockIq2Xxs, 256, 66, scales [d], { d: F16Le, qs: [u8; 64] }
);
block!(
    /// `block_iq2_xs`: 256 values, 32 u16s of a 9-bit grid row (`IQ2XS_GRID`) and a 7-bit sign index, and a
    /// 4-bit scale per 16 values.
    BlockIq2Xs, 256, 74, scales [d], { d: F16Le, qs: [u8; 64], scales: [u8; 8] }
);
block!(
    /// `block_iq2_s`: 256 values, 32 grid rows of 10 bits (`IQ2S_GRID`: low bytes in `qs`, high bits in `qh`),
    /// an explicit sign byte per 8 values, a 4-bit scale per 16.
    BlockIq2S, 256, 82, scales [d], { d: F16Le, qs: [u8; 32], signs: [u8; 32], qh: [u8; 8], scales: [u8; 8] }
);
block!(
    /// `block_iq3_xxs`: 256 values, 64 grid rows of 4 (`IQ3XXS_GRID`), and per group of 32 a u32 of four 7-bit
    /// sign indices and a 4-bit scale; values `d·(2·ls + 1)/4·grid·sign`.
    BlockIq3Xxs, 256, 98, scales [d], { d: F16Le, qs: [u8; 64], scales_signs: [u8; 32] }
);
block!(
    /// `block_iq3_s`: 256 values, 64 grid rows of 9 bits (`IQ3S_GRID`: low bytes in `qs`, high bits in `qh`), an
    /// explicit sign byte per 8 values, a 4-bit scale per 32; values `d·(2·ls + 1)·grid·sign`.
    BlockIq3S, 256, 110, scales [d], { d: F16Le, qs: [u8; 64], qh: [u8; 8], signs: [u8; 32], scales: [u8; 4] }
);
block!(
    /// `block_iq1_s`: 256 values, 32 grid rows of 11 bits (`IQ1S_GRID`, values −1, 0, 1: low bytes in `qs`, high
    /// bits in `qh`, whose u16 per group of 32 also holds a 3-bit scale and the sign of a ±1/8 delta).
    BlockIq1S, 256, 50, scales [d], { d: F16Le, qs: [u8; 32], qh: [u8; 16] }
);
block!(
    /// `block_iq1_m`: 256 values, 32 grid rows of 11 bits (`IQ1S_GRID`), a delta sign per 8 values, a 3-bit scale
    /// per 16, and the f16 scale spread over the top nibbles of `scales`' four u16s ([`BlockIq1M::d`]): no field
    /// is an f16.
    BlockIq1M, 256, 56, scales [], { qs: [u8; 32], qh: [u8; 16], scales: [u8; 8] }
);
block!(
    /// `block_tq1_0`: 256 ternary values `d·(t − 1)`, five trits a byte in `qs` and four in `qh` (base-3 fixed
    /// point), the f16 scale last.
    BlockTq1_0, 256, 54, scales [d], { qs: [u8; 48], qh: [u8; 4], d: F16Le }
);
block!(
    /// `block_tq2_0`: 256 ternary values `d·(q − 1)`, q 2 bits, the f16 scale last.
    BlockTq2_0, 256, 66, scales [d], { qs: [u8; 64], d: F16Le }
);
block!(
    /// `block_mxfp4`: 32 values E2M1 · 2^(e − 127), `e` an E8M0 exponent byte (0xFF: not a number), the E2M1
    /// nibbles (low nibbles the first 16) read doubled from `KVALUES_MXFP4` with the scale halved.
    BlockMxfp4, 32, 17, scales [], { e: u8, qs: [u8; 16] }
);

impl BlockIq1M {
    /// The f16 scale: one nibble in the top 4 bits of each of `scales`' four little-endian u16s, lowest first.
    pub(crate) fn d(&self) -> f32 {
        let sc = |k: usize| u16::from_le_bytes([self.scales[2 * k], self.scales[2 * k + 1]]);
        let bits = (sc(0) >> 12) | ((sc(1) >> 8) & 0x00F0) | ((sc(2) >> 4) & 0x0F00) | (sc(3) & 0xF000);
        half::f16::from_bits(bits).to_f32()
    }
}

/// `2^(e − 128)`, MXFP4's halved scale of E8M0 exponent `e` (ggml's `ggml_e8m0_to_fp32_half`): f32 subnormals
/// for e of 0 and 1, 2^127 for 0xFF (a block the finite check refuses).
#[inline]
pub(crate) fn e8m0_half(e: u8) -> f32 {
    if e < 2 {
        f32::from_bits(0x0020_0000 << e)
    } else {
        f32::from_bits(((e as u32) - 1) << 23)
    }
}

/// The block at the start of `bytes`.
///
/// # Panics
/// When `bytes` is shorter than a block (a bug in the caller: block counts are checked when a tensor is made).
#[inline]
pub(crate) fn block<B: Block>(bytes: &[u8]) -> &B {
    bytemuck::from_bytes(&bytes[..std::mem::size_of::<B>()])
}

/// `bytes` as whole blocks.
///
/// # Panics
/// When `bytes` is not a whole number of blocks (a bug in the caller).
#[inline]
pub(crate) fn blocks<B: Block>(bytes: &[u8]) -> &[B] {
    bytemuck::cast_slice(bytes)
}

/// The `j`-th 6-bit scale and min (j < 8) of a Q4_K / Q5_K block's packed `scales` (ggml's `get_scale_min_k4`).
#[inline]
pub(crate) fn scale_min_k4(q: &[u8; 12], j: usize) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// All eight 6-bit scales and mins of a Q4_K / Q5_K block's packed `scales` as `[sc0..sc7, m0..m7]` (what
/// [`scale_min_k4`] gives for j = 0..8), unpacked a 32-bit word at a time (the x86 kernels').
#[cfg(any(target_arch = "x86_64", test))]
#[inline]
pub(crate) fn scales_mins_k4(q: &[u8; 12]) -> [u8; 16] {
    let word = |k: usize| u32::from_le_bytes([q[4 * k], q[4 * k + 1], q[4 * k + 2], q[4 * k + 3]]);
    let (w0, w1, w2) = (word(0), word(1), word(2));
    let (low6, low4, top2) = (0x3f3f_3f3fu32, 0x0f0f_0f0fu32, 0x0303_0303u32);
    let sc_lo = w0 & low6;
    let sc_hi = (w2 & low4) | (((w0 >> 6) & top2) << 4);
    let m_lo = w1 & low6;
    let m_hi = ((w2 >> 4) & low4) | (((w1 >> 6) & top2) << 4);
    let mut out = [0u8; 16];
    for (k, w) in [sc_lo, sc_hi, m_lo, m_hi].into_iter().enumerate() {
        out[4 * k..4 * k + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

impl BlockQ3K {
    /// The sixteen group scales, unpacked from 6 bits and centred (`sc − 32`), as ggml's `dequantize_row_q3_K`.
    pub(crate) fn scales(&self) -> [i8; 16] {
        let raw = &self.scales;
        let word = |k: usize| u32::from_le_bytes([raw[4 * k], raw[4 * k + 1], raw[4 * k + 2], raw[4 * k + 3]]);
        let (a0, a1, tmp) = (word(0), word(1), word(2));
        let (m1, m2) = (0x0303_0303u32, 0x0f0f_0f0fu32);
        let aux = [
            (a0 & m2) | ((tmp & m1) << 4),
            (a1 & m2) | (((tmp >> 2) & m1) << 4),
            ((a0 >> 4) & m2) | (((tmp >> 4) & m1) << 4),
            ((a1 >> 4) & m2) | (((tmp >> 6) & m1) << 4),
        ];
        let mut out = [0i8; 16];
        for (o, v) in out.iter_mut().zip(aux.iter().flat_map(|a| a.to_le_bytes())) {
            *o = v as i8 - 32;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time unpacking gives what ggml's per-index `get_scale_min_k4` gives, for every bit pattern
    /// of each byte position.
    #[test]
    fn scales_mins_k4_unpacks_as_scale_min_k4() {
        for seed in 0..2000u32 {
            let q: [u8; 12] =
                std::array::from_fn(|i| (seed.wrapping_mul(2654435761).rotate_left(i as u32 * 3) >> 7) as u8);
            let all = scales_mins_k4(&q);
            for j in 0..8 {
                assert_eq!((all[j], all[8 + j]), scale_min_k4(&q, j), "{q:?}, j = {j}");
            }
        }
    }
}
