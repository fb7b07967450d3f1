//! A model's tokenizer rebuilt from its GGUF metadata with the `tokenizers` crate (Hugging Face's), as
//! llama.cpp's `llama_vocab` reads it: byte-level BPE (`tokenizer.ggml.model = gpt2`) with the pre-tokenizer
//! `tokenizer.ggml.pre` names, or a SentencePiece vocabulary with scores (`llama`), whose merges are derived from
//! the scores as llama.cpp's SPM tokenizer ranks them. Control tokens (type 3) are special tokens, matched in the
//! text and skipped when decoding with `skip_special`; user-defined tokens (type 4) are matched in the text.

use crate::error::{Error, Result};
use crate::io::gguf::{GgufFile, MetaValue};
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{Prepend, Replace};
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior};

/// GPT-2's pre-tokenizer regex (also SmolLM2's, after splitting digits).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Llama 3's (`llama-bpe`).
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's and Qwen2.5's (`qwen2`): Llama 3's with each digit alone.
const QWEN2: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5's (`qwen35`): Qwen2's with combining marks (`\p{M}`) inside words and out of punctuation runs.
const QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// tiktoken's o200k_base (and o200k_harmony's): GPT-4o, gpt-oss, Phi-4-mini; Llama 4's `O200K_PATTERN`.
const O200K: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Mistral's Tekken (Mistral Nemo, Small 3.x): o200k's without contractions, each digit alone.
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// DeepSeek V3's three splits in turn: digits by up to three; runs of CJK ideographs, hiragana and katakana; then
/// words, punctuation and spaces.
const DEEPSEEK3: [&str; 3] = [
    r"\p{N}{1,3}",
    "[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+",
    r##"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
];

/// llama.cpp's own `default` pre-tokenizer: these regexes in turn, each splitting the pieces of the one before.
const LLAMA_CPP_DEFAULT: [&str; 4] = [
    r"[\p{P}\$\+<=>\^~\|]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    r"\p{N}+",
    r"[0-9][0-9][0-9]",
];

/// One step of a byte-level pre-tokenizer.
enum Step {
    /// The pieces so far split by a regex, matches and gaps both kept (`Split`, behavior `Isolated`).
    Split(&'static str),
    /// GPT-2's byte-to-character map (`ByteLevel`), with GPT-2's own regex split first where set.
    ByteLevel { regex: bool },
}

/// What a `tokenizer.ggml.pre` name stands for: the model's tokenizer.json as the `tokenizers` package runs it
/// (its normalizer, pre-tokenizer steps and BPE's `ignore_merges`), which llama.cpp's type of that name matches
/// (its regexes rewritten for `std::regex`; where the two differ, the tokenizer.json is followed).
struct Recipe {
    names: &'static [&'static str],
    steps: &'static [Step],
    /// Unicode NFC before splitting (Qwen2's, Qwen3.5's and GPT-NeoX's files; llama.cpp has no normalizer).
    nfc: bool,
    /// A piece that is a token itself is that token, whatever the merges (Llama 3, Tekken).
    ignore_merges: bool,
    /// llama.cpp's BOS default for the name where the file does not say (`add_bos_token`).
    bos: bool,
}

