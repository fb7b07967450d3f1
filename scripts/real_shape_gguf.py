#!/usr/bin/env python3
"""A random-weight GGUF file with a real model's shapes, block types and tensor names, for speed comparisons with
llama.cpp on the same file (`webtensor bench generate --model OUT`): speed does not depend on the values.

    python3 scripts/real_shape_gguf.py SHAPE OUT.gguf [--layers N]

SHAPE is one of SHAPES below (each a published model's config.json: widths, layers, heads, experts, vocabulary); the
matrices are stored as llama-quantize's mixture stores them (real_shape_moe.matrix_type follows its
llama_tensor_get_type). Q4_K_M: Q4_K, with Q6_K for attn_v and ffn_down (an MoE's ffn_down_exps) in half of the
layers (use_more_bits), Q5_0 and Q8_0 for them where a row is not whole 256-wide super-blocks, as llama-quantize
falls back; a fused Q/K/V Q5_K; the output Q6_K (Q8_0 where rows are not whole super-blocks), the token embedding as
the output where it shares it, else the mixture's default (Q4_K). IQ4_XS: IQ4_XS, attn_v Q5_K where 4 or more heads
share a KV head, the output as Q4_K_M's. MXFP4_MOE (gpt-oss as ggml-org publishes it): experts MXFP4, every other
matrix Q8_0. Norms are f32 ones, biases and attention sinks f32 zeros, routers f32 small random weights; Gemma 2's
post-norms, soft-caps and sliding window, gpt-oss's window and YaRN as their configs set them. Blocks are random
bytes with small scales, so the network stays calm. The tokenizer is a byte-level BPE of the real vocabulary's size
(256 byte tokens, then placeholder pieces; a SentencePiece one for Phi-3, as its file has), which llama-bench's
method (fixed token ids, no text) does not read. --layers N writes the first N blocks only (block_count N), for a
machine with less memory. Tensors are drawn as they are written, so a file larger than memory can be written. Needs
numpy and gguf.
"""
import argparse

import numpy as np
import gguf

from arch_models import llama3_factors, longrope_attn_factor
from gguf_fixtures import byte_chars
from real_shape_moe import MIXTURES, experts, gpt_oss_attention, matrix_type, moe_keys

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
    # Qwen/Qwen3-30B-A3B: 128 experts of width 768, 8 used per token, no dense FFN; heads of 128 (H·D = 4096 > E)
    # with per-head q/k norms; an untied output
    "qwen3-30b-a3b": dict(arch="qwen3moe", E=2048, L=48, H=32, Hkv=4, D=128, F=6144, V=151936, base=1e6, eps=1e-6,
                          tied=False, bias=False, pre="qwen2", ctx=40960, qk_norm=True,
                          moe=dict(X=128, K=8, Fe=768, Fs=None)),
    # openai/gpt-oss-20b as ggml-org/gpt-oss-20b-GGUF's gpt-oss-20b-mxfp4.gguf stores it: 32 experts of width 2880,
    # 4 used; heads of 64; biases on Q, K, V, the output projection, the router and every expert; attention sinks; a
    # window of 128 on alternate layers; YaRN (factor 32 over 4096); the pre-FFN norm named post_attention_norm
    "gpt-oss-20b": dict(arch="gpt-oss", E=2880, L=24, H=64, Hkv=8, D=64, F=2880, V=201088, base=150000.0, eps=1e-5,
                        tied=False, bias=True, pre="gpt-4o", ctx=131072, mix="mxfp4_moe", window=128,
                        yarn=dict(factor=32.0, orig=4096), moe=dict(X=32, K=4, Fe=2880, Fs=None)),
    # Qwen/Qwen3.5-0.8B (its text model): 18 gated delta-net layers (16 key and 16 value heads of 128, a 4-tap conv)
    # and 6 gated full-attention layers (every 4th: 8 heads of 256, 2 KV heads, rope over 64 dims of each head,
    # its sections [11, 11, 10]); a 248320-token vocabulary, tied
    "qwen3.5-0.8b": dict(arch="qwen35", E=1024, L=24, H=8, Hkv=2, D=256, F=3584, V=248320, base=1e7, eps=1e-6,
                         tied=True, bias=False, pre="qwen2", ctx=262144, qk_norm=True, rope=64,
                         hybrid=dict(Hk=16, Hv=16, S=128, K=4, interval=4)),
    # Qwen/Qwen3.5-35B-A3B (its text model): 30 gated delta-net layers (16 key and 32 value heads of 128) and 10
    # gated attention layers (16 heads of 256, 2 KV heads), each with 256 experts of width 512 (8 used) and a
    # shared expert of 512 behind a sigmoid gate; an untied output
    "qwen3.5-35b-a3b": dict(arch="qwen35moe", E=2048, L=40, H=16, Hkv=2, D=256, F=512, V=248320, base=1e7, eps=1e-6,
                            tied=False, bias=False, pre="qwen2", ctx=262144, qk_norm=True, rope=64,
                            hybrid=dict(Hk=16, Hv=32, S=128, K=4, interval=4), moe=dict(X=256, K=8, Fe=512, Fs=512)),
}
# Llama 3.2 1B in llama-quantize's IQ4_XS mixture
SHAPES["llama3.2-1b-iq4_xs"] = dict(SHAPES["llama3.2-1b"], mix="iq4_xs")
Q = gguf.GGMLQuantizationType
BLOCK = {Q.Q4_K: (256, 144), Q.Q5_K: (256, 176), Q.Q6_K: (256, 210), Q.IQ4_XS: (256, 136), Q.Q5_0: (32, 22),
         Q.Q8_0: (32, 34), Q.IQ4_NL: (32, 18), Q.MXFP4: (32, 17), Q.Q4_0: (32, 18), Q.Q3_K: (256, 110),
         Q.Q2_K: (256, 84), Q.IQ3_XXS: (256, 98), Q.IQ3_S: (256, 110), Q.IQ2_XXS: (256, 66), Q.IQ2_XS: (256, 74),
         Q.IQ2_S: (256, 82), Q.IQ1_S: (256, 50), Q.IQ1_M: (256, 56), Q.TQ1_0: (256, 54), Q.TQ2_0: (256, 66)}
