// onnxruntime-web, the matmul benchmark's peer on the same page: a one-node ONNX model (MatMul, written below,
// 180 bytes) run by ORT's WebGPU execution provider on the page and by its wasm execution provider in a worker
// (ort-worker.js, with as many threads as webtensor has CPU workers). Each run creates the input tensors from
// the Float32Arrays, runs and reads the output back, as webtensor's plan.runInto does, and is timed by the same
// timeRuns. ORT comes from web/vendor/ort, which scripts/serve.sh links to tests/e2e/node_modules (npm
// onnxruntime-web); the page never fetches it from the internet.
import { gflops, timeRuns } from "./bench.js";
import { WorkerClient, progressEvents } from "./worker-client.js";

export const ORT_DIR = new URL("./vendor/ort/", import.meta.url).href;

// ---- the model: ONNX protobuf, written by hand (field numbers from onnx.proto) ----------------------------

const utf8 = new TextEncoder();
function varint(n) {
  const out = [];
  for (; n > 0x7f; n = Math.floor(n / 128)) out.push((n & 0x7f) | 0x80);
  out.push(n);
  return out;
}
const field = (num, bytes) => [...varint((num << 3) | 2), ...varint(bytes.length), ...bytes];
const str = (num, s) => field(num, [...utf8.encode(s)]);
const int = (num, v) => [...varint(num << 3), ...varint(v)];

/** ValueInfoProto: a float tensor named `name` with symbolic dimensions `dims`. */
function floatTensor(name, dims) {
  const shape = dims.flatMap((d) => field(1, str(2, d))); // TensorShapeProto.dim { dim_param }
  const tensorType = [...int(1, 1), ...field(2, shape)]; // elem_type FLOAT, shape
  return [...str(1, name), ...field(2, field(1, tensorType))]; // name, type { tensor_type }
}

/** C[m, n] = A[m, k] · B[k, n] (ONNX MatMul, opset 13), any m, k, n. */
export function matmulModel() {
  const node = [...str(1, "A"), ...str(1, "B"), ...str(2, "C"), ...str(3, "matmul"), ...str(4, "MatMul")];
  const graph = [
    ...field(1, node),
    ...str(2, "matmul"),
    ...field(11, floatTensor("A", ["m", "k"])),
    ...field(11, floatTensor("B", ["k", "n"])),
    ...field(12, floatTensor("C", ["m", "n"])),
  ];
  const opset = [...str(1, ""), ...int(2, 13)];
  return new Uint8Array([...int(1, 8), ...str(2, "webtensor-demo"), ...field(7, graph), ...field(8, opset)]);
}

// ---- WebGPU on the page --------------------------------------------------------------------------------

/** Whether scripts/serve.sh linked ORT into vendor/ (cd tests/e2e && npm ci): from the vendor/peers.json it
 *  writes, so that a page served without ORT asks for nothing that is not there (no 404 in the console); a
 *  server that wrote no peers.json is asked for ORT's file itself. */
export async function ortServed() {
  try {
    const peers = await fetch(new URL("./vendor/peers.json", import.meta.url));
    if (peers.ok) return Boolean((await peers.json()).ort);
    return (await fetch(`${ORT_DIR}ort.webgpu.min.mjs`, { method: "HEAD" })).ok;
  } catch {
    return false;
  }
}

let webgpuSession = null;
/** ORT's WebGPU session of the MatMul model, made once. */
async function webgpu() {
  webgpuSession ??= (async () => {
    const ort = await import(`${ORT_DIR}ort.webgpu.min.mjs`);
    ort.env.wasm.wasmPaths = ORT_DIR;
    ort.env.logLevel = "error";
    const session = await ort.InferenceSession.create(matmulModel(), { executionProviders: ["webgpu"] });
    return { ort, session };
  })();
  return webgpuSession;
}

/** Times C = A·B for n×n matrices on ORT's WebGPU EP: { c, ms, reps, gflops }. */
export async function benchOrtWebGPU(n, a, b, onProgress, shouldStop) {
  onProgress("loading onnxruntime-web");
  const { ort, session } = await webgpu();
  const run = async () => {
    const out = await session.run({ A: new ort.Tensor("float32", a, [n, n]), B: new ort.Tensor("float32", b, [n, n]) });
    const c = await out.C.getData();
    out.C.dispose();
    return c;
  };
  // ORT compiles its pipelines for a shape on that shape's first run: an untimed run, as webtensor's compile
  onProgress("compiling (a first run)");
  const t0 = performance.now();
  await run();
  const compileMs = performance.now() - t0;
  const r = await timeRuns(run, onProgress, shouldStop);
  return { c: r.out, ms: r.ms, reps: r.reps, compileMs, gflops: gflops(n, r.ms) };
}

// ---- wasm in a worker ----------------------------------------------------------------------------------

let worker = null;
let workerThreads = 0;

/** Stops an ORT wasm step at once (the worker is terminated; the next step starts a new one). */
export function abortOrtWasm() {
  worker?.terminate();
  worker = null;
}

/** Times C = A·B for n×n matrices on ORT's wasm EP with `threads` threads (in a worker): { c, ms, reps, gflops,
 *  threads }. ORT's threads need cross-origin isolation (serve.sh sends the headers); without it ORT runs on 1. */
export function benchOrtWasm(n, a, b, threads, onProgress) {
  if (!worker || workerThreads !== threads) {
    worker?.terminate();
    worker = new WorkerClient(new URL("./ort-worker.js", import.meta.url), "ORT worker");
    workerThreads = threads;
  }
  return worker.call({ type: "bench", n, a, b, threads, dir: ORT_DIR }, progressEvents(onProgress));
}
