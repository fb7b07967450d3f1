//! JavaScript bindings (wasm32 only): a thin wasm-bindgen layer over [`Device`](crate::Device),
//! [`Graph`](crate::Graph) and [`Plan`](crate::Plan). It only marshals: shapes come in as `number[]`, values as
//! `Float32Array`, results go out as `Float32Array`, and every library error becomes a JS exception (an
//! `Error` whose `message` is the library's message). No GPU logic lives here.
//!
//! Everything that touches the device is async and returns a `Promise`; nothing blocks the browser's main
//! thread on the GPU. The CPU backend runs on the calling thread (run it in a Web Worker for big sizes).
//!
//! Tensors are f32 in this API: browsers' WebGPU adapters often lack `shader-f16`. Outputs of other dtypes
//! (`argmax`'s i32) are converted to f32 values when read back.
//!
//! ```js
//! import init, { Device, Graph, matmul } from "./pkg/webtensor.js";
//! await init();
//! const dev = await Device.create("auto");          // WebGPU when present, else the CPU
//! console.log(dev.backend, dev.adapterName, dev.info().maxStorageBindingBytes);
//! const g = new Graph();
//! const a = g.input("a", [4, 2]);
//! const b = g.input("b", [3, 2]);
//! const c = g.matmul(b, g.t(a));                     // [3, 4] = B·Aᵀ (ggml_mul_mat(A, B))
//! const plan = await dev.compile(g, [c]);
//! const [out] = await plan.run({ a: new Float32Array([2, 8, 5, 1, 4, 2, 8, 6]),
//!                                b: new Float32Array([10, 5, 9, 9, 5, 4]) });
//! // out = 60 55 50 110 / 90 54 54 126 / 42 29 28 64
//! const c2 = await matmul(x, y, m, k, n, "cpu");     // one call: [m, k] · [k, n] -> [m, n]
//! ```

use crate::{BackendKind, CompileOptions, DType, Data, Error, HostTensor};
use js_sys::{Array, Float32Array, Object, Reflect};
use std::cell::RefCell;
use std::collections::HashMap;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/** A backend: `"webgpu"` (the browser's GPU), `"cpu"` (the wasm CPU backend) or `"auto"` (WebGPU when an
 *  adapter exists, else the CPU). */
export type BackendName = "auto" | "webgpu" | "cpu";
/** Values for a plan's inputs: an object keyed by input name, or an array in the order of `Plan.inputNames`.
 *  Each value is a row-major `Float32Array` with exactly as many elements as the input's shape holds. */
export type PlanInputs = Record<string, Float32Array> | Float32Array[];
"#;

fn js_err(e: Error) -> JsError {
    JsError::new(&e.to_string())
}

fn to_usize(shape: &[u32]) -> Vec<usize> {
    shape.iter().map(|&d| d as usize).collect()
}

fn shape_array(shape: &[usize]) -> Array {
    shape.iter().map(|&d| JsValue::from(d as u32)).collect()
}

/// Routes `log` warnings and errors, and panic messages, to the browser console (installed once, on first use).
/// The panic hook chains to the one installed before it.
fn init_console() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if std::thread::panicking() {
        return;
    }
    ONCE.call_once(|| {
        struct Console;
        impl log::Log for Console {
            fn enabled(&self, m: &log::Metadata) -> bool {
                m.level() <= log::Level::Warn
            }
            fn log(&self, r: &log::Record) {
                if self.enabled(r.metadata()) {
                    let msg = JsValue::from(format!("{}", r.args()));
                    if r.level() == log::Level::Error {
                        web_sys::console::error_1(&msg);
                    } else {
                        web_sys::console::warn_1(&msg);
                    }
                }
            }
            fn flush(&self) {}
        }
        static LOGGER: Console = Console;
        if log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(log::LevelFilter::Warn);
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            web_sys::console::error_1(&JsValue::from(format!("webtensor panicked: {info}")));
            previous(info);
        }));
    });
}

fn parse_backend(backend: Option<String>) -> Result<BackendKind, JsError> {
    let kind: BackendKind = backend.as_deref().unwrap_or("auto").parse().map_err(js_err)?;
    match kind {
        BackendKind::Auto | BackendKind::Cpu | BackendKind::WebGpu => Ok(kind),
        other => Err(JsError::new(&format!(
            "no device: backend {other:?} is not available in the browser (use \"auto\", \"webgpu\" or \"cpu\")"
        ))),
    }
}

