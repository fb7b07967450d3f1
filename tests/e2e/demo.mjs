// End-to-end test of the in-browser matmul demo: serves web/ (with pkg/ copied to web/pkg) on a free
// 127.0.0.1 port and opens it in headless Chromium (Debian's /usr/bin/chromium through playwright-core; no
// browser is downloaded), each visit with a fresh profile:
//   1. with WebGPU (--enable-unsafe-webgpu): runs one size on WebGPU and on the wasm CPU backend, checks that
//      they agree, that the seed example's result is shown for both, that the chart has both points, that
//      .wasm is served as application/wasm and that the page never stalls; saves artifacts/demo.png.
//   2. without WebGPU: the page must say so and still run on the CPU; saves artifacts/demo-no-webgpu.png.
//
//   scripts/build-wasm.sh && (cd tests/e2e && npm ci) && node tests/e2e/demo.mjs
//
// Env: CHROMIUM (default /usr/bin/chromium), E2E_SIZE (default 256), E2E_TIMEOUT_S (per visit, default 180).
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const size = Number(process.env.E2E_SIZE ?? 256);
const timeoutMs = Number(process.env.E2E_TIMEOUT_S ?? 180) * 1000;
const artifacts = join(root, "artifacts");
/** The page must never stop handling events for longer than this (page load and wasm compile included). */
const MAX_STALL_MS = 1000;
const SEED_ROWS = ["60 55 50 110", "90 54 54 126", "42 29 28 64"];
const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

function fail(msg) {
  throw new Error(msg);
}

function startServer() {
  return new Promise((resolveUrl, reject) => {
    const args = [join(root, "scripts/serve.py"), "--port", "0", "--dir", join(root, "web"), "--quiet"];
    const proc = spawn("python3", args, { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    proc.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/Serving (http:\/\/127\.0\.0\.1:\d+\/)/);
      if (m) resolveUrl({ url: m[1], proc });
    });
    proc.on("exit", (code) => reject(new Error(`server exited with ${code}: ${out}`)));
    proc.on("error", reject);
  });
}

