//! Devices and plans: the public face of the backends. `Device::best()` chooses, `Device::compile` makes a
//! [`Plan`], `Plan::run` runs it.

use crate::backend::cpu::CpuBackend;
use crate::backend::gpu::GpuBackend;
use crate::backend::{Backend, Executable};
use crate::caps::{BackendKind, Capabilities, DeviceType, BACKEND_ENV};
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::graph::{Graph, Tensor};
use crate::options::{CompileOptions, KernelTime, PlanStats};
use crate::resident::{Bytes, Resident, State};
use crate::run::{Fetch, Value};
use crate::tensor::HostTensor;
use std::sync::Arc;

/// A compute device: the CPU backend or one wgpu adapter. Cheap to clone (shared handle).
#[derive(Clone)]
pub struct Device {
    backend: Arc<dyn Backend>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = self.capabilities();
        write!(f, "Device({} on {})", c.name, c.backend)
    }
}

impl Device {
    /// The CPU backend: every op, any dtype; the reference the GPU is tested against.
    pub fn cpu() -> Device {
        #[allow(clippy::arc_with_non_send_sync)]
        Device { backend: Arc::new(CpuBackend::new()) }
    }

    /// A device of exactly `kind` (no fallback), asynchronously. `Auto` behaves like [`Device::best_async`].
    ///
    /// # Errors
    /// [`Error::NoDevice`] when no adapter of that kind exists or its device cannot be created.
    pub async fn with_backend_async(kind: BackendKind) -> Result<Device> {
        match kind {
            BackendKind::Cpu => Ok(Device::cpu()),
            BackendKind::Auto => Ok(Device::best_auto().await),
            // Both `Arc`s hold GPU handles, which are not `Send` on wasm.
            #[allow(clippy::arc_with_non_send_sync)]
            _ => {
                let gpu = Arc::new(GpuBackend::new(kind).await?);
                Ok(Device { backend: Arc::new(gpu) })
            }
        }
    }

    /// The first GPU adapter that opens, in the order Vulkan, Metal, DX12, GL (WebGPU in the browser); natively,
    /// software adapters (device type `Cpu`: lavapipe, llvmpipe, WARP) only when `software` is true. `Err` holds
    /// why each backend was passed over.
    async fn first_gpu(software: bool) -> std::result::Result<Device, Vec<String>> {
        let order: &[BackendKind] = if cfg!(target_arch = "wasm32") {
            &[BackendKind::WebGpu]
        } else {
            &[BackendKind::Vulkan, BackendKind::Metal, BackendKind::Dx12, BackendKind::Gl]
        };
        let mut reasons = Vec::new();
        for &kind in order {
            match GpuBackend::new(kind).await {
                // a browser's software adapter (SwiftShader) is still WebGPU: the page asked for it
                Ok(gpu) if !software && !cfg!(target_arch = "wasm32") && gpu.caps.device_type == DeviceType::Cpu => {
                    reasons.push(format!(
                        "{kind}: {} is a software adapter, slower than the CPU backend (--backend {kind} or \
                         {BACKEND_ENV}={kind} still uses it)",
                        gpu.caps.name
                    ));
                }
                Ok(gpu) => {
                    #[allow(clippy::arc_with_non_send_sync)]
                    return Ok(Device { backend: Arc::new(Arc::new(gpu)) });
                }
                Err(e) => reasons.push(e.to_string()),
            }
        }
        Err(reasons)
    }

    async fn best_auto() -> Device {
        match Device::first_gpu(false).await {
            Ok(d) => d,
            Err(reasons) => {
                // only software adapters, or none at all: the expected path, said at info level (details at
                // debug); a GPU that is there but failed to open is worth one warning line
                let expected = |r: &&String| r.contains("is a software adapter") || r.starts_with("no device: no ");
                match reasons.iter().find(|r| !expected(r)) {
                    Some(failed) => log::warn!("webtensor: running on the CPU backend: {failed}"),
                    None => log::info!("webtensor: no hardware GPU adapter; running on the CPU backend"),
                }
                log::debug!("webtensor: why each backend was passed over: {}", reasons.join("; "));
                Device::cpu()
            }
        }
    }

