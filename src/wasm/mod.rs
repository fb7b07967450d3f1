//! JavaScript bindings (wasm32 only): a thin wasm-bindgen layer over [`Device`](crate::Device),
//! [`Graph`](crate::Graph), [`Plan`](crate::Plan), resident weights and states, and the model runners
//! ([`LanguageModel`](WebLanguageModel), [`SentenceEmbedder`](WebEmbedder)). It only marshals: shapes come in as
//! `number[]`, values as typed arrays, and every library error becomes a JS exception (an `Error` whose `message`
//! is the library's message). No GPU logic lives here.
//!
//! Everything that touches the device is async and returns a `Promise`; nothing blocks the browser's main
//! thread on the GPU. The CPU backend runs on the calling thread (run it in a Web Worker for big sizes).
//!
//! Dtypes are named as [`DType::name`] says (`"float32"`, `"float16"`, `"int32"`, `"q4_1"`, ..; `"f32"`, `"f16"`
//! and `"i32"` are accepted too). Values go in as `Float32Array` (float32), `Int32Array` (int32), `Uint16Array`
//! of IEEE half bits or `Float32Array` rounded to half (float16); raw bytes for [`Device.upload`]
//! (`ArrayBuffer` or any typed array, little-endian, any dtype, block types included). `Plan.run` gives every
//! output as a `Float32Array` (converted); `Plan.runWith` gives each output in its dtype (`Int32Array` for int32,
//! `Float32Array` for float32 and float16), a part of it, or nothing.
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
//!
//! // a weight uploaded once, a state kept across runs, run-time int32 indices, a partial readback
//! const w = dev.upload("w", "float32", [4, 2], new Float32Array([2, 8, 5, 1, 4, 2, 8, 6]));
//! const cache = dev.state("cache", "float16", [16, 4]);
//! const g2 = new Graph();
//! const x = g2.input("x", [3, 2]);
//! const idx = g2.input("idx", [3], "int32");
//! const y = g2.matmul(x, g2.t(g2.resident(w)));      // [3, 4]
//! const written = g2.setRows(g2.state(cache), idx, y); // rows idx[i] of the cache = y[i] (ggml_set_rows)
//! const p2 = await dev.compile(g2, [written, y]);
//! const [none, lastRow] = await p2.runWith({ x: new Float32Array(6), idx: new Int32Array([0, 1, 2]) },
//!                                          ["skip", [2, 3]]);
//! const kept = await cache.read();                   // Float32Array of 64 values
//! ```

use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/** A backend: `"webgpu"` (the browser's GPU), `"cpu"` (the wasm CPU backend) or `"auto"` (WebGPU when an
 *  adapter exists, else the CPU). */
export type BackendName = "auto" | "webgpu" | "cpu";
/** An element type: `"float32"`, `"float16"`, `"int32"` (or `"f32"`, `"f16"`, `"i32"`), or for uploaded weights
 *  a storage format (`"bf16"`, `"q8_0"`, `"q4_0"`, `"q4_1"`, `"q4_k"`, `"q6_k"`, ...). */
export type DTypeName = string;
/** The values of one input: `Float32Array` for float32, `Int32Array` for int32, `Uint16Array` (half bits) or
 *  `Float32Array` for float16, with exactly as many elements as the input's shape holds. */
export type InputValues = Float32Array | Int32Array | Uint16Array;
/** Values for a plan's inputs: an object keyed by input name, or an array in the order of `Plan.inputNames`. */
export type PlanInputs = Record<string, InputValues> | InputValues[];
/** What `Plan.runWith` reads back of one output: all of it, nothing, or rows `[start, end)` of its first axis. */
export type Fetch = "all" | "skip" | [number, number];
/** One output read back by `Plan.runWith`: `Int32Array` for int32, `Float32Array` otherwise; `null` when skipped. */
export type Output = Float32Array | Int32Array | null;
/** How `Device.compile` builds a plan; every field optional. */
export interface CompileOptions {
  /** Pins the matmul kernel: `"generic"` or a tile shape `"TMxTNxBK"` (e.g. `"64x64x16"`); default: the
   *  device's choice (throws for an unknown name, listing the known ones). */
  matmul?: string;
  /** Fills every non-input tensor with NaN before each run, so an element no kernel writes shows (tests). */
  poison?: boolean;
  /** One dispatch per op, as built: no elementwise fusion or in-place execution. */
  noFusion?: boolean;
}
/** Raw little-endian bytes of a tensor. */
export type TensorBytes = ArrayBuffer | ArrayBufferView;
"#;

mod convert;
mod device;
#[cfg(feature = "models")]
mod embedder;
#[cfg(feature = "models")]
mod fetch;
mod graph;
#[cfg(feature = "models")]
mod language_model;
#[cfg(feature = "models")]
mod model_bytes;
mod plan;
mod tensors;

pub use device::{matmul, DeviceInfo, WebDevice};
#[cfg(feature = "models")]
pub use embedder::WebEmbedder;
pub use graph::{WebGraph, WebTensor};
#[cfg(feature = "models")]
pub use language_model::WebLanguageModel;
#[cfg(feature = "models")]
pub use model_bytes::WebModelBytes;
pub use plan::{PlanStats, WebPlan};
pub use tensors::{WebResident, WebState};
