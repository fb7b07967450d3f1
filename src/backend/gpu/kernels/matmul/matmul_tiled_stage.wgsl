// matmul_tiled_stage.wgsl — stage_{{X}}(k0, ..): the tiled kernel's staging of one operand's K step into workgroup
// memory, {{X}}_s[k][t / 4] (vec4 of its T = {{T}} rows or columns), rendered once for A (its rows, M) and once for B
// (its columns, N) from this one text. With K contiguous (KCONTIG) each invocation loads a vec4 along K and
// scatters its four values over four k rows; else a vec4 along the rows or columns, stored whole. Zero outside
// the operand. `base` is the batch's first element, `o0` the tile's first row or column, `len` all of them,
// `o_stride` and `k_stride` the operand's strides along them and along K.
fn stage_{{X}}(k0: u32, lid: u32, base: u32, o0: u32, len: u32, K: u32, o_stride: u32, k_stride: u32) {
    for (var l = 0u; l < {{LOADS}}; l = l + 1u) {
        let e = lid + l * 256u;
        if ({{KCONTIG}}) {
            let o = e / (BK / 4u);
            let kq = (e % (BK / 4u)) * 4u;
            let go = o0 + o;
            let gk = k0 + kq;
            var v = vec4<f32>(0.0);
            if (go < len && gk < K) {
                v = ld4_{{X}}_in(base + go * o_stride + gk);
            }
            {{X}}_s[(kq + 0u) * ({{T}} / 4u) + o / 4u][o % 4u] = v.x;
            {{X}}_s[(kq + 1u) * ({{T}} / 4u) + o / 4u][o % 4u] = v.y;
            {{X}}_s[(kq + 2u) * ({{T}} / 4u) + o / 4u][o % 4u] = v.z;
            {{X}}_s[(kq + 3u) * ({{T}} / 4u) + o / 4u][o % 4u] = v.w;
        } else {
            let k = e / ({{T}} / 4u);
            let oq = (e % ({{T}} / 4u)) * 4u;
            let go = o0 + oq;
            let gk = k0 + k;
            var v = vec4<f32>(0.0);
            if (go < len && gk < K) {
                v = ld4_{{X}}_in(base + gk * k_stride + go);
            }
            {{X}}_s[k * ({{T}} / 4u) + oq / 4u] = v;
        }
    }
}
