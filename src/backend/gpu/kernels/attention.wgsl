// attention.wgsl — flash attention: out[b, t, h, :] = softmax_s(q[b, h, t]·k[b, g, s] * scale + mask[b, h, t, s])
// · v[b, g, s, :] with g = h / group (grouped-query attention), one pass over K and V in tiles of BC keys with an
// online softmax (running max m, sum l, accumulator rescaled by exp(m_old - m_new)), f32 throughout.
// A workgroup of 64 takes BR query rows of the heads sharing one K/V head (row i of the group's G·T: head
// g·G + i / T, query i % T; a decode step's rows are the group's heads, so each K/V tile is read once for all of
// them) and one split of the keys: the split's tiles are staged in workgroup memory (a key's row padded to D + 1
// words, so that the invocations scoring consecutive keys read distinct banks), scores computed pairwise, each
// row's statistics by LPR invocations (a tree over their partial maxima and sums), the accumulators (BR x DV, ACC
// per invocation) in registers. Keys at or past the run-time length L (KV_LEN) are never read; with
// CAUSAL, query t (the last T of L positions) sees keys s <= L - T + t. A row whose keys are all masked gives 0; a
// row with a NaN score gives NaN (as PyTorch's softmax), kept by a flag: WGSL's max() and comparisons drop a NaN.
// With a mask, keys it hides with -inf after the last one any of the workgroup's rows sees are not read (as
// ggml_flash_attn_ext skips masked keys): a batched row masked to its own length costs that length.
// PARTIAL: several splits of the keys per query (decode), each writing (m, l, acc[DV]) to the scratch buffer for
// attention_combine.wgsl; when the length reaches only the first split, it also writes the output (the run then
// skips the combine). Else one split writing the normalized rows into a contiguous [B, T, H, DV] output.
// With SINKS, head h's softmax counts one more logit, sinks[h], in its denominator (gpt-oss's attention sinks):
// added where a row is finished (here, or in the combine pass for a split row).
// Bindings: 0 P (AttentionParams), 1 out (or the scratch), 2 q, 3 k, 4 v, then the mask, the length and the sinks
// when present. Dispatch: (splits, Hkv, B * ceil(G·T / BR)); with a run-time length the run may dispatch only the splits
// it reaches (the combine reads no others). CPU reference: src/backend/cpu/attention.rs.
{{BINDINGS}}

const BR: u32 = {{BR}}u;
const BC: u32 = {{BC}}u;
const D: u32 = {{D}}u;
const DV: u32 = {{DV}}u;
const WGS: u32 = 64u;
const ACC: u32 = (BR * DV + WGS - 1u) / WGS;
// invocations per row in the row statistics: a power of two, BR * LPR <= WGS, LPR <= BC
const LPR: u32 = {{LPR}}u;
// a staged key's stride in k_s (words)
const KS: u32 = D + 1u;
const PARTIAL: bool = {{PARTIAL}};
// masked scores: finite, so that exp(NEG - NEG) never appears; a masked entry is one at or below HIDDEN
const NEG: f32 = -3.0e38;
const HIDDEN: f32 = -1.0e38;

var<workgroup> q_s: array<f32, {{Q_SHARED}}>;
var<workgroup> k_s: array<f32, {{K_SHARED}}>;
var<workgroup> v_s: array<f32, {{V_SHARED}}>;
var<workgroup> p_s: array<f32, {{P_SHARED}}>;
var<workgroup> m_s: array<f32, BR>;
var<workgroup> l_s: array<f32, BR>;
var<workgroup> a_s: array<f32, BR>;
// the row statistics' partial maxima and sums, LPR a row
var<workgroup> red_s: array<f32, WGS>;
// a row that met a NaN score (set by any invocation, hence atomic)
var<workgroup> nan_s: array<atomic<u32>, BR>;

// a quiet NaN made at run time: a NaN constant (bitcast<f32>(0x7fc00000u) as a literal) is an error in WGSL's
// constant evaluation (Tint refuses it; naga does not)
fn nan_f32(bits: u32) -> f32 {
    return bitcast<f32>(bits);
}

