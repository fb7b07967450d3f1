// webtensor against wllama (llama.cpp in wasm) on one page: the same GGUF, prompt and greedy decoding; prompt and
// generation tokens/s side by side. URL parameters: ?engines=webtensor-cpu,webtensor-webgpu,wllama-1,wllama-2
// (the default: all that can run here), ?tokens=N, ?prompt=..., ?autorun=1 (the e2e driver reads
// window.benchResult when it is set).
const q = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
const MODEL = "models/smollm2-135m-instruct.q4_1.gguf";
if (q.get("prompt")) $("prompt").value = q.get("prompt");
if (q.get("tokens")) $("tokens").value = q.get("tokens");

const status = (text, state = "") => {
  $("status").textContent = text;
  $("status").dataset.state = state;
};

function row(r) {
  const tr = document.createElement("tr");
  const cells = [r.engine, r.promptTps.toFixed(1), r.genTps.toFixed(1), JSON.stringify(r.text)];
  tr.innerHTML = cells.map(() => "<td></td>").join("");
  [...tr.children].forEach((td, i) => (td.textContent = cells[i]));
  $("results").tBodies[0].append(tr);
}

/** webtensor in a module worker on `backend`: a warm-up, then the timed generation. */
async function webtensor(backend, prompt, tokens) {
  const worker = new Worker(new URL("./models-worker.js", import.meta.url), { type: "module" });
  let id = 0;
  const call = (msg) =>
    new Promise((resolve, reject) => {
      const my = ++id;
      worker.onmessage = (e) => {
        if (e.data.id !== my || e.data.progress) return;
        e.data.ok ? resolve(e.data) : reject(new Error(e.data.error));
      };
      worker.postMessage({ id: my, ...msg });
    });
  try {
    const loaded = await call({ type: "load-llm", backend, url: MODEL });
    await call({ type: "generate", prompt, options: { maxTokens: 4 } });
    const { result } = await call({ type: "generate", prompt, options: { maxTokens: tokens } });
    const name = backend === "cpu" ? "webtensor, wasm CPU (1 thread)" : `webtensor, WebGPU (${loaded.adapter || "adapter"}${loaded.software ? ", software" : ""})`;
    return { engine: name, promptTps: result.prefillTokensPerS, genTps: result.decodeTokensPerS, text: result.text, tokens: result.tokens };
  } finally {
    worker.terminate();
  }
}

/** wllama with `threads` threads: a warm-up, then the timed completion; its own timings (llama.cpp's). */
async function wllama(threads, prompt, tokens, blob) {
  const { Wllama } = await import("./vendor/wllama/index.js");
  const w = new Wllama({ default: "./vendor/wllama/wasm/wllama.wasm" }, { suppressNativeLog: true });
  try {
    await w.loadModel([blob], { n_threads: threads, n_ctx: 2048 });
    const run = (n) => w.createCompletion({ prompt, max_tokens: n, temperature: 0 });
    await run(4);
    const r = await run(tokens);
    const t = r.timings;
    return { engine: `wllama (llama.cpp ${Wllama.getLibllamaVersion?.() ?? ""}), wasm CPU (${threads} thread${threads > 1 ? "s" : ""})`,
      promptTps: t.prompt_per_second, genTps: t.predicted_per_second, text: r.choices[0].text };
  } finally {
    await w.exit?.();
  }
}

async function run() {
  $("run").disabled = true;
  $("results").tBodies[0].innerHTML = "";
  const prompt = $("prompt").value;
  const tokens = Number($("tokens").value) || 32;
  const all = ["webtensor-cpu", ...("gpu" in navigator ? ["webtensor-webgpu"] : []), "wllama-1",
    ...(self.crossOriginIsolated ? ["wllama-2"] : [])];
  const engines = q.get("engines")?.split(",") ?? all;
  $("env").textContent = `${navigator.hardwareConcurrency} logical cores; cross-origin isolated: ${self.crossOriginIsolated}; ` +
    `${navigator.userAgent}`;
  const results = [];
  try {
    const blob = await (await fetch(MODEL)).blob();
    for (const e of engines) {
      status(`running ${e}…`);
      const r = e.startsWith("webtensor")
        ? await webtensor(e.slice("webtensor-".length), prompt, tokens)
        : await wllama(Number(e.slice("wllama-".length)), prompt, tokens, blob);
      results.push({ id: e, ...r });
      row(r);
    }
    status(`done (${tokens} tokens, greedy)`, "done");
    window.benchResult = { prompt, tokens, results, cores: navigator.hardwareConcurrency };
  } catch (err) {
    status(`error: ${err.message}`, "error");
    window.benchResult = { error: String(err.message ?? err), results };
  } finally {
    $("run").disabled = false;
  }
}

$("run").onclick = run;
if (q.get("autorun") === "1") run();
