"""Small random-weight GGUF files of the hybrid architectures (gated delta-net layers beside gated full attention:
Qwen3.5 dense `qwen35`, Qwen3-Next `qwen3next` with its mixture of experts and grouped heads) and their float64
numpy forward passes, for tests/architectures.rs. Called by arch_models.py, whose tokenizer, file layout and
prompt logic these cases share.

The reference is written from transformers' `modeling_qwen3_next.py` / `modeling_qwen3_5.py` and llama.cpp's
`delta-net-base.cpp` (the converter's conventions: ssm_a = -exp(A_log), the 1 + w of the RMS norms folded into
the weights, Qwen3.5's value heads tiled, Qwen3-Next's grouped with β and the decay's logits in one ssm_ba):
each layer's mixer is recomputed from the start of the prompt, the delta rule token by token in float64.
"""
import math

import numpy as np
import gguf

import arch_models as am

# a 4-layer stack, full attention every 2nd layer (layers 1 and 3), the rest gated delta-net layers; attention
# heads of 16 with rope over the first 8 dims; delta-net heads of 16, 2 key heads, 4 value heads, a 4-tap conv
HYBRID = dict(E=64, H=4, Hkv=2, D=16, rope=8, F=96, L=4, interval=2, Hk=2, Hv=4, S=16, K=4, eps=1e-6, base=1e6)
CASES = {
    "qwen35": dict(arch="qwen35", grouped=False, moe=None),
    "qwen3next": dict(arch="qwen3next", grouped=True, moe=dict(X=6, K=2, Fe=32, Fs=48, router_gain=2.0)),
    # Qwen3.5 MoE: tiled heads, and its experts' gate and up in one ffn_gate_up_exps (each expert's gate rows first)
    "qwen35moe": dict(arch="qwen35moe", grouped=False, moe=dict(X=6, K=2, Fe=32, Fs=48, router_gain=2.0, fused=True)),
}


def config(name):
    return {**HYBRID, **CASES[name]}


def make_weights(c, rng):
    E, H, Hkv, D, F, V = c["E"], c["H"], c["Hkv"], c["D"], c["F"], len(am.TOKENS)
    Hk, Hv, S, K = c["Hk"], c["Hv"], c["S"], c["K"]

    def mat(rows, cols, gain=1.0):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    W = {"token_embd.weight": mat(V, E, 3.2), "output_norm.weight": norm(E), "output.weight": mat(V, E, 3.2)}
    for layer in range(c["L"]):
        p = f"blk.{layer}."
        W[p + "attn_norm.weight"], W[p + "post_attention_norm.weight"] = norm(E), norm(E)
        if (layer + 1) % c["interval"] == 0:  # gated full attention: each head's queries, then its gate logits
            W[p + "attn_q.weight"] = mat(2 * H * D, E)
            W[p + "attn_k.weight"], W[p + "attn_v.weight"] = mat(Hkv * D, E), mat(Hkv * D, E)
            W[p + "attn_q_norm.weight"], W[p + "attn_k_norm.weight"] = norm(D), norm(D)
            W[p + "attn_output.weight"] = mat(E, H * D)
        else:
            C = (2 * Hk + Hv) * S
            W[p + "attn_qkv.weight"], W[p + "attn_gate.weight"] = mat(C, E), mat(Hv * S, E)
            if c["grouped"]:
                W[p + "ssm_ba.weight"] = mat(2 * Hv, E, 2.0)
            else:
                W[p + "ssm_beta.weight"], W[p + "ssm_alpha.weight"] = mat(Hv, E, 2.0), mat(Hv, E, 2.0)
            W[p + "ssm_conv1d.weight"] = (rng.standard_normal((C, K)) * 0.5).astype(np.float32)
            W[p + "ssm_dt.bias"] = (0.5 * rng.standard_normal(Hv)).astype(np.float32)
            W[p + "ssm_a"] = (-np.exp(rng.uniform(-1.5, 0.5, Hv))).astype(np.float32)
            W[p + "ssm_norm.weight"] = norm(S)
            W[p + "ssm_out.weight"] = mat(E, Hv * S)
        if c["moe"]:
            m = {**am.MOE_BASE, **c["moe"]}
            moe = am.moe_weights({"arch": c["arch"], "E": E, "moe": m}, rng, p, mat, norm)
            moe.pop(p + "ffn_norm.weight")
            if m.get("fused"):
                gate, up = moe.pop(p + "ffn_gate_exps.weight"), moe.pop(p + "ffn_up_exps.weight")
                moe[p + "ffn_gate_up_exps.weight"] = np.concatenate([gate, up], axis=1)
            W.update(moe)
        else:
            W[p + "ffn_gate.weight"], W[p + "ffn_up.weight"] = mat(F, E), mat(F, E)
            W[p + "ffn_down.weight"] = mat(E, F)
    return W


