// f16_round.wgsl — appended to a kernel whose fused expression has an f16 intermediate (see
// src/backend/gpu/wgsl/elementwise.rs).
// x rounded to f16 and back, as storing it in an f16 tensor and loading it would give: an f16 intermediate of a
// fused kernel keeps its dtype's rounding and range (at or past 65520 in magnitude it is ±inf, round to nearest
// even, as on the CPU). pack2x16float leaves values outside f16's finite range undefined, hence the explicit
// case.
fn f16_round(x: f32) -> f32 {
    if (abs(x) >= 65520.0) {
        // ±inf with x's sign, built from x at run time (WGSL refuses an infinite constant expression)
        return bitcast<f32>((bitcast<u32>(x) & 0x80000000u) | 0x7f800000u);
    }
    return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x;
}
