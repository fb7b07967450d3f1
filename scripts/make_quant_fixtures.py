#!/usr/bin/env python3
"""Writes tests/data/quant.gguf: for every block type webtensor reads, a weight `w.<type>` of shape [9, 512] and its
values decoded by the `gguf` package (`gguf.quants.dequantize`, which reproduces ggml's decoders bit for bit) as
the f32 tensor `ref.<type>`. Types gguf-py can quantize are quantized from random values; the K-quants, which it
cannot, are random bit patterns with finite, small f16 scales. Metadata of every GGUF value type (nested arrays
included) is written too, for the reader's tests. Deterministic (seeded).

    pip install gguf numpy && python3 scripts/make_quant_fixtures.py
"""
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

ROWS, COLS = 9, 512
# byte offsets of the f16 scale fields of each K-quant block (ggml-common.h)
K_SCALES = {T.Q2_K: (84, [80, 82]), T.Q3_K: (110, [108]), T.Q4_K: (144, [0, 2]), T.Q5_K: (176, [0, 2]),
            T.Q6_K: (210, [208])}


def random_blocks(rng, qtype):
    size, scales = K_SCALES[qtype]
    blocks = rng.integers(0, 256, size=(ROWS * COLS // 256, size), dtype=np.uint8)
    for off in scales:
        d = rng.uniform(0.002, 0.02, size=blocks.shape[0]).astype(np.float16)
        blocks[:, off:off + 2] = d.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(ROWS, -1)


def main():
    rng = np.random.default_rng(1234)
    out = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "quant.gguf")
    w = gguf.GGUFWriter(out, "webtensor-fixture")
    w.add_uint32("test.u32", 7)
    w.add_int32("test.i32", -3)
    w.add_float32("test.f32", 0.5)
    w.add_uint64("test.u64", 1 << 40)
    w.add_int64("test.i64", -(1 << 40))
    w.add_float64("test.f64", 0.25)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_array("test.strings", ["a", "bc", ""])
    w.add_array("test.nested", [[1, 2], [3]])
    for qtype in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.BF16, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]:
        if qtype in K_SCALES:
            q = random_blocks(rng, qtype)
        else:
            q = quants.quantize(rng.standard_normal((ROWS, COLS)).astype(np.float32), qtype)
        ref = quants.dequantize(q, qtype).astype(np.float32)
        assert ref.shape == (ROWS, COLS) and np.isfinite(ref).all()
        name = qtype.name.lower()
        w.add_tensor(f"w.{name}", q, raw_dtype=qtype)
        w.add_tensor(f"ref.{name}", ref)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(out, os.path.getsize(out), "bytes")


if __name__ == "__main__":
    main()
