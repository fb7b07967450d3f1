// The wasm CPU backend's f32 matmul in Node.js, both builds of the package side by side with onnxruntime-web's
// wasm on one thread (a benchmark, not a test): C = A·B for n×n matrices, each run uploading A and B, multiplying
// and reading C back (webtensor into one reused array: Plan.runInto), median of 60 runs after 20 untimed ones,
// rounds alternating between the engines. The relaxed-simd build runs in a child process with
// --experimental-wasm-relaxed-simd (Node.js 20 has the instructions behind that flag).
//
//   scripts/build-wasm.sh && (cd tests/e2e && npm ci) && node tests/e2e/bench-node.mjs [sizes] [rounds]
//
// Prints one JSON line per size and round: ms and GFLOP/s of each engine.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gflops, randomMatrix } from "../../web/bench.js";
import { matmulModel } from "../../web/ort-peer.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const sizes = (process.argv[2] ?? "256,512,1024").split(",").map(Number);
const rounds = Number(process.argv[3] ?? 3);

async function median(run) {
  for (let i = 0; i < 20; i++) await run();
  const ts = [];
  for (let i = 0; i < 60; i++) {
    const s = performance.now();
    await run();
    ts.push(performance.now() - s);
  }
  return ts.sort((x, y) => x - y)[30];
}

async function main() {
  const { default: init, Device, Graph, wasmFile } = await import(join(root, "pkg/webtensor.js"));
  const file = wasmFile();
  await init({ module_or_path: readFileSync(join(root, "pkg", file)) });
  const dev = await Device.create("cpu");
  const ort = await import("onnxruntime-web");
  ort.env.wasm.numThreads = 1;
  const session = await ort.InferenceSession.create(matmulModel(), { executionProviders: ["wasm"] });
  for (const n of sizes) {
    const [a, b, c] = [randomMatrix(n * n, 1), randomMatrix(n * n, 2), new Float32Array(n * n)];
    const g = new Graph();
    const plan = await dev.compile(g, [g.matmul(g.input("a", [n, n]), g.input("b", [n, n]))]);
    for (let r = 0; r < rounds; r++) {
      const wt = await median(() => plan.runInto({ a, b }, [c]));
      const ot = await median(async () => {
        const out = await session.run({ A: new ort.Tensor("float32", a, [n, n]), B: new ort.Tensor("float32", b, [n, n]) });
        const d = out.C.data;
        out.C.dispose();
        return d;
      });
      const fig = (ms) => ({ ms: +ms.toFixed(3), gflops: +gflops(n, ms).toFixed(1) });
      console.log(JSON.stringify({ n, build: file, load: +loadavg()[0].toFixed(2), webtensor: fig(wt), ortWasm1: fig(ot) }));
    }
    plan.free();
    g.free();
  }
  if (!process.env.WEBTENSOR_BENCH_CHILD && file !== "webtensor_relaxed_bg.wasm") {
    const env = { ...process.env, WEBTENSOR_BENCH_CHILD: "1" };
    const args = ["--experimental-wasm-relaxed-simd", fileURLToPath(import.meta.url), ...process.argv.slice(2)];
    process.stdout.write(execFileSync(process.execPath, args, { env, stdio: ["ignore", "pipe", "ignore"] }));
  }
}

main().catch((e) => {
  console.error(`bench-node: ${e.message}`);
  process.exit(1);
});
