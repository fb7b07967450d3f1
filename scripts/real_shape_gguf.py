#!/usr/bin/env python3
"""A random-weight GGUF file with a real model's shapes, block types and tensor names, for speed comparisons with
llama.cpp on the same file (`webtensor bench generate --model OUT`): speed does not depend on the values.

    python3 scripts/real_shape_gguf.py SHAPE OUT.gguf

SHAPE is one of SHAPES below (each a published model's config.json: widths, layers, heads, vocabulary); the
matrices are stored as llama.cpp's Q4_K_M mixture stores them (Q4_K, with Q6_K for attn_v and ffn_down in half
of the layers, as llama-quantize's Q4_K_M rule does, Q5_0 and Q8_0 for them where a row is not whole 256-wide
super-blocks, as llama-quantize falls back; a fused Q/K/V Q5_K; the token embedding Q8_0 where the output shares
it, else Q4_K with a Q6_K output), norms f32 ones, Qwen2's Q/K/V
biases f32 zeros, Gemma 2's post-norms, soft-caps and sliding window as its config sets them. Blocks are random bytes with small f16 scales, so the network stays calm. The tokenizer is a
byte-level BPE of the real vocabulary's size (256 byte tokens, then placeholder pieces; a SentencePiece one for
Phi-3, as its file has), which llama-bench's method (fixed token ids, no text) does not read. Needs numpy and gguf.
"""
import argparse

import numpy as np
import gguf

from arch_models import llama3_factors, longrope_attn_factor
from gguf_fixtures import byte_chars

SHAPES = {
    # Qwen/Qwen2.5-0.5B-Instruct
    "qwen2.5-0.5b": dict(arch="qwen2", E=896, L=24, H=14, Hkv=2, F=4864, V=151936, base=1e6, eps=1e-6, tied=True,
                         bias=True, pre="qwen2"),
    # meta-llama/Llama-3.2-1B-Instruct (its rope frequency factors included)
    "llama3.2-1b": dict(arch="llama", E=2048, L=16, H=32, Hkv=8, F=8192, V=128256, base=5e5, eps=1e-5, tied=True,
                        bias=False, pre="llama-bpe", rope_freqs=True),
    # google/gemma-2-2b-it: heads of 256 (H·D = 2048 < E), soft-capping, a sliding window on alternate layers,
    # post-norms
    "gemma2-2b": dict(arch="gemma2", E=2304, L=26, H=8, Hkv=4, D=256, F=9216, V=256000, base=1e4, eps=1e-6,
                      tied=True, bias=False, pre="default", gemma2=dict(attn_cap=50.0, final_cap=30.0, window=4096)),
    # microsoft/Phi-3.5-mini-instruct: fused Q/K/V (Q5_K in llama-quantize's Q4_K_M) and gate/up, LongRoPE over a
    # 131072 context from 4096, an untied output
    "phi3.5-mini": dict(arch="phi3", E=3072, L=32, H=32, Hkv=32, F=8192, V=32064, base=1e4, eps=1e-5, tied=False,
                        bias=False, spm=True, longrope=dict(context=131072, orig=4096)),
}
Q = gguf.GGMLQuantizationType
BLOCK = {Q.Q4_K: (256, 144), Q.Q5_K: (256, 176), Q.Q6_K: (256, 210), Q.Q5_0: (32, 22), Q.Q8_0: (32, 34)}
# llama-quantize's fallback for rows not a whole number of 256-wide super-blocks (Qwen2.5-0.5B's width 896)
FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}


