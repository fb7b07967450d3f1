// The wasm CPU backend in module workers (cpu-worker.js), each with its own wasm instance: the package's CPU
// backend is single-threaded in wasm (threads inside one instance need a nightly `-Z build-std` build with
// atomics), so the page gets several cores by giving each worker a share of C's rows. The workers read A and B
// from SharedArrayBuffers and write their rows of C into one, which needs a cross-origin isolated page
// (scripts/serve.sh sends COOP/COEP); without it, one worker does all the work.
import { gflops, timeRuns } from "./bench.js";
import { WorkerClient, progressEvents } from "./worker-client.js";

/** The slots of the control words (an Int32Array over shared.ctrl) between the page and the row workers: the run
 *  generation (the page bumps it to start a run, or stores STOP), how many workers finished this generation, and
 *  whether one of them failed. */
export const GEN = 0;
export const DONE = 1;
export const FAILED = 2;
export const STOP = -1;

/** Below this many rows per worker a split costs more than it gains. */
const MIN_ROWS = 32;

export class CpuPool {
  constructor() {
    this.workers = [];
    this.epoch = 0; // bumped by abort(): a run waiting on workers that were terminated gives up
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
    this.epoch++;
    this.resize(0);
    this.resize(k);
  }

  /** The rows of C each worker computes: [start, end) pairs, none empty. */
  split(n) {
    const k = Math.max(1, Math.min(this.size, Math.floor(n / MIN_ROWS)));
    return Array.from({ length: k }, (_, i) => [Math.floor((i * n) / k), Math.floor(((i + 1) * n) / k)]);
  }

  /**
   * Times C = A·B for n×n matrices on the workers, as benchMatmul does on one device: each run copies A and B
   * into shared memory (the upload), each worker multiplies its rows of A by B, and C is copied out (the
   * readback). The workers wait in Atomics.wait between runs and the page in Atomics.waitAsync: no message per
   * run. Resolves to { c, ms, reps, compileMs, gflops, workers }.
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
    const [va, vb, vc] = [new Float32Array(shared.a), new Float32Array(shared.b), new Float32Array(shared.c)];
    const ctrl = new Int32Array(shared.ctrl);
    const serving = parts.map((_, i) => this.call(i, { type: "rows-serve", gen: Atomics.load(ctrl, GEN) }));
    const epoch = this.epoch;
    const run = async () => {
      va.set(a);
      vb.set(b);
      Atomics.store(ctrl, DONE, 0);
      Atomics.add(ctrl, GEN, 1);
      Atomics.notify(ctrl, GEN);
      await this.finished(ctrl, parts.length, epoch);
      if (Atomics.load(ctrl, FAILED)) throw new Error("a CPU worker's run failed (see the console)");
      return vc.slice();
    };
    try {
      const r = await timeRuns(run, onProgress, shouldStop);
      return { c: r.out, ms: r.ms, reps: r.reps, compileMs, gflops: gflops(n, r.ms), workers: parts.length };
    } finally {
      Atomics.store(ctrl, GEN, STOP);
      Atomics.notify(ctrl, GEN);
      await Promise.all(serving.map((p) => p.catch(() => {})));
      await Promise.all(parts.map((_, i) => this.call(i, { type: "rows-free" }).catch(() => {})));
    }
  }

  /** Resolves when `k` workers have counted themselves done in ctrl[DONE]; rejects when abort() ran meanwhile
   *  (its workers are gone) or a worker failed to start. */
  async finished(ctrl, k, epoch) {
    for (;;) {
      const done = Atomics.load(ctrl, DONE);
      if (done >= k) return;
      if (this.epoch !== epoch) throw new Error("stopped");
      if (this.failure) throw this.failure;
      if (Atomics.waitAsync) {
        const w = Atomics.waitAsync(ctrl, DONE, done, 100);
        if (w.async) await w.value;
      } else {
        await new Promise((r) => setTimeout(r, 0));
      }
    }
  }
}
