#!/usr/bin/env python3
"""Writes tests/data/quant.gguf: for every block type webtensor reads, a weight `w.<type>` of shape [9, 512] and its
values decoded by the `gguf` package (`gguf.quants.dequantize`, which reproduces ggml's decoders bit for bit) as
the f32 tensor `ref.<type>`. Types gguf-py can quantize are quantized from random values; the K-quants, the IQ
types, TQ1_0, TQ2_0 and MXFP4 are random bit patterns (every pattern is a block) with finite, small scales: the f16
scale fields at the offsets ggml-common.h gives them, IQ1_M's f16 spread over its sub-scales' top nibbles, MXFP4's
E8M0 exponent near 2^-6 (values of order one). Metadata of every GGUF value type (nested arrays
included) is written too, for the reader's tests. Deterministic (seeded).

    pip install gguf numpy && python3 scripts/make_quant_fixtures.py
"""
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

ROWS, COLS = 9, 512
# (block bytes, byte offsets of the f16 scale fields, f16 scale range) of each randomly filled block type
# (ggml-common.h)
K_SCALES = {T.Q2_K: (84, [80, 82]), T.Q3_K: (110, [108]), T.Q4_K: (144, [0, 2]), T.Q5_K: (176, [0, 2]),
            T.Q6_K: (210, [208]), T.IQ2_XXS: (66, [0]), T.IQ2_XS: (74, [0]), T.IQ3_XXS: (98, [0]),
            T.IQ1_S: (50, [0]), T.IQ4_NL: (18, [0]), T.IQ3_S: (110, [0]), T.IQ2_S: (82, [0]), T.IQ4_XS: (136, [0]),
            T.IQ1_M: (56, []), T.TQ1_0: (54, [52]), T.TQ2_0: (66, [64]), T.MXFP4: (17, [])}
BLOCK_VALUES = {T.IQ4_NL: 32, T.MXFP4: 32}


def random_blocks(rng, qtype):
    size, scales = K_SCALES[qtype]
    n = ROWS * COLS // BLOCK_VALUES.get(qtype, 256)
    blocks = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    for off in scales:
        d = rng.uniform(0.002, 0.02, size=n).astype(np.float16)
        blocks[:, off:off + 2] = d.view(np.uint8).reshape(-1, 2)
    if qtype == T.IQ1_M:
        # the f16 scale's four nibbles in the top 4 bits of the four u16 sub-scale words at bytes 48..56
        bits = rng.uniform(0.002, 0.02, size=n).astype(np.float16).view(np.uint16)
        for k in range(4):
            word = blocks[:, 48 + 2 * k].astype(np.uint16) | (blocks[:, 49 + 2 * k].astype(np.uint16) << 8)
            word = (word & 0x0FFF) | (((bits >> (4 * k)) & 0xF) << 12)
            blocks[:, 48 + 2 * k] = (word & 0xFF).astype(np.uint8)
            blocks[:, 49 + 2 * k] = (word >> 8).astype(np.uint8)
    if qtype == T.MXFP4:
        blocks[:, 0] = rng.integers(118, 126, size=n, dtype=np.uint8)
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
    for qtype in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.BF16, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
                  T.IQ4_NL, T.IQ4_XS, T.IQ3_XXS, T.IQ3_S, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ1_S, T.IQ1_M, T.TQ1_0,
                  T.TQ2_0, T.MXFP4]:
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
