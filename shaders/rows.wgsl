// rows.wgsl — ops over the last axis, one workgroup of 256 per row: softmax (optional mask and scale), rms_norm,
// layer_norm, and the reductions sum, mean, max, argmax.
// Bindings: 0 P (RowsParams), 1 out (contiguous, N or 1 values per row), 2 x, 3 mask (only in the softmax-with-mask
// variant).
// Dispatch: one workgroup per row, split over x and y.
// Tokens: OP names the op (one of the constants below), HAS_MASK, OUT_C the compute type of out.
// CPU reference: src/backend/cpu/rows.rs.
{{BINDINGS}}

const SOFTMAX: u32 = 0u;
const RMS_NORM: u32 = 1u;
const LAYER_NORM: u32 = 2u;
const SUM: u32 = 3u;
const MEAN: u32 = 4u;
const MAX: u32 = 5u;
const ARGMAX: u32 = 6u;
const OP: u32 = {{OP}};
const HAS_MASK: bool = {{HAS_MASK}};

var<workgroup> red: array<f32, 256>;
var<workgroup> red_i: array<u32, 256>;

fn row_sum(v: f32, lid: u32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] = red[lid] + red[lid + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn row_max(v: f32, lid: u32) -> f32 {
    red[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            red[lid] = max(red[lid], red[lid + s]);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn load_x(base: u32, j: u32) -> f32 {
    return f32(ld_x_in(base + j * P.x_strides.w));
}

{{MASK_FN}}

fn value(xb: u32, mb: u32, j: u32) -> f32 {
    var v = load_x(xb, j);
    if (OP == SOFTMAX) {
        v = v * P.scale;
        if (HAS_MASK) {
            v = v + load_mask(mb, j);
        }
    }
    return v;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = linear_group(wg, nwg);
    let N = P.n;
    if (row >= P.rows) {
        return; // uniform per workgroup: every invocation of this row leaves together
    }
    let shape = P.x_shape;
    let c = coords4(row + P.first_row, vec4<u32>(1u, shape.x, shape.y, shape.z));
    let rc = vec4<u32>(c.y, c.z, c.w, 0u);
    let xb = at(rc, P.x_strides, P.x_offset);
    let mb = at(rc, P.mask_strides, P.mask_offset);

    if (OP == ARGMAX) {
        var best = -3.402823466e38;
        var arg = 0xffffffffu;
        for (var j = lid; j < N; j = j + WG) {
            let v = value(xb, mb, j);
            if (arg == 0xffffffffu || v > best) {
                best = v;
                arg = j;
            }
        }
        red[lid] = best;
        red_i[lid] = arg;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s = s >> 1u) {
            if (lid < s) {
                let o = lid + s;
                let take = red_i[o] != 0xffffffffu && (red_i[lid] == 0xffffffffu || red[o] > red[lid] ||
                    (red[o] == red[lid] && red_i[o] < red_i[lid]));
                if (take) {
                    red[lid] = red[o];
                    red_i[lid] = red_i[o];
                }
            }
            workgroupBarrier();
        }
        if (lid == 0u) {
            st_out(row + P.out_offset, {{OUT_C}}(red_i[0]));
        }
        return;
    }
    if (OP == SUM || OP == MEAN) {
        var s = 0.0;
        for (var j = lid; j < N; j = j + WG) {
            s = s + value(xb, mb, j);
        }
        let total = row_sum(s, lid);
        if (lid == 0u) {
            st_out(row + P.out_offset, {{OUT_C}}(select(total, total / f32(N), OP == MEAN)));
        }
        return;
    }
    if (OP == MAX) {
        var m = -3.402823466e38;
        for (var j = lid; j < N; j = j + WG) {
            m = max(m, value(xb, mb, j));
        }
        let total = row_max(m, lid);
        if (lid == 0u) {
            st_out(row + P.out_offset, {{OUT_C}}(total));
        }
        return;
    }
    let ob = row * N + P.out_offset;
    if (OP == SOFTMAX) {
        var m = -3.402823466e38;
        for (var j = lid; j < N; j = j + WG) {
            let v = value(xb, mb, j);
            m = max(m, v);
        }
        // a row of -inf: max stays at the lowest f32 and every exp underflows to 0 below
        let mx = row_max(m, lid);
        var s = 0.0;
        for (var j = lid; j < N; j = j + WG) {
            s = s + exp(value(xb, mb, j) - mx);
        }
        let total = row_sum(s, lid);
        let inv = select(0.0, 1.0 / total, total > 0.0);
        for (var j = lid; j < N; j = j + WG) {
            st_out(ob + j, {{OUT_C}}(exp(value(xb, mb, j) - mx) * inv));
        }
        return;
    }
    // norms
    var mean = 0.0;
    if (OP == LAYER_NORM) {
        var s = 0.0;
        for (var j = lid; j < N; j = j + WG) {
            s = s + load_x(xb, j);
        }
        mean = row_sum(s, lid) / f32(N);
    }
    var q = 0.0;
    for (var j = lid; j < N; j = j + WG) {
        let d = load_x(xb, j) - mean;
        q = q + d * d;
    }
    let inv = inverseSqrt(row_sum(q, lid) / f32(N) + P.eps);
    for (var j = lid; j < N; j = j + WG) {
        st_out(ob + j, {{OUT_C}}((load_x(xb, j) - mean) * inv));
    }
}
