//! The variant catalogue: every WGSL variant the compiler can emit, the union of the kernel families' own
//! variant lists (`kernels/`), plus each f16 variant with f16 packed in u32 words; for validation with naga and
//! the kernel snapshot (`tests/wgsl.rs`, `tests/kernels.rs`).

use super::kernel::KernelKey;
use super::kernels;
use super::params::ParamsLayout;
use crate::dtype::DType;

/// Every kernel variant the compiler can emit: `(name, WGSL)`.
pub fn all_variants() -> Vec<(String, String)> {
    let mut keys = kernels::variants();
    // every f16 variant again with f16 packed in u32 words (adapters without SHADER_F16)
    let packed: Vec<KernelKey> = keys
        .iter()
        .filter(|k| k.out == DType::F16 || k.ins.contains(&DType::F16))
        .filter(|k| !k.kind.needs_shader_f16())
        .map(|k| KernelKey { packed_f16: true, ..k.clone() })
        .collect();
    keys.extend(packed);
    keys.into_iter().map(|k| (format!("{k:?}"), k.wgsl())).collect()
}

/// Every kernel family's parameter layout, once each (for the layout test).
pub fn params_layouts() -> Vec<ParamsLayout> {
    let mut layouts: Vec<ParamsLayout> = Vec::new();
    for key in kernels::variants() {
        let l = key.kind.params();
        if !layouts.iter().any(|m| m.name == l.name) {
            layouts.push(l);
        }
    }
    layouts
}
