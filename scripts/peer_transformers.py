#!/usr/bin/env python3
"""The prefill peer of `scripts/gpu-check.sh`: Hugging Face transformers' LlamaForCausalLM of a GGUF language
model's shape (read from the file's metadata; the weights random, which a prefill's time does not depend on), in
f16 on CUDA, eager: tokens/s of one forward pass over a prompt of N tokens (llama-bench's ppN), the median of
--repeats passes after two warm-ups. Prints one markdown table row:

  | Hugging Face transformers 5.0 (LlamaForCausalLM f16, CUDA, eager) | 17300.0 (17100.2-17422.9) |

or, where torch with CUDA or transformers is missing, `| Hugging Face transformers | absent: why |` (exit 0: an
absent peer is not an error). Exit 1 when the file is not a GGUF llama-family model.

  python3 scripts/peer_transformers.py --model FILE.gguf [--prompt-tokens 512] [--repeats 5]
"""

import argparse
import struct
import sys
import time

# GGUF metadata value types (ggml's gguf.h): fixed-size scalars by struct format, 8 string, 9 array
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def read(f, fmt):
    size = struct.calcsize("<" + fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("the file ends inside its metadata")
    return struct.unpack("<" + fmt, data)[0]


def read_value(f, vtype):
    if vtype in SCALARS:
        return read(f, SCALARS[vtype])
    if vtype == 8:
        n = read(f, "Q")
        if n > 1 << 24:
            raise ValueError(f"a string of {n} bytes")
        return f.read(n).decode("utf-8", "replace")
    if vtype == 9:
        itype, n = read(f, "I"), read(f, "Q")
        if itype in SCALARS:  # skipped whole: the arrays (token lists) are not needed here
            f.seek(n * struct.calcsize("<" + SCALARS[itype]), 1)
        else:
            for _ in range(n):
                read_value(f, itype)
        return None
    raise ValueError(f"unknown metadata value type {vtype}")


def metadata(path):
    """The scalar and string metadata of a GGUF file (arrays as None)."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version, _tensors, n_kv = read(f, "I"), read(f, "Q"), read(f, "Q")
        if version < 2 or n_kv > 1 << 20:
            raise ValueError(f"GGUF version {version} with {n_kv} keys")
        out = {}
        for _ in range(n_kv):
            key = f.read(read(f, "Q")).decode()
            out[key] = read_value(f, read(f, "I"))
        return out


def llama_config(meta):
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"architecture {arch!r}: this peer builds a llama-family model")
    k = lambda name: meta[f"llama.{name}"]  # noqa: E731
    heads = k("attention.head_count")
    return dict(
        vocab_size=meta.get("llama.vocab_size") or 32000,
        hidden_size=k("embedding_length"),
        intermediate_size=k("feed_forward_length"),
        num_hidden_layers=k("block_count"),
        num_attention_heads=heads,
        num_key_value_heads=meta.get("llama.attention.head_count_kv", heads),
        rope_theta=float(meta.get("llama.rope.freq_base", 10000.0)),
        rms_norm_eps=float(k("attention.layer_norm_rms_epsilon")),
        max_position_embeddings=k("context_length"),
        tie_word_embeddings=True,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    try:
        cfg = llama_config(metadata(args.model))
    except (OSError, ValueError, KeyError) as e:
        print(f"peer_transformers: {args.model}: {e}", file=sys.stderr)
        return 1
    try:
        import torch
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM

        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} without CUDA")
    except Exception as e:  # noqa: BLE001 - any import failure means "absent"
        print(f"| Hugging Face transformers | absent: {e} |")
        return 0
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**cfg)).to("cuda", torch.float16).eval()
    prompt = torch.randint(0, cfg["vocab_size"], (1, args.prompt_tokens), device="cuda")
    rates = []
    with torch.no_grad():
        for i in range(2 + args.repeats):
            torch.cuda.synchronize()
            t = time.perf_counter()
            model(prompt)
            torch.cuda.synchronize()
            if i >= 2:
                rates.append(args.prompt_tokens / (time.perf_counter() - t))
    rates.sort()
    label = f"Hugging Face transformers {transformers.__version__} (LlamaForCausalLM f16, CUDA, eager)"
    print(f"| {label} | {rates[len(rates) // 2]:.1f} ({rates[0]:.1f}-{rates[-1]:.1f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
