//! BERT encoders from GGUF files as llama.cpp's converter writes them (`general.architecture` `bert`): the
//! `bert.*` hyperparameters, the tensors `token_embd`, `position_embd`, `token_types`, `token_embd_norm` and per
//! block `attn_q`/`attn_k`/`attn_v`/`attn_output` (+ biases), `attn_output_norm`, `ffn_up`, `ffn_down`,
//! `layer_output_norm`, in any weight dtype the kernels take; the WordPiece vocabulary (`tokenizer.ggml.model`
//! `bert`, stored with llama.cpp's "phantom space": a word's first piece `▁piece`, a continuation `piece`, a
//! bracketed special token as it is) rebuilt for the `tokenizers` crate; the pooling `bert.pooling_type` names.
//! Vectors are L2-normalized, as llama.cpp's embedding tools return them.

use super::graph::{BertConfig, Layer, Linear, Norm, Weights};
use super::pooling::Pooling;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::io::gguf::{GgufFile, MetaValue};
use crate::models::arch::common;
use crate::models::arch::hparams::Hparams;
use crate::models::arch::loader::Loader;
use crate::models::arch::spec::Qkv;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::AddedToken;

/// What a BERT GGUF file gives the embedder.
pub(super) struct Model {
    pub config: BertConfig,
    pub pooling: Pooling,
    pub tokenizer: tokenizers::Tokenizer,
    pub weights: Weights,
}

/// The encoder, tokenizer and pooling of the BERT GGUF file `f`, its weights uploaded to `device` (f32 matrices
/// stored in f16 where `f16`).
///
/// # Errors
/// [`Error::Format`] naming the file and the key or tensor: another architecture, a causal BERT, a
/// hyperparameter missing or out of range, a tensor missing or of another shape or dtype, a vocabulary that is
/// not WordPiece or lacks `[CLS]`, `[SEP]` or `[UNK]`, a pooling type other than mean, CLS or last token.
pub(super) fn load(device: &Device, f: &GgufFile, f16: bool) -> Result<Model> {
    let h = Hparams { f, arch: "bert" };
    let config = BertConfig::from_gguf(f)?;
    if f.get("bert.attention.causal").and_then(MetaValue::as_bool) == Some(true) {
        return Err(h.error("bert.attention.causal is true: a BERT encoder attends both ways".into()));
    }
    let pooling = match f.get("bert.pooling_type").map(|v| v.as_u64()) {
        None | Some(Some(1)) => Pooling::Mean,
        Some(Some(2)) => Pooling::Cls,
        Some(Some(3)) => Pooling::LastToken,
        Some(Some(0)) => return Err(h.error("bert.pooling_type is 0 (none: a vector per token), not supported".into())),
        Some(Some(4)) => return Err(h.error("bert.pooling_type is 4 (rank: a reranker), not supported".into())),
        Some(other) => {
            let v = f.get("bert.pooling_type");
            let shown = match (other, v.and_then(MetaValue::as_f64)) {
                (Some(n), _) => n.to_string(),
                (None, Some(x)) => x.to_string(),
                (None, None) => format!("a {}, not an integer", v.map_or("value", MetaValue::type_name)),
            };
            return Err(h.error(format!("bert.pooling_type is {shown}: 1 mean, 2 CLS or 3 last token")));
        }
    };
    let tokenizer = wordpiece(f, config.vocab)?;
    let ld = Loader::new(device, f);
    let weights = weights(&ld, f, &config, f16)?;
    ld.all_used()?;
    Ok(Model { config, pooling, tokenizer, weights })
}

impl BertConfig {
    /// The encoder's shape as the BERT GGUF file `f` declares it (`bert.*` keys, checked).
    ///
    /// # Errors
    /// [`Error::Format`] naming the file and the key: another architecture, a hyperparameter missing or out of
    /// range, a token embedding whose rows differ from the vocabulary's length.
    pub fn from_gguf(f: &GgufFile) -> Result<BertConfig> {
        let h = Hparams { f, arch: "bert" };
        let arch = f.get("general.architecture").and_then(MetaValue::as_str).unwrap_or("(none)");
        if arch != "bert" {
            return Err(h.error(format!("architecture '{arch}' is not a sentence embedder webtensor runs (bert)")));
        }
        config(&h)
    }
}