/** Opens the demo with `?sizes=<size>&autorun=1`, waits until it is done, checks it, saves a screenshot. */
async function visit(url, { webgpu, screenshot }) {
  const label = webgpu ? "with WebGPU" : "without WebGPU";
  const profile = mkdtempSync(join(tmpdir(), "webtensor-e2e-"));
  const log = [];
  let context;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
      headless: true,
      viewport: { width: 1200, height: 900 },
      args: webgpu ? [...FLAGS, "--enable-unsafe-webgpu"] : FLAGS,
    });
    const page = context.pages()[0] ?? (await context.newPage());
    page.on("console", (m) => log.push(`console.${m.type()}: ${m.text()}`));
    page.on("pageerror", (e) => log.push(`pageerror: ${e.message}`));
    page.on("requestfailed", (r) => log.push(`requestfailed: ${r.url()} ${r.failure()?.errorText}`));
    // Main-thread responsiveness: the largest gap between 20 ms interval ticks over the whole visit.
    await page.addInitScript(() => {
      let last = performance.now();
      window.__maxGapMs = 0;
      setInterval(() => {
        const now = performance.now();
        window.__maxGapMs = Math.max(window.__maxGapMs, now - last);
        last = now;
      }, 20);
    });
    // The .wasm must be served as application/wasm (streaming compilation needs it).
    const wasmType = page
      .waitForResponse((r) => r.url().endsWith(".wasm"), { timeout: 30000 })
      .then((r) => r.headers()["content-type"]);

    const t0 = Date.now();
    await page.goto(`${url}?sizes=${size}&autorun=1`);
    const type = await wasmType;
    if (type !== "application/wasm") fail(`.wasm served as ${type}`);
    await page.waitForFunction(
      () => ["done", "error"].includes(document.querySelector("#status")?.dataset.state),
      null,
      { timeout: timeoutMs, polling: 250 },
    );
    const elapsed = ((Date.now() - t0) / 1000).toFixed(1);
    mkdirSync(dirname(screenshot), { recursive: true });
    await page.screenshot({ path: screenshot, fullPage: true });

    const s = await page.evaluate(() => ({
      status: document.querySelector("#status").textContent,
      state: document.querySelector("#status").dataset.state,
      gpuNote: document.querySelector("#gpu-note").textContent,
      seed: document.querySelector("#seed").innerText,
      seedOk: [...document.querySelectorAll("#seed [data-backend]")].map((e) => [e.dataset.backend, e.dataset.ok]),
      adapter: document.querySelector("#adapter-gpu").innerText,
      results: window.webtensorDemo.results,
      hasGpu: !!window.webtensorDemo.gpu,
      chartPoints: document.querySelectorAll("#chart circle").length,
      maxGapMs: window.__maxGapMs,
    }));
    const row = await page.locator(`#results tr[data-size="${size}"]`).innerText();
    console.log(`[${label}] finished in ${elapsed} s: ${s.status}`);
    console.log(`[${label}] ${s.adapter.replace(/\n/g, " | ")}`);
    console.log(`[${label}] results row: ${row.replace(/\s+/g, " ")}`);
    console.log(`[${label}] longest main-thread stall: ${s.maxGapMs.toFixed(0)} ms; screenshot ${screenshot}`);

    if (s.state !== "done") fail(`demo ended in state ${s.state}: ${s.status}`);
    if (s.maxGapMs > MAX_STALL_MS) fail(`the page froze for ${s.maxGapMs.toFixed(0)} ms (limit ${MAX_STALL_MS} ms)`);
    for (const r of SEED_ROWS) if (!s.seed.includes(r)) fail(`seed result row "${r}" not shown: ${s.seed}`);
    const r = s.results.find((x) => x.n === size);
    if (!r) fail(`no result for n = ${size}`);
    if (!(r.cpu?.gflops > 0)) fail(`no CPU result: ${JSON.stringify(r)}`);
    if (webgpu) {
      if (!s.hasGpu) fail(`no WebGPU on the page: ${s.gpuNote}`);
      for (const b of ["WebGPU", "CPU"]) {
        if (!s.seedOk.some(([name, ok]) => name === b && ok === "true")) fail(`seed on ${b}: ${JSON.stringify(s.seedOk)}`);
      }
      if (!(r.webgpu?.gflops > 0)) fail(`no WebGPU result: ${JSON.stringify(r)}`);
      if (!r.cmp?.agree) fail(`WebGPU and CPU disagree: ${JSON.stringify(r.cmp)}`);
      if (!/\d/.test(row.split(/\t/)[6] ?? "")) fail(`no max error shown: ${row}`);
      if (s.chartPoints !== 2) fail(`chart shows ${s.chartPoints} points, expected one per backend`);
    } else {
      if (s.hasGpu) fail("WebGPU was found although Chromium ran without --enable-unsafe-webgpu");
      if (!/WebGPU is not available/.test(s.gpuNote)) fail(`the page does not say that WebGPU is missing: "${s.gpuNote}"`);
      if (!s.seedOk.some(([name, ok]) => name === "CPU" && ok === "true")) fail(`seed on CPU: ${JSON.stringify(s.seedOk)}`);
      if (s.chartPoints !== 1) fail(`chart shows ${s.chartPoints} points, expected the CPU's`);
    }
  } catch (e) {
    if (log.length) console.error(`[${label}] browser log:\n${log.join("\n")}`);
    throw new Error(`[${label}] ${e.message}`);
  } finally {
    await context?.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

async function main() {
  if (!existsSync(join(root, "pkg/webtensor.js"))) fail("pkg/ is missing: run scripts/build-wasm.sh first");
  rmSync(join(root, "web/pkg"), { recursive: true, force: true });
  cpSync(join(root, "pkg"), join(root, "web/pkg"), { recursive: true });
  const { url, proc } = await startServer();
  try {
    await visit(url, { webgpu: true, screenshot: join(artifacts, "demo.png") });
    await visit(url, { webgpu: false, screenshot: join(artifacts, "demo-no-webgpu.png") });
  } finally {
    proc.kill();
  }
  console.log("e2e: ok");
}

main().catch((e) => {
  console.error(`e2e: FAILED: ${e.message}`);
  process.exit(1);
});
