// End-to-end test of the in-browser matmul demo: serves web/ (with pkg/ copied to web/pkg) on a free
// 127.0.0.1 port and opens it in headless Chromium (Debian's /usr/bin/chromium through playwright-core; no
// browser is downloaded), each visit with a fresh profile:
//   1. with WebGPU (--enable-unsafe-webgpu): runs one size on WebGPU and on the wasm CPU backend (and on
//      onnxruntime-web's WebGPU and wasm beside them), checks that they agree, that the seed example's result is shown for both, that the chart has both points, that
//      .wasm is served as application/wasm and that the page never stalls; saves artifacts/demo.png.
//   2. without WebGPU: the page must say so, say what to do, drop WebGPU from the chart and still run on the
//      CPU; saves artifacts/demo-no-webgpu.png.
//   3. Stop: during a WebGPU step and during a CPU step; the elapsed time ticks while a step runs, Stop takes
//      effect within the run in flight (CPU: at once), and the status says what was and was not compared.
//   4. at a desktop's and a phone's width (1280 and 390 px): nothing wider than the screen, no overlapping chart
//      texts or legend entries, readable chart text, legend swatches as their lines, the table's agree column
//      on screen (and a hint when the table scrolls); saves artifacts/demo-1280px.png and demo-390px.png.
//   5. opened as a file:// page: it says to serve it (scripts/serve.sh) instead of loading forever.
//
//   scripts/build-wasm.sh && (cd tests/e2e && npm ci) && node tests/e2e/demo.mjs
//
// Env: CHROMIUM (default /usr/bin/chromium), E2E_SIZE (default 256), E2E_TIMEOUT_S (per visit, default 180).
import { chromium } from "playwright-core";
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { CHROMIUM_FLAGS, startServer } from "./serve.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const size = Number(process.env.E2E_SIZE ?? 256);
const timeoutMs = Number(process.env.E2E_TIMEOUT_S ?? 180) * 1000;
const artifacts = join(root, "artifacts");
/** The page must never stop handling events for longer than this (page load and wasm compile included). */
const MAX_STALL_MS = 1000;
const SEED_ROWS = ["60 55 50 110", "90 54 54 126", "42 29 28 64"];
function fail(msg) {
  throw new Error(msg);
}

/** The checks of one visit (see `visit`): `s` the page's state, `row` and `cell` the results row's text. */
function checkVisit(s, row, cell, webgpu) {
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
    if (/not reported/.test(s.adapter.split("\n").find((l) => /adapter/.test(l)) ?? "")) fail(`adapter not named: ${s.adapter}`);
    if (!/software/.test(s.swNote)) fail(`the page does not say the adapter (SwiftShader) is a software one: "${s.swNote}"`);
    if (!r.cmp?.agree) fail(`WebGPU and CPU disagree: ${JSON.stringify(r.cmp)}`);
    if (!/\d/.test(cell["max-abs"] ?? "")) fail(`no max error shown: ${row}`);
    // onnxruntime-web beside it on the same page: both of its engines ran, agree with webtensor, and the
    // ratios are shown
    if (!(r.ortWebgpu?.gflops > 0) || !(r.ortWasm?.gflops > 0)) fail(`no onnxruntime-web result: ${JSON.stringify(r)}`);
    if (r.ortAgree !== true) fail(`onnxruntime-web disagrees with webtensor: ${JSON.stringify(r.ortCmp)}`);
    if (!/\d\.\d\dx/.test(cell["webgpu-vs-ort"] ?? "") || !/\d\.\d\dx/.test(cell["cpu-vs-ort"] ?? "")) fail(`no ratios shown: ${row}`);
    if (s.chartPoints !== 2) fail(`chart shows ${s.chartPoints} points, expected one per backend`);
  } else {
    if (s.hasGpu) fail("WebGPU was found although Chromium ran without --enable-unsafe-webgpu");
    if (!/WebGPU is not available/.test(s.gpuNote)) fail(`the page does not say that WebGPU is missing: "${s.gpuNote}"`);
    if (!/enable-unsafe-webgpu/.test(s.gpuNote) || /not requested/.test(s.gpuNote)) fail(`no advice, or wgpu's internals: "${s.gpuNote}"`);
    if (/WebGPU/.test(s.legend)) fail(`the chart still has a WebGPU series: "${s.legend}"`);
    if (!s.seedOk.some(([name, ok]) => name === "CPU" && ok === "true")) fail(`seed on CPU: ${JSON.stringify(s.seedOk)}`);
    if (s.chartPoints !== 1) fail(`chart shows ${s.chartPoints} points, expected the CPU's`);
  }
}

