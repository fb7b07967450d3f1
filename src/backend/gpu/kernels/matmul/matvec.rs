//! The mat-vec kernels (`matvec.wgsl` with a reduction from `matvec_reduce_*.wgsl`, or `matvec_serial.wgsl`):
//! one-row A with K contiguous.

use super::common::{batch_lets, bindings, epi_suffix, MatmulParams, BATCH};
use crate::backend::gpu::kernels::elementwise::epilogue_fn;
use crate::backend::gpu::kernel::{Binding, Family, KernelKey, MatVecReduce, MatmulKernel, SplitRule};
use crate::backend::gpu::params::{ParamsBlock, ParamsLayout};
use crate::backend::gpu::wgsl::template::render;
use crate::compile::ir::Expr;

const MATVEC: &str = include_str!("matvec.wgsl");
const MATVEC_SERIAL: &str = include_str!("matvec_serial.wgsl");
const REDUCE_SUBGROUPS: &str = include_str!("matvec_reduce_subgroups.wgsl");
const REDUCE_SHARED: &str = include_str!("matvec_reduce_shared.wgsl");

/// `matvec.wgsl` (`matvec_serial.wgsl` for [`MatVecReduce::Serial`]): B's contiguous axis N (`b_ncontig`) or K,
/// how partial sums meet, an optional epilogue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MatVec {
    pub b_ncontig: bool,
    pub reduce: MatVecReduce,
    pub epi: Option<Expr>,
    /// A dual matmul (B K-contiguous only): a second weight `b2_in` (binding 4) summed alongside into `acc2`.
    pub dual: bool,
    /// x normed on load (B K-contiguous only): `rms_norm(x) · w` multiplied (see [`NormIn`]).
    ///
    /// [`NormIn`]: crate::compile::ir::NormIn
    pub norm: Option<MatVecNorm>,
}

/// A mat-vec's RMS norm of x on load: its epsilon (the f32's bits) and whether a weight `nw_in` (the last binding,
/// its offset in the epilogue offsets' slot after the epilogue's operands) multiplies the normed x.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MatVecNorm {
    pub eps_bits: u32,
    pub weight: bool,
}

