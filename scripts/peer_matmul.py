#!/usr/bin/env python3
"""Peer timings for `webtensor bench matmul`: numpy (its BLAS, usually OpenBLAS) on the CPU, PyTorch on CUDA.

The webtensor binary embeds this file (include_str!), writes it to a temporary file and keeps ONE process of it
alive, so that its timings interleave with webtensor's without a Python start-up per sample. A peer that is not
installed (no numpy, no torch, no CUDA) answers "absent" with the reason; that is not an error.

Protocol: one JSON request per line on stdin, one JSON reply per line on stdout.

  {"op": "hello"}
      -> {"python", "numpy", "blas", "threadpools", "torch", "cuda_device", "tf32_api"}; null where absent
  {"op": "prepare", "id": ID, "lib": LIB, "kind": "matmul", "m": M, "k": K, "n": N, "dtype": "f32"|"f16",
   "transpose_b": false}
  {"op": "prepare", "id": ID, "lib": "torch", "kind": "copy", "bytes": BYTES}
      -> {"ok": true, "inner": I} after a warm-up, or {"absent": "why"}
  {"op": "time", "id": ID}
      -> {"s": seconds per operation}: mean over I back-to-back operations (I chosen at prepare so that one
         sample takes >= 20 ms), GPU work synchronized (torch.cuda.synchronize) before and after
  {"op": "free", "id": ID} -> {"ok": true}

LIB is numpy (f32 only: numpy has no f16 BLAS), torch-f32 (TF32 off), torch-tf32 or torch-f16 (f16 in, f16 out).
matmul with transpose_b multiplies by B stored [N, K] and read transposed (x @ w.T, a weight stored [out, in]).
numpy runs `np.matmul(a, b, out=c)`; torch runs `torch.matmul(a, b, out=c)` and `dst.copy_(src)`.

One-shot use, without webtensor:  python3 scripts/peer_matmul.py --sizes 256,512 --libs numpy
prints {"hello": ..., "results": [{"lib", "n", "ms", "gflops"} | {"lib", "n", "absent"}]} for square f32 (f16 for
torch-f16) matmuls, median of 5 samples.
"""

import json
import math
import platform
import sys
import time

SAMPLE_SECONDS = 0.02
MAX_INNER = 1000

try:
    import numpy as np
except Exception as e:  # noqa: BLE001 - any import failure means "absent"
    np = None
    NUMPY_WHY = f"numpy not importable: {e}"

_torch = None
_torch_why = None


def torch_or_none():
    """torch with CUDA, imported on first use (it is slow to import), or None with the reason in _torch_why."""
    global _torch, _torch_why
    if _torch is None and _torch_why is None:
        try:
            import torch

            if torch.cuda.is_available():
                _torch = torch
            else:
                _torch_why = f"torch {torch.__version__} present, but torch.cuda.is_available() is False"
        except Exception as e:  # noqa: BLE001
            _torch_why = f"torch not importable: {e}"
    return _torch


def set_tf32(torch, on):
    """TF32 for f32 matmuls on or off, through the API this torch has; returns the API's name."""
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        try:
            m.fp32_precision = "tf32" if on else "ieee"
            return "torch.backends.cuda.matmul.fp32_precision"
        except Exception:  # noqa: BLE001 - fall back to the legacy flag
            pass
    m.allow_tf32 = on
    return "torch.backends.cuda.matmul.allow_tf32"


def hello():
    info = {"python": platform.python_version(), "numpy": None, "blas": None, "threadpools": None}
    if np is not None:
        info["numpy"] = np.__version__
        try:
            deps = np.show_config(mode="dicts").get("Build Dependencies", {})
            blas = deps.get("blas", {})
            info["blas"] = " ".join(str(blas.get(k, "")) for k in ("name", "version")).strip() or None
        except Exception:  # noqa: BLE001 - old numpy: no mode="dicts"
            pass
        info["openblas"] = openblas_info()
        try:
            import threadpoolctl

            info["threadpools"] = [
                {k: p.get(k) for k in ("internal_api", "version", "num_threads", "architecture")}
                for p in threadpoolctl.threadpool_info()
            ]
        except Exception:  # noqa: BLE001 - optional
            pass
    else:
        info["numpy_absent"] = NUMPY_WHY
    torch = torch_or_none()
    info["torch"] = torch.__version__ if torch else None
    info["torch_absent"] = _torch_why
    info["cuda_device"] = torch.cuda.get_device_name(0) if torch else None
    info["tf32_api"] = set_tf32(torch, False) if torch else None
    return info


