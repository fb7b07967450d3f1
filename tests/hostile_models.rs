//! Model files a careless converter or a hostile author could write: every hyperparameter out of range, products
//! that overflow, tables that disagree, tensors that overlap or have a dtype no kernel takes, vocabularies that
//! would drop bytes or cost the square of a piece. Each must give one error naming the key or tensor and the file;
//! the valid file must load and generate. On the CPU backend (the checks come before any device work).

mod common;

use common::tiny_gguf::{load, refused, Meta, TinyLlama};
use webtensor::models::{GenerateOptions, LanguageModel, LanguageModelOptions};
use webtensor::{Device, Error};

#[test]
fn the_tiny_model_loads_and_generates() {
    let mut m = load(&TinyLlama::new()).unwrap();
    let prompt = m.tokenizer.encode("hello the").unwrap();
    let out = m.generate(&prompt, &GenerateOptions { max_tokens: 5, ..Default::default() }, |_, _| true).unwrap();
    assert!(!out.tokens.is_empty() || out.stop == webtensor::models::StopReason::EndOfGeneration);
    assert!(m.chat_template().is_some());
}

/// The prefill reports its start and each chunk (powers of two of at most `max_chunk` tokens), counting only the tokens not
/// already cached.
/// The generation's text is the decoding of its tokens, also when they end inside a UTF-8 character (the bytes
/// held back for the character's end came out as nothing), for every length from 1 to 16 tokens and prompts that
/// make the tiny model choose byte tokens.
#[test]
fn the_text_is_the_decoding_of_the_tokens_to_the_end() {
    // an embedding (tied to the output) whose only rows are bytes 0xC3 and 0xC4, opposite: every token chosen
    // is one of these lead bytes of a 2-byte character, so every generation ends inside one
    let mut t = TinyLlama::new();
    let e = TinyLlama::WIDTH;
    let rows = 256 + 5;
    let mut table = vec![0f32; rows * e];
    for j in 0..e {
        table[0xC3 * e + j] = 0.5 + j as f32 * 0.1;
        table[0xC4 * e + j] = -(0.5 + j as f32 * 0.1);
    }
    t.tensor("token_embd.weight").bytes = Some(table.iter().flat_map(|v| v.to_le_bytes()).collect());
    let mut m = load(&t).unwrap();
    let mut partial_endings = 0;
    for prompt in ["\u{c3}", "\u{c4}\u{c3}", "a\u{c3}"] {
        let ids = m.tokenizer.encode(prompt).unwrap();
        for n in 1..=16 {
            let mut streamed = String::new();
            let options = GenerateOptions { max_tokens: n, ..Default::default() };
            let g = m.generate(&ids, &options, |piece, _| {
                streamed.push_str(piece);
                true
            });
            let g = g.unwrap();
            let whole = m.tokenizer.decode(&g.tokens, true).unwrap();
            assert_eq!(g.text, whole, "{prompt:?}, {n} tokens {:?}", g.tokens);
            assert_eq!(streamed, whole, "{prompt:?}, {n} tokens streamed");
            partial_endings += whole.ends_with('\u{FFFD}') as usize;
        }
    }
    println!("{partial_endings} generations ended inside a character");
    assert!(partial_endings >= 24, "{partial_endings} of 48 generations ended inside a character");
}

#[test]
fn prefill_progress_is_reported_per_chunk() {
    let bytes = webtensor::Bytes::from_vec(TinyLlama::new().bytes());
    let f = webtensor::gguf::GgufFile::from_bytes("tiny.gguf", bytes).unwrap();
    let mut m =
        LanguageModel::from_gguf(&Device::cpu(), &f, LanguageModelOptions { max_chunk: 8, ..Default::default() })
            .unwrap();
    let prompt: Vec<u32> = (0..21).map(|i| 97 + i % 20).collect();
    let options = GenerateOptions { max_tokens: 1, ..Default::default() };
    let mut seen = vec![];
    pollster::block_on(m.start_with_progress_async(&prompt, &options, &mut |d, t| seen.push((d, t)))).unwrap();
    assert_eq!(seen, [(0, 21), (8, 21), (16, 21), (20, 21), (21, 21)]);
    // the same prompt and two more tokens: only the two are evaluated
    let longer: Vec<u32> = prompt.iter().copied().chain([98, 99]).collect();
    seen.clear();
    pollster::block_on(m.start_with_progress_async(&longer, &options, &mut |d, t| seen.push((d, t)))).unwrap();
    assert_eq!(seen, [(0, 2), (2, 2)]);
    // the cached prompt again: its last token is evaluated again, for its logits
    seen.clear();
    pollster::block_on(m.start_with_progress_async(&longer, &options, &mut |d, t| seen.push((d, t)))).unwrap();
    assert_eq!(seen, [(0, 1), (1, 1)]);
}