// NaN tested on the bits: a compiler may assume floats are never NaN and fold x != x away
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// row r's (of head h) output from its accumulator a: normalized (the head's sink in the denominator), 0 for a row
// that saw no key, NaN for one with a NaN score
fn finish(r: u32, h: u32, a: f32) -> f32 {
    if (atomicLoad(&nan_s[r]) != 0u) {
        return nan_f32(0x7fc00000u);
    }
    let l = l_s[r];
    return select(0.0, a / (l + sink_weight(h, m_s[r])), l > 0.0);
}

{{SINK_FN}}

{{LENGTH_FN}}

{{MASK_FN}}

{{VISIBLE_FN}}

// query row i of K/V head g's group: its head and query (past the group's G·T rows: rows = G·T)
fn row_of(g: u32, i: u32) -> vec2<u32> {
    return vec2<u32>(g * P.group + i / P.t, i % P.t);
}

// the BR query rows of K/V head g's group from row0 into q_s (zeros past the group's G·T rows)
fn stage_q(lid: u32, b: u32, g: u32, row0: u32) {
    let nd = P.d;
    for (var e = lid; e < BR * nd; e = e + WGS) {
        let i = row0 + e / nd;
        var x = 0.0;
        if (i < P.group * P.t) {
            let ht = row_of(g, i);
            x = f32(ld_q(P.q_offset + b * P.q_strides.x + ht.x * P.q_strides.y + ht.y * P.q_strides.z + (e % nd) * P.q_strides.w));
        }
        q_s[e] = x;
    }
}

// the tile of keys and values from s0 into k_s and v_s (zeros at or past s_end)
fn stage_kv(lid: u32, k_base: u32, v_base: u32, s0: u32, s_end: u32) {
    let nd = P.d;
    let ndv = P.dv;
    let nbc = P.bc;
    for (var e = lid; e < nbc * nd; e = e + WGS) {
        let s = s0 + e / nd;
        var x = 0.0;
        if (s < s_end) {
            x = f32(ld_k(k_base + s * P.k_strides.z + (e % nd) * P.k_strides.w));
        }
        k_s[(e / nd) * KS + e % nd] = x;
    }
    for (var e = lid; e < nbc * ndv; e = e + WGS) {
        let s = s0 + e / ndv;
        var x = 0.0;
        if (s < s_end) {
            x = f32(ld_v(v_base + s * P.v_strides.z + (e % ndv) * P.v_strides.w));
        }
        v_s[e] = x;
    }
}

// the tree over the row statistics' partials in red_s: lane 0 of each row ends with `op` of its row's LPR
// values (max for op 0, sum for op 1); call in uniform control flow (it holds barriers)
fn reduce_rows(lid: u32, op: u32) {
    let lane = lid % LPR;
    for (var w = LPR / 2u; w > 0u; w = w / 2u) {
        if (lid < BR * LPR && lane < w) {
            let a = red_s[lid];
            let b = red_s[lid + w];
            red_s[lid] = select(a + b, max(a, b), op == 0u);
        }
        workgroupBarrier();
    }
}

