#!/usr/bin/env python3
"""Small random GGUF models of several decoder architectures, each with an independent float64 numpy reference.

    python3 scripts/arch_models.py OUT_DIR [--check-hf]

For every case NAME in CASES this writes OUT_DIR/NAME.gguf (written by `gguf`, llama.cpp's own writer, in the layout
llama.cpp's converters produce) and OUT_DIR/NAME.json:

    {"arch": ..., "case": NAME, "vocab": V, "prompts": [{"ids": [...], "logits": [[V floats] per position]}, ...]}

with three prompts of 1, 7 and 13 random token ids; the logits at position p are the model's output after reading
ids[0..=p]. The reference reads the GGUF file back (metadata and weights, MXFP4 decoded by gguf) and runs in
float64; each case has its own fixed seed, so the output is deterministic.

Conventions followed (llama.cpp's graphs, which match the published HF definitions):
  * rms_norm(x)·w with rms_norm(x) = x / sqrt(mean(x²) + eps); causal grouped-query attention, query head h reading
    KV head h // (H / Hkv), scores scaled by 1/sqrt(head_dim); a sliding window of n lets query q see key k iff
    0 <= q - k < n (llama.cpp's LLAMA_SWA_TYPE_STANDARD, HF's sliding_window).
  * rope angle of pair i at position p: p·scale·base^(-2i/n_rot) / factor[i], with the factors of Llama 3's rope
    scaling stored as rope_freqs.weight as convert_hf_to_gguf computes them (1 without the tensor), or LongRoPE's
    (Phi-3: rope_factors_long/short.weight, the long ones where the context exceeds the original one, as llama.cpp
    chooses, cos and sin scaled by rope.scaling.attn_factor); YaRN's frequencies and scale (qwen2_yarn) as
    transformers computes them. NORMAL (arch llama) rotates (x[2i], x[2i+1]) -- llama.cpp's converter has
    permuted the Q/K rows for it; NEOX (every other arch) rotates (x[i], x[i + n_rot/2]).
  * qwen2: Q/K/V biases. qwen3, gemma3: per-head RMS norms of q and k before rope, head_dim from key_length.
  * phi3: fused attn_qkv (q, k, v rows) and fused ffn_up (gate rows, then up rows).
  * gemma2/gemma3: embeddings times sqrt(E); post-attention and post-FFN norms; GeGLU with tanh-gelu; norm weights
    stored as (1 + w) by the converter, so used as plain multipliers. gemma2: layers 0, 2, ... sliding, attention
    and final logit soft-capping cap·tanh(x/cap). gemma3: layer i sliding unless (i + 1) % 6 == 0; sliding layers use
    rope base 10000 and no rope scaling, global layers the file's base and linear scaling (positions / factor).
  * mixtures of experts: every layer's FFN is llama.cpp's build_moe_ffn (src/llama-graph.cpp) as each graph
    builder (src/models/<arch>.cpp) calls it: router logits x . ffn_gate_inp (+ its bias), k experts selected,
    their outputs (down projection, plus its bias) summed, each times its weight; experts stacked [n_expert, out,
    in] as ffn_{gate,up,down}_exps; a renormalizing sum clamped below at 6.103515625e-5.

        arch      gating                                   renormalized  expert activation   extra
        qwen3moe  softmax over all experts, top-k          yes           silu(gate) * up     per-head q/k norms
        qwen2moe  softmax over all experts, top-k          no            silu(gate) * up     a shared expert times
                                                                                             sigmoid(x . w)
        mixtral   (arch llama) softmax over all, top-k     yes           silu(gate) * up     width feed_forward_length
        olmoe     softmax over all experts, top-k          no            silu(gate) * up     q/k norms over the whole
                                                                                             projections
        gpt-oss   top-k of the logits, softmax over the k  no            swiglu_oai          biases, sinks, MXFP4

    gpt-oss: biases on q, k, v, the output projection, the router and every expert; an attention sink per query
    head (a logit in each softmax's denominator only, not scaled); layers 0, 2, ... sliding; YaRN on every layer;
    the pre-FFN norm named post_attention_norm; expert matrices in MXFP4 (ggml type 39, decoded by
    gguf.quants.dequantize); swiglu_oai(g, u) = min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7) + 1).
    A MoE prompt is drawn again while a token's k-th and (k+1)-th router logits lie closer than MIN_ROUTER_GAP of
    their standard deviation, so that f32 rounding cannot change the experts a token takes; each MoE case checks
    the vectorized FFN against a loop over tokens and selected experts (to 1e-12).

--check-hf also runs each model through transformers (torch, float64, eager attention) with the same weights,
converted back to HF's layout, and prints the largest difference of the logits relative to their largest magnitude.
The MoE cases need transformers 5 (experts as fused 3-D parameters) and take HF's YaRN with truncate (floored and
ceiled ramp bounds, as llama.cpp).
"""

import argparse
import json
import math
import os
import re

import numpy as np
import gguf

from gguf_fixtures import byte_chars

BASE = dict(E=64, H=4, Hkv=2, D=16, F=96, L=2, eps=1e-5, base=10000.0, tied=False, window=None, bias=False,
            qk_norm=False, fused=False, gemma=False, attn_cap=None, final_cap=None, rope_linear=None,
            head_dim_keys=False, qk_gain=1.0, pre="default", llama3_rope=None, yarn=None, longrope=None, v_f16=False,
            o_bias=False, sinks=False, moe=None)
# a MoE case's moe dict: X experts, K used per token, expert width Fe, shared expert width Fs (qwen2moe), the
# router's gain, expert matrices in MXFP4, biases on the router and experts (gpt-oss)
MOE_BASE = dict(Fs=None, router_gain=2.0, mxfp4=False, biases=False)
# (weights renormalized, gating) per architecture, as the graph builders pass norm_w and gating_op
GATING = {"llama": (True, "softmax"), "qwen3moe": (True, "softmax"), "qwen2moe": (False, "softmax"),
          "olmoe": (False, "softmax"), "gpt-oss": (False, "softmax_weight"), "qwen3next": (True, "softmax"),
          "qwen35moe": (True, "softmax")}