// ---- device ---------------------------------------------------------------------------------------

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
    inner: crate::Device,
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
        let inner = crate::Device::with_backend_async(kind).await.map_err(js_err)?;
        Ok(WebDevice { inner })
    }

    /// The backend this device runs on: `"webgpu"` or `"cpu"`.
    #[wasm_bindgen(getter, unchecked_return_type = "\"webgpu\" | \"cpu\"")]
    pub fn backend(&self) -> String {
        self.inner.capabilities().backend.name().to_string()
    }

    /// The adapter's name (the browser may report an empty or generic name), or the CPU's description.
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
    /// Rejects with the library's message when `outputs` is empty or holds a tensor of another graph, when
    /// the device cannot run an op, when a tensor exceeds the device's binding size, or when a pipeline fails
    /// to build.
    pub async fn compile(
        &self,
        graph: &WebGraph,
        #[wasm_bindgen(unchecked_param_type = "Tensor[]")] outputs: Array,
    ) -> Result<WebPlan, JsError> {
        let outs = tensors_of(&outputs, "outputs")?;
        let g = &graph.inner;
        let output_shapes = outs.iter().map(|&t| g.shape(t).map(<[usize]>::to_vec)).collect::<Result<_, _>>();
        let output_shapes = output_shapes.map_err(js_err)?;
        let plan = self.inner.compile_async(g, &outs, &CompileOptions::default()).await.map_err(js_err)?;
        // The plan's own inputs (those the outputs depend on), in declaration order.
        let inputs = plan
            .inputs()
            .into_iter()
            .map(|t| {
                let name = g.input_name(t).unwrap_or_default().to_string();
                (name, t, g.shape(t).map(<[usize]>::to_vec).unwrap_or_default())
            })
            .collect();
        Ok(WebPlan { inner: RefCell::new(Some(plan)), inputs, output_shapes })
    }
}

// ---- graph ----------------------------------------------------------------------------------------

/// A handle to a tensor of a [`Graph`](WebGraph), returned by its op methods. Holds no data.
#[wasm_bindgen(js_name = Tensor)]
#[derive(Clone, Copy, Debug)]
pub struct WebTensor {
    inner: crate::Tensor,
}

#[wasm_bindgen(js_class = Tensor)]
impl WebTensor {
    /// Position of the node in its graph, in creation order.
    #[wasm_bindgen(getter)]
    pub fn index(&self) -> u32 {
        self.inner.id
    }

    /// Identifier of the graph that made this tensor (used to read `Tensor[]` arguments; a tensor of another
    /// graph is rejected).
    #[wasm_bindgen(getter, js_name = graphId)]
    pub fn graph_id(&self) -> u32 {
        self.inner.graph
    }
}

/// Reads a JS array of `Tensor` objects without taking them over (they stay usable).
fn tensors_of(arr: &Array, what: &str) -> Result<Vec<crate::Tensor>, JsError> {
    arr.iter()
        .enumerate()
        .map(|(i, v)| {
            let field = |k: &str| Reflect::get(&v, &JsValue::from_str(k)).ok().and_then(|x| x.as_f64());
            match (field("index"), field("graphId")) {
                (Some(id), Some(graph)) if v.is_object() => Ok(crate::Tensor { id: id as u32, graph: graph as u32 }),
                _ => Err(JsError::new(&format!("{what}[{i}] is not a Tensor"))),
            }
        })
        .collect()
}

/// A tensor graph under construction: declare inputs, chain ops, then [`Device.compile`](WebDevice::compile)
/// it. Every op validates its operands at once and throws with the library's message (naming the op and the
/// shapes) when they do not fit. Shapes are numpy order (outermost first), rank 0 to 4; a negative axis counts
/// from the end. All tensors are f32.
#[wasm_bindgen(js_name = Graph)]
#[derive(Default)]
pub struct WebGraph {
    inner: crate::Graph,
}

type R = Result<WebTensor, JsError>;

fn wrap(r: crate::Result<crate::Tensor>) -> R {
    r.map(|inner| WebTensor { inner }).map_err(js_err)
}

#[wasm_bindgen(js_class = Graph)]
impl WebGraph {
    /// An empty graph.
    #[wasm_bindgen(constructor)]
    pub fn new() -> WebGraph {
        WebGraph::default()
    }

    /// Number of nodes recorded so far (views included).
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> u32 {
        self.inner.len() as u32
    }

    /// Shape of `x` (numpy order). Throws for a tensor of another graph.
    #[wasm_bindgen(unchecked_return_type = "number[]")]
    pub fn shape(&self, x: &WebTensor) -> Result<Array, JsError> {
        self.inner.shape(x.inner).map(shape_array).map_err(js_err)
    }

