//! Backends (stage 3): one small trait around a compiled plan. A backend runs the compiler's pass list with its own
//! [`Target`](crate::compile::Target) and turns the result into an [`Executable`]: buffers, pipelines and bind
//! groups are made once there, and each run only uploads inputs, dispatches and reads outputs back.

pub(crate) mod cpu;
pub(crate) mod gpu;

use crate::caps::Capabilities;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::graph::{Graph, Tensor};
use crate::resident::{Bytes, External};
use crate::run::Fetch;
use crate::tensor::HostTensor;
use std::sync::Arc;

/// The `log` target of webtensor's announcements of work that can take seconds (tuning the matmul kernels,
/// building a plan's pipelines, loading a model): one line before each, at info level, saying whether it happens
/// once and where its result is cached. The CLI shows them by default; `RUST_LOG=webtensor::progress=off` hides
/// them.
pub const PROGRESS_LOG: &str = "webtensor::progress";

pub(crate) use crate::resident::{LocalFuture, MaybeSendSync};

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
    /// Bytes of resident tensors (weights) the steps read per run: each step's view of each (once, however it
    /// broadcasts), only the gathered rows for `get_rows`. A language model's decode step reads its weights once
    /// at best: this against the weights' bytes is then 1.0.
    pub resident_read_bytes: u64,
    /// Bytes of the resident tensors the plan uses, each once (as stored: a copy a backend keeps, such as the
    /// CPU's repacked weights, not counted).
    pub resident_bytes: u64,
    /// Buffers the plan created at compile time.
    pub buffers: usize,
    /// The kernel of each step, in schedule order (e.g. `matmul_tiled 128x128x8`, `matvec`, `rows softmax`): its
    /// first dispatch's where a step takes several (a split over a large tensor, split attention's combine pass).
    pub kernels: Vec<String>,
    /// What the last run moved between the host and the device (zeros before the first run, and on the CPU
    /// backend, where nothing moves).
    pub transfer: TransferStats,
}

/// Bytes one run moved between host and device memory, and the bytes it copied on the host doing so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Input bytes written to the device.
    pub upload_bytes: u64,
    /// Output bytes copied back from the device (only what was fetched).
    pub readback_bytes: u64,
    /// Bytes copied by the host: inputs into staging memory, outputs out of it (and any padding or
    /// intermediate copy). A run that copies each byte once has `upload_bytes + readback_bytes`.
    pub host_copy_bytes: u64,
}

/// Options for [`Device::compile_with`](crate::Device::compile_with).
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Fill every non-input tensor with NaN (0xFFFF… bit patterns) before each run, so that an element a
    /// kernel never writes shows up. For tests; costs one extra write of the plan's memory per run.
    pub poison: bool,
    /// Pins the GPU matmul kernel for this plan (else `WEBTENSOR_MATMUL`, else the device's tuned choice).
    pub matmul: Option<crate::backend::gpu::config::MatmulChoice>,
    /// Turn off elementwise fusion and in-place execution (GPU plans): one dispatch per op, as built.
    pub no_fusion: bool,
    /// CPU backend: keep the activations of matmuls with block-quantized weights in f32. By default they are
    /// rounded to 8-bit blocks of 32 (ggml's Q8_1, as llama.cpp's CPU backend does) for the integer kernels of
    /// the block types, which moves each dot product by about 0.3% of its magnitude and reads the weights several
    /// times faster. GPU backends always compute in f32.
    pub f32_activations: bool,
}

/// A run's inputs: node id and the values' bytes (checked against the input's dtype and shape by `Plan`).
pub(crate) type Inputs<'a> = [(NodeId, &'a [u8])];

/// A device's side of a plan: made once by `compile`, run many times.
pub(crate) trait Executable {
    /// Uploads `inputs`, runs every step, returns each output as `fetch` asks (`None` for [`Fetch::Skip`]).
    fn run<'a>(
        &'a mut self,
        inputs: &'a Inputs<'a>,
        fetch: &'a [Fetch],
    ) -> LocalFuture<'a, Result<Vec<Option<HostTensor>>>>;
    fn stats(&self) -> PlanStats;
    /// The graph inputs the plan reads (live inputs), in declaration order.
    fn input_ids(&self) -> &[NodeId];
    /// Host time of the last run until its work was submitted (uploads, encoding unless it was encoded ahead,
    /// submit), in microseconds; the CPU backend reports the whole run.
    fn last_host_us(&self) -> f64;
    /// Host time the last run spent after its submit encoding the next run's work ahead, in microseconds (0 where
    /// it encoded none).
    fn last_encode_ahead_us(&self) -> f64 {
        0.0
    }
    /// Times each dispatch of the following runs on the device (`false`: stops).
    ///
    /// # Errors
    /// [`Error::Unsupported`] where the plan's device cannot (the CPU backend: its kernels are not dispatches).
    fn set_profiling(&mut self, _on: bool) -> Result<()> {
        Err(Error::Unsupported {
            op: "profiling".into(),
            backend: "cpu".into(),
            reason: "only GPU plans time their dispatches (the CPU backend's steps run on the calling threads)".into(),
        })
    }
    /// Each dispatch's kernel and device time in the last run, where it was profiled.
    fn last_profile(&self) -> Option<Vec<KernelTime>> {
        None
    }
}

