// elementwise.wgsl — out[i] = EXPR(x0, x1, ...) for every element of a contiguous output (a chunk of it when the
// tensor is larger than one binding); operands are read through strides (0 on broadcast dims) and offsets.
// Bindings: 0 P (ElementwiseParams), 1 out, 2.. inputs in{k}; all storage is read_write so that one buffer may
// back several bindings.
// Dispatch: ceil(count / 256) workgroups of 256, split over x and y.
// Tokens: BINDINGS the storage bindings and their accessors, OUT_C the compute type of out, LOADS the operand
// loads, EXPR the expression. CPU reference: the op tables (src/ops) through src/backend/cpu/elementwise.rs.
{{BINDINGS}}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wg, nwg) * WG + lid;
    if (i >= P.count) {
        return;
    }
    let c = coords4(i + P.first, P.out_shape);
{{LOADS}}
    st_out(i + P.out_offset, {{OUT_C}}({{EXPR}}));
}
