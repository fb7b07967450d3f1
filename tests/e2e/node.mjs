// The wasm package outside a browser (Node.js, which has no navigator.gpu): Device.create("auto") must fall back
// to the CPU backend, Device.create("webgpu") must reject with a message saying WebGPU is not available (never
// abort the process), and a matmul must run on the CPU.
//
//   scripts/build-wasm.sh && node tests/e2e/node.mjs
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const { default: init, Device, Graph, matmul } = await import(join(root, "pkg/webtensor.js"));
await init({ module_or_path: readFileSync(join(root, "pkg/webtensor_bg.wasm")) });

const fail = (msg) => {
  console.error(`node: FAILED: ${msg}`);
  process.exit(1);
};
const auto = await Device.create("auto");
if (auto.backend !== "cpu") fail(`"auto" gave ${auto.backend}, expected the CPU`);
let msg = "";
try {
  await Device.create("webgpu");
  fail(`"webgpu" gave a device in Node.js`);
} catch (e) {
  msg = e.message;
}
if (!/WebGPU is not available/.test(msg)) fail(`"webgpu" rejected with an unclear message: ${msg}`);
const c = await matmul(new Float32Array([1, 2, 3, 4, 5, 6]), new Float32Array([7, 8, 9, 10, 11, 12]), 2, 3, 2);
if (Array.from(c).join(" ") !== "58 64 139 154") fail(`matmul gave ${Array.from(c)}`);
// Device.compile's options: a pinned kernel name is checked (and listed when unknown); poison and noFusion run
const g = new Graph();
const prod = g.relu(g.matmul(g.input("x", [2, 3]), g.input("y", [3, 2])));
let bad = "";
await auto.compile(g, [prod], { matmul: "9x9x9" }).catch((e) => (bad = e.message));
if (!/unknown matmul kernel '9x9x9'.*128x128x16/.test(bad)) fail(`options.matmul "9x9x9" gave: ${bad || "no error"}`);
const plan = await auto.compile(g, [prod], { matmul: "64x64x16", poison: true, noFusion: true });
const [r] = await plan.run([new Float32Array([1, 2, 3, 4, 5, 6]), new Float32Array([7, 8, 9, 10, 11, -12])]);
if (Array.from(r).join(" ") !== "58 0 139 10") fail(`the compiled-with-options plan gave ${Array.from(r)}`);
console.log(`node: ok ("auto" is ${auto.adapterName}; "webgpu": ${msg})`);