    /// Declares an f32 input named `name` of `shape`; its values are given to each `Plan.run`.
    /// Throws for rank over 4 or a duplicate name (rank 0 is a scalar; a dim of 0 makes an empty tensor).
    pub fn input(
        &mut self,
        name: &str,
        #[wasm_bindgen(unchecked_param_type = "number[] | Uint32Array")] shape: Vec<u32>,
    ) -> R {
        wrap(self.inner.input(name, DType::F32, &to_usize(&shape)))
    }

    // ---- views

    /// The same elements with a new shape (`torch.reshape`). Throws when element counts differ.
    pub fn reshape(
        &mut self,
        x: &WebTensor,
        #[wasm_bindgen(unchecked_param_type = "number[] | Uint32Array")] shape: Vec<u32>,
    ) -> R {
        wrap(self.inner.reshape(x.inner, &to_usize(&shape)))
    }
    /// Reorders dims: `out.shape[i] = x.shape[dims[i]]` (`torch.permute`). A view.
    pub fn permute(
        &mut self,
        x: &WebTensor,
        #[wasm_bindgen(unchecked_param_type = "number[] | Uint32Array")] dims: Vec<u32>,
    ) -> R {
        wrap(self.inner.permute(x.inner, &to_usize(&dims)))
    }
    /// Swaps axes `a` and `b` (`torch.transpose`). A view.
    pub fn transpose(&mut self, x: &WebTensor, a: i32, b: i32) -> R {
        wrap(self.inner.transpose(x.inner, a as isize, b as isize))
    }
    /// Swaps the last two axes (a view; `matmul(x, t(w))` reads `w` in place). Throws for rank 1.
    pub fn t(&mut self, x: &WebTensor) -> R {
        wrap(self.inner.t(x.inner))
    }
    /// `x[.., start..end, ..]` along `axis`. A view. Throws for an empty or out-of-bounds range.
    pub fn slice(&mut self, x: &WebTensor, axis: i32, start: u32, end: u32) -> R {
        wrap(self.inner.slice(x.inner, axis as isize, start as usize, end as usize))
    }
    /// Stretches `x` to `shape` by numpy broadcasting. A view.
    #[wasm_bindgen(js_name = broadcastTo)]
    pub fn broadcast_to(
        &mut self,
        x: &WebTensor,
        #[wasm_bindgen(unchecked_param_type = "number[] | Uint32Array")] shape: Vec<u32>,
    ) -> R {
        wrap(self.inner.broadcast_to(x.inner, &to_usize(&shape)))
    }
    /// A contiguous copy of `x`.
    pub fn contiguous(&mut self, x: &WebTensor) -> R {
        wrap(self.inner.contiguous(x.inner))
    }
    /// Joins `xs` along `axis` (`numpy.concatenate`). Throws when other dims differ.
    pub fn concat(&mut self, #[wasm_bindgen(unchecked_param_type = "Tensor[]")] xs: Array, axis: i32) -> R {
        let xs = tensors_of(&xs, "xs")?;
        wrap(self.inner.concat(&xs, axis as isize))
    }

    // ---- matmul

    /// `numpy.matmul`: A `[..., M, K]` · B `[..., K, N]` → `[..., M, N]`, batch dims broadcast; either operand
    /// may be a view such as `t(w)`. Throws when K differs. ggml's `ggml_mul_mat(a, b)` is `matmul(b, t(a))`.
    pub fn matmul(&mut self, a: &WebTensor, b: &WebTensor) -> R {
        wrap(self.inner.matmul(a.inner, b.inner))
    }

    // ---- elementwise, two operands (numpy broadcasting; throws when shapes do not broadcast)

    /// `a + b`.
    pub fn add(&mut self, a: &WebTensor, b: &WebTensor) -> R {
        wrap(self.inner.add(a.inner, b.inner))
    }
    /// `a - b`.
    pub fn sub(&mut self, a: &WebTensor, b: &WebTensor) -> R {
        wrap(self.inner.sub(a.inner, b.inner))
    }
    /// `a * b` (elementwise).
    pub fn mul(&mut self, a: &WebTensor, b: &WebTensor) -> R {
        wrap(self.inner.mul(a.inner, b.inner))
    }
    /// `a / b` (IEEE: x/0 = ±Infinity).
    pub fn div(&mut self, a: &WebTensor, b: &WebTensor) -> R {
        wrap(self.inner.div(a.inner, b.inner))
    }

