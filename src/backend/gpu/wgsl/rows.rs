//! WGSL of the row kernels (`shaders/rows.wgsl`).

use super::template::{compute_type, render};
use crate::backend::gpu::kernel::{KernelKey, RowKernel};

const ROWS: &str = include_str!("../../../../shaders/rows.wgsl");

pub(super) fn wgsl(key: &KernelKey, bindings: String, op: RowKernel, mask: bool) -> String {
    // the mask's accessor exists only in the variant that binds a mask
    let f = if mask {
        "fn load_mask(base: u32, j: u32) -> f32 {\n    return f32(ld_m_in(base + j * P.mask_strides.w));\n}"
    } else {
        "fn load_mask(base: u32, j: u32) -> f32 {\n    return 0.0;\n}"
    };
    let subs = [
        ("BINDINGS", bindings),
        ("OUT_C", compute_type(key.out).into()),
        ("MASK_FN", f.into()),
        ("OP", op.wgsl_const().into()),
        ("HAS_MASK", mask.to_string()),
    ];
    render(ROWS, &subs)
}
