//! The kernel families: each one file beside its shader (the matmul family a folder of four kernels), owning
//! its variant struct, parameters, bindings, WGSL generation, lowering and variant list. A new kernel-backed op
//! is a family file, its shader and one line below.

use crate::backend::gpu::kernel::{Dispatch, KernelKey};
use crate::backend::gpu::target::GpuTarget;
use crate::compile::ir::Program;
use crate::error::Result;
use crate::graph::NodeId;

/// Declares the family modules; lowering asks each in turn whether it lowers a step, and the catalogue is the
/// union of their variant lists.
macro_rules! families {
    ($($family:ident),* $(,)?) => {
        $(pub(crate) mod $family;)*

        /// The dispatches of step `id`, from the family that lowers it.
        pub(crate) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Result<Vec<Dispatch>> {
            $(if let Some(ds) = $family::lower(program, id, t) {
                return ds;
            })*
            Err(crate::compile::unlowered(program, id, "gpu"))
        }

        /// Every variant of every family.
        pub(crate) fn variants() -> Vec<KernelKey> {
            let mut keys = Vec::new();
            $($family::variants(&mut keys);)*
            keys
        }
    };
}

families! {
    elementwise,
    matmul,
    rows,
    get_rows,
    concat,
    set_rows,
    copy_into,
    rope,
    rope_set_rows,
    rope_kv_writes,
    attention,
    top_k,
    take_along_axis,
    mul_mat_id,
    ssm_conv,
    gated_delta_net,
}
