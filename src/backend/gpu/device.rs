//! A wgpu device: adapter and device setup with the adapter's real limits, the facts about the adapter
//! ([`capabilities`]), a pipeline cache keyed by [`KernelKey`], and the device's fault handling (loss, polls, the
//! GL serial lock).

use super::kernel::{KernelKey, MatVecReduce};
use super::target::{coop_fragment, preferred_matvec, GpuTarget};
use crate::backend::gpu::config::{decode_split_override, MatmulKernels};
use crate::caps::{BackendKind, Capabilities, DeviceType};
use crate::dtype::DType;
use crate::error::{Error, Result};
#[cfg(not(target_arch = "wasm32"))]
use crate::tuning::SHADER_CHECKS_ENV;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Whether the matmul kernels keep wgpu's runtime checks on a device of `backend` (see [`SHADER_CHECKS_ENV`]).
fn shader_checks(backend: BackendKind) -> bool {
    #[cfg(not(target_arch = "wasm32"))]
    match std::env::var(SHADER_CHECKS_ENV).as_deref() {
        Ok("off") => return false,
        Ok("on") => return true,
        Ok(v) if !v.is_empty() => log::warn!("webtensor: {SHADER_CHECKS_ENV}={v} is neither on nor off; ignored"),
        _ => {}
    }
    backend != BackendKind::Vulkan
}

/// A wgpu device and everything shared by the plans compiled for it.
pub(crate) struct GpuBackend {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub caps: Capabilities,
    pipelines: Mutex<HashMap<KernelKey, Arc<wgpu::ComputePipeline>>>,
    pub lost: Arc<AtomicBool>,
    /// This device's identity (resident and state tensors record it).
    pub id: u64,
    /// Bytes of the live resident and state tensors on this device.
    pub resident: Arc<std::sync::atomic::AtomicU64>,
    /// Held by compile, run and plan drops on GL: wgpu's GL backend panics when a thread waits more than a few
    /// seconds (6 in wgpu 30) for the GL context, which a long dispatch on a slow adapter holds, so GL work is
    /// serialized here (reentrant: tuning compiles and runs plans inside a compile).
    #[cfg(not(target_arch = "wasm32"))]
    serial: Option<parking_lot::ReentrantMutex<()>>,
    /// The matmul kernels chosen for this device (tuned on first use), once known.
    pub matmul: Mutex<Option<MatmulKernels>>,
    /// Fragment size of the f16 → f32 cooperative-matrix shape the device was created with (16), if any.
    pub coop_frag: Option<u32>,
    /// Cooperative matrices are emulated in plain WGSL (see [`GpuBackend::with_emulated_coop`]).
    pub coop_emulated: bool,
    /// How one-row matmuls sum each output, where this device prefers a way: serially (one invocation an
    /// output, no barriers) on adapters that run on CPU cores (device type `Cpu`: SwiftShader, llvmpipe); a
    /// reduction the testing hook [`GpuBackend::with_matvec_reduce`] pins; else None (the best the adapter has).
    pub matvec: Option<MatVecReduce>,
    /// The tuner's timed problem (n, repetitions) when a test pins it (see [`GpuBackend::with_profile`]).
    #[cfg(not(target_arch = "wasm32"))]
    pub tune_problem: Option<(usize, usize)>,
    /// Timestamp queries inside compute passes were granted (native adapters that have them): plans can time
    /// each dispatch on the GPU (`Plan::set_profiling`).
    pub timestamps: bool,
    /// The IQ block types' lookup grids (`wgsl::grid_table`), uploaded on the first plan that reads one.
    grid_table: std::sync::OnceLock<wgpu::Buffer>,
}

/// The features that time dispatches inside a compute pass (native only).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) const TIMESTAMP_FEATURES: wgpu::Features = wgpu::Features::TIMESTAMP_QUERY
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);

/// wgpu's backend set for one of ours.
pub(crate) fn wgpu_backends(kind: BackendKind) -> wgpu::Backends {
    match kind {
        BackendKind::Vulkan => wgpu::Backends::VULKAN,
        BackendKind::Gl => wgpu::Backends::GL,
        BackendKind::Metal => wgpu::Backends::METAL,
        BackendKind::Dx12 => wgpu::Backends::DX12,
        BackendKind::WebGpu => wgpu::Backends::BROWSER_WEBGPU,
        BackendKind::Cpu => wgpu::Backends::empty(),
        BackendKind::Auto => wgpu::Backends::all(),
    }
}

