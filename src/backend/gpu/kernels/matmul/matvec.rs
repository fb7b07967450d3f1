//! The mat-vec kernels (`matvec.wgsl` with a reduction from `matvec_reduce_*.wgsl`, or `matvec_serial.wgsl`):
//! one-row A with K contiguous.

use super::common::{bindings, epi_suffix, MatmulParams, BATCH};
use crate::backend::gpu::kernels::elementwise::epilogue_fn;
use crate::backend::gpu::kernel::{Binding, Family, KernelKey, MatVecReduce, SplitRule};
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
}

impl Family for MatVec {
    fn name(&self) -> String {
        let r = match self.reduce {
            MatVecReduce::Subgroups => " subgroups",
            MatVecReduce::Shared => " shared",
            MatVecReduce::Serial => " serial",
        };
        let dual = if self.dual { " dual" } else { "" };
        format!("matvec{r}{dual}{}", epi_suffix(&self.epi))
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
        let epi = epilogue_fn(key.ins.len() - 2 - usize::from(self.dual), self.epi.as_ref());
        let b_ncontig = self.b_ncontig.to_string();
        let serial = self.reduce == MatVecReduce::Serial;
        let dual = dual_subs(self.dual, serial);
        let (args, call, reduce) = match self.reduce {
            MatVecReduce::Serial => {
                let mut subs = vec![("BINDINGS", bindings), ("EPILOGUE", epi), ("B_NCONTIG", b_ncontig)];
                subs.extend(dual);
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
        render(MATVEC, &subs) + "\n" + reduce + BATCH
    }

    fn is_matmul(&self) -> bool {
        true
    }

    fn split(&self) -> SplitRule {
        SplitRule::Columns
    }
}
