// elementwise_vec4.wgsl — elementwise.wgsl four outputs an invocation: out[i..i+4] = EXPR(x0, x1, ...) for the
// 4 consecutive elements from i (a multiple of 4) of a contiguous output whose last axis is a multiple of 4, so
// the four share every coordinate but the last. Each operand is read once for the four (QUAD_LOADS): as the
// output is laid out (4 elements from its flat index: no coordinates), 4 elements along its contiguous last axis
// at the first output's coordinates, or one element broadcast along the last axis. No operand is i32.
// Bindings: 0 P (ElementwiseParams, count a multiple of 4), 1 out (vec4), 2.. inputs in{k} (vec4 unless
// broadcast along the last axis).
// Dispatch: ceil(count / 1024) workgroups of 256, split over x and y.
// Tokens: BINDINGS, ARGS the expression's parameters (x0: f32, ...), EXPR the expression, COORDS the first
// output's coordinates where an operand needs them, QUAD_LOADS the operand loads (v0, v1, ...), CALLS the four
// evaluations. CPU reference: the op tables (src/ops) through src/backend/cpu/elementwise.rs.
{{BINDINGS}}
fn expr({{ARGS}}) -> f32 {
    return {{EXPR}};
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let q = linear_group(wg, nwg) * WG + lid;
    if (q >= P.count / 4u) {
        return;
    }
    let i = q * 4u;{{COORDS}}
{{QUAD_LOADS}}
    st4_out(i + P.out_offset, vec4<f32>({{CALLS}}));
}