#[test]
fn hyperparameters_out_of_range_are_refused_by_key() {
    let key = |k: &str| format!("llama.{k}");
    for (k, v, needle) in [
        ("block_count", Meta::U32(0), "from 1 to"),
        ("block_count", Meta::I32(-3), "at least 1"),
        ("block_count", Meta::U64(1 << 40), "from 1 to"),
        ("embedding_length", Meta::U32(0), "from 1 to"),
        ("attention.head_count", Meta::U32(0), "from 1 to"),
        ("attention.head_count_kv", Meta::U32(3), "no multiple"),
        ("attention.key_length", Meta::U64(u64::MAX), "from 1 to"),
        ("feed_forward_length", Meta::F32(16.0), "not an integer"),
        ("context_length", Meta::U32(0), "from 1 to"),
        ("attention.layer_norm_rms_epsilon", Meta::F32(f32::NAN), "finite"),
        ("attention.layer_norm_rms_epsilon", Meta::F32(-1e-5), "above 0"),
        ("attention.layer_norm_rms_epsilon", Meta::Str("1e-5".into()), "not a number"),
        ("rope.freq_base", Meta::F32(0.0), "above 1"),
        ("rope.freq_base", Meta::F32(1e-45), "above 1"),
        ("rope.freq_base", Meta::F32(f32::INFINITY), "finite"),
        ("rope.scaling.factor", Meta::F32(f32::NAN), "finite"),
        ("rope.dimension_count", Meta::U32(5), "rope over 5"),
        ("attention.value_length", Meta::U32(2), "not supported"),
        ("expert_count", Meta::U32(8), "llama.expert_used_count is missing"),
    ] {
        let name = key(k);
        let needles: Vec<&str> = if needle == "rope over 5"
            || needle == "no multiple"
            || needle == "not supported"
            || needle.contains("expert")
        {
            vec![needle]
        } else {
            vec![needle, name.as_str(), "tiny.gguf"]
        };
        refused(&format!("{name} = {v:?}"), TinyLlama::new().set(&name, v.clone()), &needles);
    }
    refused("no block count", TinyLlama::new().remove("llama.block_count"), &["llama.block_count is missing"]);
    refused(
        "another architecture",
        TinyLlama::new().set("general.architecture", Meta::Str("qwen9".into())),
        &["'qwen9'"],
    );
    // keys of another type: named with the type, not read as absent or printed as Rust's debug text
    let arch = TinyLlama::new().set("general.architecture", Meta::U32(5));
    refused("a numeric architecture", arch, &["general.architecture is a u32, not a string", "tiny.gguf"]);
    let bos = TinyLlama::new().set("tokenizer.ggml.add_bos_token", Meta::Str("true".into()));
    refused("add_bos_token as text", bos, &["tokenizer.ggml.add_bos_token is a string, not a bool", "tiny.gguf"]);
    let model = TinyLlama::new().set("tokenizer.ggml.model", Meta::U32(1));
    refused("a numeric tokenizer model", model, &["tokenizer.ggml.model is a u32, not a string", "tiny.gguf"]);
    let pre = TinyLlama::new().set("tokenizer.ggml.pre", Meta::Strs(vec!["bogus".into()]));
    refused("a pre-tokenizer list", pre, &["tokenizer.ggml.pre is an array, not a string", "tiny.gguf"]);
    let kv = TinyLlama::new().set("llama.attention.head_count_kv", Meta::I32s(vec![2, 2]));
    refused("an array head count", kv, &["head_count_kv is an array, not an integer"]);
}

/// A mixture of experts (Mixtral's layout) loads and generates; its hostile variants are refused by key or tensor
/// before any weight moves: an expert count of 0 beside expert tensors, one past the tensors or past llama.cpp's
/// 512, more experts used than there are, an unknown gating function, experts stacked along another axis, a
/// router of another width, a non-finite weight scale, shared experts where the architecture has none, and an
/// architecture without experts whose file declares some.
#[test]
fn mixtures_of_experts_are_checked_by_key_and_tensor() {
    let m = load(&TinyLlama::moe()).unwrap();
    assert_eq!(m.config.experts.as_ref().map(|x| (x.n_expert, x.n_expert_used)), Some((4, 2)));
    let set = |k: &str, v: Meta| TinyLlama::moe().set(k, v);
    let zero = set("llama.expert_count", Meta::U32(0));
    refused("no experts beside expert tensors", zero, &["llama.expert_count is 0", "blk.0.ffn_gate_inp", "tiny.gguf"]);
    refused(
        "experts past the tensors",
        set("llama.expert_count", Meta::U32(6)),
        &["blk.0.ffn_gate_inp.weight is [4, 8], expected [6, 8]"],
    );
    refused(
        "too many experts",
        set("llama.expert_count", Meta::U32(100_000)),
        &["llama.expert_count is 100000: it must be from 1 to 512"],
    );
    refused(
        "more used than there are",
        set("llama.expert_used_count", Meta::U32(5)),
        &["llama.expert_used_count is 5: it must be from 1 to 4"],
    );
    refused("none used", set("llama.expert_used_count", Meta::U32(0)), &["llama.expert_used_count is 0"]);
    refused(
        "unknown gating",
        set("llama.expert_gating_func", Meta::U32(7)),
        &["llama.expert_gating_func is 7: not a known gating function"],
    );
    refused(
        "a NaN weight scale",
        set("llama.expert_weights_scale", Meta::F32(f32::NAN)),
        &["llama.expert_weights_scale is NaN"],
    );
    refused("shared experts", set("llama.expert_shared_count", Meta::U32(2)), &["2 shared experts", "not supported"]);
    let mut axis = TinyLlama::moe();
    axis.tensor("blk.0.ffn_gate_exps.weight").shape = vec![16, 4, 8];
    refused(
        "experts stacked along another axis",
        axis,
        &["blk.0.ffn_gate_exps.weight is [16, 4, 8], expected [4, 16, 8]"],
    );
    let mut router = TinyLlama::moe();
    router.tensor("blk.1.ffn_gate_inp.weight").shape = vec![4, 6];
    refused("a router of another width", router, &["blk.1.ffn_gate_inp.weight is [4, 6], expected [4, 8]"]);
    let qwen2 = rename_arch(TinyLlama::new().set("llama.expert_count", Meta::U32(4)), "qwen2");
    refused(
        "experts in a dense architecture",
        qwen2,
        &["a mixture of experts (qwen2.expert_count 4)", "not supported"],
    );
}

