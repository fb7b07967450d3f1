// set_rows.wgsl — dst[idx[r], col] = src[r, col] for every row r of src: each invocation writes one element, rows as
// target_row (set_rows_target.wgsl) picks them.
// Bindings: 0 P (SetRowsParams), 1 out (the destination: a state), 2 src0 (the rows), 3 src1 (the i32 indices).
// Dispatch: ceil(count / 256) workgroups of 256, split over x and y. CPU reference: src/backend/cpu/gather.rs.
{{BINDINGS}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wg, nwg) * WG + lid;
    if (i >= P.count) {
        return;
    }
    let r = i / P.dim;
    let col = i % P.dim;
    let row = target_row(r);
    if (row < 0) {
        return;
    }
    let v = ld_src0(P.src_offset + r * P.src_row_stride + col * P.src_col_stride);
    st_out(P.dst_offset + u32(row) * P.dst_row_stride + col, {{OUT_C}}(v));
}
