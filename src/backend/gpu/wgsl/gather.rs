//! WGSL of get_rows (`shaders/get_rows.wgsl`) and concat (`shaders/concat.wgsl`).

use super::template::{compute_type, render};
use crate::backend::gpu::kernel::{KernelKey, KernelKind};

const GET_ROWS: &str = include_str!("../../../../shaders/get_rows.wgsl");
const CONCAT: &str = include_str!("../../../../shaders/concat.wgsl");

pub(super) fn wgsl(key: &KernelKey, bindings: String) -> String {
    let template = if key.kind == KernelKind::Concat { CONCAT } else { GET_ROWS };
    render(template, &[("BINDINGS", bindings), ("OUT_C", compute_type(key.out).into())])
}
