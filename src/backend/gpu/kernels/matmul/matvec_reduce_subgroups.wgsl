// matvec_reduce_subgroups.wgsl — matvec.wgsl's reduction of the 32 partial sums of output n (one per lane of its
// row group `row`) through subgroupAdd, for adapters with subgroups whose size divides 32.
fn reduce_row(total: f32, lid: u32, row: u32, lane: u32, n: u32, N: u32, y_base: u32, b0: u32, b1: u32, n0: u32,
              sg_lane: u32, sg_size: u32) {
    let sum = subgroupAdd(total);
    if (sg_lane == 0u) {
        part[lid / sg_size].x = sum;
    }
    workgroupBarrier();
    if (lane == 0u && n < N) {
        let per = 32u / sg_size;
        var t = 0.0;
        for (var j = 0u; j < per; j = j + 1u) {
            t = t + part[row * per + j].x;
        }
        st_y_out(y_base + n, epilogue(t, vec4<u32>(b0, b1, 0u, n0 + n)));
    }
}

// a dual matmul's second product of output n, reduced as reduce_row reduces the first (the same order), returned
// to every lane of the row group (through part[].y, which reduce_row leaves alone)
fn reduce_second(total: f32, lid: u32, row: u32, sg_lane: u32, sg_size: u32) -> f32 {
    let sum = subgroupAdd(total);
    if (sg_lane == 0u) {
        part[lid / sg_size].y = sum;
    }
    workgroupBarrier();
    let per = 32u / sg_size;
    var t = 0.0;
    for (var j = 0u; j < per; j = j + 1u) {
        t = t + part[row * per + j].y;
    }
    workgroupBarrier();
    return t;
}
