// The in-browser matmul demo: WebGPU on the main thread (everything is async, the GPU works elsewhere), the
// wasm CPU backend in module workers (cpu-pool.js), and onnxruntime-web beside them when it is served
// (ort-peer.js). URL parameters: ?sizes=256,512 preselects sizes, &autorun=1 runs them once the page is ready,
// &workers=N sets the CPU workers (and ORT's wasm threads), &ort=0 leaves ORT out. window.webtensorDemo exposes
// the state for tests.
import init, { Device, Graph } from "./pkg/webtensor.js";
import { benchMatmul, randomMatrix, seedExample } from "./bench.js";
import { CpuPool } from "./cpu-pool.js";
import { abortOrtWasm, benchOrtWasm, benchOrtWebGPU, ortServed } from "./ort-peer.js";

const $ = (sel) => document.querySelector(sel);
const SEED = [60, 55, 50, 110, 90, 54, 54, 126, 42, 29, 28, 64];
/** GPU and CPU results agree when max|Δ| / max|C| is at most this. */
const REL_TOL = 1e-4;

const demo = { state: "loading", gpu: null, gpuError: null, cpuInfo: null, seed: {}, results: [], gpuCompileOptions: {} };
window.webtensorDemo = demo;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function setStatus(text, state) {
  const el = $("#status");
  el.textContent = text;
  if (state) {
    el.dataset.state = state;
    demo.state = state;
  }
}

// ---- the CPU workers ---------------------------------------------------------------------------------

const pool = new CpuPool();
const callWorker = (msg, onProgress) => pool.call(0, msg, onProgress);

// ---- devices and the seed example ---------------------------------------------------------------------

function fmtBytes(b) {
  if (b >= 2 ** 30) return `${(b / 2 ** 30).toFixed(b % 2 ** 30 ? 1 : 0)} GiB`;
  if (b >= 2 ** 20) return `${(b / 2 ** 20).toFixed(b % 2 ** 20 ? 1 : 0)} MiB`;
  if (b >= 2 ** 10) return `${(b / 2 ** 10).toFixed(0)} KiB`;
  return `${b} B`;
}

function infoList(title, info, extra = {}) {
  const gpuLimits = info.backend === "cpu" ? {} : {
    "max storage binding": fmtBytes(info.maxStorageBindingBytes),
    "max buffer": fmtBytes(info.maxBufferBytes),
    "workgroup storage": fmtBytes(info.maxWorkgroupStorageBytes),
    "invocations / workgroup": info.maxInvocationsPerWorkgroup,
    "workgroups / dimension": info.maxWorkgroupsPerDimension,
    "shader-f16": info.shaderF16 ? "yes" : "no",
    subgroups: info.subgroups ? "yes" : "no",
  };
  const rows = {
    backend: info.backend,
    adapter: info.name || extra.adapter || "not reported by the browser",
    type: info.deviceType,
    driver: info.driver || "not reported by the browser",
    ...gpuLimits,
    dtypes: info.dtypes.join(", "),
  };
  const dl = Object.entries(rows)
    .map(([k, v]) => `<dt>${k}</dt><dd>${String(v).replace(/</g, "&lt;")}</dd>`)
    .join("");
  return `<strong>${title}</strong><dl>${dl}</dl>`;
}

/** The browser's own adapter: `null` when it exposes none, else its info (vendor, architecture, description). */
async function browserAdapter() {
  try {
    const a = await navigator.gpu.requestAdapter();
    if (!a) return null;
    const i = a.info ?? {};
    const text = [i.vendor, i.architecture, i.device, i.description].filter(Boolean).join(" / ");
    // SwiftShader (Chrome's CPU fallback) reports vendor "google", architecture "swiftshader"; others say cpu
    const software = /swiftshader|llvmpipe|lavapipe|software|warp/i.test(text) || a.isFallbackAdapter === true;
    return { text, software };
  } catch {
    return null;
  }
}

const NO_WEBGPU_ADVICE =
  "Use a browser with WebGPU (Chrome or Edge 113 or later, Safari 26, Firefox 141 on Windows). On Linux, Chrome " +
  "needs the --enable-unsafe-webgpu flag (or chrome://flags/#enable-unsafe-webgpu); chrome://gpu shows WebGPU's " +
  "status. Running on the CPU (wasm) only.";

