// blocks.wgsl — readers of ggml's block formats for a storage binding {{N}} bound as u32 words (blocks may start at
// any even byte: Q8_0's are 34 bytes long): byte, 16-bit and 32-bit reads at byte offsets, and dq_{{N}}(blk, e), the
// value of element e of the block starting at byte blk, as ggml's dequantize_row_* computes it (CPU reference:
// src/quant/decode.rs). A section may also give dq4_{{N}}(blk, e), elements e..e+3 (e a multiple of 4) in fewer word
// reads than four dq_ calls; the generator then uses it for vec4 loads. The generator keeps the readers and the
// one decoder section of the binding's dtype.
fn u8_{{N}}(b: u32) -> u32 {
    return ({{VAR}}[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}
// b even (every 16-bit field of every block format is at an even offset of a block of even length): one word
fn u16_{{N}}(b: u32) -> u32 {
    return ({{VAR}}[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu;
}
fn u32_{{N}}(b: u32) -> u32 {
    let s = (b & 3u) * 8u;
    let w = {{VAR}}[b >> 2u];
    if (s == 0u) {
        return w;
    }
    return (w >> s) | ({{VAR}}[(b >> 2u) + 1u] << (32u - s));
}
fn f16_{{N}}(b: u32) -> f32 {
    return unpack2x16float(u16_{{N}}(b)).x;
}
fn i8_{{N}}(b: u32) -> f32 {
    return f32(i32(u8_{{N}}(b) << 24u) >> 24u);
}
// scale j and min j (6 bits each) of a Q4_K/Q5_K block's 12 packed scale bytes at s (ggml's get_scale_min_k4)
fn scale_min_k4_{{N}}(s: u32, j: u32) -> vec2<u32> {
    if (j < 4u) {
        return vec2<u32>(u8_{{N}}(s + j) & 63u, u8_{{N}}(s + j + 4u) & 63u);
    }
    let d = (u8_{{N}}(s + j + 4u) & 15u) | ((u8_{{N}}(s + j - 4u) >> 6u) << 4u);
    let m = (u8_{{N}}(s + j + 4u) >> 4u) | ((u8_{{N}}(s + j) >> 6u) << 4u);
    return vec2<u32>(d, m);
}
//! @bf16
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    return bitcast<f32>(u16_{{N}}(blk) << 16u);
}
//! @q4_0
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    let q = (u8_{{N}}(blk + 2u + e % 16u) >> (e / 16u * 4u)) & 15u;
    return (f32(q) - 8.0) * f16_{{N}}(blk);
}
// the four nibbles of elements e..e+3 are bytes e%16.. of qs, low nibbles for e < 16, high ones above
fn dq4_{{N}}(blk: u32, e: u32) -> vec4<f32> {
    let q = (u32_{{N}}(blk + 2u + e % 16u) >> (e / 16u * 4u)) & 0x0f0f0f0fu;
    let v = vec4<f32>(f32(q & 15u), f32((q >> 8u) & 15u), f32((q >> 16u) & 15u), f32(q >> 24u));
    return (v - 8.0) * f16_{{N}}(blk);
}
//! @q4_1
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    let q = (u8_{{N}}(blk + 4u + e % 16u) >> (e / 16u * 4u)) & 15u;
    return f32(q) * f16_{{N}}(blk) + f16_{{N}}(blk + 2u);
}
// 20-byte blocks: d and m are one word, the four nibbles one more
fn dq4_{{N}}(blk: u32, e: u32) -> vec4<f32> {
    let dm = unpack2x16float(u32_{{N}}(blk));
    let q = (u32_{{N}}(blk + 4u + e % 16u) >> (e / 16u * 4u)) & 0x0f0f0f0fu;
    let v = vec4<f32>(f32(q & 15u), f32((q >> 8u) & 15u), f32((q >> 16u) & 15u), f32(q >> 24u));
    return v * dm.x + dm.y;
}
//! @q5_0
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    let qh = u32_{{N}}(blk + 2u);
    let q = ((u8_{{N}}(blk + 6u + e % 16u) >> (e / 16u * 4u)) & 15u) | (((qh >> e) & 1u) << 4u);
    return (f32(q) - 16.0) * f16_{{N}}(blk);
}
//! @q5_1
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    let qh = u32_{{N}}(blk + 4u);
    let q = ((u8_{{N}}(blk + 8u + e % 16u) >> (e / 16u * 4u)) & 15u) | (((qh >> e) & 1u) << 4u);
    return f32(q) * f16_{{N}}(blk) + f16_{{N}}(blk + 2u);
}
//! @q8_0
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    return i8_{{N}}(blk + 2u + e) * f16_{{N}}(blk);
}
fn dq4_{{N}}(blk: u32, e: u32) -> vec4<f32> {
    let q = u32_{{N}}(blk + 2u + e);
    let v = vec4<i32>(i32(q << 24u), i32(q << 16u), i32(q << 8u), i32(q)) >> vec4<u32>(24u);
    return vec4<f32>(v) * f16_{{N}}(blk);
}
//! @q2_k
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // scales[16] at 0, qs[64] at 16, d at 80, dmin at 82; element e: half n, shift group j, group of 16 h, l
    let n = e / 128u;
    let r = e % 128u;
    let j = r / 32u;
    let h = (r % 32u) / 16u;
    let sc = u8_{{N}}(blk + n * 8u + j * 2u + h);
    let q = (u8_{{N}}(blk + 16u + n * 32u + r % 16u + 16u * h) >> (2u * j)) & 3u;
    let dl = f16_{{N}}(blk + 80u) * f32(sc & 15u);
    let ml = f16_{{N}}(blk + 82u) * f32(sc >> 4u);
    return dl * f32(q) - ml;
}
//! @q3_k
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // hmask[32] at 0, qs[64] at 32, scales[12] at 96 (sixteen 6-bit scales), d at 108
    let n = e / 128u;
    let r = e % 128u;
    let j = r / 32u;
    let h = (r % 32u) / 16u;
    let i = r % 16u + 16u * h;
    let is = n * 8u + j * 2u + h;
    let k = is % 4u;
    let grp = is / 4u;
    let lo = (u8_{{N}}(blk + 96u + k + 4u * (grp % 2u)) >> (4u * (grp / 2u))) & 15u;
    let hi = (u8_{{N}}(blk + 104u + k) >> (2u * grp)) & 3u;
    let scale = f32(i32(lo | (hi << 4u)) - 32);
    let q = i32((u8_{{N}}(blk + 32u + n * 32u + i) >> (2u * j)) & 3u);
    let m = 1u << (n * 4u + j);
    let v = q - select(4, 0, (u8_{{N}}(blk + i) & m) != 0u);
    return f16_{{N}}(blk + 108u) * scale * f32(v);
}
//! @q4_k
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // d at 0, dmin at 2, scales[12] at 4, qs[128] at 16
    let j = e / 64u;
    let r = e % 64u;
    let idx = 2u * j + r / 32u;
    let sm = scale_min_k4_{{N}}(blk + 4u, idx);
    let q = (u8_{{N}}(blk + 16u + j * 32u + r % 32u) >> (r / 32u * 4u)) & 15u;
    return f16_{{N}}(blk) * f32(sm.x) * f32(q) - f16_{{N}}(blk + 2u) * f32(sm.y);
}
//! @q5_k
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // d at 0, dmin at 2, scales[12] at 4, qh[32] at 16, qs[128] at 48
    let j = e / 64u;
    let r = e % 64u;
    let hi = r / 32u;
    let l = r % 32u;
    let sm = scale_min_k4_{{N}}(blk + 4u, 2u * j + hi);
    let q = ((u8_{{N}}(blk + 48u + j * 32u + l) >> (hi * 4u)) & 15u) + ((u8_{{N}}(blk + 16u + l) >> (2u * j + hi)) & 1u) * 16u;
    return f16_{{N}}(blk) * f32(sm.x) * f32(q) - f16_{{N}}(blk + 2u) * f32(sm.y);
}
//! @q6_k
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // ql[128] at 0, qh[64] at 128, scales[16] (i8) at 192, d at 208
    let n = e / 128u;
    let r = e % 128u;
    let quarter = r / 32u;
    let l = r % 32u;
    let lo = (u8_{{N}}(blk + n * 64u + l + (quarter % 2u) * 32u) >> (quarter / 2u * 4u)) & 15u;
    let hi = (u8_{{N}}(blk + 128u + n * 32u + l) >> (2u * quarter)) & 3u;
    let q = f32(i32(lo | (hi << 4u)) - 32);
    let sc = i8_{{N}}(blk + 192u + n * 8u + l / 16u + 2u * quarter);
    return f16_{{N}}(blk + 208u) * sc * q;
}
//! @end
