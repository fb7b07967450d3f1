//! `Device`: creating one, what it reports, compiling graphs, uploading weights and making states; and the
//! one-call `matmul`.

use super::convert::{init_console, js_bytes, js_err, parse_backend, parse_dtype, to_usize};
use super::graph::{tensors_of, WebGraph};
use super::plan::WebPlan;
use super::tensors::{WebResident, WebState};
use crate::dtype::DType;
use crate::error::Error;
use crate::options::CompileOptions;
use crate::tensor::HostTensor;
use js_sys::{Array, Float32Array};
use std::cell::RefCell;
use std::collections::HashMap;
use wasm_bindgen::prelude::*;

/// What a device is and what it can do: the adapter's name and the limits the compiler uses. Sizes in bytes.
#[wasm_bindgen(getter_with_clone, inspectable)]
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// `"webgpu"` or `"cpu"`.
    #[wasm_bindgen(readonly)]
    pub backend: String,
    /// The adapter's name as the browser reports it (often empty or generic for privacy), or the CPU's description.
    #[wasm_bindgen(readonly)]
    pub name: String,
    /// `DiscreteGpu`, `IntegratedGpu`, `VirtualGpu`, `Cpu` or `Other`.
    #[wasm_bindgen(readonly, js_name = deviceType)]
    pub device_type: String,
    /// Driver name and version, where reported.
    #[wasm_bindgen(readonly)]
    pub driver: String,
    /// Largest storage-buffer binding (`maxStorageBufferBindingSize`); caps the largest tensor.
    #[wasm_bindgen(readonly, js_name = maxStorageBindingBytes)]
    pub max_storage_binding_bytes: f64,
    /// Largest buffer (`maxBufferSize`).
    #[wasm_bindgen(readonly, js_name = maxBufferBytes)]
    pub max_buffer_bytes: f64,
    /// Workgroup (shared) memory per workgroup (`maxComputeWorkgroupStorageSize`).
    #[wasm_bindgen(readonly, js_name = maxWorkgroupStorageBytes)]
    pub max_workgroup_storage_bytes: u32,
    /// Invocations per workgroup (`maxComputeInvocationsPerWorkgroup`).
    #[wasm_bindgen(readonly, js_name = maxInvocationsPerWorkgroup)]
    pub max_invocations_per_workgroup: u32,
    /// Workgroups per dispatch dimension (`maxComputeWorkgroupsPerDimension`).
    #[wasm_bindgen(readonly, js_name = maxWorkgroupsPerDimension)]
    pub max_workgroups_per_dimension: u32,
    /// Whether WGSL `enable f16;` (`shader-f16`) is available.
    #[wasm_bindgen(readonly, js_name = shaderF16)]
    pub shader_f16: bool,
    /// Whether subgroup operations are available.
    #[wasm_bindgen(readonly)]
    pub subgroups: bool,
    /// Element types the device supports (`float32`, `float16`, `int32`); this API exchanges `float32`.
    #[wasm_bindgen(readonly)]
    pub dtypes: Vec<String>,
}

/// A compute device: the browser's WebGPU adapter or the wasm CPU backend. Create one with
/// [`Device.create`](WebDevice::create); cheap to keep, and shared by every plan compiled for it.
#[wasm_bindgen(js_name = Device)]
pub struct WebDevice {
    pub(super) inner: crate::device::Device,
}

#[wasm_bindgen(js_class = Device)]
impl WebDevice {
    /// Creates a device. `backend` is `"auto"` (default: WebGPU when the browser has an adapter, else the CPU,
    /// with the reason logged to the console), `"webgpu"` (WebGPU or an error, never a fallback) or `"cpu"`.
    ///
    /// Throws (rejects) with the library's message when `backend` is unknown, or when `"webgpu"` was asked
    /// for and the browser has no WebGPU adapter or the device cannot be created.
    pub async fn create(
        #[wasm_bindgen(unchecked_optional_param_type = "BackendName")] backend: Option<String>,
    ) -> Result<WebDevice, JsError> {
        init_console();
        let kind = parse_backend(backend)?;
        let inner = crate::device::Device::with_backend_async(kind).await.map_err(js_err)?;
        Ok(WebDevice { inner })
    }

    /// The backend this device runs on: `"webgpu"` or `"cpu"`.
    #[wasm_bindgen(getter, unchecked_return_type = "\"webgpu\" | \"cpu\"")]
    pub fn backend(&self) -> String {
        self.inner.capabilities().backend.name().to_string()
    }

    /// The adapter's name: its description, else the browser's `vendor / architecture` ("google / swiftshader"), or
    /// the CPU's description.
    #[wasm_bindgen(getter, js_name = adapterName)]
    pub fn adapter_name(&self) -> String {
        self.inner.capabilities().name.clone()
    }

