// matvec.wgsl — y[b, 0, n] = sum_k x[b, 0, k] * B[b, k, n] for one-row inputs (decode-style), f32
// accumulation, f16 or f32 storage; vec4 loads. Bandwidth-bound: every weight is read exactly once.
// Bindings: 0 Params, 1 y (out), 2 x, 3 B (storage, read_write; x and B as vec4 elements), 4.. epilogue
// operands (as in matmul.wgsl: y = epilogue(acc, (b0, b1, 0, n))).
// Params: as matmul_tiled.wgsl (v[0] = (M = 1, N, K, batch dim 1 size), v[1] x strides, v[2] B strides,
// v[3] = (x offset, B offset)). Preconditions: x contiguous along K, K % 4 == 0, offsets and strides
// multiples of 4 (checked in src/backend/gpu/matmul.rs).
// B_NCONTIG = false (B is a view of W[n, k], k contiguous): a workgroup of 256 handles 8 outputs, 32
//   invocations per output each reducing a strided share of K; partial sums meet through subgroupAdd where
//   the adapter has subgroups (SUBGROUPS), else through workgroup memory. Dispatch: ceil(N/8) workgroups.
// B_NCONTIG = true (W[k, n], n contiguous): a workgroup handles 64 outputs (16 invocations x vec4) and
//   splits K 16 ways; the 16 partial vec4 meet in workgroup memory. Dispatch: ceil(N/64) workgroups.
// Workgroups are split over x and y when there are more than the per-dimension limit; z is the batch.
{{BINDINGS}}

{{EPILOGUE}}

const B_NCONTIG: bool = {{B_NCONTIG}};
const SUBGROUPS: bool = {{SUBGROUPS}};

var<workgroup> part: array<vec4<f32>, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32{{SUBGROUP_ARGS}}) {
{{PROLOGUE}}
    let x_base = (P.v[3].x + b0 * sa.x + b1 * sa.y) / 4u;
    let b_base = P.v[3].y + b0 * sb.x + b1 * sb.y;
    let group = wg.y * nwg.x + wg.x;
    let n0 = P.v[3].z; // first output column of this chunk (a B larger than one binding), else 0
    let y_base = wg.z * P.v[3].w + n0;
    let K4 = K / 4u;
    if (!B_NCONTIG) {
        let row = lid / 32u;
        let lane = lid % 32u;
        let n = group * 8u + row;
        var s = vec4<f32>(0.0);
        if (n < N) {
            let w_base = (b_base + n * sb.w) / 4u;
            for (var k4 = lane; k4 < K4; k4 = k4 + 32u) {
                s = fma(ld4_x_in((x_base + k4) * 4u), ld4_b_in((w_base + k4) * 4u), s);
            }
        }
        var total = s.x + s.y + s.z + s.w;
        {{REDUCE_ROW}}
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
