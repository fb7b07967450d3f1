//! A wgpu device: adapter and device setup with the adapter's real limits, the facts about the adapter
//! ([`capabilities`]), a pipeline cache keyed by [`KernelKey`], and the device's fault handling (loss, polls, the
//! GL serial lock).

use super::kernel::{KernelKey, MatVecReduce};
use super::lower::target::GpuTarget;
use crate::caps::{BackendKind, Capabilities, DeviceType};
use crate::gpu::MatmulKernels;
#[cfg(not(target_arch = "wasm32"))]
use crate::gpu::SHADER_CHECKS_ENV;
use crate::{DType, Error, Result};
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
}

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
    }
}

fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    wgpu::Instance::new(desc)
}

/// 16 when the adapter offers the 16×16×16 f16 × f16 → f32 cooperative-matrix shape (see `COOP_CONFIGS`), when
/// it has EXPERIMENTAL_COOPERATIVE_MATRIX, SHADER_F16 and subgroups of exactly 32 invocations (which
/// `matmul_coop.wgsl` assumes).
#[cfg(not(target_arch = "wasm32"))]
fn coop_fragment(adapter: &wgpu::Adapter, caps: &Capabilities) -> Option<u32> {
    use wgpu::CooperativeScalarType as T;
    let f = adapter.features();
    let needed =
        wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
    if !f.contains(needed) || caps.subgroup_size != (32, 32) {
        return None;
    }
    let props = adapter.cooperative_matrix_properties();
    let has = |n: u32| {
        props
            .iter()
            .any(|p| p.m_size == n && p.n_size == n && p.k_size == n && p.ab_type == T::F16 && p.cr_type == T::F32)
    };
    has(16).then_some(16)
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

    /// As [`GpuBackend::new`]; `allow_f16 = false` leaves SHADER_F16 off even where the adapter has it, so f16
    /// tensors take the packed path (as on adapters without the feature).
    pub(crate) async fn new_with(kind: BackendKind, allow_f16: bool) -> Result<GpuBackend> {
        #[cfg(target_arch = "wasm32")]
        if !has_navigator_gpu() {
            // wgpu's WebGPU backend would fail hard without it (Node.js, a worker or browser without WebGPU)
            let msg = "WebGPU is not available here: there is no navigator.gpu (Node.js, or a browser without WebGPU)";
            return Err(Error::NoDevice(msg.into()));
        }
        let backends = wgpu_backends(kind);
        let inst = instance(backends);
        let adapter = inst
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| Error::NoDevice(format!("no {kind:?} adapter: {e}")))?;
        let mut caps = capabilities(&adapter);
        #[cfg(target_arch = "wasm32")]
        if caps.name.is_empty() {
            caps.name = browser_adapter_name().await;
        }
        let mut wanted = wgpu::Features::SUBGROUP;
        if allow_f16 {
            wanted |= wgpu::Features::SHADER_F16;
        } else {
            caps.shader_f16 = false;
            caps.name.push_str(" [SHADER_F16 off]");
        }
        #[cfg(not(target_arch = "wasm32"))]
        let mut coop_frag = if allow_f16 { coop_fragment(&adapter, &caps) } else { None };
        #[cfg(target_arch = "wasm32")]
        let mut coop_frag = None;
        let request = |coop: bool| {
            let features = adapter.features()
                & (wanted
                    | if coop { wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX } else { wgpu::Features::empty() });
            adapter.request_device(&wgpu::DeviceDescriptor {
                label: Some("webtensor"),
                required_features: features,
                required_limits: adapter.limits(),
                // SAFETY: wgpu's experimental features may have implementation bugs (wgpu's words: "may result
                // in undefined behavior when used incorrectly"). They are enabled only when the adapter offers
                // cooperative matrices, and every cooperative-matrix configuration is checked against the CPU
                // backend on the device before a plan may use it (tune.rs).
                experimental_features: if coop {
                    unsafe { wgpu::ExperimentalFeatures::enabled() }
                } else {
                    wgpu::ExperimentalFeatures::disabled()
                },
                ..Default::default()
            })
        };
        let mut requested = request(coop_frag.is_some()).await;
        if let (Err(e), Some(_)) = (&requested, coop_frag) {
            // an experimental feature must never cost the device: go on without cooperative matrices
            log::warn!("webtensor: {}: no device with cooperative matrices ({e}); retrying without", caps.name);
            coop_frag = None;
            requested = request(false).await;
        }
        let (device, queue) = requested
            .map_err(|e| Error::NoDevice(format!("{} ({}): request_device failed: {e}", caps.name, caps.backend)))?;
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
        let matvec = (caps.device_type == DeviceType::Cpu).then_some(MatVecReduce::Serial);
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
            serial,
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
        let checks = !key.kind.is_matmul() || shader_checks(self.caps.backend);
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
        let (lo, hi) = self.caps.subgroup_size;
        let caps = &self.caps;
        GpuTarget {
            max_groups: caps.max_workgroups_per_dimension,
            max_shared: caps.max_workgroup_storage_bytes,
            subgroup_size: (caps.subgroups && lo == hi && lo > 0).then_some(lo),
            matmul,
            coop_frag: self.coop_frag,
            coop_emulated: self.coop_emulated,
            matvec: self.matvec,
            shader_f16: caps.shader_f16,
            max_binding: caps.max_storage_binding_bytes,
            max_buffer: caps.max_buffer_bytes,
            align: (caps.min_storage_offset_alignment as u64).max(256),
            fusion,
            device: self.id,
        }
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
