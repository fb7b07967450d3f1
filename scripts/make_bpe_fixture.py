#!/usr/bin/env python3
"""Byte-level BPE vocabularies (`tokenizer.ggml.model = gpt2`) with each pre-tokenizer webtensor knows or is to know,
for the tokenizer tests, and the ids independent tokenizers give for a set of hard texts.

For every pre-tokenizer P this trains a small byte-level BPE vocabulary (the 256 byte characters, merges learnt on a
small corpus, plus special tokens) with Hugging Face's `tokenizers` package configured as the real models'
tokenizer.json files configure it, writes it as tests/data/bpe_P.gguf (metadata only, as llama.cpp's converter writes
a vocabulary, `tokenizer.ggml.pre = P`), and records the ids of each text in tests/data/bpe_reference.json:

* `vocabularies` (gpt-2, default, smollm, llama-bpe, qwen2): GPT-2's ByteLevel regex; llama.cpp's own `default`
  regexes, which no tokenizer.json has; SmolLM2's individual digits before GPT-2's; Llama 3's and Qwen2's split
  regexes, Qwen2 with its NFC normalizer. Each of their `cases` (18 texts) has the ids of llama.cpp (llama-cpp-python,
  vocab_only, special tokens parsed) and of the `tokenizers` package; their `extra_cases` (the texts of EXTRA_TEXTS)
  have the `tokenizers` ids only, with `round_trip` (whether decoding the ids gives the text back).
* `tokenizers_only` (deepseek-r1-qwen, qwen35, deepseek-v3, tekken, gpt-4o, llama4, olmo, dbrx): pre-tokenizers
  webtensor does not build yet (see SPECS), over the 18 texts and EXTRA_TEXTS, with the ids of the `tokenizers`
  package only (`llama_cpp` is added to a case only when llama-cpp-python is installed), `round_trip` per case, and
  per vocabulary the pre-tokenizer and normalizer as tokenizer.json writes them, `ignore_merges`, and the llama.cpp
  pre-tokenizer type and the names llama.cpp reads as the same type. Where the BPE ignores the merges for a pre-token
  that is a whole token (tekken, as llama.cpp does and tiktoken), the vocabulary gets one more token no merge makes
  (UNMERGED_WORD) and its `ignore_merges_probes` are texts whose ids depend on it.

llama-cpp-python regenerates everything (the five `vocabularies` with their llama.cpp ids); without it the five
existing vocabularies are checked to train to the same files and ids, their llama.cpp ids are kept as they are, and
only `extra_cases` and `tokenizers_only` (with their files) are written.

    pip install gguf tokenizers==0.23.2 [llama-cpp-python]
    python3 scripts/make_bpe_fixture.py
"""
import json
import os
import sys

import gguf

from gguf_fixtures import vocab_only_hparams
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         r"|\s+(?!\S)|\s+")
DEFAULT = [r"[\p{P}\$\+<=>\^~\|]+", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
           r"\p{N}+", r"[0-9][0-9][0-9]"]
