// Shared by the page (WebGPU, main thread) and the CPU worker (cpu-worker.js): inputs, the timed matmul and
// the seed example, all through the webtensor package.

/** Deterministic uniform values in [-1, 1) (mulberry32), so both backends get the same matrices. */
export function randomMatrix(len, seed) {
  const out = new Float32Array(len);
  let s = seed >>> 0;
  for (let i = 0; i < len; i++) {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out[i] = (((t ^ (t >>> 14)) >>> 0) / 4294967296) * 2 - 1;
  }
  return out;
}

/** ggml's examples/simple: ggml_mul_mat(A, B) with A 4x2 and B 3x2 is B·Aᵀ, 3x4. Resolves to 12 numbers. */
export async function seedExample(Graph, device) {
  const g = new Graph();
  const a = g.input("a", [4, 2]);
  const b = g.input("b", [3, 2]);
  const at = g.t(a);
  const c = g.matmul(b, at);
  const plan = await device.compile(g, [c]);
  const [out] = await plan.run({
    a: new Float32Array([2, 8, 5, 1, 4, 2, 8, 6]),
    b: new Float32Array([10, 5, 9, 9, 5, 4]),
  });
  plan.free();
  g.free();
  return Array.from(out);
}

/** A single run longer than this is measured once, without a separate warm-up run. */
const LONG_RUN_MS = 1000;
/** Runs shorter than LONG_RUN_MS are repeated untimed for this long first (ms). */
const WARMUP_MS = 200;
/** Timed runs stop after this much time (at least one run, at most MAX_REPS). */
const TARGET_MS = 400;
const MAX_REPS = 100;
/** Progress is reported at most this often (ms). */
const PROGRESS_MS = 100;

/**
 * Times `runOnce()` (an async function resolving to the run's output): warm-up runs for WARMUP_MS, then timed
 * runs until TARGET_MS have passed (at least one, at most MAX_REPS); a run longer than LONG_RUN_MS is timed once.
 * Progress goes to `onProgressEach` at most every PROGRESS_MS. When `shouldStop()` turns true, no further run
 * starts: the runs so far give the figure (the warm-up run's alone if need be). Resolves to { out (the last
 * output), ms (the median), reps }. Shared by webtensor's backends and the onnxruntime-web peer (ort-peer.js), so
 * that both are timed alike.
 */
export async function timeRuns(runOnce, onProgressEach = () => {}, shouldStop = () => false) {
  // at most one report per PROGRESS_MS: a message per run (a thousand a second at n = 256) keeps the page's main
  // thread busy, taking a core from the runs being timed
  let reported = -Infinity;
  const onProgress = (p) => {
    const now = performance.now();
    if (now - reported >= PROGRESS_MS) {
      reported = now;
      onProgressEach(p);
    }
  };
  onProgress("warm-up run");
  const t1 = performance.now();
  let out = await runOnce();
  const first = performance.now() - t1;
  const times = [];
  if (first >= LONG_RUN_MS || shouldStop()) {
    times.push(first);
  } else {
    // warm-up runs for WARMUP_MS: wasm engines start a function in a baseline tier and optimize it once it is hot
    // (in the background), which a single short run does not reach
    while (performance.now() - t1 < WARMUP_MS && !shouldStop()) {
      onProgress("warm-up runs");
      out = await runOnce();
    }
    const end = performance.now() + TARGET_MS;
    while (times.length < MAX_REPS && (times.length === 0 || (performance.now() < end && !shouldStop()))) {
      onProgress(`timed run ${times.length + 1}`);
      const s = performance.now();
      out = await runOnce();
      times.push(performance.now() - s);
    }
  }
  times.sort((x, y) => x - y);
  return { out, ms: times[Math.floor(times.length / 2)], reps: times.length };
}

export const gflops = (n, ms) => (2 * n * n * n) / (ms * 1e6);

/**
 * Times C = A·B for n×n matrices on `device`: compile once, then `timeRuns` of plan.runInto (upload, dispatch
 * and readback into the same array each). `compileOptions` go to Device.compile (e.g. { matmul: "64x64x16" } pins
 * a kernel). Resolves to { c, ms (median per run), reps, compileMs, gflops }.
 */
export async function benchMatmul(Graph, device, n, a, b, onProgress = () => {}, shouldStop = () => false, compileOptions = {}) {
  const g = new Graph();
  const ta = g.input("a", [n, n]);
  const tb = g.input("b", [n, n]);
  const tc = g.matmul(ta, tb);
  onProgress("compiling");
  const t0 = performance.now();
  const plan = await device.compile(g, [tc], compileOptions);
  const compileMs = performance.now() - t0;
  try {
    // C is read back into one array, reused: a loop that runs a plan many times allocates nothing per run
    const c = new Float32Array(n * n);
    const r = await timeRuns(async () => (await plan.runInto({ a, b }, [c]))[0], onProgress, shouldStop);
    return { c: r.out, ms: r.ms, reps: r.reps, compileMs, gflops: gflops(n, r.ms) };
  } finally {
    plan.free();
    g.free();
  }
}