fn backend_kind(b: wgpu::Backend) -> BackendKind {
    match b {
        wgpu::Backend::Vulkan => BackendKind::Vulkan,
        wgpu::Backend::Gl => BackendKind::Gl,
        wgpu::Backend::Metal => BackendKind::Metal,
        wgpu::Backend::Dx12 => BackendKind::Dx12,
        wgpu::Backend::BrowserWebGpu => BackendKind::WebGpu,
        _ => BackendKind::Auto,
    }
}

fn device_type(t: wgpu::DeviceType) -> DeviceType {
    match t {
        wgpu::DeviceType::DiscreteGpu => DeviceType::DiscreteGpu,
        wgpu::DeviceType::IntegratedGpu => DeviceType::IntegratedGpu,
        wgpu::DeviceType::VirtualGpu => DeviceType::VirtualGpu,
        wgpu::DeviceType::Cpu => DeviceType::Cpu,
        wgpu::DeviceType::Other => DeviceType::Other,
    }
}

/// The facts about an adapter that the compiler and `webtensor info` use.
pub(crate) fn capabilities(adapter: &wgpu::Adapter) -> Capabilities {
    let info = adapter.get_info();
    let l = adapter.limits();
    let f = adapter.features();
    #[cfg(not(target_arch = "wasm32"))]
    let coop = if f.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
        adapter
            .cooperative_matrix_properties()
            .iter()
            .map(|p| format!("{}x{}x{} {:?}->{:?}", p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type))
            .collect()
    } else {
        vec![]
    };
    #[cfg(target_arch = "wasm32")]
    let coop = vec![];
    let shader_f16 = f.contains(wgpu::Features::SHADER_F16);
    // f16 without SHADER_F16 is stored packed in u32 words and unpacked in the shader: it runs all the same
    let dtypes = DType::ALL.to_vec();
    Capabilities {
        backend: backend_kind(info.backend),
        name: info.name.clone(),
        device_type: device_type(info.device_type),
        driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
        max_storage_binding_bytes: l.max_storage_buffer_binding_size,
        max_buffer_bytes: l.max_buffer_size,
        max_workgroup_storage_bytes: l.max_compute_workgroup_storage_size,
        max_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
        max_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
        min_storage_offset_alignment: l.min_storage_buffer_offset_alignment,
        min_uniform_offset_alignment: l.min_uniform_buffer_offset_alignment,
        shader_f16,
        subgroups: f.contains(wgpu::Features::SUBGROUP),
        subgroup_size: (info.subgroup_min_size, info.subgroup_max_size),
        cooperative_matrix: coop,
        dtypes,
        unusable: unusable(adapter),
    }
}

/// Why an adapter cannot run webtensor's kernels, if it cannot: no compute shaders (wgpu's downlevel flags: an
/// OpenGL context below 4.3 or GLES below 3.1), or compute limits below WebGPU's guaranteed minimums, which the
/// kernels assume (8 storage buffers per stage, 256 invocations and 16 KiB of workgroup memory per workgroup).
fn unusable(adapter: &wgpu::Adapter) -> Option<String> {
    let flags = adapter.get_downlevel_capabilities().flags;
    let l = adapter.limits();
    let mut missing = Vec::new();
    let info = adapter.get_info();
    let gl_too_old = info.backend == wgpu::Backend::Gl
        && gl_version(&info.driver_info).is_some_and(|(es, v)| v < if es { (3, 1) } else { (4, 3) });
    if !flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS) || gl_too_old {
        // wgpu offers compute on an older GL context with GL_ARB_compute_shader, but its shader translator then
        // writes GLSL of the context's version, which has no compute shaders: the device fails as it is made
        missing
            .push(format!("no compute shaders (OpenGL 4.3 or GLES 3.1 needed; the context is {})", info.driver_info));
    }
    let min = [
        ("max_storage_buffers_per_shader_stage", l.max_storage_buffers_per_shader_stage, 8),
        ("max_compute_invocations_per_workgroup", l.max_compute_invocations_per_workgroup, 256),
        ("max_compute_workgroup_storage_size", l.max_compute_workgroup_storage_size, 16384),
    ];
    for (name, have, need) in min {
        if have < need {
            missing.push(format!("{name} {have} (at least {need} needed)"));
        }
    }
    (!missing.is_empty()).then(|| missing.join(", "))
}

fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    wgpu::Instance::new(desc)
}

/// The version of a GL context from its version string (`4.5 (Core Profile) Mesa 22.3.6`, `3.3.0 NVIDIA
/// 580.159.04`, `OpenGL ES 3.2 Mesa ...`): whether it is GLES, and (major, minor).
fn gl_version(version: &str) -> Option<(bool, (u32, u32))> {
    let (es, rest) = match version.trim().strip_prefix("OpenGL ES ") {
        Some(r) => (true, r),
        None => (false, version.trim()),
    };
    let mut parts = rest.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((es, (major, minor)))
}

/// The adapter of `backends` a high-performance request would get, among those webtensor can run on: a discrete
/// GPU before an integrated one, a virtual one, any other, and a software adapter last.
///
/// # Errors
/// [`Error::NoDevice`] when `kind` has no adapter, or none it has is usable (saying why each is not).
#[cfg(not(target_arch = "wasm32"))]
async fn usable_adapter(inst: &wgpu::Instance, backends: wgpu::Backends, kind: BackendKind) -> Result<wgpu::Adapter> {
    let rank = |t: DeviceType| match t {
        DeviceType::DiscreteGpu => 0,
        DeviceType::IntegratedGpu => 1,
        DeviceType::VirtualGpu => 2,
        DeviceType::Other => 3,
        DeviceType::Cpu => 4,
    };
    let mut unusable = Vec::new();
    let mut best: Option<(u32, wgpu::Adapter)> = None;
    for adapter in inst.enumerate_adapters(backends).await {
        let caps = capabilities(&adapter);
        if let Some(why) = caps.unusable {
            unusable.push(format!("{} ({}) cannot run compute kernels: {why}", caps.name, caps.backend));
        } else if best.as_ref().is_none_or(|(r, _)| rank(caps.device_type) < *r) {
            best = Some((rank(caps.device_type), adapter));
        }
    }
    match best {
        Some((_, adapter)) => Ok(adapter),
        None if unusable.is_empty() => Err(Error::NoDevice(format!("no {kind} adapter"))),
        None => Err(Error::NoDevice(format!("no usable {kind} adapter: {}", unusable.join("; ")))),
    }
}

/// The message of a caught panic (wgpu's).
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "wgpu panicked".into())
}

/// Capabilities of every adapter wgpu finds natively.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn enumerate() -> Vec<Capabilities> {
    let inst = instance(wgpu::Backends::all());
    pollster::block_on(inst.enumerate_adapters(wgpu::Backends::all())).iter().map(capabilities).collect()
}

impl GpuBackend {
    /// Requests a high-performance adapter of `kind` and a device with the adapter's own limits and the
    /// features we use (SHADER_F16, SUBGROUP) where present.
    pub(crate) async fn new(kind: BackendKind) -> Result<GpuBackend> {
        GpuBackend::new_with(kind, true).await
    }

