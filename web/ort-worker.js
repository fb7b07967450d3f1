// onnxruntime-web's wasm execution provider in a module worker, the peer of webtensor's CPU workers (see
// ort-peer.js). Messages: { id, type: "bench", n, a, b, threads, dir } -> { id, progress }*, then
// { id, ok, c, ms, reps, gflops, threads } (threads: what ORT ran with).
import { gflops, timeRuns } from "./bench.js";
import { matmulModel } from "./ort-peer.js";

let ready = null;

function session(dir, threads) {
  ready ??= (async () => {
    const ort = await import(`${dir}ort.wasm.min.mjs`);
    ort.env.wasm.wasmPaths = dir;
    // threads need SharedArrayBuffer, which only a cross-origin isolated page has
    ort.env.wasm.numThreads = self.crossOriginIsolated ? threads : 1;
    ort.env.logLevel = "error";
    const s = await ort.InferenceSession.create(matmulModel(), { executionProviders: ["wasm"] });
    return { ort, s, threads: ort.env.wasm.numThreads };
  })();
  return ready;
}

self.onmessage = async (e) => {
  const { id, n, a, b, threads, dir } = e.data;
  try {
    const { ort, s, threads: used } = await session(dir, threads);
    const run = async () => {
      const out = await s.run({ A: new ort.Tensor("float32", a, [n, n]), B: new ort.Tensor("float32", b, [n, n]) });
      return out.C.data;
    };
    // a first, untimed run for ORT's per-shape preparation, as webtensor's compile
    const t0 = performance.now();
    await run();
    const compileMs = performance.now() - t0;
    const r = await timeRuns(run, (p) => self.postMessage({ id, progress: p }));
    const c = r.out.slice(); // a buffer of its own, to transfer
    self.postMessage({ id, ok: true, c, ms: r.ms, reps: r.reps, compileMs, gflops: gflops(n, r.ms), threads: used }, [c.buffer]);
  } catch (err) {
    self.postMessage({ id, ok: false, error: String(err?.message ?? err) });
  }
};