/// Every pre-tokenizer name read, with llama.cpp's names of the same type.
const RECIPES: &[Recipe] = {
    use Step::{ByteLevel as B, Split as S};
    const LLAMA3_STEPS: &[Step] = &[S(LLAMA3), B { regex: false }];
    const O200K_STEPS: &[Step] = &[S(O200K), B { regex: false }];
    const QWEN2_STEPS: &[Step] = &[S(QWEN2), B { regex: false }];
    const GPT2_STEPS: &[Step] = &[B { regex: true }];
    let plain = Recipe { names: &[], steps: &[], nfc: false, ignore_merges: false, bos: false };
    &[
        Recipe {
            names: &["default"],
            steps: &[
                S(LLAMA_CPP_DEFAULT[0]),
                S(LLAMA_CPP_DEFAULT[1]),
                S(LLAMA_CPP_DEFAULT[2]),
                S(LLAMA_CPP_DEFAULT[3]),
                B { regex: false },
            ],
            ..plain
        },
        Recipe { names: &["gpt2", "gpt-2", "phi-2"], steps: GPT2_STEPS, ..plain },
        // GPT-NeoX's tokenizer (OLMo, OLMoE-0924, MPT): GPT-2's split after NFC
        Recipe { names: &["olmo", "mpt"], steps: GPT2_STEPS, nfc: true, ..plain },
        Recipe { names: &["smollm", "starcoder"], steps: &[S(r"\p{N}"), S(GPT2), B { regex: false }], ..plain },
        Recipe {
            names: &["llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral"],
            steps: LLAMA3_STEPS,
            ignore_merges: true,
            bos: true,
            ..plain
        },
        // cl100k's split without Llama 3's flags (DBRX, OLMoE-0125, Phi-4)
        Recipe { names: &["dbrx", "smaug-bpe"], steps: LLAMA3_STEPS, ..plain },
        Recipe { names: &["qwen2", "deepseek-r1-qwen"], steps: QWEN2_STEPS, nfc: true, ..plain },
        Recipe { names: &["qwen35"], steps: &[S(QWEN35), B { regex: false }], nfc: true, ..plain },
        Recipe { names: &["gpt-4o", "llama4"], steps: O200K_STEPS, ..plain },
        Recipe { names: &["tekken"], steps: &[S(TEKKEN), B { regex: false }], ignore_merges: true, bos: true, ..plain },
        Recipe {
            names: &["deepseek-v3"],
            steps: &[S(DEEPSEEK3[0]), S(DEEPSEEK3[1]), S(DEEPSEEK3[2]), B { regex: false }],
            ..plain
        },
    ]
};

/// The recipe of pre-tokenizer `pre`.
fn recipe(f: &GgufFile, pre: &str) -> Result<&'static Recipe> {
    RECIPES.iter().find(|r| r.names.contains(&pre)).ok_or_else(|| {
        let known: Vec<&str> = RECIPES.iter().flat_map(|r| r.names.iter().copied()).collect();
        fmt_err(f, format!("pre-tokenizer '{pre}' (tokenizer.ggml.pre) is not supported ({})", known.join(", ")))
    })
}

/// Tokens that end a generation wherever a vocabulary has them as control tokens (llama.cpp's list, less its
/// rarer entries).
const EOG_NAMES: [&str; 9] = [
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
];

/// Harmony's tokens that frame a message (gpt-oss), printed in the output rather than skipped as special.
const HARMONY_FRAMING: [&str; 4] = ["<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"];

/// Longest SentencePiece piece (bytes) derived from merges (SentencePiece's own limit is 16 characters).
const MAX_MERGED_PIECE: usize = 256;

/// A tokenizer with the special ids generation needs.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Prepended to a prompt when the metadata says so (`tokenizer.ggml.add_bos_token`).
    pub bos: Option<u32>,
    /// Ends generation: the end-of-sequence id and the end-of-turn id where they differ.
    pub eog: Vec<u32>,
    /// The text of `bos` and of the end-of-sequence token, for chat templates.
    pub bos_text: String,
    pub eos_text: String,
    /// Control bytes the byte-level vocabulary has no token for (text with one is refused, not cut).
    missing_bytes: Vec<u8>,
    /// The most bytes of text one token can stand for (the longest piece), where every byte of any text has a
    /// token (byte-level BPE, SentencePiece with byte fallback); `None` where unknown text could fold into one
    /// token of any length.
    max_piece_bytes: Option<usize>,
}

/// Bytes of text a token is taken to cover at most when a prompt is checked against a context before it is
/// tokenized: the vocabulary's longest piece, but never more than this (a sloppy vocabulary's megabyte-long
/// piece, or a SentencePiece one that folds unknown text into one token, would leave no bound); no real text
/// averages more than a few bytes a token.
const MAX_TOKEN_BYTES: usize = 256;

