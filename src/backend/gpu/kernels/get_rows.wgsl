// get_rows.wgsl — out[r, col] = table[idx[r], col]: each invocation writes one element of a contiguous output.
// Bindings: 0 P (GetRowsParams), 1 out, 2 src0 (the table), 3 src1 (the i32 indices).
// An index outside 0..rows writes 0. When the table is larger than one binding, each dispatch binds a window of
// its rows [window_lo, window_hi) and writes only the outputs whose index falls inside it.
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
    let row = i32(ld_src1(at(coords4(r, P.idx_shape), P.idx_strides, P.idx_offset)));
    if (row < 0 || u32(row) >= P.rows) {
        if (P.window_lo == 0u) {
            st_out(i, {{OUT_C}}(0));
        }
        return;
    }
    if (u32(row) < P.window_lo || (P.window_hi != 0u && u32(row) >= P.window_hi)) {
        return;
    }
    st_out(i, {{OUT_C}}(ld_src0(P.table_offset + u32(row) * P.row_stride + col * P.col_stride)));
}
