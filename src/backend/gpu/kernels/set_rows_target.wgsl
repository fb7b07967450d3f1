// set_rows_target.wgsl — target_row(r): the destination row that row r of the source is written to, or -1 when it
// is not written: an index outside 0..rows is skipped (nothing is ever written outside the destination), and with
// repeated indices the last row wins, as on the CPU (a row whose index reappears later is not written). Shared by
// set_rows.wgsl and rope_set_rows.wgsl, whose parameters name the same fields (rows, n, idx_offset, idx_stride);
// the indices are read through ld_{{IDX}}.
fn target_row(r: u32) -> i32 {
    let row = ld_{{IDX}}(P.idx_offset + r * P.idx_stride);
    if (row < 0 || u32(row) >= P.rows) {
        return -1;
    }
    for (var j = r + 1u; j < P.n; j = j + 1u) {
        if (ld_{{IDX}}(P.idx_offset + j * P.idx_stride) == row) {
            return -1;
        }
    }
    return row;
}