    // ---- elementwise, one operand: one method per row of the unary table (below), and these

    /// Any op of the unary table by name (`"gelu_erf"`), with its f32 parameters (`scale`: `[s]`, `clamp`:
    /// `[lo, hi]`). Throws for an unknown name or a wrong parameter count.
    pub fn unary(&mut self, name: &str, x: &WebTensor, params: Option<Vec<f32>>) -> R {
        let op: crate::UnaryOp = name.parse().map_err(js_err)?;
        wrap(self.inner.unary(op, x.inner, &params.unwrap_or_default()))
    }
    /// `x * s` (ggml_scale).
    pub fn scale(&mut self, x: &WebTensor, s: f32) -> R {
        wrap(self.inner.scale(x.inner, s))
    }
    /// `min(max(x, lo), hi)` (`torch.clamp`).
    pub fn clamp(&mut self, x: &WebTensor, lo: f32, hi: f32) -> R {
        wrap(self.inner.clamp(x.inner, lo, hi))
    }

    // ---- gated linear units (the GLU table)

    /// `act(a) · b` for the GLU op named `name` (`"swiglu"`, `"geglu"`, `"geglu_erf"`, `"geglu_quick"`), split
    /// form; throws for an unknown name.
    pub fn glu(&mut self, name: &str, a: &WebTensor, b: &WebTensor) -> R {
        wrap(self.inner.glu(glu_op(name)?, a.inner, b.inner))
    }
    /// The fused form of [`glu`](WebGraph::glu): the last axis of `x` halved into gate and value.
    #[wasm_bindgen(js_name = gluFused)]
    pub fn glu_fused(&mut self, name: &str, x: &WebTensor) -> R {
        wrap(self.inner.glu_fused(glu_op(name)?, x.inner))
    }
    /// `silu(a) · b` (LLaMA's feed-forward gate).
    pub fn swiglu(&mut self, a: &WebTensor, b: &WebTensor) -> R {
        wrap(self.inner.swiglu(a.inner, b.inner))
    }
    /// `gelu(a) · b`.
    pub fn geglu(&mut self, a: &WebTensor, b: &WebTensor) -> R {
        wrap(self.inner.geglu(a.inner, b.inner))
    }

    // ---- rows (last axis)

    /// `softmax(x)` over the last axis.
    pub fn softmax(&mut self, x: &WebTensor) -> R {
        wrap(self.inner.softmax(x.inner))
    }
    /// `softmax(x·scale + mask)` over the last axis (ggml_soft_max_ext); `mask` (optional) must broadcast to
    /// `x`'s shape, e.g. `[S, N]` for a causal mask. A row that is all −Infinity gives zeros.
    #[wasm_bindgen(js_name = softmaxExt)]
    pub fn softmax_ext(&mut self, x: &WebTensor, mask: Option<WebTensor>, scale: f32) -> R {
        wrap(self.inner.softmax_ext(x.inner, mask.map(|m| m.inner), scale))
    }
    /// `x / √(mean(x²) + eps)` over the last axis (ggml_rms_norm; multiply by a weight with `mul`).
    #[wasm_bindgen(js_name = rmsNorm)]
    pub fn rms_norm(&mut self, x: &WebTensor, eps: f32) -> R {
        wrap(self.inner.rms_norm(x.inner, eps))
    }
    /// `(x − mean) / √(var + eps)` over the last axis, biased variance (ggml_norm; layer norm without weight
    /// and bias).
    #[wasm_bindgen(js_name = layerNorm)]
    pub fn layer_norm(&mut self, x: &WebTensor, eps: f32) -> R {
        wrap(self.inner.layer_norm(x.inner, eps))
    }
    /// Sum over the last axis, kept as size 1.
    pub fn sum(&mut self, x: &WebTensor) -> R {
        wrap(self.inner.sum(x.inner))
    }
    /// Mean over the last axis, kept as size 1.
    pub fn mean(&mut self, x: &WebTensor) -> R {
        wrap(self.inner.mean(x.inner))
    }
    /// Maximum over the last axis, kept as size 1.
    pub fn max(&mut self, x: &WebTensor) -> R {
        wrap(self.inner.max(x.inner))
    }
    /// Index of the first maximum over the last axis, kept as size 1 (read back as f32 values).
    pub fn argmax(&mut self, x: &WebTensor) -> R {
        wrap(self.inner.argmax(x.inner))
    }
}

