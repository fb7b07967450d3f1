// The wasm package outside a browser (Node.js, which has no navigator.gpu): Device.create("auto") must fall back
// to the CPU backend, Device.create("webgpu") must reject with a message saying WebGPU is not available (never
// abort the process), and a matmul must run on the CPU.
//
//   scripts/build-wasm.sh && node tests/e2e/node.mjs
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const { default: init, Device, matmul } = await import(join(root, "pkg/webtensor.js"));
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
console.log(`node: ok ("auto" is ${auto.adapterName}; "webgpu": ${msg})`);