    /// True for the CPU backend.
    #[wasm_bindgen(getter, js_name = isCpu)]
    pub fn is_cpu(&self) -> bool {
        self.inner.is_cpu()
    }

    /// The adapter's name, limits and features.
    pub fn info(&self) -> DeviceInfo {
        let c = self.inner.capabilities();
        DeviceInfo {
            backend: c.backend.name().to_string(),
            name: c.name.clone(),
            device_type: c.device_type.name().to_string(),
            driver: c.driver.clone(),
            max_storage_binding_bytes: c.max_storage_binding_bytes as f64,
            max_buffer_bytes: c.max_buffer_bytes as f64,
            max_workgroup_storage_bytes: c.max_workgroup_storage_bytes,
            max_invocations_per_workgroup: c.max_invocations_per_workgroup,
            max_workgroups_per_dimension: c.max_workgroups_per_dimension,
            shader_f16: c.shader_f16,
            subgroups: c.subgroups,
            dtypes: c.dtypes.iter().map(|d| d.name().to_string()).collect(),
        }
    }

    /// Compiles `outputs` (tensors of `graph`) into a [`Plan`](WebPlan) for this device: pipelines, buffers
    /// and bind groups are made here, once. Nodes no output depends on are dropped.
    ///
    /// The graph stays borrowed until the promise settles: do not add ops to it meanwhile (that throws).
    ///
    /// `options` (every field optional): `matmul`, a matmul kernel name to pin (`"generic"`, a tile shape such
    /// as `"64x64x16"`; the native `WEBTENSOR_MATMUL` names), else the device's choice; `poison`, fill every
    /// non-input tensor with NaN before each run (tests); `noFusion`, one dispatch per op as built.
    ///
    /// Rejects with the library's message when `outputs` is empty or holds a tensor of another graph, when
    /// the device cannot run an op, when a tensor exceeds the device's binding size, when a pipeline fails
    /// to build, or when `options.matmul` names no kernel.
    pub async fn compile(
        &self,
        graph: &WebGraph,
        #[wasm_bindgen(unchecked_param_type = "Tensor[]")] outputs: Array,
        #[wasm_bindgen(unchecked_optional_param_type = "CompileOptions")] options: JsValue,
    ) -> Result<WebPlan, JsError> {
        let options = compile_options(&options)?;
        let outs = tensors_of(&outputs, "outputs")?;
        let g = &graph.inner;
        let output_shapes = outs.iter().map(|&t| g.shape(t).map(<[usize]>::to_vec)).collect::<Result<_, _>>();
        let output_shapes = output_shapes.map_err(js_err)?;
        let output_dtypes = outs.iter().map(|&t| g.dtype(t)).collect::<Result<_, _>>().map_err(js_err)?;
        let plan = self.inner.compile_async(g, &outs, &options).await.map_err(js_err)?;
        Ok(WebPlan::new(plan, g, output_shapes, output_dtypes))
    }

    /// Places a tensor in this device's memory once, as a resident weight named `name`, for `Graph.resident`
    /// in any number of plans of this device. `bytes` are its raw little-endian values (an `ArrayBuffer` or
    /// any typed array: a `Float32Array` for float32, the file's bytes for a block type), copied into wasm
    /// memory and, on WebGPU, into a GPU buffer (the wasm copy is then freed). Freed when the last handle and
    /// plan using it are freed.
    ///
    /// Throws when the dtype is unknown, when the byte count does not match `dtype` and `shape` (naming the
    /// tensor), or when the tensor exceeds the device's largest buffer.
    pub fn upload(
        &self,
        name: &str,
        #[wasm_bindgen(unchecked_param_type = "DTypeName")] dtype: &str,
        #[wasm_bindgen(unchecked_param_type = "number[] | Uint32Array")] shape: Vec<u32>,
        #[wasm_bindgen(unchecked_param_type = "TensorBytes")] bytes: JsValue,
    ) -> Result<WebResident, JsError> {
        let dtype = parse_dtype(dtype)?;
        let bytes = crate::resident::Bytes::from_vec(js_bytes(name, &bytes).map_err(js_err)?);
        let r = self.inner.upload_bytes(name, dtype, &to_usize(&shape), bytes).map_err(js_err)?;
        Ok(WebResident { inner: r })
    }

    /// A new state tensor named `name`, zeroed: a KV cache that plans of this device read through
    /// `Graph.state` and write with `Graph.setRows` and `Graph.copyInto`; it persists across runs.
    ///
    /// Throws for an unknown dtype or a block type (a state holds float32, float16 or int32), a bad shape, or a
    /// size over the device's largest buffer.
    pub fn state(
        &self,
        name: &str,
        #[wasm_bindgen(unchecked_param_type = "DTypeName")] dtype: &str,
        #[wasm_bindgen(unchecked_param_type = "number[] | Uint32Array")] shape: Vec<u32>,
    ) -> Result<WebState, JsError> {
        let dtype = parse_dtype(dtype)?;
        let s = self.inner.state(name, dtype, &to_usize(&shape)).map_err(js_err)?;
        Ok(WebState { inner: s })
    }

