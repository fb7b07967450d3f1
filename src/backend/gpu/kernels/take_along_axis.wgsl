// take_along_axis.wgsl — out[r, j] = x[r, idx[r, j]]: each invocation writes one element of a contiguous output
// [rows, J]; an index outside 0..n writes 0.
// Bindings: 0 P (TakeAlongAxisParams), 1 out, 2 src0 (x, any strides), 3 src1 (the i32 indices, any strides).
// Dispatch: ceil(count / 256) workgroups of 256, split over x and y. CPU reference: src/backend/cpu/experts.rs.
{{BINDINGS}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wg, nwg) * WG + lid;
    if (i >= P.count) {
        return;
    }
    let e = i32(ld_src1(at(coords4(i, P.idx_shape), P.idx_strides, P.idx_offset)));
    if (e < 0 || u32(e) >= P.n) {
        st_out(i, {{OUT_C}}(0));
        return;
    }
    let shape = P.x_shape;
    let r = i / P.j;
    let c = coords4(r, vec4<u32>(1u, shape.x, shape.y, shape.z));
    let xb = at(vec4<u32>(c.y, c.z, c.w, 0u), P.x_strides, P.x_offset);
    st_out(i, {{OUT_C}}(ld_src0(xb + u32(e) * P.x_strides.w)));
}