function seedBlock(label, values) {
  const ok = values.length === SEED.length && values.every((v, i) => v === SEED[i]);
  const rows = [0, 1, 2].map((r) => values.slice(r * 4, r * 4 + 4).join(" ")).join("\n");
  return `<div data-backend="${label}" data-ok="${ok}"><strong>${label}</strong>
    <span class="${ok ? "seed-ok" : "seed-bad"}">${ok ? "✓ matches ggml" : "✗ differs from ggml"}</span>
    <pre>${rows}</pre></div>`;
}

async function setup() {
  await init();
  setStatus("Creating devices…");
  const adapter = "gpu" in navigator ? await browserAdapter() : null;
  if (!("gpu" in navigator)) {
    demo.gpuError = "this browser exposes no WebGPU (navigator.gpu is missing)";
  } else if (!adapter) {
    demo.gpuError = "this browser exposes no WebGPU adapter (requestAdapter() gave none)";
  } else {
    try {
      demo.gpu = await Device.create("webgpu");
    } catch (e) {
      demo.gpuError = "WebGPU could not create a device";
      console.info(`webtensor: Device.create("webgpu"): ${e.message}`);
    }
  }
  if (demo.gpu) {
    const info = demo.gpu.info();
    demo.gpuInfo = info.toJSON();
    demo.gpuSoftware = adapter.software || info.deviceType === "cpu";
    const extra = { adapter: adapter.text };
    $("#adapter-gpu").innerHTML = infoList("WebGPU", info, extra);
    if (demo.gpuSoftware) {
      $("#sw-note").textContent =
        `The WebGPU adapter here is a software one (${adapter.text || "the browser's CPU fallback"}): it runs ` +
        "the GPU's work on the CPU, so WebGPU is expected to be far slower than the wasm CPU backend on this " +
        "machine. A hardware adapter needs a GPU and driver the browser accepts (see chrome://gpu).";
    }
  } else {
    $("#gpu-note").textContent = `WebGPU is not available: ${demo.gpuError}. ${NO_WEBGPU_ADVICE}`;
    $("#adapter-gpu").innerHTML = `<strong>WebGPU</strong>: not available`;
    $("#use-webgpu").checked = false;
    $("#use-webgpu").disabled = true;
  }

  const cpu = await callWorker({ type: "info" });
  demo.cpuInfo = cpu.info;
  $("#adapter-cpu").innerHTML = infoList("CPU (wasm, Web Workers)", cpu.info);
  const most = CpuPool.available();
  $("#workers").max = most;
  $("#workers").value = Math.min(most, Number($("#workers").value) || most);
  $("#workers-note").textContent = self.crossOriginIsolated
    ? `(up to ${most}: the cores the browser reports)`
    : "(1: several need a cross-origin isolated page, as scripts/serve.sh serves it)";
  demo.ortServed = await ortServed();
  if (!demo.ortServed) {
    $("#use-ort").checked = false;
    $("#use-ort").disabled = true;
    $("#ort-note").textContent = "onnxruntime-web is not served (scripts/serve.sh links it from tests/e2e after npm ci).";
  }

  setStatus("Computing the seed example…");
  const blocks = [];
  if (demo.gpu) {
    demo.seed.webgpu = await seedExample(Graph, demo.gpu);
    blocks.push(seedBlock("WebGPU", demo.seed.webgpu));
  }
  demo.seed.cpu = (await callWorker({ type: "seed" })).seed;
  blocks.push(seedBlock("CPU", demo.seed.cpu));
  $("#seed").innerHTML = blocks.join("");
}

// ---- benchmark ------------------------------------------------------------------------------------

function selectedSizes() {
  const sizes = [...document.querySelectorAll("input.size:checked")].map((el) => Number(el.value));
  for (const s of $("#custom-sizes").value.split(/[\s,]+/)) {
    if (s === "") continue;
    const n = Number(s);
    if (!Number.isInteger(n) || n < 1 || n > 8192) throw new Error(`bad size "${s}" (1 to 8192)`);
    sizes.push(n);
  }
  return [...new Set(sizes)].sort((a, b) => a - b);
}

function compare(gpu, cpu) {
  let maxAbs = 0;
  let maxRef = 0;
  for (let i = 0; i < cpu.length; i++) {
    const d = Math.abs(gpu[i] - cpu[i]);
    if (!(d <= maxAbs)) maxAbs = d; // NaN propagates
    maxRef = Math.max(maxRef, Math.abs(cpu[i]));
  }
  const maxRel = maxAbs / (maxRef || 1);
  return { maxAbs, maxRel, agree: maxRel <= REL_TOL };
}