    /// The best GPU adapter, software ones (lavapipe) included and never the CPU backend, ignoring
    /// `WEBTENSOR_BACKEND` (for tests and benchmarks of the GPU path).
    ///
    /// # Errors
    /// [`Error::NoDevice`] with each backend's reason when no adapter opens.
    pub async fn best_gpu_async() -> Result<Device> {
        Device::first_gpu(true).await.map_err(|r| Error::NoDevice(r.join("; ")))
    }

    /// Blocking form of [`Device::best_gpu_async`] (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn best_gpu() -> Result<Device> {
        pollster::block_on(Device::best_gpu_async())
    }

    /// The best device: the `WEBTENSOR_BACKEND` override if set, else a high-performance hardware GPU adapter
    /// (Vulkan, Metal, DX12, then GL; WebGPU in the browser), else the CPU, with the reason logged at warn level.
    /// Natively, software adapters (lavapipe, llvmpipe, WARP) rank below the CPU backend, which is many times
    /// faster than they are; [`Device::with_backend`] or [`Device::best_gpu`] still give them.
    ///
    /// # Errors
    /// Only when `WEBTENSOR_BACKEND` names an unknown backend or one that cannot be created.
    pub async fn best_async() -> Result<Device> {
        match std::env::var(BACKEND_ENV) {
            Ok(v) if !v.is_empty() => Device::with_backend_async(v.parse()?).await,
            _ => Ok(Device::best_auto().await),
        }
    }

    /// Blocking form of [`Device::best_async`] (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn best() -> Result<Device> {
        pollster::block_on(Device::best_async())
    }

    /// A GPU device with SHADER_F16 left off (see `testing::device_without_f16`).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn without_f16(kind: BackendKind) -> Result<Device> {
        let gpu = pollster::block_on(GpuBackend::new_with(kind, false))?;
        #[allow(clippy::arc_with_non_send_sync)]
        Ok(Device { backend: Arc::new(Arc::new(gpu)) })
    }

    /// A GPU device whose cooperative-matrix matmul is emulated in plain WGSL (see
    /// `testing::device_with_emulated_coop`).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn with_emulated_coop(kind: BackendKind) -> Result<Device> {
        let gpu = pollster::block_on(GpuBackend::new_with(kind, true))?.with_emulated_coop();
        #[allow(clippy::arc_with_non_send_sync)]
        Ok(Device { backend: Arc::new(Arc::new(gpu)) })
    }

    /// A GPU device taking a profile's decisions (see `testing::device_with_profile`).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn with_profile(
        kind: BackendKind,
        profile: &Capabilities,
        emulate_coop: bool,
        tune_problem: (usize, usize),
    ) -> Result<Device> {
        let gpu =
            pollster::block_on(GpuBackend::new_with(kind, true))?.with_profile(profile, emulate_coop, tune_problem);
        #[allow(clippy::arc_with_non_send_sync)]
        Ok(Device { backend: Arc::new(Arc::new(gpu)) })
    }

    /// A GPU device whose mat-vec kernel splits each output's sum (see `testing::device_with_matvec_reduce`).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn with_matvec_reduce(kind: BackendKind, subgroups: bool) -> Result<Device> {
        let gpu = pollster::block_on(GpuBackend::new_with(kind, true))?.with_matvec_reduce(subgroups);
        #[allow(clippy::arc_with_non_send_sync)]
        Ok(Device { backend: Arc::new(Arc::new(gpu)) })
    }

    /// Blocking form of [`Device::with_backend_async`] (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn with_backend(kind: BackendKind) -> Result<Device> {
        pollster::block_on(Device::with_backend_async(kind))
    }

    /// Capabilities of every adapter wgpu can see on this machine (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn adapters() -> Vec<Capabilities> {
        crate::backend::gpu::enumerate()
    }

    /// What this device is and what it can do.
    pub fn capabilities(&self) -> &Capabilities {
        self.backend.capabilities()
    }

    /// True for the CPU backend.
    pub fn is_cpu(&self) -> bool {
        self.capabilities().backend == BackendKind::Cpu
    }

    /// Live (buffers, bind groups, compute pipelines) that wgpu counts on this device; `None` on the CPU.
    /// For tests that check that running a plan creates no GPU objects.
    #[doc(hidden)]
    pub fn resource_counts(&self) -> Option<[isize; 3]> {
        self.backend.resource_counts()
    }

    /// Destroys the GPU device (`wgpu::Device::destroy`): a real device loss, for tests. Every later compile on
    /// this device and every run of its plans fails with [`Error::Gpu`]. Does nothing on the CPU.
    #[doc(hidden)]
    pub fn destroy_for_tests(&self) {
        self.backend.destroy_for_tests();
    }

    /// Builds a compute pipeline from `wgsl` (entry point `main`) on the path that `compile` builds its kernels
    /// on, for tests of shader validation errors.
    ///
    /// # Errors
    /// [`Error::Gpu`] when the shader or the pipeline fails validation or the device was lost;
    /// [`Error::Unsupported`] on the CPU.
    #[doc(hidden)]
    pub async fn build_wgsl_for_tests(&self, wgsl: &str) -> Result<()> {
        self.backend.build_wgsl_for_tests(wgsl).await
    }

    /// Places `t` in this device's memory once, as a resident tensor named `name` (the name errors use), for
    /// [`Graph::resident`](crate::Graph::resident). On the CPU backend the values are moved, not copied.
    ///
    /// # Errors
    /// [`Error::LimitExceeded`] when the tensor exceeds the device's largest buffer; [`Error::Gpu`] when the device
    /// was lost.
    pub fn upload(&self, name: &str, t: HostTensor) -> Result<Resident> {
        let (dtype, shape) = (t.dtype(), t.shape.clone());
        let len = t.data.as_bytes().len();
        self.upload_bytes(name, dtype, &shape, Bytes::from_owner(Arc::new(t.data), 0..len)?)
    }

    /// Places raw little-endian `bytes` of a `dtype` tensor of `shape` in this device's memory, as a resident
    /// tensor. On the CPU backend the bytes are used where they are (a memory-mapped file stays mapped); a GPU
    /// copies them into a buffer of its own.
    ///
    /// # Errors
    /// [`Error::BadInput`] naming the tensor when the byte count does not match `dtype` and `shape`;
    /// [`Error::InvalidShape`] for a bad shape; [`Error::LimitExceeded`] when the tensor exceeds the device's
    /// largest buffer; [`Error::Gpu`] when the device was lost.
    pub fn upload_bytes(
        &self,
        name: &str,
        dtype: crate::dtype::DType,
        shape: &[usize],
        bytes: Bytes,
    ) -> Result<Resident> {
        crate::resident::check_bytes(name, dtype, shape, bytes.len())?;
        Ok(Resident { inner: self.backend.upload(name, dtype, shape, bytes, false)? })
    }

    /// A new state tensor named `name`, zeroed, in this device's memory: a KV cache that plans of this device
    /// read through [`Graph::state`](crate::Graph::state) and write with
    /// [`Graph::set_rows`](crate::Graph::set_rows) or [`Graph::copy_into`](crate::Graph::copy_into).
    ///
    /// # Errors
    /// [`Error::InvalidShape`] for a bad shape; [`Error::UnsupportedDType`] for a block type (a state is written by
    /// graph ops, which write f32, f16 and i32); [`Error::LimitExceeded`] when it exceeds the device's largest
    /// buffer; [`Error::Gpu`] when the device was lost.
    pub fn state(&self, name: &str, dtype: crate::dtype::DType, shape: &[usize]) -> Result<State> {
        crate::shape::check_shape("state", shape)?;
        if dtype.is_storage_format() {
            let reason = "a state holds f32, f16 or i32 (graph ops write those)".into();
            return Err(Error::UnsupportedDType { op: "state", dtype, shape: shape.to_vec(), reason });
        }
        let bytes = dtype.bytes_of_shape(shape).ok_or_else(|| Error::InvalidShape {
            op: "state",
            shape: shape.to_vec(),
            reason: "the size in bytes overflows".into(),
        })?;
        let caps = self.capabilities();
        if caps.backend != BackendKind::Cpu && bytes as u64 > caps.max_buffer_bytes {
            let (what, limit) = (format!("state {name} ({dtype} {shape:?})"), caps.max_buffer_bytes);
            return Err(Error::LimitExceeded {
                what,
                size: bytes as u64,
                unit: "bytes",
                limit_name: "max_buffer_size",
                limit,
            });
        }
        // a size the caller chose (a context length): refused, not aborted on, when memory runs out
        // (zeroed lazily: the backend copies what is not zero)
        let zeros = crate::resident::try_zeroed::<u8>(bytes).ok_or_else(|| Error::OutOfMemory {
            what: format!("state {name} ({dtype} {shape:?})"),
            bytes: bytes as u64,
        })?;
        Ok(State { inner: self.backend.upload(name, dtype, shape, Bytes::from_vec(zeros), true)? })
    }

    /// Bytes of the resident and state tensors alive on this device (each counted once, however many plans use
    /// it). A plan's own memory is in its [`PlanStats::memory_bytes`].
    pub fn resident_bytes(&self) -> u64 {
        self.backend.resident_bytes()
    }

    /// Compiles `outputs` of `graph` into a plan for this device, asynchronously.
    ///
    /// # Errors
    /// [`Error::ForeignTensor`] for an output of another graph; [`Error::Unsupported`] when the device cannot
    /// run an op (for example f16 without SHADER_F16); [`Error::LimitExceeded`] when a tensor exceeds the
    /// device's binding size, or a buffer of the plan (an arena, the readback of the outputs) its
    /// `max_buffer_size`; [`Error::Gpu`] when a pipeline fails validation (wgpu's message names the problem;
    /// the failing WGSL is logged at debug level), when the plan's memory cannot be allocated (out of memory),
    /// or when the device was lost (the message says so; a new [`Device`] can then be created and used).
    /// Device faults never panic.
    pub async fn compile_async(&self, graph: &Graph, outputs: &[Tensor], options: &CompileOptions) -> Result<Plan> {
        let exe = self.backend.compile(graph, outputs, options).await?;
        let inputs = exe
            .input_ids()
            .iter()
            .map(|&i| {
                let n = &graph.nodes[i];
                (i, graph.input_name(graph.handle(i)).unwrap_or_default().to_string(), n.dtype, n.layout.shape.clone())
            })
            .collect();
        Ok(Plan { exe, outputs: outputs.len(), graph: graph.id, inputs, device: self.clone() })
    }

    /// Blocking form of [`Device::compile_async`] with default options (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn compile(&self, graph: &Graph, outputs: &[Tensor]) -> Result<Plan> {
        self.compile_with(graph, outputs, &CompileOptions::default())
    }

    /// Blocking form of [`Device::compile_async`] (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn compile_with(&self, graph: &Graph, outputs: &[Tensor], options: &CompileOptions) -> Result<Plan> {
        pollster::block_on(self.compile_async(graph, outputs, options))
    }
}