    /// A high-performance adapter of `kind` and what it reports.
    async fn adapter(kind: BackendKind) -> Result<(wgpu::Adapter, Capabilities)> {
        #[cfg(target_arch = "wasm32")]
        if !has_navigator_gpu() {
            // wgpu's WebGPU backend would fail hard without it (Node.js, a worker or browser without WebGPU)
            let msg = "WebGPU is not available here: there is no navigator.gpu (Node.js, or a browser without WebGPU)";
            return Err(Error::NoDevice(msg.into()));
        }
        let backends = wgpu_backends(kind);
        let inst = instance(backends);
        #[cfg(not(target_arch = "wasm32"))]
        let adapter = usable_adapter(&inst, backends, kind).await?;
        #[cfg(target_arch = "wasm32")]
        let adapter = inst
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| Error::NoDevice(format!("no {kind} adapter: {e}")))?;
        #[allow(unused_mut)]
        let mut caps = capabilities(&adapter);
        #[cfg(target_arch = "wasm32")]
        if caps.name.is_empty() {
            caps.name = browser_adapter_name().await;
        }
        Ok((adapter, caps))
    }

    /// A device on `adapter` with its own limits and the features webtensor uses where it has them (subgroups,
    /// timestamps, SHADER_F16 unless `allow_f16` is false, cooperative matrices where they are usable), and the
    /// cooperative-matrix fragment size it then has; `caps` updated to what the device has.
    async fn open(
        adapter: &wgpu::Adapter,
        caps: &mut Capabilities,
        allow_f16: bool,
    ) -> Result<(wgpu::Device, wgpu::Queue, Option<u32>)> {
        let mut wanted = wgpu::Features::SUBGROUP;
        #[cfg(not(target_arch = "wasm32"))]
        if adapter.features().contains(TIMESTAMP_FEATURES) {
            wanted |= TIMESTAMP_FEATURES;
        }
        if allow_f16 {
            wanted |= wgpu::Features::SHADER_F16;
        } else {
            caps.shader_f16 = false;
            caps.name.push_str(" [SHADER_F16 off]");
        }
        let mut coop_frag = if allow_f16 { coop_fragment(caps) } else { None };
        let mut requested = request_device(adapter, wanted, coop_frag.is_some()).await;
        if let (Err(e), Some(_)) = (&requested, coop_frag) {
            // an experimental feature must never cost the device: go on without cooperative matrices
            log::warn!("webtensor: {}: no device with cooperative matrices ({e}); retrying without", caps.name);
            coop_frag = None;
            requested = request_device(adapter, wanted, false).await;
        }
        let (device, queue) = requested
            .map_err(|e| Error::NoDevice(format!("{} ({}): request_device failed: {e}", caps.name, caps.backend)))?;
        Ok((device, queue, coop_frag))
    }

    /// As [`GpuBackend::new`]; `allow_f16 = false` leaves SHADER_F16 off even where the adapter has it, so f16
    /// tensors take the packed path (as on adapters without the feature).
    pub(crate) async fn new_with(kind: BackendKind, allow_f16: bool) -> Result<GpuBackend> {
        let (adapter, mut caps) = GpuBackend::adapter(kind).await?;
        let (device, queue, coop_frag) = GpuBackend::open(&adapter, &mut caps, allow_f16).await?;
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            log::error!("webtensor: device lost ({reason:?}): {msg}");
            flag.store(true, Ordering::SeqCst);
        });
        device.on_uncaptured_error(Arc::new(|e: wgpu::Error| log::error!("webtensor: uncaptured wgpu error: {e}")));
        log::info!("webtensor: using {} ({}, {})", caps.name, caps.backend, caps.device_type);
        #[cfg(not(target_arch = "wasm32"))]
        let serial = (caps.backend == BackendKind::Gl).then(|| parking_lot::ReentrantMutex::new(()));
        let matvec = preferred_matvec(&caps);
        #[cfg(not(target_arch = "wasm32"))]
        let timestamps = device.features().contains(TIMESTAMP_FEATURES);
        #[cfg(target_arch = "wasm32")]
        let timestamps = false;
        Ok(GpuBackend {
            device,
            queue,
            caps,
            pipelines: Mutex::new(HashMap::new()),
            lost,
            id: crate::caps::next_id(),
            resident: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            matmul: Mutex::new(None),
            coop_frag,
            coop_emulated: false,
            matvec,
            #[cfg(not(target_arch = "wasm32"))]
            tune_problem: None,
            timestamps,
            #[cfg(not(target_arch = "wasm32"))]
            serial,
            grid_table: std::sync::OnceLock::new(),
        })
    }

    /// This device with the cooperative-matrix matmul emulated in plain WGSL (16×16×16 fragments, subgroups
    /// of 32 simulated with workgroup barriers), so that the kernel's tiling, layouts, edges and epilogues can be
    /// tested on adapters without cooperative matrices. Needs SHADER_F16 (else the device is returned as is).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn with_emulated_coop(mut self) -> GpuBackend {
        if self.caps.shader_f16 {
            self.coop_frag = Some(16);
            self.coop_emulated = true;
            self.caps.name.push_str(" [cooperative matrices emulated]");
        }
        self
    }

    /// This device taking the decisions an adapter with capabilities `profile` (a recorded profile) takes, where
    /// this adapter can carry them out: its device type (how mat-vecs sum, how many rows a matmul needs before
    /// the tiled kernel, how the tuner's problem looks), shader-f16 and subgroups where both have them (this
    /// adapter's subgroup size), cooperative matrices emulated where the profile has them and `emulate_coop`,
    /// and the smaller of each limit. The tuner times `tune_problem` (n, repetitions) instead of the profile's
    /// own problem. For running the suites' decisions for hardware that is not at hand on lavapipe.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn with_profile(
        mut self,
        profile: &Capabilities,
        emulate_coop: bool,
        tune_problem: (usize, usize),
    ) -> GpuBackend {
        let c = &mut self.caps;
        c.device_type = profile.device_type;
        c.shader_f16 &= profile.shader_f16;
        c.subgroups &= profile.subgroups;
        c.max_storage_binding_bytes = c.max_storage_binding_bytes.min(profile.max_storage_binding_bytes);
        c.max_buffer_bytes = c.max_buffer_bytes.min(profile.max_buffer_bytes);
        c.max_workgroup_storage_bytes = c.max_workgroup_storage_bytes.min(profile.max_workgroup_storage_bytes);
        c.max_invocations_per_workgroup = c.max_invocations_per_workgroup.min(profile.max_invocations_per_workgroup);
        c.max_workgroups_per_dimension = c.max_workgroups_per_dimension.min(profile.max_workgroups_per_dimension);
        c.min_storage_offset_alignment = c.min_storage_offset_alignment.max(profile.min_storage_offset_alignment);
        c.min_uniform_offset_alignment = c.min_uniform_offset_alignment.max(profile.min_uniform_offset_alignment);
        c.name.push_str(&format!(" [profile: {}]", profile.name));
        self.matvec = preferred_matvec(profile);
        self.tune_problem = Some(tune_problem);
        self.coop_frag = None;
        if emulate_coop && coop_fragment(profile).is_some() {
            return self.with_emulated_coop();
        }
        self
    }

    /// This device with one-row matmuls on the mat-vec kernel that splits each output's sum over 32 invocations
    /// (what GPUs run), met through subgroups (where the adapter's fit) or through workgroup memory, so that both
    /// reductions are tested on software adapters too, which otherwise take the serial kernel.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn with_matvec_reduce(mut self, subgroups: bool) -> GpuBackend {
        let (reduce, what) =
            if subgroups { (MatVecReduce::Subgroups, "subgroup") } else { (MatVecReduce::Shared, "workgroup-memory") };
        self.matvec = Some(reduce);
        self.caps.name.push_str(&format!(" [mat-vec {what} reduction]"));
        self
    }

    /// The IQ block types' lookup grids on this device, uploaded on first use (33 KiB).
    pub(crate) fn grid_table(&self) -> &wgpu::Buffer {
        self.grid_table.get_or_init(|| {
            let words = crate::backend::gpu::wgsl::grid_table();
            let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("webtensor IQ grids"),
                size: 4 * words.len() as u64,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            self.queue.write_buffer(&buffer, 0, bytemuck::cast_slice(&words));
            buffer
        })
    }

    /// The cached pipeline for `key`, built by [`GpuBackend::create_pipeline`] on first use.
    /// Whether the device has built `key`'s pipeline already.
    pub(crate) fn has_pipeline(&self, key: &KernelKey) -> bool {
        self.pipelines.lock().unwrap_or_else(|e| e.into_inner()).contains_key(key)
    }

    pub(crate) async fn pipeline(&self, key: &KernelKey) -> Result<Arc<wgpu::ComputePipeline>> {
        if let Some(p) = self.pipelines.lock().unwrap_or_else(|e| e.into_inner()).get(key) {
            return Ok(p.clone());
        }
        if key.uses_f16() && !self.caps.shader_f16 {
            return Err(Error::Unsupported {
                op: format!("{:?}", key.kind),
                backend: format!("{} ({})", self.caps.name, self.caps.backend),
                reason: "f16 tensors need the SHADER_F16 feature, which this adapter lacks".into(),
            });
        }
        let checks = key.kind.as_matmul().is_none() || shader_checks(self.caps.backend);
        let p = Arc::new(self.create_pipeline_with(&key.wgsl(), &format!("{:?}", key.kind), checks).await?);
        self.pipelines.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone(), p.clone());
        Ok(p)
    }

    /// Builds a compute pipeline from the WGSL `src` (entry point `main`, layout derived from the shader)
    /// inside a validation error scope. `what` names the kernel in errors and logs.
    ///
    /// # Errors
    /// [`Error::Gpu`] when the shader or the pipeline fails validation (the message is wgpu's, which names
    /// the problem; the failing WGSL is logged at debug level), or when the device was lost.
    pub(crate) async fn create_pipeline(&self, src: &str, what: &str) -> Result<wgpu::ComputePipeline> {
        self.create_pipeline_with(src, what, true).await
    }

    /// [`GpuBackend::create_pipeline`]; `checks = false` builds the module without wgpu's runtime checks (bounds
    /// clamping, loop bounding), natively — only for kernels whose every access is in bounds by construction
    /// and whose loops end (see [`SHADER_CHECKS_ENV`]).
    async fn create_pipeline_with(&self, src: &str, what: &str, checks: bool) -> Result<wgpu::ComputePipeline> {
        let context = format!("creating the pipeline for {what}");
        self.check_alive(&context)?;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let desc =
            wgpu::ShaderModuleDescriptor { label: Some("webtensor"), source: wgpu::ShaderSource::Wgsl(src.into()) };
        let build = || {
            let module = if checks || cfg!(target_arch = "wasm32") {
                self.device.create_shader_module(desc)
            } else {
                // SAFETY: only the matmul kernels come here (`pipeline`), on Vulkan or when the user opted in. Every
                // global access of theirs is guarded by an explicit `row < M && col < N`-style test against the
                // operand's own layout (whose extent the plan bound), every workgroup and private array index is
                // bounded by compile-time tile constants, and every loop runs to K or a constant.
                unsafe { self.device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
            };
            self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some("webtensor"),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                // Every kernel writes its workgroup memory before reading it, so the zeroing WebGPU requires by
                // default is skipped where the platform allows: on GL, wgpu would write it as an array constructor
                // as long as the array, which Mesa's llvmpipe takes minutes to compile for a 2048-element tile.
                compilation_options: wgpu::PipelineCompilationOptions {
                    zero_initialize_workgroup_memory: false,
                    ..Default::default()
                },
                cache: None,
            })
        };
        // naga's backends have panicked on valid input (cooperative matrices, naga 30): an error, not a panic
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(build));
        let popped = scope.pop().await;
        let pipeline = built.map_err(|panic| {
            let message = panic_message(panic.as_ref());
            log::debug!("webtensor: WGSL that made wgpu panic ({what}):\n{src}");
            Error::Gpu { context: context.clone(), message: format!("wgpu panicked: {message}") }
        })?;
        if let Some(e) = popped {
            log::debug!("webtensor: failing WGSL for {what}:\n{src}");
            return Err(Error::Gpu { context, message: e.to_string() });
        }
        // wgpu reports no errors for work on a lost device, so an empty scope proves nothing then
        self.check_alive(&context)?;
        Ok(pipeline)
    }

    /// What lowering needs to know about this device, with the matmul kernels `matmul`.
    pub(crate) fn target(&self, matmul: MatmulKernels, fusion: bool) -> GpuTarget {
        let mut t = GpuTarget::new(&self.caps, matmul, fusion, self.id);
        t.coop_frag = self.coop_frag;
        t.coop_emulated = self.coop_emulated;
        t.matvec = self.matvec;
        if let Some(keys) = decode_split_override() {
            t.decode_split_min = keys;
        }
        t
    }

    /// `Err(`[`Error::Gpu`]`)` saying that the device was lost, once wgpu has reported the loss. Natively the
    /// device is polled first (without waiting), so that a loss wgpu only reports from a poll (for example
    /// after `wgpu::Device::destroy`) is seen here.
    pub(crate) fn check_alive(&self, context: &str) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        if !self.lost.load(Ordering::SeqCst) {
            // a poll that fails reports the loss through the callback, or fails again in the caller's wait
            let _ = self.poll(wgpu::PollType::Poll);
        }
        if self.lost.load(Ordering::SeqCst) {
            return Err(self.lost_error(context));
        }
        Ok(())
    }

    /// On GL, a guard that serializes this device's work across threads (see `serial`); elsewhere nothing.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn serialize(&self) -> Option<parking_lot::ReentrantMutexGuard<'_, ()>> {
        self.serial.as_ref().map(|m| m.lock())
    }

    fn lost_error(&self, context: &str) -> Error {
        Error::Gpu { context: context.into(), message: "the device was lost; create a new Device".into() }
    }

    /// Polls the device (native only). wgpu panics when a poll meets a device error (for example a GPU that
    /// was reset); that panic is caught here and returned as [`Error::Gpu`], as is a wait that times out.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn poll(&self, poll: wgpu::PollType) -> Result<wgpu::PollStatus> {
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.device.poll(poll)));
        match polled {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(e)) => Err(Error::Gpu { context: "polling the device".into(), message: e.to_string() }),
            Err(panic) => {
                let message = panic_message(panic.as_ref());
                log::error!("webtensor: device poll failed: {message}");
                self.lost.store(true, Ordering::SeqCst);
                Err(self.lost_error("polling the device"))
            }
        }
    }
}