/// `t` with its architecture renamed (the keys under the new prefix).
fn rename_arch(mut t: TinyLlama, arch: &str) -> TinyLlama {
    let keys: Vec<String> = t.meta.keys().filter(|k| k.starts_with("llama.")).cloned().collect();
    for k in keys {
        let v = t.meta.remove(&k).unwrap();
        t.meta.insert(format!("{arch}.{}", &k["llama.".len()..]), v);
    }
    t.set("general.architecture", Meta::Str(arch.into()))
}

/// YaRN's settings (`rope.scaling.type` yarn, as Qwen2.5's long-context files have it) are checked by key; a file
/// with them loads and generates, one with a scaling type webtensor does not implement is refused by name.
#[test]
fn rope_scaling_settings_are_checked_by_key() {
    let yarn = || {
        TinyLlama::new()
            .set("llama.rope.scaling.type", Meta::Str("yarn".into()))
            .set("llama.rope.scaling.factor", Meta::F32(4.0))
            .set("llama.rope.scaling.original_context_length", Meta::U32(4096))
    };
    let mut m = load(&yarn()).expect("a YaRN file loads");
    let prompt = m.tokenizer.encode("hello the").unwrap();
    m.generate(&prompt, &GenerateOptions { max_tokens: 3, ..Default::default() }, |_, _| true).unwrap();
    for (k, v, needle) in [
        ("rope.scaling.original_context_length", Meta::U32(0), "from 1 to"),
        ("rope.scaling.yarn_ext_factor", Meta::F32(2.0), "from 0 to 1"),
        ("rope.scaling.yarn_beta_fast", Meta::F32(-1.0), "above 0"),
        ("rope.scaling.yarn_beta_slow", Meta::F32(f32::NAN), "finite"),
        ("rope.scaling.attn_factor", Meta::F32(0.0), "above 0"),
        ("rope.scaling.factor", Meta::F32(f32::INFINITY), "finite"),
    ] {
        let name = format!("llama.{k}");
        refused(&format!("{name} = {v:?}"), yarn().set(&name, v.clone()), &[needle, name.as_str(), "tiny.gguf"]);
    }
    let log_mul = yarn().set("llama.rope.scaling.yarn_log_multiplier", Meta::F32(0.1));
    refused("a YaRN log multiplier", log_mul, &["yarn_log_multiplier", "not supported"]);
    // without a type the factor scales linearly, as llama.cpp reads it (also under the old key)
    for key in ["llama.rope.scaling.factor", "llama.rope.scale_linear"] {
        let linear = |factor: f32| load(&TinyLlama::new().set(key, Meta::F32(factor))).unwrap();
        assert_eq!(linear(4.0).config.rope_scale, 0.25, "{key}");
        refused(&format!("{key} = 0"), TinyLlama::new().set(key, Meta::F32(0.0)), &[key, "above 0"]);
    }
    let none = TinyLlama::new().set("llama.rope.scaling.type", Meta::Str("none".into()));
    assert_eq!(load(&none.set("llama.rope.scaling.factor", Meta::F32(4.0))).unwrap().config.rope_scale, 1.0);
    let other = TinyLlama::new().set("llama.rope.scaling.type", Meta::Str("longrope".into()));
    refused("another scaling type", other, &["rope scaling 'longrope'", "not supported"]);
}

#[test]
fn tables_and_tensors_that_disagree_are_refused() {
    let n = 256 + 5;
    refused(
        "token list shorter than the embedding",
        TinyLlama::new()
            .set("tokenizer.ggml.token_type", Meta::I32s(vec![1; n]))
            .set("tokenizer.ggml.tokens", Meta::Strs((0..n - 1).map(|i| format!("t{i}")).collect())),
        &["tokenizer.ggml.tokens has 260 entries", "261 rows"],
    );
    refused(
        "merges of pieces not in the vocabulary",
        TinyLlama::new().set("tokenizer.ggml.merges", Meta::Strs(vec!["x y".into()])),
        &["tiny.gguf", "tokenizer (BPE)", "xy"],
    );
    refused(
        "tokens as one string",
        TinyLlama::new().set("tokenizer.ggml.tokens", Meta::Str("abc".into())),
        &["tokenizer.ggml.tokens is a string, not an array"],
    );
    refused(
        "eos past the vocabulary",
        TinyLlama::new().set("tokenizer.ggml.eos_token_id", Meta::U32(9999)),
        &["eos_token_id 9999"],
    );
    refused(
        "scores of another length",
        TinyLlama::new().set("tokenizer.ggml.token_type", Meta::I32s(vec![1; 3])),
        &["token_type has 3"],
    );
    let mut t = TinyLlama::new();
    t.tensor("blk.0.attn_q.weight").shape = vec![8, 9];
    refused("a weight of the wrong shape", t, &["blk.0.attn_q.weight", "expected [8, 8]"]);
    let mut t = TinyLlama::new();
    let norm = t.tensor("blk.1.ffn_norm.weight");
    norm.ggml_type = 26; // i32
    norm.bytes = Some(vec![0; 32]);
    refused("a norm of i32", t, &["blk.1.ffn_norm.weight", "int32", "no kernel"]);
    let mut t = TinyLlama::new();
    t.tensor("blk.0.attn_k.weight").offset = Some(0); // over token_embd.weight's bytes
    match t.file_result() {
        Err(Error::Format { message, .. }) => assert!(message.contains("overlap"), "{message}"),
        other => panic!("overlapping tensors: {other:?}"),
    }
}

