// rows.wgsl — ops over the last axis, one workgroup of 256 per row: softmax (optional mask and scale),
// rms_norm, layer_norm, and the reductions sum, mean, max, argmax.
// Bindings: 0 Params, 1 out (storage; contiguous, N or 1 values per row), 2 x, 3 mask (storage, read_write;
// the mask binding exists only in the softmax-with-mask variant).
// Params: v[0] = (N = row length, rows, x offset, mask offset) in elements; v[1] = x shape (rank 4);
//         v[2] = x strides; v[3] = mask strides (broadcast to x's shape); v[4].x = scale bits, v[4].y = eps bits,
//         v[4].z = index of the first row (a chunk of a larger tensor), v[4].w = output offset in elements.
// Dispatch: one workgroup per row, split over x and y.
// Token OP selects the op at compile time (a WGSL const), OUT_T/X_T/M_T the storage types.
// CPU reference: backend/cpu.rs (Softmax, RmsNorm, LayerNorm, Reduce).
{{BINDINGS}}

const OP: u32 = {{OP}}u; // 0 softmax, 1 rms_norm, 2 layer_norm, 3 sum, 4 mean, 5 max, 6 argmax
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
    return f32(ld_x_in(base + j * P.v[2].w));
}

{{MASK_FN}}

fn value(xb: u32, mb: u32, j: u32) -> f32 {
    var v = load_x(xb, j);
    if (OP == 0u) {
        v = v * bitcast<f32>(P.v[4].x);
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
    let N = P.v[0].x;
    if (row >= P.v[0].y) {
        return; // uniform per workgroup: every invocation of this row leaves together
    }
    let shape = P.v[1];
    let c = coords4(row + P.v[4].z, vec4<u32>(1u, shape.x, shape.y, shape.z));
    let rc = vec4<u32>(c.y, c.z, c.w, 0u);
    let xb = at(rc, P.v[2], P.v[0].z);
    let mb = at(rc, P.v[3], P.v[0].w);

    if (OP == 6u) {
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
            st_out(row + P.v[4].w, {{OUT_C}}(red_i[0]));
        }
        return;
    }
    if (OP == 3u || OP == 4u) {
        var s = 0.0;
        for (var j = lid; j < N; j = j + WG) {
            s = s + value(xb, mb, j);
        }
        let total = row_sum(s, lid);
        if (lid == 0u) {
            st_out(row + P.v[4].w, {{OUT_C}}(select(total, total / f32(N), OP == 4u)));
        }
        return;
    }
    if (OP == 5u) {
        var m = -3.402823466e38;
        for (var j = lid; j < N; j = j + WG) {
            m = max(m, value(xb, mb, j));
        }
        let total = row_max(m, lid);
        if (lid == 0u) {
            st_out(row + P.v[4].w, {{OUT_C}}(total));
        }
        return;
    }
    let ob = row * N + P.v[4].w;
    if (OP == 0u) {
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
    if (OP == 2u) {
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
    let inv = inverseSqrt(row_sum(q, lid) / f32(N) + bitcast<f32>(P.v[4].y));
    for (var j = lid; j < N; j = j + WG) {
        st_out(ob + j, {{OUT_C}}((load_x(xb, j) - mean) * inv));
    }
}
