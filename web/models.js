// The Chat (SmolLM2-135M-Instruct) and Semantic search (all-MiniLM-L6-v2) sections of the demo. The models run
// in web/models-worker.js; the files come from the same server (scripts/serve.sh serves them under models/ from
// the installed PyPI packages), never from the internet. The "Run the models on" choice (?backend=auto|webgpu|cpu)
// picks the device: auto takes WebGPU unless its adapter is a software one, which is slower than the wasm CPU
// backend (as the native Device::best() ranks them). Chat answers are sampled with the model's chat defaults and
// a new seed each time (said under the answer); ?temperature=0 makes them greedy. ?autorun=models loads both,
// chats once and searches once (the e2e test), with ?question=... and ?max=N (tokens) for the question.
import { WorkerClient } from "./worker-client.js";

const q = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
const LLM_URL = "models/smollm2-135m-instruct.q4_1.gguf";
const MINILM_BASE = "models/all-minilm-l6-v2";

const worker = new WorkerClient(new URL("./models-worker.js", import.meta.url), "the models worker");
/** Sends `msg` to the models worker; `onEvent` gets its progress and token messages. */
const request = (msg, onEvent) => worker.call(msg, onEvent);

if (["auto", "webgpu", "cpu"].includes(q.get("backend"))) $("models-backend").value = q.get("backend");
const backend = () => $("models-backend").value;
const mib = (b) => `${(b / 2 ** 20).toFixed(1)} MiB`;
function deviceLine(r) {
  const name = r.backend === "webgpu" ? `WebGPU${r.adapter ? ` (${r.adapter})` : ""}` : "CPU (wasm, Web Worker)";
  if (r.why) return `${name}: ${r.why} (the choice above switches)`;
  return r.software ? `${name}: a software adapter, so speeds are the CPU's, not a GPU's` : name;
}
// a new choice of device applies when a model is loaded (again)
$("models-backend").onchange = () => {
  for (const [button, loaded] of [["chat-load", chat.loaded], ["search-load", embedding.loaded]]) {
    $(button).disabled = chat.busy;
    if (loaded) $(button).textContent = "Load again on the new choice";
  }
};

// ---- chat ----------------------------------------------------------------------------------------------------

const chat = { loaded: false, busy: false, history: [] };

/** The largest model file the page loads: wasm32 addresses 4 GiB, of which the loader takes at most 3 for a file. */
const MAX_MODEL_BYTES = 3 * 2 ** 30;
const SHIPPED = { url: LLM_URL, name: "SmolLM2-135M-Instruct, Q4_1 GGUF" };

/** Loads a language model: the shipped one, a `.gguf` the user picked or dropped ({ file }), or one by URL ({ url });
 *  the chat card then names it. A file too large for the browser's memory is refused before it is read; one the
 *  library cannot run (another architecture) is refused with the loader's own line. */
async function loadLlm(source = SHIPPED) {
  $("chat-load").disabled = true;
  $("chat-status").dataset.state = "";
  $("chat-status").textContent = `Loading ${source.name}…`;
  try {
    if (source.file && source.file.size > MAX_MODEL_BYTES) {
      throw new Error(`${source.file.name} is ${(source.file.size / 2 ** 30).toFixed(1)} GiB: more than a page's ` +
        `wasm memory holds (4 GiB in all, 3 GiB for a model file); the native CLI runs it`);
    }
    const msg = { type: "load-llm", backend: backend(), url: source.url, blob: source.file };
    const r = await request(msg, ({ progress: p }) => {
      $("chat-progress").max = p.total || p.loaded;
      $("chat-progress").value = p.loaded;
      $("chat-status").textContent = `${p.cached ? "Reading from the browser cache" : source.file ? "Reading" : "Downloading"}: ` +
        `${mib(p.loaded)}${p.total ? ` of ${mib(p.total)}` : ""}`;
    });
    chat.loaded = true;
    chat.history = [];
    $("chat-log").replaceChildren();
    $("chat-title").textContent = `Chat (${source.name})`;
    $("chat-load").textContent = "Load model (94 MiB)";
    $("chat-device").textContent = deviceLine(r);
    $("chat-status").textContent = `Loaded ${mib(r.bytes)} in ${r.seconds.toFixed(1)} s.`;
    $("chat-send").disabled = false;
  } catch (e) {
    $("chat-status").textContent = `Could not load ${source.name}: ${e.message}`;
    $("chat-status").dataset.state = "error";
  } finally {
    $("chat-load").disabled = false;
  }
}