# swiglu_oai's constants (llama.cpp: build_moe_ffn's LLM_FFN_SWIGLU_OAI_MOE; HF: GptOssExperts alpha and limit)
OAI_ALPHA, OAI_LIMIT = 1.702, 7.0
# The clamp of the renormalizing sum (build_moe_ffn: ggml_clamp(weights_sum, 6.103515625e-5, INFINITY))
MIN_WEIGHT_SUM = 6.103515625e-5
# E8M0 scale bytes of the MXFP4 blocks: 2^(e - 128) times E2M1 values of up to 12 (rms 5.85), so that a fan-in of
# 64 gives gate and up projections of std ~4 (swiglu_oai's clamps at 7 are reached) and the down projection, on
# activations of up to 7 * 8, outputs of order one
MXFP4_SCALES = {"ffn_gate_exps": (124, 125), "ffn_up_exps": (124, 125), "ffn_down_exps": (119, 121)}
CASES = {
    "llama": dict(arch="llama"),
    # Llama 3.1's rope scaling at a small original context, so that most pairs are scaled within the prompts
    "llama3": dict(arch="llama", base=10000.0, llama3_rope=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                                              original_max_position_embeddings=32)),
    "mistral": dict(arch="llama", tied=True, window=5, v_f16=True),
    "qwen2": dict(arch="qwen2", bias=True, tied=True, base=1e6, eps=1e-6, pre="qwen2"),
    # YaRN as Qwen2.5's long-context setting writes it; an original context of 4096 puts the ramp at pairs 2..6 of
    # 8, so that some pairs keep their angle, some are scaled and some are mixed
    "qwen2_yarn": dict(arch="qwen2", bias=True, tied=True, base=10000.0, eps=1e-6, pre="qwen2",
                       yarn=dict(factor=4.0, original_max_position_embeddings=4096)),
    "qwen3": dict(arch="qwen3", E=48, qk_norm=True, eps=1e-6, head_dim_keys=True, pre="qwen2"),
    "phi3": dict(arch="phi3", Hkv=4, fused=True, window=6),
    # Phi-3.5-mini's LongRoPE at a small original context: the context (64) exceeds it, so the long factors apply
    "phi3_longrope": dict(arch="phi3", Hkv=4, fused=True, longrope=dict(
        original_max_position_embeddings=16, long_factor=[1.0, 1.2, 1.9, 3.1, 4.7, 6.3, 7.6, 8.4],
        short_factor=[1.0, 1.0, 1.05, 1.1, 1.2, 1.3, 1.4, 1.5])),
    # q/k weights twice as large, so that attention scores (std ~4) reach well into the soft-cap's tanh
    "gemma2": dict(arch="gemma2", L=3, gemma=True, tied=True, window=4, attn_cap=5.0, final_cap=4.0, eps=1e-6,
                   head_dim_keys=True, qk_gain=2.0),
    "gemma3": dict(arch="gemma3", L=6, gemma=True, tied=True, window=4, qk_norm=True, base=1e6, rope_linear=8.0,
                   eps=1e-6, head_dim_keys=True),
    # mixtures of experts; Qwen3-30B-A3B's shape in small: head_dim (key_length) 16 with E / H = 12
    "qwen3moe": dict(arch="qwen3moe", E=48, qk_norm=True, eps=1e-6, base=1e6, head_dim_keys=True, pre="qwen2",
                     moe=dict(X=8, K=2, Fe=32)),
    "qwen2moe": dict(arch="qwen2moe", bias=True, eps=1e-6, base=1e6, pre="qwen2", moe=dict(X=6, K=2, Fe=32, Fs=48)),
    # arch llama with llama.expert_count: the experts' width is feed_forward_length
    "mixtral": dict(arch="llama", F=64, base=1e6, moe=dict(X=4, K=2, Fe=64)),
    # OLMoE has as many KV heads as heads (llama.cpp declares attn_k_norm [E]); feed_forward_length is the experts'
    "olmoe": dict(arch="olmoe", Hkv=4, F=32, qk_norm="full", moe=dict(X=8, K=2, Fe=32)),
    # gpt-oss's YaRN (base 150000, factor 32, original context 4096: pairs 2..5 of 8 on the ramp) and its head_dim
    # apart from E / H; its window of 128 made 5, so that the prompts reach past it
    "gptoss": dict(arch="gpt-oss", L=3, H=8, Hkv=2, D=16, F=32, head_dim_keys=True, bias=True, o_bias=True,
                   sinks=True, window=5, base=150000.0, yarn=dict(factor=32.0, original_max_position_embeddings=4096),
                   moe=dict(X=8, K=2, Fe=32, mxfp4=True, biases=True)),
}
CONTEXT = 64
PROMPT_LENGTHS = (1, 7, 13)
MIN_ROUTER_GAP = 0.02
MERGES = ["Ġ t", "h e", "i n", "Ġt he"]




TOKENS = byte_chars() + [m.replace(" ", "") for m in MERGES] + ["<|end|>"]


