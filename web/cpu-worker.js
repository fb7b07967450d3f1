// The wasm CPU backend, in a module worker: its matmul runs synchronously inside wasm, so running it here keeps
// the page responsive. Messages, each answered { id, ok, ... } (plus { id, progress } while a benchmark runs):
//   { id, type: "info" | "seed" }
//   { id, type: "bench", n, a, b }                  the whole C = A·B, timed here (bench.js)
//   { id, type: "rows-compile", n, r0, r1, shared }  rows [r0, r1) of C, from SharedArrayBuffers a, b, c
//   { id, type: "rows-serve", gen }  runs the rows' plan each time the page bumps the generation in shared.ctrl
//                               (see cpu-pool.js), until it stores STOP there; answers when it stops
//   { id, type: "rows-free" }
import init, { Device, Graph } from "./pkg/webtensor.js";
import { benchMatmul, seedExample } from "./bench.js";
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
  // Blocks this worker in Atomics.wait between runs: the page starts a run by bumping ctrl[GEN] and learns it is
  // done from ctrl[DONE], without a message each way (a round trip of milliseconds on a busy machine).
  async "rows-serve"(dev, { gen: start }) {
    if (!rows) throw new Error("rows-serve before rows-compile");
    const ctrl = rows.ctrl;
    let gen = start; // the generation when the page asked: a run it started before this message came still runs
    for (;;) {
      Atomics.wait(ctrl, GEN, gen);
      gen = Atomics.load(ctrl, GEN);
      if (gen === STOP) return {};
      try {
        const [c] = await rows.plan.run({ a: rows.a, b: rows.b });
        rows.c.set(c);
      } catch (err) {
        Atomics.store(ctrl, FAILED, 1);
        console.error(`CPU worker rows [${rows.r0}, ${rows.r1}):`, err);
      }
      Atomics.add(ctrl, DONE, 1);
      Atomics.notify(ctrl, DONE);
    }
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
