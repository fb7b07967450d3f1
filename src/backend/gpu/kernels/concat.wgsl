// concat.wgsl — out = concatenate([src0, src1], axis): each invocation writes one element of a contiguous output.
// Bindings: 0 P (ConcatParams), 1 out, 2 src0, 3 src1.
// Dispatch: ceil(count / 256) workgroups of 256, split over x and y. CPU reference: src/backend/cpu/gather.rs.
{{BINDINGS}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wg, nwg) * WG + lid;
    if (i >= P.count) {
        return;
    }
    var c = coords4(i, P.out_shape);
    if (c[P.axis] < P.split) {
        st_out(i, {{OUT_C}}(ld_src0(at(c, P.a_strides, P.a_offset))));
    } else {
        c[P.axis] = c[P.axis] - P.split;
        st_out(i, {{OUT_C}}(ld_src1(at(c, P.b_strides, P.b_offset))));
    }
}
