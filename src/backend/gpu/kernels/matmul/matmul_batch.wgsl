// matmul_batch.wgsl — the batch a matmul workgroup computes, shared by every matmul kernel: workgroup z is batch
// bz = P.batch0 + z (dispatches of more batches than z counts start at batch0), at (b0, b1) in the two batch dims
// (b1 = bz % batch1); A's and B's elements for it start at their offsets plus the batch strides.
struct Batch {
    bz: u32,
    b0: u32,
    b1: u32,
    a_base: u32,
    b_base: u32,
}

fn batch_of(z: u32) -> Batch {
    let bz = P.batch0 + z;
    let b1 = bz % P.batch1;
    let b0 = bz / P.batch1;
    let a_base = P.a_offset + b0 * P.a_strides.x + b1 * P.a_strides.y;
    let b_base = P.b_offset + b0 * P.b_strides.x + b1 * P.b_strides.y;
    return Batch(bz, b0, b1, a_base, b_base);
}
