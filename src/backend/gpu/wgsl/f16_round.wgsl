// f16_round.wgsl — appended to a kernel whose fused expression has an f16 intermediate (see
// src/backend/gpu/kernels/elementwise.rs).
// x rounded to f16 and back, as storing it in an f16 tensor and loading it would give: an f16 intermediate of a
// fused kernel keeps its dtype's rounding and range (round to nearest even; at or past 65520 in magnitude ±inf;
// f16's subnormals below 2^-14; NaN stays NaN), as on the CPU (half::f16::from_f32).
// The rounding is done on the bits with integer arithmetic: a conversion to f16 and back (through
// pack2x16float and unpack2x16float, or two casts) is an identity to an optimizing shader compiler, and NVIDIA's
// Vulkan driver was seen to fold it away.
fn f16_round(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    let sign = bits & 0x80000000u;
    let mag = bits & 0x7fffffffu;
    if (mag >= 0x7f800000u) {
        return x; // ±inf, NaN
    }
    if (mag >= 0x477ff000u) {
        return bitcast<f32>(sign | 0x7f800000u); // |x| >= 65520: beyond f16's largest finite value once rounded
    }
    if (mag >= 0x38800000u) {
        // a normal f16 (|x| >= 2^-14): keep 10 of the 23 fraction bits, ties to even
        let odd = (mag >> 13u) & 1u;
        return bitcast<f32>(sign | ((mag + 0x0fffu + odd) & 0xffffe000u));
    }
    // an f16 subnormal: a multiple of 2^-24; the significand (with its hidden bit) shifted by the exponent's gap
    let e = mag >> 23u;
    if (e < 102u) {
        return bitcast<f32>(sign); // |x| < 2^-25: rounds to zero (2^-25 itself is a tie, to the even 0)
    }
    let sig = (mag & 0x007fffffu) | 0x00800000u;
    let drop = 126u - e; // 14..24 bits below 2^-24
    let odd = (sig >> drop) & 1u;
    let q = (sig + (1u << (drop - 1u)) - 1u + odd) >> drop;
    return bitcast<f32>(sign | bitcast<u32>(f32(q) * 5.9604644775390625e-8));
}
