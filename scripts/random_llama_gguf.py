"""Small llama-architecture GGUF files with random metadata, written by the `gguf` package (llama.cpp's own
writer), for the property test in tests/cli_inputs.rs: each must load and generate, or fail with one clean error.

    python3 scripts/random_llama_gguf.py OUT_DIR COUNT SEED

The metadata is drawn from what llama.cpp writes for llama models (widths, heads, KV heads, head dims, rope base
and dims, epsilons, context, tokenizer kinds and pre-tokenizers, special ids, a chat template), mostly valid and
sometimes not (a zero, a mismatch, a missing tensor, a weight in another block type), so both outcomes occur.
"""
import os
import sys

import numpy as np
import gguf

from gguf_fixtures import byte_chars

out, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(seed)




def pick(*options):
    return options[rng.integers(len(options))]


def tensor(w, name, shape, qtype):
    """A weight of numpy shape `shape`, random, in `qtype` (quantized by gguf.quants where it is a block type)."""
    a = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        w.add_tensor(name, a.astype(np.float16 if qtype == gguf.GGMLQuantizationType.F16 else np.float32))
    else:
        w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)


for i in range(count):
    heads = int(pick(1, 2, 4))
    kv = int(pick(1, heads, 2 if heads % 2 == 0 else 1))
    head_dim = int(pick(8, 16, 32))
    width = heads * head_dim if rng.random() < 0.9 else heads * head_dim + 1
    ff = int(pick(16, 32, 64))
    layers = int(pick(1, 2, 3))
    w = gguf.GGUFWriter(os.path.join(out, f"random-{seed}-{i:03}.gguf"), "llama")
    w.add_block_count(layers)
    w.add_context_length(int(pick(32, 64, 128, 0 if rng.random() < 0.05 else 64)))
    w.add_embedding_length(width)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(int(pick(head_dim, head_dim // 2, head_dim + 2 if rng.random() < 0.1 else head_dim)))
    w.add_rope_freq_base(float(pick(10000.0, 500000.0, 1e4, 0.0 if rng.random() < 0.05 else 1e4)))
    w.add_layer_norm_rms_eps(float(pick(1e-5, 1e-6, float("nan") if rng.random() < 0.05 else 1e-5)))
    if rng.random() < 0.3:
        w.add_rope_scaling_type(pick(gguf.RopeScalingType.LINEAR, gguf.RopeScalingType.YARN))
        w.add_rope_scaling_factor(float(pick(2.0, 4.0, -1.0 if rng.random() < 0.2 else 2.0)))
    spm = rng.random() < 0.4
    if spm:
        tokens = [f"<0x{b:02X}>" for b in range(256)] + ["▁", "▁a", "b", "ab", "▁the", "</s>"]
        w.add_tokenizer_model("llama")
        w.add_token_scores([0.0] * 256 + [-1.0, -2.0, -3.0, -4.0, -5.0, 0.0])
    else:
        tokens = byte_chars() + ["he", "ll", "Ġt", "hell", "<|end|>"]
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pick("gpt2", "llama-bpe", "smollm", "default"))
        w.add_token_merges(["h e", "l l", "Ġ t", "he ll"])
    w.add_token_list(tokens)
    w.add_token_types([1] * (len(tokens) - 1) + [3])
    w.add_eos_token_id(len(tokens) - 1 if rng.random() < 0.95 else len(tokens) + 7)
    if rng.random() < 0.5:
        w.add_chat_template(pick("{% for m in messages %}{{ m.content }}\n{% endfor %}", "{% for m in messages %}"))
    vocab = len(tokens) if rng.random() < 0.95 else len(tokens) - 1
    qtype = pick(gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.Q8_0,
                 gguf.GGMLQuantizationType.Q4_0)
    if width % 32 and qtype in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0):
        qtype = gguf.GGMLQuantizationType.F32
    tensor(w, "token_embd.weight", (vocab, width), qtype)
    for layer in range(layers):
        for name, shape in [("attn_q", (heads * head_dim, width)), ("attn_k", (kv * head_dim, width)),
                            ("attn_v", (kv * head_dim, width)), ("attn_output", (width, heads * head_dim)),
                            ("ffn_gate", (ff, width)), ("ffn_up", (ff, width)), ("ffn_down", (width, ff))]:
            if rng.random() < 0.01:
                continue  # a missing weight
            q = qtype if shape[-1] % 32 == 0 else gguf.GGMLQuantizationType.F32
            tensor(w, f"blk.{layer}.{name}.weight", shape, q)
        for name in ("attn_norm", "ffn_norm"):
            tensor(w, f"blk.{layer}.{name}.weight", (width,), gguf.GGMLQuantizationType.F32)
    tensor(w, "output_norm.weight", (width,), gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
print(f"wrote {count} files to {out}")