/// One dispatch of a profiled run ([`Plan::set_profiling`](crate::Plan::set_profiling)): its kernel, named as in
/// [`PlanStats::kernels`], and its time on the device in microseconds, from the timestamp written before it to the
/// one after it (so the wait at the barrier before it counts too: a run's dispatch times add up to its GPU time).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    pub kernel: String,
    pub gpu_us: f64,
}

/// A device: compiles graphs into executables, and holds resident and state tensors.
pub(crate) trait Backend: MaybeSendSync {
    fn capabilities(&self) -> &Capabilities;

    /// Places `bytes` (a tensor of `dtype` and `shape`, already checked) in the device's memory.
    fn upload(&self, name: &str, dtype: DType, shape: &[usize], bytes: Bytes, writable: bool) -> Result<Arc<External>>;

    /// Bytes of the live resident and state tensors on this device.
    fn resident_bytes(&self) -> u64;

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
            Err(crate::error::Error::Unsupported {
                op: "a WGSL shader".into(),
                backend: "cpu".into(),
                reason: "the CPU backend runs no shaders".into(),
            })
        })
    }
}

/// A timestamp for measuring host time (none on wasm, where `Instant` is unavailable).
pub(crate) fn now() -> Option<std::time::Instant> {
    #[cfg(not(target_arch = "wasm32"))]
    return Some(std::time::Instant::now());
    #[cfg(target_arch = "wasm32")]
    None
}

/// Microseconds since `start` (0 on wasm).
pub(crate) fn elapsed_us(start: Option<std::time::Instant>) -> f64 {
    start.map_or(0.0, |s| s.elapsed().as_secs_f64() * 1e6)
}

/// The layout read back of an output with `layout` as `fetch` asks, and its shape (`None` for nothing).
pub(crate) fn fetched(layout: &crate::shape::Layout, fetch: &Fetch) -> Result<Option<crate::shape::Layout>> {
    match fetch {
        Fetch::Skip => Ok(None),
        Fetch::All => Ok(Some(layout.clone())),
        Fetch::Rows(r) if layout.rank() == 0 => {
            Err(crate::error::Error::InvalidArgument { op: "run", reason: format!("rows {r:?} of a 0-d output") })
        }
        Fetch::Rows(r) => layout.slice(0, r.start, r.end).map(Some),
    }
}

/// Gathers the elements of `layout` from `storage` into a new row-major tensor (how outputs that are views are
/// read back).
/// [`gather`] from storage given as the bytes of `dtype` elements (mapped GPU memory), copying only the elements
/// `layout` selects, once.
pub(crate) fn gather_bytes(
    dtype: crate::dtype::DType,
    bytes: &[u8],
    layout: &crate::shape::Layout,
) -> crate::tensor::Data {
    use crate::tensor::Data;
    if layout.is_contiguous() && !dtype.is_storage_format() {
        let esz = dtype.size_bytes();
        return Data::from_bytes(dtype, &bytes[layout.offset * esz..(layout.offset + layout.numel()) * esz]);
    }
    gather(&Data::from_bytes(dtype, bytes), layout)
}

pub(crate) fn gather(storage: &crate::tensor::Data, layout: &crate::shape::Layout) -> crate::tensor::Data {
    use crate::tensor::Data;
    let n = layout.numel();
    if layout.is_contiguous() {
        let r = layout.offset..layout.offset + n;
        return match storage {
            Data::F32(v) => Data::F32(v[r].to_vec()),
            Data::F16(v) => Data::F16(v[r].to_vec()),
            Data::I32(v) => Data::I32(v[r].to_vec()),
            Data::Raw { dtype, bytes } => {
                let (bs, bb) = (dtype.block_size(), dtype.block_bytes());
                Data::Raw { dtype: *dtype, bytes: bytes[r.start / bs * bb..r.end / bs * bb].to_vec() }
            }
        };
    }
    match storage {
        Data::F32(v) => Data::F32((0..n).map(|i| v[layout.index_of(i)]).collect()),
        Data::F16(v) => Data::F16((0..n).map(|i| v[layout.index_of(i)]).collect()),
        Data::I32(v) => Data::I32((0..n).map(|i| v[layout.index_of(i)]).collect()),
        // views of storage formats are whole rows, which are contiguous
        Data::Raw { .. } => storage.clone(),
    }
}