const fmt = (x, d = 1) => (x === undefined ? "—" : x.toFixed(d));
const fmtErr = (x) => (x === undefined ? "—" : Number.isNaN(x) ? "NaN" : x === 0 ? "0" : x.toExponential(2));

const runsTitle = (x) =>
  x ? `median of ${x.reps} run(s)${x.compileMs === undefined ? "" : `; compile ${x.compileMs.toFixed(1)} ms`}` : "";

/** webtensor's GFLOP/s over ORT's, as "1.05x". */
const ratio = (ours, peer) => (ours && peer ? `${(ours.gflops / peer.gflops).toFixed(2)}x` : "—");
const peerTitle = (x, cmp) => (x ? `${runsTitle(x)}; ${fmt(x.ms, 2)} ms${x.threads ? `, ${x.threads} thread(s)` : ""}` +
  (cmp ? `; max rel err against webtensor ${fmtErr(cmp.maxRel)}` : "") : "");

function renderRow(r) {
  let tr = document.querySelector(`#results tr[data-size="${r.n}"]`);
  if (!tr) {
    tr = document.createElement("tr");
    tr.dataset.size = r.n;
    const rows = [...document.querySelectorAll("#results tbody tr")];
    const after = rows.find((x) => Number(x.dataset.size) > r.n);
    $("#results tbody").insertBefore(tr, after ?? null);
  }
  const agree = r.cmp ? (r.cmp.agree && r.ortAgree !== false ? "✓ yes" : "✗ no") : r.error ? "error" : "—";
  tr.dataset.agree = r.cmp ? String(r.cmp.agree) : "";
  tr.dataset.ortAgree = r.ortAgree === undefined ? "" : String(r.ortAgree);
  const cell = (key, col, value) => `<td class="${key.startsWith("ort") ? "peer" : key}" data-col="${col}">${value}</td>`;
  tr.innerHTML = `<td>${r.n}</td>
    <td data-col="agree" class="${r.cmp ? (r.cmp.agree && r.ortAgree !== false ? "agree-yes" : "agree-no") : ""}">${agree}</td>
    <td class="gpu" data-col="webgpu-ms" title="${runsTitle(r.webgpu)}">${r.webgpu ? fmt(r.webgpu.ms, 2) : r.webgpuError ?? "—"}</td>
    <td class="gpu" data-col="webgpu-gflops">${fmt(r.webgpu?.gflops, 2)}</td>
    <td class="cpu" data-col="cpu-ms" title="${runsTitle(r.cpu)}${r.cpu ? `; ${r.cpu.workers} worker(s)` : ""}">${r.cpu ? fmt(r.cpu.ms, 2) : r.cpuError ?? "—"}</td>
    <td class="cpu" data-col="cpu-gflops">${fmt(r.cpu?.gflops, 2)}</td>
    <td class="gpu peer" data-col="ort-webgpu-gflops" title="${peerTitle(r.ortWebgpu, r.ortCmp?.ortWebgpu)}">${r.ortWebgpu ? fmt(r.ortWebgpu.gflops, 2) : r.ortWebgpuError ?? "—"}</td>
    <td class="cpu peer" data-col="ort-wasm-gflops" title="${peerTitle(r.ortWasm, r.ortCmp?.ortWasm)}">${r.ortWasm ? fmt(r.ortWasm.gflops, 2) : r.ortWasmError ?? "—"}</td>
    ${cell("gpu", "webgpu-vs-ort", ratio(r.webgpu, r.ortWebgpu))}
    ${cell("cpu", "cpu-vs-ort", ratio(r.cpu, r.ortWasm))}
    <td data-col="max-abs">${fmtErr(r.cmp?.maxAbs)}</td>
    <td data-col="max-rel">${fmtErr(r.cmp?.maxRel)}</td>`;
  showScrollHint();
}

/** The hint under a table wider than its box (a phone): the columns past the edge are there, sideways. */
function showScrollHint() {
  const wrap = $("#results").parentElement;
  $("#table-hint").hidden = wrap.scrollWidth <= wrap.clientWidth + 1;
}

let stopRequested = false;
/** The step in flight: { backend, n, started }, for Stop's message and the ticking status. */
let current = null;
/** Each backend's median run at its last size (ms), to estimate the next step (a run grows as n³). */
const lastRun = {};