/// A file with tensors its metadata does not describe (a block count below the blocks present, a stray tensor)
/// is refused naming them, as llama.cpp refuses it, where the extra blocks were dropped silently; a vocabulary
/// size of 0 is refused like any other that disagrees with the embedding.
#[test]
fn tensors_the_metadata_does_not_describe_are_refused() {
    refused(
        "block count 1 of 2 blocks",
        TinyLlama::new().set("llama.block_count", Meta::U32(1)),
        &["9 tensors of the file are not part of the model", "blk.1.", "block count"],
    );
    let mut stray = TinyLlama::new();
    stray.tensors.push(("blk.0.attn_q.bias.extra".into(), stray.tensors[1].1.clone()));
    refused("a stray tensor", stray, &["1 tensors of the file", "blk.0.attn_q.bias.extra"]);
    refused("vocab_size 0", TinyLlama::new().set("llama.vocab_size", Meta::U32(0)), &["llama.vocab_size is 0"]);
    let mut bert_stray = TinyLlama::bert();
    bert_stray.tensors.push(("blk.1.attn_q.weight".into(), bert_stray.tensors[5].1.clone()));
    let e = bert(&bert_stray).err().expect("a BERT file with a second block's tensor").to_string();
    assert!(e.contains("blk.1.attn_q.weight") && e.contains("not part of the model"), "{e}");
}

#[test]
fn vocabularies_that_would_drop_bytes_or_take_quadratic_time_are_handled() {
    // a byte-level vocabulary without 'A' would drop every A: refused
    let mut tokens: Vec<String> = match &TinyLlama::new().meta["tokenizer.ggml.tokens"] {
        Meta::Strs(v) => v.clone(),
        _ => unreachable!(),
    };
    tokens[b'A' as usize] = "not-A".into();
    refused(
        "no token for A",
        TinyLlama::new().set("tokenizer.ggml.tokens", Meta::Strs(tokens.clone())),
        &["byte 0x41"],
    );
    // without a control byte: loads, and text with that byte is an error instead of losing it
    tokens[b'A' as usize] = "A".into();
    tokens[4] = "not-4".into();
    let m = load(&TinyLlama::new().set("tokenizer.ggml.tokens", Meta::Strs(tokens))).unwrap();
    assert!(m.tokenizer.encode("a\u{4}b").unwrap_err().to_string().contains("0x04"));
    assert!(m.tokenizer.encode("ab").is_ok());
    // a SentencePiece vocabulary of long pieces: load time stays linear (pieces past 256 bytes are not split)
    let n = 300;
    let long: Vec<String> = (0..n).map(|i| format!("▁{}", "x".repeat(20_000 + i))).collect();
    let mut pieces: Vec<String> = (0..=255u8).map(|b| format!("<0x{b:02X}>")).collect();
    pieces.extend(long);
    let k = pieces.len();
    let t = TinyLlama::new()
        .set("tokenizer.ggml.model", Meta::Str("llama".into()))
        .set("tokenizer.ggml.tokens", Meta::Strs(pieces))
        .set("tokenizer.ggml.scores", Meta::F32s(vec![0.0; k]))
        .set("tokenizer.ggml.token_type", Meta::I32s(vec![1; k]))
        .set("tokenizer.ggml.eos_token_id", Meta::U32(0));
    let f = t.file_result().unwrap();
    let start = std::time::Instant::now();
    let tk = webtensor::models::Tokenizer::from_gguf(&f).unwrap();
    assert!(start.elapsed() < std::time::Duration::from_secs(2), "{:?} for {n} pieces of 20000 bytes", start.elapsed());
    // its 20 KB pieces do not lift the prompt bound past 256 bytes a token (a 1 MB piece made it 4 GB)
    let e = tk.encode_within(&"ab ".repeat(2000), 16).unwrap_err().to_string();
    assert!(e.contains("6000 bytes: more than 16 tokens of at most 256 bytes"), "{e}");
}

#[test]
fn a_template_that_does_not_compile_leaves_plain_generation_working() {
    let t = TinyLlama::new().set("tokenizer.chat_template", Meta::Str("{% for m in messages %}".into()));
    let mut m = load(&t).unwrap();
    assert!(m.chat_template().is_none());
    let e = m.chat_prompt(&[webtensor::models::Message::new("user", "hi")]).unwrap_err().to_string();
    assert!(e.contains("does not compile") && e.contains("tiny.gguf"), "{e}");
    // a template that raises, and a file without one: errors naming the file
    let raising = TinyLlama::new().set("tokenizer.chat_template", Meta::Str("{{ raise_exception('boom') }}".into()));
    let e = load(&raising).unwrap().chat_prompt(&[webtensor::models::Message::new("user", "hi")]).unwrap_err();
    assert!(e.to_string().contains("tiny.gguf: the chat template failed") && e.to_string().contains("boom"), "{e}");
    let none = load(&TinyLlama::new().remove("tokenizer.chat_template")).unwrap();
    let e = none.chat_prompt(&[webtensor::models::Message::new("user", "hi")]).unwrap_err().to_string();
    assert!(e.contains("tiny.gguf: the model file has no chat template"), "{e}");
    let prompt = m.tokenizer.encode("hello").unwrap();
    m.generate(&prompt, &GenerateOptions { max_tokens: 2, ..Default::default() }, |_, _| true).unwrap();
}