fn fmt_err(f: &GgufFile, message: String) -> Error {
    Error::Format { path: f.source().into(), message }
}

fn tk_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument { op: "tokenizer", reason: format!("{what}: {e}") }
}

/// The string value of `key`, None when absent; an error naming its type when it is not a string.
fn text_key<'a>(f: &'a GgufFile, key: &str) -> Result<Option<&'a str>> {
    match f.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .map(Some)
            .ok_or_else(|| fmt_err(f, format!("metadata {key} is {}, not a string", v.a_type_name()))),
    }
}

fn strings<'a>(f: &'a GgufFile, key: &str) -> Result<Vec<&'a str>> {
    let arr = match f.get(key) {
        None => return Err(fmt_err(f, format!("metadata {key} is missing"))),
        Some(v) => {
            v.as_array().ok_or_else(|| fmt_err(f, format!("metadata {key} is {}, not an array", v.a_type_name())))?
        }
    };
    let strings = arr
        .as_strings()
        .ok_or_else(|| fmt_err(f, format!("{key} is an array of {}, not of strings", arr.element_type_name())))?;
    Ok(strings.iter().collect())
}

fn numbers(f: &GgufFile, key: &str, n: usize) -> Result<Option<Vec<f64>>> {
    let Some(arr) = f.get(key).and_then(MetaValue::as_array) else { return Ok(None) };
    if arr.len() != n {
        return Err(fmt_err(f, format!("{key} has {} entries for {n} tokens", arr.len())));
    }
    let v =
        arr.to_f64s().ok_or_else(|| fmt_err(f, format!("{key} holds {}s, not numbers", arr.element_type_name())))?;
    Ok(Some(v))
}

