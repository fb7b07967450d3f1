// top_k.wgsl — out[r, j] = the index of row r's j-th largest value (largest first; NaN above every number, equal
// values by their index): k rounds of a workgroup's arg-max over the entries that rank after the last chosen one.
// Bindings: 0 P (TopKParams), 1 out (i32, contiguous [rows, k]), 2 src0 (x, any strides).
// Dispatch: one workgroup of 256 per row, split over x and y. CPU reference: src/backend/cpu/experts.rs.
{{BINDINGS}}

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

// NaN tested on the bits: a compiler may assume floats are never NaN and fold x != x away
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// (av, ai) ranks before (bv, bi): NaN first, then the larger value, then the lower index
fn before(av: f32, ai: u32, bv: f32, bi: u32) -> bool {
    if (is_nan(av) != is_nan(bv)) {
        return is_nan(av);
    }
    if (!is_nan(av) && av != bv) {
        return av > bv;
    }
    return ai < bi;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = linear_group(wg, nwg);
    if (row >= P.rows) {
        return; // uniform per workgroup
    }
    let shape = P.x_shape;
    let c = coords4(row, vec4<u32>(1u, shape.x, shape.y, shape.z));
    let xb = at(vec4<u32>(c.y, c.z, c.w, 0u), P.x_strides, P.x_offset);
    var prev_v = 0.0;
    var prev_i = 0xffffffffu;
    for (var j = 0u; j < P.k; j = j + 1u) {
        var bv = 0.0;
        var bi = 0xffffffffu;
        for (var e = lid; e < P.n; e = e + WG) {
            let v = f32(ld_src0(xb + e * P.x_strides.w));
            let after = prev_i == 0xffffffffu || before(prev_v, prev_i, v, e);
            if (after && (bi == 0xffffffffu || before(v, e, bv, bi))) {
                bv = v;
                bi = e;
            }
        }
        best_v[lid] = bv;
        best_i[lid] = bi;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s = s >> 1u) {
            if (lid < s) {
                let o = lid + s;
                if (best_i[o] != 0xffffffffu && (best_i[lid] == 0xffffffffu ||
                        before(best_v[o], best_i[o], best_v[lid], best_i[lid]))) {
                    best_v[lid] = best_v[o];
                    best_i[lid] = best_i[o];
                }
            }
            workgroupBarrier();
        }
        prev_v = best_v[0];
        prev_i = best_i[0];
        if (lid == 0u) {
            st_out(row * P.k + j, i32(prev_i));
        }
        workgroupBarrier();
    }
}
