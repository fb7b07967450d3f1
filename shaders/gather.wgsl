// gather.wgsl — get_rows and concat: each invocation writes one element of a contiguous output.
// Bindings: 0 Params, 1 out, 2 src0 (table, or concat's first operand), 3 src1 (indices i32, or concat's second).
// Params (get_rows): v[0] = (count, D = row length, V = table rows, table offset); v[1] = idx shape (rank 4, the
//   output shape without its last dim); v[2] = idx strides; v[3] = (idx offset, table row stride, table col stride).
//   v[4] = (first row, end row) of the table window bound (0, 0: the whole table). An index outside 0..V
//   writes 0.
// Params (concat): v[0] = (count, axis in rank-4 coordinates, split = size of src0 along axis, 0);
//   v[1] = output shape; v[2] = src0 strides; v[3] = src1 strides; v[4] = (src0 offset, src1 offset).
// Dispatch: ceil(count / 256) workgroups of 256, split over x and y. CPU reference: backend/cpu.rs.
{{BINDINGS}}

const CONCAT: bool = {{CONCAT}};

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wg, nwg) * WG + lid;
    if (i >= P.v[0].x) {
        return;
    }
    if (CONCAT) {
        var c = coords4(i, P.v[1]);
        let ax = P.v[0].y;
        let split = P.v[0].z;
        if (c[ax] < split) {
            st_out(i, {{OUT_C}}(ld_src0(at(c, P.v[2], P.v[4].x))));
        } else {
            c[ax] = c[ax] - split;
            st_out(i, {{OUT_C}}(ld_src1(at(c, P.v[3], P.v[4].y))));
        }
        return;
    }
    let D = P.v[0].y;
    let r = i / D;
    let col = i % D;
    let row = i32(ld_src1(at(coords4(r, P.v[1]), P.v[2], P.v[3].x)));
    if (row < 0 || u32(row) >= P.v[0].z) {
        if (P.v[4].x == 0u) {
            st_out(i, {{OUT_C}}(0));
        }
        return;
    }
    // a window of the table's rows [v[4].x, v[4].y) when the table is larger than one binding
    if (u32(row) < P.v[4].x || (P.v[4].y != 0u && u32(row) >= P.v[4].y)) {
        return;
    }
    st_out(i, {{OUT_C}}(ld_src0(P.v[0].w + u32(row) * P.v[3].y + col * P.v[3].z)));
}
