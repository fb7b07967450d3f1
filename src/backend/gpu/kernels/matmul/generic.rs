//! The generic matmul kernel (`matmul.wgsl`): any strides, 64×64 outputs a workgroup.

use super::common::{batch_lets, bindings, epi_suffix, epilogue, MatmulParams, BATCH};
use crate::backend::gpu::kernel::{Binding, Family, KernelKey, MatmulKernel, SplitRule};
use crate::backend::gpu::params::{ParamsBlock, ParamsLayout};
use crate::backend::gpu::wgsl::template::render;
use crate::compile::ir::Expr;

const GENERIC: &str = include_str!("matmul.wgsl");

/// `matmul.wgsl`, with an optional epilogue over `acc` and operands x0.. (bindings 4..).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MatMul {
    pub epi: Option<Expr>,
}

impl Family for MatMul {
    fn name(&self) -> String {
        format!("matmul{}", epi_suffix(&self.epi))
    }

    fn params(&self) -> ParamsLayout {
        MatmulParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        bindings(key, ["c_out", "a_in"], false, false)
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        let subs = [("BINDINGS", bindings), ("EPILOGUE", epilogue(key, self.epi.as_ref())), ("BATCH_LETS", batch_lets().into())];
        render(GENERIC, &subs) + BATCH
    }

    fn as_matmul(&self) -> Option<&dyn MatmulKernel> {
        Some(self)
    }

    fn split(&self) -> SplitRule {
        SplitRule::RowsOrColumns
    }
}

impl MatmulKernel for MatMul {
    fn tile(&self) -> (u64, u64) {
        (64, 64)
    }
}