impl Tokenizer {
    /// The tokenizer of the model in `f`.
    ///
    /// # Errors
    /// [`Error::Format`] when the vocabulary metadata is missing or inconsistent, or names a tokenizer model or
    /// pre-tokenizer this reader does not know (the message lists the known ones).
    pub fn from_gguf(f: &GgufFile) -> Result<Tokenizer> {
        let tokens = strings(f, "tokenizer.ggml.tokens")?;
        let types = numbers(f, "tokenizer.ggml.token_type", tokens.len())?.unwrap_or_default();
        let kind = text_key(f, "tokenizer.ggml.model")?.unwrap_or("(none)");
        let (mut inner, missing_bytes, default_bos) = match kind {
            "gpt2" => byte_level_bpe(f, &tokens)?,
            "llama" => (sentencepiece_bpe(f, &tokens, &types)?, vec![], true),
            other => return Err(fmt_err(f, format!("tokenizer model '{other}' is not supported (gpt2, llama)"))),
        };
        // harmony's message framing (gpt-oss) is printed, as llama.cpp renders it, so that its channels can be told
        // apart (models::reasoning); `<|end|>` ends a message there, not the generation
        let has = |name: &str| tokens.contains(&name);
        let harmony = has("<|return|>") && has("<|call|>");
        let rendered = |t: &str| HARMONY_FRAMING.contains(&t) || (harmony && t == "<|end|>");
        let added: Vec<AddedToken> = (0..tokens.len())
            .filter(|&i| matches!(types.get(i).map(|&t| t as i64), Some(3) | Some(4)))
            .map(|i| AddedToken::from(tokens[i].to_string(), types[i] as i64 == 3 && !rendered(tokens[i])))
            .collect();
        inner.add_special_tokens(added).map_err(|e| fmt_err(f, format!("tokenizer (special tokens): {e}")))?;
        for key in ["bos", "eos", "eot", "unknown", "padding"].map(|k| format!("tokenizer.ggml.{k}_token_id")) {
            match f.get(&key).map(|v| v.as_u64()) {
                Some(Some(i)) if i as usize >= tokens.len() => {
                    return Err(fmt_err(f, format!("{key} {i} is outside the vocabulary of {} tokens", tokens.len())))
                }
                Some(None) => return Err(fmt_err(f, format!("{key} is not a token id"))),
                _ => {}
            }
        }
        let id = |key: &str| f.get(key).and_then(MetaValue::as_u64).filter(|&i| (i as usize) < tokens.len());
        let add_bos = match f.get("tokenizer.ggml.add_bos_token") {
            None => default_bos,
            Some(v) => v.as_bool().ok_or_else(|| {
                fmt_err(f, format!("metadata tokenizer.ggml.add_bos_token is {}, not a bool", v.a_type_name()))
            })?,
        };
        let bos = id("tokenizer.ggml.bos_token_id").map(|i| i as u32);
        let eos = id("tokenizer.ggml.eos_token_id").map(|i| i as u32);
        let mut eog: Vec<u32> =
            [eos, id("tokenizer.ggml.eot_token_id").map(|i| i as u32)].into_iter().flatten().collect();
        // chat models often end a turn with a token other than eos (llama.cpp adds these by name too)
        for name in EOG_NAMES.iter().filter(|&&n| !(harmony && n == "<|end|>")) {
            if let Some(i) = tokens.iter().position(|t| t == name) {
                if !eog.contains(&(i as u32)) && types.get(i).map(|&t| t as i64) == Some(3) {
                    eog.push(i as u32);
                }
            }
        }
        // every byte has a token: byte-level BPE (missing bytes are refused), or SentencePiece's byte pieces
        let byte_fallback = || {
            let pieces: std::collections::HashSet<&str> = tokens.iter().copied().filter(|t| t.len() == 6).collect();
            (0..=255u8).all(|b| pieces.contains(format!("<0x{b:02X}>").as_str()))
        };
        let max_piece_bytes = (kind == "gpt2" || byte_fallback()).then(|| tokens.iter().map(|t| t.len()).max());
        let text = |i: Option<u32>| i.map(|i| tokens[i as usize].to_string()).unwrap_or_default();
        Ok(Tokenizer {
            inner,
            bos: bos.filter(|_| add_bos),
            bos_text: text(bos),
            eos_text: text(eos),
            eog,
            missing_bytes,
            max_piece_bytes: max_piece_bytes.flatten(),
        })
    }

    /// The ids of `text`, with the BOS id first when the model wants one. Special tokens written in the text
    /// (`<|im_start|>`) are matched as such.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for text with a control byte the vocabulary has no token for (it would be
    /// dropped), or if the tokenizer fails (it does not on UTF-8 text).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        if let Some(b) = text.bytes().find(|b| self.missing_bytes.contains(b)) {
            let reason = format!("the text has byte 0x{b:02X}, for which the model's vocabulary has no token");
            return Err(Error::InvalidArgument { op: "tokenizer", reason });
        }
        let enc = self.inner.encode(text, false).map_err(|e| tk_err("encode", e))?;
        Ok(self.bos.into_iter().chain(enc.get_ids().iter().copied()).collect())
    }

    /// [`Tokenizer::encode`] of a text that must fit in `max_tokens` tokens: a text longer than `max_tokens` of
    /// the vocabulary's longest pieces (or of 256 bytes, whichever is less) is refused before it is tokenized (tokenizing costs a few hundred bytes of
    /// memory a byte: a 16 MB prompt took 4.4 GB to be found too long).
    ///
    /// # Errors
    /// As [`Tokenizer::encode`], and [`Error::InvalidArgument`] naming both lengths for a text that cannot fit.
    pub fn encode_within(&self, text: &str, max_tokens: usize) -> Result<Vec<u32>> {
        let piece = self.max_piece_bytes.map_or(MAX_TOKEN_BYTES, |p| p.clamp(1, MAX_TOKEN_BYTES));
        let most = max_tokens.saturating_mul(piece);
        if text.len() > most {
            let reason = format!(
                "the text has {} bytes: more than {max_tokens} tokens of at most {piece} bytes each can hold",
                text.len()
            );
            return Err(Error::InvalidArgument { op: "tokenizer", reason });
        }
        self.encode(text)
    }

    /// The text of `ids`; special tokens are left out when `skip_special`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an id outside the vocabulary.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner.decode(ids, skip_special).map_err(|e| tk_err("decode", e))
    }

    /// Tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Whether `id` ends generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// The `tokenizers` crate's tokenizer underneath.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// GPT-2's byte-level alphabet: the character byte `b` is written as (printable bytes as themselves, the others