def write_gguf(path, name, c, W):
    w = gguf.GGUFWriter(path, c["arch"])
    w.add_name(name)
    w.add_context_length(am.CONTEXT)
    w.add_block_count(c["L"])
    w.add_embedding_length(c["E"])
    w.add_feed_forward_length(c["F"])
    w.add_head_count(c["H"])
    w.add_head_count_kv(c["Hkv"])
    w.add_key_length(c["D"])
    w.add_value_length(c["D"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_rope_freq_base(c["base"])
    w.add_rope_dimension_count(c["rope"])
    if c["arch"] == "qwen35":  # the sections of its multimodal rope, all on the token's position for text
        w.add_array(f"{c['arch']}.rope.dimension_sections", [2, 1, 1, 0])
    w.add_ssm_conv_kernel(c["K"])
    w.add_ssm_inner_size(c["Hv"] * c["S"])
    w.add_ssm_state_size(c["S"])
    w.add_ssm_time_step_rank(c["Hv"])
    w.add_ssm_group_count(c["Hk"])
    w.add_uint32(f"{c['arch']}.full_attention_interval", c["interval"])
    if c["moe"]:
        m = c["moe"]
        w.add_expert_count(m["X"])
        w.add_expert_used_count(m["K"])
        w.add_expert_feed_forward_length(m["Fe"])
        w.add_expert_shared_feed_forward_length(m["Fs"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(am.TOKENS)
    w.add_token_types([gguf.TokenType.NORMAL] * (len(am.TOKENS) - 1) + [gguf.TokenType.CONTROL])
    w.add_token_merges(am.MERGES)
    w.add_eos_token_id(len(am.TOKENS) - 1)
    w.add_add_bos_token(False)
    for n, a in W.items():
        w.add_tensor(n, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def l2norm(x, eps=1e-6):
    return x / np.maximum(np.sqrt((x * x).sum(axis=-1, keepdims=True)), eps)


def gated_attention(c, W, p, x):
    """Qwen3-Next's attention: queries and a sigmoid output gate per head, per-head q/k RMS norms, NeoX rope over
    the first `rope` dims of each head, causal softmax attention, GQA."""
    T, H, Hkv, D, n = len(x), c["H"], c["Hkv"], c["D"], c["rope"]
    qg = (x @ W[p + "attn_q.weight"].T).reshape(T, H, 2 * D)
    q, gate = qg[..., :D], qg[..., D:].reshape(T, H * D)
    k = (x @ W[p + "attn_k.weight"].T).reshape(T, Hkv, D)
    v = (x @ W[p + "attn_v.weight"].T).reshape(T, Hkv, D)
    q, k = am.rms_norm(q, W[p + "attn_q_norm.weight"], c["eps"]), am.rms_norm(k, W[p + "attn_k_norm.weight"], c["eps"])
    pos = np.arange(T, dtype=np.float64)
    q, k = (np.concatenate([am.rope(t[..., :n], pos, c["base"], True), t[..., n:]], axis=-1) for t in (q, k))
    k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
    s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(D)
    s = np.where(pos[:, None] >= pos[None, :], s, -np.inf)
    o = np.einsum("hqk,khd->qhd", am.softmax(s), v).reshape(T, H * D)
    return (o * sigmoid(gate)) @ W[p + "attn_output.weight"].T


def gated_delta_net(c, W, p, x):
    """The gated delta-net layer on normed rows x [T, E], from the first token (zero conv and delta states)."""
    T, Hk, Hv, S, K = len(x), c["Hk"], c["Hv"], c["S"], c["K"]
    r = Hv // Hk
    qkv = x @ W[p + "attn_qkv.weight"].T
    xs = np.concatenate([np.zeros((K - 1, qkv.shape[1])), qkv])
    conv = W[p + "ssm_conv1d.weight"]  # [C, K]: tap K-1 on the current token
    u = silu(np.stack([(xs[t:t + K] * conv.T).sum(axis=0) for t in range(T)]))
    q, k = l2norm(u[:, :Hk * S].reshape(T, Hk, S)), l2norm(u[:, Hk * S:2 * Hk * S].reshape(T, Hk, S))
    v = u[:, 2 * Hk * S:].reshape(T, Hv, S)
    if c["grouped"]:  # value head j reads key head j // r; β's and the decay's logits per key head in ssm_ba
        q, k = np.repeat(q, r, axis=1), np.repeat(k, r, axis=1)
        ba = (x @ W[p + "ssm_ba.weight"].T).reshape(T, Hk, 2 * r)
        b, a = ba[..., :r].reshape(T, Hv), ba[..., r:].reshape(T, Hv)
    else:  # value head j reads key head j mod Hk
        q, k = np.tile(q, (1, r, 1)), np.tile(k, (1, r, 1))
        b, a = x @ W[p + "ssm_beta.weight"].T, x @ W[p + "ssm_alpha.weight"].T
    beta, g = sigmoid(b), W[p + "ssm_a"] * softplus(a + W[p + "ssm_dt.bias"])
    state = np.zeros((Hv, S, S))  # [head, value index, key index]
    o = np.zeros((T, Hv, S))
    for t in range(T):
        state *= np.exp(g[t])[:, None, None]
        delta = beta[t][:, None] * (v[t] - np.einsum("hvk,hk->hv", state, k[t]))
        state += delta[:, :, None] * k[t][:, None, :]
        o[t] = np.einsum("hvk,hk->hv", state, q[t]) / math.sqrt(S)
    z = (x @ W[p + "attn_gate.weight"].T).reshape(T, Hv, S)
    o = am.rms_norm(o, W[p + "ssm_norm.weight"], c["eps"]) * silu(z)
    return o.reshape(T, Hv * S) @ W[p + "ssm_out.weight"].T


def forward(c, W, ids, gaps=None):
    """Logits [T, V] for every position of `ids`."""
    eps, hp = c["eps"], dict(arch=c["arch"], X=(c["moe"] or {}).get("X", 0), K=(c["moe"] or {}).get("K", 0))
    x = W["token_embd.weight"][ids]
    for layer in range(c["L"]):
        p = f"blk.{layer}."
        h = am.rms_norm(x, W[p + "attn_norm.weight"], eps)
        full = (layer + 1) % c["interval"] == 0
        x = x + (gated_attention(c, W, p, h) if full else gated_delta_net(c, W, p, h))
        h = am.rms_norm(x, W[p + "post_attention_norm.weight"], eps)
        x = x + (am.moe_ffn(hp, W, layer, h, gaps) if c["moe"] else am.mlp(dict(gemma=False), W, layer, h))
    return am.rms_norm(x, W["output_norm.weight"], eps) @ W["output.weight"].T


def make_prompts(c, W, rng):
    """The prompts of arch_models.PROMPT_LENGTHS and their logits, drawn again while a MoE router's margin is
    under arch_models.MIN_ROUTER_GAP."""
    prompts = []
    for n in am.PROMPT_LENGTHS:
        for _ in range(1000):
            ids, gaps = rng.integers(0, len(am.TOKENS) - 1, size=n).tolist(), []
            logits = forward(c, W, np.array(ids), gaps)
            if min(gaps, default=math.inf) >= am.MIN_ROUTER_GAP:
                break
        else:
            raise RuntimeError(f"no prompt of {n} tokens keeps every router margin above {am.MIN_ROUTER_GAP}")
        prompts.append({"ids": ids, "logits": logits.tolist()})
    return prompts


def write_cases(out_dir, first_seed, check=False):
    """Each case's GGUF file and reference logits into out_dir (as arch_models.py writes its cases)."""
    import json
    import os
    lines = []
    for seed, name in enumerate(CASES, start=first_seed):
        c = config(name)
        rng = np.random.default_rng(1000 + seed)
        W = make_weights(c, rng)
        path = os.path.join(out_dir, f"{name}.gguf")
        write_gguf(path, name, c, W)
        # the reference reads the weights back as written (f32), as the other cases do; fused experts split
        r = gguf.GGUFReader(path)
        W = {t.name: np.array(t.data, dtype=np.float64).reshape(W[t.name].shape) for t in r.tensors}
        for n in [n for n in W if n.endswith("ffn_gate_up_exps.weight")]:
            W[n.replace("gate_up", "gate")], W[n.replace("gate_up", "up")] = np.split(W.pop(n), 2, axis=1)
        prompts = make_prompts(c, W, rng)
        with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
            json.dump({"arch": c["arch"], "case": name, "vocab": len(am.TOKENS), "prompts": prompts}, f)
        std = np.std(np.array(prompts[-1]["logits"]))
        line = f"{name:8} arch {c['arch']:9} V {len(am.TOKENS)} layers {c['L']} logits std {std:.2f}"
        if check:
            line += f"  HF max rel diff {check_hf(name, c, W, prompts):.2e}"
        lines.append(line)
    return lines


HF_CLASSES = {"qwen35": ("qwen3_5_text", "Qwen3_5ForCausalLM"), "qwen3next": ("qwen3_next", "Qwen3NextForCausalLM"),
              "qwen35moe": ("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM")}


def hf_state_dict(c, W):
    """W under transformers' names, the converter's conventions undone: the RMS norms' 1 + w back to w (not the
    gated norm's), A_log = log(-ssm_a), the conv as [C, 1, K]; Qwen3.5's tiled value heads back to grouped order;
    Qwen3-Next's Q, K, V and z interleaved per key head into in_proj_qkvz."""
    import torch
    Hk, Hv, S = c["Hk"], c["Hv"], c["S"]
    r = Hv // Hk
    # GGUF value head i·Hk + h is transformers' h·r + i (Qwen3.5); Qwen3-Next keeps the grouped order
    order = [i * Hk + h for h in range(Hk) for i in range(r)] if not c["grouped"] else list(range(Hv))
    heads = lambda a, n: a.reshape(Hv, n, *a.shape[1:])[order].reshape(a.shape)  # noqa: E731
    sd = {"model.embed_tokens.weight": W["token_embd.weight"], "model.norm.weight": W["output_norm.weight"] - 1,
          "lm_head.weight": W["output.weight"]}
    for layer in range(c["L"]):
        p, q = f"blk.{layer}.", f"model.layers.{layer}."
        sd[q + "input_layernorm.weight"] = W[p + "attn_norm.weight"] - 1
        sd[q + "post_attention_layernorm.weight"] = W[p + "post_attention_norm.weight"] - 1
        if p + "attn_q.weight" in W:
            for g, h in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"), ("attn_output", "o_proj")):
                sd[q + f"self_attn.{h}.weight"] = W[p + g + ".weight"]
            sd[q + "self_attn.q_norm.weight"] = W[p + "attn_q_norm.weight"] - 1
            sd[q + "self_attn.k_norm.weight"] = W[p + "attn_k_norm.weight"] - 1
        else:
            la, kd = q + "linear_attn.", Hk * S
            qkv, z = W[p + "attn_qkv.weight"], heads(W[p + "attn_gate.weight"], S)
            v = heads(qkv[2 * kd:], S)
            conv = W[p + "ssm_conv1d.weight"].copy()
            conv[2 * kd:] = heads(conv[2 * kd:], S)
            sd[la + "conv1d.weight"] = conv[:, None, :]
            sd[la + "dt_bias"], sd[la + "A_log"] = heads(W[p + "ssm_dt.bias"], 1), np.log(-heads(W[p + "ssm_a"], 1))
            sd[la + "norm.weight"], sd[la + "out_proj.weight"] = W[p + "ssm_norm.weight"], None
            out = W[p + "ssm_out.weight"]
            sd[la + "out_proj.weight"] = out.reshape(out.shape[0], Hv, S)[:, order].reshape(out.shape)
            if c["grouped"]:
                rows = [np.concatenate([qkv[h * S:(h + 1) * S], qkv[kd + h * S:kd + (h + 1) * S],
                                        v[h * r * S:(h + 1) * r * S], z[h * r * S:(h + 1) * r * S]])
                        for h in range(Hk)]
                sd[la + "in_proj_qkvz.weight"] = np.concatenate(rows)
                sd[la + "in_proj_ba.weight"] = W[p + "ssm_ba.weight"]
            else:
                sd[la + "in_proj_qkv.weight"] = np.concatenate([qkv[:2 * kd], v])
                sd[la + "in_proj_z.weight"] = z
                sd[la + "in_proj_b.weight"] = heads(W[p + "ssm_beta.weight"], 1)
                sd[la + "in_proj_a.weight"] = heads(W[p + "ssm_alpha.weight"], 1)
        if not c["moe"]:
            for g, h in (("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")):
                sd[q + f"mlp.{h}.weight"] = W[p + g + ".weight"]
    if c["moe"]:
        moe, _ = am.hf_moe_tensors({"arch": c["arch"], "L": c["L"]}, W)
        sd.update(moe)
    return {n: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)) for n, a in sd.items()}


def check_hf(name, c, W, prompts):
    """Largest |reference - transformers| / max |transformers| over the prompts' positions."""
    import torch
    import transformers

    model_type, cls = HF_CLASSES[name]
    layer_types = ["full_attention" if (i + 1) % c["interval"] == 0 else "linear_attention" for i in range(c["L"])]
    cfg = dict(vocab_size=len(am.TOKENS), hidden_size=c["E"], intermediate_size=c["F"], num_hidden_layers=c["L"],
               num_attention_heads=c["H"], num_key_value_heads=c["Hkv"], head_dim=c["D"], rms_norm_eps=c["eps"],
               max_position_embeddings=am.CONTEXT, tie_word_embeddings=False, pad_token_id=0, bos_token_id=None,
               eos_token_id=len(am.TOKENS) - 1, layer_types=layer_types, linear_conv_kernel_dim=c["K"],
               linear_key_head_dim=c["S"], linear_value_head_dim=c["S"], linear_num_key_heads=c["Hk"],
               linear_num_value_heads=c["Hv"], partial_rotary_factor=c["rope"] / c["D"],
               rope_parameters={"rope_type": "default", "rope_theta": c["base"],
                                "partial_rotary_factor": c["rope"] / c["D"]},
               attn_implementation="eager")
    if c["moe"]:
        m = c["moe"]
        cfg.update(num_experts=m["X"], num_experts_per_tok=m["K"], moe_intermediate_size=m["Fe"],
                   shared_expert_intermediate_size=m["Fs"], norm_topk_prob=True, decoder_sparse_step=1,
                   mlp_only_layers=[], output_router_logits=False, experts_implementation="eager")
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    model = getattr(transformers, cls)(config).to(torch.float64).eval()
    res = model.load_state_dict(hf_state_dict(c, W), strict=False)
    assert not res.unexpected_keys and not res.missing_keys, res
    worst = 0.0
    with torch.no_grad():
        for pr in prompts:
            ref = np.array(pr["logits"])
            hf = model(torch.tensor([pr["ids"]])).logits[0].numpy()
            worst = max(worst, float(np.abs(ref - hf).max() / np.abs(hf).max()))
    return worst
