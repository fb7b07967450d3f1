//! WGSL generation (text): a [`KernelKey`] becomes the complete source of its variant — the enables it needs, its
//! family's `struct Params` (generated from the family's parameter struct), `common.wgsl`, the storage bindings
//! and their accessors ([`storage`]), and the family's own WGSL (`kernels/`), which fills its template's tokens
//! ([`template`]).

mod storage;
pub(crate) use storage::{grid_table, reads_grids, GRID_WORDS};
pub(crate) mod template;

use super::kernel::KernelKey;

const COMMON: &str = include_str!("common.wgsl");
/// Helper functions appended to a kernel only where its body calls them: the f16 rounding of fused f16
/// intermediates, and the correctly rounded division.
const HELPERS: [(&str, &str); 2] =
    [("f16_round(", include_str!("f16_round.wgsl")), ("div_rn(", include_str!("div_rn.wgsl"))];

impl KernelKey {
    /// The complete WGSL source of this variant.
    pub(crate) fn wgsl(&self) -> String {
        let mut enable = String::new();
        if self.uses_f16() {
            enable.push_str("enable f16;\n");
        }
        enable.push_str(self.kind.enables());
        let body = self.kind.wgsl(self, storage::declarations(self));
        let helpers: String = HELPERS.iter().filter(|(call, _)| body.contains(call)).map(|(_, text)| *text).collect();
        let params = self.kind.params().wgsl;
        format!("{enable}{params}@group(0) @binding(0) var<uniform> P: Params;\n{COMMON}\n{helpers}{body}")
    }
}
