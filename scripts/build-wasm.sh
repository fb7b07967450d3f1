#!/usr/bin/env bash
# Builds the npm-style ES-module package in pkg/ (gitignored):
#   pkg/webtensor.js       ES module: `import init, { Device, Graph, matmul } from "./pkg/webtensor.js"`
#   pkg/webtensor_bg.wasm  the library, release build for wasm32-unknown-unknown (WebGPU through wgpu)
#   pkg/webtensor.d.ts     TypeScript types
#   pkg/package.json       name, version (from Cargo.toml), "type": "module", main/module/types, files
#
#   scripts/build-wasm.sh
#
# Installs wasm-bindgen-cli at exactly the wasm-bindgen version in Cargo.lock when `wasm-bindgen --version`
# differs (cargo install, a few minutes, once). Builds into $CARGO_TARGET_DIR (default target-wasm/, kept apart
# from native builds).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-wasm}"

# the quick checks first, before the long install: the target, then the tools
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    echo "build-wasm: the wasm32-unknown-unknown target is missing: rustup target add wasm32-unknown-unknown" >&2
    exit 1
fi
command -v python3 >/dev/null || { echo "build-wasm: python3 is needed (package.json, the server)" >&2; exit 1; }

wb_version=$(awk '$0 == "name = \"wasm-bindgen\"" { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
[ -n "$wb_version" ] || { echo "build-wasm: wasm-bindgen not found in Cargo.lock" >&2; exit 1; }
have=$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)
if [ "$have" != "$wb_version" ]; then
    echo "build-wasm: installing wasm-bindgen-cli $wb_version (found '${have:-none}'): once, a few minutes on 2 cores" >&2
    # No --locked: one of its locked dependencies is no longer on the registry. Built at opt-level 1 without LTO:
    # it runs for seconds, and a cold build of it is most of this script's time on a fresh machine.
    CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
      CARGO_PROFILE_RELEASE_DEBUG=false cargo install wasm-bindgen-cli --version "$wb_version"
fi

echo "build-wasm: building the library for wasm32 (release; about 2.5 minutes on 2 cores the first time)" >&2
cargo build --lib --release --target wasm32-unknown-unknown --no-default-features --features models
rm -rf pkg
wasm-bindgen --target web --out-dir pkg --out-name webtensor \
    "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/webtensor.wasm"

python3 - <<'PY'
import json, tomllib
meta = tomllib.load(open("Cargo.toml", "rb"))["package"]
pkg = {
    "name": "webtensor",
    "version": meta["version"],
    "description": meta.get("description", ""),
    "license": meta.get("license", ""),
    "type": "module",
    "main": "webtensor.js",
    "module": "webtensor.js",
    "types": "webtensor.d.ts",
    "exports": {".": {"types": "./webtensor.d.ts", "default": "./webtensor.js"}},
    "files": ["webtensor.js", "webtensor.d.ts", "webtensor_bg.wasm", "webtensor_bg.wasm.d.ts"],
}
json.dump(pkg, open("pkg/package.json", "w"), indent=2)
open("pkg/package.json", "a").write("\n")
PY
echo "build-wasm: pkg/ ready ($(du -h pkg/webtensor_bg.wasm | cut -f1) wasm, version $(python3 -c 'import json; print(json.load(open("pkg/package.json"))["version"])'))"
