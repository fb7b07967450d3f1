#!/usr/bin/env python3
"""Small random GGUF models of several decoder architectures, each with an independent float64 numpy reference.

    python3 scripts/arch_models.py OUT_DIR [--check-hf]

For every case NAME in CASES this writes OUT_DIR/NAME.gguf (written by `gguf`, llama.cpp's own writer, in the layout
llama.cpp's converters produce) and OUT_DIR/NAME.json:

    {"arch": ..., "case": NAME, "vocab": V, "prompts": [{"ids": [...], "logits": [[V floats] per position]}, ...]}

with three prompts of 1, 7 and 13 random token ids; the logits at position p are the model's output after reading
ids[0..=p]. The reference reads the GGUF file back (metadata and f32 weights) and runs in float64; each case has its
own fixed seed, so the output is deterministic.

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

--check-hf also runs each model through transformers (torch, float64, eager attention) with the same weights,
converted back to HF's layout, and prints the largest difference of the logits relative to their largest magnitude.
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
            head_dim_keys=False, qk_gain=1.0, pre="default", llama3_rope=None, yarn=None, longrope=None, v_f16=False)
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
}
CONTEXT = 64
PROMPT_LENGTHS = (1, 7, 13)
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
        if c["qk_norm"]:
            W[p + "attn_q_norm.weight"], W[p + "attn_k_norm.weight"] = norm(D), norm(D)
        W[p + "attn_output.weight"] = mat(E, H * D)
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
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(c["pre"])
    w.add_token_list(TOKENS)
    w.add_token_types([gguf.TokenType.NORMAL] * (len(TOKENS) - 1) + [gguf.TokenType.CONTROL])
    w.add_token_merges(MERGES)
    w.add_eos_token_id(len(TOKENS) - 1)
    w.add_add_bos_token(False)
    for n, a in W.items():
        w.add_tensor(n, a)
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
              attn_factor=k("rope.scaling.attn_factor", 1.0),
              V=len(meta["tokenizer.ggml.tokens"]))
    assert k("rope.dimension_count") == hp["D"], "the reference rotates whole heads"
    return hp, {t.name: np.array(t.data, dtype=np.float64) for t in r.tensors}


def layer_attention(hp, layer):
    """(sliding window or None, rope base, position scale) of `layer`, as llama.cpp's hparams set them."""
    window, base, scale = hp["window"], hp["base"], 1.0 / hp["factor"]
    if hp["arch"] == "gemma2":  # swa pattern 2: even layers sliding
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
    q, k, v = q.reshape(T, H, D), k.reshape(T, Hkv, D), v.reshape(T, Hkv, D)
    if p + "attn_q_norm.weight" in W:
        q = rms_norm(q, W[p + "attn_q_norm.weight"], hp["eps"])
        k = rms_norm(k, W[p + "attn_k_norm.weight"], hp["eps"])
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
    prob = np.exp(s - s.max(axis=-1, keepdims=True))
    prob /= prob.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", prob, v).reshape(T, H * D) @ W[p + "attn_output.weight"].T


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


def forward(hp, W, ids):
    """Logits [T, V] for every position of `ids`, one causal pass."""
    eps = hp["eps"]
    x = W["token_embd.weight"][ids] * (math.sqrt(hp["E"]) if hp["gemma"] else 1.0)
    for layer in range(hp["L"]):
        p = f"blk.{layer}."
        a = attention(hp, W, layer, rms_norm(x, W[p + "attn_norm.weight"], eps))
        if hp["gemma"]:
            a = rms_norm(a, W[p + "post_attention_norm.weight"], eps)
        x = x + a
        m = mlp(hp, W, layer, rms_norm(x, W[p + "ffn_norm.weight"], eps))
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
              "gemma3": ("gemma3_text", "Gemma3ForCausalLM")}


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
    sd = {}
    for name, a in W.items():
        if name.startswith("rope_f"):  # HF computes or holds the factors in rope_parameters
            continue
        m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", name)
        if m and not hp["neox"] and m[2] in ("attn_q", "attn_k"):  # inverse of convert_hf_to_gguf's permute
            heads = hp["H"] if m[2] == "attn_q" else hp["Hkv"]
            a = a.reshape(heads, a.shape[0] // heads // 2, 2, -1).swapaxes(1, 2).reshape(a.shape)
        if hp["gemma"] and name.endswith("norm.weight"):
            a = a - 1.0
        sd[f"model.layers.{m[1]}.{layer_names[m[2]]}.{m[3]}" if m else top[name]] = torch.from_numpy(a)
    return sd


def check_hf(name, hp, W, prompts):
    """Largest |reference - HF| / max |HF| over all prompts and positions."""
    import torch
    import transformers

    model_type, cls = HF_CLASSES[name]
    cfg = dict(vocab_size=hp["V"], hidden_size=hp["E"], intermediate_size=W["blk.0.ffn_down.weight"].shape[1],
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
    if name == "qwen2_yarn":  # max_position_embeddings = factor x original, as transformers' YaRN expects
        y = CASES[name]["yarn"]
        cfg.update(max_position_embeddings=int(y["factor"] * y["original_max_position_embeddings"]),
                   rope_parameters={"rope_type": "yarn", "rope_theta": hp["base"], **y})
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--check-hf", action="store_true", help="compare each reference with transformers (torch)")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for seed, (name, case) in enumerate(CASES.items()):
        c = {**BASE, **case}
        rng = np.random.default_rng(1000 + seed)
        path = os.path.join(args.out_dir, f"{name}.gguf")
        write_gguf(path, name, c, make_weights(c, rng))
        hp, W = load(path)
        prompts = []
        for n in PROMPT_LENGTHS:
            ids = rng.integers(0, hp["V"] - 1, size=n).tolist()  # never the control token, the last id
            prompts.append({"ids": ids, "logits": forward(hp, W, np.array(ids)).tolist()})
        with open(os.path.join(args.out_dir, f"{name}.json"), "w") as f:
            json.dump({"arch": hp["arch"], "case": name, "vocab": hp["V"], "prompts": prompts}, f)
        std = np.std(np.array(prompts[-1]["logits"]))
        line = f"{name:8} arch {hp['arch']:7} V {hp['V']} layers {hp['L']} logits std {std:.2f}"
        if args.check_hf:
            line += f"  HF max rel diff {check_hf(name, hp, W, prompts):.2e}"
        print(line)


if __name__ == "__main__":
    main()
