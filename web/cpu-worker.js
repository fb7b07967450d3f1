// The wasm CPU backend, in a module worker: its matmul runs synchronously inside wasm, so running it here keeps
// the page responsive. Messages, each answered { id, ok, ... } (plus { id, progress } while a benchmark runs):
//   { id, type: "info" | "seed" }
//   { id, type: "bench", n, a, b }                  the whole C = A·B, timed here (bench.js)
//   { id, type: "rows-compile", n, r0, r1, shared }  rows [r0, r1) of C, from SharedArrayBuffers a, b, c
//   { id, type: "rows-serve", gen }  runs the rows' plan each time the leader bumps the generation in shared.ctrl
//                               (see cpu-pool.js), until the page stores STOP there; answers when it stops
//   { id, type: "rows-bench", n, a, b, helpers }  the leader: times C = A·B split over itself (its rows, compiled by
//                               rows-compile) and `helpers` serving workers, as benchMatmul times one device
//   { id, type: "rows-free" }
import init, { Device, Graph } from "./pkg/webtensor.js";
import { benchMatmul, gflops, seedExample, timeRuns } from "./bench.js";
import { DONE, FAILED, GEN, STOP } from "./cpu-pool.js";

const device = init().then(() => Device.create("cpu"));
/** The plan of this worker's rows and its views of the shared matrices. */
let rows = null;

const handlers = {
  info: async (dev) => ({ info: dev.info().toJSON() }),
  seed: async (dev) => ({ seed: await seedExample(Graph, dev) }),
  async bench(dev, { id, n, a, b }) {
    const r = await benchMatmul(Graph, dev, n, a, b, (p) => self.postMessage({ id, progress: p }));
    return [r, [r.c.buffer]];
  },
  async "rows-compile"(dev, { n, r0, r1, shared }) {
    handlers["rows-free"]();
    const g = new Graph();
    const c = g.matmul(g.input("a", [r1 - r0, n]), g.input("b", [n, n]));
    const plan = await dev.compile(g, [c]);
    rows = {
      g, plan, r0, r1,
      ctrl: new Int32Array(shared.ctrl),
      a: new Float32Array(shared.a, r0 * n * 4, (r1 - r0) * n),
      b: new Float32Array(shared.b),
      c: new Float32Array(shared.c, r0 * n * 4, (r1 - r0) * n),
    };
    return {};
  },
  // Blocks this worker (a helper) in Atomics.wait between runs: the leader starts a run by bumping ctrl[GEN] and
  // learns it is done from ctrl[DONE], without a message each way (a round trip of milliseconds on a busy machine).
  async "rows-serve"(dev, { gen: start }) {
    if (!rows) throw new Error("rows-serve before rows-compile");
    const ctrl = rows.ctrl;
    let gen = start; // the generation when the page asked: a run started before this message came still runs
    for (;;) {
      Atomics.wait(ctrl, GEN, gen);
      gen = Atomics.load(ctrl, GEN);
      if (gen === STOP) return {};
      try {
        await rows.plan.runInto({ a: rows.a, b: rows.b }, [rows.c]);
      } catch (err) {
        Atomics.store(ctrl, FAILED, 1);
        console.error(`CPU worker rows [${rows.r0}, ${rows.r1}):`, err);
      }
      Atomics.add(ctrl, DONE, 1);
      Atomics.notify(ctrl, DONE);
    }
  },
  // Each run uploads what the helpers read (their rows of A, and B) into the shared matrices and starts them;
  // this worker computes its own rows from the page's A and B, straight into C's readback array (its rows of A and
  // B stay in this core's cache); it waits for the helpers in Atomics.wait and reads their rows of C back (each
  // helper's plan writes them into the shared C: runInto). The timing covers what one device's run does (upload,
  // multiply, readback), without a message or an event-loop turn of the page's per run.
  async "rows-bench"(dev, { id, n, a, b, helpers }) {
    if (!rows) throw new Error("rows-bench before rows-compile");
    const { ctrl, r0, r1 } = rows;
    if (r0 !== 0) throw new Error("rows-bench: the leading worker computes the first rows");
    const [sa, sb, sc] = [new Float32Array(rows.a.buffer), rows.b, new Float32Array(rows.c.buffer)];
    const failed = () => Atomics.load(ctrl, FAILED) !== 0;
    const out = new Float32Array(n * n); // C read back here each run (a buffer allocated per run costs page faults)
    const [own, ownC] = [a.subarray(0, r1 * n), out.subarray(0, r1 * n)];
    const runOnce = async () => {
      if (failed()) throw new Error("a CPU worker failed (see the console)");
      sa.set(a.subarray(r1 * n), r1 * n);
      sb.set(b);
      Atomics.store(ctrl, DONE, 0);
      Atomics.add(ctrl, GEN, 1);
      Atomics.notify(ctrl, GEN);
      await rows.plan.runInto({ a: own, b }, [ownC]);
      // the page sets FAILED when a helper is gone (its worker failed): the timeout lets this see it
      for (let done; (done = Atomics.load(ctrl, DONE)) < helpers && !failed(); ) Atomics.wait(ctrl, DONE, done, 100);
      if (failed()) throw new Error("a CPU worker's run failed (see the console)");
      out.set(sc.subarray(r1 * n), r1 * n);
      return out;
    };
    const r = await timeRuns(runOnce, (p) => self.postMessage({ id, progress: p }));
    return [{ c: r.out, ms: r.ms, reps: r.reps, gflops: gflops(n, r.ms) }, [r.out.buffer]];
  },
  async "rows-free"() {
    rows?.plan.free();
    rows?.g.free();
    rows = null;
    return {};
  },
};

self.onmessage = async (e) => {
  const { id, type } = e.data;
  try {
    const handler = handlers[type];
    if (!handler) throw new Error(`unknown request ${type}`);
    const answer = await handler(await device, e.data);
    const [fields, transfer] = Array.isArray(answer) ? answer : [answer, []];
    self.postMessage({ id, ok: true, ...fields }, transfer);
  } catch (err) {
    self.postMessage({ id, ok: false, error: String(err?.message ?? err) });
  }
};
