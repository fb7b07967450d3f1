// matvec_reduce_shared.wgsl — matvec.wgsl's reduction of the 32 partial sums of output n (one per lane of its row
// group) through workgroup memory, for adapters without subgroups.
fn reduce_row(total: f32, lid: u32, row: u32, lane: u32, n: u32, N: u32, y_base: u32, b0: u32, b1: u32, n0: u32,
              sg_lane: u32, sg_size: u32) {
    part[lid] = vec4<f32>(total, 0.0, 0.0, 0.0);
    workgroupBarrier();
    for (var h = 16u; h > 0u; h = h >> 1u) {
        if (lane < h) {
            part[lid].x = part[lid].x + part[lid + h].x;
        }
        workgroupBarrier();
    }
    if (lane == 0u && n < N) {
        st_y_out(y_base + n, epilogue(part[lid].x, vec4<u32>(b0, b1, 0u, n0 + n)));
    }
}

// a dual matmul's second product of output n, reduced as reduce_row reduces the first (the same tree); lane 0 of
// the row group returns it (the barrier at the end: reduce_row then overwrites part)
fn reduce_second(total: f32, lid: u32, row: u32, sg_lane: u32, sg_size: u32) -> f32 {
    part[lid] = vec4<f32>(total, 0.0, 0.0, 0.0);
    workgroupBarrier();
    for (var h = 16u; h > 0u; h = h >> 1u) {
        if (lid % 32u < h) {
            part[lid].x = part[lid].x + part[lid + h].x;
        }
        workgroupBarrier();
    }
    let t = part[lid].x;
    workgroupBarrier();
    return t;
}