fn config(h: &Hparams) -> Result<BertConfig> {
    const MAX_WIDTH: usize = 1 << 16;
    let hidden = h.count("embedding_length", None, MAX_WIDTH)?;
    let heads = h.count("attention.head_count", None, 1 << 10)?;
    if !hidden.is_multiple_of(heads) {
        return Err(
            h.error(format!("bert.attention.head_count {heads} does not divide bert.embedding_length {hidden}"))
        );
    }
    let tokens = h.f.get("tokenizer.ggml.tokens").and_then(MetaValue::as_array).map_or(0, |a| a.len());
    let embd = h.f.tensor("token_embd.weight").ok_or_else(|| h.error("no tensor token_embd.weight".into()))?;
    let vocab = embd.shape.first().copied().unwrap_or(0);
    if vocab == 0 || vocab != tokens {
        return Err(h.error(format!("token_embd.weight has {vocab} rows for a vocabulary of {tokens} tokens")));
    }
    let max_positions = h.count("context_length", None, 1 << 20)?;
    if max_positions < 2 {
        return Err(h.error("bert.context_length is 1: a sentence needs [CLS] and [SEP]".into()));
    }
    Ok(BertConfig {
        hidden,
        heads,
        layers: h.count("block_count", None, 1 << 10)?,
        intermediate: h.count("feed_forward_length", None, MAX_WIDTH << 4)?,
        eps: h.number("attention.layer_norm_epsilon", 1e-12, |x| x > 0.0 && x < 1.0, "above 0, below 1")?,
        max_positions,
        position_offset: 0,
        vocab,
    })
}

/// The token of `tokens` whose id is at `key`, or the one spelled `default`.
fn special(f: &GgufFile, tokens: &[String], keys: &[&str], default: &str) -> Result<(String, u32)> {
    let at = keys.iter().find_map(|k| f.get(&format!("tokenizer.ggml.{k}_token_id")).and_then(MetaValue::as_u64));
    let id = match at {
        Some(i) if (i as usize) < tokens.len() => i as usize,
        Some(i) => {
            let message = format!("tokenizer.ggml.{}_token_id {i} is outside the vocabulary", keys[0]);
            return Err(Error::Format { path: f.source().into(), message });
        }
        None => tokens.iter().position(|t| t == default).ok_or_else(|| Error::Format {
            path: f.source().into(),
            message: format!("the vocabulary has no {default} token (tokenizer.ggml.{}_token_id)", keys[0]),
        })?,
    };
    Ok((tokens[id].clone(), id as u32))
}

/// The WordPiece tokenizer of a `bert` vocabulary: pieces back from llama.cpp's phantom-space spelling (`▁word`
/// → `word`, `piece` → `##piece`, `[X]` as it is), BERT's normalizer (lower case, accents stripped, control
/// characters dropped, CJK characters split), its pre-tokenizer (whitespace and punctuation), `[CLS] .. [SEP]`.
fn wordpiece(f: &GgufFile, n_vocab: usize) -> Result<tokenizers::Tokenizer> {
    let bad = |message: String| Error::Format { path: f.source().into(), message };
    let model = f.get("tokenizer.ggml.model").and_then(MetaValue::as_str).unwrap_or("(none)");
    if model != "bert" {
        return Err(bad(format!("tokenizer model '{model}' is not a BERT vocabulary (bert)")));
    }
    let list = f.get("tokenizer.ggml.tokens").and_then(MetaValue::as_array).and_then(|a| a.as_strings());
    let raw = list.ok_or_else(|| bad("tokenizer.ggml.tokens is missing or not strings".into()))?;
    let tokens: Vec<String> = raw
        .iter()
        .map(|t| match t.strip_prefix('\u{2581}') {
            Some(word) => word.to_string(),
            None if t.len() > 1 && t.starts_with('[') && t.ends_with(']') => t.to_string(),
            None => format!("##{t}"),
        })
        .collect();
    debug_assert_eq!(tokens.len(), n_vocab);
    // a piece spelled twice keeps its first id (collected last to first, so the first insertion wins)
    let vocab: tokenizers::models::bpe::Vocab =
        tokens.iter().enumerate().rev().map(|(i, t)| (t.clone(), i as u32)).collect();
    let (unk, _) = special(f, &tokens, &["unknown"], "[UNK]")?;
    let cls = special(f, &tokens, &["cls", "bos"], "[CLS]")?;
    let sep = special(f, &tokens, &["seperator", "eos"], "[SEP]")?;
    let wp = WordPiece::builder()
        .vocab(vocab)
        .unk_token(unk)
        .continuing_subword_prefix("##".into())
        .max_input_chars_per_word(100)
        .build()
        .map_err(|e| bad(format!("WordPiece vocabulary: {e}")))?;
    let mut tk = tokenizers::Tokenizer::new(wp);
    let tk_err = |e: tokenizers::Error| bad(format!("WordPiece tokenizer: {e}"));
    tk.with_normalizer(Some(BertNormalizer::new(true, true, None, true))).map_err(tk_err)?;
    tk.with_pre_tokenizer(Some(BertPreTokenizer));
    tk.with_post_processor(Some(BertProcessing::new(sep, cls)));
    let types = f.get("tokenizer.ggml.token_type").and_then(MetaValue::as_array);
    let control: Vec<AddedToken> = match types.and_then(|a| a.to_f64s()) {
        Some(t) if t.len() == tokens.len() => {
            (0..tokens.len()).filter(|&i| t[i] as i64 == 3).map(|i| AddedToken::from(tokens[i].clone(), true)).collect()
        }
        _ => vec![],
    };
    tk.add_special_tokens(control).map_err(tk_err)?;
    Ok(tk)
}

