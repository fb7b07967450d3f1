// The wasm CPU backend, in a module worker: its matmul runs synchronously inside wasm, so running it here keeps
// the page responsive. Messages: { id, type: "info" | "seed" | "bench", n?, a?, b? } -> { id, ok, ... } plus
// { id, progress } while a benchmark runs.
import init, { Device, Graph } from "./pkg/webtensor.js";
import { benchMatmul, seedExample } from "./bench.js";

const device = init().then(() => Device.create("cpu"));

self.onmessage = async (e) => {
  const { id, type } = e.data;
  try {
    const dev = await device;
    if (type === "info") {
      self.postMessage({ id, ok: true, info: dev.info().toJSON() });
    } else if (type === "seed") {
      self.postMessage({ id, ok: true, seed: await seedExample(Graph, dev) });
    } else if (type === "bench") {
      const { n, a, b } = e.data;
      const r = await benchMatmul(Graph, dev, n, a, b, (p) => self.postMessage({ id, progress: p }));
      self.postMessage({ id, ok: true, ...r }, [r.c.buffer]);
    } else {
      throw new Error(`unknown request ${type}`);
    }
  } catch (err) {
    self.postMessage({ id, ok: false, error: String(err?.message ?? err) });
  }
};
