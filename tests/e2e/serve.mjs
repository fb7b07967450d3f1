// The e2e scripts' server: scripts/serve.py on a free 127.0.0.1 port over `dir`; resolves to { url, proc }.
import { spawn } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

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
