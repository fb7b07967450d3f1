// matmul_store_scalar.wgsl — the tiled matmul's store of 4 neighbouring outputs (columns gn..gn+3 of C, coordinates
// c of the first) through the epilogue, one element at a time, each checked against N.
fn store_tile(at: u32, gn: u32, N: u32, c: vec4<u32>, v: vec4<f32>) {
    for (var j = 0u; j < 4u; j = j + 1u) {
        if (gn + j < N) {
            st_c_out(at + j, epilogue(v[j], c + vec4<u32>(0u, 0u, 0u, j)));
        }
    }
}