/// A prompt (rendered or given) longer than the context's tokens of the longest piece could be is refused before
/// it is tokenized (an 8 MB prompt took 2-4 GB to tokenize before it was found too long), naming both lengths;
/// one that could fit is tokenized and checked by its tokens as before.
#[test]
fn a_prompt_that_cannot_fit_is_refused_before_tokenizing() {
    let t =
        TinyLlama::new().set("tokenizer.chat_template", Meta::Str("{{ 'a ' * (messages|length * 4000000) }}".into()));
    let m = load(&t).unwrap();
    let before = common::peak_rss_kib();
    let e = m.chat_prompt(&[webtensor::models::Message::new("user", "hi")]).unwrap_err().to_string();
    assert!(e.contains("8000000 bytes") && e.contains("64 tokens"), "{e}");
    let long = "hello ".repeat(1 << 20);
    let e = m.tokenizer.encode_within(&long, m.context()).unwrap_err().to_string();
    assert!(e.contains("6291456 bytes"), "{e}");
    let grown = common::peak_rss_kib().saturating_sub(before);
    assert!(grown < 64 << 10, "tokenizing what cannot fit: peak memory grew by {grown} KiB");
    assert_eq!(m.tokenizer.encode_within("hello", 64).unwrap(), m.tokenizer.encode("hello").unwrap());
}

#[test]
fn a_context_larger_than_memory_is_refused_before_allocating() {
    let f = TinyLlama::new().file_result().unwrap();
    for ctx in [usize::MAX / 2, 1 << 40] {
        let options = LanguageModelOptions { context: ctx, ..Default::default() };
        let e = LanguageModel::from_gguf(&Device::cpu(), &f, options).err().expect("a huge context");
        let m = e.to_string();
        println!("context {ctx}: {m}");
        assert!(m.contains("KV cache") && (m.contains("overflows") || m.contains("GiB")), "{m}");
    }
}

/// A KV cache costs its size only as it fills: made zeroed lazily (it was zeroed, then copied: twice its size at
/// once, which turned a context that passed the memory check into an abort), so a 128 MiB cache raises the peak
/// memory by less than half its size (about 2 MiB) until used, and the model runs.
#[test]
fn a_kv_cache_costs_memory_as_it_fills() {
    let f = TinyLlama::new().file_result().unwrap();
    let before = common::peak_rss_kib();
    let options = LanguageModelOptions { context: 1 << 22, ..Default::default() };
    let mut m = LanguageModel::from_gguf(&Device::cpu(), &f, options).unwrap();
    let grown = common::peak_rss_kib().saturating_sub(before);
    println!("a KV cache of 4M positions (128 MiB): peak memory +{grown} KiB");
    // (other tests of this binary run beside it, each within a few MiB)
    assert!(grown < 64 << 10, "peak memory grew by {grown} KiB");
    let prompt = m.tokenizer.encode("hello").unwrap();
    m.generate(&prompt, &GenerateOptions { max_tokens: 2, ..Default::default() }, |_, _| true).unwrap();
}

#[test]
fn metadata_costs_a_small_factor_of_the_file() {
    // a file of 1,000,000 one-byte array elements (u8) and as many empty strings
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(2u64.to_le_bytes());
    let key = |b: &mut Vec<u8>, k: &str| {
        b.extend((k.len() as u64).to_le_bytes());
        b.extend(k.as_bytes());
    };
    key(&mut b, "a.bytes");
    b.extend(9u32.to_le_bytes().into_iter().chain(0u32.to_le_bytes()).chain(1_000_000u64.to_le_bytes()));
    b.extend(std::iter::repeat_n(7u8, 1_000_000));
    key(&mut b, "a.strings");
    b.extend(9u32.to_le_bytes().into_iter().chain(8u32.to_le_bytes()).chain(1_000_000u64.to_le_bytes()));
    b.extend(std::iter::repeat_n(0u8, 8_000_000));
    let file_len = b.len();
    let f = webtensor::gguf::GgufFile::from_bytes("big.gguf", webtensor::Bytes::from_vec(b)).unwrap();
    // the heap the parsed arrays hold (RSS would count the other tests running in this process)
    let held: usize = f
        .metadata
        .iter()
        .map(|(_, v)| match v.as_array() {
            Some(a) => match a.as_strings() {
                Some(s) => s.heap_bytes(),
                None => {
                    a.len() * std::mem::size_of_val(&a.get(0).and_then(|x| x.as_u64()).map(|x| x as u8).unwrap_or(0))
                }
            },
            None => 0,
        })
        .sum();
    assert_eq!(f.get("a.bytes").unwrap().as_array().unwrap().len(), 1_000_000);
    println!("metadata of a {file_len}-byte file holds {held} bytes");
    assert!(held < 2 * file_len, "{held} bytes for a {file_len}-byte file");
}

trait FileResult {
    fn file_result(&self) -> webtensor::Result<webtensor::gguf::GgufFile>;
}

