// elementwise.wgsl — out[i] = EXPR(x0, x1, ...) for every element of a contiguous output, operands read through
// strides (0 on broadcast dims) and element offsets.
// Bindings: 0 Params (uniform), 1 out (storage), 2.. inputs in{k} (storage); all storage is read_write so that
// one buffer may back several bindings.
// Params: v[0].x = element count, v[0].y = index of the first element (a chunk of a larger tensor), v[0].z =
//         output offset in elements (within the output binding); v[1] = output shape (rank 4, left-padded with 1);
//         v[2+2k] = strides of input k (elements); v[3+2k].x = offset of input k (elements).
// Dispatch: ceil(count / 256) workgroups of 256, split over x and y.
// Tokens: OUT_T storage type of out, C compute type, DECLS input bindings, LOADS operand loads,
// EXPR the expression. CPU reference: backend/cpu.rs (Unary, Binary).
{{BINDINGS}}
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wg, nwg) * WG + lid;
    if (i >= P.v[0].x) {
        return;
    }
    let c = coords4(i + P.v[0].y, P.v[1]);
{{LOADS}}
    st_out(i + P.v[0].z, {{OUT_C}}({{EXPR}}));
}