/// The bytes of `v`, borrowed for as long as what `v` refers to.
fn value_bytes<'v>(v: Value<'v>) -> &'v [u8] {
    match v {
        Value::Host(t) => t.data.as_bytes(),
        Value::F32(s) => bytemuck::cast_slice(s),
        Value::F16(s) => bytemuck::cast_slice(s),
        Value::I32(s) => bytemuck::cast_slice(s),
    }
}

/// A compiled graph: run it as often as needed. Runs create no buffers, pipelines or bind groups.
pub struct Plan {
    exe: Box<dyn Executable>,
    /// Number of outputs.
    outputs: usize,
    graph: u32,
    /// Live inputs: node, name, dtype, shape.
    inputs: Vec<(NodeId, String, crate::dtype::DType, Vec<usize>)>,
    device: Device,
}

impl Plan {
    /// Runs the plan with values for its inputs and returns the outputs, in the order given to `compile`.
    ///
    /// # Errors
    /// [`Error::BadInput`] when an input is missing, given twice, not an input of the graph, or has the wrong
    /// dtype or shape; [`Error::Gpu`] when the device is lost (the message says so, and every later run of
    /// this plan fails the same way at once: create a new [`Device`] and compile again), on an out-of-memory
    /// or validation error, or natively when the GPU does not finish and map the outputs within the bound set
    /// by [`READBACK_TIMEOUT_ENV`](crate::tuning::READBACK_TIMEOUT_ENV) (60 s by default). Device faults never panic,
    /// and a run never waits past that bound.
    pub async fn run_async(&mut self, inputs: &[(Tensor, &HostTensor)]) -> Result<Vec<HostTensor>> {
        let values: Vec<(Tensor, Value)> = inputs.iter().map(|&(t, v)| (t, Value::Host(v))).collect();
        let fetch = vec![Fetch::All; self.outputs];
        Ok(self.run_with_async(&values, &fetch).await?.into_iter().flatten().collect())
    }