/// The GLU op named `name`.
fn glu_op(name: &str) -> Result<crate::GluOp, JsError> {
    crate::GluOp::ALL
        .iter()
        .copied()
        .find(|op| op.name() == name)
        .ok_or_else(|| JsError::new(&format!("glu: unknown GLU op '{name}'")))
}

// One JS method per parameterless row of the unary table (`neg`, `geluErf`, ...), each in its own impl block so
// that wasm-bindgen sees complete methods.
macro_rules! unary_js_method {
    (0, $method:ident, $js:literal, $doc:literal) => {
        #[wasm_bindgen(js_class = Graph)]
        impl WebGraph {
            #[doc = $doc]
            #[wasm_bindgen(js_name = $js)]
            pub fn $method(&mut self, x: &WebTensor) -> R {
                wrap(self.inner.$method(x.inner))
            }
        }
    };
    ($params:literal, $($rest:tt)*) => {};
}

macro_rules! unary_js_methods {
    ($(($var:ident, $method:ident, $js:literal, $acc:ident, |$x:ident, $a:ident, $b:ident| $cpu:expr,
        $wgsl:literal, $doc:literal, $params:tt))*) => {
        $(unary_js_method!($params, $method, $js, $doc);)*
    };
}
crate::ops::for_each_unary!(unary_js_methods);

// ---- plan -----------------------------------------------------------------------------------------

/// Counts that describe a compiled plan.
#[wasm_bindgen(inspectable)]
#[derive(Clone, Copy, Debug)]
pub struct PlanStats {
    /// Kernel launches per run (GPU dispatches or CPU kernel calls).
    #[wasm_bindgen(readonly)]
    pub dispatches: u32,
    /// Distinct compute pipelines (0 on the CPU).
    #[wasm_bindgen(readonly)]
    pub pipelines: u32,
    /// Device memory the plan holds for tensors, in bytes.
    #[wasm_bindgen(readonly, js_name = memoryBytes)]
    pub memory_bytes: f64,
    /// Buffers created at compile time.
    #[wasm_bindgen(readonly)]
    pub buffers: u32,
}

/// A compiled graph: run it as often as needed; runs create no buffers or pipelines. Made by
/// [`Device.compile`](WebDevice::compile).
#[wasm_bindgen(js_name = Plan)]
pub struct WebPlan {
    /// `None` while a run is in progress.
    inner: RefCell<Option<crate::Plan>>,
    /// The inputs the outputs depend on: name, handle, shape.
    inputs: Vec<(String, crate::Tensor, Vec<usize>)>,
    output_shapes: Vec<Vec<usize>>,
}

#[wasm_bindgen(js_class = Plan)]
impl WebPlan {
    /// Names of the inputs `run` expects, in declaration order (inputs no output depends on are left out).
    #[wasm_bindgen(getter, js_name = inputNames)]
    pub fn input_names(&self) -> Vec<String> {
        self.inputs.iter().map(|(n, ..)| n.clone()).collect()
    }

    /// Shapes of those inputs, in the same order.
    #[wasm_bindgen(getter, js_name = inputShapes, unchecked_return_type = "number[][]")]
    pub fn input_shapes(&self) -> Array {
        self.inputs.iter().map(|(_, _, s)| JsValue::from(shape_array(s))).collect()
    }

    /// Shapes of the outputs, in the order given to `compile`.
    #[wasm_bindgen(getter, js_name = outputShapes, unchecked_return_type = "number[][]")]
    pub fn output_shapes(&self) -> Array {
        self.output_shapes.iter().map(|s| JsValue::from(shape_array(s))).collect()
    }

    /// Dispatches, pipelines and memory of this plan. Throws while a run is in progress.
    pub fn stats(&self) -> Result<PlanStats, JsError> {
        let guard = self.inner.borrow();
        let plan = guard.as_ref().ok_or_else(busy)?;
        let s = plan.stats();
        Ok(PlanStats {
            dispatches: s.dispatches as u32,
            pipelines: s.pipelines as u32,
            memory_bytes: s.memory_bytes as f64,
            buffers: s.buffers as u32,
        })
    }

