// matmul_coop.wgsl — C[b, m, n] = epilogue(sum_k A[b, m, k] * B[b, k, n]) on cooperative matrices (tensor cores,
// wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX): A and B staged as f16, f32 accumulation in F x F x F fragments, C in its
// own dtype.
// Bindings: 0 P (MatmulParams), 1 C (out, scalar), 2 A, 3 B (vec4 elements: f16; or A f32 and B a block-quantized
// weight with K contiguous, rounded to f16 as they are fetched), 4.. epilogue operands (as in matmul.wgsl).
// Preconditions (src/backend/gpu/kernels/matmul/mod.rs): those of matmul_tiled.wgsl, a subgroup size of 32 and the
// F x F x F f16 -> f32 cooperative-matrix shape on the adapter.
// Tile: a workgroup of WM x WN subgroups computes BM = WM*SM*F rows by BN = WN*SN*F columns; each subgroup owns
// SM x SN accumulator fragments. A and B blocks are staged in workgroup memory (rows padded by 8 halves), with
// edges zero-filled and the next K step's blocks loaded into registers while the current one is multiplied, so
// any M, N, K meeting the preconditions works. Each accumulator goes through a per-subgroup f32 scratch fragment
// to the epilogue and the bounds-checked store. Dispatch: (ceil(N/BN), ceil(M/BM), batches).
// Tokens: the tile constants; ACC_DECL, FETCH, PUT_A, PUT_B, MMA and STORE, unrolled per fragment by
// src/backend/gpu/kernels/matmul/coop.rs; on adapters without cooperative matrices (tests) the three cooperative operations
// come from matmul_coop_emulation.wgsl. CPU reference: src/backend/cpu/matmul.rs.
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

// Writes the F x F accumulator fragment staged at c_s[scratch..] (C rows r0.., columns c0.. of this dispatch)
// through the epilogue, the subgroup's lanes taking its elements in turn, each checked against M and N.
fn store_scratch(scratch: u32, lane: u32, sg_size: u32, r0: u32, c0: u32, b0: u32, b1: u32, c_base: u32) {
    for (var e = lane; e < F * F; e = e + sg_size) {
        let gm = r0 + e / F;
        let gn = c0 + e % F;
        if (gm < P.m && gn < P.n) {
            let x = epilogue(c_s[scratch + e], vec4<u32>(b0, b1, P.m0 + gm, P.n0 + gn));
            st_c_out(c_base + (P.m0 + gm) * P.ldc + P.n0 + gn, x);
        }
    }
}

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
{{BATCH_LETS}}
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
    // this batch's first output element, less the output window's first element when the output is split
    let c_base = bz * M * P.ldc - P.out_window;
    let scratch = sg * F * F;
{{STORE}}
}