def make_weights(c, rng):
    """Random f32 weights in GGUF naming and layout (numpy [out, in]), scaled to keep activations of order one and
    the logits at a std of about 3."""
    E, H, Hkv, D, F, V = c["E"], c["H"], c["Hkv"], c["D"], c["F"], len(TOKENS)

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    W = {"token_embd.weight": mat(V, E, 3.2), "output_norm.weight": norm(E)}
    if not c["tied"]:
        W["output.weight"] = mat(V, E, 3.2)
    for layer in range(c["L"]):
        p = f"blk.{layer}."
        W[p + "attn_norm.weight"] = norm(E)
        q, k, v = mat(H * D, E, c["qk_gain"]), mat(Hkv * D, E, c["qk_gain"]), mat(Hkv * D, E)
        if c["fused"]:
            W[p + "attn_qkv.weight"] = np.concatenate([q, k, v])
        else:
            W[p + "attn_q.weight"], W[p + "attn_k.weight"], W[p + "attn_v.weight"] = q, k, v
            if c["v_f16"]:  # as a mixed quantization stores V in more bits than Q and K: three matmuls, not one
                W[p + "attn_v.weight"] = v.astype(np.float16)
        if c["bias"]:
            for n, rows in (("q", H * D), ("k", Hkv * D), ("v", Hkv * D)):
                W[p + f"attn_{n}.bias"] = (0.3 * rng.standard_normal(rows)).astype(np.float32)
        if c["qk_norm"] == "full":
            W[p + "attn_q_norm.weight"], W[p + "attn_k_norm.weight"] = norm(H * D), norm(Hkv * D)
        elif c["qk_norm"]:
            W[p + "attn_q_norm.weight"], W[p + "attn_k_norm.weight"] = norm(D), norm(D)
        W[p + "attn_output.weight"] = mat(E, H * D)
        if c["o_bias"]:
            W[p + "attn_output.bias"] = (0.3 * rng.standard_normal(E)).astype(np.float32)
        if c["sinks"]:
            W[p + "attn_sinks.weight"] = (1.5 * rng.standard_normal(H)).astype(np.float32)
        if c["moe"]:
            W.update(moe_weights(c, rng, p, mat, norm))
            continue
        W[p + "ffn_norm.weight"] = norm(E)
        gate, up = mat(F, E), mat(F, E)
        if c["fused"]:
            W[p + "ffn_up.weight"] = np.concatenate([gate, up])
        else:
            W[p + "ffn_gate.weight"], W[p + "ffn_up.weight"] = gate, up
        W[p + "ffn_down.weight"] = mat(E, F)
        if c["gemma"]:
            W[p + "post_attention_norm.weight"], W[p + "post_ffw_norm.weight"] = norm(E), norm(E)
    if c["llama3_rope"]:
        W["rope_freqs.weight"] = llama3_factors(c["base"], D, **c["llama3_rope"])
    if c["longrope"]:
        W["rope_factors_long.weight"] = np.array(c["longrope"]["long_factor"], dtype=np.float32)
        W["rope_factors_short.weight"] = np.array(c["longrope"]["short_factor"], dtype=np.float32)
    return W


