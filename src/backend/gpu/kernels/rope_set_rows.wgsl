// rope_set_rows.wgsl — rope fused with the KV-cache write: dst[idx[r], col] = rope(x, pos)[r, col] for every row r
// of rope's output seen as [N, dim] rows (a contiguous reshape), each value rounded to the rope's dtype first
// ({{ROUND}}) as the unfused plan stores it; rows as target_row (set_rows_target.wgsl) picks them.
// Bindings: 0 P (RopeSetRowsParams), 1 out (the destination: a state), 2 src0 (x, any strides), 3 src1 (rope's
// positions, i32), 4 src2 (the i32 row indices), 5 src3 (the frequency factors, f32 [n_dims / 2], where the
// variant has them).
// Dispatch: ceil(x.count / 256) workgroups of 256, split over x and y. CPU reference: src/backend/cpu/attention.rs.
{{BINDINGS}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wg, nwg) * WG + lid;
    if (i >= P.x.count) {
        return;
    }
    let r = i / P.dim;
    let col = i % P.dim;
    let row = target_row(r);
    if (row < 0) {
        return;
    }
    let v = rope_value(i, P.x);
    st_out(P.dst_offset + u32(row) * P.dst_row_stride + col, {{OUT_C}}({{ROUND}}));
}
