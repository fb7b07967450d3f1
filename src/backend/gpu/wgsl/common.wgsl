// common.wgsl — shared by every kernel (prepended by the compiler, after the kernel family's `struct Params`
// and its uniform binding `P` at binding 0, both generated from src/backend/gpu/params.rs).
// Dispatches are 2-D when one dimension would exceed the per-dimension workgroup limit: the linear workgroup id
// is wg.y * nwg.x + wg.x.

const WG: u32 = 256u;

fn linear_group(wg: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wg.y * nwg.x + wg.x;
}

// Coordinates of flat row-major index i in a rank-4 shape.
fn coords4(i: u32, shape: vec4<u32>) -> vec4<u32> {
    var c: vec4<u32>;
    var r = i;
    c.w = r % shape.w; r = r / shape.w;
    c.z = r % shape.z; r = r / shape.z;
    c.y = r % shape.y; r = r / shape.y;
    c.x = r;
    return c;
}

// Storage index of coordinates c under element strides st and element offset off.
fn at(c: vec4<u32>, st: vec4<u32>, off: u32) -> u32 {
    return off + dot(c, st);
}

// Elementwise math, f32, finite for every finite input (CPU reference: the unary table, src/ops/unary.rs).
fn wt_tanh(x: f32) -> f32 {
    let e = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - e) / (1.0 + e);
}
fn wt_sigmoid(x: f32) -> f32 {
    let e = exp(-abs(x));
    return select(e / (1.0 + e), 1.0 / (1.0 + e), x >= 0.0);
}
fn wt_silu(x: f32) -> f32 {
    return x * wt_sigmoid(x);
}
fn wt_gelu(x: f32) -> f32 {
    let c = 0.7978845608028654;
    return 0.5 * x * (1.0 + wt_tanh(c * (x + 0.044715 * x * x * x)));
}
// erf by Abramowitz & Stegun 7.1.26 refined: max abs error 1.5e-7.
fn wt_erf(x: f32) -> f32 {
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
    return sign(x) * y;
}
fn wt_gelu_erf(x: f32) -> f32 {
    return 0.5 * x * (1.0 + wt_erf(x * 0.7071067811865476));
}
fn wt_gelu_quick(x: f32) -> f32 {
    return x * wt_sigmoid(1.702 * x);
}
// e^x - 1 without cancellation near 0.
fn wt_expm1(x: f32) -> f32 {
    if (abs(x) < 1e-3) {
        return x + 0.5 * x * x + x * x * x / 6.0;
    }
    return exp(x) - 1.0;
}
fn wt_elu(x: f32) -> f32 {
    return select(wt_expm1(x), x, x > 0.0);
}
// log(1 + e^x) = max(x, 0) + log1p(e^-|x|).
fn wt_softplus(x: f32) -> f32 {
    let e = exp(-abs(x));
    let l = select(log(1.0 + e), e * (1.0 - e * (0.5 - e / 3.0)), e < 1e-3);
    return max(x, 0.0) + l;
}
// sin and cos with Cody-Waite reduction by pi/2 and minimax polynomials on [-pi/4, pi/4], so that accuracy does
// not depend on the driver's builtins (Vulkan only promises 2^-11 absolute error inside [-pi, pi]).
fn wt_sincos_poly(r: f32, q: i32) -> vec2<f32> {
    let r2 = r * r;
    // Cephes' sinf and cosf polynomials
    let s = r + r * r2 * (-1.6666654611e-1 + r2 * (8.3321608736e-3 + r2 * -1.9515295891e-4));
    let c = 1.0 - 0.5 * r2 + r2 * r2 * (4.166664568298827e-2 + r2 * (-1.388731625493765e-3 + r2 * 2.443315711809948e-5));
    // (sin, cos) of r + q * pi/2
    switch (q & 3) {
        case 0: { return vec2<f32>(s, c); }
        case 1: { return vec2<f32>(c, -s); }
        case 2: { return vec2<f32>(-s, -c); }
        default: { return vec2<f32>(-c, s); }
    }
}
fn wt_sincos(x: f32) -> vec2<f32> {
    let q = round(x * 0.63661975);
    // pi/2 in three parts (Cephes' DP1..DP3, doubled); q * 1.5703125 is exact for |q| < 2^16
    let r = ((x - q * 1.5703125) - q * 4.837512969970703125e-4) - q * 7.54978995489188216e-8;
    return wt_sincos_poly(r, i32(q));
}
fn wt_sin(x: f32) -> f32 {
    return wt_sincos(x).x;
}
fn wt_cos(x: f32) -> f32 {
    return wt_sincos(x).y;
}
