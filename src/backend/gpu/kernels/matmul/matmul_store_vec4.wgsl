// matmul_store_vec4.wgsl — the tiled matmul's store of 4 neighbouring outputs (columns gn..gn+3 of C, coordinates
// c of the first) through the epilogue, for a C bound as vec4 elements (N % 4 == 0, so all 4 are in bounds or
// none is).
fn store_tile(at: u32, gn: u32, N: u32, c: vec4<u32>, v: vec4<f32>) {
    if (gn < N) {
        let e = vec4<f32>(epilogue(v.x, c), epilogue(v.y, c + vec4<u32>(0u, 0u, 0u, 1u)),
            epilogue(v.z, c + vec4<u32>(0u, 0u, 0u, 2u)), epilogue(v.w, c + vec4<u32>(0u, 0u, 0u, 3u)));
        st4_c_out(at, e);
    }
}
