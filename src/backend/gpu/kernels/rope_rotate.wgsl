// rope_rotate.wgsl — {{NAME}}(i, rx): element i of rope's contiguous [B, T, H, D] output (`rx.shape`) of x read
// through ld_{{X}} at `rx.strides` from `rx.offset`, the first n_dims dims of each head turned in pairs by
// theta = freq_scale * pos[t] * theta_scale^i (pair i), computed by repeated multiplication as ggml does and
// divided by the pair's frequency factor where the variant has them ({{THETA}}: theta, or theta over the factors'
// binding at the pair), mixed with the unscaled angle by YaRN's ramp where ext_factor is not 0 (ggml's rope_yarn),
// cos and sin scaled by attn_factor; the other dims copied. Shared by rope.wgsl, rope_set_rows.wgsl and
// rope_kv_writes.wgsl, whose parameters hold each roped operand as a RopeX (shape, strides, offset, count and
// its positions' pos_offset and pos_stride) and the angles as `rope` (RopeAngles: n_dims, neox, theta_scale,
// freq_scale, ext_factor, attn_factor, corr_low, corr_high), and whose binding src1 holds the positions (i32).
fn {{NAME}}(i: u32, rx: RopeX) -> f32 {
    let c = coords4(i, rx.shape);
    let e = c.w;
    let x = f32(ld_{{X}}(at(c, rx.strides, rx.offset)));
    if (e >= P.rope.n_dims) {
        return x;
    }
    // both pair layouts computed and one selected: no branch on a uniform alone (lavapipe 22 compiles a shader
    // again at every dispatch for its uniforms when one decides a branch, and keeps each copy)
    let neox = P.rope.neox != 0u;
    let half = P.rope.n_dims / 2u;
    let first = select(e % 2u == 0u, e < half, neox);
    let pair = select(e / 2u, e % half, neox);
    let partner = select(e ^ 1u, select(e - half, e + half, first), neox);
    var theta = f32(ld_src1(rx.pos_offset + c.y * rx.pos_stride));
    for (var j = 0u; j < pair; j = j + 1u) {
        theta = theta * P.rope.theta_scale;
    }
    let extrap = {{THETA}};
    let ramp = (f32(pair) - P.rope.corr_low) / max(0.001, P.rope.corr_high - P.rope.corr_low);
    let mix = (1.0 - clamp(ramp, 0.0, 1.0)) * P.rope.ext_factor;
    let yarn = P.rope.ext_factor != 0.0;
    let angle = select(P.rope.freq_scale * extrap, P.rope.freq_scale * extrap * (1.0 - mix) + extrap * mix, yarn);
    let mscale = select(P.rope.attn_factor, P.rope.attn_factor * (1.0 + 0.1 * log(1.0 / P.rope.freq_scale)), yarn);
    let sc = wt_sincos(angle) * mscale;
    let pc = vec4<u32>(c.x, c.y, c.z, partner);
    let y = f32(ld_{{X}}(at(pc, rx.strides, rx.offset)));
    // (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)
    return select(y * sc.x + x * sc.y, x * sc.y - y * sc.x, first);
}
