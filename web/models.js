// The Chat (SmolLM2-135M-Instruct) and Semantic search (all-MiniLM-L6-v2) sections of the demo. The models run
// in web/models-worker.js; the files come from the same server (scripts/serve.sh serves them under models/ from
// the installed PyPI packages), never from the internet. ?backend=webgpu|cpu picks the backend (default: WebGPU
// when the browser has it, else the CPU); ?autorun=models loads both, chats once and searches once (the e2e test),
// with ?question=... and ?max=N (tokens) for the question.
import { WorkerClient } from "./worker-client.js";

const q = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
const LLM_URL = "models/smollm2-135m-instruct.q4_1.gguf";
const MINILM_BASE = "models/all-minilm-l6-v2";

const worker = new WorkerClient(new URL("./models-worker.js", import.meta.url), "the models worker");
/** Sends `msg` to the models worker; `onEvent` gets its progress and token messages. */
const request = (msg, onEvent) => worker.call(msg, onEvent);

const backend = q.get("backend") ?? ("gpu" in navigator ? "auto" : "cpu");
const mib = (b) => `${(b / 2 ** 20).toFixed(1)} MiB`;
function deviceLine(r) {
  const name = r.backend === "webgpu" ? `WebGPU${r.adapter ? ` (${r.adapter})` : ""}` : "CPU (wasm, Web Worker)";
  return r.software ? `${name}: a software adapter, so speeds are the CPU's, not a GPU's` : name;
}

// ---- chat ----------------------------------------------------------------------------------------------------

const chat = { loaded: false, busy: false, history: [] };

async function loadLlm() {
  $("chat-load").disabled = true;
  $("chat-status").textContent = "Loading SmolLM2-135M-Instruct…";
  try {
    const r = await request({ type: "load-llm", backend, url: LLM_URL }, ({ progress: p }) => {
      $("chat-progress").max = p.total || p.loaded;
      $("chat-progress").value = p.loaded;
      $("chat-status").textContent = `${p.cached ? "Reading from the browser cache" : "Downloading"}: ` +
        `${mib(p.loaded)}${p.total ? ` of ${mib(p.total)}` : ""}`;
    });
    chat.loaded = true;
    $("chat-device").textContent = deviceLine(r);
    $("chat-status").textContent = `Loaded ${mib(r.bytes)} in ${r.seconds.toFixed(1)} s.`;
    $("chat-send").disabled = false;
  } catch (e) {
    $("chat-status").textContent = `Could not load the model: ${e.message}`;
    $("chat-status").dataset.state = "error";
    $("chat-load").disabled = false;
  }
}

async function send() {
  const text = $("chat-input").value.trim();
  if (!text || chat.busy) return;
  chat.busy = true;
  $("chat-send").disabled = true;
  $("chat-stop").disabled = false;
  const answer = document.createElement("div");
  answer.className = "answer";
  $("chat-log").append(Object.assign(document.createElement("div"), { className: "question", textContent: text }), answer);
  try {
    const messages = [...chat.history, { role: "user", content: text }];
    answer.dataset.streamed = "0"; // tokens shown so far
    const { result } = await request({ type: "chat", messages, options: { maxTokens: Number($("chat-max").value) || 64 } },
      ({ token }) => {
        answer.textContent += token;
        answer.dataset.streamed = String(Number(answer.dataset.streamed) + 1);
      });
    answer.textContent = result.text;
    $("chat-speed").textContent = `prefill ${result.prefillTokens} tokens at ${result.prefillTokensPerS.toFixed(1)} ` +
      `tokens/s, decode ${result.decodeSteps} tokens at ${result.decodeTokensPerS.toFixed(1)} tokens/s ` +
      `(stopped: ${result.stop.replace("_", " ")})`;
    answer.dataset.tokens = result.tokens.join(" ");
    chat.history = [...messages, { role: "assistant", content: result.text }];
  } catch (e) {
    answer.textContent = `error: ${e.message}`;
  } finally {
    chat.busy = false;
    $("chat-send").disabled = false;
    $("chat-stop").disabled = true;
  }
}

// ---- semantic search -----------------------------------------------------------------------------------------

async function loadEmbedder() {
  $("search-load").disabled = true;
  $("search-status").textContent = "Loading all-MiniLM-L6-v2…";
  try {
    const r = await request({ type: "load-embedder", backend, base: MINILM_BASE });
    $("search-device").textContent = deviceLine(r);
    $("search-status").textContent = `Loaded (${r.dimension} dimensions) in ${r.seconds.toFixed(1)} s.`;
    $("search-run").disabled = false;
  } catch (e) {
    $("search-status").textContent = `Could not load the model: ${e.message}`;
    $("search-load").disabled = false;
  }
}

async function search() {
  const sentences = $("search-sentences").value.split("\n").map((s) => s.trim()).filter(Boolean);
  const query = $("search-query").value.trim();
  if (!sentences.length || !query) return;
  $("search-run").disabled = true;
  const t0 = performance.now();
  try {
    const { vectors } = await request({ type: "embed", texts: [query, ...sentences] });
    const ms = performance.now() - t0;
    const [qv, ...sv] = vectors;
    const ranked = sv
      .map((v, i) => ({ text: sentences[i], score: v.reduce((s, x, j) => s + x * qv[j], 0) }))
      .sort((a, b) => b.score - a.score);
    $("search-results").innerHTML = ranked
      .map((r) => `<div class="hit"><span class="bar" style="width:${Math.max(0, r.score) * 100}%"></span>` +
        `<span class="score">${r.score.toFixed(3)}</span> <span class="text"></span></div>`)
      .join("");
    [...$("search-results").querySelectorAll(".text")].forEach((el, i) => (el.textContent = ranked[i].text));
    $("search-status").textContent = `${vectors.length} sentences embedded in ${ms.toFixed(0)} ms ` +
      `(${(vectors.length / (ms / 1e3)).toFixed(1)} sentences/s).`;
    return ranked;
  } finally {
    $("search-run").disabled = false;
  }
}

if (q.get("question")) $("chat-input").value = q.get("question");
if (q.get("max")) $("chat-max").value = q.get("max");
$("chat-load").onclick = loadLlm;
$("chat-send").onclick = send;
$("chat-input").onkeydown = (e) => e.key === "Enter" && send();
$("chat-stop").onclick = () => worker.post({ type: "stop" });
$("search-load").onclick = loadEmbedder;
$("search-run").onclick = search;

if (q.get("autorun") === "models") {
  (async () => {
    await loadLlm();
    await send();
    await loadEmbedder();
    await search();
    document.body.dataset.models = "done";
  })().catch((e) => {
    document.body.dataset.models = `error: ${e.message}`;
  });
}
