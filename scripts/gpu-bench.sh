#!/usr/bin/env bash
# One command for the GPU figures: webtensor (Vulkan through wgpu, and its CPU backend) against PyTorch/cuBLAS
# (f32 with TF32 off, TF32, f16) and numpy, interleaved in one run, with mat-vec and copy bandwidth. Prints
# `webtensor info`, then the comparison, the markdown table last; writes matmul.md/.json/.svg to
# $GPU_BENCH_OUT. Meant for a Linux machine with an NVIDIA GPU and no network; under 5 minutes.
#
#   scripts/gpu-bench.sh
#
# What it needs there:
# - target/release/webtensor, built beforehand (`cargo build --release`) and carried along; where cargo exists
#   and the binary is missing, the script builds it.
# - python3 with numpy and torch for the peers; a missing one is reported as absent, not an error.
# - a Vulkan loader (libvulkan.so.1). Where `ldconfig -p` lists none, the script unpacks Debian's libvulkan1
#   package from .gl/ into a temporary prefix and puts it on LD_LIBRARY_PATH. Fetch that package beforehand,
#   on a machine that reaches Debian's package registry:
#       scripts/fetch-vulkan-loader.sh        # apt-get download libvulkan1, into .gl/
# - VK_DRIVER_FILES is set to /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json when that file exists.
#
# Environment (defaults in brackets): GPU_BENCH_SIZES [1024,2048,4096,8192], GPU_BENCH_DTYPE [all],
# GPU_BENCH_REPEATS [5], GPU_BENCH_CPU_MAX [4096] (largest N on the CPU), GPU_BENCH_OUT [bench-results/gpu],
# GPU_BENCH_ARGS (more arguments for `webtensor bench matmul`), WEBTENSOR_BIN [target/release/webtensor],
# GPU_BENCH_BUNDLED_LOADER=1 uses the loader from .gl/ even where the system has one (to test that path),
# GPU_BENCH_CHECKED=1 adds a second, GPU-only pass at 4096 with WEBTENSOR_SHADER_CHECKS=on (matmul kernels with
# wgpu's runtime bounds checks, which Vulkan builds leave out by default) into $GPU_BENCH_OUT/checked, printed first.
set -euo pipefail
cd "$(dirname "$0")/.."

sizes=${GPU_BENCH_SIZES:-1024,2048,4096,8192}
dtype=${GPU_BENCH_DTYPE:-all}
repeats=${GPU_BENCH_REPEATS:-5}
cpu_max=${GPU_BENCH_CPU_MAX:-4096}
out=${GPU_BENCH_OUT:-bench-results/gpu}
bin=${WEBTENSOR_BIN:-target/release/webtensor}
say() { echo "gpu-bench: $*" >&2; }
cleanup=()
trap 'rm -rf ${cleanup[@]+"${cleanup[@]}"}' EXIT

if [ ! -x "$bin" ]; then
    if command -v cargo >/dev/null 2>&1; then
        say "$bin is missing; building it (cargo build --release)"
        cargo build --release --bin webtensor
    else
        say "$bin is missing and there is no cargo here: build it elsewhere (cargo build --release) and bring it"
        exit 1
    fi
fi

# ---- Vulkan loader -----------------------------------------------------------------------------------------
if [ "${GPU_BENCH_BUNDLED_LOADER:-0}" = 1 ] || ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1'; then
    deb=$(ls .gl/libvulkan1_*.deb 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$deb" ]; then
        prefix=$(mktemp -d "${TMPDIR:-/tmp}/webtensor-vulkan.XXXXXX")
        cleanup+=("$prefix")
        if command -v dpkg >/dev/null 2>&1; then
            dpkg -x "$deb" "$prefix"
        else # no dpkg: a .deb is an ar archive holding data.tar.*
            (cd "$prefix" && ar x "$OLDPWD/$deb" && tar -xf data.tar.*)
        fi
        lib=$(find "$prefix" -name 'libvulkan.so.1*' | head -n 1)
        [ -n "$lib" ] || { say "$deb holds no libvulkan.so.1"; exit 1; }
        export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        say "no system Vulkan loader used: unpacked $deb, LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    else
        say "warning: no Vulkan loader on this system and no .gl/libvulkan1_*.deb (scripts/fetch-vulkan-loader.sh" \
            "fetches it where the package registry is reachable); webtensor falls back to GL or the CPU"
    fi
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -f "$icd" ]; then
    export VK_DRIVER_FILES="$icd"
    # the ICD's libGLX_nvidia.so.0 lives beside the driver's other libraries
    if [ -d /usr/local/nvidia/lib64 ] && [[ ":${LD_LIBRARY_PATH:-}:" != *":/usr/local/nvidia/lib64:"* ]]; then
        export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/nvidia/lib64"
    fi
    say "VK_DRIVER_FILES=$icd"
fi
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then # Mesa's GL probe complains without one
    XDG_RUNTIME_DIR=$(mktemp -d "${TMPDIR:-/tmp}/webtensor-xdg.XXXXXX")
    cleanup+=("$XDG_RUNTIME_DIR")
    export XDG_RUNTIME_DIR
fi

if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
fi
"$bin" info
echo
if [ "${GPU_BENCH_CHECKED:-0}" = 1 ]; then
    say "second pass: WEBTENSOR_SHADER_CHECKS=on"
    WEBTENSOR_SHADER_CHECKS=on "$bin" bench matmul --vs torch --sizes 4096 --dtype "$dtype" --matvec \
        --repeats "$repeats" --cpu-max 0 --out "$out/checked"
    echo
fi
# shellcheck disable=SC2086 # GPU_BENCH_ARGS is a list of words
"$bin" bench matmul --vs numpy,torch --sizes "$sizes" --dtype "$dtype" --matvec --repeats "$repeats" \
    --cpu-max "$cpu_max" --out "$out" ${GPU_BENCH_ARGS:-}