/// The browser's words for its WebGPU adapter, `vendor / architecture` of `GPUAdapterInfo` ("google /
/// swiftshader"), where wgpu's adapter name (the info's description) is empty, as in Chromium; "" when the browser
/// says nothing.
#[cfg(target_arch = "wasm32")]
async fn browser_adapter_name() -> String {
    use wasm_bindgen::JsCast;
    let get = |o: &wasm_bindgen::JsValue, k: &str| {
        js_sys::Reflect::get(o, &k.into()).ok().filter(|v| !v.is_undefined() && !v.is_null())
    };
    let Some(gpu) = get(&js_sys::global().into(), "navigator").and_then(|n| get(&n, "gpu")) else {
        return String::new();
    };
    let request = get(&gpu, "requestAdapter").and_then(|f| f.dyn_into::<js_sys::Function>().ok());
    let Some(promise) = request.and_then(|f| f.call0(&gpu).ok()).and_then(|p| p.dyn_into::<js_sys::Promise>().ok())
    else {
        return String::new();
    };
    let Ok(adapter) = wasm_bindgen_futures::JsFuture::from(promise).await else {
        return String::new();
    };
    let info = get(&adapter, "info");
    let words: Vec<String> = ["vendor", "architecture"]
        .iter()
        .filter_map(|k| info.as_ref().and_then(|i| get(i, k)).and_then(|v| v.as_string()))
        .filter(|s| !s.is_empty())
        .collect();
    words.join(" / ")
}