    /// Runs the plan and resolves to its outputs, in the order given to `compile`, each a new row-major
    /// `Float32Array` (see `outputShapes`).
    ///
    /// `inputs` holds one `Float32Array` per name in `inputNames`: an object keyed by name, or an array in that
    /// order. Rejects with the library's message when an input is missing, unknown, not a `Float32Array`, or of
    /// the wrong length, when the device fails or is lost, or when this plan is already running (await the
    /// previous run first; different plans may run concurrently).
    pub async fn run(
        &self,
        #[wasm_bindgen(unchecked_param_type = "PlanInputs")] inputs: JsValue,
    ) -> Result<Vec<Float32Array>, JsError> {
        let values = self.collect_inputs(&inputs)?;
        let mut plan = self.inner.borrow_mut().take().ok_or_else(busy)?;
        let given: Vec<(crate::Tensor, &HostTensor)> = values.iter().map(|(t, v)| (*t, v)).collect();
        let out = plan.run_async(&given).await;
        *self.inner.borrow_mut() = Some(plan);
        let out = out.map_err(js_err)?;
        Ok(out
            .iter()
            .map(|t| match &t.data {
                Data::F32(v) => Float32Array::from(v.as_slice()),
                other => Float32Array::from(other.to_f32().as_slice()),
            })
            .collect())
    }
}

fn busy() -> JsError {
    JsError::new("this plan is already running: await the previous run() before starting another")
}

impl WebPlan {
    fn collect_inputs(&self, inputs: &JsValue) -> Result<Vec<(crate::Tensor, HostTensor)>, JsError> {
        let value_of = |name: &str, v: JsValue| -> Result<Vec<f32>, JsError> {
            v.dyn_into::<Float32Array>()
                .map(|a| a.to_vec())
                .map_err(|_| js_err(Error::BadInput { name: name.into(), reason: "must be a Float32Array".into() }))
        };
        let mut out = Vec::with_capacity(self.inputs.len());
        if let Some(arr) = inputs.dyn_ref::<Array>() {
            if arr.length() as usize != self.inputs.len() {
                return Err(JsError::new(&format!(
                    "run: expected {} input arrays (for {:?}), got {}",
                    self.inputs.len(),
                    self.input_names(),
                    arr.length()
                )));
            }
            for ((name, t, shape), v) in self.inputs.iter().zip(arr.iter()) {
                out.push((*t, host(name, shape, value_of(name, v)?)?));
            }
        } else if inputs.is_object() {
            let obj: &Object = inputs.unchecked_ref();
            for key in Object::keys(obj).iter() {
                let key = key.as_string().unwrap_or_default();
                if !self.inputs.iter().any(|(n, ..)| *n == key) {
                    return Err(js_err(Error::BadInput {
                        name: key,
                        reason: format!("not an input this plan depends on (inputs: {:?})", self.input_names()),
                    }));
                }
            }
            for (name, t, shape) in &self.inputs {
                let v = Reflect::get(obj, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED);
                if v.is_undefined() {
                    return Err(js_err(Error::BadInput {
                        name: name.clone(),
                        reason: format!("missing (expected float32 {shape:?})"),
                    }));
                }
                out.push((*t, host(name, shape, value_of(name, v)?)?));
            }
        } else {
            return Err(JsError::new("run: inputs must be an object keyed by input name or an array of Float32Array"));
        }
        Ok(out)
    }
}

/// Input `name`'s values as a tensor of `shape`, or an error saying how many values it has and needs.
fn host(name: &str, shape: &[usize], v: Vec<f32>) -> Result<HostTensor, JsError> {
    let want: usize = shape.iter().product();
    if v.len() != want {
        let reason = format!("has {} values, its shape {shape:?} holds {want}", v.len());
        return Err(js_err(Error::BadInput { name: name.into(), reason }));
    }
    HostTensor::f32(shape, v).map_err(js_err)
}

// ---- one-call matmul ------------------------------------------------------------------------------

thread_local! {
    /// Devices made by `matmul`, one per backend asked for, reused by later calls.
    static DEVICES: RefCell<HashMap<String, crate::Device>> = RefCell::new(HashMap::new());
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
            let d = crate::Device::with_backend_async(kind).await.map_err(js_err)?;
            DEVICES.with(|m| m.borrow_mut().insert(key, d.clone()));
            d
        }
    };
    let mut g = crate::Graph::new();
    let ta = g.input("a", DType::F32, &[m, k]).map_err(js_err)?;
    let tb = g.input("b", DType::F32, &[k, n]).map_err(js_err)?;
    let c = g.matmul(ta, tb).map_err(js_err)?;
    let mut plan = device.compile_async(&g, &[c], &CompileOptions::default()).await.map_err(js_err)?;
    let out = plan.run_async(&[(ta, &av), (tb, &bv)]).await.map_err(js_err)?;
    Ok(Float32Array::from(out[0].data.to_f32().as_slice()))
}