/** The step's expected length, said when it is 2 s or more: a run past LONG_RUN_MS (1 s) is timed once, a
 *  shorter one is repeated for 0.2 s of warm-up and about 0.4 s of timed runs (bench.js's timeRuns). */
function estimate(backend, n) {
  const prev = lastRun[backend];
  if (!prev) return "";
  const run = (prev.ms * (n / prev.n) ** 3) / 1000;
  const s = run >= 1 ? run : 0.6 + 2 * run;
  return s >= 2 ? `, about ${s < 10 ? s.toFixed(1) : s.toFixed(0)} s expected` : "";
}

/** What a finished or stopped run compared: sizes where both ran and agree, and sizes one backend skipped. */
function summary(useGpu, useCpu) {
  const agree = demo.results.filter((r) => r.cmp?.agree).map((r) => r.n);
  const partial = demo.results.filter((r) => (r.webgpu || r.cpu) && !r.cmp && useGpu && useCpu);
  const parts = [];
  if (agree.length) parts.push(`WebGPU and CPU agree for n = ${agree.join(", ")}`);
  for (const r of partial) {
    const ran = r.webgpu ? "WebGPU" : "CPU";
    const missing = r.webgpu ? "the CPU" : "WebGPU";
    parts.push(`n = ${r.n} ran on ${ran} only (${missing} did not run, so nothing was compared)`);
  }
  return parts.join("; ");
}

/** The engines a size runs on, in order: webtensor's two backends, then onnxruntime-web's. */
const BACKENDS = {
  webgpu: { label: "WebGPU", run: (n, a, b, p, stop) => benchMatmul(Graph, demo.gpu, n, a, b, p, stop, demo.gpuCompileOptions) },
  cpu: { label: "CPU", run: (n, a, b, p, stop) => pool.bench(n, a, b, p, stop) },
  ortWebgpu: { label: "ORT WebGPU", run: (n, a, b, p, stop) => benchOrtWebGPU(n, a, b, p, stop) },
  ortWasm: { label: "ORT wasm", run: (n, a, b, p) => benchOrtWasm(n, a, b, pool.size, p) },
};

async function runStep(key, n, a, b, step) {
  const { label, run } = BACKENDS[key];
  current = { backend: key, n, started: performance.now() };
  try {
    step(label, "starting");
    const r = await run(n, a, b, (p) => step(label, p), () => stopRequested);
    if (r?.ms > 0) lastRun[key] = { n, ms: r.ms };
    return r;
  } finally {
    current = null;
  }
}

/** One backend's step of size `n` into the row `r` (its figures, or its error) and `outputs`; "stopped" when the
 *  user's Stop ended it. */
async function runKey(key, n, r, { a, b, step, outputs }) {
  try {
    const res = await runStep(key, n, a, b, step);
    r[key] = { ms: res.ms, gflops: res.gflops, reps: res.reps, compileMs: res.compileMs, workers: res.workers,
      threads: res.threads };
    outputs[key] = res.c;
    return "done";
  } catch (e) {
    if (stopRequested) return "stopped";
    r[`${key}Error`] = "error";
    r.error = `${BACKENDS[key].label} n=${n}: ${e.message}`;
    return "failed";
  }
}

