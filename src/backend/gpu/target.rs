//! What GPU lowering knows about the device ([`GpuTarget`]), and the helpers every family's lowering uses.

use crate::backend::gpu::config::MatmulKernels;
use crate::backend::gpu::kernel::{Dispatch, KernelKey, MatVecReduce};
use crate::backend::gpu::params::Params;
use crate::caps::{Capabilities, DeviceType};
use crate::error::{Error, Result};
use crate::graph::NodeId;

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
    /// The fewest keys a split of a decode step's attention takes (see [`decode_split_min`]).
    pub decode_split_min: u32,
    /// Whether fusion and in-place execution run.
    pub fusion: bool,
    /// The device's identity.
    pub device: u64,
}

/// 16 when an adapter with capabilities `caps` offers the 16×16×16 f16 × f16 → f32 cooperative-matrix shape
/// (see `COOP_CONFIGS`) with SHADER_F16 and subgroups of exactly 32 invocations (which `matmul_coop.wgsl`
/// assumes); `caps.cooperative_matrix` is only filled where the adapter has EXPERIMENTAL_COOPERATIVE_MATRIX.
pub(crate) fn coop_fragment(caps: &Capabilities) -> Option<u32> {
    let has = caps.cooperative_matrix.iter().any(|s| s.eq_ignore_ascii_case("16x16x16 F16->F32"));
    (has && caps.shader_f16 && caps.subgroups && caps.subgroup_size == (32, 32)).then_some(16)
}

/// How one-row matmuls sum each output where an adapter prefers a way: serially (one invocation an output, no
/// barriers) on adapters that run on CPU cores (device type `Cpu`: SwiftShader, llvmpipe); else None (the best
/// the adapter has).
pub(crate) fn preferred_matvec(caps: &Capabilities) -> Option<MatVecReduce> {
    (caps.device_type == DeviceType::Cpu).then_some(MatVecReduce::Serial)
}

/// The fewest keys a split of a decode step's attention takes on an adapter with capabilities `caps`: on one that
/// runs on CPU cores (device type `Cpu`), 256, as the CPU backend's runs (its few threads are busy with fewer,
/// longer splits, and a step within one split skips the combine pass); on a GPU none, so each split is one tile of
/// keys on a workgroup of its own and a step's critical path is one tile whatever its length.
pub(crate) fn decode_split_min(caps: &Capabilities) -> u32 {
    if caps.device_type == DeviceType::Cpu {
        256
    } else {
        0
    }
}

/// Whether an adapter with capabilities `caps` runs f16 × f16 matmuls on webtensor's cooperative-matrix kernel:
/// it needs the 16×16×16 f16 × f16 → f32 shape, SHADER_F16 and subgroups of exactly 32 invocations.
pub fn uses_cooperative_matrices(caps: &Capabilities) -> bool {
    coop_fragment(caps).is_some()
}

impl GpuTarget {
    /// What lowering knows about a device with capabilities `caps` (a real adapter's, or a recorded profile's):
    /// every decision that depends on the adapter is derived here from its capabilities.
    pub(crate) fn new(caps: &Capabilities, matmul: MatmulKernels, fusion: bool, device: u64) -> GpuTarget {
        let (lo, hi) = caps.subgroup_size;
        GpuTarget {
            max_groups: caps.max_workgroups_per_dimension,
            max_shared: caps.max_workgroup_storage_bytes,
            subgroup_size: (caps.subgroups && lo == hi && lo > 0).then_some(lo),
            matmul,
            coop_frag: coop_fragment(caps),
            coop_emulated: false,
            matvec: preferred_matvec(caps),
            shader_f16: caps.shader_f16,
            max_binding: caps.max_storage_binding_bytes,
            max_buffer: caps.max_buffer_bytes,
            decode_split_min: decode_split_min(caps),
            align: (caps.min_storage_offset_alignment as u64).max(256),
            fusion,
            device,
        }
    }
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
