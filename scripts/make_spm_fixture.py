#!/usr/bin/env python3
"""A SentencePiece-vocabulary GGUF (`tokenizer.ggml.model = llama`, as TinyLlama and Llama 2 have) for the
tokenizer tests, and the ids llama.cpp's own SPM tokenizer gives for a set of texts.

The vocabulary is trained here, SentencePiece-BPE style, on a small corpus: the corpus's characters, then 300
merges of the most frequent adjacent pair, each scored by its rank (the first merge scores highest), plus
`<unk>`, `<s>`, `</s>` and the 256 byte pieces `<0xNN>` for byte fallback. The file holds only the metadata a
llama model's vocabulary needs (no tensors). The reference ids come from llama.cpp through llama-cpp-python
(`Llama(vocab_only=True).tokenize(add_bos=True)`): an implementation independent of webtensor's.

    pip install gguf llama-cpp-python
    python3 scripts/make_spm_fixture.py   # writes tests/data/spm_vocab.gguf, spm_nospace_vocab.gguf (Gemma's
                                          # add_space_prefix = false) and tests/data/spm_reference.json
"""
import collections
import json
import os

import gguf

from gguf_fixtures import vocab_only_hparams

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
CORPUS = """The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.
Hello world! Hello there, general. Tokenizers split text into pieces and the pieces into ids.
Numbers like 1234 and 56.78 appear too. Café, naïve, über — accents matter. 日本語 and emoji 🙂 too."""
TEXTS = [
    "The quick brown fox",
    "Hello world!",
    " leading space",
    "two  spaces and a\ttab",
    "Café über 日本 🙂",
    "unseen zebra words",
    "bytes: € ß 한국어 🚀",
    "line one\nline two",
    "1234 56.78 9",
    "",
]


def vocabulary():
    words = collections.Counter("▁" + w for w in CORPUS.replace("\n", " ").split(" ") if w)
    chars = sorted({c for w in words for c in w})
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + chars
    types = [2, 3, 3] + [6] * 256 + [1] * len(chars)
    scores = [0.0] * 259 + [-1000.0 - i for i in range(len(chars))]
    seqs = {w: list(w) for w in words}
    for rank in range(300):
        pairs = collections.Counter()
        for w, n in words.items():
            for a, b in zip(seqs[w], seqs[w][1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), n = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if n < 2:
            break
        tokens.append(a + b)
        types.append(1)
        scores.append(-float(rank))
        for w in words:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == (a, b):
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return tokens, scores, types


def write(path, space_prefix):
    tokens, scores, types = vocabulary()
    w = gguf.GGUFWriter(path, "llama")
    vocab_only_hparams(w)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    if not space_prefix:
        w.add_add_space_prefix(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    import llama_cpp

    m = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    cases = [{"text": t, "ids": m.tokenize(t.encode(), add_bos=True, special=False)} for t in TEXTS]
    print(f"{path}: {len(tokens)} tokens; {len(cases)} texts")
    return cases, llama_cpp.__version__


def main():
    cases, version = write(os.path.join(HERE, "spm_vocab.gguf"), True)
    ref = {"source": f"llama.cpp {version} (llama-cpp-python), vocab_only", "cases": cases}
    # Gemma's vocabularies: no space prefix (tokenizer.ggml.add_space_prefix = false)
    ref["no_space_prefix"] = {"file": "tests/data/spm_nospace_vocab.gguf",
                              "cases": write(os.path.join(HERE, "spm_nospace_vocab.gguf"), False)[0]}
    with open(os.path.join(HERE, "spm_reference.json"), "w") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
