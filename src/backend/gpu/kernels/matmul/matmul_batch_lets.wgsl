// matmul_batch_lets.wgsl — every matmul kernel's first lines ({{BATCH_LETS}}): the sizes, the batch of workgroup
// z (batch_of, matmul_batch.wgsl) and its parts, the strides, and A's and B's first elements for the batch.
    let M = P.m;
    let N = P.n;
    let K = P.k;
    let batch = batch_of(wg.z); // matmul_batch.wgsl
    let bz = batch.bz;
    let b0 = batch.b0;
    let b1 = batch.b1;
    let sa = P.a_strides;
    let sb = P.b_strides;
    let a_base = batch.a_base;
    let b_base = batch.b_base;