    /// Runs the plan with `inputs` as [`Value`]s (host tensors or borrowed slices, so a decode step passes its
    /// token id without building a tensor) and reads back each output as `fetch` says: all of it, a range of rows
    /// (the last position's logits), or nothing (`None`). `fetch` has one entry per output, or none for all.
    ///
    /// # Errors
    /// As [`Plan::run_async`]; [`Error::InvalidArgument`] when `fetch` has another length than the outputs or asks
    /// for rows outside an output; [`Error::BadInput`] when a slice has the wrong number of elements.
    pub async fn run_with_async(
        &mut self,
        inputs: &[(Tensor, Value<'_>)],
        fetch: &[Fetch],
    ) -> Result<Vec<Option<HostTensor>>> {
        let given = self.check_inputs(inputs)?;
        let all = vec![Fetch::All; self.outputs];
        let fetch = if fetch.is_empty() { &all[..] } else { fetch };
        if fetch.len() != self.outputs {
            return Err(Error::InvalidArgument {
                op: "run",
                reason: format!("{} fetches given for {} outputs", fetch.len(), self.outputs),
            });
        }
        self.exe.run(&given, fetch).await
    }

    /// Blocking form of [`Plan::run_with_async`] (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn run_with(&mut self, inputs: &[(Tensor, Value<'_>)], fetch: &[Fetch]) -> Result<Vec<Option<HostTensor>>> {
        pollster::block_on(self.run_with_async(inputs, fetch))
    }

    /// Every input exactly once, of the declared dtype and shape: the node ids and bytes a run takes.
    fn check_inputs<'v>(&self, inputs: &[(Tensor, Value<'v>)]) -> Result<Vec<(NodeId, &'v [u8])>> {
        let mut given: Vec<(NodeId, &'v [u8])> = Vec::new();
        for &(t, v) in inputs {
            let Some((id, name, dtype, shape)) =
                self.inputs.iter().find(|(id, ..)| *id == t.index() && t.graph == self.graph)
            else {
                return Err(Error::BadInput {
                    name: format!("#{}", t.index()),
                    reason: "not an input this plan depends on".into(),
                });
            };
            if v.dtype() != *dtype || v.shape().is_some_and(|s| s != &shape[..]) {
                let got = v.shape().map_or_else(|| format!("{} elements", v.len()), |s| format!("{s:?}"));
                return Err(Error::BadInput {
                    name: name.clone(),
                    reason: format!("expected {dtype} {shape:?}, got {} {got}", v.dtype()),
                });
            }
            if v.len() != shape.iter().product::<usize>() {
                return Err(Error::BadInput {
                    name: name.clone(),
                    reason: format!("{} values given for {shape:?}", v.len()),
                });
            }
            if given.iter().any(|(g, _)| g == id) {
                return Err(Error::BadInput { name: name.clone(), reason: "given twice".into() });
            }
            given.push((*id, value_bytes(v)));
        }
        if let Some((_, name, dtype, shape)) = self.inputs.iter().find(|(id, ..)| !given.iter().any(|(g, _)| g == id)) {
            return Err(Error::BadInput {
                name: name.clone(),
                reason: format!("missing (expected {dtype} {shape:?})"),
            });
        }
        Ok(given)
    }

    /// Blocking form of [`Plan::run_async`] (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn run(&mut self, inputs: &[(Tensor, &HostTensor)]) -> Result<Vec<HostTensor>> {
        pollster::block_on(self.run_async(inputs))
    }

    /// The graph inputs this plan reads (those its outputs depend on), in declaration order.
    pub fn inputs(&self) -> Vec<Tensor> {
        self.inputs.iter().map(|(id, ..)| Tensor { id: *id as u32, graph: self.graph }).collect()
    }

    /// Host time of the last run until its work was submitted (uploads, encoding, submit), in microseconds; on the
    /// CPU backend the whole run. 0 before the first run, and on wasm. From a GPU plan's third run on, the
    /// encoding is done ahead, after the run before (see [`last_encode_ahead_us`](Self::last_encode_ahead_us)),
    /// unless the run's grid differs (a run-time length that changes a dispatch's workgroups).
    pub fn last_host_us(&self) -> f64 {
        self.exe.last_host_us()
    }

    /// Host time the last run spent after submitting its work, encoding the next run's dispatches while the GPU
    /// works, in microseconds (0 on the CPU backend, and for a GPU plan's first run). wgpu submits a command
    /// buffer once: this moves its encoding off the path from a run's call to its GPU work.
    pub fn last_encode_ahead_us(&self) -> f64 {
        self.exe.last_encode_ahead_us()
    }

    /// Times each dispatch of the following runs on the GPU, for [`Plan::last_profile`]: a timestamp query is
    /// written before the first dispatch and after each (Vulkan, DX12, Metal on AMD and Intel, GL with
    /// `GL_ARB_timer_query`; native only). `false` stops. Profiling adds a timestamp per dispatch to the run and
    /// a readback of 8 bytes per dispatch after it.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on the CPU backend and on adapters without timestamp queries inside compute passes
    /// (the browser's WebGPU, Apple GPUs); [`Error::LimitExceeded`] for a plan of more than 4095 dispatches.
    ///
    /// [`Error::Unsupported`]: crate::Error::Unsupported
    /// [`Error::LimitExceeded`]: crate::Error::LimitExceeded
    pub fn set_profiling(&mut self, on: bool) -> Result<()> {
        self.exe.set_profiling(on)
    }

    /// [`Plan::set_profiling`] on each of `plans`, all or none: where one cannot profile, each is switched off
    /// again and its error returned.
    pub(crate) fn set_profiling_all(mut plans: Vec<&mut Plan>, on: bool) -> Result<()> {
        let set = plans.iter_mut().try_for_each(|plan| plan.set_profiling(on));
        if set.is_err() {
            plans.iter_mut().for_each(|plan| drop(plan.set_profiling(false)));
        }
        set
    }

    /// The last profiled run's dispatches in schedule order (those its run-time lengths left no work, as a decode
    /// attention's combine within one split, are left out), each with its kernel (as [`PlanStats::kernels`]
    /// names it) and its GPU time in microseconds, from the timestamp before it to the one after it: the wait at
    /// the barrier before a dispatch counts as its time, so the times add up to the run's time on the GPU. `None`
    /// where the last run was not profiled (or none ran).
    pub fn last_profile(&self) -> Option<Vec<KernelTime>> {
        self.exe.last_profile()
    }

    /// Dispatches, pipelines and memory of this plan.
    pub fn stats(&self) -> PlanStats {
        self.exe.stats()
    }

    /// The device the plan was compiled for.
    pub fn device(&self) -> &Device {
        &self.device
    }
}
