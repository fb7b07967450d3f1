// rows.wgsl — ops over the last axis, one workgroup of 256 per row: softmax (optional mask and scale), rms_norm,
// layer_norm, and the reductions sum, mean, max, argmax.
// Bindings: 0 P (RowsParams), 1 out (contiguous, N or 1 values per row), 2 x, 3 mask (only in the softmax-with-mask
// variant), then a row op's epilogue operands e0.. (its values pass through epilogue() before the store).
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
const L2_NORM: u32 = 7u;
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

fn load_x(base: u32, j: u32) -> f32 {
    return f32(ld_x_in(base + j * P.x_strides.w));
}

{{MASK_FN}}

{{EPILOGUE}}

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

/// x_j·scale + mask_j less x_k·scale + mask_k, each part's difference first (see the softmax below).
fn relative(xb: u32, mb: u32, j: u32, xk: f32, mk: f32) -> f32 {
    return (load_x(xb, j) * P.scale - xk) + (load_mask(mb, j) - mk);
}

// a quiet NaN made at run time: a NaN constant (bitcast<f32>(0x7fc00000u) as a literal) is an error in WGSL's
// constant evaluation (Tint refuses it; naga does not)
fn nan_f32(bits: u32) -> f32 {
    return bitcast<f32>(bits);
}

// NaN tested on the bits: a compiler may assume floats are never NaN and fold x != x away
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// a ranks above b, a NaN above every number (numpy.argmax and torch.amax take the first NaN)
fn above(a: f32, b: f32) -> bool {
    return select(!is_nan(b) && a > b, !is_nan(b), is_nan(a));
}

// a and b rank equal: equal numbers, or both NaN
fn same(a: f32, b: f32) -> bool {
    return select(!is_nan(b) && a == b, is_nan(b), is_nan(a));
}

/// The index of the row's largest value (the first of equals; the first NaN where there is one), for every
/// invocation.
fn row_argmax(xb: u32, mb: u32, lid: u32) -> u32 {
    var best = -3.402823466e38;
    var arg = 0xffffffffu;
    for (var j = lid; j < P.n; j = j + WG) {
        let v = value(xb, mb, j);
        if (arg == 0xffffffffu || above(v, best)) {
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
            let take = red_i[o] != 0xffffffffu && (red_i[lid] == 0xffffffffu || above(red[o], red[lid]) ||
                (same(red[o], red[lid]) && red_i[o] < red_i[lid]));
            if (take) {
                red[lid] = red[o];
                red_i[lid] = red_i[o];
            }
        }
        workgroupBarrier();
    }
    let k = red_i[0];
    workgroupBarrier();
    return select(k, 0u, k == 0xffffffffu);
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
        let k = row_argmax(xb, mb, lid);
        if (lid == 0u) {
            st_out(row + P.out_offset, {{OUT_C}}(k));
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
            st_out(row + P.out_offset, {{OUT_C}}(select(total, div_rn(total, f32(N)), OP == MEAN)));
        }
        return;
    }
    if (OP == MAX) {
        // the value at the argmax: a NaN where the row has one (max() would drop it)
        let k = row_argmax(xb, mb, lid);
        if (lid == 0u) {
            st_out(row + P.out_offset, {{OUT_C}}(value(xb, mb, k)));
        }
        return;
    }
    let ob = row * N + P.out_offset;
    if (OP == SOFTMAX) {
        // each value relative to the row's largest, at index k, as (x_j·scale − x_k·scale) + (mask_j − mask_k):
        // both differences are taken before they are added, so a large mask (−65504 on every key) does not round
        // x·scale away first (two f16 or f32 mask values differ exactly in f32)
        let k = row_argmax(xb, mb, lid);
        let xk = load_x(xb, k) * P.scale;
        let mk = load_mask(mb, k);
        // a row of -inf (every key masked) gives zeros, a row with a NaN NaN (its argmax is the NaN)
        let masked = xk + mk < -3.402823466e38;
        let nan = is_nan(value(xb, mb, k));
        var s = 0.0;
        for (var j = lid; j < N; j = j + WG) {
            s = s + exp(relative(xb, mb, j, xk, mk));
        }
        let total = row_sum(s, lid);
        let inv = select(0.0, 1.0 / total, total > 0.0);
        for (var j = lid; j < N; j = j + WG) {
            let w = select(select(exp(relative(xb, mb, j, xk, mk)) * inv, 0.0, masked), nan_f32(0x7fc00000u), nan);
            st_out(ob + j, {{OUT_C}}(epilogue(w, vec4<u32>(rc.xyz, j))));
        }
        return;
    }
    row_norm(xb, lid, ob, rc);
}

// The norms' row (LAYER_NORM, RMS_NORM, L2_NORM): (x − mean) / √(mean((x − mean)²) + eps), mean 0 for RMS_NORM;
// x / max(√Σx², eps) for L2_NORM; through the epilogue into the output from `ob`.
fn row_norm(xb: u32, lid: u32, ob: u32, rc: vec4<u32>) {
    let N = P.n;
    var mean = 0.0;
    if (OP == LAYER_NORM) {
        var s = 0.0;
        for (var j = lid; j < N; j = j + WG) {
            s = s + load_x(xb, j);
        }
        mean = div_rn(row_sum(s, lid), f32(N));
    }
    var q = 0.0;
    for (var j = lid; j < N; j = j + WG) {
        let d = load_x(xb, j) - mean;
        q = q + d * d;
    }
    let total = row_sum(q, lid);
    var inv = inverseSqrt(div_rn(total, f32(N)) + P.eps);
    if (OP == L2_NORM) {
        inv = 1.0 / max(sqrt(total), P.eps);
    }
    for (var j = lid; j < N; j = j + WG) {
        st_out(ob + j, {{OUT_C}}(epilogue((load_x(xb, j) - mean) * inv, vec4<u32>(rc.xyz, j))));
    }
}
