#!/usr/bin/env bash
# Builds the npm-style ES-module package in pkg/ (gitignored):
#   pkg/webtensor.js       ES module: `import init, { Device, Graph, matmul } from "./pkg/webtensor.js"`
#   pkg/webtensor_bg.wasm  the library, release build for wasm32-unknown-unknown (WebGPU through wgpu), simd128
#   pkg/webtensor_relaxed_bg.wasm  the same with relaxed-simd (fused multiply-adds in the CPU backend's matmul);
#                          init() loads it where WebAssembly.validate accepts relaxed-simd (scripts/wasm-loader.py)
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
cargo build -p webtensor --lib --release --target wasm32-unknown-unknown --no-default-features --features models
# the relaxed-simd build (f32x4.relaxed_madd: one FMA where the CPU has it), in a target dir of its own so that
# the two sets of flags do not rebuild each other's dependencies
relaxed_dir="$CARGO_TARGET_DIR/relaxed-simd"
echo "build-wasm: building it again with relaxed-simd (as long again the first time)" >&2
CARGO_TARGET_DIR="$relaxed_dir" \
  CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" \
  cargo build -p webtensor --lib --release --target wasm32-unknown-unknown --no-default-features --features models
rm -rf pkg
wasm-bindgen --target web --out-dir pkg --out-name webtensor \
    "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/webtensor.wasm"
relaxed_pkg="$(mktemp -d)"
trap 'rm -rf "$relaxed_pkg"' EXIT
wasm-bindgen --target web --out-dir "$relaxed_pkg" --out-name webtensor \
    "$relaxed_dir/wasm32-unknown-unknown/release/webtensor.wasm"
# one JS module loads either wasm: their imports and exports must be the same
cmp -s pkg/webtensor.js "$relaxed_pkg/webtensor.js" ||
  { echo "build-wasm: the two builds' JS glue differs (diff pkg/webtensor.js $relaxed_pkg/webtensor.js)" >&2; exit 1; }
mv "$relaxed_pkg/webtensor_bg.wasm" pkg/webtensor_relaxed_bg.wasm
python3 scripts/wasm-loader.py pkg/webtensor.js

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
    "files": ["webtensor.js", "webtensor.d.ts", "webtensor_bg.wasm", "webtensor_relaxed_bg.wasm", "webtensor_bg.wasm.d.ts"],
}
json.dump(pkg, open("pkg/package.json", "w"), indent=2)
open("pkg/package.json", "a").write("\n")
PY
# the sizes a page downloads, measured here rather than written by hand: bytes of each build, raw and gzip -9
mb() { python3 -c "import sys; print(f'{int(sys.argv[1]) / 1e6:.2f} MB')" "$1"; }
for w in pkg/webtensor_bg.wasm pkg/webtensor_relaxed_bg.wasm; do
  echo "build-wasm: $w $(mb "$(wc -c < "$w")") raw, $(mb "$(gzip -9 -c "$w" | wc -c)") gzip -9"
done
echo "build-wasm: pkg/ ready ($(du -h pkg/webtensor_bg.wasm | cut -f1) wasm, $(du -h pkg/webtensor_relaxed_bg.wasm | cut -f1) relaxed-simd, version $(python3 -c 'import json; print(json.load(open("pkg/package.json"))["version"])'))"