// the online softmax over the tile's scores in p_s, each row by LPR invocations over BC / LPR scores: the rows'
// running maxima and sums updated, the scores turned into weights, and the factors that rescale the rows'
// accumulators in a_s. Call in uniform control flow after the scores' barrier; it ends with a barrier.
fn update_rows(lid: u32) {
    let nbc = P.bc;
    let r = lid / LPR;
    let per = nbc / LPR;
    let c0 = r * nbc + (lid % LPR) * per;
    let in_row = lid < BR * LPR;
    if (in_row) {
        var mx = NEG;
        for (var c = c0; c < c0 + per; c = c + 1u) {
            mx = max(mx, p_s[c]);
        }
        red_s[lid] = mx;
    }
    workgroupBarrier();
    reduce_rows(lid, 0u);
    var sum = 0.0;
    var mx = NEG;
    if (in_row) {
        mx = max(m_s[r], red_s[r * LPR]);
        for (var c = c0; c < c0 + per; c = c + 1u) {
            let x = p_s[c];
            let w = select(0.0, exp(x - mx), x > HIDDEN);
            p_s[c] = w;
            sum = sum + w;
        }
    }
    // every row's maximum read before the sums take its place
    workgroupBarrier();
    if (in_row) {
        red_s[lid] = sum;
    }
    workgroupBarrier();
    reduce_rows(lid, 1u);
    if (in_row && lid % LPR == 0u) {
        let alpha = exp(m_s[r] - mx);
        m_s[r] = mx;
        l_s[r] = l_s[r] * alpha + red_s[lid];
        a_s[r] = alpha;
    }
    workgroupBarrier();
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let rows = P.group * P.t;
    let blocks = (rows + BR - 1u) / BR;
    let row0 = (wg.z % blocks) * BR;
    let g = wg.y;
    let b = wg.z / blocks;
    let split = wg.x;
    let T = P.t;
    let L = min(kv_length(), P.s);
    // a split past the run-time length has nothing to do (the combine pass reads only the splits L reaches): leave
    // before any barrier, so that a KV cache sized for the whole context costs only what its length uses (L is
    // uniform: kv_length loads it through workgroupUniformLoad)
    if (split > 0u && split * P.split_len >= L) {
        return;
    }
    let nd = P.d; // loop bounds from the parameters (= D, DV, BC): constant bounds get fully unrolled by some
    let ndv = P.dv; // drivers (Mesa's GL compiles such a kernel for minutes)
    let nbc = P.bc;
    stage_q(lid, b, g, row0);
    if (lid < BR) {
        m_s[lid] = NEG;
        l_s[lid] = 0.0;
        atomicStore(&nan_s[lid], 0u);
    }
    var acc: array<f32, ACC>;
    let s_begin = split * P.split_len;
    let s_end = visible_end(lid, vec3<u32>(b, g, row0), s_begin, min(L, s_begin + P.split_len));
    let k_base = P.k_offset + b * P.k_strides.x + g * P.k_strides.y;
    let v_base = P.v_offset + b * P.v_strides.x + g * P.v_strides.y;
    workgroupBarrier();
    for (var s0 = s_begin; s0 < s_end; s0 = s0 + nbc) {
        stage_kv(lid, k_base, v_base, s0, s_end);
        workgroupBarrier();
        for (var e = lid; e < BR * nbc; e = e + WGS) {
            let r = e / nbc;
            let ht = row_of(g, row0 + r);
            let hi = ht.x;
            let t = ht.y;
            let s = s0 + e % nbc;
            var x = NEG;
            if (s < s_end && row0 + r < rows && (P.causal == 0u || s + T <= L + t)) {
                var dot = 0.0;
                for (var d = 0u; d < nd; d = d + 1u) {
                    dot = fma(q_s[r * nd + d], k_s[(e % nbc) * KS + d], dot);
                }
                let raw = dot * P.scale + mask_at(b, hi, t, s);
                if (is_nan(raw)) {
                    atomicStore(&nan_s[r], 1u);
                }
                x = max(raw, NEG);
            }
            p_s[e] = x;
        }
        workgroupBarrier();
        update_rows(lid);
        for (var j = 0u; j < ACC; j = j + 1u) {
            let e = lid + j * WGS;
            if (e < BR * ndv) {
                let r = e / ndv;
                let d = e % ndv;
                var x = acc[j] * a_s[r];
                for (var c = 0u; c < nbc; c = c + 1u) {
                    x = fma(p_s[r * nbc + c], v_s[c * ndv + d], x);
                }
                acc[j] = x;
            }
        }
        workgroupBarrier();
    }
    for (var j = 0u; j < ACC; j = j + 1u) {
        let e = lid + j * WGS;
        let r = e / ndv;
        let d = e % ndv;
        let ht = row_of(g, row0 + r);
        let hi = ht.x;
        let t = ht.y;
        if (e < BR * ndv && row0 + r < rows) {
            if (PARTIAL) {
                let base = (((b * P.h + hi) * T + t) * P.splits + split) * (ndv + 2u);
                st_out(base + 2u + d, acc[j]);
                if (d == 0u) {
                    st_out(base, m_s[r]);
                    // a NaN row's l is NaN: the combine pass tests it
                    st_out(base + 1u, select(l_s[r], nan_f32(0x7fc00000u), atomicLoad(&nan_s[r]) != 0u));
                }
                {{FIN_STORE}}
            } else {
                st_out(((b * T + t) * P.h + hi) * ndv + d, {{OUT_C}}(finish(r, hi, acc[j])));
            }
        }
    }
}
