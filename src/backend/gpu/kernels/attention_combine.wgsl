// attention_combine.wgsl — the second pass of split-key attention (decode): out[b, t, h, :] from the partial
// (m, l, acc[DV]) of each split, rescaled to the largest m: sum_i acc_i exp(m_i - M) / sum_i l_i exp(m_i - M).
// Splits that saw no key (l = 0) contribute nothing; a row with no key at all gives 0, one with a NaN score (a
// split stored l = NaN) NaN. With a run-time length L,
// only the splits L reaches are read (the first pass may not have run the others).
// Bindings: 0 P (AttentionParams, as the first pass), 1 out (contiguous [B, T, H, DV]), 2 the scratch (f32).
// Dispatch: one workgroup of 64 per (b, h, t), split over x and y. CPU reference: src/backend/cpu/attention.rs.
{{BINDINGS}}

const DV: u32 = {{DV}}u;
const NEG: f32 = -3.0e38;

// a quiet NaN made at run time: a NaN constant (bitcast<f32>(0x7fc00000u) as a literal) is an error in WGSL's
// constant evaluation (Tint refuses it; naga does not)
fn nan_f32(bits: u32) -> f32 {
    return bitcast<f32>(bits);
}

{{LENGTH_FN}}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = linear_group(wg, nwg);
    let T = P.t;
    if (row >= P.batch * P.h * T) {
        return;
    }
    let t = row % T;
    let hi = (row / T) % P.h;
    let b = row / (T * P.h);
    let base = row * P.splits * (DV + 2u);
    let n = clamp((min(kv_length(), P.s) + P.split_len - 1u) / P.split_len, 1u, P.splits);
    var mx = NEG;
    var nan = false;
    for (var i = 0u; i < n; i = i + 1u) {
        // a split whose row met a NaN score stores a NaN sum (tested on the bits: comparisons drop a NaN)
        nan = nan || (bitcast<u32>(ld_src0(base + i * (DV + 2u) + 1u)) & 0x7fffffffu) > 0x7f800000u;
        if (ld_src0(base + i * (DV + 2u) + 1u) > 0.0) {
            mx = max(mx, ld_src0(base + i * (DV + 2u)));
        }
    }
    var l = 0.0;
    for (var i = 0u; i < n; i = i + 1u) {
        let li = ld_src0(base + i * (DV + 2u) + 1u);
        if (li > 0.0) {
            l = l + li * exp(ld_src0(base + i * (DV + 2u)) - mx);
        }
    }
    for (var d = lid; d < DV; d = d + 64u) {
        var o = 0.0;
        for (var i = 0u; i < n; i = i + 1u) {
            let p = base + i * (DV + 2u);
            if (ld_src0(p + 1u) > 0.0) {
                o = o + ld_src0(p + 2u + d) * exp(ld_src0(p) - mx);
            }
        }
        let v = select(select(0.0, o / l, l > 0.0), nan_f32(0x7fc00000u), nan);
        st_out(((b * T + t) * P.h + hi) * DV + d, {{OUT_C}}(v));
    }
}
