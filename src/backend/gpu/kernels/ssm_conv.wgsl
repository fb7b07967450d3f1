// ssm_conv.wgsl — the causal depthwise conv: out[b, t, c] = Σ_k w[c, k] · x[b, t + k, c], x's first K − 1 rows of
// each batch the carried state. One invocation an output element of the contiguous [B, T, C] output.
// Bindings: 0 P (SsmConvParams), 1 out (f32), 2 src0 (x, f32, contiguous), 3 src1 (w [C, K], f32, contiguous).
// Dispatch: ceil(count / 256) workgroups of 256, split over x and y. CPU reference: src/backend/cpu/recurrent.rs.
{{BINDINGS}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wg, nwg) * WG + lid;
    if (i >= P.count) {
        return;
    }
    let c = i % P.c;
    let r = i / P.c;
    let t = r % P.t;
    let b = r / P.t;
    let rows = P.t + P.k - 1u;
    var acc = 0.0;
    for (var j = 0u; j < P.k; j = j + 1u) {
        acc = acc + ld_src1(P.w_offset + c * P.k + j) * ld_src0(P.x_offset + (b * rows + t + j) * P.c + c);
    }
    st_out(i, acc);
}
