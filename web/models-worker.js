// The model runners, in a module worker (WebGPU where the worker has it, else the wasm CPU backend), so that a
// prefill or a CPU decode step never freezes the page. The package streams model files into wasm memory and keeps
// them in the Cache API ("webtensor-models"): a reload reads them from there. Messages (each answered { id, ok, ... } or
// { id, ok: false, error }):
//   { id, type: "load-llm", backend, url | blob }   -> { progress: { file, loaded, total, cached } }*, then
//                                                      { backend, adapter, software, why, bytes, seconds }
//                                                      (backend "auto": see device(); `why` says why the CPU)
//   { id, type: "chat", messages, options }         -> { prefill: { done, total } }*, { token: text }*, then { result }
//   { id, type: "generate", prompt, options }      -> { result } (a plain prompt, the cache reset first)
//   { type: "stop" }                                 (no answer: aborts the running generation's signal, which
//                                                      ends it before another token is computed)
//   { id, type: "load-embedder", backend, base }    -> { progress }*, then { backend, adapter, software, why, dimension, seconds }
//   { id, type: "embed", texts }                    -> { vectors }
import init, { Device, LanguageModel, SentenceEmbedder } from "./pkg/webtensor.js";

const ready = init();
const devices = {};
let llm = null;
let embedder = null;
/** The running generation's AbortController (a "stop" message aborts it). */
let generation = null;

async function create(backend) {
  await ready;
  devices[backend] ??= Device.create(backend);
  return devices[backend];
}

/** The device for `backend` ("webgpu", "cpu" or "auto") and, for "auto", why it is the CPU. "auto" ranks as the
 *  native Device::best() does: WebGPU on a hardware adapter, else the wasm CPU backend, which is many times faster
 *  than a software adapter (SwiftShader: a chat answer in ~46 s against ~5 s on the CPU, a search ~13 s against
 *  ~0.13 s). The matmul demo above still shows the software adapter: there it is what is being measured. */
async function device(backend) {
  if (backend !== "auto") return { dev: await create(backend) };
  if (!("gpu" in navigator)) return { dev: await create("cpu"), why: "this browser has no WebGPU" };
  let gpu;
  try {
    gpu = await create("webgpu");
  } catch (e) {
    return { dev: await create("cpu"), why: `no WebGPU device (${e.message})` };
  }
  const d = describe(gpu);
  if (!d.software) return { dev: gpu };
  return { dev: await create("cpu"), why: `WebGPU here is a software adapter (${d.adapter}), slower than the CPU` };
}

function describe(dev) {
  const info = dev.info();
  const adapter = [dev.adapterName, info.driver].filter(Boolean).join(" / ");
  const software = dev.backend === "webgpu" && (/swiftshader|llvmpipe|lavapipe|software|warp/i.test(adapter) ||
    info.deviceType === "Cpu");
  return { backend: dev.backend, adapter, software };
}

const handlers = {
  async "load-llm"(id, { backend, url, blob }) {
    const t0 = performance.now();
    const { dev, why } = await device(backend);
    let size = 0;
    const onProgress = (progress) => {
      size = progress.loaded;
      self.postMessage({ id, progress });
    };
    llm?.free();
    llm = null;
    // a file the user picked or dropped (a Blob), or a URL (kept in the Cache API, read from there next time)
    llm = blob
      ? await LanguageModel.fromBlob(dev, blob, { context: 2048, onProgress })
      : await LanguageModel.fromUrl(dev, url, { context: 2048, onProgress });
    console.log(`language model on ${dev.backend} (${dev.adapterName}): ${size} bytes`);
    return { ...describe(dev), why, bytes: size, seconds: (performance.now() - t0) / 1e3 };
  },
  async chat(id, { messages, options }) {
    if (!llm) throw new Error("load the language model first");
    generation = new AbortController();
    // the whole conversation each turn: its earlier turns are still in the KV cache and are not evaluated again;
    // every token is posted, an empty text too (an incomplete character), so that the page can count them
    const onPrefill = (done, total) => self.postMessage({ id, prefill: { done, total } });
    const result = await llm.chat(messages, { ...options, signal: generation.signal, onPrefill }, (text) => {
      self.postMessage({ id, token: text });
    });
    return { result: { ...result, tokens: Array.from(result.tokens) } };
  },
  async generate(id, { prompt, options }) {
    if (!llm) throw new Error("load the language model first");
    generation = new AbortController();
    llm.reset();
    const result = await llm.generate(prompt, { ...options, signal: generation.signal });
    return { result: { ...result, tokens: Array.from(result.tokens) } };
  },
  async "load-embedder"(id, { backend, base }) {
    const t0 = performance.now();
    const { dev, why } = await device(backend);
    embedder?.free();
    embedder = null;
    embedder = await SentenceEmbedder.fromUrl(dev, base, { onProgress: (progress) => self.postMessage({ id, progress }) });
    console.log(`embedder on ${dev.backend} (${dev.adapterName})`);
    return { ...describe(dev), why, dimension: embedder.dimension, seconds: (performance.now() - t0) / 1e3 };
  },
  async embed(id, { texts }) {
    if (!embedder) throw new Error("load the embedder first");
    const vectors = await embedder.embed(texts);
    return { vectors: vectors.map((v) => Array.from(v)) };
  },
};

self.onmessage = async (e) => {
  const { id, type } = e.data;
  if (type === "stop") {
    generation?.abort();
    return;
  }
  try {
    const handler = handlers[type];
    if (!handler) throw new Error(`unknown request ${type}`);
    self.postMessage({ id, ok: true, ...(await handler(id, e.data)) });
  } catch (err) {
    self.postMessage({ id, ok: false, error: String(err?.message ?? err) });
  }
};
