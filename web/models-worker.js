// The model runners, in a module worker (WebGPU where the worker has it, else the wasm CPU backend), so that a
// prefill or a CPU decode step never freezes the page. Model files are fetched once and kept in the Cache API
// ("webtensor-models"): a reload reads them from there. Messages (each answered { id, ok, ... } or
// { id, ok: false, error }):
//   { id, type: "load-llm", backend, url }          -> { progress: { loaded, total, cached } }*, then
//                                                      { backend, adapter, software, bytes, seconds }
//   { id, type: "chat", messages, options }         -> { token: text }*, then { result }
//   { id, type: "generate", prompt, options }      -> { result } (a plain prompt, the cache reset first)
//   { type: "stop" }                                 (no answer: the running chat stops after its next token)
//   { id, type: "load-embedder", backend, base }    -> { backend, adapter, software, dimension, seconds }
//   { id, type: "embed", texts }                    -> { vectors }
import init, { Device, LanguageModel, ModelBytes, SentenceEmbedder } from "./pkg/webtensor.js";

const ready = init();
const devices = {};
let llm = null;
let embedder = null;
let stopRequested = false;
const MINILM_FILES = ["config.json", "tokenizer.json", "model.safetensors", "modules.json", "sentence_bert_config.json",
  "1_Pooling/config.json"];

async function device(backend) {
  await ready;
  devices[backend] ??= Device.create(backend);
  return devices[backend];
}

function describe(dev) {
  const info = dev.info();
  const adapter = [dev.adapterName, info.driver].filter(Boolean).join(" / ");
  const software = dev.backend === "webgpu" && (/swiftshader|llvmpipe|lavapipe|software|warp/i.test(adapter) ||
    info.deviceType === "Cpu");
  return { backend: dev.backend, adapter, software };
}

/** The response for `url`, from the Cache API when it holds it (else fetched, and stored there while the caller
 *  reads it: `stored` settles when the copy is in the cache). */
async function cachedFetch(url) {
  const cache = "caches" in self ? await caches.open("webtensor-models").catch(() => null) : null;
  const hit = cache && (await cache.match(url));
  if (hit) return { response: hit, cached: true, stored: Promise.resolve() };
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  // both branches of the body are read at once, so the tee holds only what one is ahead of the other
  const stored = cache ? cache.put(url, response.clone()).catch(() => {}) : Promise.resolve();
  return { response, cached: false, stored };
}

/** Streams `url` into wasm memory (a ModelBytes), reporting progress; no whole copy is held in JS. */
async function download(id, url) {
  const { response, cached, stored } = await cachedFetch(url);
  const total = Number(response.headers.get("content-length")) || 0;
  const bytes = new ModelBytes(total || undefined);
  const reader = response.body.getReader();
  let last = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes.push(value);
    if (bytes.length - last > (1 << 22) || bytes.length === total) {
      last = bytes.length;
      self.postMessage({ id, progress: { loaded: bytes.length, total, cached } });
    }
  }
  await stored;
  return bytes;
}

const handlers = {
  async "load-llm"(id, { backend, url }) {
    const t0 = performance.now();
    const dev = await device(backend);
    const bytes = await download(id, url);
    const size = bytes.length;
    llm?.free();
    llm = await LanguageModel.fromModelBytes(dev, bytes, { context: 2048 });
    return { ...describe(dev), bytes: size, seconds: (performance.now() - t0) / 1e3 };
  },
  async chat(id, { messages, options }) {
    if (!llm) throw new Error("load the language model first");
    stopRequested = false;
    // the whole conversation each turn: its earlier turns are still in the KV cache and are not evaluated again
    const result = await llm.chat(messages, options, (text) => {
      if (text) self.postMessage({ id, token: text });
      return !stopRequested;
    });
    return { result: { ...result, tokens: Array.from(result.tokens) } };
  },
  async generate(id, { prompt, options }) {
    if (!llm) throw new Error("load the language model first");
    stopRequested = false;
    llm.reset();
    const result = await llm.generate(prompt, options, () => !stopRequested);
    return { result: { ...result, tokens: Array.from(result.tokens) } };
  },
  async "load-embedder"(id, { backend, base }) {
    const t0 = performance.now();
    const dev = await device(backend);
    const files = {};
    for (const f of MINILM_FILES) {
      const optional = !["config.json", "tokenizer.json", "model.safetensors"].includes(f);
      const got = await cachedFetch(`${base}/${f}`).catch((e) => {
        if (optional) return null;
        throw e;
      });
      if (got) {
        files[f] = await got.response.arrayBuffer();
        await got.stored;
      }
    }
    embedder?.free();
    embedder = await SentenceEmbedder.load(dev, files);
    return { ...describe(dev), dimension: embedder.dimension, seconds: (performance.now() - t0) / 1e3 };
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
    stopRequested = true;
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