/// The norm's pieces of `matvec.wgsl` (`serial` false) or `matvec_serial.wgsl`, all empty without a norm: x's
/// sum of squares (the workgroup's, or each invocation's own in the serial kernel), the weight's product on each
/// load of x, and the sums (the dual's too) scaled by `1 / √(mean(x²) + eps)` before their reduction and
/// epilogue. `slot`: the weight offset's index in `P.epi_offsets`.
fn norm_subs(norm: Option<MatVecNorm>, serial: bool, dual: bool, slot: usize) -> Vec<(&'static str, String)> {
    let Some(nm) = norm else {
        let keys = ["NORM_DECL", "NORM_PRE", "NORM_W", "NORM_SCALE", "NORM_RAW", "NORM_X0", "NORM_X1", "NORM_MUL"];
        return keys.into_iter().map(|k| (k, String::new())).collect();
    };
    let eps = f32::from_bits(nm.eps_bits);
    let off = format!("P.epi_offsets[{}].{}", slot / 4, ["x", "y", "z", "w"][slot % 4]);
    let base = if nm.weight { format!("\n        let nw_base = {off};") } else { String::new() };
    let times_w = |k: &str| if nm.weight { format!(" * ld4_nw_in(nw_base + {k} * 4u)") } else { String::new() };
    let mut decl = format!("const NORM_EPS: f32 = {eps:?};\n");
    if serial {
        let x = |i: u32, k: &str| {
            format!("\n            ss = fma(x{i}r, x{i}r, ss);\n            let x{i} = x{i}r{};", times_w(k))
        };
        let dual_scale = if dual { "\n        acc2 = acc2 * inv;" } else { "" };
        let scale = format!(
            "\n        let inv = inverseSqrt(div_rn((ss.x + ss.y) + (ss.z + ss.w), f32(K)) + NORM_EPS);{dual_scale}"
        );
        return vec![
            ("NORM_DECL", decl),
            ("NORM_PRE", format!("{base}\n        var ss = vec4<f32>(0.0);")),
            ("NORM_W", String::new()),
            ("NORM_SCALE", scale),
            ("NORM_RAW", "r".into()),
            ("NORM_X0", x(0, "k4")),
            ("NORM_X1", x(1, "(k4 + 1u)")),
            ("NORM_MUL", " * inv".into()),
        ];
    }
    decl.push_str(concat!(
        "var<workgroup> norm_part: array<f32, 256>;\n",
        "// 1 / √(mean(x²) + eps) of the row at x_base: each invocation sums a strided share, the workgroup the shares\n",
        "fn norm_inv(x_base: u32, K4: u32, lid: u32) -> f32 {\n",
        "    var ss = 0.0;\n",
        "    for (var k4 = lid; k4 < K4; k4 = k4 + 256u) {\n",
        "        let v = ld4_x_in((x_base + k4) * 4u);\n",
        "        ss = fma(v.x, v.x, fma(v.y, v.y, fma(v.z, v.z, fma(v.w, v.w, ss))));\n",
        "    }\n",
        "    norm_part[lid] = ss;\n",
        "    workgroupBarrier();\n",
        "    for (var h = 128u; h > 0u; h = h >> 1u) {\n",
        "        if (lid < h) {\n",
        "            norm_part[lid] = norm_part[lid] + norm_part[lid + h];\n",
        "        }\n",
        "        workgroupBarrier();\n",
        "    }\n",
        "    return inverseSqrt(div_rn(norm_part[0], f32(K4 * 4u)) + NORM_EPS);\n",
        "}\n",
    ));
    let dual_scale = if dual { "\n        s2 = s2 * inv;" } else { "" };
    vec![
        ("NORM_DECL", decl),
        ("NORM_PRE", format!("\n        let inv = norm_inv(x_base, K4, lid);{base}")),
        ("NORM_W", times_w("k4")),
        ("NORM_SCALE", format!("\n        s = s * inv;{dual_scale}")),
        ("NORM_RAW", String::new()),
        ("NORM_X0", String::new()),
        ("NORM_X1", String::new()),
        ("NORM_MUL", String::new()),
    ]
}

/// The dual variant's pieces of `matvec.wgsl` (`serial` false) or `matvec_serial.wgsl`: the second weight's start,
/// its sums beside the first's (the same loads of x) and their reduction into `acc2`; all empty unless `dual`.
fn dual_subs(dual: bool, serial: bool) -> Vec<(&'static str, String)> {
    let base = "\n            let w2_base = (b_base - P.b_offset + P.b2_offset + n * sb.w) / 4u;";
    let pieces: Vec<(&str, String)> = if serial {
        vec![
            ("DUAL_INIT", format!("{base}\n        var t0 = vec4<f32>(0.0);\n        var t1 = vec4<f32>(0.0);")),
            (
                "DUAL_STEP",
                "\n            t0 = fma(x0, ld4_b2_in((w2_base + k4) * 4u), t0);\n            \
                 t1 = fma(x1, ld4_b2_in((w2_base + k4 + 1u) * 4u), t1);"
                    .into(),
            ),
            ("DUAL_TAIL", "\n            t0 = fma(x0, ld4_b2_in((w2_base + k4) * 4u), t0);".into()),
            ("DUAL_SUM", "\n        let t = t0 + t1;\n        acc2 = (t.x + t.y) + (t.z + t.w);".into()),
        ]
    } else {
        vec![
            ("DUAL_INIT", "\n        var s2 = vec4<f32>(0.0);".into()),
            ("DUAL_BASE", base.into()),
            ("DUAL_STEP", "\n                s2 = fma(xv, ld4_b2_in((w2_base + k4) * 4u), s2);".into()),
            // SUBGROUP_CALL: rendered after these
            ("DUAL_REDUCE", "\n        acc2 = reduce_second(s2.x + s2.y + s2.z + s2.w, lid, row{{SUBGROUP_CALL}});".into()),
        ]
    };
    let decl = ("DUAL_DECL", "var<private> acc2: f32;\n".to_string());
    std::iter::once(decl).chain(pieces).map(|(k, v)| (k, if dual { v } else { String::new() })).collect()
}

