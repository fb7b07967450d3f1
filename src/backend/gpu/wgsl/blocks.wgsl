// blocks.wgsl — readers of ggml's block formats for a storage binding {{N}} bound as u32 words (blocks may start at
// any even byte: Q8_0's are 34 bytes long): byte, 16-bit and 32-bit reads at byte offsets, and dq_{{N}}(blk, e), the
// value of element e of the block starting at byte blk, as ggml's dequantize_row_* computes it (CPU reference:
// src/quant/decode.rs, src/quant/iq.rs). A section may also give dq4_{{N}}(blk, e), elements e..e+3 (e a multiple of
// 4) in fewer word reads than four dq_ calls; the generator then uses it for vec4 loads. The generator keeps the
// readers and the one decoder section of the binding's dtype, and puts in place of the GRID token the type's lookup grid
// (src/quant/grids.rs) as grid_{{N}}, two words a row of 8 bytes or one a row of 4, with grid8_/grid4_ (byte j of
// a row) and sign_ (bit j of the even-parity sign byte of a 7-bit index, ggml's ksigns_iq2xs).
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
//! @iq4_nl
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // d at 0, qs[16] at 2: low nibbles elements 0..15, high nibbles 16..31
    let q = (u8_{{N}}(blk + 2u + e % 16u) >> (4u * (e / 16u))) & 15u;
    return f16_{{N}}(blk) * f32(kvalues_iq4nl_{{N}}[q]);
}
const kvalues_iq4nl_{{N}} = array<i32, 16>(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
//! @iq4_xs
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // d at 0, scales_h (u16) at 2, scales_l[4] at 4, qs[128] at 8: 8 groups of 32 as IQ4_NL, scale ls - 32
    let ib = e / 32u;
    let r = e % 32u;
    let q = (u8_{{N}}(blk + 8u + 16u * ib + r % 16u) >> (4u * (r / 16u))) & 15u;
    let ls = ((u8_{{N}}(blk + 4u + ib / 2u) >> (4u * (ib % 2u))) & 15u) | (((u16_{{N}}(blk + 2u) >> (2u * ib)) & 3u) << 4u);
    return f16_{{N}}(blk) * f32(i32(ls) - 32) * f32(kvalues_iq4nl_{{N}}[q]);
}
const kvalues_iq4nl_{{N}} = array<i32, 16>(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
//! @iq2_xxs
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // d at 0, then 8 bytes a group of 32: 4 grid rows, a u32 of four 7-bit sign indices and the 4-bit scale
    let ib = e / 32u;
    let l = (e % 32u) / 8u;
    let j = e % 8u;
    let c = blk + 2u + 8u * ib;
    let aux = u32_{{N}}(c + 4u);
    let db = f16_{{N}}(blk) * (0.5 + f32(aux >> 28u)) * 0.25;
    return db * f32(grid8_{{N}}(u8_{{N}}(c + l), j)) * sign_{{N}}((aux >> (7u * l)) & 127u, j);
}
{{GRID}}
//! @iq2_xs
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // d at 0, qs[32] (u16: 9-bit grid row, 7-bit sign index) at 2, scales[8] at 66 (a nibble per 16 values)
    let ib = e / 32u;
    let l = (e % 32u) / 8u;
    let q = u16_{{N}}(blk + 2u + 2u * (4u * ib + l));
    let sc = (u8_{{N}}(blk + 66u + ib) >> (4u * (l / 2u))) & 15u;
    let db = f16_{{N}}(blk) * (0.5 + f32(sc)) * 0.25;
    return db * f32(grid8_{{N}}(q & 511u, e % 8u)) * sign_{{N}}(q >> 9u, e % 8u);
}
{{GRID}}
//! @iq2_s
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // d at 0, qs[32] at 2 (grid rows' low bytes), signs[32] at 34, qh[8] at 66 (2 high bits a row), scales[8] at 74
    let ib = e / 32u;
    let l = (e % 32u) / 8u;
    let j = e % 8u;
    let row = u8_{{N}}(blk + 2u + 4u * ib + l) | (((u8_{{N}}(blk + 66u + ib) >> (2u * l)) & 3u) << 8u);
    let sc = (u8_{{N}}(blk + 74u + ib) >> (4u * (l / 2u))) & 15u;
    let db = f16_{{N}}(blk) * (0.5 + f32(sc)) * 0.25;
    let neg = (u8_{{N}}(blk + 34u + 4u * ib + l) >> j) & 1u;
    return db * f32(grid8_{{N}}(row, j)) * select(1.0, -1.0, neg != 0u);
}
{{GRID}}
//! @iq3_xxs
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // d at 0, qs[64] at 2 (two grid rows of 4 a group of 8), scales_signs[8] (u32) at 66
    let ib = e / 32u;
    let l = (e % 32u) / 8u;
    let j = e % 8u;
    let aux = u32_{{N}}(blk + 66u + 4u * ib);
    let db = f16_{{N}}(blk) * (0.5 + f32(aux >> 28u)) * 0.5;
    let row = u8_{{N}}(blk + 2u + 8u * ib + 2u * l + j / 4u);
    return db * f32(grid4_{{N}}(row, j % 4u)) * sign_{{N}}((aux >> (7u * l)) & 127u, j);
}
{{GRID}}
//! @iq3_s
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // d at 0, qs[64] at 2, qh[8] at 66 (a grid row's ninth bit), signs[32] at 74, scales[4] at 106
    let ib = e / 32u;
    let l = (e % 32u) / 8u;
    let j = e % 8u;
    let k = 2u * l + j / 4u;
    let row = u8_{{N}}(blk + 2u + 8u * ib + k) | (((u8_{{N}}(blk + 66u + ib) >> k) & 1u) << 8u);
    let db = f16_{{N}}(blk) * f32(1u + 2u * ((u8_{{N}}(blk + 106u + ib / 2u) >> (4u * (ib % 2u))) & 15u));
    let neg = (u8_{{N}}(blk + 74u + 4u * ib + l) >> j) & 1u;
    return db * f32(grid4_{{N}}(row, j % 4u)) * select(1.0, -1.0, neg != 0u);
}
{{GRID}}
//! @iq1_s
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // d at 0, qs[32] at 2 (grid rows' low bytes), qh[8] (u16) at 34: 3 high bits a row, a 3-bit scale, the delta's sign
    let ib = e / 32u;
    let l = (e % 32u) / 8u;
    let h = u16_{{N}}(blk + 34u + 2u * ib);
    let dl = f16_{{N}}(blk) * f32(2u * ((h >> 12u) & 7u) + 1u);
    let delta = select(0.125, -0.125, (h & 0x8000u) != 0u);
    let row = u8_{{N}}(blk + 2u + 4u * ib + l) | (((h >> (3u * l)) & 7u) << 8u);
    return dl * (f32(i32(grid8_{{N}}(row, e % 8u) << 24u) >> 24u) + delta);
}
{{GRID}}
//! @iq1_m
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // qs[32] at 0, qh[16] at 32 (a nibble a row: 3 high bits and the delta's sign), scales[4] (u16) at 48: four
    // 3-bit scales each, and a nibble of the f16 scale in each one's top bits
    let ib = e / 32u;
    let l = (e % 32u) / 8u;
    let s0 = u16_{{N}}(blk + 48u);
    let s1 = u16_{{N}}(blk + 50u);
    let s2 = u16_{{N}}(blk + 52u);
    let s3 = u16_{{N}}(blk + 54u);
    let d = unpack2x16float((s0 >> 12u) | ((s1 >> 8u) & 0xf0u) | ((s2 >> 4u) & 0xf00u) | (s3 & 0xf000u)).x;
    let sc = u16_{{N}}(blk + 48u + 2u * (ib / 2u)) >> (6u * (ib % 2u));
    let dl = d * f32(2u * ((sc >> (3u * (l / 2u))) & 7u) + 1u);
    let nib = (u8_{{N}}(blk + 32u + 2u * ib + l / 2u) >> (4u * (l % 2u))) & 15u;
    let row = u8_{{N}}(blk + 4u * ib + l) | ((nib & 7u) << 8u);
    let delta = select(0.125, -0.125, (nib & 8u) != 0u);
    return dl * (f32(i32(grid8_{{N}}(row, e % 8u) << 24u) >> 24u) + delta);
}
{{GRID}}
//! @tq1_0
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // qs[48] at 0 (five base-3 digits a byte), qh[4] at 48 (four), d at 52; trit n of byte x: ((x·3^n mod 256)·3) >> 8
    var x = 0u;
    var n = 0u;
    if (e < 160u) {
        x = u8_{{N}}(blk + e % 32u);
        n = e / 32u;
    } else if (e < 240u) {
        x = u8_{{N}}(blk + 32u + (e - 160u) % 16u);
        n = (e - 160u) / 16u;
    } else {
        x = u8_{{N}}(blk + 48u + (e - 240u) % 4u);
        n = (e - 240u) / 4u;
    }
    var p = 1u;
    for (var k = 0u; k < n; k = k + 1u) {
        p = p * 3u;
    }
    let t = (((x * p) & 255u) * 3u) >> 8u;
    return f32(i32(t) - 1) * f16_{{N}}(blk + 52u);
}
//! @tq2_0
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // qs[64] at 0 (2 bits a value: byte 32·h + m, bits 2·l for element 128·h + 32·l + m), d at 64
    let q = (u8_{{N}}(blk + 32u * (e / 128u) + e % 32u) >> (2u * ((e % 128u) / 32u))) & 3u;
    return f32(i32(q) - 1) * f16_{{N}}(blk + 64u);
}
//! @mxfp4
fn dq_{{N}}(blk: u32, e: u32) -> f32 {
    // e (E8M0) at 0, qs[16] at 1 (blocks of 17 bytes start at any byte: only byte reads): twice the E2M1 value times
    // 2^(e - 128), ggml's e8m0_to_fp32_half (f32 subnormals for e of 0 and 1)
    let x = u8_{{N}}(blk);
    let scale = select(bitcast<f32>((x - 1u) << 23u), bitcast<f32>(0x00200000u << x), x < 2u);
    let q = (u8_{{N}}(blk + 1u + e % 16u) >> (4u * (e / 16u))) & 15u;
    return f32(kvalues_mxfp4_{{N}}[q]) * scale;
}
const kvalues_mxfp4_{{N}} = array<i32, 16>(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
//! @end