async function runBenchmark() {
  let sizes;
  try {
    sizes = selectedSizes();
  } catch (e) {
    setStatus(e.message, "error");
    return;
  }
  const useGpu = demo.gpu && $("#use-webgpu").checked;
  const useCpu = $("#use-cpu").checked;
  const useOrt = demo.ortServed && $("#use-ort").checked;
  const keys = [useGpu && "webgpu", useCpu && "cpu", useOrt && useGpu && "ortWebgpu", useOrt && useCpu && "ortWasm"]
    .filter(Boolean);
  pool.resize(Math.max(1, Math.min(CpuPool.available(), Math.floor(Number($("#workers").value)) || 1)));
  if (!sizes.length || !(useGpu || useCpu)) {
    setStatus("Choose at least one size and one backend.", "ready");
    return;
  }
  $("#run").disabled = true;
  $("#stop").disabled = false;
  stopRequested = false;
  const steps = sizes.length * keys.length;
  let done = 0;
  const progress = $("#progress");
  progress.max = steps;
  progress.value = 0;
  const t0 = performance.now();
  let what = "";
  const render = () => {
    const total = ((performance.now() - t0) / 1000).toFixed(1);
    const inStep = current ? ((performance.now() - current.started) / 1000).toFixed(1) : "0.0";
    const text = `${what} (step ${Math.min(done + 1, steps)} of ${steps}: ${inStep} s in this step, ${total} s in all)`;
    if (!stopRequested) setStatus(`Running… ${text}`, "running");
    $("#progress-text").textContent = text;
  };
  // the elapsed times tick while a step runs, however long it is
  const ticker = setInterval(render, 250);
  let stoppedDuring = "";
  const step = (backend, p) => {
    what = `n = ${current?.n ?? ""}: ${backend} ${p}${estimate(current?.backend, current?.n ?? 0)}`;
    render();
  };

  for (const n of sizes) {
    if (stopRequested) break;
    const r = { n };
    const prev = demo.results.findIndex((x) => x.n === n);
    if (prev >= 0) demo.results.splice(prev, 1);
    demo.results.push(r);
    demo.results.sort((x, y) => x.n - y.n);
    renderRow(r);
    const a = randomMatrix(n * n, 1234 + n);
    const b = randomMatrix(n * n, 5678 + n);
    const outputs = {};
    for (const key of keys) {
      if (stopRequested) break;
      const ok = await runKey(key, n, r, { a, b, step, outputs });
      if (ok === "stopped") stoppedDuring = `the ${BACKENDS[key].label} step of n = ${n}`;
      else done++;
      progress.value = done;
      renderRow(r);
      drawChart();
      await sleep(0);
    }
    compareOutputs(r, outputs);
    renderRow(r);
    drawChart();
    await sleep(0); // let the page paint between sizes
  }
  clearInterval(ticker);

  $("#run").disabled = false;
  $("#stop").disabled = true;
  reportBenchmark({ t0, useGpu, useCpu, done, steps, stoppedDuring });
}

/** One size's comparisons into `r`: WebGPU against the CPU, onnxruntime-web's results against webtensor's (the
 *  CPU's, else WebGPU's). */
function compareOutputs(r, outputs) {
  if (outputs.webgpu && outputs.cpu) r.cmp = compare(outputs.webgpu, outputs.cpu);
  // ORT's results against webtensor's (the CPU's, else WebGPU's)
  const ours = outputs.cpu ?? outputs.webgpu;
  for (const key of ["ortWebgpu", "ortWasm"]) {
    if (!outputs[key] || !ours) continue;
    r.ortCmp = { ...r.ortCmp, [key]: compare(outputs[key], ours) };
  }
  if (r.ortCmp) r.ortAgree = Object.values(r.ortCmp).every((c) => c.agree);
}

/** The status line once a benchmark has ended: errors, disagreements, a stop, or done. */
function reportBenchmark({ t0, useGpu, useCpu, done, steps, stoppedDuring }) {
  const errors = demo.results.filter((r) => r.error).map((r) => r.error);
  const disagree = demo.results.filter((r) => (r.cmp && !r.cmp.agree) || r.ortAgree === false).map((r) => r.n);
  const secs = ((performance.now() - t0) / 1000).toFixed(1);
  const compared = summary(useGpu, useCpu);
  $("#progress-text").textContent = "";
  if (errors.length) setStatus(`Finished with errors in ${secs} s: ${errors.join("; ")}`, "error");
  else if (disagree.length) setStatus(`Finished in ${secs} s, but the results disagree for n = ${disagree.join(", ")}`, "error");
  else if (stopRequested) {
    const where = stoppedDuring ? ` during ${stoppedDuring}` : "";
    setStatus(`Stopped after ${secs} s${where}, ${done} of ${steps} steps run${compared ? `: ${compared}` : ""}.`, "done");
  }
  else setStatus(`Done in ${secs} s${compared ? `: ${compared}` : ""}.`, "done");
}

// ---- chart (plain SVG) --------------------------------------------------------------------------------

/** The series drawn: each one's line, marker and legend swatch share its colour and dash. */
function chartSeries(pts) {
  return [
    { key: "webgpu", label: demo.gpuSoftware ? "WebGPU (software adapter)" : "WebGPU", color: "var(--gpu)" },
    { key: "cpu", label: "CPU (wasm)", color: "var(--cpu)" },
    { key: "ortWebgpu", label: "ORT WebGPU", color: "var(--gpu)", dash: true },
    { key: "ortWasm", label: "ORT wasm", color: "var(--cpu)", dash: true },
  ].filter((s) => (s.key !== "webgpu" || demo.gpu) && (!s.dash || pts.some((r) => r[s.key])));
}