impl MatVec {
    /// Output columns one workgroup covers.
    pub(crate) fn columns(&self) -> u64 {
        match (self.reduce, self.b_ncontig) {
            (MatVecReduce::Serial, false) => 64,
            (MatVecReduce::Serial, true) => 256,
            (_, false) => 8,
            (_, true) => 64,
        }
    }

    /// The epilogue's operands: the inputs after A, B, a dual's B2 and before a norm's weight.
    fn epilogue_operands(&self, key: &KernelKey) -> usize {
        key.ins.len() - 2 - usize::from(self.dual) - usize::from(self.norm.is_some_and(|n| n.weight))
    }
}

impl Family for MatVec {
    fn name(&self) -> String {
        let r = match self.reduce {
            MatVecReduce::Subgroups => " subgroups",
            MatVecReduce::Shared => " shared",
            MatVecReduce::Serial => " serial",
        };
        let dual = if self.dual { " dual" } else { "" };
        let norm = if self.norm.is_some() { "rms_norm+" } else { "" };
        format!("{norm}matvec{r}{dual}{}", epi_suffix(&self.epi))
    }

    fn params(&self) -> ParamsLayout {
        MatmulParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        let mut b = bindings(key, ["y_out", "x_in"], false, true);
        if self.dual {
            // the second weight after the first; the epilogue's operands after it
            b[3] = Binding::input("b2_in", key.ins[2]).vec4(true);
            b.iter_mut().skip(4).enumerate().for_each(|(k, x)| *x = Binding::input(format!("e{k}"), key.ins[3 + k]));
        }
        if self.norm.is_some_and(|n| n.weight) {
            // the norm's weight last, after the epilogue's operands
            let last = b.len() - 1;
            b[last] = Binding::input("nw_in", key.ins[key.ins.len() - 1]).vec4(true);
        }
        b
    }


    fn enables(&self) -> &'static str {
        // browsers require the directive; naga (native) rejects it and gates subgroup ops by capability instead
        if cfg!(target_arch = "wasm32") && self.reduce == MatVecReduce::Subgroups {
            "enable subgroups;\n"
        } else {
            ""
        }
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        let operands = self.epilogue_operands(key);
        let epi = epilogue_fn(operands, self.epi.as_ref());
        let b_ncontig = self.b_ncontig.to_string();
        let serial = self.reduce == MatVecReduce::Serial;
        let mut dual = dual_subs(self.dual, serial);
        dual.extend(norm_subs(self.norm, serial, self.dual, operands));
        let (args, call, reduce) = match self.reduce {
            MatVecReduce::Serial => {
                let mut subs = vec![("BINDINGS", bindings), ("EPILOGUE", epi), ("B_NCONTIG", b_ncontig)];
                subs.extend(dual);
                subs.push(("BATCH_LETS", batch_lets().into()));
                return render(MATVEC_SERIAL, &subs) + BATCH;
            }
            MatVecReduce::Subgroups => {
                let args = ",\n        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_size) sg_size: u32";
                (args, ", sg_lane, sg_size", REDUCE_SUBGROUPS)
            }
            MatVecReduce::Shared => ("", ", 0u, 32u", REDUCE_SHARED),
        };
        let mut subs = vec![("BINDINGS", bindings), ("EPILOGUE", epi), ("B_NCONTIG", b_ncontig)];
        // the dual pieces first: DUAL_REDUCE holds SUBGROUP_CALL
        subs.extend(dual);
        subs.extend([("SUBGROUP_ARGS", args.into()), ("SUBGROUP_CALL", call.into())]);
        subs.push(("BATCH_LETS", batch_lets().into()));
        render(MATVEC, &subs) + "\n" + reduce + BATCH
    }

    fn as_matmul(&self) -> Option<&dyn MatmulKernel> {
        Some(self)
    }

    fn split(&self) -> SplitRule {
        SplitRule::Columns
    }
}

impl MatmulKernel for MatVec {
    fn tile(&self) -> (u64, u64) {
        (1, self.columns())
    }

    fn column_grid(&self, cols: u64, _whole: [u32; 3], max_groups: u32) -> crate::error::Result<[u32; 3]> {
        crate::backend::gpu::target::grid("matmul (mat-vec)", cols.div_ceil(self.columns()), max_groups)
    }
}
