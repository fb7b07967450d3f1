// The wasm package outside a browser (Node.js, which has no navigator.gpu): Device.create("auto") must fall back
// to the CPU backend, Device.create("webgpu") must reject with a message saying WebGPU is not available (never
// abort the process), and a matmul must run on the CPU. Both wasm builds: the one wasmFile() picks for this
// engine (simd128 in Node.js 20), then, in a child process with relaxed-simd turned on
// (--experimental-wasm-relaxed-simd), the relaxed-simd build, which the CPU device's driver must name; in each,
// the CPU backend's f32 matmul at the edges of its blocking against f64 sums (outputs NaN-filled first).
//
//   scripts/build-wasm.sh && node tests/e2e/node.mjs
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const { default: init, Device, Graph, matmul, wasmFile } = await import(join(root, "pkg/webtensor.js"));
const file = wasmFile();
await init({ module_or_path: readFileSync(join(root, "pkg", file)) });

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

// the build: the driver names its SIMD, and its f32 matmul (the packed kernel from 16 rows) matches f64 sums
const driver = auto.info().driver;
const relaxed = file === "webtensor_relaxed_bg.wasm";
if (relaxed !== /relaxed-simd/.test(driver)) fail(`${file} loaded, but the CPU device's driver is "${driver}"`);
const val = (i, seed) => (((i * 37 + seed * 11) % 97) - 48) / 31;
for (const [m, k, n] of [[16, 5, 9], [17, 257, 33], [65, 300, 513], [128, 64, 8]]) {
  const gm = new Graph();
  const mm = gm.matmul(gm.input("a", [m, k]), gm.input("b", [k, n]));
  const p = await auto.compile(gm, [mm], { poison: true });
  const a = Float32Array.from({ length: m * k }, (_, i) => val(i, 1));
  const b = Float32Array.from({ length: k * n }, (_, i) => val(i, 2));
  const [out] = await p.runInto({ a, b }, [new Float32Array(m * n).fill(NaN)]);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let want = 0;
      for (let q = 0; q < k; q++) want += a[i * k + q] * b[q * n + j];
      const got = out[i * n + j];
      if (!(Math.abs(got - want) <= 1e-5 * Math.sqrt(k) * Math.max(1, Math.abs(want)))) {
        fail(`${file}: ${m}x${k}x${n} c[${i}, ${j}] = ${got}, want ${want}`);
      }
    }
  }
  p.free();
  gm.free();
}
console.log(`node: ok (${file}: "auto" is ${auto.adapterName}, driver "${driver}"; "webgpu": ${msg})`);

if (!relaxed && !process.env.WEBTENSOR_NODE_CHILD) {
  // the relaxed-simd build, where this Node.js can turn relaxed-simd on
  const flag = "--experimental-wasm-relaxed-simd";
  const env = { ...process.env, WEBTENSOR_NODE_CHILD: "1" };
  let out = "";
  try {
    out = execFileSync(process.execPath, [flag, fileURLToPath(import.meta.url)], { env, stdio: ["ignore", "pipe", "inherit"] }).toString().trim();
  } catch (e) {
    fail(`the relaxed-simd run (node ${flag}) failed: ${e.message}`);
  }
  if (!out.includes("webtensor_relaxed_bg.wasm")) fail(`with ${flag}, wasmFile() did not pick the relaxed-simd build: ${out}`);
  console.log(out);
}
