//! The mat-vec kernels (`matvec.wgsl` with a reduction from `matvec_reduce_*.wgsl`, or `matvec_serial.wgsl`):
//! one-row A with K contiguous.

use super::common::{bindings, epi_suffix, epilogue, MatmulParams, BATCH};
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
        format!("matvec{r}{}", epi_suffix(&self.epi))
    }

    fn params(&self) -> ParamsLayout {
        MatmulParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        bindings(key, ["y_out", "x_in"], false, true)
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
        let epi = epilogue(key, self.epi.as_ref());
        let b_ncontig = self.b_ncontig.to_string();
        let (args, call, reduce) = match self.reduce {
            MatVecReduce::Serial => {
                let subs = [("BINDINGS", bindings), ("EPILOGUE", epi), ("B_NCONTIG", b_ncontig)];
                return render(MATVEC_SERIAL, &subs) + BATCH;
            }
            MatVecReduce::Subgroups => {
                let args = ",\n        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_size) sg_size: u32";
                (args, ", sg_lane, sg_size", REDUCE_SUBGROUPS)
            }
            MatVecReduce::Shared => ("", ", 0u, 32u", REDUCE_SHARED),
        };
        let subs = [
            ("BINDINGS", bindings),
            ("EPILOGUE", epi),
            ("B_NCONTIG", b_ncontig),
            ("SUBGROUP_ARGS", args.into()),
            ("SUBGROUP_CALL", call.into()),
        ];
        render(MATVEC, &subs) + "\n" + reduce + BATCH
    }

    fn is_matmul(&self) -> bool {
        true
    }

    fn split(&self) -> SplitRule {
        SplitRule::Columns
    }
}