def openblas_info():
    """OpenBLAS's own config, core and threads, read through ctypes from the library numpy loaded (the way
    threadpoolctl does it), or None when numpy's BLAS is not OpenBLAS."""
    import ctypes

    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
        if not paths:
            return None
        lib = ctypes.CDLL(paths[0])
        out = {"library": paths[0].rsplit("/", 1)[-1]}
        for key, names in (
            ("config", ("openblas_get_config", "openblas_get_config64_", "scipy_openblas_get_config64_")),
            ("corename", ("openblas_get_corename", "openblas_get_corename64_", "scipy_openblas_get_corename64_")),
            ("threads", ("openblas_get_num_threads", "openblas_get_num_threads64_",
                         "scipy_openblas_get_num_threads64_")),
        ):
            for name in names:
                fn = getattr(lib, name, None)
                if fn is not None:
                    fn.restype = ctypes.c_int if key == "threads" else ctypes.c_char_p
                    v = fn()
                    out[key] = v.decode() if isinstance(v, bytes) else v
                    break
        return out
    except Exception:  # noqa: BLE001 - best effort (no /proc, another BLAS)
        return None


class Case:
    def __init__(self, lib, fn, sync):
        self.lib, self.fn, self.sync, self.inner = lib, fn, sync, 1

    def sample(self):
        self.sync()
        t0 = time.perf_counter()
        for _ in range(self.inner):
            self.fn()
        self.sync()
        return (time.perf_counter() - t0) / self.inner

    def calibrate(self):
        self.fn()  # warm-up (cuBLAS handle, heuristics, page faults)
        t = self.sample()
        self.inner = max(1, min(MAX_INNER, math.ceil(SAMPLE_SECONDS / max(t, 1e-9))))
        self.sample()


def prepare(req):
    lib, kind = req["lib"], req.get("kind", "matmul")
    if lib == "numpy":
        if np is None:
            return NUMPY_WHY
        if kind != "matmul" or req["dtype"] != "f32":
            return "numpy has no f16 BLAS; only f32 matmul is timed"
        rng = np.random.default_rng(0)
        m, k, n = req["m"], req["k"], req["n"]
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (n, k) if req.get("transpose_b") else (k, n)).astype(np.float32)
        b = b.T if req.get("transpose_b") else b
        c = np.empty((m, n), np.float32)
        return Case(lib, lambda: np.matmul(a, b, out=c), lambda: None)
    torch = torch_or_none()
    if torch is None:
        return _torch_why
    sync = torch.cuda.synchronize
    if kind == "copy":
        src = torch.rand(req["bytes"] // 4, device="cuda", dtype=torch.float32)
        dst = torch.empty_like(src)
        return Case(lib, lambda: dst.copy_(src), sync)
    dtypes = {"torch-f32": torch.float32, "torch-tf32": torch.float32, "torch-f16": torch.float16}
    if lib not in dtypes:
        return f"unknown peer {lib}"
    want = "f16" if lib == "torch-f16" else "f32"
    if req["dtype"] != want:
        return f"{lib} times {want} only"
    dt, tf32 = dtypes[lib], lib == "torch-tf32"
    m, k, n = req["m"], req["k"], req["n"]
    a = torch.rand(m, k, device="cuda", dtype=dt) * 2 - 1
    b = torch.rand((n, k) if req.get("transpose_b") else (k, n), device="cuda", dtype=dt) * 2 - 1
    b = b.t() if req.get("transpose_b") else b
    c = torch.empty(m, n, device="cuda", dtype=dt)

    def run():
        torch.matmul(a, b, out=c)

    def sync_with_flag():
        # The TF32 flag is global and the peers interleave: set it before every sample.
        set_tf32(torch, tf32)
        sync()

    return Case(lib, run, sync_with_flag)


def serve():
    cases = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        op = req.get("op")
        try:
            if op == "hello":
                reply = hello()
            elif op == "prepare":
                case = prepare(req)
                if isinstance(case, str):
                    reply = {"absent": case}
                else:
                    case.calibrate()
                    cases[req["id"]] = case
                    reply = {"ok": True, "inner": case.inner}
            elif op == "time":
                reply = {"s": cases[req["id"]].sample()}
            elif op == "free":
                cases.pop(req.get("id"), None)
                torch = _torch
                if torch is not None:
                    torch.cuda.empty_cache()
                reply = {"ok": True}
            else:
                reply = {"error": f"unknown op {op!r}"}
        except Exception as e:  # noqa: BLE001 - report, keep serving
            reply = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


def one_shot(argv):
    import argparse

    p = argparse.ArgumentParser(description="Time square matmuls with the peers (median of 5 samples).")
    p.add_argument("--sizes", default="256,512,1024")
    p.add_argument("--libs", default="numpy,torch-f32,torch-tf32,torch-f16")
    args = p.parse_args(argv)
    results = []
    for n in [int(s) for s in args.sizes.split(",")]:
        for lib in args.libs.split(","):
            dtype = "f16" if lib == "torch-f16" else "f32"
            case = prepare({"lib": lib, "m": n, "k": n, "n": n, "dtype": dtype})
            if isinstance(case, str):
                results.append({"lib": lib, "n": n, "absent": case})
                continue
            case.calibrate()
            s = sorted(case.sample() for _ in range(5))[2]
            results.append({"lib": lib, "n": n, "ms": s * 1e3, "gflops": 2 * n**3 / s / 1e9})
    print(json.dumps({"hello": hello(), "results": results}, indent=1))


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        one_shot(sys.argv[1:])