# Qwen3.5's (transformers' tokenization_qwen3_5.py, llama.cpp's QWEN35 original): Qwen2's with the combining marks
# (\p{M}) taken into a word and left out of a punctuation run
QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# tiktoken's o200k_base / o200k_harmony pat_str (GPT-4o, gpt-oss, Phi-4-mini) and Llama 4's O200K_PATTERN
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Mistral's Tekken (mistral_common's pattern, Mistral Nemo's tokenizer.json, transformers' fix_mistral_regex): o200k's
# without the contractions, digits one by one
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# DeepSeek V3's three Splits in turn (its tokenizer.json; llama.cpp's DEEPSEEK3_LLM): digits in threes, runs of CJK
# ideographs (U+4E00-U+9FA5), hiragana and katakana, then words, punctuation and spaces
DEEPSEEK3 = [r"\p{N}{1,3}",
             "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
             r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
             r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"]

# The pre-tokenizers still to be built: (Split regexes in turn, ByteLevel's own regex, normalizer, ignore_merges,
# llama.cpp's type, the names llama.cpp reads as that type)
SPECS = {
    "deepseek-r1-qwen": ([QWEN2], False, "NFC", False, "QWEN2", ["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"]),
    "qwen35": ([QWEN35], False, "NFC", False, "QWEN35", ["qwen35"]),
    "deepseek-v3": (DEEPSEEK3, False, None, False, "DEEPSEEK3_LLM", ["deepseek-v3"]),
    "tekken": ([TEKKEN], False, None, True, "TEKKEN", ["tekken"]),
    "gpt-4o": ([O200K], False, None, False, "GPT4O", ["gpt-4o", "llama4", "kanana2", "talkie"]),
    "llama4": ([O200K], False, None, False, "GPT4O", ["gpt-4o", "llama4", "kanana2", "talkie"]),
    "olmo": ([], True, "NFC", False, "OLMO", ["olmo"]),
    "dbrx": ([LLAMA3], False, None, False, "DBRX", ["dbrx"]),
}
OLD = ("gpt-2", "default", "smollm", "llama-bpe", "qwen2")
# added to the vocabularies whose BPE ignores the merges for a pre-token that is a whole token (llama.cpp's
# ignore_merges): " xylophone" in byte-level characters, a token no merge makes
UNMERGED_WORD = "\u0120xylophone"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = """The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.
Hello world! Hello there, general. Tokenizers split text into pieces and the pieces into ids.
Numbers like 1234 and 56.78 appear too, and 2024-12-05 or 3.14159. Café, naïve, über: accents matter.
I'm sure you'll see they've done it; we'd say it's DON'T and WON'T. 日本語のテキスト and 中文 and 한국어.
Emoji 🙂 🚀 and symbols €, £, ©, ±. Code: def f(x):\n    return x**2  # comment\n\tindented
    spaces    between     words   and trailing   """ * 3
# more scripts and shapes for the new vocabularies only (the five old ones train on CORPUS alone, as before)
EXTRA_CORPUS = """CamelCaseWords and HTTPServer, iPhone, XMLHttpRequest; McDonald's ÉCOLE Ñandú ΑΘΗΝΑ Αθήνα.
I'M SURE YOU'RE RIGHT, WE'VE SEEN IT. path/to/file.txt // comment /* block */ a/b/c https://example.com/x?y=1
مرحبا بالعالم العَرَبِيَّة ١٢٣٤ שָׁלוֹם עולם נָעִים नमस्ते दुनिया हिन्दी กรุงเทพมหานคร Привет, мир! нещо на Български
我想在apple工作1314151天～ ひらがなとカタカナ 漢字と仮名 中文字符 100,000,000 and 3.5% or $42.99 ①②③ ½ Ⅻ
""" * 2
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
# texts for the regexes of the new pre-tokenizers: CJK runs next to Latin and digits, digits in ones and threes,
# contractions in capitals and mixed case, apostrophes, case changes inside words, slashes, newlines and carriage
# returns, emoji with joiners and modifiers, Arabic and Hebrew with their marks, Devanagari and Thai (combining
# marks), mixed scripts, and llama.cpp's own pre-tokenizer check text (convert_hf_to_gguf.py's chktxt)
CHKTXT = ("\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 "
          "3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ "
          "------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, "
          "'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL")
EXTRA_TEXTS = [
    "中文字符和日本語のひらがなカタカナ混合 한국어 텍스트",
    "我想在apple工作1314151天～ and 東京2024年",
    "1 12 123 1234 12345 123456 1234567",
    "3.14159 2024-12-05 1,234,567.89 $42.99 50%",
    "x2y3z 42abc abc42 v1.2.3",
    "①②③ ½ Ⅻ １２３４ ٠١٢٣٤٥٦ १२३",
    "I'M YOU'RE WE'VE HE'LL SHE'D IT'S DON'T",
    "We'Ve a'lL 'RE 'M 'D 's",
    "O'Neil's rock'n'roll don’t it’s",
    "camelCaseWord HTTPServer iPhone XMLHttpRequest McDonald's ÉCOLE Ñandú",
    "path/to/file.txt // comment\n/* block */ a/b",
    "------======= ''''''```````\"\"\"\"......!!!!!!??????",
    "line1\r\nline2\rline3\n\n\n  indented\n\t\ttabs \n ",
    "a                    b\n\n",
    "🚀 (normal) 😶\u200d🌫️ ✅ 🦙🦙 👍🏽 ❤️ 👨\u200d👩\u200d👧",
    "مرحبا بالعالم ١٢٣ العَرَبِيَّة",
    "שָׁלוֹם עולם 123",
    "नमस्ते दुनिया हिन्दी",
    "กรุงเทพมหานคร",
    "Hello мир 世界 κόσμος! Αθήνα ΑΘΗΝΑ",
    "Ame\u0301lie vs Amélie",
    "<|im_start|>system\nYou are 1 AI.<|im_end|>\n",
    "zero\u200bwidth\u2009thin\u00a0nbsp",
    CHKTXT,
]


def split(regex):
    return pre_tokenizers.Split(Regex(regex), behavior="isolated")


def pre_tokenizer(kind):
    if kind in SPECS:
        regexes, bl_regex = SPECS[kind][:2]
        steps = [split(r) for r in regexes] + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=bl_regex)]
        return steps[0] if len(steps) == 1 else pre_tokenizers.Sequence(steps)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=kind in ("gpt-2", "smollm"))
    if kind == "gpt-2":
        return byte_level
    if kind == "default":  # llama.cpp's own default: these four regexes in turn (no tokenizer.json has it)
        return pre_tokenizers.Sequence([split(r) for r in DEFAULT] + [byte_level])
    if kind == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    regex = LLAMA3 if kind == "llama-bpe" else QWEN2
    return pre_tokenizers.Sequence([split(regex), byte_level])