def random_blocks(kind, rows, cols, rng):
    """rows × cols weights of block type `kind` as bytes [rows, row bytes]: random quants, small f16 scales."""
    per, size = BLOCK[kind]
    n = rows * cols // per
    b = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    small = lambda k: np.full((n, 1), 0.002 / k, dtype=np.float16).view(np.uint8).reshape(n, 2)  # noqa: E731
    if kind in (Q.Q4_K, Q.Q5_K):  # d, dmin (f16), 12 scale bytes, (Q5_K: 32 bytes of fifth bits,) 128 nibble bytes
        b[:, 0:2], b[:, 2:4] = small(1), small(4)
    elif kind == Q.Q6_K:  # 128 ql, 64 qh, 16 int8 scales, d (f16)
        b[:, 192:208] = rng.integers(-8, 8, size=(n, 16)).astype(np.int8).view(np.uint8)
        b[:, 208:210] = small(2)
    else:  # Q5_0: d (f16), 4 bytes of fifth bits, 16 nibble bytes; Q8_0: d (f16), 32 int8
        b[:, 0:2] = small(8)
    return b.reshape(rows, cols // per * size)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out")
    args = ap.parse_args()
    c = SHAPES[args.shape]
    rng = np.random.default_rng(7)
    E, L, H, Hkv, F, V = c["E"], c["L"], c["H"], c["Hkv"], c["F"], c["V"]
    D = c.get("D", E // H)
    w = gguf.GGUFWriter(args.out, c["arch"])
    w.add_name(f"{args.shape} (random weights, real shapes)")
    w.add_context_length(c["longrope"]["context"] if c.get("longrope") else 32768)
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_block_count(L)
    w.add_head_count(H)
    w.add_head_count_kv(Hkv)
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_rope_freq_base(c["base"])
    w.add_rope_dimension_count(D)
    if c.get("D"):
        w.add_key_length(D)
        w.add_value_length(D)
    if c.get("gemma2"):
        w.add_attn_logit_softcapping(c["gemma2"]["attn_cap"])
        w.add_final_logit_softcapping(c["gemma2"]["final_cap"])
        w.add_sliding_window(c["gemma2"]["window"])
    if c.get("longrope"):  # as convert_hf_to_gguf writes Phi-3's
        w.add_rope_scaling_orig_ctx_len(c["longrope"]["orig"])
        w.add_rope_scaling_attn_factors(longrope_attn_factor(c["longrope"]["context"], c["longrope"]["orig"]))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    if c.get("spm"):  # a SentencePiece vocabulary as Phi-3's: <unk> <s> </s>, 256 byte pieces, pieces, control tokens
        tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["▁", "▁t", "▁to"]
        # (llama.cpp sets attributes of <|endoftext|> by name in a Phi-3 file: it must exist)
        tokens += [f"▁tok{i}" for i in range(V - len(tokens) - 2)] + ["<|endoftext|>", "<|end|>"]
        T = gguf.TokenType
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores([0.0] * 259 + [-float(i) for i in range(V - 261)] + [0.0, 0.0])
        w.add_token_types([T.UNKNOWN, T.CONTROL, T.CONTROL] + [T.BYTE] * 256 + [T.NORMAL] * (V - 261) + [T.CONTROL] * 2)
        w.add_bos_token_id(1)
        w.add_eos_token_id(V - 1)
    else:
        tokens = byte_chars() + ["to", "tok"] + [f"tok{i}" for i in range(V - 256 - 3)] + ["<|endoftext|>"]
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(c["pre"])
        w.add_token_list(tokens)
        w.add_token_types([gguf.TokenType.NORMAL] * (V - 1) + [gguf.TokenType.CONTROL])
        w.add_token_merges(["t o", "to k"])
        w.add_eos_token_id(V - 1)
    w.add_add_bos_token(False)

    def mat(name, rows, cols, kind):
        kind = FALLBACK.get(kind, kind) if cols % 256 else kind
        w.add_tensor(name, random_blocks(kind, rows, cols, rng), raw_dtype=kind)

    mat("token_embd.weight", V, E, Q.Q8_0 if c["tied"] else Q.Q4_K)
    if not c["tied"]:
        mat("output.weight", V, E, Q.Q6_K)
    w.add_tensor("output_norm.weight", np.ones(E, dtype=np.float32))
    if c.get("longrope"):  # Phi-3.5-mini's factor tables (head dim / 2 entries): short near 1, long up to ~40
        half = D // 2
        w.add_tensor("rope_factors_short.weight", np.linspace(1.0, 1.2, half, dtype=np.float32))
        w.add_tensor("rope_factors_long.weight", np.geomspace(1.0, 40.0, half).astype(np.float32))
    if c.get("rope_freqs"):  # Llama 3.2's: factor 32, low 1, high 4, original context 8192
        w.add_tensor("rope_freqs.weight", llama3_factors(c["base"], D, 32.0, 1.0, 4.0, 8192))
    for layer in range(L):
        p = f"blk.{layer}."
        more = layer < L // 4 or layer >= 3 * L // 4 or (layer - L // 4) % 3 == 2  # llama-quantize's use_more_bits
        w.add_tensor(p + "attn_norm.weight", np.ones(E, dtype=np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(E, dtype=np.float32))
        if c.get("gemma2"):
            w.add_tensor(p + "post_attention_norm.weight", np.ones(E, dtype=np.float32))
            w.add_tensor(p + "post_ffw_norm.weight", np.ones(E, dtype=np.float32))
        if c["arch"] == "phi3":  # fused: Q, K, V rows in one matrix; gate then up rows in ffn_up
            mat(p + "attn_qkv.weight", (H + 2 * Hkv) * D, E, Q.Q5_K)
        else:
            mat(p + "attn_q.weight", H * D, E, Q.Q4_K)
            mat(p + "attn_k.weight", Hkv * D, E, Q.Q4_K)
            mat(p + "attn_v.weight", Hkv * D, E, Q.Q6_K if more else Q.Q4_K)
        if c["bias"]:
            for n, rows in (("q", H * D), ("k", Hkv * D), ("v", Hkv * D)):
                w.add_tensor(p + f"attn_{n}.bias", np.zeros(rows, dtype=np.float32))
        mat(p + "attn_output.weight", E, H * D, Q.Q4_K)
        if c["arch"] == "phi3":
            mat(p + "ffn_up.weight", 2 * F, E, Q.Q4_K)
        else:
            mat(p + "ffn_gate.weight", F, E, Q.Q4_K)
            mat(p + "ffn_up.weight", F, E, Q.Q4_K)
        mat(p + "ffn_down.weight", E, F, Q.Q6_K if more else Q.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out}: {args.shape}, {c['arch']}, {L} layers, width {E}, vocabulary {V}, Q4_K_M mixture")


if __name__ == "__main__":
    main()
