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
use crate::options::{CompileOptions, KernelTime, PlanStats};
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