def llama3_factors(base, dim, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings):
    """Each rope pair's frequency divisor under Llama 3's rope scaling, as convert_hf_to_gguf writes rope_freqs."""
    old = original_max_position_embeddings
    low_wavelen, high_wavelen = old / low_freq_factor, old / high_freq_factor
    out = []
    for i in range(0, dim, 2):
        wavelen = 2 * math.pi * base ** (i / dim)
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def mxfp4_blocks(rng, X, rows, cols, scales):
    """Random MXFP4 blocks for a [X, rows, cols] matrix: 17 bytes per 32 values (an E8M0 scale byte drawn from
    `scales` (low, high), then 16 bytes of two E2M1 nibbles), as uint8 [X, rows, cols / 32 * 17]."""
    assert cols % 32 == 0, "MXFP4 rows are whole blocks of 32"
    b = rng.integers(0, 256, size=(X, rows, cols // 32, 17), dtype=np.uint8)
    b[..., 0] = rng.integers(scales[0], scales[1] + 1, size=(X, rows, cols // 32), dtype=np.uint8)
    return b.reshape(X, rows, -1)


def moe_weights(c, rng, p, mat, norm):
    """The FFN half of a MoE layer: its pre-FFN norm (gpt-oss's is named post_attention_norm), the router, the
    stacked experts (MXFP4 for gpt-oss, f32 otherwise) and qwen2moe's shared expert."""
    m, E = c["moe"], c["E"]
    X, Fe = m["X"], m["Fe"]
    W = {p + ("post_attention_norm.weight" if c["arch"] == "gpt-oss" else "ffn_norm.weight"): norm(E),
         p + "ffn_gate_inp.weight": mat(X, E, m["router_gain"])}

    def stack(rows, cols):
        return np.stack([mat(rows, cols) for _ in range(X)])

    if m["mxfp4"]:
        for name, (rows, cols) in (("ffn_gate_exps", (Fe, E)), ("ffn_up_exps", (Fe, E)), ("ffn_down_exps", (E, Fe))):
            W[p + name + ".weight"] = mxfp4_blocks(rng, X, rows, cols, MXFP4_SCALES[name])
    else:
        W[p + "ffn_gate_exps.weight"], W[p + "ffn_up_exps.weight"] = stack(Fe, E), stack(Fe, E)
        W[p + "ffn_down_exps.weight"] = stack(E, Fe)
    if m["biases"]:  # gpt-oss: the router's and each expert's projections
        W[p + "ffn_gate_inp.bias"] = (0.5 * rng.standard_normal(X)).astype(np.float32)
        for name, n in (("ffn_gate_exps", Fe), ("ffn_up_exps", Fe), ("ffn_down_exps", E)):
            W[p + name + ".bias"] = (0.5 * rng.standard_normal((X, n))).astype(np.float32)
    if m["Fs"]:  # qwen2moe's shared expert and its one-logit gate (1-D [E], as llama.cpp declares it)
        Fs = m["Fs"]
        W[p + "ffn_gate_inp_shexp.weight"] = mat(1, E, 2.0)[0]
        W[p + "ffn_gate_shexp.weight"], W[p + "ffn_up_shexp.weight"] = mat(Fs, E), mat(Fs, E)
        W[p + "ffn_down_shexp.weight"] = mat(E, Fs)
    return W


def write_moe_keys(w, c):
    """The expert keys convert_hf_to_gguf writes: counts, and the expert widths where the architecture reads them
    (llama and olmoe take feed_forward_length as the expert width)."""
    m = c["moe"]
    assert c["arch"] not in ("llama", "olmoe") or c["F"] == m["Fe"], "their experts' width is feed_forward_length"
    w.add_expert_count(m["X"])
    w.add_expert_used_count(m["K"])
    if c["arch"] in ("qwen3moe", "qwen2moe", "gpt-oss", "qwen35moe"):
        w.add_expert_feed_forward_length(m["Fe"])
    if m["Fs"]:
        w.add_expert_shared_feed_forward_length(m["Fs"])


def longrope_attn_factor(context, orig):
    """LongRoPE's cos/sin scale, sqrt(1 + ln(s) / ln(orig)) for the context's scale s = context / orig."""
    scale = context / orig
    return math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 else 1.0


def write_gguf(path, name, c, W):
    """Write case `c` with weights `W` as llama.cpp's converter would (keys via the writer's add_* helpers)."""
    w = gguf.GGUFWriter(path, c["arch"])
    w.add_name(name)
    w.add_context_length(CONTEXT)
    w.add_block_count(c["L"])
    w.add_embedding_length(c["E"])
    w.add_feed_forward_length(c["F"])
    w.add_head_count(c["H"])
    w.add_head_count_kv(c["Hkv"])
    if c["head_dim_keys"]:
        w.add_key_length(c["D"])
        w.add_value_length(c["D"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_rope_freq_base(c["base"])
    w.add_rope_dimension_count(c["D"])
    if c["window"]:
        w.add_sliding_window(c["window"])
    if c["attn_cap"]:
        w.add_attn_logit_softcapping(c["attn_cap"])
        w.add_final_logit_softcapping(c["final_cap"])
    if c["rope_linear"]:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(c["rope_linear"])
    if c["longrope"]:  # as convert_hf_to_gguf writes Phi-3's: the original context and the attention factor
        orig = c["longrope"]["original_max_position_embeddings"]
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_rope_scaling_attn_factors(longrope_attn_factor(CONTEXT, orig))
    if c["yarn"]:  # as convert_hf_to_gguf writes Qwen2's rope_scaling
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(c["yarn"]["factor"])
        w.add_rope_scaling_orig_ctx_len(c["yarn"]["original_max_position_embeddings"])
    if c["moe"]:
        write_moe_keys(w, c)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(c["pre"])
    w.add_token_list(TOKENS)
    w.add_token_types([gguf.TokenType.NORMAL] * (len(TOKENS) - 1) + [gguf.TokenType.CONTROL])
    w.add_token_merges(MERGES)
    w.add_eos_token_id(len(TOKENS) - 1)
    w.add_add_bos_token(False)
    for n, a in W.items():  # uint8: MXFP4 blocks
        w.add_tensor(n, a, raw_dtype=gguf.GGMLQuantizationType.MXFP4 if a.dtype == np.uint8 else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def load(path):
    """Hyper-parameters and float64 weights of a GGUF file written by write_gguf."""
    r = gguf.GGUFReader(path)
    meta = {f.name: f.contents() for f in r.fields.values()}
    arch = meta["general.architecture"]
    k = lambda key, default=None: meta.get(f"{arch}.{key}", default)  # noqa: E731
    E, H = k("embedding_length"), k("attention.head_count")
    hp = dict(arch=arch, E=E, H=H, Hkv=k("attention.head_count_kv"), D=k("attention.key_length", E // H),
              L=k("block_count"), eps=k("attention.layer_norm_rms_epsilon"), base=k("rope.freq_base"),
              window=k("attention.sliding_window"), attn_cap=k("attn_logit_softcapping"),
              final_cap=k("final_logit_softcapping"), gemma=arch.startswith("gemma"), neox=arch != "llama",
              factor=k("rope.scaling.factor", 1.0) if k("rope.scaling.type") == "linear" else 1.0,
              yarn=(k("rope.scaling.factor"), k("rope.scaling.original_context_length"))
              if k("rope.scaling.type") == "yarn" else None,
              orig=k("rope.scaling.original_context_length", k("context_length")),
              attn_factor=k("rope.scaling.attn_factor", 1.0), F=k("feed_forward_length"),
              X=k("expert_count", 0), K=k("expert_used_count", 0), V=len(meta["tokenizer.ggml.tokens"]))
    assert k("rope.dimension_count") == hp["D"], "the reference rotates whole heads"
    floats = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
    return hp, {t.name: np.array(t.data if t.tensor_type in floats else gguf.quants.dequantize(t.data, t.tensor_type),
                                 dtype=np.float64) for t in r.tensors}


def layer_attention(hp, layer):
    """(sliding window or None, rope base, position scale) of `layer`, as llama.cpp's hparams set them."""
    window, base, scale = hp["window"], hp["base"], 1.0 / hp["factor"]
    if hp["arch"] in ("gemma2", "gpt-oss"):  # swa pattern 2: even layers sliding
        return (window if layer % 2 == 0 else None), base, scale
    if hp["arch"] == "gemma3":  # swa pattern 6; rope_freq_base_train_swa = 10000, rope_freq_scale_train_swa = 1
        return (window, 10000.0, 1.0) if (layer + 1) % 6 else (None, base, scale)
    return window, base, scale


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def yarn_inv_freq(n, base, factor, orig, beta_fast=32.0, beta_slow=1.0):
    """YaRN's frequencies and cos/sin scale, from the paper as transformers' `_compute_yarn_parameters` writes it:
    pairs turning more than beta_fast times over the original context keep their frequency, those turning fewer
    than beta_slow times are divided by the factor, a linear ramp between (correction range floored and ceiled)."""
    inv = base ** (-np.arange(0, n, 2) / n)
    corr = lambda rot: n * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))  # noqa: E731
    low, high = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), n - 1)
    ramp = np.clip((np.arange(n // 2) - low) / max(high - low, 0.001), 0, 1)
    keep = 1 - ramp
    return inv / factor * (1 - keep) + inv * keep, 0.1 * math.log(factor) + 1.0


def rope(x, pos, base, neox, factors=None, yarn=None, attn_factor=1.0):
    """Rotate x [T, heads, n] at positions pos [T] (NEOX halves or NORMAL adjacent pairs), pair i's angle divided by
    factors[i] where there are factors; YaRN's frequencies and scale where yarn is (factor, original context); cos
    and sin scaled by attn_factor."""
    n = x.shape[-1]
    inv, mscale = (base ** (-np.arange(0, n, 2) / n), 1.0) if yarn is None else yarn_inv_freq(n, base, *yarn)
    mscale *= attn_factor
    angle = pos[:, None, None] * inv / (1.0 if factors is None else factors)
    cos, sin = np.cos(angle) * mscale, np.sin(angle) * mscale
    x0, x1 = (x[..., : n // 2], x[..., n // 2:]) if neox else (x[..., 0::2], x[..., 1::2])
    r0, r1 = x0 * cos - x1 * sin, x0 * sin + x1 * cos
    return np.concatenate([r0, r1], axis=-1) if neox else np.stack([r0, r1], axis=-1).reshape(x.shape)


def attention(hp, W, layer, x):
    T, H, Hkv, D, p = len(x), hp["H"], hp["Hkv"], hp["D"], f"blk.{layer}."
    if p + "attn_qkv.weight" in W:
        q, k, v = np.split(x @ W[p + "attn_qkv.weight"].T, [H * D, (H + Hkv) * D], axis=1)
    else:
        q, k, v = (x @ W[p + f"attn_{n}.weight"].T + W.get(p + f"attn_{n}.bias", 0.0) for n in "qkv")
    qn, kn = W.get(p + "attn_q_norm.weight"), W.get(p + "attn_k_norm.weight")
    if qn is not None and len(qn) != D:  # olmoe: each whole projection, before the split into heads
        q, k = rms_norm(q, qn, hp["eps"]), rms_norm(k, kn, hp["eps"])
    q, k, v = q.reshape(T, H, D), k.reshape(T, Hkv, D), v.reshape(T, Hkv, D)
    if qn is not None and len(qn) == D:
        q, k = rms_norm(q, qn, hp["eps"]), rms_norm(k, kn, hp["eps"])
    window, base, scale = layer_attention(hp, layer)
    pos = np.arange(T, dtype=np.float64)
    f = W.get("rope_freqs.weight")
    if "rope_factors_long.weight" in W:  # LongRoPE: llama.cpp takes the long factors for a context beyond the original
        f = W["rope_factors_long.weight" if CONTEXT > hp["orig"] else "rope_factors_short.weight"]
    q, k = (rope(t, pos * scale, base, hp["neox"], f, hp["yarn"], hp["attn_factor"]) for t in (q, k))
    k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
    s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(D)
    if hp["attn_cap"]:
        s = hp["attn_cap"] * np.tanh(s / hp["attn_cap"])
    dist = pos[:, None] - pos[None, :]
    s = np.where((dist >= 0) & (dist < (window or math.inf)), s, -np.inf)
    if p + "attn_sinks.weight" in W:  # a last column of each head's sink logit (not scaled), given no value
        s = np.concatenate([s, np.broadcast_to(W[p + "attn_sinks.weight"][:, None, None], (H, T, 1))], axis=-1)
    prob = np.exp(s - s.max(axis=-1, keepdims=True))
    prob = (prob / prob.sum(axis=-1, keepdims=True))[..., :T]
    out = np.einsum("hqk,khd->qhd", prob, v).reshape(T, H * D) @ W[p + "attn_output.weight"].T
    return out + W[p + "attn_output.bias"] if p + "attn_output.bias" in W else out


def mlp(hp, W, layer, x):
    p = f"blk.{layer}."
    if p + "ffn_gate.weight" in W:
        gate, up = x @ W[p + "ffn_gate.weight"].T, x @ W[p + "ffn_up.weight"].T
    else:
        gate, up = np.split(x @ W[p + "ffn_up.weight"].T, 2, axis=1)
    if hp["gemma"]:
        act = 0.5 * gate * (1 + np.tanh(math.sqrt(2 / math.pi) * (gate + 0.044715 * gate ** 3)))
    else:
        act = gate / (1 + np.exp(-gate))
    return (act * up) @ W[p + "ffn_down.weight"].T


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def route(hp, W, p, x, gaps=None):
    """The k experts each token [T, E] selects and their weights, both [T, k]. Where `gaps` is a list, appends the
    smallest margin between the k-th and the (k+1)-th router logit over the tokens, in units of each token's logit
    standard deviation (a small margin lets f32 rounding pick another expert)."""
    norm_w, gating = GATING[hp["arch"]]
    logits = x @ W[p + "ffn_gate_inp.weight"].T + W.get(p + "ffn_gate_inp.bias", 0.0)
    probs = logits if gating == "softmax_weight" else softmax(logits)
    sel = np.argsort(-probs, axis=-1, kind="stable")[:, : hp["K"]]
    w = np.take_along_axis(probs, sel, axis=-1)
    if gating == "softmax_weight":
        w = softmax(w)
    if norm_w:
        w = w / np.maximum(w.sum(axis=-1, keepdims=True), MIN_WEIGHT_SUM)
    if gaps is not None and hp["K"] < hp["X"]:
        s = -np.sort(-logits, axis=-1)
        gaps.append(float(((s[:, hp["K"] - 1] - s[:, hp["K"]]) / logits.std(axis=-1)).min()))
    return sel, w


def expert_act(hp, gate, up):
    if hp["arch"] == "gpt-oss":  # ggml's swiglu_oai: gate clamped from above only, up on both sides
        g, u = np.minimum(gate, OAI_LIMIT), np.clip(up, -OAI_LIMIT, OAI_LIMIT)
        return g / (1 + np.exp(-OAI_ALPHA * g)) * (u + 1)
    return gate / (1 + np.exp(-gate)) * up


def shared_expert(W, p, x):
    """qwen2moe's shared expert times sigmoid of its gate's logit (llama.cpp: silu(g) / g, the same but at 0)."""
    g = x @ W[p + "ffn_gate_inp_shexp.weight"]
    a = x @ W[p + "ffn_gate_shexp.weight"].T
    h = (a / (1 + np.exp(-a)) * (x @ W[p + "ffn_up_shexp.weight"].T)) @ W[p + "ffn_down_shexp.weight"].T
    return h / (1 + np.exp(-g))[:, None]


def moe_ffn(hp, W, layer, x, gaps=None):
    """build_moe_ffn on normed inputs x [T, E], vectorized over tokens and selected experts."""
    p = f"blk.{layer}."
    sel, w = route(hp, W, p, x, gaps)

    def proj(name, v):  # expert sel[t, k]'s matrix times v[t, k], plus its bias row
        y = np.einsum("tkoi,tki->tko", W[p + name + ".weight"][sel], v)
        return y + W[p + name + ".bias"][sel] if p + name + ".bias" in W else y

    xk = np.repeat(x[:, None, :], hp["K"], axis=1)
    act = expert_act(hp, proj("ffn_gate_exps", xk), proj("ffn_up_exps", xk))
    out = np.einsum("tk,tke->te", w, proj("ffn_down_exps", act))
    if p + "ffn_gate_inp_shexp.weight" in W:
        out = out + shared_expert(W, p, x)
    return out


def moe_naive(hp, W, layer, x):
    """The same FFN one token and one selected expert at a time, in plain loops (the self-check of moe_ffn)."""
    p, (norm_w, gating) = f"blk.{layer}.", GATING[hp["arch"]]
    bias = lambda name, e: W[p + name + ".bias"][e] if p + name + ".bias" in W else 0.0  # noqa: E731
    out = np.zeros_like(x)
    for t in range(len(x)):
        logits = [float(np.dot(W[p + "ffn_gate_inp.weight"][e], x[t]) + bias("ffn_gate_inp", e))
                  for e in range(hp["X"])]
        if gating == "softmax_weight":  # chosen by the raw logits, a softmax over the chosen
            probs = logits
        else:
            z = [math.exp(v - max(logits)) for v in logits]
            probs = [v / sum(z) for v in z]
        chosen = sorted(range(hp["X"]), key=lambda e: (-probs[e], e))[: hp["K"]]
        ws = [probs[e] for e in chosen]
        if gating == "softmax_weight":
            ws = [math.exp(v - max(ws)) for v in ws]
            ws = [v / sum(ws) for v in ws]
        if norm_w:
            ws = [v / max(sum(ws), MIN_WEIGHT_SUM) for v in ws]
        for e, wt in zip(chosen, ws):
            gate = W[p + "ffn_gate_exps.weight"][e] @ x[t] + bias("ffn_gate_exps", e)
            up = W[p + "ffn_up_exps.weight"][e] @ x[t] + bias("ffn_up_exps", e)
            y = W[p + "ffn_down_exps.weight"][e] @ expert_act(hp, gate, up) + bias("ffn_down_exps", e)
            out[t] += wt * y
        if p + "ffn_gate_inp_shexp.weight" in W:
            out[t] += shared_expert(W, p, x[t: t + 1])[0]
    return out


def moe_self_check(hp, W, x):
    """moe_ffn against moe_naive on every layer for inputs x [T, E]; returns the largest difference."""
    worst = 0.0
    for layer in range(hp["L"]):
        fast, slow = moe_ffn(hp, W, layer, x), moe_naive(hp, W, layer, x)
        worst = max(worst, float(np.abs(fast - slow).max() / max(1.0, np.abs(slow).max())))
    assert worst <= 1e-12, f"vectorized MoE differs from the per-token loop by {worst:.2e}"
    return worst


def forward(hp, W, ids, gaps=None):
    """Logits [T, V] for every position of `ids`, one causal pass; each MoE layer appends its smallest router
    margin to `gaps` where it is a list."""
    eps = hp["eps"]
    x = W["token_embd.weight"][ids] * (math.sqrt(hp["E"]) if hp["gemma"] else 1.0)
    for layer in range(hp["L"]):
        p = f"blk.{layer}."
        a = attention(hp, W, layer, rms_norm(x, W[p + "attn_norm.weight"], eps))
        if hp["gemma"]:
            a = rms_norm(a, W[p + "post_attention_norm.weight"], eps)
        x = x + a
        h = rms_norm(x, W[p + ("post_attention_norm" if hp["arch"] == "gpt-oss" else "ffn_norm") + ".weight"], eps)
        m = moe_ffn(hp, W, layer, h, gaps) if p + "ffn_gate_inp.weight" in W else mlp(hp, W, layer, h)
        if hp["gemma"]:
            m = rms_norm(m, W[p + "post_ffw_norm.weight"], eps)
        x = x + m
    logits = rms_norm(x, W["output_norm.weight"], eps) @ W.get("output.weight", W["token_embd.weight"]).T
    if hp["final_cap"]:
        logits = hp["final_cap"] * np.tanh(logits / hp["final_cap"])
    return logits


HF_CLASSES = {"llama": ("llama", "LlamaForCausalLM"), "llama3": ("llama", "LlamaForCausalLM"),
              "qwen2_yarn": ("qwen2", "Qwen2ForCausalLM"), "mistral": ("mistral", "MistralForCausalLM"),
              "qwen2": ("qwen2", "Qwen2ForCausalLM"), "qwen3": ("qwen3", "Qwen3ForCausalLM"),
              "phi3": ("phi3", "Phi3ForCausalLM"), "phi3_longrope": ("phi3", "Phi3ForCausalLM"),
              "gemma2": ("gemma2", "Gemma2ForCausalLM"),
              "gemma3": ("gemma3_text", "Gemma3ForCausalLM"),
              "qwen3moe": ("qwen3_moe", "Qwen3MoeForCausalLM"), "qwen2moe": ("qwen2_moe", "Qwen2MoeForCausalLM"),
              "mixtral": ("mixtral", "MixtralForCausalLM"), "olmoe": ("olmoe", "OlmoeForCausalLM"),
              "gptoss": ("gpt_oss", "GptOssForCausalLM")}


def hf_state_dict(hp, W):
    """W renamed to HF's names, Q/K rows un-permuted for NORMAL rope and Gemma's (1 + w) norms back to w."""
    import torch

    layer_names = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                   "attn_v": "self_attn.v_proj", "attn_qkv": "self_attn.qkv_proj", "attn_output": "self_attn.o_proj",
                   "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
                   "ffn_norm": "pre_feedforward_layernorm" if hp["gemma"] else "post_attention_layernorm",
                   "post_attention_norm": "post_attention_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
                   "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj" if "blk.0.ffn_gate.weight" in W
                   else "mlp.gate_up_proj", "ffn_down": "mlp.down_proj"}
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
    moe, done = hf_moe_tensors(hp, W)
    sd = {n: torch.from_numpy(a) for n, a in moe.items()}
    for name, a in W.items():
        if name.startswith("rope_f") or name in done:  # HF computes or holds the factors in rope_parameters
            continue
        m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", name)
        if m and not hp["neox"] and m[2] in ("attn_q", "attn_k"):  # inverse of convert_hf_to_gguf's permute
            heads = hp["H"] if m[2] == "attn_q" else hp["Hkv"]
            a = a.reshape(heads, a.shape[0] // heads // 2, 2, -1).swapaxes(1, 2).reshape(a.shape)
        if hp["gemma"] and name.endswith("norm.weight"):
            a = a - 1.0
        sd[f"model.layers.{m[1]}.{layer_names[m[2]]}.{m[3]}" if m else top[name]] = torch.from_numpy(a)
    return sd


def hf_moe_config(case, hp):
    """The MoE entries of the HF config (transformers 5, whose experts are fused 3-D parameters)."""
    m = case["moe"]
    # experts as a plain loop: the default grouped_mm kernel refuses float64 on the CPU
    cfg = dict(num_experts_per_tok=m["K"], output_router_logits=False, experts_implementation="eager")
    if hp["arch"] in ("llama", "gpt-oss"):
        cfg.update(num_local_experts=m["X"], intermediate_size=m["Fe"])
    else:
        cfg.update(num_experts=m["X"], moe_intermediate_size=m["Fe"], intermediate_size=m["Fe"],
                   norm_topk_prob=GATING[hp["arch"]][0], decoder_sparse_step=1, mlp_only_layers=[])
    if m["Fs"]:
        cfg["shared_expert_intermediate_size"] = m["Fs"]
    if hp["arch"] == "gpt-oss":  # llama.cpp floors and ceils the YaRN ramp's bounds: HF's truncate
        y = case["yarn"]
        cfg.update(attention_bias=True, swiglu_limit=OAI_LIMIT, sliding_window=hp["window"],
                   layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(hp["L"])],
                   max_position_embeddings=int(y["factor"] * y["original_max_position_embeddings"]),
                   rope_parameters={"rope_type": "yarn", "rope_theta": hp["base"], "beta_fast": 32.0,
                                    "beta_slow": 1.0, "truncate": True, **y})
    return cfg


def hf_moe_tensors(hp, W):
    """The MoE tensors (and gpt-oss's sinks) under HF's names: {HF name: float64 array}, and the GGUF names used."""
    out, used = {}, set()
    for layer in range(hp["L"]):
        p, q = f"blk.{layer}.", f"model.layers.{layer}."
        if p + "ffn_gate_inp.weight" not in W:
            continue
        names = [p + f"ffn_{n}_exps.{t}" for n in ("gate", "up", "down") for t in ("weight", "bias")]
        names += [p + n for n in ("ffn_gate_inp.weight", "ffn_gate_inp.bias", "attn_sinks.weight")]
        used.update(n for n in names if n in W)
        gate, up, down = (W[p + f"ffn_{n}_exps.weight"] for n in ("gate", "up", "down"))
        if hp["arch"] == "gpt-oss":  # gate and up interleaved along the last axis, x @ W (transposed)
            gu = np.empty((gate.shape[0], gate.shape[2], 2 * gate.shape[1]))
            gu[..., 0::2], gu[..., 1::2] = gate.transpose(0, 2, 1), up.transpose(0, 2, 1)
            gub = np.empty((gate.shape[0], 2 * gate.shape[1]))
            gub[:, 0::2], gub[:, 1::2] = W[p + "ffn_gate_exps.bias"], W[p + "ffn_up_exps.bias"]
            out.update({q + "mlp.experts.gate_up_proj": gu, q + "mlp.experts.gate_up_proj_bias": gub,
                        q + "mlp.experts.down_proj": down.transpose(0, 2, 1),
                        q + "mlp.experts.down_proj_bias": W[p + "ffn_down_exps.bias"],
                        q + "mlp.router.weight": W[p + "ffn_gate_inp.weight"],
                        q + "mlp.router.bias": W[p + "ffn_gate_inp.bias"],
                        q + "self_attn.sinks": W[p + "attn_sinks.weight"]})
        else:  # gate rows, then up rows
            out.update({q + "mlp.experts.gate_up_proj": np.concatenate([gate, up], axis=1),
                        q + "mlp.experts.down_proj": down, q + "mlp.gate.weight": W[p + "ffn_gate_inp.weight"]})
        if p + "ffn_gate_inp_shexp.weight" in W:
            for n in ("gate", "up", "down"):
                out[q + f"mlp.shared_expert.{n}_proj.weight"] = W[p + f"ffn_{n}_shexp.weight"]
                used.add(p + f"ffn_{n}_shexp.weight")
            out[q + "mlp.shared_expert_gate.weight"] = W[p + "ffn_gate_inp_shexp.weight"][None, :]
            used.add(p + "ffn_gate_inp_shexp.weight")
    return out, used


def check_hf(name, hp, W, prompts):
    """Largest |reference - HF| / max |HF| over all prompts and positions."""
    import torch
    import transformers

    model_type, cls = HF_CLASSES[name]
    cfg = dict(vocab_size=hp["V"], hidden_size=hp["E"], intermediate_size=hp["F"],
               num_hidden_layers=hp["L"], num_attention_heads=hp["H"], num_key_value_heads=hp["Hkv"],
               head_dim=hp["D"], rms_norm_eps=hp["eps"], max_position_embeddings=CONTEXT,
               tie_word_embeddings="output.weight" not in W, pad_token_id=0, bos_token_id=None,
               eos_token_id=hp["V"] - 1, rope_parameters={"rope_type": "default", "rope_theta": hp["base"]},
               sliding_window=hp["window"], attn_implementation="eager")
    if hp["gemma"]:
        cfg.update(query_pre_attn_scalar=hp["D"], hidden_activation="gelu_pytorch_tanh",
                   attn_logit_softcapping=hp["attn_cap"], final_logit_softcapping=hp["final_cap"])
    if name == "llama3":
        cfg["rope_parameters"] = {"rope_type": "llama3", "rope_theta": hp["base"], **CASES[name]["llama3_rope"]}
    if name == "phi3_longrope":  # transformers picks the factors by prompt length: its short ones are set to the
        lr = CASES[name]["longrope"]  # long ones, which llama.cpp (and webtensor) take at this context
        cfg["rope_parameters"] = {"rope_type": "longrope", "rope_theta": hp["base"], "long_factor": lr["long_factor"],
                                  "short_factor": lr["long_factor"],
                                  "original_max_position_embeddings": lr["original_max_position_embeddings"]}
        # also at the top level, as Phi-3's config.json has it: transformers 5's standardize_rope_params overwrites
        # the rope_parameters entry with Phi3Config's own (default 4096), which makes the attention factor 1
        cfg["original_max_position_embeddings"] = lr["original_max_position_embeddings"]
    if name == "qwen2_yarn":  # max_position_embeddings = factor x original, as transformers' YaRN expects
        y = CASES[name]["yarn"]
        cfg.update(max_position_embeddings=int(y["factor"] * y["original_max_position_embeddings"]),
                   rope_parameters={"rope_type": "yarn", "rope_theta": hp["base"], **y})
    if CASES[name].get("moe"):
        cfg.update(hf_moe_config(case_config(name), hp))
    if model_type == "gemma3_text":
        cfg["rope_parameters"] = {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": hp["factor"], "rope_theta": hp["base"]}}
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    model = getattr(transformers, cls)(config).to(torch.float64).eval()
    res = model.load_state_dict(hf_state_dict(hp, W), strict=False)
    assert not res.unexpected_keys and set(res.missing_keys) <= {"lm_head.weight"}, res
    worst = 0.0
    with torch.no_grad():
        for pr in prompts:
            ref = np.array(pr["logits"])
            hf = model(torch.tensor([pr["ids"]])).logits[0].numpy()
            worst = max(worst, float(np.abs(ref - hf).max() / np.abs(hf).max()))
    return worst


def case_config(name):
    """CASES[name] over BASE (and its moe over MOE_BASE)."""
    c = {**BASE, **CASES[name]}
    if c["moe"]:
        c["moe"] = {**MOE_BASE, **c["moe"]}
    return c


def make_prompts(hp, W, rng):
    """The three prompts and their reference logits. A prompt is drawn again while some token of a MoE model has
    its k-th and (k+1)-th router logits closer than MIN_ROUTER_GAP standard deviations (the dense models take the
    first draw)."""
    prompts = []
    for n in PROMPT_LENGTHS:
        for _ in range(1000):
            ids, gaps = rng.integers(0, hp["V"] - 1, size=n).tolist(), []  # never the control token, the last id
            logits = forward(hp, W, np.array(ids), gaps)
            if min(gaps, default=math.inf) >= MIN_ROUTER_GAP:
                break
        else:
            raise RuntimeError(f"no prompt of {n} tokens keeps every router margin above {MIN_ROUTER_GAP}")
        prompts.append({"ids": ids, "logits": logits.tolist()})
    return prompts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--check-hf", action="store_true", help="compare each reference with transformers (torch)")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for seed, name in enumerate(CASES):
        c = case_config(name)
        rng = np.random.default_rng(1000 + seed)
        path = os.path.join(args.out_dir, f"{name}.gguf")
        write_gguf(path, name, c, make_weights(c, rng))
        hp, W = load(path)
        prompts = make_prompts(hp, W, rng)
        with open(os.path.join(args.out_dir, f"{name}.json"), "w") as f:
            json.dump({"arch": hp["arch"], "case": name, "vocab": hp["V"], "prompts": prompts}, f)
        std = np.std(np.array(prompts[-1]["logits"]))
        line = f"{name:8} arch {hp['arch']:7} V {hp['V']} layers {hp['L']} logits std {std:.2f}"
        if c["moe"]:  # the vectorized MoE reference against a loop over tokens and experts, on the longest prompt
            x = rms_norm(W["token_embd.weight"][prompts[-1]["ids"]], 1.0, hp["eps"])
            line += f"  experts {hp['X']} used {hp['K']}, MoE vs per-token loop {moe_self_check(hp, W, x):.1e}"
        if args.check_hf:
            line += f"  HF max rel diff {check_hf(name, hp, W, prompts):.2e}"
        print(line)
    # the hybrid architectures (gated delta-net layers), their own reference in hybrid_models.py
    import hybrid_models
    for line in hybrid_models.write_cases(args.out_dir, len(CASES), args.check_hf):
        print(line)


if __name__ == "__main__":
    main()
