#!/usr/bin/env bash
# Builds llama.cpp's llama-server (the peer of scripts/bench_serve.py) from the vendor/llama.cpp tree of
# llama-cpp-python 0.3.36's sdist, as `webtensor bench generate`'s llama.cpp is built: CPU, the flags of
# scripts/ggml-cpu-flags.sh (GGML_NATIVE=ON, or this CPU's extensions named where it lists AMX).
# cmake and ninja come from PyPI as wheels when missing (and so do the sdist's own build tools: `--no-binary :all:`
# built cmake from source, half an hour); gcc/g++ must be present. About 10 minutes on 2 cores.
# Prints the binary's path last.  Usage: scripts/build-llama-server.sh [BUILD_DIR]   (default target/llama-server)
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-target/llama-server}")"
mkdir -p "$out"
command -v cmake >/dev/null || python3 -m pip install -q cmake
command -v ninja >/dev/null || python3 -m pip install -q ninja
if [ ! -d "$out/src/vendor/llama.cpp" ]; then
  python3 -m pip download -q --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36 -d "$out/sdist"
  mkdir -p "$out/src"
  tar -xzf "$out/sdist/llama_cpp_python-0.3.36.tar.gz" -C "$out/src" --strip-components=1
fi
# shellcheck disable=SC2046 # the flags are words
cmake -S "$out/src/vendor/llama.cpp" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release $(scripts/ggml-cpu-flags.sh) \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON > "$out/cmake.log"
cmake --build "$out/build" --target llama-server -j "$(nproc)" > "$out/build.log"
echo "$out/build/bin/llama-server"
