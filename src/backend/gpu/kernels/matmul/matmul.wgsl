// matmul.wgsl — C[b, m, n] = epilogue(sum_k A[b, m, k] * B[b, k, n]): the generic kernel, for any strides (transposed
// views and broadcast batch dims read in place), f32 accumulation, contiguous C.
// Bindings: 0 P (MatmulParams), 1 C (out), 2 A, 3 B, 4.. epilogue operands e{k}.
// Epilogue: an elementwise expression over the product `acc` fused by the compiler (the identity when nothing was
// fused); its operands are read at C's coordinates (b0, b1, m, n).
// Dispatch: (ceil(N/64), ceil(M/64), batches). Each 16x16 workgroup computes a 64x64 tile of C, 4x4 per
// invocation, stepping K by 16 through workgroup memory; edges are zero-filled, so any M, N, K works. A B larger
// than one binding is split by columns (n0), an A by rows (m0). CPU reference: src/backend/cpu/matmul.rs.
{{BINDINGS}}

{{EPILOGUE}}

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 16u;
var<workgroup> a_s: array<f32, 1024>; // [TK][TM]
var<workgroup> b_s: array<f32, 1024>; // [TK][TN]

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
{{BATCH_LETS}}
    let row0 = wg.y * TM;
    let col0 = wg.x * TN;
    var acc: array<array<f32, 4>, 4>;
    for (var k0 = 0u; k0 < K; k0 = k0 + TK) {
        // 1024 elements of A's tile and of B's tile, 4 per invocation
        for (var t = 0u; t < 4u; t = t + 1u) {
            let e = lid + t * 256u;
            // A tile stored k-major: a_s[kk * TM + mm]
            let am = e % TM;
            let ak = e / TM;
            let gm = row0 + am;
            let gk = k0 + ak;
            var av = 0.0;
            if (gm < M && gk < K) {
                av = f32(ld_a_in(a_base + gm * sa.z + gk * sa.w));
            }
            a_s[ak * TM + am] = av;
            let bn = e % TN;
            let bk = e / TN;
            let gn = col0 + bn;
            let gk2 = k0 + bk;
            var bv = 0.0;
            if (gn < N && gk2 < K) {
                bv = f32(ld_b_in(b_base + gk2 * sb.z + gn * sb.w));
            }
            b_s[bk * TN + bn] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            var av: array<f32, 4>;
            var bv: array<f32, 4>;
            for (var r = 0u; r < 4u; r = r + 1u) {
                av[r] = a_s[kk * TM + lid3.y + r * 16u];
                bv[r] = b_s[kk * TN + lid3.x + r * 16u];
            }
            for (var r = 0u; r < 4u; r = r + 1u) {
                for (var s = 0u; s < 4u; s = s + 1u) {
                    acc[r][s] = fma(av[r], bv[s], acc[r][s]);
                }
            }
        }
        workgroupBarrier();
    }
    let n0 = P.n0; // first output column of this chunk (a B larger than one binding), else 0
    let ldc = P.ldc; // output row stride: all of the output's columns
    let m0 = P.m0; // first output row of this chunk (an A larger than one binding), else 0
    let c_base = bz * M * ldc - P.out_window; // less the output window's first element when the output is split
    for (var r = 0u; r < 4u; r = r + 1u) {
        let gm = row0 + lid3.y + r * 16u;
        for (var s = 0u; s < 4u; s = s + 1u) {
            let gn = col0 + lid3.x + s * 16u;
            if (gm < M && gn < N) {
                st_c_out(c_base + (m0 + gm) * ldc + n0 + gn, epilogue(acc[r][s], vec4<u32>(b0, b1, m0 + gm, n0 + gn)));
            }
        }
    }
}