/** A series' marker at (x, y): a circle for webtensor, a square for the ORT peer. */
const marker = (s, x, y) => s.dash
  ? `<rect x="${x - 4}" y="${y - 4}" width="8" height="8" fill="${s.color}"/>`
  : `<circle cx="${x}" cy="${y}" r="4" fill="${s.color}"/>`;

/** The legend, in HTML so that it wraps on a narrow screen: each swatch is the series' own line and marker. */
function drawLegend(series, log) {
  $("#chart-legend").innerHTML = series.map((s) => `<span class="item" data-series="${s.key}">` +
    `<svg width="30" height="12" viewBox="0 0 30 12"><line x1="1" x2="29" y1="6" y2="6" stroke="${s.color}" ` +
    `stroke-width="2"${s.dash ? ` stroke-dasharray="6 4"` : ""}/>${marker(s, 15, 6)}</svg>${s.label}</span>`).join("") +
    (log ? `<span class="item">log scale</span>` : "");
}

/** Value labels beside their markers, moved apart vertically where two would overlap (labels: {x, y}). */
function spreadLabels(labels, gap = 13) {
  const byX = new Map();
  for (const l of labels) byX.set(l.x, [...(byX.get(l.x) ?? []), l]);
  for (const col of byX.values()) {
    col.sort((a, b) => a.y - b.y);
    for (let i = 1; i < col.length; i++) col[i].y = Math.max(col[i].y, col[i - 1].y + gap);
  }
}

/** Draws the chart at the size it is shown (1 unit = 1 CSS pixel), so its text stays readable on a phone. */
function drawChart() {
  const svg = $("#chart");
  const W = Math.round(Math.min(900, Math.max(300, svg.clientWidth || 720)));
  const H = W < 500 ? 260 : 320, L = 52, R = 52, T = 16, B = 44;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const pts = demo.results.filter((r) => r.webgpu || r.cpu);
  const series = chartSeries(pts);
  const vals = pts.flatMap((r) => series.map((s) => r[s.key]?.gflops)).filter((v) => v > 0);
  const maxG = Math.max(0, ...vals);
  const minG = Math.min(...vals);
  // A log axis when the backends differ by more than 20x (a software GPU next to a fast CPU, or the reverse).
  const log = vals.length > 1 && maxG / minG > 20;
  drawLegend(series, log);
  const P = 24; // keeps the first and last points clear of the axes
  // sizes on a log axis: 256, 300 and 1000 stand where their ratios put them
  const ns = pts.map((r) => Math.log(r.n));
  const [n0, n1] = [Math.min(...ns), Math.max(...ns)];
  const x = (i) => L + P + (n1 === n0 ? (W - L - R - 2 * P) / 2 : ((ns[i] - n0) * (W - L - R - 2 * P)) / (n1 - n0));
  const ticks = [];
  let y;
  if (log) {
    const lo = Math.floor(Math.log10(minG)), hi = Math.ceil(Math.log10(maxG));
    y = (v) => T + (H - T - B) * (1 - (Math.log10(v) - lo) / (hi - lo));
    for (let e = lo; e <= hi; e++) ticks.push(10 ** e);
  } else {
    const yMax = niceCeil(maxG || 1);
    y = (v) => T + (H - T - B) * (1 - v / yMax);
    for (let k = 0; k <= 4; k++) ticks.push((yMax * k) / 4);
  }
  const out = [];
  for (const v of ticks) {
    out.push(`<line x1="${L}" x2="${W - R}" y1="${y(v)}" y2="${y(v)}" stroke="#e5e7eb"/>`);
    out.push(`<text x="${L - 6}" y="${y(v) + 4}" text-anchor="end" font-size="11" fill="#6b7280">${+v.toPrecision(3)}</text>`);
  }
  // size labels, every one that fits beside the last one drawn
  let lastX = -Infinity;
  pts.forEach((r, i) => {
    if (x(i) - lastX < 30) return;
    lastX = x(i);
    out.push(`<text x="${x(i)}" y="${H - B + 16}" text-anchor="middle" font-size="11" fill="#374151">${r.n}</text>`);
  });
  out.push(`<text x="${(L + W - R) / 2}" y="${H - 8}" text-anchor="middle" font-size="12" fill="#374151">matrix size n (n×n · n×n, log scale)</text>`);
  out.push(`<text x="14" y="${(T + H - B) / 2}" text-anchor="middle" font-size="12" fill="#374151" transform="rotate(-90 14 ${(T + H - B) / 2})">GFLOP/s${log ? " (log)" : ""}</text>`);
  const labels = [];
  for (const s of series) {
    const p = pts.map((r, i) => (r[s.key] ? [x(i), y(r[s.key].gflops), r[s.key].gflops] : null)).filter(Boolean);
    const dash = s.dash ? ` stroke-dasharray="6 4"` : "";
    if (p.length > 1) out.push(`<polyline fill="none" stroke="${s.color}" stroke-width="2"${dash} points="${p.map(([a, b]) => `${a},${b}`).join(" ")}" data-series="${s.key}"/>`);
    for (const [a, b, v] of p) {
      out.push(marker(s, a, b));
      labels.push({ x: a, y: b + 4, text: v.toFixed(v < 10 ? 2 : 1), color: s.color });
    }
  }
  spreadLabels(labels);
  for (const l of labels) {
    // a white halo keeps a label readable where a line passes behind it
    out.push(`<text x="${l.x + 7}" y="${l.y}" font-size="10" fill="${l.color}" stroke="#fff" stroke-width="3" ` +
      `paint-order="stroke" class="value">${l.text}</text>`);
  }
  if (!pts.length) out.push(`<text x="${W / 2}" y="${H / 2}" text-anchor="middle" fill="#6b7280">Run a benchmark to draw the chart.</text>`);
  svg.innerHTML = out.join("");
}

