// rope_kv_writes.wgsl — a layer's queries, keys and values in one dispatch: invocation i < q.count computes
// out[i] = rope(src0, pos)[i] (rope.wgsl's element), the next k.count write kc[idx[r], col] = rope(src3, pos)[r, col]
// rounded to the keys' rope dtype ({{K_ROUND}}; rope_set_rows.wgsl), the next v_count write
// vc[idx[r], col] = src4[r, col] (set_rows.wgsl); rows as target_row (set_rows_target.wgsl) picks them.
// Bindings: 0 P (RopeKvWritesParams), 1 out (the queries' rope), 2 kc and 3 vc (the caches: states), 4 src0 (the
// queries, any strides), 5 src1 (positions, i32), 6 src2 (the i32 row indices), 7 src3 (the keys, any strides),
// 8 src4 (the values' rows), 9 src5 (the frequency factors, f32 [n_dims / 2], where the variant has them).
// Dispatch: ceil((q.count + k.count + v_count) / 256) workgroups of 256, split over x and y. CPU reference: the
// unfused steps (src/backend/cpu/attention.rs, gather.rs).
{{BINDINGS}}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = linear_group(wg, nwg) * WG + lid;
    if (i < P.q.count) {
        st_out(i, {{OUT_C}}(rope_q(i, P.q)));
        return;
    }
    let j = i - P.q.count;
    if (j < P.k.count) {
        let row = target_row(j / P.k_dim);
        if (row >= 0) {
            let v = rope_k(j, P.k);
            st_kc(P.k_dst_offset + u32(row) * P.k_dst_row_stride + j % P.k_dim, {{KC_C}}({{K_ROUND}}));
        }
        return;
    }
    let l = j - P.k.count;
    if (l < P.v_count) {
        let r = l / P.v_dim;
        let col = l % P.v_dim;
        let row = target_row(r);
        if (row >= 0) {
            let v = ld_src4(P.v_src_offset + r * P.v_src_row_stride + col * P.v_src_col_stride);
            st_vc(P.v_dst_offset + u32(row) * P.v_dst_row_stride + col, {{VC_C}}(v));
        }
    }
}
