// Type-checks the generated pkg/webtensor.d.ts the way a TypeScript user would use it (never run:
// `npm run typecheck` only compiles it). Build pkg/ first with scripts/build-wasm.sh.
import init, {
  Device, DeviceInfo, Graph, LanguageModel, Plan, Resident, SentenceEmbedder, State, Tensor, matmul, wasmFile,
  type BackendName, type ChatMessage, type CompileOptions, type Fetch, type GenerateOptions, type GenerationResult, type ModelFiles,
  type LoadOptions, type LoadProgress, type Output, type PlanInputs,
} from "../../pkg/webtensor.js";

export async function example(): Promise<number[]> {
  await init();
  const backend: BackendName = "auto";
  const dev: Device = await Device.create(backend);
  const kind: "webgpu" | "cpu" = dev.backend;
  const info: DeviceInfo = dev.info();
  const limit: number = info.maxStorageBindingBytes + info.maxWorkgroupStorageBytes;
  const name: string = dev.adapterName + kind + info.dtypes.join(",") + String(info.shaderF16);

  const g = new Graph();
  const a: Tensor = g.input("a", [4, 2]);
  const b: Tensor = g.input("b", new Uint32Array([3, 2]));
  const c = g.matmul(b, g.t(a));
  const x = g.softmaxExt(g.gelu(g.add(c, c)), undefined, 0.5);
  const y = g.layerNorm(g.rmsNorm(g.relu(x), 1e-6), 1e-5);
  const z = g.concat([y, g.silu(y)], -1);
  const shape: number[] = g.shape(z);
  const plan: Plan = await dev.compile(g, [c, z]);
  const pinned: CompileOptions = { matmul: "64x64x16", poison: true, noFusion: false };
  (await dev.compile(g, [c], pinned)).free();
  const names: string[] = plan.inputNames;
  const inputs: PlanInputs = { a: new Float32Array(8), b: new Float32Array(6) };
  const outs: Float32Array[] = await plan.run(inputs);
  const outs2: Float32Array[] = await plan.run([new Float32Array(8), new Float32Array(6)]);
  const into: Output[] = await plan.runInto(inputs, [new Float32Array(12), null]);
  const file: string = wasmFile();
  const stats = plan.stats();
  const prod: Float32Array = await matmul(new Float32Array(6), new Float32Array(6), 2, 3, 2, "cpu");
  const prod2: Float32Array = await matmul(new Float32Array(6), new Float32Array(6), 2, 3, 2);
  plan.free();
  g.free();
  return [limit, name.length, shape.length, names.length, outs.length, outs2.length, into.length + file.length,
    stats.dispatches, prod[0], prod2[0]];
}

/** Resident weights, states, typed inputs and partial readback. */
export async function runtime(dev: Device): Promise<number> {
  const w: Resident = dev.upload("w", "float32", [4, 2], new Float32Array(8));
  const q: Resident = dev.upload("wq", "q8_0", [2, 32], new ArrayBuffer(2 * 34));
  const cache: State = dev.state("cache", "float16", [16, 4]);
  const g = new Graph();
  const x = g.input("x", [3, 2]);
  const idx = g.input("idx", [3], "int32");
  const y = g.matmul(x, g.t(g.resident(w)));
  const rows: Tensor = g.getRows(g.resident(q), idx);
  const written = g.setRows(g.state(cache), idx, y);
  const att = g.attention(g.reshape(y, [1, 3, 4]), g.reshape(y, [1, 3, 4]), g.reshape(y, [1, 3, 4]), 0.5, true);
  const plan = await dev.compile(g, [written, y, g.argmax(y), rows, att]);
  const dtypes: string[] = plan.inputDtypes;
  const inputs: PlanInputs = { x: new Float32Array(6), idx: new Int32Array([0, 1, 2]) };
  const fetch: Fetch[] = ["skip", [2, 3], "all", "all", "all"];
  const outs: Output[] = await plan.runWith(inputs, fetch);
  const kept: Float32Array | Int32Array = await cache.read();
  cache.write(new Uint16Array(64));
  cache.zero();
  return dev.residentBytes + dtypes.length + outs.length + kept.length + w.bytes + cache.shape[0];
}

/** The model runners. */
export async function models(dev: Device, gguf: ArrayBuffer, files: ModelFiles): Promise<number> {
  const model: LanguageModel = await LanguageModel.load(dev, gguf, { context: 512 });
  const options: GenerateOptions = { maxTokens: 8, temperature: 0.7, topK: 40, seed: 1, stop: ["\n"] };
  const r: GenerationResult = await model.generate("The capital of France is", options, (text: string, id: number) => {
    return text.length + id > 0;
  });
  const messages: ChatMessage[] = [{ role: "user", content: "Hi" }];
  const c: GenerationResult = await model.chat(messages, { maxTokens: 4 });
  const ids: Uint32Array = model.tokenize("hello");
  const text: string = model.detokenize(ids) + r.text + c.stop;
  const emb: SentenceEmbedder = await SentenceEmbedder.load(dev, files);
  const vecs: Float32Array[] = await emb.embed(["a", "b"], 32);
  return r.decodeTokensPerS + r.prefillTokensPerS + text.length + vecs.length + emb.dimension + model.context;
}

/** The loaders: a URL with progress, the Cache API and an abort signal; a picked file; a directory's URL. */
export async function loaders(dev: Device, file: Blob): Promise<number> {
  let seen = 0;
  const onProgress = (p: LoadProgress) => {
    seen = p.loaded + (p.total ?? 0) + (p.cached ? 1 : 0) + p.file.length;
  };
  const options: LoadOptions = { onProgress, cache: "my-models", signal: new AbortController().signal };
  const a: LanguageModel = await LanguageModel.fromUrl(dev, "model.gguf", { context: 512, ...options });
  const b: LanguageModel = await LanguageModel.fromBlob(dev, file, { onProgress });
  const e: SentenceEmbedder = await SentenceEmbedder.fromUrl(dev, "minilm/", { cache: false, f16Weights: false });
  return seen + a.context + b.vocabSize + e.dimension;
}
