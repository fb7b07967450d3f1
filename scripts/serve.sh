#!/usr/bin/env bash
# Builds the wasm package (scripts/build-wasm.sh), copies it to web/pkg and serves the in-browser matmul demo:
#
#   scripts/serve.sh [port]        # default 8000; then open http://127.0.0.1:8000/
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
exec python3 scripts/serve.py --port "$port" --dir web
