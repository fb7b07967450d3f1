#!/usr/bin/env bash
# Prints the cmake flags that build llama.cpp's CPU backend for this machine (the peer of `webtensor bench
# generate` through llama-cpp-python, and scripts/build-llama-server.sh's llama-server):
#   CMAKE_ARGS="$(scripts/ggml-cpu-flags.sh)" pip install --no-binary llama-cpp-python --no-cache-dir --no-deps llama-cpp-python==0.3.36
# GGML_NATIVE=ON (-march=native) everywhere except an x86-64 CPU that lists AMX: a VM may list AMX that its
# kernel will not run, and the native build then dies with SIGILL on its first evaluation. There the ISA
# extensions the CPU lists are named one by one instead, AMX left out.
set -euo pipefail
flags="$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)"
if [ "$(uname -m)" != x86_64 ] || [[ " $flags " != *" amx_tile "* ]]; then
  echo "-DGGML_NATIVE=ON"
  exit 0
fi
out="-DGGML_NATIVE=OFF"
for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI \
  avx512_bf16:AVX512_BF16 avx_vnni:AVX_VNNI; do
  if [[ " $flags " == *" ${pair%%:*} "* ]]; then out="$out -DGGML_${pair#*:}=ON"; fi
done
echo "$out"
