//! `Plan`: running a compiled graph from JS, with typed inputs and selective readback.

use super::convert::{f32_array, js_err, output_array, shape_array, values_of, write_output};
use crate::dtype::DType;
use crate::error::Error;
use crate::run::Fetch;
use crate::tensor::HostTensor;
use js_sys::{Array, Float32Array, Int32Array, Object, Reflect};
use std::cell::RefCell;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

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
    /// Device memory the plan holds for tensors, in bytes (resident weights and states not included: see
    /// `Device.residentBytes`).
    #[wasm_bindgen(readonly, js_name = memoryBytes)]
    pub memory_bytes: f64,
    /// Buffers created at compile time.
    #[wasm_bindgen(readonly)]
    pub buffers: u32,
}

/// One input of a plan: name, handle, dtype, shape.
pub(super) struct PlanInput {
    pub name: String,
    pub tensor: crate::graph::Tensor,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

/// A compiled graph: run it as often as needed; runs create no buffers or pipelines. Made by
/// [`Device.compile`](super::WebDevice::compile).
#[wasm_bindgen(js_name = Plan)]
pub struct WebPlan {
    /// `None` while a run is in progress.
    inner: RefCell<Option<crate::device::Plan>>,
    /// The inputs the outputs depend on, in declaration order.
    inputs: Vec<PlanInput>,
    output_shapes: Vec<Vec<usize>>,
    output_dtypes: Vec<DType>,
}

impl WebPlan {
    pub(super) fn new(
        plan: crate::device::Plan,
        g: &crate::graph::Graph,
        output_shapes: Vec<Vec<usize>>,
        output_dtypes: Vec<DType>,
    ) -> WebPlan {
        let inputs = plan
            .inputs()
            .into_iter()
            .map(|t| PlanInput {
                name: g.input_name(t).unwrap_or_default().to_string(),
                tensor: t,
                dtype: g.dtype(t).unwrap_or(DType::F32),
                shape: g.shape(t).map(<[usize]>::to_vec).unwrap_or_default(),
            })
            .collect();
        WebPlan { inner: RefCell::new(Some(plan)), inputs, output_shapes, output_dtypes }
    }
}

#[wasm_bindgen(js_class = Plan)]
impl WebPlan {
    /// Names of the inputs `run` expects, in declaration order (inputs no output depends on are left out).
    #[wasm_bindgen(getter, js_name = inputNames)]
    pub fn input_names(&self) -> Vec<String> {
        self.inputs.iter().map(|i| i.name.clone()).collect()
    }

    /// Shapes of those inputs, in the same order.
    #[wasm_bindgen(getter, js_name = inputShapes, unchecked_return_type = "number[][]")]
    pub fn input_shapes(&self) -> Array {
        self.inputs.iter().map(|i| JsValue::from(shape_array(&i.shape))).collect()
    }

