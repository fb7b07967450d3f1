// matmul_coop.wgsl — C[b, m, n] = sum_k A[b, m, k] * B[b, k, n] on cooperative matrices (tensor cores, wgpu's
// EXPERIMENTAL_COOPERATIVE_MATRIX): f16 A and B, f32 accumulation in F x F x F fragments, C in its own dtype.
// Bindings: 0 Params, 1 C (out, scalar), 2 A, 3 B (storage, vec4<f16> elements), 4.. epilogue operands
// (as in matmul.wgsl: C = epilogue(acc, (b0, b1, m, n))).
// Params: as matmul_tiled.wgsl: v[0] = (M, N, K, batch dim 1 size); v[1], v[2] = A, B strides (batch0, batch1,
//         row, col) in elements; v[3] = (A offset, B offset, first output column, output row stride);
//         v[15] = (first output row, output window's first element) for operands split over bindings.
// Preconditions (src/backend/gpu/matmul.rs): those of matmul_tiled.wgsl (each operand's contiguous axis has
// stride 1 and a length that is a multiple of 4; other strides and offsets are multiples of 4), a subgroup
// size of 32 and the F x F x F f16 -> f32 cooperative-matrix shape on the adapter.
// Tile: a workgroup of WM x WN subgroups computes BM = WM*SM*F rows by BN = WN*SN*F columns; each subgroup owns
// SM x SN accumulator fragments. A and B blocks are staged in workgroup memory (rows padded by 8 halves), with
// edges zero-filled and the next K step's blocks loaded into registers while the current one is multiplied, so any M, N, K meeting the preconditions works. Each accumulator goes through a per-subgroup
// f32 scratch fragment to the epilogue and the bounds-checked store. Dispatch: (ceil(N/BN), ceil(M/BM), batches).
// CPU reference: backend/cpu_matmul.rs.
{{BINDINGS}}

{{EPILOGUE}}

const F: u32 = {{F}}u;
const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const BK: u32 = {{BK}}u;
const WN: u32 = {{WN}}u; // subgroups along n
const SM: u32 = {{SM}}u; // fragments per subgroup along m
const SN: u32 = {{SN}}u; // fragments per subgroup along n
const INV: u32 = {{INV}}u; // invocations: 32 per subgroup
const SA: u32 = {{SA}}u; // row stride of a_s in halves: [BM][BK + 8] when A's k is contiguous, else [BK][BM + 8]
const SB: u32 = {{SB}}u; // row stride of b_s: [BK][BN + 8] when B's n is contiguous, else [BN][BK + 8]
const A_LOADS: u32 = BM * BK / 4u / INV; // vec4 loads of A per invocation per K step
const B_LOADS: u32 = BN * BK / 4u / INV;

var<workgroup> a_s: array<f16, {{A_SHARED}}>;
var<workgroup> b_s: array<f16, {{B_SHARED}}>;
var<workgroup> c_s: array<f32, {{C_SHARED}}>; // one F x F fragment per subgroup

fn put_a(at: u32, v: vec4<f16>) {
    a_s[at] = v.x;
    a_s[at + 1u] = v.y;
    a_s[at + 2u] = v.z;
    a_s[at + 3u] = v.w;
}

fn put_b(at: u32, v: vec4<f16>) {
    b_s[at] = v.x;
    b_s[at + 1u] = v.y;
    b_s[at + 2u] = v.z;
    b_s[at + 3u] = v.w;
}

@compute @workgroup_size({{INV}}, 1, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32{{SUBGROUP_ARGS}}) {
{{SUBGROUP_LETS}}
{{PROLOGUE}}
    let a_base = P.v[3].x + b0 * sa.x + b1 * sa.y;
    let b_base = P.v[3].y + b0 * sb.x + b1 * sb.y;
    let row0 = wg.y * BM;
    let col0 = wg.x * BN;
    let sr = (sg / WN) * SM * F; // this subgroup's first row and column within the block
    let sc = (sg % WN) * SN * F;
{{ACC_DECL}}
    // the next K step's A and B, loaded from global memory while the current step is multiplied
    var ra: array<vec4<f16>, A_LOADS>;
    var rb: array<vec4<f16>, B_LOADS>;
    {
        let kf = 0u;
{{FETCH}}
    }
    for (var k0 = 0u; k0 < K; k0 = k0 + BK) {
        for (var l = 0u; l < A_LOADS; l = l + 1u) {
            let e = lid + l * INV;
{{PUT_A}}
        }
        for (var l = 0u; l < B_LOADS; l = l + 1u) {
            let e = lid + l * INV;
{{PUT_B}}
        }
        workgroupBarrier();
        let kf = k0 + BK;
        if (kf < K) {
{{FETCH}}
        }
        for (var kk = 0u; kk < BK; kk = kk + F) {
{{MMA}}
        }
        workgroupBarrier();
    }
    let n0 = P.v[3].z; // first output column of this chunk (a B larger than one binding), else 0
    let ldc = P.v[3].w; // output row stride: all of the output's columns
    let m0 = P.v[15].x; // first output row of this chunk (an A larger than one binding), else 0
    let c_base = wg.z * M * ldc - P.v[15].y; // less the output window's first element when the output is split
    let scratch = sg * F * F;
{{STORE}}
}