    /// Bytes of the resident and state tensors alive on this device, each counted once however many plans use
    /// it (a plan's own memory is in `Plan.stats().memoryBytes`).
    #[wasm_bindgen(getter, js_name = residentBytes)]
    pub fn resident_bytes(&self) -> f64 {
        self.inner.resident_bytes() as f64
    }
}

/// [`CompileOptions`] from a JS `CompileOptions` object (`undefined` or `null`: the defaults).
fn compile_options(o: &JsValue) -> Result<CompileOptions, JsError> {
    let mut options = CompileOptions::default();
    if o.is_undefined() || o.is_null() {
        return Ok(options);
    }
    if !o.is_object() {
        return Err(JsError::new("compile: options must be an object"));
    }
    let get = |k: &str| js_sys::Reflect::get(o, &JsValue::from_str(k)).unwrap_or(JsValue::UNDEFINED);
    let flag = |k: &str| match get(k) {
        v if v.is_undefined() || v.is_null() => Ok(false),
        v => v.as_bool().ok_or_else(|| JsError::new(&format!("compile: options.{k} must be a boolean"))),
    };
    options.poison = flag("poison")?;
    options.no_fusion = flag("noFusion")?;
    match get("matmul") {
        v if v.is_undefined() || v.is_null() => {}
        v => {
            let name = v.as_string().ok_or_else(|| JsError::new("compile: options.matmul must be a kernel name"))?;
            options.matmul = Some(name.parse().map_err(js_err)?);
        }
    }
    Ok(options)
}

// ---- one-call matmul ------------------------------------------------------------------------------

thread_local! {
    /// Devices made by `matmul`, one per backend asked for, reused by later calls.
    static DEVICES: RefCell<HashMap<String, crate::device::Device>> = RefCell::new(HashMap::new());
}

/// `C = A · B` in one call: `a` is `[m, k]`, `b` is `[k, n]`, both row-major f32; resolves to C `[m, n]`,
/// row-major. `backend` is `"auto"` (default), `"webgpu"` or `"cpu"`; the device is created on first use and
/// reused. Builds and compiles a plan each call: for repeated products use `Graph` and `Plan`.
///
/// Rejects with the library's message when a length is not `m*k` / `k*n`, when a size is zero, when the
/// backend is unknown or unavailable, or when the device fails.
#[wasm_bindgen]
pub async fn matmul(
    a: Float32Array,
    b: Float32Array,
    m: u32,
    k: u32,
    n: u32,
    #[wasm_bindgen(unchecked_optional_param_type = "BackendName")] backend: Option<String>,
) -> Result<Float32Array, JsError> {
    init_console();
    let key = backend.clone().unwrap_or_else(|| "auto".into()).to_ascii_lowercase();
    let kind = parse_backend(backend)?;
    let (m, k, n) = (m as usize, k as usize, n as usize);
    for (name, len, shape) in [("a", a.length(), [m, k]), ("b", b.length(), [k, n])] {
        let want = shape[0] as u64 * shape[1] as u64;
        if len as u64 != want {
            let reason = format!(
                "matmul(a, b, m = {m}, k = {k}, n = {n}): {name} has {len} values, {} × {} = {want} expected",
                shape[0], shape[1]
            );
            return Err(js_err(Error::BadInput { name: name.into(), reason }));
        }
    }
    let av = HostTensor::f32(&[m, k], a.to_vec()).map_err(js_err)?;
    let bv = HostTensor::f32(&[k, n], b.to_vec()).map_err(js_err)?;
    let cached = DEVICES.with(|d| d.borrow().get(&key).cloned());
    let device = match cached {
        Some(d) => d,
        None => {
            let d = crate::device::Device::with_backend_async(kind).await.map_err(js_err)?;
            DEVICES.with(|m| m.borrow_mut().insert(key, d.clone()));
            d
        }
    };
    let mut g = crate::graph::Graph::new();
    let ta = g.input("a", DType::F32, &[m, k]).map_err(js_err)?;
    let tb = g.input("b", DType::F32, &[k, n]).map_err(js_err)?;
    let c = g.matmul(ta, tb).map_err(js_err)?;
    let mut plan = device.compile_async(&g, &[c], &CompileOptions::default()).await.map_err(js_err)?;
    let out = plan.run_async(&[(ta, &av), (tb, &bv)]).await.map_err(js_err)?;
    Ok(Float32Array::from(out[0].data.to_f32().as_slice()))
}
