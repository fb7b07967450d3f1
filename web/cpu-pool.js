// The wasm CPU backend in module workers (cpu-worker.js), each with its own wasm instance: the package's CPU
// backend is single-threaded in wasm (threads inside one instance need a nightly `-Z build-std` build with
// atomics), so the page gets several cores by giving each worker a share of C's rows. The workers read A and B
// from SharedArrayBuffers and write their rows of C into one, which needs a cross-origin isolated page
// (scripts/serve.sh sends COOP/COEP); without it, one worker does all the work. Worker 0 leads: it times the runs
// and computes its own rows, the others serve theirs on its signal.
import { WorkerClient, progressEvents } from "./worker-client.js";

/** The slots of the control words (an Int32Array over shared.ctrl) between the leading row worker and the
 *  helpers: the run generation (the leader bumps it to start a run; the page stores STOP at the end), how many
 *  helpers finished this generation, and whether one of them failed (set by it, or by the page when one is gone). */
export const GEN = 0;
export const DONE = 1;
export const FAILED = 2;
export const STOP = -1;

/** Below this many rows per worker a split costs more than it gains. */
const MIN_ROWS = 32;

export class CpuPool {
  constructor() {
    this.workers = [];
    this.resize(1);
  }

  /** Workers the page may use: the cores the browser reports, when SharedArrayBuffer is there. */
  static available() {
    return self.crossOriginIsolated ? Math.max(1, navigator.hardwareConcurrency || 1) : 1;
  }

  get size() {
    return this.workers.length;
  }

  /** The first failure of a worker to start or run, if any. */
  get failure() {
    return this.workers.find((w) => w.failure)?.failure ?? null;
  }

  resize(k) {
    while (this.workers.length > k) this.workers.pop().terminate();
    while (this.workers.length < k) this.workers.push(new WorkerClient(new URL("./cpu-worker.js", import.meta.url), "CPU worker"));
  }

  /** Sends `msg` to worker `i`; resolves to its answer. */
  call(i, msg, onProgress, transfer = []) {
    return this.workers[i].call(msg, progressEvents(onProgress), transfer);
  }

  /** Stops the step in flight at once: the workers are terminated (their wasm instances with them; what they
   *  were asked rejects with "stopped") and restarted. */
  abort() {
    const k = this.size;
    this.resize(0);
    this.resize(k);
  }

  /** The rows of C each worker computes: [start, end) pairs, none empty. */
  split(n) {
    const k = Math.max(1, Math.min(this.size, Math.floor(n / MIN_ROWS)));
    return Array.from({ length: k }, (_, i) => [Math.floor((i * n) / k), Math.floor(((i + 1) * n) / k)]);
  }

  /**
   * Times C = A·B for n×n matrices on the workers, as benchMatmul does on one device: worker 0 leads and times the
   * runs (each copies A and B into shared memory, the upload; every worker multiplies its rows of A by B; C is
   * copied out, the readback), the others wait in Atomics.wait between runs and the leader waits for them there:
   * no message and no turn of the page's event loop per run. Resolves to { c, ms, reps, compileMs, gflops, workers }.
   */
  async bench(n, a, b, onProgress, shouldStop) {
    const parts = self.crossOriginIsolated ? this.split(n) : [[0, n]];
    if (parts.length === 1) {
      const r = await this.call(0, { type: "bench", n, a, b }, onProgress);
      return { ...r, workers: 1 };
    }
    const bytes = n * n * 4;
    const shared = { a: new SharedArrayBuffer(bytes), b: new SharedArrayBuffer(bytes), c: new SharedArrayBuffer(bytes), ctrl: new SharedArrayBuffer(16) };
    onProgress("compiling");
    const t0 = performance.now();
    await Promise.all(parts.map(([r0, r1], i) => this.call(i, { type: "rows-compile", n, r0, r1, shared })));
    const compileMs = performance.now() - t0;
    const ctrl = new Int32Array(shared.ctrl);
    const gen = Atomics.load(ctrl, GEN);
    // a helper that fails (its answer an error, or its worker gone) releases the leader from waiting for it
    const fail = () => Atomics.store(ctrl, FAILED, 1);
    const serving = parts.slice(1).map((_, i) => this.call(i + 1, { type: "rows-serve", gen }).catch(fail));
    try {
      if (shouldStop()) throw new Error("stopped");
      const r = await this.call(0, { type: "rows-bench", n, a, b, helpers: parts.length - 1 }, onProgress);
      return { ...r, compileMs, workers: parts.length };
    } finally {
      Atomics.store(ctrl, GEN, STOP);
      Atomics.notify(ctrl, GEN);
      await Promise.all(serving);
      await Promise.all(parts.map((_, i) => this.call(i, { type: "rows-free" }).catch(() => {})));
    }
  }
}