impl FileResult for TinyLlama {
    fn file_result(&self) -> webtensor::Result<webtensor::gguf::GgufFile> {
        webtensor::gguf::GgufFile::from_bytes("tiny.gguf", webtensor::Bytes::from_vec(self.bytes()))
    }
}

/// Text that is part of a stop string never reaches the stream, even across tokens: the streamed pieces always
/// add up to the final text (llama-server's rule of holding back a possible prefix).
#[test]
fn stop_strings_never_leak_into_the_stream() {
    let mut m = load(&TinyLlama::new()).unwrap();
    let prompt = m.tokenizer.encode("hello the").unwrap();
    let opts = GenerateOptions { max_tokens: 12, ..Default::default() };
    let mut pieces = Vec::new();
    let free = m.generate(&prompt, &opts, |p, _| {
        pieces.push(p.to_string());
        true
    });
    let free = free.unwrap();
    assert_eq!(pieces.concat(), free.text);
    // stop strings spanning each boundary between two pieces, and one that never completes
    let mut at = 0;
    let mut stops: Vec<String> = Vec::new();
    for w in pieces.windows(2) {
        at += w[0].len();
        if let (Some(a), Some(b)) = (w[0].chars().last(), w[1].chars().next()) {
            stops.push(format!("{a}{b}"));
        }
    }
    stops.push(format!("{}\u{1}never", free.text.chars().last().unwrap_or('x')));
    // stop strings spanning three pieces (each token's text is searched only back as far as the longest could
    // begin), and the whole text
    for w in pieces.windows(3) {
        stops.push(w.concat());
    }
    stops.push(free.text.clone());
    assert!(!stops.is_empty(), "the tiny model's text: {:?} in {} pieces (at {at})", free.text, pieces.len());
    for stop in stops {
        m.reset();
        let opts = GenerateOptions { max_tokens: 12, stop: vec![stop.clone()], ..Default::default() };
        let mut streamed = String::new();
        let out = m.generate(&prompt, &opts, |p, _| {
            streamed.push_str(p);
            true
        });
        let out = out.unwrap();
        assert_eq!(streamed, out.text, "stop {stop:?}");
        assert!(!out.text.contains(&stop), "stop {stop:?} in {:?}", out.text);
        if out.stop == webtensor::models::StopReason::StopString {
            assert!(free.text.starts_with(&out.text), "{:?} vs {:?}", out.text, free.text);
        }
        // found where it first appears in the free text
        if let Some(at) = free.text.find(&stop) {
            assert_eq!(out.text, free.text[..at], "stop {stop:?}");
        }
    }
    // each stop string is looked for at every token: their number and length are bounded
    for (stop, what) in [(vec!["x".to_string(); 17], "17 stop strings"), (vec!["y".repeat(1025)], "1025 bytes")] {
        let opts = GenerateOptions { max_tokens: 4, stop, ..Default::default() };
        let e = m.generate(&prompt, &opts, |_, _| true).unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    }
}

/// A file's `general.sampling.*` keys become the chat defaults (llama.cpp's names and meanings); values of the
/// wrong type or out of range are listed as ignored and never used; a file without them gets the generic defaults.
#[test]
fn recommended_sampling_is_read_within_range() {
    use webtensor::models::SamplingOptions;
    let key = |k: &str| format!("general.sampling.{k}");
    let plain = load(&TinyLlama::new()).unwrap();
    assert!(plain.recommended_sampling().is_empty());
    assert_eq!(plain.chat_sampling(3), SamplingOptions::chat(3));

    let good = TinyLlama::new()
        .set(&key("temp"), Meta::F32(0.2))
        .set(&key("top_k"), Meta::I32(-1))
        .set(&key("top_p"), Meta::F32(0.8))
        .set(&key("penalty_last_n"), Meta::I32(32));
    let m = load(&good).unwrap();
    let s = m.chat_sampling(9);
    assert_eq!((s.temperature, s.top_k, s.top_p, s.repeat_last_n, s.seed), (0.2, 0, 0.8, 32, 9));
    assert_eq!(s.min_p, SamplingOptions::chat(9).min_p, "keys the file lacks keep the generic defaults");
    assert!(m.recommended_sampling().ignored.is_empty());
    assert!(s.validate().is_ok());

    let bad = TinyLlama::new()
        .set(&key("temp"), Meta::F32(f32::NAN))
        .set(&key("top_p"), Meta::F32(5.0))
        .set(&key("min_p"), Meta::Str("high".into()))
        .set(&key("penalty_repeat"), Meta::F32(-1.0))
        .set(&key("penalty_last_n"), Meta::I32(-7))
        .set(&key("top_k"), Meta::F32s(vec![1.0; 1000]));
    let m = load(&bad).unwrap();
    let r = m.recommended_sampling();
    assert!(r.is_empty(), "{r:?}");
    assert_eq!(r.ignored.len(), 6, "{:?}", r.ignored);
    assert!(r.ignored.iter().any(|i| i == "general.sampling.top_k = array value"), "{:?}", r.ignored);
    assert!(r.ignored.iter().all(|i| i.len() < 60), "no value printed whole: {:?}", r.ignored);
    assert_eq!(m.chat_sampling(1), SamplingOptions::chat(1));
}

