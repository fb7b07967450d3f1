//! WGSL of the generic, tiled and mat-vec matmul kernels, and the epilogue function every matmul kernel calls.

use super::template::render;
use crate::backend::gpu::kernel::{KernelKey, KernelKind, MatVecReduce};

const GENERIC: &str = include_str!("../../../../shaders/matmul.wgsl");
const TILED: &str = include_str!("../../../../shaders/matmul_tiled.wgsl");
const STORE_VEC4: &str = include_str!("../../../../shaders/matmul_store_vec4.wgsl");
const STORE_SCALAR: &str = include_str!("../../../../shaders/matmul_store_scalar.wgsl");
const MATVEC: &str = include_str!("../../../../shaders/matvec.wgsl");
const MATVEC_SERIAL: &str = include_str!("../../../../shaders/matvec_serial.wgsl");
const REDUCE_SUBGROUPS: &str = include_str!("../../../../shaders/matvec_reduce_subgroups.wgsl");
const REDUCE_SHARED: &str = include_str!("../../../../shaders/matvec_reduce_shared.wgsl");

/// The `epilogue(acc, coords)` function of a matmul variant: the expression over `acc` and the extra operands
/// (`ins[2..]`), each read at the output element's coordinates (b0, b1, m, n) through its strides and offset in
/// the parameters. The identity when nothing was fused.
pub(crate) fn epilogue(key: &KernelKey, epi: Option<&str>) -> String {
    let Some(expr) = epi else {
        return "fn epilogue(acc: f32, c: vec4<u32>) -> f32 {\n    return acc;\n}".into();
    };
    let loads: String = (0..key.ins.len() - 2)
        .map(|k| {
            let off = format!("P.epi_offsets[{}].{}", k / 4, ["x", "y", "z", "w"][k % 4]);
            format!("    let x{k} = f32(ld_e{k}(at(c, P.epi_strides[{k}], {off})));\n")
        })
        .collect();
    format!("fn epilogue(acc: f32, c: vec4<u32>) -> f32 {{\n{loads}    return {expr};\n}}")
}

/// One K step of the tiled kernel's register block, unrolled: RM vec4 of A (rows ty*4 + 64r ..+3) and RN vec4
/// of B (columns tx*4 + 64s ..+3) from workgroup memory, then 16·RM·RN vec4 FMAs into `acc`, every index a
/// constant.
fn tiled_product(rm: u32, rn: u32) -> String {
    let mut w = String::new();
    for r in 0..rm {
        w += &format!("            let av{r} = a_s[ka + {}u];\n", r * 16);
    }
    for s in 0..rn {
        w += &format!("            let bv{s} = b_s[kb + {}u];\n", s * 16);
    }
    for r in 0..rm {
        for (i, c) in ["x", "y", "z", "w"].iter().enumerate() {
            for s in 0..rn {
                let at = (r * 4 + i as u32) * rn + s;
                w += &format!("            acc[{at}] = fma(vec4<f32>(av{r}.{c}), bv{s}, acc[{at}]);\n");
            }
        }
    }
    w
}

/// The tiled kernel's store of its register block, unrolled like [`tiled_product`]: row ty*4 + i + 64r,
/// columns tx*4 + 64s ..+3 from `acc[(r*4 + i)*RN + s]` through `store_tile`.
fn tiled_store(rm: u32, rn: u32) -> String {
    let mut w = String::new();
    for r in 0..rm {
        for i in 0..4 {
            w += &format!("    let gm{r}{i} = row0 + {}u + ty * 4u;\n", r * 64 + i);
            w += &format!("    if (gm{r}{i} < M) {{\n");
            for s in 0..rn {
                let at = (r * 4 + i) * rn + s;
                w += &format!(
                    "        {{\n            let gn = col0 + {}u + tx * 4u;\n            let gm = gm{r}{i};\n            \
                     store_tile(c_base + (m0 + gm) * ldc + n0 + gn, gn, N, vec4<u32>(b0, b1, m0 + gm, n0 + gn), \
                     acc[{at}]);\n        }}\n",
                    s * 64
                );
            }
            w += "    }\n";
        }
    }
    w
}

/// The generic, tiled or mat-vec kernel of `key`.
pub(super) fn wgsl(key: &KernelKey, bindings: String) -> String {
    match key.kind {
        KernelKind::MatMul { ref epi } => {
            render(GENERIC, &[("BINDINGS", bindings), ("EPILOGUE", epilogue(key, epi.as_deref()))])
        }
        KernelKind::MatMulTiled { cfg, a_kcontig, b_ncontig, out_vec4, ref epi } => {
            let text = render(
                TILED,
                &[
                    ("BINDINGS", bindings),
                    ("EPILOGUE", epilogue(key, epi.as_deref())),
                    ("RM", cfg.rm.to_string()),
                    ("RN", cfg.rn.to_string()),
                    ("BK", cfg.bk.to_string()),
                    ("A_KCONTIG", a_kcontig.to_string()),
                    ("B_NCONTIG", b_ncontig.to_string()),
                    ("A_SHARED", (cfg.bk * 16 * cfg.rm).to_string()),
                    ("PRODUCT", tiled_product(cfg.rm, cfg.rn)),
                    ("STORE", tiled_store(cfg.rm, cfg.rn)),
                    ("B_SHARED", (cfg.bk * 16 * cfg.rn).to_string()),
                ],
            );
            text + "\n" + if out_vec4 { STORE_VEC4 } else { STORE_SCALAR }
        }
        KernelKind::MatVec { b_ncontig, reduce, ref epi } => {
            let (args, call, reduce) = match reduce {
                MatVecReduce::Serial => {
                    let epi = epilogue(key, epi.as_deref());
                    let vars = [("BINDINGS", bindings), ("EPILOGUE", epi), ("B_NCONTIG", b_ncontig.to_string())];
                    return render(MATVEC_SERIAL, &vars);
                }
                MatVecReduce::Subgroups => {
                    let args = ",\n        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_size) sg_size: u32";
                    (args, ", sg_lane, sg_size", REDUCE_SUBGROUPS)
                }
                MatVecReduce::Shared => ("", ", 0u, 32u", REDUCE_SHARED),
            };
            let text = render(
                MATVEC,
                &[
                    ("BINDINGS", bindings),
                    ("EPILOGUE", epilogue(key, epi.as_deref())),
                    ("B_NCONTIG", b_ncontig.to_string()),
                    ("SUBGROUP_ARGS", args.into()),
                    ("SUBGROUP_CALL", call.into()),
                ],
            );
            text + "\n" + reduce
        }
        _ => unreachable!("matmul::wgsl for {:?}", key.kind),
    }
}
