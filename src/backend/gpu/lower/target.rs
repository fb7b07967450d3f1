//! What GPU lowering knows about the device ([`GpuTarget`]), and the helpers every family's lowering uses.

use crate::backend::gpu::kernel::{Dispatch, KernelKey, MatVecReduce};
use crate::backend::gpu::params::Params;
use crate::gpu::MatmulKernels;
use crate::graph::NodeId;
use crate::{Error, Result};

/// What lowering needs to know about the device and the plan's options.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GpuTarget {
    /// Workgroups per dispatch dimension.
    pub max_groups: u32,
    /// Workgroup memory, in bytes.
    pub max_shared: u32,
    /// The subgroup size when the adapter has subgroups and a fixed size.
    pub subgroup_size: Option<u32>,
    pub matmul: MatmulKernels,
    /// The fragment size of the adapter's f16 → f32 cooperative-matrix shape (16), when the device has
    /// EXPERIMENTAL_COOPERATIVE_MATRIX and subgroups of 32.
    pub coop_frag: Option<u32>,
    /// Cooperative matrices are emulated in plain WGSL (`testing::device_with_emulated_coop`).
    pub coop_emulated: bool,
    /// How the mat-vec kernel sums each output, when the device prefers a way (`GpuBackend::matvec`); else
    /// through subgroups where they fit, else workgroup memory.
    pub matvec: Option<MatVecReduce>,
    /// SHADER_F16: without it f16 tensors are stored packed in u32 words.
    pub shader_f16: bool,
    /// Largest storage binding, in bytes.
    pub max_binding: u64,
    /// Largest buffer, in bytes.
    pub max_buffer: u64,
    /// Alignment of every tensor's block and of binding offsets, in bytes.
    pub align: u64,
    /// Whether fusion and in-place execution run.
    pub fusion: bool,
    /// The device's identity.
    pub device: u64,
}

/// Workgroup grid for `groups` workgroups: 1-D when it fits `max_per_dim`, else split over x and y.
pub(crate) fn grid(what: &str, groups: u64, max_per_dim: u32) -> Result<[u32; 3]> {
    let max = max_per_dim.max(1) as u64;
    if groups <= max {
        return Ok([groups.max(1) as u32, 1, 1]);
    }
    let y = groups.div_ceil(max);
    if y > max {
        return Err(Error::LimitExceeded {
            what: format!("{what}: {groups} workgroups"),
            size: groups,
            unit: "workgroups",
            limit_name: "max_compute_workgroups_per_dimension squared",
            limit: max * max,
        });
    }
    Ok([max as u32, y as u32, 1])
}

/// A dispatch with the whole of each binding bound.
pub(crate) fn dispatch(key: KernelKey, params: Params, bindings: Vec<NodeId>, workgroups: [u32; 3]) -> Dispatch {
    let windows = vec![None; bindings.len()];
    Dispatch { key, params, bindings, windows, workgroups, dynamic: None, scratch: 0 }
}