const fromFile = (file) => file && loadLlm({ file, name: file.name });
$("chat-file").onchange = () => fromFile($("chat-file").files[0]);
$("chat-url-load").onclick = () => {
  const url = $("chat-url").value.trim();
  if (url) loadLlm({ url, name: decodeURIComponent(new URL(url, location.href).pathname.split("/").pop() || url) });
};
$("chat").addEventListener("dragover", (e) => e.preventDefault());
$("chat").addEventListener("drop", (e) => {
  e.preventDefault();
  fromFile([...(e.dataTransfer?.files ?? [])].find((f) => f.name.endsWith(".gguf")));
});

async function send() {
  const text = $("chat-input").value.trim();
  if (!text || chat.busy) return;
  chat.busy = true;
  $("chat-send").disabled = true;
  $("chat-stop").disabled = false;
  const answer = document.createElement("div");
  answer.className = "answer";
  $("chat-log").append(Object.assign(document.createElement("div"), { className: "question", textContent: text }), answer);
  // until the first token: how much of the prompt is read, and for how long (a prefill can take seconds)
  const t0 = performance.now();
  let prefill = null;
  const showPrefill = () => {
    if (prefill) $("chat-speed").textContent = `reading the prompt: ${prefill.done} of ${prefill.total} tokens ` +
      `(${((performance.now() - t0) / 1e3).toFixed(1)} s)`;
  };
  const ticker = setInterval(showPrefill, 200);
  try {
    const messages = [...chat.history, { role: "user", content: text }];
    answer.dataset.streamed = "0"; // tokens shown so far
    // no cap unless the user sets one: the answer runs to the model's end of turn (or the context), Stop ends it
    const max = Number($("chat-max").value);
    const options = max > 0 ? { maxTokens: max } : {};
    if (q.has("temperature")) options.temperature = Number(q.get("temperature"));
    const { result } = await request({ type: "chat", messages, options }, (e) => {
      if (e.prefill) {
        prefill = e.prefill;
        answer.dataset.prefill = `${prefill.done}/${prefill.total}`;
        showPrefill();
        return;
      }
      if (prefill) clearInterval(ticker);
      answer.textContent += e.token;
      answer.dataset.streamed = String(Number(answer.dataset.streamed) + 1);
    });
    answer.textContent = result.text;
    $("chat-speed").textContent = `prefill ${result.prefillTokens} tokens at ${result.prefillTokensPerS.toFixed(1)} ` +
      `tokens/s, decode ${result.decodeSteps} tokens at ${result.decodeTokensPerS.toFixed(1)} tokens/s ` +
      `(stopped: ${result.stop.replace("_", " ")}); sampling: ${result.sampling}`;
    answer.dataset.tokens = result.tokens.join(" ");
    answer.dataset.seed = String(result.seed);
    chat.history = [...messages, { role: "assistant", content: result.text }];
  } catch (e) {
    answer.textContent = `error: ${e.message}`;
  } finally {
    clearInterval(ticker);
    chat.busy = false;
    $("chat-send").disabled = false;
    $("chat-stop").disabled = true;
  }
}

// ---- semantic search -----------------------------------------------------------------------------------------

const embedding = { loaded: false };

async function loadEmbedder() {
  $("search-load").disabled = true;
  $("search-status").textContent = "Loading all-MiniLM-L6-v2…";
  try {
    const r = await request({ type: "load-embedder", backend: backend(), base: MINILM_BASE });
    embedding.loaded = true;
    $("search-load").textContent = "Load model (87 MiB)";
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
    $("search-status").textContent = `${sentences.length} sentences and the query embedded in ${ms.toFixed(0)} ms ` +
      `(${(vectors.length / (ms / 1e3)).toFixed(1)} texts/s).`;
    return ranked;
  } finally {
    $("search-run").disabled = false;
  }
}

if (q.get("question")) $("chat-input").value = q.get("question");
if (q.get("max")) $("chat-max").value = q.get("max");
$("chat-load").onclick = () => loadLlm();
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
