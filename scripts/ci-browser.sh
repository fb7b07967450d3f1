#!/usr/bin/env bash
# The browser half of CI (called by .ci/run): builds the wasm package, runs the library's tests compiled to wasm
# in headless Chromium with WebGPU (SwiftShader), type-checks pkg/webtensor.d.ts, and runs the demo end to end
# (screenshots in artifacts/). Needs chromium, chromium-driver, node >= 20 with npm, and the
# wasm32-unknown-unknown target; installs wasm-bindgen-cli (pinned to Cargo.lock) and the e2e npm packages
# when missing. Wasm builds go to $CARGO_TARGET_DIR (default target-wasm/).
set -euo pipefail
cd "$(dirname "$0")/.."
# the native CLI (the models test compares with it) lives in the native target directory
native_target="${CARGO_TARGET_DIR:-$PWD/target}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-wasm}"
mkdir -p artifacts
step() { echo; echo "=== browser: $* ($(date +%T))"; }

step "wasm package (scripts/build-wasm.sh)"
scripts/build-wasm.sh

step "library tests in headless Chromium (scripts/test-wasm.sh)"
scripts/test-wasm.sh 2>&1 | tee artifacts/test-wasm.log

step "e2e packages (npm ci in tests/e2e)"
(cd tests/e2e && npm ci --no-audit --no-fund)

step "TypeScript check of pkg/webtensor.d.ts"
(cd tests/e2e && npx tsc -p tsconfig.json)

step "the package in Node.js (tests/e2e/node.mjs)"
node tests/e2e/node.mjs 2>&1 | tee artifacts/node.log

step "every decoder architecture in the wasm package against the native CLI (tests/e2e/arch.mjs)"
if [ ! -x "$native_target/release/webtensor" ]; then
  CARGO_TARGET_DIR="$native_target" cargo build --release --bin webtensor
fi
WEBTENSOR_BIN="$native_target/release/webtensor" node tests/e2e/arch.mjs 2>&1 | tee artifacts/arch.log

step "demo end to end (tests/e2e/demo.mjs)"
node tests/e2e/demo.mjs 2>&1 | tee artifacts/e2e.log

step "model runners against the native CLI, in Node.js and headless Chromium (tests/e2e/models.mjs)"
if [ ! -x "$native_target/release/webtensor" ]; then
  CARGO_TARGET_DIR="$native_target" cargo build --release --bin webtensor
fi
WEBTENSOR_BIN="$native_target/release/webtensor" node tests/e2e/models.mjs 2>&1 | tee artifacts/models.log
