#!/usr/bin/env python3
"""Byte-level BPE vocabularies (`tokenizer.ggml.model = gpt2`) with each pre-tokenizer webtensor knows, for the
tokenizer tests, and the ids two independent tokenizers give for a set of hard texts.

For every pre-tokenizer P in gpt-2, default, smollm, llama-bpe, qwen2 this trains a small byte-level BPE vocabulary (the 256
byte characters, merges learnt on a small corpus, plus special tokens) with Hugging Face's `tokenizers` package
configured as the real models' tokenizer.json files configure it (GPT-2's ByteLevel regex; llama.cpp's own
`default` regexes, which no tokenizer.json has; SmolLM2's individual
digits before it; Llama 3's and Qwen2's split regexes, Qwen2 with its NFC normalizer), writes it as
tests/data/bpe_P.gguf (metadata only, as llama.cpp's converter writes a vocabulary), and records in
tests/data/bpe_reference.json, for each text, the ids of llama.cpp (llama-cpp-python, vocab_only, special tokens
parsed) and of the `tokenizers` package.

    pip install gguf tokenizers llama-cpp-python
    python3 scripts/make_bpe_fixture.py
"""
import json
import os

import gguf

from gguf_fixtures import vocab_only_hparams
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         r"|\s+(?!\S)|\s+")
DEFAULT = [r"[\p{P}\$\+<=>\^~\|]+", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
           r"\p{N}+", r"[0-9][0-9][0-9]"]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = """The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.
Hello world! Hello there, general. Tokenizers split text into pieces and the pieces into ids.
Numbers like 1234 and 56.78 appear too, and 2024-12-05 or 3.14159. Café, naïve, über: accents matter.
I'm sure you'll see they've done it; we'd say it's DON'T and WON'T. 日本語のテキスト and 中文 and 한국어.
Emoji 🙂 🚀 and symbols €, £, ©, ±. Code: def f(x):\n    return x**2  # comment\n\tindented
    spaces    between     words   and trailing   """ * 3
TEXTS = [
    "The quick brown fox",
    "Hello world!",
    " leading space",
    "two  spaces and   three",
    "tab\tand\nnewline\n\nand two",
    "trailing spaces   ",
    "1234567 and 12 345 and 3.14159",
    "I'm sure you'll see they've DON'T it's",
    "Café über naïve",
    "cafe\u0301 decomposed",
    "日本語のテキスト 中文 한국어",
    "emoji 🙂🚀 and € £ ©",
    "<|im_start|>user\nhi<|im_end|>",
    "text<|endoftext|>more",
    "def f(x):\n    return x**2",
    "unseen zebra xylophone qwerty",
    "\u00a0non-breaking\u3000space",
    "",
]


def pre_tokenizer(kind):
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=kind in ("gpt-2", "smollm"))
    if kind == "gpt-2":
        return byte_level
    if kind == "default":  # llama.cpp's own default: these four regexes in turn (no tokenizer.json has it)
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r), behavior="isolated") for r in DEFAULT]
                                       + [byte_level])
    if kind == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    regex = LLAMA3 if kind == "llama-bpe" else QWEN2
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), behavior="isolated"), byte_level])


def train(kind):
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizer(kind)
    tk.decoder = decoders.ByteLevel()
    if kind == "qwen2":
        tk.normalizer = normalizers.NFC()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator([CORPUS], trainer)
    return tk


def write_gguf(path, kind, tk):
    j = json.loads(tk.to_str())
    vocab = j["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    w = gguf.GGUFWriter(path, "llama")
    vocab_only_hparams(w)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(kind)
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in SPECIAL else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return len(tokens), len(merges)


def main():
    import llama_cpp

    out = {"source": f"llama.cpp {llama_cpp.__version__} (llama-cpp-python, vocab_only, special tokens parsed) "
                     "and the tokenizers package, configured as the models' tokenizer.json files", "vocabularies": {}}
    for kind in ("gpt-2", "default", "smollm", "llama-bpe", "qwen2"):
        tk = train(kind)
        path = os.path.join(HERE, f"bpe_{kind}.gguf")
        n, merges = write_gguf(path, kind, tk)
        m = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        cases = []
        for t in TEXTS:
            lc = m.tokenize(t.encode(), add_bos=False, special=True)
            hf = tk.encode(t).ids
            cases.append({"text": t, "llama_cpp": lc, "tokenizers": hf})
        differ = [c["text"] for c in cases if c["llama_cpp"] != c["tokenizers"]]
        out["vocabularies"][kind] = {"file": f"tests/data/bpe_{kind}.gguf", "cases": cases}
        print(f"{kind}: {n} tokens, {merges} merges; llama.cpp and tokenizers differ on {differ}")
    with open(os.path.join(HERE, "bpe_reference.json"), "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