# where a block's one f16 scale d lies (ggml-common.h), for the types whose d is a plain f16
F16_SCALE_AT = {Q.Q6_K: 208, Q.Q3_K: 108, Q.Q2_K: 80, Q.TQ1_0: 52, Q.TQ2_0: 64}
# llama-quantize's fallback for rows not a whole number of 256-wide super-blocks (Qwen2.5-0.5B's width 896)
FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0, Q.IQ4_XS: Q.IQ4_NL}


def random_blocks(kind, shape, rng):
    """Weights of numpy shape [..., rows, cols] in block type `kind` as bytes [..., rows, row bytes]: random quants,
    small scales."""
    per, size = BLOCK[kind]
    n = int(np.prod(shape)) // per
    b = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    small = lambda k: np.full((n, 1), 0.002 / k, dtype=np.float16).view(np.uint8).reshape(n, 2)  # noqa: E731
    if kind in (Q.Q4_K, Q.Q5_K):  # d, dmin (f16), 12 scale bytes, (Q5_K: 32 bytes of fifth bits,) 128 nibble bytes
        b[:, 0:2], b[:, 2:4] = small(1), small(4)
    elif kind == Q.Q6_K:  # 128 ql, 64 qh, 16 int8 scales, d (f16)
        b[:, 192:208] = rng.integers(-8, 8, size=(n, 16)).astype(np.int8).view(np.uint8)
        b[:, 208:210] = small(2)
    elif kind in F16_SCALE_AT:  # Q2_K/Q3_K's dmin or d and TQ's d after their quants
        at = F16_SCALE_AT[kind]
        b[:, at:at + 2] = small(4)
        if kind == Q.Q2_K:
            b[:, 82:84] = small(8)
    elif kind == Q.IQ1_M:  # d's f16 bits spread over the top nibbles of the four u16 sub-scales (bytes 48..56)
        bits = int(np.float16(0.002).view(np.uint16))
        for i in range(4):
            b[:, 49 + 2 * i] = (b[:, 49 + 2 * i] & 0x0F) | (((bits >> (4 * i)) & 0xF) << 4)
    elif kind == Q.MXFP4:  # an E8M0 scale byte (2^(e - 128) times E2M1 values of up to 12), 16 nibble bytes
        b[:, 0] = rng.integers(118, 123, size=n, dtype=np.uint8)
    else:  # d (f16) first: Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS and the IQ grid types
        b[:, 0:2] = small(8)
    return b.reshape(*shape[:-1], shape[-1] // per * size)


class Tensors:
    """The file's tensors in order: f32 ones held, block-quantized ones drawn only as they are written."""

    def __init__(self, w, rng):
        self.w, self.rng, self.makers = w, rng, []

    def f32(self, name, a):
        a = np.asarray(a, dtype=np.float32)
        self.w.add_tensor_info(name, a.shape, a.dtype, a.nbytes)
        self.makers.append(lambda: a)

    def mat(self, name, shape, kind):
        """A matrix (or stack of them) of numpy shape [..., rows, cols] in block type `kind`, or its fallback."""
        kind = FALLBACK.get(kind, kind) if shape[-1] % BLOCK[kind][0] else kind
        per, size = BLOCK[kind]
        rows = int(np.prod(shape[:-1]))
        self.w.add_tensor_info(name, (*shape[:-1], shape[-1] // per * size), np.dtype(np.uint8),
                               rows * (shape[-1] // per) * size, raw_dtype=kind)
        self.makers.append(lambda: random_blocks(kind, shape, self.rng))

    def write(self):
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_ti_data_to_file()
        for make in self.makers:
            self.w.write_tensor_data(make())
        self.w.close()


def write_keys(w, c, name, L):
    """The hyper-parameters, as convert_hf_to_gguf and llama-quantize write them, with block_count L."""
    E, D = c["E"], c.get("D", c["E"] // c["H"])
    w.add_name(f"{name} (random weights, real shapes)")
    w.add_context_length(c["longrope"]["context"] if c.get("longrope") else c.get("ctx", 32768))
    w.add_embedding_length(E)
    w.add_feed_forward_length(c["F"])
    w.add_block_count(L)
    w.add_head_count(c["H"])
    w.add_head_count_kv(c["Hkv"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_rope_freq_base(c["base"])
    w.add_rope_dimension_count(c.get("rope", D))
    if c.get("hybrid"):  # as convert_hf_to_gguf writes Qwen3.5's
        hy = c["hybrid"]
        w.add_array(f"{c['arch']}.rope.dimension_sections", [11, 11, 10, 0])
        w.add_ssm_conv_kernel(hy["K"])
        w.add_ssm_inner_size(hy["Hv"] * hy["S"])
        w.add_ssm_state_size(hy["S"])
        w.add_ssm_time_step_rank(hy["Hv"])
        w.add_ssm_group_count(hy["Hk"])
        w.add_uint32(f"{c['arch']}.full_attention_interval", hy["interval"])
    if c.get("D"):
        w.add_key_length(D)
        w.add_value_length(D)
    if c.get("moe"):
        moe_keys(w, c)
    if c.get("gemma2"):
        w.add_attn_logit_softcapping(c["gemma2"]["attn_cap"])
        w.add_final_logit_softcapping(c["gemma2"]["final_cap"])
        w.add_sliding_window(c["gemma2"]["window"])
    if c.get("longrope"):  # as convert_hf_to_gguf writes Phi-3's
        w.add_rope_scaling_orig_ctx_len(c["longrope"]["orig"])
        w.add_rope_scaling_attn_factors(longrope_attn_factor(c["longrope"]["context"], c["longrope"]["orig"]))
    w.add_file_type(MIXTURES[c.get("mix", "q4_k_m")][1])


def write_vocab(w, c):
    """A placeholder vocabulary of the real size: SentencePiece for Phi-3, else byte-level BPE."""
    V = c["V"]
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


def linear_block(t, c, p, layer):
    """A Qwen3.5 gated delta-net layer's tensors (the conv, the decay's and β's vectors and the norm in f32, as
    llama-quantize keeps them), then its dense FFN."""
    E, F, hy = c["E"], c["F"], c["hybrid"]
    C, V = (2 * hy["Hk"] + hy["Hv"]) * hy["S"], hy["Hv"] * hy["S"]
    for n, a in (("attn_norm.weight", np.ones(E)), ("post_attention_norm.weight", np.ones(E)),
                 ("ssm_conv1d.weight", np.full((C, hy["K"]), 0.25)), ("ssm_dt.bias", np.zeros(hy["Hv"])),
                 ("ssm_a", -np.ones(hy["Hv"])), ("ssm_norm.weight", np.ones(hy["S"]))):
        t.f32(p + n, a)
    for n, shape in (("attn_qkv", (C, E)), ("attn_gate", (V, E)), ("ssm_alpha", (hy["Hv"], E)),
                     ("ssm_beta", (hy["Hv"], E)), ("ssm_out", (E, V))):
        t.mat(p + n + ".weight", shape, matrix_type(c, n, layer))
    if c.get("moe"):
        experts(t, c, p, layer)
        return
    for n, shape in (("ffn_gate", (F, E)), ("ffn_up", (F, E)), ("ffn_down", (E, F))):
        t.mat(p + n + ".weight", shape, matrix_type(c, n, layer))


def block(t, c, layer):
    """Block `layer`'s tensors: norms, attention (fused for Phi-3), then a dense or mixture-of-experts FFN."""
    E, H, Hkv, F = c["E"], c["H"], c["Hkv"], c["F"]
    D, p = c.get("D", E // H), f"blk.{layer}."
    hy = c.get("hybrid")
    if hy and (layer + 1) % hy["interval"]:
        return linear_block(t, c, p, layer)
    ones = np.ones(E)
    t.f32(p + "attn_norm.weight", ones)
    t.f32(p + ("post_attention_norm.weight" if c["arch"] in ("gpt-oss", "qwen35", "qwen35moe") else "ffn_norm.weight"), ones)
    if c.get("gemma2"):
        t.f32(p + "post_attention_norm.weight", ones)
        t.f32(p + "post_ffw_norm.weight", ones)
    if c["arch"] == "phi3":  # fused: Q, K, V rows in one matrix; gate then up rows in ffn_up
        t.mat(p + "attn_qkv.weight", ((H + 2 * Hkv) * D, E), matrix_type(c, "attn_qkv", layer))
    else:
        for n, rows in (("q", (2 if hy else 1) * H * D), ("k", Hkv * D), ("v", Hkv * D)):  # Qwen3.5: q and gate
            t.mat(p + f"attn_{n}.weight", (rows, E), matrix_type(c, f"attn_{n}", layer))
            if c["bias"]:
                t.f32(p + f"attn_{n}.bias", np.zeros(rows))
    if c.get("qk_norm"):  # per head
        t.f32(p + "attn_q_norm.weight", np.ones(D))
        t.f32(p + "attn_k_norm.weight", np.ones(D))
    t.mat(p + "attn_output.weight", (E, H * D), matrix_type(c, "attn_output", layer))
    if c["arch"] == "gpt-oss":
        gpt_oss_attention(t, c, p)
    if c.get("moe"):
        experts(t, c, p, layer)
        return
    if c["arch"] == "phi3":
        t.mat(p + "ffn_up.weight", (2 * F, E), matrix_type(c, "ffn_up", layer))
    else:
        t.mat(p + "ffn_gate.weight", (F, E), matrix_type(c, "ffn_gate", layer))
        t.mat(p + "ffn_up.weight", (F, E), matrix_type(c, "ffn_up", layer))
    t.mat(p + "ffn_down.weight", (E, F), matrix_type(c, "ffn_down", layer))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, help="write only the first N blocks (block_count N)")
    ap.add_argument("--type", choices=sorted(t.name for t in BLOCK),
                    help="every matrix (embedding and output included) in this block type, not the mixture's")
    args = ap.parse_args()
    c = SHAPES[args.shape]
    if args.type:
        if c.get("moe") or c.get("mix") or c["E"] % BLOCK[Q[args.type]][0]:
            ap.error(f"--type takes a dense shape whose width is whole {args.type} blocks")
        c = dict(c, only=Q[args.type])
    L = c["L"] if args.layers is None else args.layers
    if not 1 <= L <= c["L"]:
        ap.error(f"--layers must be 1 to {c['L']} for {args.shape}")
    if L < c["L"]:
        print(f"--layers {L}: {c['L'] - L} of {args.shape}'s {c['L']} layers dropped (block_count {L})")
    E, V = c["E"], c["V"]
    D = c.get("D", E // c["H"])
    w = gguf.GGUFWriter(args.out, c["arch"])
    write_keys(w, c, args.shape, L)
    write_vocab(w, c)
    t = Tensors(w, np.random.default_rng(7))
    t.mat("token_embd.weight", (V, E), matrix_type(c, "token_embd"))
    if not c["tied"]:
        t.mat("output.weight", (V, E), matrix_type(c, "output"))
    t.f32("output_norm.weight", np.ones(E))
    if c.get("longrope"):  # Phi-3.5-mini's factor tables (head dim / 2 entries): short near 1, long up to ~40
        t.f32("rope_factors_short.weight", np.linspace(1.0, 1.2, D // 2))
        t.f32("rope_factors_long.weight", np.geomspace(1.0, 40.0, D // 2))
    if c.get("rope_freqs"):  # Llama 3.2's: factor 32, low 1, high 4, original context 8192
        t.f32("rope_freqs.weight", llama3_factors(c["base"], D, 32.0, 1.0, 4.0, 8192))
    for layer in range(L):
        block(t, c, layer)
    t.write()
    mix = f"every matrix {c['only'].name}" if c.get("only") else f"{c.get('mix', 'q4_k_m').upper()} mixture"
    print(f"wrote {args.out}: {args.shape}, {c['arch']}, {L} layers, width {E}, vocabulary {V}, {mix}")


if __name__ == "__main__":
    main()
