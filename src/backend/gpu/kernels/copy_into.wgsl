// copy_into.wgsl — dst[c] = src[c] for every coordinate c of dst, a view of a state (any strides), src broadcast
// to its shape; each invocation writes one element.
// Bindings: 0 P (CopyParams), 1 out (dst's storage), 2 src0.
// Dispatch: ceil(count / 256) workgroups of 256, split over x and y. CPU reference: src/backend/cpu/gather.rs.
{{BINDINGS}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wg, nwg) * WG + lid;
    if (i >= P.count) {
        return;
    }
    let c = coords4(i, P.shape);
    st_out(at(c, P.dst_strides, P.dst_offset), {{OUT_C}}(ld_src0(at(c, P.src_strides, P.src_offset))));
}
