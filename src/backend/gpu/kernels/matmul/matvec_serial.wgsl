// matvec_serial.wgsl — matvec.wgsl's y[b, 0, n] = epilogue(sum_k x[b, 0, k] * B[b, k, n]) with one invocation
// summing all of K for its outputs: no partial sums, no workgroup memory, no barriers. For adapters that run
// invocations on CPU cores (SwiftShader, llvmpipe), where every workgroup barrier switches each SIMD group of the
// workgroup out and back in (SwiftShader: about 0.35 ms per workgroup of 256; the reduction variants' 25k
// workgroups a SmolLM2 token cost seconds there), while a CPU's caches serve each invocation's own row.
// Bindings, parameters and preconditions as in matvec.wgsl (its DUAL too: acc2 summed as the first product is;
// its NORM with each invocation summing x² itself, as it reads all of x).
// B_NCONTIG = false (W[n, k], k contiguous): an invocation per output, 64 outputs a workgroup, two vec4
//   accumulators. Dispatch: ceil(N/64) workgroups.
// B_NCONTIG = true (W[k, n], n contiguous): an invocation per 4 outputs (a vec4 of each row of B), 256 outputs a
//   workgroup. Dispatch: ceil(N/256) workgroups.
// CPU reference: src/backend/cpu/matmul.rs.
{{BINDINGS}}

{{EPILOGUE}}
{{DUAL_DECL}}{{NORM_DECL}}
const B_NCONTIG: bool = {{B_NCONTIG}};

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
{{BATCH_LETS}}
    let x_base = a_base / 4u;
    let group = wg.y * nwg.x + wg.x;
    let n0 = P.n0; // first output column of this chunk (a B larger than one binding), else 0
    let y_base = bz * P.ldc + n0;
    let K4 = K / 4u;
    if (!B_NCONTIG) {
        let n = group * 64u + lid;
        if (n >= N) {
            return;
        }
        let w_base = (b_base + n * sb.w) / 4u;
        var s0 = vec4<f32>(0.0);
        var s1 = vec4<f32>(0.0);{{DUAL_INIT}}{{NORM_PRE}}
        var k4 = 0u;
        for (; k4 + 1u < K4; k4 = k4 + 2u) {
            let x0{{NORM_RAW}} = ld4_x_in((x_base + k4) * 4u);
            let x1{{NORM_RAW}} = ld4_x_in((x_base + k4 + 1u) * 4u);{{NORM_X0}}{{NORM_X1}}
            s0 = fma(x0, ld4_b_in((w_base + k4) * 4u), s0);
            s1 = fma(x1, ld4_b_in((w_base + k4 + 1u) * 4u), s1);{{DUAL_STEP}}
        }
        if (k4 < K4) {
            let x0{{NORM_RAW}} = ld4_x_in((x_base + k4) * 4u);{{NORM_X0}}
            s0 = fma(x0, ld4_b_in((w_base + k4) * 4u), s0);{{DUAL_TAIL}}
        }
        let s = s0 + s1;{{DUAL_SUM}}{{NORM_SCALE}}
        st_y_out(y_base + n, epilogue(((s.x + s.y) + (s.z + s.w)){{NORM_MUL}}, vec4<u32>(b0, b1, 0u, n0 + n)));
        return;
    }
    let n = (group * 64u + lid) * 4u;
    if (n >= N) {
        return;
    }
    var s = vec4<f32>(0.0);
    for (var k4 = 0u; k4 < K4; k4 = k4 + 1u) {
        let xv = ld4_x_in((x_base + k4) * 4u);
        let k = k4 * 4u;
        s = fma(vec4<f32>(xv.x), ld4_b_in(b_base + k * sb.z + n), s);
        s = fma(vec4<f32>(xv.y), ld4_b_in(b_base + (k + 1u) * sb.z + n), s);
        s = fma(vec4<f32>(xv.z), ld4_b_in(b_base + (k + 2u) * sb.z + n), s);
        s = fma(vec4<f32>(xv.w), ld4_b_in(b_base + (k + 3u) * sb.z + n), s);
    }
    for (var j = 0u; j < 4u; j = j + 1u) {
        if (n + j < N) {
            st_y_out(y_base + n + j, epilogue(s[j], vec4<u32>(b0, b1, 0u, n0 + n + j)));
        }
    }
}
