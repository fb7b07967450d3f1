// common.wgsl — shared by every kernel (prepended by the compiler).
// Params: one uniform block per dispatch, 16 x vec4<u32> = 256 bytes, laid out by the kernel that uses it
// (see each file's header). Arrays of scalars are packed as vec4 so host and shader agree on every offset.
// Floats travel as bits (bitcast<f32>). Dispatches are 2-D when one dimension would exceed 65535 workgroups:
// the linear workgroup id is wg.y * nwg.x + wg.x.
struct Params { v: array<vec4<u32>, 16> }
@group(0) @binding(0) var<uniform> P: Params;

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

// Elementwise math, f32, finite for every finite input (CPU reference: backend/cpu.rs `unary`).
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
