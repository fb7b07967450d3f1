//! WGSL generation (text): a [`KernelKey`] becomes the complete source of its variant — the enables it needs, its
//! family's `struct Params` (generated from `params.rs`), `shaders/common.wgsl`, the storage bindings and their
//! accessors ([`storage`]), and the family's template from `shaders/` with its few tokens filled in, one module
//! per family.

pub(crate) mod attention;
pub(crate) mod coop;
pub(crate) mod elementwise;
mod gather;
pub(crate) mod matmul;
mod rows;
mod storage;
pub(crate) mod template;

use super::kernel::{KernelKey, KernelKind, MatVecReduce};
use super::params::{
    AttentionParams, ConcatParams, CopyParams, ElementwiseParams, GetRowsParams, MatmulParams, RopeParams, RowsParams,
    SetRowsParams,
};

const COMMON: &str = include_str!("../../../../shaders/common.wgsl");
/// Helper functions appended to a kernel only where its body calls them: the f16 rounding of fused f16
/// intermediates, and the correctly rounded division.
const HELPERS: [(&str, &str); 2] = [
    ("f16_round(", include_str!("../../../../shaders/f16_round.wgsl")),
    ("div_rn(", include_str!("../../../../shaders/div_rn.wgsl")),
];

/// The family's `struct Params` and its uniform binding.
fn params_decl(kind: &KernelKind) -> String {
    let fields = match kind {
        KernelKind::Elementwise { .. } => ElementwiseParams::wgsl_fields(),
        KernelKind::MatMul { .. }
        | KernelKind::MatMulTiled { .. }
        | KernelKind::MatMulCoop { .. }
        | KernelKind::MatVec { .. } => MatmulParams::wgsl_fields(),
        KernelKind::Rows { .. } => RowsParams::wgsl_fields(),
        KernelKind::GetRows => GetRowsParams::wgsl_fields(),
        KernelKind::Concat => ConcatParams::wgsl_fields(),
        KernelKind::SetRows => SetRowsParams::wgsl_fields(),
        KernelKind::CopyInto => CopyParams::wgsl_fields(),
        KernelKind::Rope => RopeParams::wgsl_fields(),
        KernelKind::Attention { .. } | KernelKind::AttentionCombine { .. } => AttentionParams::wgsl_fields(),
    };
    format!("{fields}@group(0) @binding(0) var<uniform> P: Params;\n")
}

impl KernelKey {
    /// The complete WGSL source of this variant.
    pub(crate) fn wgsl(&self) -> String {
        let mut enable = String::new();
        if self.uses_f16() {
            enable.push_str("enable f16;\n");
        }
        // Browsers require the directive; naga (native) rejects it and gates subgroup ops by capability instead.
        if cfg!(target_arch = "wasm32")
            && matches!(self.kind, KernelKind::MatVec { reduce: MatVecReduce::Subgroups, .. })
        {
            enable.push_str("enable subgroups;\n");
        }
        if matches!(self.kind, KernelKind::MatMulCoop { emulated: false, .. }) {
            enable.push_str("enable wgpu_cooperative_matrix;\n");
        }
        let bindings = storage::declarations(self);
        let body = match &self.kind {
            KernelKind::Elementwise { expr } => elementwise::wgsl(self, bindings, expr),
            KernelKind::MatMul { .. } | KernelKind::MatMulTiled { .. } | KernelKind::MatVec { .. } => {
                matmul::wgsl(self, bindings)
            }
            KernelKind::MatMulCoop { .. } => coop::wgsl(self, bindings),
            KernelKind::Rows { op, mask } => rows::wgsl(self, bindings, *op, *mask),
            KernelKind::GetRows | KernelKind::Concat | KernelKind::SetRows | KernelKind::CopyInto => {
                gather::wgsl(self, bindings)
            }
            KernelKind::Rope | KernelKind::Attention { .. } | KernelKind::AttentionCombine { .. } => {
                attention::wgsl(self, bindings)
            }
        };
        let helpers: String = HELPERS.iter().filter(|(call, _)| body.contains(call)).map(|(_, text)| *text).collect();
        format!("{enable}{}{COMMON}\n{helpers}{body}", params_decl(&self.kind))
    }
}
