// The matmul demo against onnxruntime-web, as a benchmark (not a test, not in CI): opens the demo (web/) in
// headless Chromium with `?sizes=...&autorun=1&workers=N`, as many rounds as asked, each in a fresh profile, and
// prints per size and engine the range of GFLOP/s over the rounds and webtensor's ratio to ORT's in each round
// (each figure the demo's median of up to 100 timed runs: upload A and B, multiply, read C back), with the
// machine's load before and after; a round whose results disagree (webtensor's WebGPU and CPU, ORT's) fails the
// benchmark. Each round clicks Run again after the first pass and reports the last: the
// first pass runs while the new browser is still starting up (its own work takes the same 2 cores) and while
// both engines' wasm is still being optimized. Writes artifacts/bench-matmul.json.
//
//   scripts/build-wasm.sh && (cd tests/e2e && npm ci) && node tests/e2e/bench-matmul.mjs
//
// Env: BENCH_SIZES (default 256,512,1024), BENCH_WORKERS (CPU workers and ORT's wasm threads, default 2),
// BENCH_ROUNDS (default 5), BENCH_PASSES (passes a round, the last reported; default 2), BENCH_WEBGPU=0 (the CPU columns only: SwiftShader's WebGPU runs take the same cores),
// CHROMIUM (default /usr/bin/chromium).
import { chromium } from "playwright-core";
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { CHROMIUM_FLAGS, copyDemo, startServer } from "./serve.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const sizes = process.env.BENCH_SIZES ?? "256,512,1024";
const workers = Number(process.env.BENCH_WORKERS ?? 2);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const webgpu = process.env.BENCH_WEBGPU !== "0";
const passes = Number(process.env.BENCH_PASSES ?? 2);
/** One visit of the demo: resolves to its results (window.webtensorDemo.results) and the CPU device's driver. */
async function round(url) {
  const profile = mkdtempSync(join(tmpdir(), "webtensor-bench-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: webgpu ? [...CHROMIUM_FLAGS, "--enable-unsafe-webgpu"] : CHROMIUM_FLAGS,
  });
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    const q = `?sizes=${sizes}&autorun=1&workers=${workers}${webgpu ? "" : "&webgpu=0"}`;
    await page.goto(url + q);
    const finished = () => page.waitForFunction(() => ["done", "error"].includes(window.webtensorDemo?.state), null,
      { timeout: 15 * 60 * 1000, polling: 500 });
    await finished();
    for (let i = 0; i < passes - 1; i++) {
      await page.evaluate(() => (window.webtensorDemo.state = "again")); // the page sets it as it goes
      await page.click("#run");
      await finished();
    }
    return await page.evaluate(() => ({
      state: window.webtensorDemo.state,
      status: document.querySelector("#status").textContent,
      cpu: window.webtensorDemo.cpuInfo,
      results: window.webtensorDemo.results,
    }));
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

const span = (xs, digits = 1) => {
  const v = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (!v.length) return "—";
  return v[0] === v.at(-1) ? v[0].toFixed(digits) : `${v[0].toFixed(digits)}-${v.at(-1).toFixed(digits)}`;
};

async function main() {
  const ort = join(root, "tests/e2e/node_modules/onnxruntime-web/dist");
  if (!existsSync(ort)) throw new Error("onnxruntime-web is missing: (cd tests/e2e && npm ci)");
  const site = mkdtempSync(join(tmpdir(), "webtensor-bench-site-"));
  copyDemo(site);
  mkdirSync(join(site, "vendor"));
  symlinkSync(ort, join(site, "vendor/ort"));
  const { url, proc } = await startServer(site);
  const load = [loadavg()[0]];
  const all = [];
  try {
    for (let i = 0; i < rounds; i++) {
      const r = await round(url);
      if (r.state !== "done") throw new Error(`round ${i + 1}: the demo ended in ${r.state}: ${r.status}`);
      // a figure counts only for a result that agrees with the others (the demo's max|Δ| / max|C| ≤ 1e-4)
      const wrong = r.results.filter((x) => x.cmp?.agree === false || x.ortAgree === false).map((x) => x.n);
      if (wrong.length) throw new Error(`round ${i + 1}: results disagree at n = ${wrong.join(", ")}`);
      all.push(r);
      const line = r.results.map((x) => `n=${x.n} cpu ${x.cpu?.gflops.toFixed(1)} ort ${x.ortWasm?.gflops.toFixed(1)}`);
      console.error(`round ${i + 1}/${rounds}: ${line.join("; ")}`);
    }
  } finally {
    proc.kill();
    rmSync(site, { recursive: true, force: true });
  }
  load.push(loadavg()[0]);
  const cpuName = all[0].cpu ? `${all[0].cpu.driver ?? ""}` : "";
  console.log(`\n${new Date().toISOString()}, ${rounds} rounds, ${workers} CPU workers / ORT threads, load ${load.map((l) => l.toFixed(2)).join(" -> ")}; ${cpuName}\n`);
  const head = webgpu
    ? "| n | webtensor WebGPU GFLOP/s | ORT WebGPU | ratio | webtensor CPU | ORT wasm | ratio |\n|---|---|---|---|---|---|---|"
    : "| n | webtensor CPU GFLOP/s | ORT wasm | ratio |\n|---|---|---|---|";
  console.log(head);
  const ns = [...new Set(all.flatMap((r) => r.results.map((x) => x.n)))];
  for (const n of ns) {
    const rows = all.map((r) => r.results.find((x) => x.n === n) ?? {});
    const col = (key) => span(rows.map((x) => x[key]?.gflops));
    const ratio = (ours, peer) => `${span(rows.map((x) => x[ours]?.gflops / x[peer]?.gflops), 2)}x`;
    const cpu = `${col("cpu")} | ${col("ortWasm")} | ${ratio("cpu", "ortWasm")}`;
    console.log(webgpu ? `| ${n} | ${col("webgpu")} | ${col("ortWebgpu")} | ${ratio("webgpu", "ortWebgpu")} | ${cpu} |` : `| ${n} | ${cpu} |`);
  }
  mkdirSync(join(root, "artifacts"), { recursive: true });
  const out = { date: new Date().toISOString(), sizes, workers, rounds, passes, webgpu, load, rounds_: all };
  writeFileSync(join(root, "artifacts/bench-matmul.json"), JSON.stringify(out, null, 2));
}

main().catch((e) => {
  console.error(`bench-matmul: ${e.message}`);
  process.exit(1);
});
