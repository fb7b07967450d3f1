#!/usr/bin/env bash
# Runs the library's browser tests (tests/wasm.rs): compiled to wasm32 and run by wasm-bindgen-test-runner in
# headless Chromium through chromedriver, with WebGPU enabled (SwiftShader when there is no GPU).
#
#   scripts/test-wasm.sh [extra cargo test args]
#
# Needs: the wasm32-unknown-unknown target, wasm-bindgen-cli at the Cargo.lock version of wasm-bindgen
# (scripts/build-wasm.sh installs it), chromium and chromedriver (Debian: chromium, chromium-driver).
# Each run gets a fresh Chromium profile: webdriver.json is copied with a new --user-data-dir and passed through
# WASM_BINDGEN_TEST_WEBDRIVER_JSON. Env: CHROMEDRIVER (default /usr/bin/chromedriver), CARGO_TARGET_DIR
# (default target-wasm/), WASM_BINDGEN_TEST_TIMEOUT (seconds, default 180).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-wasm}"
export CHROMEDRIVER="${CHROMEDRIVER:-/usr/bin/chromedriver}"
export WASM_BINDGEN_TEST_TIMEOUT="${WASM_BINDGEN_TEST_TIMEOUT:-180}"

profile="$(mktemp -d /tmp/webtensor-chromium-XXXXXX)"
config="$profile.webdriver.json"
trap 'rm -rf "$profile" "$config"' EXIT
python3 - "$profile" "$config" <<'PY'
import json, sys
profile, out = sys.argv[1], sys.argv[2]
caps = json.load(open("webdriver.json"))
opts = caps["goog:chromeOptions"]
opts["args"] = [a for a in opts["args"] if not a.startswith("--user-data-dir=")] + ["--user-data-dir=" + profile]
json.dump(caps, open(out, "w"), indent=2)
PY
export WASM_BINDGEN_TEST_WEBDRIVER_JSON="$config"
cargo test -p webtensor-cli --target wasm32-unknown-unknown --no-default-features --test wasm "$@"
