//! Backends (stage 4): one small trait around a compiled plan, and the facts each device reports.
//!
//! A backend turns a [`Program`](crate::compile::Program) into an [`Executable`]: buffers, pipelines and bind
//! groups are made once there, and each run only uploads inputs, dispatches and reads outputs back.

pub(crate) mod cpu;
pub(crate) mod cpu_matmul;
pub mod gpu;

use crate::compile::Program;
use crate::graph::NodeId;
use crate::{DType, HostTensor, Result};
use std::future::Future;
use std::pin::Pin;

/// `Send + Sync` natively; nothing on wasm, where GPU handles are single-threaded.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) trait MaybeSendSync: Send + Sync {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send + Sync> MaybeSendSync for T {}
#[cfg(target_arch = "wasm32")]
pub(crate) trait MaybeSendSync {}
#[cfg(target_arch = "wasm32")]
impl<T> MaybeSendSync for T {}

pub(crate) type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// What the compiler may ask of a device. Everything the code depends on about an adapter is read into this
/// struct, in one place, and printed by `webtensor info`.
#[derive(Clone, Debug, PartialEq)]
pub struct Capabilities {
    /// `cpu`, `vulkan`, `gl`, `metal`, `dx12` or `webgpu`.
    pub backend: String,
    /// The adapter's name (e.g. `llvmpipe (LLVM 15.0.7, 256 bits)`), or the CPU's description.
    pub name: String,
    /// `DiscreteGpu`, `IntegratedGpu`, `VirtualGpu`, `Cpu` or `Other`.
    pub device_type: String,
    /// Driver name and version as the adapter reports them.
    pub driver: String,
    /// Largest storage-buffer binding, in bytes (`max_storage_buffer_binding_size`).
    pub max_storage_binding_bytes: u64,
    /// Largest buffer, in bytes (`max_buffer_size`).
    pub max_buffer_bytes: u64,
    /// Workgroup (shared) memory per workgroup, in bytes.
    pub max_workgroup_storage_bytes: u32,
    /// Invocations per workgroup.
    pub max_invocations_per_workgroup: u32,
    /// Workgroups per dispatch dimension.
    pub max_workgroups_per_dimension: u32,
    /// Alignment of storage-binding offsets, in bytes.
    pub min_storage_offset_alignment: u32,
    /// Alignment of uniform-binding offsets, in bytes.
    pub min_uniform_offset_alignment: u32,
    /// WGSL `enable f16;` (SHADER_F16) is available.
    pub shader_f16: bool,
    /// Subgroup operations are available.
    pub subgroups: bool,
    /// Smallest and largest subgroup size in invocations (0 when unknown).
    pub subgroup_size: (u32, u32),
    /// Cooperative-matrix tile shapes, e.g. `16x16x16 f16->f32` (empty when unsupported).
    pub cooperative_matrix: Vec<String>,
    /// Element types tensors may have on this device.
    pub dtypes: Vec<DType>,
}

/// Counts that describe a compiled plan, for tests and `webtensor demo --stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Kernel launches per run (GPU dispatches, or CPU kernel calls).
    pub dispatches: usize,
    /// Distinct compute pipelines the plan uses (0 on the CPU).
    pub pipelines: usize,
    /// Device memory the plan holds for tensors, in bytes (all arenas).
    pub memory_bytes: u64,
    /// Largest sum of live tensor sizes at one point of the schedule, in bytes.
    pub peak_live_bytes: u64,
    /// Buffers the plan created at compile time.
    pub buffers: usize,
    /// The kernel of each dispatch, in schedule order (e.g. `matmul_tiled 128x128x8`, `matvec`, `rows softmax`).
    pub kernels: Vec<String>,
}

/// Options for [`Device::compile_with`](crate::Device::compile_with).
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Fill every non-input tensor with NaN (0xFFFF… bit patterns) before each run, so that an element a
    /// kernel never writes shows up. For tests; costs one extra write of the plan's memory per run.
    pub poison: bool,
    /// Pins the GPU matmul kernel for this plan (else `WEBTENSOR_MATMUL`, else the device's tuned choice).
    pub matmul: Option<gpu::matmul::MatmulChoice>,
    /// Turn off elementwise fusion and in-place execution (GPU plans): one dispatch per op, as built.
    pub no_fusion: bool,
}

/// A device's side of a plan: made once by `compile`, run many times.
pub(crate) trait Executable {
    /// Uploads `inputs` (node id, values), runs every step, returns the outputs in order.
    fn run<'a>(&'a mut self, inputs: &'a [(NodeId, &'a HostTensor)]) -> LocalFuture<'a, Result<Vec<HostTensor>>>;
    fn stats(&self) -> PlanStats;
}

/// A device: turns programs into executables.
pub(crate) trait Backend: MaybeSendSync {
    fn capabilities(&self) -> &Capabilities;
    /// Live (buffers, bind groups, compute pipelines) on the device, where the backend counts them.
    fn resource_counts(&self) -> Option<[isize; 3]> {
        None
    }
    /// The wgpu backend behind this device, if it is one (for the testing hooks on `Device`).
    fn as_gpu(&self) -> Option<&std::sync::Arc<gpu::GpuBackend>> {
        None
    }
    fn compile<'a>(
        &'a self,
        program: Program,
        options: &'a CompileOptions,
    ) -> LocalFuture<'a, Result<Box<dyn Executable>>>;
}

/// Gathers the elements of `layout` from `storage` into a new row-major tensor (how outputs that are views are
/// read back).
pub(crate) fn gather(storage: &crate::Data, layout: &crate::shape::Layout) -> crate::Data {
    use crate::Data;
    let n = layout.numel();
    if layout.is_contiguous() {
        let r = layout.offset..layout.offset + n;
        return match storage {
            Data::F32(v) => Data::F32(v[r].to_vec()),
            Data::F16(v) => Data::F16(v[r].to_vec()),
            Data::I32(v) => Data::I32(v[r].to_vec()),
        };
    }
    match storage {
        Data::F32(v) => Data::F32((0..n).map(|i| v[layout.index_of(i)]).collect()),
        Data::F16(v) => Data::F16((0..n).map(|i| v[layout.index_of(i)]).collect()),
        Data::I32(v) => Data::I32((0..n).map(|i| v[layout.index_of(i)]).collect()),
    }
}
