// rope.wgsl — rotary position embedding: out[b, t, h, e] for every element of a contiguous [B, T, H, D] output
// (rope_value, rope_rotate.wgsl).
// Bindings: 0 P (RopeParams), 1 out, 2 src0 (x, any strides), 3 src1 (positions, i32), 4 src2 (the frequency
// factors, f32 [n_dims / 2], where the variant has them).
// Dispatch: ceil(x.count / 256) workgroups of 256, split over x and y. CPU reference: src/backend/cpu/attention.rs.
{{BINDINGS}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wg, nwg) * WG + lid;
    if (i >= P.x.count) {
        return;
    }
    st_out(i, {{OUT_C}}(rope_value(i, P.x)));
}