/// shifted past U+00FF), as `tokenizers`' ByteLevel pre-tokenizer maps them.
fn byte_level_char(b: u8) -> char {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    if printable(b) {
        return char::from(b);
    }
    let shift = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + shift).expect("below U+0200")
}

/// The byte-level BPE tokenizer, the bytes its vocabulary has no token for, and whether its pre-tokenizer's models
/// begin with a BOS where the file does not say.
fn byte_level_bpe(f: &GgufFile, tokens: &[&str]) -> Result<(tokenizers::Tokenizer, Vec<u8>, bool)> {
    let vocab: tokenizers::models::bpe::Vocab =
        tokens.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
    // a byte without its token would be dropped from the text without a word (by `tokenizers` and llama.cpp
    // alike): a vocabulary without one that printable text needs is refused; one without some control bytes (as
    // SmolLM2's lacks 0x04), bytes UTF-8 never has (0xC0, 0xC1, 0xF5..) or that lead only to planes 4-16 (0xF1..0xF4) is kept, and text with a missing
    // control byte is refused when encoded
    let mut utf8 = [0u8; 4];
    let missing: Vec<u8> =
        (0..=255u8).filter(|&b| !vocab.contains_key(&*byte_level_char(b).encode_utf8(&mut utf8))).collect();
    let needed = |b: u8| matches!(b, 0x20..=0x7E | 0x80..=0xBF | 0xC2..=0xF0) || b == b'\n' || b == b'\t';
    if let Some(&b) = missing.iter().find(|&&b| needed(b)) {
        return Err(fmt_err(
            f,
            format!(
                "the byte-level vocabulary (tokenizer.ggml.tokens) has no token for byte 0x{b:02X} ('{}')",
                byte_level_char(b)
            ),
        ));
    }
    let merges = strings(f, "tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| {
            // "a b": split at the first space after the first character (a token itself may be a space)
            let first = m.chars().next().map_or(0, char::len_utf8);
            let at = m[first..]
                .find(' ')
                .map(|i| i + first)
                .ok_or_else(|| fmt_err(f, format!("merge '{m}' has no space")))?;
            Ok((m[..at].to_string(), m[at + 1..].to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    let recipe = recipe(f, text_key(f, "tokenizer.ggml.pre")?.unwrap_or("default"))?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(recipe.ignore_merges)
        .build()
        .map_err(|e| fmt_err(f, format!("tokenizer (BPE): {e}")))?;
    let steps = recipe
        .steps
        .iter()
        .map(|step| match *step {
            Step::Split(re) => Split::new(SplitPattern::Regex(re.into()), SplitDelimiterBehavior::Isolated, false)
                .map(PreTokenizerWrapper::from)
                .map_err(|e| fmt_err(f, format!("tokenizer (regex): {e}"))),
            Step::ByteLevel { regex } => Ok(PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, true, regex))),
        })
        .collect::<Result<Vec<_>>>()?;
    let mut t = tokenizers::Tokenizer::new(bpe);
    if recipe.nfc {
        // the tokenizer.json composes the text first (llama.cpp does not: a decomposed accent differs there)
        t.with_normalizer(Some(NormalizerWrapper::NFC(tokenizers::normalizers::unicode::NFC)))
            .map_err(|e| fmt_err(f, format!("tokenizer (normalizer): {e}")))?;
    }
    t.with_pre_tokenizer(Some(Sequence::new(steps)));
    t.with_decoder(Some(ByteLevel::default()));
    Ok((t, missing, recipe.bos))
}

/// SentencePiece's BPE from a vocabulary with scores: a merge of two pieces ranks by the score of the piece it
/// makes (llama.cpp's `llm_tokenizer_spm` merges the best-scoring pair first), bytes fall back to `<0xNN>` tokens.
fn sentencepiece_bpe(f: &GgufFile, tokens: &[&str], types: &[f64]) -> Result<tokenizers::Tokenizer> {
    let scores = numbers(f, "tokenizer.ggml.scores", tokens.len())?
        .ok_or_else(|| fmt_err(f, "metadata tokenizer.ggml.scores is missing".into()))?;
    let vocab: tokenizers::models::bpe::Vocab =
        tokens.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
    // without every <0xNN> byte token, bytes must fall back to the unknown token (as llama.cpp's SPM does)
    let unk = f.get("tokenizer.ggml.unknown_token_id").and_then(MetaValue::as_u64);
    if let Some(unk) = unk.filter(|&u| u as usize >= tokens.len()) {
        return Err(fmt_err(
            f,
            format!("tokenizer.ggml.unknown_token_id {unk} is outside the {} tokens", tokens.len()),
        ));
    }
    if unk.is_none() {
        if let Some(b) = (0..=255u8).find(|b| !vocab.contains_key(&format!("<0x{b:02X}>"))) {
            return Err(fmt_err(
                f,
                format!(
                    "the SentencePiece vocabulary has no byte token <0x{b:02X}> and no unknown token to fall back to"
                ),
            ));
        }
    }
    let mut ranked: Vec<(f64, u32, String, String)> = Vec::new();
    for (i, piece) in tokens.iter().enumerate() {
        if types.get(i).is_some_and(|&t| t as i64 != 1) {
            continue; // only normal pieces come from merges
        }
        // a piece is made by merging two; trying every split of a long one costs the square of its length, and
        // SentencePiece's pieces are at most 16 characters (its max_piece_length): longer ones are never merged to
        if piece.len() > MAX_MERGED_PIECE {
            continue;
        }
        for (at, _) in piece.char_indices().skip(1) {
            let (a, b) = piece.split_at(at);
            if vocab.contains_key(a) && vocab.contains_key(b) {
                ranked.push((scores[i], i as u32, a.to_string(), b.to_string()));
            }
        }
    }
    ranked.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    let merges = ranked.into_iter().map(|(_, _, a, b)| (a, b)).collect();
    let unk = unk.and_then(|i| tokens.get(i as usize));
    let mut builder = BPE::builder().vocab_and_merges(vocab, merges).byte_fallback(true);
    if let Some(u) = unk {
        builder = builder.unk_token(u.to_string());
    }
    let bpe = builder.build().map_err(|e| fmt_err(f, format!("tokenizer (BPE): {e}")))?;
    let mut t = tokenizers::Tokenizer::new(bpe);
    let space = f.get("tokenizer.ggml.add_space_prefix").and_then(MetaValue::as_bool).unwrap_or(true);
    let mut norm: Vec<NormalizerWrapper> = Vec::new();
    if space {
        norm.push(Prepend::new("▁".into()).into());
    }
    norm.push(Replace::new(" ", "▁").map_err(|e| tk_err("normalizer", e))?.into());
    t.with_normalizer(Some(tokenizers::normalizers::Sequence::new(norm))).map_err(|e| tk_err("normalizer", e))?;
    let mut dec: Vec<DecoderWrapper> = Vec::new();
    dec.push(Replace::new("▁", " ").map_err(|e| tk_err("decoder", e))?.into());
    dec.push(ByteFallback::new().into());
    dec.push(Fuse::new().into());
    if space {
        dec.push(Strip::new(' ', 1, 0).into());
    }
    t.with_decoder(Some(DecoderSequence::new(dec)));
    Ok(t)
}