/// Rope frequency factors (`rope_freqs.weight`, Llama 3's rope scaling) divide each pair's angle: they must be
/// f32 `[rope dims / 2]`, finite and above 0; valid ones load.
#[test]
fn rope_factors_that_cannot_divide_are_refused() {
    let with = |ggml_type: u32, shape: &[usize], values: &[f32]| {
        factors(TinyLlama::new(), "rope_freqs", ggml_type, shape, values)
    };
    // heads of 4 dims: 2 pairs
    assert!(load(&with(0, &[2], &[1.0, 8.0])).is_ok());
    refused("3 factors", with(0, &[3], &[1.0, 2.0, 3.0]), &["rope_freqs.weight", "[3]", "expected [2]", "tiny.gguf"]);
    refused("f16 factors", with(1, &[2], &[1.0, 2.0]), &["rope_freqs.weight", "float16", "expected float32"]);
    for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        refused(&format!("a factor {bad}"), with(0, &[2], &[1.0, bad]), &["rope_freqs.weight[1]", "above 0"]);
    }
    // LongRoPE (Phi-3's 128k models): both tables, each checked as rope_freqs is
    let long_rope = |long: &[f32], short: Option<&[f32]>| {
        let t = factors(TinyLlama::new(), "rope_factors_long", 0, &[long.len()], long);
        match short {
            Some(s) => factors(t, "rope_factors_short", 0, &[s.len()], s),
            None => t,
        }
    };
    assert!(load(&long_rope(&[1.0, 4.0], Some(&[1.0, 1.5]))).is_ok());
    refused("long factors alone", long_rope(&[1.0, 4.0], None), &["rope_factors_short.weight", "tiny.gguf"]);
    refused("3 long factors", long_rope(&[1.0, 2.0, 3.0], Some(&[1.0, 1.0])), &["rope_factors_long.weight", "[3]"]);
    refused("a short factor -1", long_rope(&[1.0, 2.0], Some(&[1.0, -1.0])), &["rope_factors_short.weight[1]"]);
}

/// `t` with the tensor `{name}.weight` of `values` (f32 for ggml type 0, else f16).
fn factors(mut t: TinyLlama, name: &str, ggml_type: u32, shape: &[usize], values: &[f32]) -> TinyLlama {
    let bytes = if ggml_type == 0 {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    } else {
        values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect()
    };
    let spec = common::tiny_gguf::TensorSpec { ggml_type, shape: shape.to_vec(), bytes: Some(bytes), offset: None };
    t.tensors.push((format!("{name}.weight"), spec));
    t
}

/// The tiny BERT GGUF `t` as an embedder on the CPU backend.
fn bert(t: &TinyLlama) -> webtensor::Result<webtensor::models::bert::SentenceEmbedder> {
    let f = webtensor::gguf::GgufFile::from_bytes("tiny-bert.gguf", webtensor::Bytes::from_vec(t.bytes()))?;
    webtensor::models::bert::SentenceEmbedder::from_gguf(&Device::cpu(), &f, Default::default())
}

