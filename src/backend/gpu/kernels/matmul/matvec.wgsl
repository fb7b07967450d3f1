// matvec.wgsl — y[b, 0, n] = epilogue(sum_k x[b, 0, k] * B[b, k, n]) for one-row inputs (decode-style), f32
// accumulation, f16 or f32 storage; vec4 loads. Bandwidth-bound: every weight is read exactly once.
// Bindings: 0 P (MatmulParams, M = 1), 1 y (out), 2 x, 3 B (x and B as vec4 elements), 4.. epilogue operands (as
// in matmul.wgsl). Preconditions: x contiguous along K, K % 4 == 0, offsets and strides multiples of 4
// (src/backend/gpu/kernels/matmul/mod.rs).
// B_NCONTIG = false (B is a view of W[n, k], k contiguous): a workgroup of 256 handles 8 outputs, 32
//   invocations per output each reducing a strided share of K; partial sums meet through subgroupAdd where
//   the adapter has subgroups (the variant with `reduce_row` from matvec_reduce_subgroups.wgsl),
//   else through workgroup memory. Dispatch: ceil(N/8) workgroups.
// B_NCONTIG = true (W[k, n], n contiguous): a workgroup handles 64 outputs (16 invocations x vec4) and
//   splits K 16 ways; the 16 partial vec4 meet in workgroup memory. Dispatch: ceil(N/64) workgroups.
// Workgroups are split over x and y when there are more than the per-dimension limit; z is the batch.
// DUAL (B_NCONTIG = false only; binding 4 b2_in, the epilogue operands after it): a dual matmul's second product
//   x · B2 summed alongside (x read once), reduced the same way into acc2, which the epilogue reads.
// NORM (B_NCONTIG = false only): x is an RMS norm's input, normed on load: the workgroup first sums x² (norm_inv),
//   each x loaded is multiplied by the norm's weight (nw_in, the last binding) where it has one, and the sums
//   are scaled by 1 / √(mean(x²) + eps) before their reduction (the norm's one factor per row).
// CPU reference: src/backend/cpu/matmul.rs.
{{BINDINGS}}

{{EPILOGUE}}
{{DUAL_DECL}}{{NORM_DECL}}
const B_NCONTIG: bool = {{B_NCONTIG}};

var<workgroup> part: array<vec4<f32>, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32{{SUBGROUP_ARGS}}) {
{{BATCH_LETS}}
    let x_base = a_base / 4u;
    let group = wg.y * nwg.x + wg.x;
    let n0 = P.n0; // first output column of this chunk (a B larger than one binding), else 0
    let y_base = bz * P.ldc + n0;
    let K4 = K / 4u;
    if (!B_NCONTIG) {{{NORM_PRE}}
        let row = lid / 32u;
        let lane = lid % 32u;
        let n = group * 8u + row;
        var s = vec4<f32>(0.0);{{DUAL_INIT}}
        if (n < N) {
            let w_base = (b_base + n * sb.w) / 4u;{{DUAL_BASE}}
            for (var k4 = lane; k4 < K4; k4 = k4 + 32u) {
                let xv = ld4_x_in((x_base + k4) * 4u){{NORM_W}};
                s = fma(xv, ld4_b_in((w_base + k4) * 4u), s);{{DUAL_STEP}}
            }
        }{{NORM_SCALE}}{{DUAL_REDUCE}}
        reduce_row(s.x + s.y + s.z + s.w, lid, row, lane, n, N, y_base, b0, b1, n0{{SUBGROUP_CALL}});
        return;
    }
    let nq = lid % 16u;
    let slice = lid / 16u;
    let n = group * 64u + nq * 4u;
    var s = vec4<f32>(0.0);
    if (n < N) {
        for (var k4 = slice; k4 < K4; k4 = k4 + 16u) {
            let xv = ld4_x_in((x_base + k4) * 4u);
            let k = k4 * 4u;
            s = fma(vec4<f32>(xv.x), ld4_b_in(b_base + k * sb.z + n), s);
            s = fma(vec4<f32>(xv.y), ld4_b_in(b_base + (k + 1u) * sb.z + n), s);
            s = fma(vec4<f32>(xv.z), ld4_b_in(b_base + (k + 2u) * sb.z + n), s);
            s = fma(vec4<f32>(xv.w), ld4_b_in(b_base + (k + 3u) * sb.z + n), s);
        }
    }
    part[lid] = s;
    workgroupBarrier();
    if (slice == 0u && n < N) {
        var t = vec4<f32>(0.0);
        for (var j = 0u; j < 16u; j = j + 1u) {
            t = t + part[j * 16u + nq];
        }
        for (var j = 0u; j < 4u; j = j + 1u) {
            if (n + j < N) {
                st_y_out(y_base + n + j, epilogue(t[j], vec4<u32>(b0, b1, 0u, n0 + n + j)));
            }
        }
    }
}
