// attention_combine.wgsl — the second pass of split-key attention (decode): out[b, t, h, :] from the partial
// (m, l, acc[DV]) of each split, rescaled to the largest m: sum_i acc_i exp(m_i - M) / sum_i l_i exp(m_i - M).
// Splits that saw no key (l = 0) contribute nothing; a row with no key at all gives 0, one with a NaN score (a
// split stored l = NaN) NaN. With a run-time length L,
// only the splits L reaches are read (the first pass may not have run the others).
// With SINKS, the head's sink logit joins the denominator (as the first pass adds it to an unsplit row).
// Bindings: 0 P (AttentionParams, as the first pass), 1 out (contiguous [B, T, H, DV]), 2 the scratch (f32), then
// the length and the sinks when present.
// The workgroup's invocations take the splits in turn: each split's (m, l) read once, the largest m and the sum
// by a tree in workgroup memory, each split's weight exp(m_i - M) staged there (at most MAX_SPLITS splits), then
// invocation d sums acc_i[d] times the weights.
// Dispatch: one workgroup of 64 per (b, h, t), split over x and y. CPU reference: src/backend/cpu/attention.rs.
{{BINDINGS}}

const DV: u32 = {{DV}}u;
const NEG: f32 = -3.0e38;
const WGS: u32 = 64u;
const MAX_SPLITS: u32 = {{MAX_SPLITS}}u;

// each split's m, then its weight exp(m - M) (0 for a split that saw no key)
var<workgroup> w_s: array<f32, MAX_SPLITS>;
// the invocations' partial maxima, then sums
var<workgroup> red_s: array<f32, WGS>;
// a split met a NaN score
var<workgroup> nan_s: atomic<u32>;

// a quiet NaN made at run time: a NaN constant (bitcast<f32>(0x7fc00000u) as a literal) is an error in WGSL's
// constant evaluation (Tint refuses it; naga does not)
fn nan_f32(bits: u32) -> f32 {
    return bitcast<f32>(bits);
}

{{LENGTH_FN}}

{{SINK_FN}}

// red_s[0] ends with the maximum (op 0) or the sum (op 1) of red_s; call in uniform control flow
fn reduce(lid: u32, op: u32) {
    workgroupBarrier();
    for (var w = WGS / 2u; w > 0u; w = w / 2u) {
        if (lid < w) {
            let a = red_s[lid];
            let b = red_s[lid + w];
            red_s[lid] = select(a + b, max(a, b), op == 0u);
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = linear_group(wg, nwg);
    let T = P.t;
    // uniform: the whole workgroup leaves
    if (row >= P.batch * P.h * T) {
        return;
    }
    let t = row % T;
    let hi = (row / T) % P.h;
    let b = row / (T * P.h);
    let base = row * P.splits * (DV + 2u);
    let n = clamp((min(kv_length(), P.s) + P.split_len - 1u) / P.split_len, 1u, P.splits);
    if (lid == 0u) {
        atomicStore(&nan_s, 0u);
    }
    // the flag cleared before any invocation may set it
    workgroupBarrier();
    var mx = NEG;
    for (var i = lid; i < n; i = i + WGS) {
        let m = ld_src0(base + i * (DV + 2u));
        let l = ld_src0(base + i * (DV + 2u) + 1u);
        // a split whose row met a NaN score stores a NaN sum (tested on the bits: comparisons drop a NaN)
        if ((bitcast<u32>(l) & 0x7fffffffu) > 0x7f800000u) {
            atomicStore(&nan_s, 1u);
        }
        if (l > 0.0) {
            mx = max(mx, m);
        }
        w_s[i] = m;
    }
    red_s[lid] = mx;
    reduce(lid, 0u);
    mx = red_s[0];
    var l = 0.0;
    for (var i = lid; i < n; i = i + WGS) {
        let li = ld_src0(base + i * (DV + 2u) + 1u);
        let w = select(0.0, exp(w_s[i] - mx), li > 0.0);
        w_s[i] = w;
        l = l + li * w;
    }
    // every invocation has read the maximum
    workgroupBarrier();
    red_s[lid] = l;
    reduce(lid, 1u);
    l = red_s[0];
    let total = l + select(0.0, sink_weight(hi, mx), l > 0.0);
    let nan = atomicLoad(&nan_s) != 0u;
    for (var d = lid; d < DV; d = d + WGS) {
        var o = 0.0;
        for (var i = 0u; i < n; i = i + 1u) {
            let w = w_s[i];
            if (w > 0.0) {
                o = o + ld_src0(base + i * (DV + 2u) + 2u + d) * w;
            }
        }
        let v = select(select(0.0, o / total, l > 0.0), nan_f32(0x7fc00000u), nan);
        st_out(((b * T + t) * P.h + hi) * DV + d, {{OUT_C}}(v));
    }
}
