//! WGSL of the data-movement kernels: get_rows, concat, set_rows and copy_into (one `shaders/` file each).

use super::template::{compute_type, render};
use crate::backend::gpu::kernel::{KernelKey, KernelKind};

const GET_ROWS: &str = include_str!("../../../../shaders/get_rows.wgsl");
const CONCAT: &str = include_str!("../../../../shaders/concat.wgsl");
const SET_ROWS: &str = include_str!("../../../../shaders/set_rows.wgsl");
const COPY_INTO: &str = include_str!("../../../../shaders/copy_into.wgsl");

pub(super) fn wgsl(key: &KernelKey, bindings: String) -> String {
    let template = match key.kind {
        KernelKind::Concat => CONCAT,
        KernelKind::SetRows => SET_ROWS,
        KernelKind::CopyInto => COPY_INTO,
        _ => GET_ROWS,
    };
    render(template, &[("BINDINGS", bindings), ("OUT_C", compute_type(key.out).into())])
}