/// BERT GGUF files (`embed --model x.gguf`) a careless converter or a hostile author could write: each
/// hyperparameter out of range or disagreeing with another, special token ids past the vocabulary, tensors of
/// the wrong shape or a dtype no kernel takes, a causal or token-level model. One error naming the file and the
/// key or tensor each; the valid file embeds (unit vectors).
#[test]
fn bert_files_are_checked_by_key_and_tensor() {
    let mut e = bert(&TinyLlama::bert()).expect("the valid tiny BERT loads");
    let v = e.embed(&["hello world!", "a"]).unwrap();
    for row in &v {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!(row.len() == 8 && (norm - 1.0).abs() < 1e-4, "{row:?}");
    }
    let count = |key: &str, v: Meta, needles: &[&'static str]| {
        (format!("{key} = {v:?}"), TinyLlama::bert().set(key, v), needles.to_vec())
    };
    let mut cases = vec![
        count("bert.block_count", Meta::U32(0), &["bert.block_count is 0"]),
        count("bert.block_count", Meta::I32(-3), &["bert.block_count is -3"]),
        count("bert.embedding_length", Meta::U64(1 << 40), &["bert.embedding_length"]),
        count("bert.attention.head_count", Meta::U32(3), &["head_count 3 does not divide", "embedding_length 8"]),
        count("bert.attention.head_count", Meta::Str("two".into()), &["bert.attention.head_count is a string"]),
        count("bert.context_length", Meta::U32(1), &["bert.context_length is 1"]),
        count("bert.context_length", Meta::U32(u32::MAX), &["bert.context_length"]),
        count("bert.context_length", Meta::U32(32), &["position_embd.weight"]),
        count("bert.feed_forward_length", Meta::U32(0), &["bert.feed_forward_length is 0"]),
        count("bert.attention.layer_norm_epsilon", Meta::F32(f32::NAN), &["layer_norm_epsilon is NaN"]),
        count("bert.attention.layer_norm_epsilon", Meta::F32(-1e-5), &["layer_norm_epsilon is -1e-5: it must be"]),
        count("bert.attention.causal", Meta::Bool(true), &["bert.attention.causal is true"]),
        count("bert.pooling_type", Meta::U32(0), &["bert.pooling_type is 0"]),
        count("bert.pooling_type", Meta::U32(77), &["bert.pooling_type is 77: 1 mean"]),
        count("bert.pooling_type", Meta::Str("cls".into()), &["bert.pooling_type is a string, not an integer"]),
        count("tokenizer.ggml.model", Meta::Str("gpt2".into()), &["tokenizer model 'gpt2'"]),
        count("tokenizer.ggml.cls_token_id", Meta::U32(9), &["cls_token_id 9 is outside the vocabulary"]),
        count("tokenizer.ggml.unknown_token_id", Meta::U32(u32::MAX), &["unknown_token_id"]),
        count("tokenizer.ggml.tokens", Meta::Strs(vec!["[CLS]".into()]), &["token_embd.weight has 9 rows", "1 tokens"]),
        count("tokenizer.ggml.tokens", Meta::I32s(vec![1; 9]), &["tokenizer.ggml.tokens is missing or not strings"]),
        count("general.architecture", Meta::Str("nomic-bert".into()), &["nomic-bert"]),
    ];
    let mut tensor =
        |what: &str, name: &str, f: &dyn Fn(&mut common::tiny_gguf::TensorSpec), needles: &[&'static str]| {
            let mut t = TinyLlama::bert();
            f(t.tensor(name));
            cases.push((what.to_string(), t, needles.to_vec()));
        };
    tensor(
        "a query weight of the wrong shape",
        "blk.0.attn_q.weight",
        &|t| t.shape = vec![8, 9],
        &["blk.0.attn_q.weight"],
    );
    tensor("a bias of the wrong length", "blk.0.ffn_up.bias", &|t| t.shape = vec![15], &["blk.0.ffn_up.bias"]);
    tensor(
        "a norm of i32",
        "blk.0.layer_output_norm.weight",
        &|t| {
            t.ggml_type = 26;
            t.bytes = Some(vec![0; 32]);
        },
        &["blk.0.layer_output_norm.weight", "int32"],
    );
    tensor("a token-type table of no rows", "token_types.weight", &|t| t.shape = vec![0, 8], &["token_types.weight"]);
    let mut missing = TinyLlama::bert();
    missing.tensors.retain(|(n, _)| n != "blk.0.ffn_down.weight");
    cases.push(("a missing weight".into(), missing, vec!["blk.0.ffn_down.weight"]));
    for (what, t, needles) in cases {
        match bert(&t) {
            Ok(_) => panic!("{what}: loaded"),
            Err(e) => {
                let m = e.to_string();
                println!("{what}: {m}");
                assert!(!m.contains('\n') && m.contains("tiny-bert.gguf"), "{what}: one line naming the file: {m}");
                for n in &needles {
                    assert!(m.contains(n), "{what}: {m:?} lacks {n:?}");
                }
            }
        }
    }
}

/// `t` with every value of tensor `name` (f32, `n` values) `value`, and its first `value0`.
fn filled(mut t: TinyLlama, name: &str, value: f32, value0: f32) -> TinyLlama {
    let n: usize = t.tensor(name).shape.iter().product();
    let mut v = vec![value; n];
    v[0] = value0;
    t.tensor(name).bytes = Some(v.iter().flat_map(|x| x.to_le_bytes()).collect());
    t
}

/// Weights that are not finite are refused at load, naming the file, the tensor and the element, as llama.cpp's
/// `--check-tensors` does (a NaN weight made finite, wrong tokens: an activation quantized for an integer dot
/// product rounds NaN to 0); finite weights whose activations overflow make greedy decoding, sampling and
/// embedding an error, not a token chosen from NaN or infinite logits.
#[test]
fn weights_and_outputs_that_are_not_finite_are_errors() {
    let e = TinyLlama::WIDTH;
    for (name, v) in
        [("blk.0.attn_q.weight", f32::NAN), ("output_norm.weight", f32::INFINITY), ("token_embd.weight", f32::NAN)]
    {
        let t = filled(TinyLlama::new(), name, 0.1, v);
        refused(&format!("{name} {v}"), t, &["tiny.gguf", name, "element 0", "must be finite"]);
    }
    let t = filled(TinyLlama::bert(), "blk.0.attn_k.bias", 0.1, f32::NAN);
    let m = bert(&t).err().expect("a NaN bias is refused").to_string();
    assert!(m.contains("tiny-bert.gguf") && m.contains("blk.0.attn_k.bias") && m.contains("must be finite"), "{m}");
    // finite weights, infinite logits; finite weights whose attention scores overflow (inf - inf: NaN, which an
    // attention's max and an 8-bit activation's rounding dropped: finite tokens, wrong)
    for (name, v) in [("output_norm.weight", 3e38), ("blk.0.attn_norm.weight", 1e30)] {
        let mut m = load(&filled(TinyLlama::new(), name, v, v)).expect("finite weights load");
        let prompt = m.tokenizer.encode("hello the").unwrap();
        for temperature in [0.0, 0.8] {
            let sampling = webtensor::models::SamplingOptions { temperature, ..Default::default() };
            let opts = GenerateOptions { max_tokens: 3, sampling, ..Default::default() };
            let r = m.generate(&prompt, &opts, |_, _| true);
            let err =
                r.err().unwrap_or_else(|| panic!("{name} T {temperature}: generated from logits that are not finite"));
            assert!(err.to_string().contains("not finite"), "{err}");
        }
    }
    let mut emb = bert(&filled(TinyLlama::bert(), "token_embd_norm.weight", 3e38, 3e38)).unwrap();
    let err = emb.embed(&["hello world"]).expect_err("an embedding that is not finite");
    assert!(err.to_string().contains("not finite"), "{err} ({e})");
}