/// Whether the JS global (a window or a worker) has `navigator.gpu`.
#[cfg(target_arch = "wasm32")]
fn has_navigator_gpu() -> bool {
    let get = |o: &wasm_bindgen::JsValue, k: &str| {
        js_sys::Reflect::get(o, &k.into()).ok().filter(|v| !v.is_undefined() && !v.is_null())
    };
    get(&js_sys::global().into(), "navigator").and_then(|n| get(&n, "gpu")).is_some()
}

/// The device `adapter` gives with its own limits and the `wanted` features it has, plus cooperative matrices when
/// `coop`.
async fn request_device(
    adapter: &wgpu::Adapter,
    wanted: wgpu::Features,
    coop: bool,
) -> std::result::Result<(wgpu::Device, wgpu::Queue), wgpu::RequestDeviceError> {
    let coop_feature = if coop { wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX } else { wgpu::Features::empty() };
    adapter
        .request_device(&wgpu::DeviceDescriptor {
            label: Some("webtensor"),
            required_features: adapter.features() & (wanted | coop_feature),
            required_limits: adapter.limits(),
            // SAFETY: wgpu's experimental features may have implementation bugs (wgpu's words: "may result in
            // undefined behavior when used incorrectly"). They are enabled only when the adapter offers cooperative
            // matrices, and every cooperative-matrix configuration is checked against the CPU backend on the device
            // before a plan may use it (tune.rs).
            experimental_features: if coop {
                unsafe { wgpu::ExperimentalFeatures::enabled() }
            } else {
                wgpu::ExperimentalFeatures::disabled()
            },
            ..Default::default()
        })
        .await
}
