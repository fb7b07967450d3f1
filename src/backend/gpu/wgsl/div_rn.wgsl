// div_rn.wgsl — appended to a kernel that divides where the CPU backend's (and numpy's) quotient is exact
// (mean, the div op; see src/backend/gpu/wgsl/mod.rs).
// a / b correctly rounded to f32. WGSL's `/` may be approximate (Vulkan allows 2.5 ULP; NVIDIA's driver computed
// 6 / 3 as 1.9999999): one correction step with the exact remainder r = a - q·b, from a fused multiply-add, brings
// an estimate within a few ULP to the rounded quotient. Vulkan lets fma be unfused (lavapipe's is, and its `/` is
// exact): a probe on a value the compiler cannot know, x = 1 + 2^-12 whose square needs 25 bits, tells, and an
// unfused fma leaves the driver's quotient. Zero, subnormal, infinite and NaN quotients are left as they are.
fn div_rn(a: f32, b: f32) -> f32 {
    let q = a / b;
    let qe = bitcast<u32>(q) & 0x7f800000u;
    let be = bitcast<u32>(b) & 0x7f800000u;
    if (qe == 0x7f800000u || qe == 0u || be == 0x7f800000u || be == 0u) {
        return q;
    }
    let x = select(1.0, 0.5, b == 0.0) + 0.000244140625; // 1 + 2^-12 (b is not 0 here)
    if (fma(x, x, -(x * x)) == 0.0) {
        return q; // an fma that is not fused: no exact remainder
    }
    return q + fma(-q, b, a) / b;
}
