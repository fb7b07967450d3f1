// rope_rotate.wgsl — rope_value(i): element i of rope's contiguous [B, T, H, D] output, the first n_dims dims of
// each head turned in pairs by theta = freq_scale * pos[t] * theta_scale^i (pair i), computed by repeated
// multiplication as ggml does and divided by the pair's frequency factor where the variant has them ({{THETA}}:
// theta, or theta over the factors' binding at the pair), mixed with the unscaled angle by YaRN's ramp where
// ext_factor is not 0 (ggml's rope_yarn), cos and sin scaled by attn_factor; the other dims copied. Shared by
// rope.wgsl and rope_set_rows.wgsl, whose parameters name the same fields (shape, x_strides, x_offset, n_dims,
// neox, theta_scale, freq_scale, ext_factor, attn_factor, corr_low, corr_high, pos_offset, pos_stride) and whose
// bindings src0 (x, any strides) and src1 (positions, i32) are the same.
fn rope_value(i: u32) -> f32 {
    let c = coords4(i, P.shape);
    let e = c.w;
    let x = f32(ld_src0(at(c, P.x_strides, P.x_offset)));
    if (e >= P.n_dims) {
        return x;
    }
    var pair: u32;
    var partner: u32;
    var first: bool;
    if (P.neox != 0u) {
        let half = P.n_dims / 2u;
        pair = e % half;
        first = e < half;
        partner = select(e - half, e + half, first);
    } else {
        pair = e / 2u;
        first = e % 2u == 0u;
        partner = e ^ 1u;
    }
    var theta = f32(ld_src1(P.pos_offset + c.y * P.pos_stride));
    for (var j = 0u; j < pair; j = j + 1u) {
        theta = theta * P.theta_scale;
    }
    let extrap = {{THETA}};
    var angle = P.freq_scale * extrap;
    var mscale = P.attn_factor;
    if (P.ext_factor != 0.0) {
        let y = (f32(pair) - P.corr_low) / max(0.001, P.corr_high - P.corr_low);
        let mix = (1.0 - clamp(y, 0.0, 1.0)) * P.ext_factor;
        angle = angle * (1.0 - mix) + extrap * mix;
        mscale = mscale * (1.0 + 0.1 * log(1.0 / P.freq_scale));
    }
    let sc = wt_sincos(angle) * mscale;
    let pc = vec4<u32>(c.x, c.y, c.z, partner);
    let y = f32(ld_src0(at(pc, P.x_strides, P.x_offset)));
    // (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)
    return select(y * sc.x + x * sc.y, x * sc.y - y * sc.x, first);
}
