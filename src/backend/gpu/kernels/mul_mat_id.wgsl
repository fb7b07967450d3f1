// mul_mat_id.wgsl — out[t, j, n] = Σ_k a[t, j mod A, k] · w[ids[t, j], n, k]: a workgroup computes 8 columns of one
// (token, slot) pair, 32 invocations a column striding K, their sums met in workgroup memory; an id outside
// 0..experts writes zeros.
// Bindings: 0 P (MulMatIdParams), 1 out (f32, contiguous [T, U, N]), 2 src0 (a, any strides), 3 src1 (w, row-major
// [E, N, K]: a storage format is decoded by its ld_), 4 src2 (the i32 ids, any strides).
// Dispatch: col_groups · T · U workgroups of 256 (split over x and y). CPU reference: src/backend/cpu/experts.rs.
{{BINDINGS}}

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = linear_group(wg, nwg);
    let pair = g / P.col_groups;
    if (pair >= P.pairs) {
        return; // uniform per workgroup
    }
    let col = (g % P.col_groups) * 8u + lid / 32u;
    let lane = lid % 32u;
    let tok = pair / P.u;
    let slot = pair % P.u;
    let e = i32(ld_src2(P.ids_offset + tok * P.ids_strides.x + slot * P.ids_strides.y));
    let valid = e >= 0 && u32(e) < P.experts && col < P.n;
    var s = 0.0;
    if (valid) {
        let ab = P.a_offset + tok * P.a_strides.x + (slot % P.a_rows) * P.a_strides.y;
        let wb = P.w_offset + (u32(e) * P.n + col) * P.k;
        for (var k = lane; k < P.k; k = k + 32u) {
            s = s + f32(ld_src0(ab + k * P.a_strides.z)) * f32(ld_src1(wb + k));
        }
    }
    partial[lid] = s;
    workgroupBarrier();
    for (var h = 16u; h > 0u; h = h >> 1u) {
        if (lane < h) {
            partial[lid] = partial[lid] + partial[lid + h];
        }
        workgroupBarrier();
    }
    if (lane == 0u && col < P.n) {
        st_out(pair * P.n + col, select(0.0, partial[lid], valid));
    }
}
