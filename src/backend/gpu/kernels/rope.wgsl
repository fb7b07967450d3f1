// rope.wgsl — rotary position embedding: out[b, t, h, e] for every element of a contiguous [B, T, H, D] output, the
// first n_dims dims of each head turned in pairs by theta = freq_scale * pos[t] * theta_scale^i (pair i), computed by
// repeated multiplication as ggml does; the other dims copied.
// Bindings: 0 P (RopeParams), 1 out, 2 src0 (x, any strides), 3 src1 (positions, i32).
// Dispatch: ceil(count / 256) workgroups of 256, split over x and y. CPU reference: src/backend/cpu/attention.rs.
{{BINDINGS}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wg, nwg) * WG + lid;
    if (i >= P.count) {
        return;
    }
    let c = coords4(i, P.shape);
    let e = c.w;
    let x = f32(ld_src0(at(c, P.x_strides, P.x_offset)));
    if (e >= P.n_dims) {
        st_out(i, {{OUT_C}}(x));
        return;
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
    let sc = wt_sincos(P.freq_scale * theta);
    let pc = vec4<u32>(c.x, c.y, c.z, partner);
    let y = f32(ld_src0(at(pc, P.x_strides, P.x_offset)));
    // (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)
    let v = select(y * sc.x + x * sc.y, x * sc.y - y * sc.x, first);
    st_out(i, {{OUT_C}}(v));
}
