#!/usr/bin/env python3
"""Writes the seed corpus of examples/fuzz_readers.rs into fuzz/corpus/: small valid .npy files (numpy),
.safetensors files (the format written by hand: an 8-byte header length, the JSON header, the data) and GGUF files
(gguf-py) covering every metadata type, nested arrays and a few block types. Run from the repository root."""
import json, os, struct
import numpy as np
import gguf

from gguf_fixtures import byte_chars as byte_level_chars

root = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus")
rng = np.random.default_rng(0)

def npy(name, a):
    np.save(os.path.join(root, "npy", name), a)

npy("f32-2x3.npy", rng.standard_normal((2, 3)).astype(np.float32))
npy("f16-scalar.npy", np.array(1.5, dtype=np.float16))
npy("i32-empty.npy", np.zeros((0, 4), dtype=np.int32))
npy("f32-4d.npy", np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4))
npy("f64-refused.npy", np.ones(3))
# a version 3.0 header (UTF-8 field name) and a Fortran-ordered array
np.lib.format.write_array(open(os.path.join(root, "npy", "v3-structured.npy"), "wb"),
                          np.zeros(2, dtype=[("\u00e9\u4e2d", "<f4")]), version=(3, 0))
npy("fortran.npy", np.asfortranarray(np.ones((2, 3), dtype=np.float32)))

def safetensors(name, tensors, metadata=None):
    header, data = {}, b""
    for key, (dtype, shape, raw) in tensors.items():
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(root, "safetensors", name), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)

f32 = lambda *s: rng.standard_normal(s).astype(np.float32).tobytes()
safetensors("mixed.safetensors", {
    "w": ("F32", [2, 3], f32(2, 3)),
    "h": ("F16", [4], np.ones(4, np.float16).tobytes()),
    "b": ("BF16", [2], b"\x80\x3f\x00\x40"),
    "i": ("I32", [], struct.pack("<i", 7)),
    "e": ("F32", [0, 5], b""),
    "d": ("F64", [1], struct.pack("<d", 1.0)),
}, {"format": "pt"})
safetensors("one.safetensors", {"x": ("F32", [1], f32(1))})

def gguf_file(name, tensors):
    w = gguf.GGUFWriter(os.path.join(root, "gguf", name), "llama")
    w.add_uint8("t.u8", 200); w.add_int8("t.i8", -5); w.add_uint16("t.u16", 60000); w.add_int16("t.i16", -3)
    w.add_uint32("t.u32", 7); w.add_int32("t.i32", -7); w.add_float32("t.f32", 0.5); w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo"); w.add_uint64("t.u64", 1 << 40); w.add_int64("t.i64", -1); w.add_float64("t.f64", 2.5)
    w.add_array("t.arr", [1, 2, 3]); w.add_array("t.strs", ["a", "bc"]); w.add_array("t.nested", [[1, 2], [3]])
    for tname, arr, qtype in tensors:
        w.add_tensor(tname, arr, raw_dtype=qtype)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()

q8 = gguf.quants.quantize(rng.standard_normal((2, 32)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
q4k = rng.integers(0, 256, (1, 144), dtype=np.uint8)  # one Q4_K block of 256 weights (gguf-py cannot quantize it)
gguf_file("small.gguf", [("f", rng.standard_normal((2, 4)).astype(np.float32), None),
                         ("q8", q8, gguf.GGMLQuantizationType.Q8_0)])
gguf_file("q4k.gguf", [("k", q4k, gguf.GGMLQuantizationType.Q4_K)])
gguf_file("meta-only.gguf", [])

# ---- the tokenizer rebuilt from GGUF metadata: small vocabularies of both kinds (no tensors needed) ----------
os.makedirs(os.path.join(root, "tokenizer"), exist_ok=True)



def vocab_file(name, model, tokens, merges=None, scores=None, pre="gpt2", extra=()):
    w = gguf.GGUFWriter(os.path.join(root, "tokenizer", name), "llama")
    w.add_tokenizer_model(model)
    if model == "gpt2":
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
    if merges:
        w.add_token_merges(merges)
    if scores:
        w.add_token_scores(scores)
    w.add_eos_token_id(len(tokens) - 1)
    for k, v in extra:
        w.add_string(k, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()


chars = byte_level_chars()
vocab_file("bpe-gpt2.gguf", "gpt2", chars + ["he", "ll", "Ġt", "hell", "<|end|>"], ["h e", "l l", "Ġ t", "he ll"])
vocab_file("bpe-llama3.gguf", "gpt2", chars + ["12", "Ġa", "<|eot_id|>"], ["1 2", "Ġ a"], pre="llama-bpe")
vocab_file("bpe-smollm.gguf", "gpt2", chars + ["ab", "<|im_end|>"], ["a b"], pre="smollm")
spm = [f"<0x{b:02X}>" for b in range(256)] + ["▁", "▁a", "b", "ab", "▁ab", "</s>"]
vocab_file("spm.gguf", "llama", spm, scores=[0.0] * 256 + [-1.0, -2.0, -3.0, -4.0, -5.0, 0.0])

# ---- chat templates: the real ones the tests check (tests/data/chat_templates/) ---------------------------
import shutil
os.makedirs(os.path.join(root, "template"), exist_ok=True)
src = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "chat_templates")
for f in sorted(os.listdir(src)):
    if f.endswith(".jinja") and os.path.getsize(os.path.join(src, f)) < 6000:
        shutil.copy(os.path.join(src, f), os.path.join(root, "template", f))
