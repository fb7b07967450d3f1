//! Backends (stage 4): one small trait around a compiled plan. A backend runs the compiler's pass list with its own
//! [`Target`](crate::compile::Target) and turns the result into an [`Executable`]: buffers, pipelines and bind
//! groups are made once there, and each run only uploads inputs, dispatches and reads outputs back.

pub(crate) mod cpu;
pub(crate) mod gpu;

use crate::caps::Capabilities;
use crate::graph::NodeId;
use crate::{Graph, HostTensor, Result, Tensor};
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
    pub matmul: Option<crate::gpu::MatmulChoice>,
    /// Turn off elementwise fusion and in-place execution (GPU plans): one dispatch per op, as built.
    pub no_fusion: bool,
}

/// A device's side of a plan: made once by `compile`, run many times.
pub(crate) trait Executable {
    /// Uploads `inputs` (node id, values), runs every step, returns the outputs in order.
    fn run<'a>(&'a mut self, inputs: &'a [(NodeId, &'a HostTensor)]) -> LocalFuture<'a, Result<Vec<HostTensor>>>;
    fn stats(&self) -> PlanStats;
    /// The graph inputs the plan reads (live inputs), in declaration order.
    fn input_ids(&self) -> &[NodeId];
}

/// A device: compiles graphs into executables.
pub(crate) trait Backend: MaybeSendSync {
    fn capabilities(&self) -> &Capabilities;

    /// Live (buffers, bind groups, compute pipelines) on the device, where the backend counts them.
    fn resource_counts(&self) -> Option<[isize; 3]> {
        None
    }

    /// Runs the pass list for `outputs` of `graph` and creates the plan's device objects.
    fn compile<'a>(
        &'a self,
        graph: &'a Graph,
        outputs: &'a [Tensor],
        options: &'a CompileOptions,
    ) -> LocalFuture<'a, Result<Box<dyn Executable>>>;

    /// Destroys the device (a real device loss, for tests); nothing on the CPU.
    fn destroy_for_tests(&self) {}

    /// Builds a compute pipeline from `wgsl` on the path compile uses (tests of shader validation errors).
    fn build_wgsl_for_tests<'a>(&'a self, _wgsl: &'a str) -> LocalFuture<'a, Result<()>> {
        Box::pin(async {
            Err(crate::Error::Unsupported {
                op: "a WGSL shader".into(),
                backend: "cpu".into(),
                reason: "the CPU backend runs no shaders".into(),
            })
        })
    }
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