/// A layer's Q, K and V projections `[e, e]` (with biases) from their names' `.weight` and `.bias`: one matrix
/// where they share a dtype (`arch::common::qkv`), three where they do not or where f32 matrices are to be stored
/// in f16.
fn qkv(ld: &Loader, names: [&str; 3], e: usize, f16: bool) -> Result<Qkv> {
    let f32_matrices =
        names.iter().any(|n| ld.info(&format!("{n}.weight"), &[e, e]).is_ok_and(|t| t.dtype == DType::F32));
    if f16 && f32_matrices {
        let lin = |n: &str| ld.matrix(&format!("{n}.weight"), &[e, e], f16);
        let bias = |n: &str| ld.tensor(&format!("{n}.bias"), &[e]);
        let w = [lin(names[0])?, lin(names[1])?, lin(names[2])?];
        return Ok(Qkv::Split { w, bias: Some([bias(names[0])?, bias(names[1])?, bias(names[2])?]) });
    }
    let w = names.map(|n| format!("{n}.weight"));
    let b = names.map(|n| format!("{n}.bias"));
    common::qkv(ld, w.each_ref().map(String::as_str), Some(b.each_ref().map(String::as_str)), [e; 3], e)
}

fn weights(ld: &Loader, f: &GgufFile, c: &BertConfig, f16: bool) -> Result<Weights> {
    let (e, ff) = (c.hidden, c.intermediate);
    let lin = |n: &str, out: usize, inp: usize| -> Result<Linear> {
        let w = ld.matrix(&format!("{n}.weight"), &[out, inp], f16)?;
        Ok(Linear { w, b: ld.tensor(&format!("{n}.bias"), &[out])? })
    };
    let norm = |n: &str| -> Result<Norm> {
        Ok(Norm { w: ld.tensor(&format!("{n}.weight"), &[e])?, b: ld.tensor(&format!("{n}.bias"), &[e])? })
    };
    let layers = (0..c.layers)
        .map(|i| {
            let p = format!("blk.{i}");
            let (q, k, v) = (format!("{p}.attn_q"), format!("{p}.attn_k"), format!("{p}.attn_v"));
            Ok(Layer {
                qkv: qkv(ld, [&q, &k, &v], e, f16)?,
                o: lin(&format!("{p}.attn_output"), e, e)?,
                attn_norm: norm(&format!("{p}.attn_output_norm"))?,
                up: lin(&format!("{p}.ffn_up"), ff, e)?,
                down: lin(&format!("{p}.ffn_down"), e, ff)?,
                out_norm: norm(&format!("{p}.layer_output_norm"))?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let token_type = match f.tensor("token_types.weight").and_then(|t| t.shape.first().copied()) {
        None => None,
        Some(n) => Some(ld.tensor("token_types.weight", &[n.max(1), e])?),
    };
    Ok(Weights {
        word: ld.tensor("token_embd.weight", &[c.vocab, e])?,
        position: ld.tensor("position_embd.weight", &[c.max_positions, e])?,
        token_type,
        embd_norm: norm("token_embd_norm")?,
        layers,
        dense: None,
    })
}