function niceCeil(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// ---- start ---------------------------------------------------------------------------------------

function applyUrl() {
  const q = new URLSearchParams(location.search);
  if (q.has("sizes")) {
    const want = q.get("sizes").split(",").map(Number);
    const custom = [];
    const boxes = [...document.querySelectorAll("input.size")];
    boxes.forEach((el) => (el.checked = want.includes(Number(el.value))));
    for (const n of want) if (!boxes.some((el) => Number(el.value) === n)) custom.push(n);
    $("#custom-sizes").value = custom.join(", ");
  }
  if (q.has("workers")) $("#workers").value = q.get("workers");
  if (q.get("ort") === "0") $("#use-ort").checked = false;
  if (q.get("webgpu") === "0") $("#use-webgpu").checked = false;
  if (q.get("cpu") === "0") $("#use-cpu").checked = false;
  // &kernel=NAME pins the WebGPU matmul kernel (Device.compile's options.matmul), to compare tile shapes
  if (q.has("kernel")) demo.gpuCompileOptions = { matmul: q.get("kernel") };
  return q.get("autorun") === "1";
}

$("#run").addEventListener("click", () => runBenchmark());
$("#stop").addEventListener("click", () => {
  stopRequested = true;
  $("#stop").disabled = true;
  if (current?.backend === "cpu" || current?.backend === "ortWasm") {
    // a CPU step stops at once: its workers are terminated
    current.backend === "cpu" ? pool.abort() : abortOrtWasm();
    setStatus("Stopping…", "running");
  } else if (current) {
    // a GPU dispatch cannot be interrupted: the step ends after the run in flight
    setStatus(`Stopping: waiting for the ${BACKENDS[current.backend].label} run in flight (n = ${current.n}) to finish; a GPU dispatch cannot be interrupted.`, "running");
  } else {
    setStatus("Stopping…", "running");
  }
});
drawChart();
// redrawn at its new size when the window (a phone turned, a window resized) changes the chart's width
let shownWidth = $("#chart").clientWidth;
new ResizeObserver(() => {
  if ($("#chart").clientWidth === shownWidth) return;
  shownWidth = $("#chart").clientWidth;
  drawChart();
  showScrollHint();
}).observe($("#chart"));
const autorun = applyUrl();
demo.ready = setup()
  .then(() => {
    setStatus(demo.gpu ? "Ready: WebGPU and CPU." : "Ready: CPU only (no WebGPU).", "ready");
    $("#run").disabled = false;
    if (autorun) return runBenchmark();
  })
  .catch((e) => {
    setStatus(`Error: ${e.message}`, "error");
    console.error(e);
  });