/**
 * Main-thread responsiveness: records on `page` the largest gap between 20 ms interval ticks over the whole visit,
 * apart from the gaps while onnxruntime-web loads and compiles its WebGPU session (the peer's own main-thread work,
 * about 0.5 s twice on SwiftShader), which are kept apart (`__maxGapMs`, `__maxOrtGapMs`).
 */
async function watchStalls(page) {
  await page.addInitScript(() => {
    let last = performance.now();
    window.__maxGapMs = 0;
    window.__maxOrtGapMs = 0;
    setInterval(() => {
      const now = performance.now();
      const ort = /ORT WebGPU/.test(document.querySelector("#progress-text")?.textContent ?? "");
      const key = ort ? "__maxOrtGapMs" : "__maxGapMs";
      window[key] = Math.max(window[key], now - last);
      last = now;
    }, 20);
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
      args: webgpu ? [...CHROMIUM_FLAGS, "--enable-unsafe-webgpu"] : CHROMIUM_FLAGS,
    });
    const page = context.pages()[0] ?? (await context.newPage());
    page.on("console", (m) => log.push(`console.${m.type()}: ${m.text()}`));
    page.on("pageerror", (e) => log.push(`pageerror: ${e.message}`));
    page.on("requestfailed", (r) => log.push(`requestfailed: ${r.url()} ${r.failure()?.errorText}`));
    await watchStalls(page);
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
      swNote: document.querySelector("#sw-note").textContent,
      legend: document.querySelector("#chart-legend").textContent,
      seed: document.querySelector("#seed").innerText,
      seedOk: [...document.querySelectorAll("#seed [data-backend]")].map((e) => [e.dataset.backend, e.dataset.ok]),
      adapter: document.querySelector("#adapter-gpu").innerText,
      results: window.webtensorDemo.results,
      hasGpu: !!window.webtensorDemo.gpu,
      chartPoints: document.querySelectorAll("#chart circle").length,
      maxGapMs: window.__maxGapMs,
      maxOrtGapMs: window.__maxOrtGapMs,
    }));
    const row = await page.locator(`#results tr[data-size="${size}"]`).innerText();
    const cell = Object.fromEntries(await page.$$eval(`#results tr[data-size="${size}"] td[data-col]`,
      (tds) => tds.map((td) => [td.dataset.col, td.textContent])));
    console.log(`[${label}] finished in ${elapsed} s: ${s.status}`);
    console.log(`[${label}] ${s.adapter.replace(/\n/g, " | ")}`);
    console.log(`[${label}] results row: ${row.replace(/\s+/g, " ")}`);
    console.log(`[${label}] longest main-thread stall: ${s.maxGapMs.toFixed(0)} ms (${s.maxOrtGapMs.toFixed(0)} ms ` +
      `while onnxruntime-web loaded its WebGPU session); screenshot ${screenshot}`);

    checkVisit(s, row, cell, webgpu);
  } catch (e) {
    if (log.length) console.error(`[${label}] browser log:\n${log.join("\n")}`);
    throw new Error(`[${label}] ${e.message}`);
  } finally {
    await context?.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

/** A fresh headless Chromium (WebGPU on) with a page at `viewport`; `use(page)` runs the checks. */
async function withPage(label, viewport, use) {
  const profile = mkdtempSync(join(tmpdir(), "webtensor-e2e-"));
  let context;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
      headless: true,
      viewport,
      args: [...CHROMIUM_FLAGS, "--enable-unsafe-webgpu"],
    });
    const page = context.pages()[0] ?? (await context.newPage());
    await use(page);
  } catch (e) {
    throw new Error(`[${label}] ${e.message}`);
  } finally {
    await context?.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

const state = (page) => page.evaluate(() => document.querySelector("#status").dataset.state);
const statusText = (page) => page.evaluate(() => document.querySelector("#status").textContent);

/** Runs `sizes` on `backends`, clicks Stop once `backend`'s step for the last size runs, checks what follows. */
async function stopDuring(url, backend, sizes, workers = 1) {
  const label = `stop during ${backend}${workers > 1 ? ` (${workers} workers)` : ""}`;
  await withPage(label, { width: 1200, height: 900 }, async (page) => {
    // no ORT, and one CPU worker unless asked: the steps' lengths are what the Stop checks are sized for (several
    // workers wait in Atomics.wait between runs: Stop must still end the step at once)
    await page.goto(`${url}?sizes=${sizes.join(",")}&workers=${workers}&ort=0`);
    await page.waitForFunction(() => document.querySelector("#status").dataset.state === "ready", null, { timeout: timeoutMs });
    if (backend === "CPU") await page.uncheck("#use-webgpu");
    await page.click("#run");
    const last = sizes[sizes.length - 1];
    await page.waitForFunction(
      ([b, n]) => document.querySelector("#progress-text").textContent.startsWith(`n = ${n}: ${b}`),
      [backend, last],
      { timeout: timeoutMs, polling: 50 },
    );
    // the elapsed time ticks while the step runs
    const before = await page.textContent("#progress-text");
    await page.waitForTimeout(700);
    const after = await page.textContent("#progress-text");
    if (before === after) fail(`the status did not change over 0.7 s: "${after}"`);
    const t = Date.now();
    await page.click("#stop");
    const waiting = await statusText(page);
    await page.waitForFunction(() => document.querySelector("#status").dataset.state === "done", null, { timeout: timeoutMs, polling: 50 });
    const took = (Date.now() - t) / 1000;
    const text = await statusText(page);
    console.log(`[${label}] stopped in ${took.toFixed(1)} s; while waiting: "${waiting}"; then: "${text}"`);
    if (!/^Stopped/.test(text)) fail(`status after Stop: "${text}"`);
    if (backend === "CPU" && took > 2) fail(`a CPU step took ${took.toFixed(1)} s to stop (it is terminated at once)`);
    if (backend === "CPU" && !new RegExp(`during the CPU step of n = ${last}, 1 of 2 steps run`).test(text)) {
      fail(`does not say which step was stopped: "${text}"`);
    }
    if (backend === "WebGPU") {
      if (!/waiting for the WebGPU run in flight/.test(waiting)) fail(`Stop did not say what it waits for: "${waiting}"`);
      if (new RegExp(`agree for n = [\\d, ]*\\b${last}\\b`).test(text)) fail(`claims agreement for n = ${last}: "${text}"`);
      if (!new RegExp(`n = ${last} ran on WebGPU only`).test(text)) fail(`does not say n = ${last} was not compared: "${text}"`);
    }
  });
}

/** Opened as a file (not served), the page says to serve it instead of "Loading…" forever. */
async function asFile() {
  await withPage("file://", { width: 1200, height: 900 }, async (page) => {
    await page.goto(`file://${join(root, "web/index.html")}`);
    const text = await statusText(page);
    console.log(`[file://] ${text}`);
    if (!/served over HTTP/.test(text) || !/scripts\/serve\.sh/.test(text)) fail(`opened as a file, the page says: "${text}"`);
  });
}

/** What the chart and the table look like in `page` (see `layout`). */
function measureLayout() {
  const box = (e) => {
    const b = e.getBoundingClientRect();
    return { l: b.left, t: b.top, r: b.right, b: b.bottom, h: b.height, text: e.textContent.trim() };
  };
  const texts = [...document.querySelectorAll("#chart text")].map(box);
  const legend = [...document.querySelectorAll("#chart-legend .item")].map(box);
  const all = [...texts, ...legend];
  const overlaps = [];
  for (let i = 0; i < all.length; i++) {
    for (let j = i + 1; j < all.length; j++) {
      const [a, b] = [all[i], all[j]];
      if (Math.min(a.r, b.r) - Math.max(a.l, b.l) > 0.5 && Math.min(a.b, b.b) - Math.max(a.t, b.t) > 0.5) {
        overlaps.push(`"${a.text}" / "${b.text}"`);
      }
    }
  }
  const style = (l) => l && `${l.getAttribute("stroke")} ${l.getAttribute("stroke-dasharray") ?? "solid"}`;
  const swatches = [...document.querySelectorAll("#chart-legend .item[data-series]")].map((e) => {
    const line = document.querySelector(`#chart polyline[data-series="${e.dataset.series}"]`);
    return { series: e.dataset.series, swatch: style(e.querySelector("line")), line: style(line) };
  });
  const wrap = document.querySelector(".table-wrap");
  const agree = [...document.querySelectorAll("#results th")].find((th) => th.textContent === "agree");
  return {
    width: document.documentElement.scrollWidth,
    texts: texts.length,
    overlaps,
    small: texts.filter((t) => t.h < 9).map((t) => `"${t.text}" ${t.h.toFixed(1)} px`),
    swatches,
    agreeOnScreen: agree.getBoundingClientRect().right <= window.innerWidth,
    tableOverflows: wrap.scrollWidth > wrap.clientWidth + 1,
    hint: !document.getElementById("table-hint").hidden,
  };
}

/** At a desktop's (1280 px) and a phone's (390 px) width, after two sizes on every backend and ORT: nothing
 *  scrolls sideways, no two of the chart's texts and legend entries overlap (value labels of close values
 *  included), chart text is at least 9 px tall, each legend swatch has its line's colour and dash, and the table's
 *  agree column is on screen, with a hint whenever the table is wider than its box. Saves
 *  artifacts/demo-<width>px.png. */
async function layout(url, width) {
  await withPage(`${width} px`, { width, height: 900 }, async (page) => {
    await page.goto(`${url}?sizes=64,128&autorun=1`);
    await page.waitForFunction(() => ["done", "error"].includes(document.querySelector("#status").dataset.state), null, { timeout: timeoutMs });
    if ((await state(page)) !== "done") fail(`ended as: ${await statusText(page)}`);
    const shot = join(artifacts, `demo-${width}px.png`);
    await page.screenshot({ path: shot, fullPage: true });
    const m = await page.evaluate(measureLayout);
    console.log(`[${width} px] page width ${m.width} px, ${m.texts} chart texts, ${m.swatches.length} series; ` +
      `table ${m.tableOverflows ? "scrolls (hint shown)" : "fits"}; screenshot ${shot}`);
    if (m.width > width) fail(`the page is ${m.width} px wide at a ${width} px viewport (it scrolls sideways)`);
    if (m.overlaps.length) fail(`at ${width} px these overlap: ${m.overlaps.join(", ")}`);
    if (m.small.length) fail(`at ${width} px chart text is too small to read: ${m.small.join(", ")}`);
    const wrong = m.swatches.filter((s) => s.swatch !== s.line);
    if (m.swatches.length < 2 || wrong.length) fail(`legend swatches vs lines: ${JSON.stringify(m.swatches)}`);
    if (!m.agreeOnScreen) fail(`at ${width} px the table's agree column is off-screen`);
    if (m.tableOverflows !== m.hint) fail(`at ${width} px the table ${m.tableOverflows ? "overflows without" : "fits but shows"} the hint`);
  });
}

async function main() {
  if (!existsSync(join(root, "pkg/webtensor.js"))) fail("pkg/ is missing: run scripts/build-wasm.sh first");
  rmSync(join(root, "web/pkg"), { recursive: true, force: true });
  cpSync(join(root, "pkg"), join(root, "web/pkg"), { recursive: true });
  // onnxruntime-web, the benchmark's peer, where scripts/serve.sh links it
  const ort = join(root, "tests/e2e/node_modules/onnxruntime-web/dist");
  if (!existsSync(ort)) fail("no onnxruntime-web: cd tests/e2e && npm ci");
  rmSync(join(root, "web/vendor/ort"), { recursive: true, force: true });
  mkdirSync(join(root, "web/vendor"), { recursive: true });
  symlinkSync("../../tests/e2e/node_modules/onnxruntime-web/dist", join(root, "web/vendor/ort"));
  writeFileSync(join(root, "web/vendor/peers.json"), JSON.stringify({ ort: true }));
  const { url, proc } = await startServer(join(root, "web"));
  try {
    await visit(url, { webgpu: true, screenshot: join(artifacts, "demo.png") });
    await visit(url, { webgpu: false, screenshot: join(artifacts, "demo-no-webgpu.png") });
    // the WebGPU step too: 1536³ is ~2 s on SwiftShader here (1024³ is about one second since the unrolled kernel)
    await stopDuring(url, "WebGPU", [64, 1536]);
    // the CPU step must outlast the 0.7 s tick check and the click: 2560³ is ~3 s of wasm on one thread here
    // (1536³ ended before the click on a machine where wasm reaches 10 GFLOP/s)
    await stopDuring(url, "CPU", [64, 2560]);
    await stopDuring(url, "CPU", [64, 3072], 2);
    await layout(url, 1280);
    await layout(url, 390);
    await asFile();
  } finally {
    proc.kill();
  }
  console.log("e2e: ok");
}

main().catch((e) => {
  console.error(`e2e: FAILED: ${e.message}`);
  process.exit(1);
});
