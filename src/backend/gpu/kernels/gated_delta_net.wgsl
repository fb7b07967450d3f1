// gated_delta_net.wgsl — the gated delta rule, token by token: per value head h (query/key head h mod Hk) and
// value row j of its [Dv, Dk] state S: S_j ← exp(g)·S_j; δ = β·(v_j − S_j·k); S_j ← S_j + δ·k; out_j = scale·S_j·q.
// One workgroup of ROWS invocations a (batch·Hv + head, block of ROWS value rows), an invocation a row; the token's
// k and q shared in workgroup memory. The state rows live in the output binding after the outputs (states_at),
// copied from the input state by the first dispatch and updated in place. A step's tokens go in dispatches of at most
// `tn` (llvmpipe ends a loop after 65535 iterations of an invocation, nested ones counted: see gated_delta_net.rs).
// Bindings: 0 P (GatedDeltaNetParams), 1 out (f32: outputs [B, T, Hv, Dv], then states [B, Hv, Dv, Dk]), 2 src0 q,
// 3 src1 k, 4 src2 v, 5 src3 g, 6 src4 beta, 7 src5 state (all f32, contiguous).
// Dispatch: B·Hv·ceil(Dv / ROWS) workgroups of ROWS, split over x and y. CPU reference: src/backend/cpu/recurrent.rs.
{{BINDINGS}}

const ROWS: u32 = 64u;
const MAX_DK: u32 = 256u;

var<workgroup> kt: array<f32, MAX_DK>;
var<workgroup> qt: array<f32, MAX_DK>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let gid = linear_group(wg, nwg);
    let blocks = (P.dv + ROWS - 1u) / ROWS;
    if (gid >= P.b * P.hv * blocks) {
        return;
    }
    let bh = gid / blocks;
    let j = (gid % blocks) * ROWS + lid;
    let bi = bh / P.hv;
    let h = bh % P.hv;
    let kh = h % P.hk;
    let live = j < P.dv;
    let row = P.states_at + (bh * P.dv + j) * P.dk;
    if (live && P.t0 == 0u) {
        let src = P.state_offset + (bh * P.dv + j) * P.dk;
        for (var i = 0u; i < P.dk; i = i + 1u) {
            out[row + i] = ld_src5(src + i);
        }
    }
    for (var t = P.t0; t < P.t0 + P.tn; t = t + 1u) {
        let tok = bi * P.t + t;
        workgroupBarrier();
        for (var i = lid; i < P.dk; i = i + ROWS) {
            kt[i] = ld_src1(P.k_offset + (tok * P.hk + kh) * P.dk + i);
            qt[i] = ld_src0(P.q_offset + (tok * P.hk + kh) * P.dk + i);
        }
        workgroupBarrier();
        if (live) {
            let decay = exp(ld_src3(P.g_offset + tok * P.hv + h));
            let beta = ld_src4(P.beta_offset + tok * P.hv + h);
            var kv = 0.0;
            for (var i = 0u; i < P.dk; i = i + 1u) {
                let s = out[row + i] * decay;
                out[row + i] = s;
                kv = kv + s * kt[i];
            }
            let delta = beta * (ld_src2(P.v_offset + (tok * P.hv + h) * P.dv + j) - kv);
            var o = 0.0;
            for (var i = 0u; i < P.dk; i = i + 1u) {
                let s = out[row + i] + delta * kt[i];
                out[row + i] = s;
                o = o + s * qt[i];
            }
            out[(tok * P.hv + h) * P.dv + j] = P.scale * o;
        }
    }
}
