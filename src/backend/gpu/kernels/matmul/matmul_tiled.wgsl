// matmul_tiled.wgsl — C[b, m, n] = epilogue(sum_k A[b, m, k] * B[b, k, n]): register-blocked, vec4 loads, f32
// accumulation; f16 or f32 storage for A, B and C.
// Bindings: 0 P (MatmulParams), 1 C (out; vec4 elements when N % 4 == 0, and `store_tile` from
// matmul_store_vec4.wgsl, else matmul_store_scalar.wgsl), 2 A, 3 B (vec4 elements), 4.. epilogue operands (as in
// matmul.wgsl).
// Preconditions (src/backend/gpu/kernels/matmul/mod.rs): each operand's contiguous axis has stride 1 and a length that
// is a multiple of 4; every other stride and both offsets are multiples of 4.
// Layout variants: A_KCONTIG (A[m, k] with k contiguous, else m contiguous), B_NCONTIG (B[k, n] with n
// contiguous, else k contiguous: B is a transposed view of W[n, k], as in x @ W^T).
// Tile: TM = 64*RM rows by TN = 64*RN columns per workgroup of 16x16 invocations, K in steps of BK; each
// invocation owns 4*RM rows x 4*RN columns (rows ty*4 + i + 64*r, columns tx*4 + j + 64*s).
// Dispatch: (ceil(N/TN), ceil(M/TM), batches). Edge tiles are zero-filled, so any M, N, K that meets the
// preconditions works. CPU reference: src/backend/cpu/matmul.rs.
{{BINDINGS}}

{{EPILOGUE}}

const RM: u32 = {{RM}}u;
const RN: u32 = {{RN}}u;
const BK: u32 = {{BK}}u;
const TM: u32 = 64u * RM;
const TN: u32 = 64u * RN;
const A_KCONTIG: bool = {{A_KCONTIG}};
const B_NCONTIG: bool = {{B_NCONTIG}};
const A_LOADS: u32 = TM * BK / 1024u; // vec4 loads of A per invocation per K step
const B_LOADS: u32 = TN * BK / 1024u;

var<workgroup> a_s: array<vec4<f32>, {{A_SHARED}}>; // [BK][TM / 4]
var<workgroup> b_s: array<vec4<f32>, {{B_SHARED}}>; // [BK][TN / 4]


@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
{{BATCH_LETS}}
    let row0 = wg.y * TM;
    let col0 = wg.x * TN;
    let tx = lid3.x;
    let ty = lid3.y;
    // the accumulators, acc[(r * 4 + i) * RN + s] for row ty*4 + i + 64*r and columns tx*4 + 64*s (+ 0..3),
    // indexed by constants only (the product and the store are unrolled): a compiler that does not unroll
    // loops (SwiftShader) keeps them in registers rather than in an indexed private array
    var acc: array<vec4<f32>, 4u * RM * RN>;
    for (var k0 = 0u; k0 < K; k0 = k0 + BK) {
        // matmul_tiled_stage.wgsl: A's rows and B's columns of this K step
        stage_a(k0, lid, a_base, row0, M, K, sa.z, sa.w);
        stage_b(k0, lid, b_base, col0, N, K, sb.w, sb.z);
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk = kk + 1u) {
            let ka = kk * (TM / 4u) + ty;
            let kb = kk * (TN / 4u) + tx;
{{PRODUCT}}
        }
        workgroupBarrier();
    }
    let n0 = P.n0; // first output column of this chunk (a B larger than one binding), else 0
    let ldc = P.ldc; // output row stride: all of the output's columns
    let m0 = P.m0; // first output row of this chunk (an A larger than one binding), else 0
    let c_base = bz * M * ldc - P.out_window; // less the output window's first element when the output is split
{{STORE}}
}