def normalizer(kind):
    name = SPECS[kind][2] if kind in SPECS else ("NFC" if kind == "qwen2" else None)
    return normalizers.NFC() if name == "NFC" else None


def with_ignore_merges(tk, on):
    """The tokenizer with the BPE model's ignore_merges set (a pre-token that is a whole token skips the merges)."""
    j = json.loads(tk.to_str())
    j["model"]["ignore_merges"] = on
    return Tokenizer.from_str(json.dumps(j))


def train(kind):
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizer(kind)
    tk.decoder = decoders.ByteLevel()
    norm = normalizer(kind)
    if norm is not None:
        tk.normalizer = norm
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator([CORPUS] if kind in OLD else [CORPUS, EXTRA_CORPUS], trainer)
    if kind not in SPECS:
        return tk
    if not SPECS[kind][3]:
        return with_ignore_merges(tk, False)
    # a whole word no merge makes (as tiktoken-made vocabularies have): with ignore_merges it is one token
    j = json.loads(tk.to_str())
    j["model"]["ignore_merges"] = True
    vocab = j["model"]["vocab"]
    vocab[UNMERGED_WORD] = len(vocab)
    return Tokenizer.from_str(json.dumps(j))


def vocabulary(tk):
    j = json.loads(tk.to_str())
    vocab = j["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    return tokens, [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]


def write_gguf(path, kind, tk):
    tokens, merges = vocabulary(tk)
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


def read_gguf(path):
    r = gguf.GGUFReader(path)
    strings = lambda key: [bytes(r.fields[key].parts[i]).decode() for i in r.fields[key].data]
    return strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges")


def case(tk, text, llama=None):
    ids = tk.encode(text).ids
    c = {"text": text, "tokenizers": ids, "round_trip": tk.decode(ids, skip_special_tokens=False) == text}
    if llama is not None:
        c["llama_cpp"] = llama.tokenize(text.encode(), add_bos=False, special=True)
    return c


def ignore_merges_probes(tk, limit=3):
    """Texts that are one pre-token and a whole token of the vocabulary that the merges alone do not reach: where
    ignore_merges changes the ids."""
    other = with_ignore_merges(tk, not json.loads(tk.to_str())["model"]["ignore_merges"])
    dec = decoders.ByteLevel()
    probes = []
    for t in vocabulary(tk)[0]:
        if t in SPECIAL or len(t) < 2:
            continue
        text = dec.decode([t])
        normal = tk.normalizer.normalize_str(text) if tk.normalizer else text
        if normal != text or [p for p, _ in tk.pre_tokenizer.pre_tokenize_str(text)] != [t]:
            continue
        if tk.encode(text).ids != other.encode(text).ids:
            probes.append(text)
    return probes[:limit]


def tokenizers_only_entry(kind, tk, llama):
    regexes, bl_regex, norm, ignore, llama_type, aliases = SPECS[kind]
    j = json.loads(tk.to_str())
    texts = TEXTS + EXTRA_TEXTS
    probes = ignore_merges_probes(tk) if ignore else []
    return {
        "file": f"tests/data/bpe_{kind}.gguf",
        "llama_cpp_type": llama_type,
        "llama_cpp_names": aliases,
        "normalizer": j["normalizer"],
        "pre_tokenizer": j["pre_tokenizer"],
        "ignore_merges": ignore,
        "ignore_merges_probes": probes,
        "cases": [case(tk, t, llama) for t in texts + probes],
    }


def main():
    try:
        import llama_cpp
    except ImportError:
        llama_cpp = None
    path = os.path.join(HERE, "bpe_reference.json")
    if llama_cpp is None:
        with open(path) as f:
            out = json.load(f)
        for kind in OLD:  # the kept llama.cpp ids stand for these files: they must train the same
            tk = train(kind)
            entry = out["vocabularies"][kind]
            if read_gguf(os.path.join(HERE, f"bpe_{kind}.gguf")) != vocabulary(tk):
                sys.exit(f"bpe_{kind}.gguf differs from what this tokenizers package trains: install llama-cpp-python")
            if any(tk.encode(c["text"]).ids != c["tokenizers"] for c in entry["cases"]):
                sys.exit(f"{kind}: this tokenizers package gives other ids than the kept ones")
            entry["extra_cases"] = [case(tk, t) for t in EXTRA_TEXTS]
            print(f"{kind}: kept, {len(entry['extra_cases'])} extra cases")
    else:
        out = {"source": f"llama.cpp {llama_cpp.__version__} (llama-cpp-python, vocab_only, special tokens parsed) "
                         "and the tokenizers package, configured as the models' tokenizer.json files",
               "vocabularies": {}}
        for kind in OLD:
            tk = train(kind)
            p = os.path.join(HERE, f"bpe_{kind}.gguf")
            n, merges = write_gguf(p, kind, tk)
            m = llama_cpp.Llama(model_path=p, vocab_only=True, verbose=False)
            cases = []
            for t in TEXTS:
                cases.append({"text": t, "llama_cpp": m.tokenize(t.encode(), add_bos=False, special=True),
                              "tokenizers": tk.encode(t).ids})
            differ = [c["text"] for c in cases if c["llama_cpp"] != c["tokenizers"]]
            out["vocabularies"][kind] = {"file": f"tests/data/bpe_{kind}.gguf", "cases": cases,
                                         "extra_cases": [case(tk, t) for t in EXTRA_TEXTS]}
            print(f"{kind}: {n} tokens, {merges} merges; llama.cpp and tokenizers differ on {differ}")
    import tokenizers
    out["tokenizers_only_source"] = (
        f"the tokenizers package {tokenizers.__version__} only (no llama.cpp ids unless a case has llama_cpp), "
        "configured as the models' tokenizer.json files; vocabularies trained on CORPUS and EXTRA_CORPUS")
    out["tokenizers_only"] = {}
    for kind in SPECS:
        tk = train(kind)
        p = os.path.join(HERE, f"bpe_{kind}.gguf")
        n, merges = write_gguf(p, kind, tk)
        llama = llama_cpp.Llama(model_path=p, vocab_only=True, verbose=False) if llama_cpp else None
        entry = tokenizers_only_entry(kind, tk, llama)
        out["tokenizers_only"][kind] = entry
        no_trip = [c["text"] for c in entry["cases"] if not c["round_trip"]]
        print(f"{kind}: {n} tokens, {merges} merges, {len(entry['cases'])} cases; not round trips: {no_trip}; "
              f"ignore_merges probes: {entry['ignore_merges_probes']}")
    with open(path, "w") as f:
        f.write(dump(out))


def dump(out):
    """The JSON with one value a line (as the file was first written), but the id lists of `extra_cases` and
    `tokenizers_only` each on one line."""
    compact = []

    def mark(c):
        for key in ("tokenizers", "llama_cpp"):
            if key in c:
                compact.append(json.dumps(c[key]))
                c[key] = f"@@{len(compact) - 1}@@"
    for entry in out["vocabularies"].values():
        for c in entry.get("extra_cases", []):
            mark(c)
    for entry in out["tokenizers_only"].values():
        for c in entry["cases"]:
            mark(c)
    text = json.dumps(out, ensure_ascii=False, indent=1)
    for i, ids in enumerate(compact):
        text = text.replace(f'"@@{i}@@"', ids, 1)
    return text


if __name__ == "__main__":
    main()
