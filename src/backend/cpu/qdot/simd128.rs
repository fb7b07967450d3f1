//! wasm simd128 kernels of Q4_0, Q4_1 and Q8_0 (the SmolLM2 file's types and their kin): 32 weights a block,
//! unpacked to bytes, widened to i16 and multiplied with the int8 activations by `i32x4.dot_i16x8_s` (pairs into
//! i32), converted and accumulated in f32 lanes with the block's scales; one horizontal sum per row. Built where
//! the wasm target has simd128 (`.cargo/config.toml` enables it; every current browser and Node.js run it). Each
//! matches its scalar definition (`scalar.rs`) to rounding (the sums are taken in another order).

use super::row::{DotFn, Q8Row, QK};
use crate::dtype::DType;
use crate::quant::*;
use core::arch::wasm32::*;

pub(super) fn dot_fn(dtype: DType) -> Option<DotFn> {
    Some(match dtype {
        DType::Q4_0 => q4_0,
        DType::Q4_1 => q4_1,
        DType::Q8_0 => q8_0,
        _ => return None,
    })
}

/// 16 bytes at `p` as a vector.
#[inline(always)]
fn load(p: &[u8]) -> v128 {
    assert!(p.len() >= 16);
    // SAFETY: 16 readable bytes (checked above); v128_load has no alignment requirement
    unsafe { v128_load(p.as_ptr() as *const v128) }
}

/// `Σ x[i] * y[i]` over 16 signed bytes, in 4 i32 lanes.
#[inline(always)]
fn dot16(x: v128, y: v128) -> v128 {
    let lo = i32x4_dot_i16x8(i16x8_extend_low_i8x16(x), i16x8_extend_low_i8x16(y));
    let hi = i32x4_dot_i16x8(i16x8_extend_high_i8x16(x), i16x8_extend_high_i8x16(y));
    i32x4_add(lo, hi)
}

/// The 4-bit block `q` (16 bytes: the low nibbles are elements 0..16, the high ones 16..32), minus `off`, dotted
/// with the activations `a` (32 bytes), in 4 i32 lanes.
#[inline(always)]
fn nibble_dot(q: &[u8], a: &[i8], off: i8) -> v128 {
    let bytes = load(q);
    let a = bytemuck::cast_slice::<i8, u8>(a);
    let lo = i8x16_sub(v128_and(bytes, u8x16_splat(15)), i8x16_splat(off));
    let hi = i8x16_sub(u8x16_shr(bytes, 4), i8x16_splat(off));
    i32x4_add(dot16(lo, load(&a[..16])), dot16(hi, load(&a[16..32])))
}

#[inline(always)]
fn hsum(v: v128) -> f32 {
    f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v) + f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v)
}

fn q4_0(w: &[u8], a: &Q8Row) -> f32 {
    let mut acc = f32x4_splat(0.0);
    for (b, blk) in blocks::<BlockQ4_0>(w).iter().enumerate() {
        let s = nibble_dot(&blk.qs, &a.qs[b * QK..(b + 1) * QK], 8);
        acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(s), f32x4_splat(blk.d.get() * a.d[b])));
    }
    hsum(acc)
}

fn q4_1(w: &[u8], a: &Q8Row) -> f32 {
    let (mut acc, mut mins) = (f32x4_splat(0.0), 0f32);
    for (b, blk) in blocks::<BlockQ4_1>(w).iter().enumerate() {
        let s = nibble_dot(&blk.qs, &a.qs[b * QK..(b + 1) * QK], 0);
        acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(s), f32x4_splat(blk.d.get() * a.d[b])));
        mins += blk.m.get() * a.s[b];
    }
    hsum(acc) + mins
}

fn q8_0(w: &[u8], a: &Q8Row) -> f32 {
    let mut acc = f32x4_splat(0.0);
    for (b, blk) in blocks::<BlockQ8_0>(w).iter().enumerate() {
        let x = bytemuck::cast_slice::<i8, u8>(&a.qs[b * QK..(b + 1) * QK]);
        let s = i32x4_add(dot16(load(&blk.qs[..16]), load(&x[..16])), dot16(load(&blk.qs[16..]), load(&x[16..])));
        acc = f32x4_add(acc, f32x4_mul(f32x4_convert_i32x4(s), f32x4_splat(blk.d.get() * a.d[b])));
    }
    hsum(acc)
}