    /// Dtypes of those inputs (`"float32"`, `"int32"`, `"float16"`), in the same order.
    #[wasm_bindgen(getter, js_name = inputDtypes)]
    pub fn input_dtypes(&self) -> Vec<String> {
        self.inputs.iter().map(|i| i.dtype.name().to_string()).collect()
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

    /// Runs the plan and resolves to all its outputs, in the order given to `compile`, each a new row-major
    /// `Float32Array` (int32 and float16 outputs converted; see `outputShapes`).
    ///
    /// `inputs` holds one typed array per name in `inputNames` (see `InputValues`): an object keyed by name,
    /// or an array in that order. Rejects with the library's message when an input is missing, unknown, of the
    /// wrong array type or length, when the device fails or is lost, or when this plan is already running
    /// (await the previous run first; different plans may run concurrently).
    pub async fn run(
        &self,
        #[wasm_bindgen(unchecked_param_type = "PlanInputs")] inputs: JsValue,
    ) -> Result<Vec<Float32Array>, JsError> {
        let out = self.run_fetch(&inputs, vec![Fetch::All; self.output_shapes.len()]).await?;
        Ok(out.iter().flatten().map(f32_array).collect())
    }

    /// Runs the plan and reads back each output as `fetch` says (one entry per output; all of each when left
    /// out): `"all"`, `"skip"` (computed, left on the device: `null` here) or `[start, end]`, rows `start..end` of
    /// its first axis, end exclusive (the last position's logits: `[T - 1, T]`); only those bytes are copied back.
    /// Each output comes in its dtype: `Int32Array` for int32 (an argmax is 4 bytes), `Float32Array` for float32
    /// and float16.
    ///
    /// Rejects as `run` does, and when `fetch` has another length than the outputs or asks for rows outside one.
    #[wasm_bindgen(js_name = runWith, unchecked_return_type = "Output[]")]
    pub async fn run_with(
        &self,
        #[wasm_bindgen(unchecked_param_type = "PlanInputs")] inputs: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "Fetch[]")] fetch: JsValue,
    ) -> Result<Array, JsError> {
        let fetch = self.fetch_of(&fetch)?;
        let out = self.run_fetch(&inputs, fetch).await?;
        Ok(out.iter().map(|t| t.as_ref().map_or(JsValue::NULL, output_array)).collect())
    }

    /// Runs the plan and writes each output into the typed array given for it (one entry per output, in the order
    /// given to `compile`): a `Float32Array` for float32 and float16 outputs, an `Int32Array` for int32 ones, with
    /// exactly the output's element count (any buffer, a `SharedArrayBuffer` included), or `null` to leave that
    /// output on the device. Resolves to `outputs`. PyTorch's `out=`, onnxruntime's pre-allocated outputs: a loop
    /// that runs a plan many times reuses its arrays instead of allocating new ones each run (a fresh JS buffer
    /// costs its size again in page faults).
    ///
    /// Rejects as `run` does, and, before running, when `outputs` has another length than the outputs or an entry
    /// of the wrong type or length (naming the output and its shape).
    #[wasm_bindgen(js_name = runInto, unchecked_return_type = "Output[]")]
    pub async fn run_into(
        &self,
        #[wasm_bindgen(unchecked_param_type = "PlanInputs")] inputs: JsValue,
        #[wasm_bindgen(unchecked_param_type = "Output[]")] outputs: JsValue,
    ) -> Result<Array, JsError> {
        let outputs: Array = outputs.dyn_into().map_err(|_| {
            JsError::new("runInto: outputs must be an array with a typed array or null per output (see outputShapes)")
        })?;
        let fetch = self.fetch_into(&outputs)?;
        let out = self.run_fetch(&inputs, fetch).await?;
        for (i, (t, target)) in out.iter().zip(outputs.iter()).enumerate() {
            if let Some(t) = t {
                write_output(t, &target, &format!("runInto: outputs[{i}]"))?;
            }
        }
        Ok(outputs)
    }
}

fn busy() -> JsError {
    JsError::new("this plan is already running: await the previous run() before starting another")
}

impl WebPlan {
    async fn run_fetch(&self, inputs: &JsValue, fetch: Vec<Fetch>) -> Result<Vec<Option<HostTensor>>, JsError> {
        let values = self.collect_inputs(inputs)?;
        let mut plan = self.inner.borrow_mut().take().ok_or_else(busy)?;
        let given: Vec<(crate::graph::Tensor, crate::run::Value)> =
            values.iter().map(|(t, v)| (*t, v.into())).collect();
        let out = plan.run_with_async(&given, &fetch).await;
        *self.inner.borrow_mut() = Some(plan);
        out.map_err(js_err)
    }

