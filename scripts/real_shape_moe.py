"""The mixture-of-experts pieces of scripts/real_shape_gguf.py (imported by it; run from this folder): the expert
keys and tensors of Qwen3-MoE (qwen3moe) and gpt-oss as convert_hf_to_gguf writes them, gpt-oss's attention extras,
and the block type llama-quantize gives each matrix under a shape's mixture."""
import numpy as np
import gguf

from arch_models import write_moe_keys

Q = gguf.GGMLQuantizationType
# each mixture's default block type and the general.file_type llama-quantize writes for it
MIXTURES = {"q4_k_m": (Q.Q4_K, gguf.LlamaFileType.MOSTLY_Q4_K_M),
            "iq4_xs": (Q.IQ4_XS, gguf.LlamaFileType.MOSTLY_IQ4_XS),
            "mxfp4_moe": (Q.MXFP4, gguf.LlamaFileType.MOSTLY_MXFP4_MOE)}


def use_more_bits(layer, n):
    """llama-quantize's use_more_bits: the first and last eighths of the layers, and every third layer between."""
    return layer < n // 8 or layer >= 7 * n // 8 or (layer - n // 8) % 3 == 2


def matrix_type(c, role, layer=None):
    """The block type llama_tensor_get_type (llama.cpp's src/llama-quant.cpp) gives matrix `role` (its name without
    blk.N. and .weight) of block `layer` under the shape's mixture, before the fallback for rows that are not whole
    blocks. The layer counts are the whole model's (c["L"]), so a file cut short by --layers holds the full file's
    first blocks."""
    if c.get("only"):  # --type: every matrix in one block type
        return c["only"]
    mix = c.get("mix", "q4_k_m")
    if mix == "mxfp4_moe":  # MXFP4_MOE: the 3-D expert stacks MXFP4, every other matrix (embedding, output) Q8_0
        return Q.MXFP4 if role.endswith("_exps") else Q.Q8_0
    if role == "output" or (role == "token_embd" and c["tied"]):  # Q8_0 where rows are not whole super-blocks
        return Q.Q8_0 if c["E"] % 256 else Q.Q6_K
    if mix == "iq4_xs":  # V in Q5_K where 4 or more query heads share it; ffn_down IQ4_XS as with an imatrix
        return Q.Q5_K if role == "attn_v" and c["H"] // c["Hkv"] >= 4 else Q.IQ4_XS
    if role == "attn_qkv":
        return Q.Q5_K
    if role in ("attn_v", "ffn_down", "ffn_down_exps") and use_more_bits(layer, c["L"]):
        return Q.Q6_K
    return Q.Q4_K


def moe_keys(w, c):
    """The expert counts and widths, and gpt-oss's sliding window and YaRN, as convert_hf_to_gguf writes them."""
    write_moe_keys(w, c)
    if c.get("window"):
        w.add_sliding_window(c["window"])
    if c.get("yarn"):
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(c["yarn"]["factor"])
        w.add_rope_scaling_orig_ctx_len(c["yarn"]["orig"])


def gpt_oss_attention(t, c, p):
    """gpt-oss's output-projection bias and attention sinks (a logit per query head), f32 zeros."""
    t.f32(p + "attn_output.bias", np.zeros(c["E"]))
    t.f32(p + "attn_sinks.weight", np.zeros(c["H"]))


def experts(t, c, p, layer):
    """A MoE layer's FFN: the router (f32: llama-quantize leaves ffn_gate_inp alone; small random weights, so that
    tokens spread over the experts as in a trained model, where zeros would send every token to the same ones) and
    the stacked experts [X, out, in] (numpy order), gpt-oss's with f32 zero biases on the router and each expert."""
    m, E = c["moe"], c["E"]
    X, Fe = m["X"], m["Fe"]
    t.f32(p + "ffn_gate_inp.weight", 0.02 * t.rng.standard_normal((X, E)))
    for name, shape in (("ffn_gate_exps", (X, Fe, E)), ("ffn_up_exps", (X, Fe, E)), ("ffn_down_exps", (X, E, Fe))):
        t.mat(p + name + ".weight", shape, matrix_type(c, name, layer))
    if m.get("Fs"):  # the shared expert and its one-logit sigmoid gate (f32 [E], as llama.cpp declares it)
        Fs = m["Fs"]
        t.f32(p + "ffn_gate_inp_shexp.weight", 0.02 * t.rng.standard_normal(E))
        for name, shape in (("ffn_gate_shexp", (Fs, E)), ("ffn_up_shexp", (Fs, E)), ("ffn_down_shexp", (E, Fs))):
            t.mat(p + name + ".weight", shape, matrix_type(c, name.replace("_shexp", ""), layer))
    if c["arch"] == "gpt-oss":
        t.f32(p + "ffn_gate_inp.bias", np.zeros(X))
        for name, n in (("ffn_gate_exps", Fe), ("ffn_up_exps", Fe), ("ffn_down_exps", E)):
            t.f32(p + name + ".bias", np.zeros((X, n)))
