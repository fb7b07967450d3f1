// What the e2e scripts share: the server (scripts/serve.py on a free 127.0.0.1 port), a copy of the demo with the
// built package, and Chromium's flags.
import { spawn } from "node:child_process";
import { cpSync, existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** Headless Chromium's flags here (FACTS: no background connections, which this machine's network refuses). */
export const CHROMIUM_FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Copies the demo (web/, without its linked pkg/, models/ and vendor/) and the built package (pkg/) into `dest`. */
export function copyDemo(dest) {
  if (!existsSync(join(root, "pkg/webtensor.js"))) throw new Error("pkg/ is missing: run scripts/build-wasm.sh");
  cpSync(join(root, "web"), dest, { recursive: true, filter: (f) => !/\/web\/(pkg|models|vendor)(\/|$)/.test(f) });
  cpSync(join(root, "pkg"), join(dest, "pkg"), { recursive: true });
}

/** Serves `dir`; resolves to { url, proc }. */
export function startServer(dir) {
  return new Promise((resolveUrl, reject) => {
    const args = [join(root, "scripts/serve.py"), "--port", "0", "--dir", dir, "--quiet"];
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