    fn fetch_of(&self, fetch: &JsValue) -> Result<Vec<Fetch>, JsError> {
        let n = self.output_shapes.len();
        if fetch.is_undefined() || fetch.is_null() {
            return Ok(vec![Fetch::All; n]);
        }
        let arr = fetch.dyn_ref::<Array>().ok_or_else(|| JsError::new("runWith: fetch must be an array"))?;
        if arr.length() as usize != n {
            return Err(JsError::new(&format!("runWith: {} fetches given for {n} outputs", arr.length())));
        }
        arr.iter()
            .enumerate()
            .map(|(i, f)| match (f.as_string().as_deref(), f.dyn_ref::<Array>()) {
                (Some("all"), _) => Ok(Fetch::All),
                (Some("skip"), _) => Ok(Fetch::Skip),
                (_, Some(r)) if r.length() == 2 => {
                    let at = |k| r.get(k).as_f64().filter(|x| *x >= 0.0 && x.fract() == 0.0);
                    match (at(0), at(1)) {
                        (Some(a), Some(b)) => Ok(Fetch::Rows(a as usize..b as usize)),
                        _ => Err(JsError::new(&format!("runWith: fetch[{i}] rows must be two whole numbers ≥ 0"))),
                    }
                }
                _ => Err(JsError::new(&format!("runWith: fetch[{i}] must be \"all\", \"skip\" or [start, end]"))),
            })
            .collect()
    }

    /// The fetch of each output for `runInto`: all of it where `outputs` gives an array of its dtype and length,
    /// skipped where it gives `null`.
    fn fetch_into(&self, outputs: &Array) -> Result<Vec<Fetch>, JsError> {
        let n = self.output_shapes.len();
        if outputs.length() as usize != n {
            return Err(JsError::new(&format!("runInto: {} output arrays given for {n} outputs", outputs.length())));
        }
        outputs
            .iter()
            .enumerate()
            .map(|(i, v)| {
                if v.is_null() || v.is_undefined() {
                    return Ok(Fetch::Skip);
                }
                let shape = &self.output_shapes[i];
                let (len, want) = if self.output_dtypes[i] == DType::I32 {
                    (v.dyn_ref::<Int32Array>().map(Int32Array::length), "an Int32Array")
                } else {
                    (v.dyn_ref::<Float32Array>().map(Float32Array::length), "a Float32Array")
                };
                let elements: usize = shape.iter().product();
                match len {
                    Some(len) if len as usize == elements => Ok(Fetch::All),
                    Some(len) => Err(JsError::new(&format!(
                        "runInto: outputs[{i}] has {len} elements, output {i} {shape:?} holds {elements}"
                    ))),
                    None => Err(JsError::new(&format!(
                        "runInto: outputs[{i}] must be {want} or null (output {i} {shape:?})"
                    ))),
                }
            })
            .collect()
    }

    fn collect_inputs(&self, inputs: &JsValue) -> Result<Vec<(crate::graph::Tensor, HostTensor)>, JsError> {
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
            for (i, v) in self.inputs.iter().zip(arr.iter()) {
                out.push((i.tensor, values_of(&i.name, i.dtype, &i.shape, &v)?));
            }
        } else if inputs.is_object() {
            let obj: &Object = inputs.unchecked_ref();
            for key in Object::keys(obj).iter() {
                let key = key.as_string().unwrap_or_default();
                if !self.inputs.iter().any(|i| i.name == key) {
                    return Err(js_err(Error::BadInput {
                        name: key,
                        reason: format!("not an input this plan depends on (inputs: {:?})", self.input_names()),
                    }));
                }
            }
            for i in &self.inputs {
                let v = Reflect::get(obj, &JsValue::from_str(&i.name)).unwrap_or(JsValue::UNDEFINED);
                if v.is_undefined() {
                    return Err(js_err(Error::BadInput {
                        name: i.name.clone(),
                        reason: format!("missing (expected {} {:?})", i.dtype, i.shape),
                    }));
                }
                out.push((i.tensor, values_of(&i.name, i.dtype, &i.shape, &v)?));
            }
        } else {
            return Err(JsError::new("run: inputs must be an object keyed by input name or an array of typed arrays"));
        }
        Ok(out)
    }
}
