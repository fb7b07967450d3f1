//! Sentence embeddings with BERT encoders from a sentence-transformers directory (all-MiniLM-L6-v2 and its
//! kin), as `SentenceTransformer.encode` computes them: the text stripped, tokenized by the model's
//! `tokenizer.json` (through Hugging Face's `tokenizers` crate) without padding and truncated at
//! `max_seq_length`; a batch padded to its longest sentence, with a padding mask; the encoder
//! (`BertModel`, post-LayerNorm, exact erf GELU); mean pooling over the real tokens (CLS pooling when
//! `1_Pooling/config.json` says so); L2 normalization when `modules.json` lists it.
//!
//! ```no_run
//! # fn main() -> webtensor::Result<()> {
//! use webtensor::models::bert::{EmbedderOptions, SentenceEmbedder};
//! let mut e = SentenceEmbedder::load(&webtensor::Device::cpu(), "all-MiniLM-L6-v2", EmbedderOptions::default())?;
//! let v = e.embed(&["A cat sits on the mat.", "Un chat est assis sur le tapis."])?;
//! let cos: f32 = v[0].iter().zip(&v[1]).map(|(a, b)| a * b).sum(); // unit vectors
//! # Ok(()) }
//! ```

mod graph;
#[cfg(not(target_arch = "wasm32"))]
mod load;

pub use graph::BertConfig;

use self::graph::{build_batch, BatchGraph, Weights};
use crate::{CompileOptions, Device, Error, Plan, Result, Value};
#[cfg(not(target_arch = "wasm32"))]
use std::path::Path;

/// How an embedder is set up.
#[derive(Clone, Debug, Default)]
pub struct EmbedderOptions {
    /// Store the weight matrices in f16 (half the memory; computed in f32).
    pub f16_weights: bool,
    /// Options of every plan.
    pub compile: CompileOptions,
}

/// How token vectors become one sentence vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over the sentence's real tokens.
    Mean,
    /// The first token's (`[CLS]`).
    Cls,
}

/// A loaded sentence embedder.
pub struct SentenceEmbedder {
    pub config: BertConfig,
    pub pooling: Pooling,
    /// Whether outputs are scaled to unit length.
    pub normalize: bool,
    /// Tokens per sentence at most, special tokens included.
    pub max_seq_length: usize,
    tokenizer: tokenizers::Tokenizer,
    device: Device,
    weights: Weights,
    options: EmbedderOptions,
    /// Plans by (batch, padded length).
    plans: std::collections::HashMap<(usize, usize), (Plan, BatchGraph)>,
}

fn tok_err(e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument { op: "tokenizer", reason: e.to_string() }
}

/// Padded lengths are rounded up to a multiple of this, so that batches share plans.
const PAD_TO: usize = 16;

impl SentenceEmbedder {
    /// Loads the sentence-transformers directory `dir` onto `device`.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file for a missing or unreadable `config.json`, `tokenizer.json`,
    /// `model.safetensors`; [`Error::Format`] for a file that does not parse or lacks a tensor (named).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn load(device: &Device, dir: &str, options: EmbedderOptions) -> Result<SentenceEmbedder> {
        load_dir(device, dir, options)
    }

    /// The device the embedder runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The token ids of `text` as the model sees it (stripped, `[CLS] .. [SEP]`, truncated).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the tokenizer fails.
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.tokenizer.encode(text.trim(), true).map_err(tok_err)?;
        let mut ids = enc.get_ids().to_vec();
        if ids.len() > self.max_seq_length {
            // keep the final [SEP], as truncation with the post-processor does
            let last = *ids.last().expect("not empty");
            ids.truncate(self.max_seq_length);
            *ids.last_mut().expect("max_seq_length ≥ 1") = last;
        }
        Ok(ids)
    }

    /// Embeds every text, in batches of 32: one vector of `config.hidden` f32 per text (unit length when
    /// `normalize`). An empty list gives an empty result; an empty string is embedded as `[CLS] [SEP]`.
    ///
    /// # Errors
    /// As [`SentenceEmbedder::embed_batched`].
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        self.embed_batched(texts, 32)
    }

    /// [`SentenceEmbedder::embed`] with batches of `batch` sentences, each padded to its longest.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a batch of 0; device errors from the runs.
    pub fn embed_batched(&mut self, texts: &[&str], batch: usize) -> Result<Vec<Vec<f32>>> {
        if batch == 0 {
            return Err(Error::InvalidArgument { op: "embed", reason: "the batch size must be at least 1".into() });
        }
        let ids = texts.iter().map(|t| self.tokenize(t)).collect::<Result<Vec<_>>>()?;
        let mut out = Vec::with_capacity(texts.len());
        for chunk in ids.chunks(batch) {
            out.extend(self.run_batch(chunk)?);
        }
        Ok(out)
    }

    fn run_batch(&mut self, ids: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let b = ids.len();
        let longest = ids.iter().map(Vec::len).max().unwrap_or(1).max(1);
        let t = longest.div_ceil(PAD_TO) * PAD_TO;
        let t = t.min(self.config.max_positions).max(longest);
        if !self.plans.contains_key(&(b, t)) {
            let g = build_batch(&self.config, &self.weights, b, t)?;
            let plan = self.device.compile_with(&g.graph, &[g.out], &self.options.compile)?;
            self.plans.insert((b, t), (plan, g));
        }
        let (plan, g) = self.plans.get_mut(&(b, t)).expect("inserted above");
        let mut tok = vec![0i32; b * t];
        let mut mask = vec![f32::NEG_INFINITY; b * t];
        let mut pool = vec![0f32; b * t];
        for (i, s) in ids.iter().enumerate() {
            for (j, &id) in s.iter().enumerate() {
                tok[i * t + j] = id as i32;
                mask[i * t + j] = 0.0;
            }
            match self.pooling {
                Pooling::Mean => (0..s.len()).for_each(|j| pool[i * t + j] = 1.0 / s.len() as f32),
                Pooling::Cls => pool[i * t] = 1.0,
            }
        }
        let types = vec![0i32; b * t];
        let pos: Vec<i32> = (0..b * t).map(|i| (i % t) as i32).collect();
        let inputs = [
            (g.ids, Value::I32(&tok)),
            (g.types, Value::I32(&types)),
            (g.pos, Value::I32(&pos)),
            (g.mask, Value::F32(&mask)),
            (g.pool, Value::F32(&pool)),
        ];
        let out = plan.run_with(&inputs, &[])?.swap_remove(0).expect("fetched").data.to_f32();
        let e = self.config.hidden;
        Ok(out
            .chunks_exact(e)
            .map(|v| {
                let mut v = v.to_vec();
                if self.normalize {
                    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                    v.iter_mut().for_each(|x| *x /= n);
                }
                v
            })
            .collect())
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn load_dir(device: &Device, dir: &str, options: EmbedderOptions) -> Result<SentenceEmbedder> {
    let dir = Path::new(dir);
    let config = load::config(&dir.join("config.json"))?;
    let tk_path = dir.join("tokenizer.json");
    if !tk_path.exists() {
        return Err(Error::Io { path: tk_path.display().to_string(), message: "no such file".into() });
    }
    let mut tokenizer = tokenizers::Tokenizer::from_file(&tk_path)
        .map_err(|e| Error::Format { path: tk_path.display().to_string(), message: e.to_string() })?;
    // sentence-transformers pads a batch to its longest sentence, not to the file's fixed length
    tokenizer.with_padding(None);
    tokenizer.with_truncation(None).map_err(tok_err)?;
    let st_config = dir.join("sentence_bert_config.json");
    let max_seq_length =
        if st_config.exists() { load::read_json(&st_config)?["max_seq_length"].as_u64() } else { None };
    let max_seq_length =
        (max_seq_length.unwrap_or(config.max_positions as u64) as usize).clamp(2, config.max_positions);
    let pool_cfg = dir.join("1_Pooling").join("config.json");
    let pooling = if pool_cfg.exists() && load::read_json(&pool_cfg)?["pooling_mode_cls_token"].as_bool() == Some(true)
    {
        Pooling::Cls
    } else {
        Pooling::Mean
    };
    let modules = dir.join("modules.json");
    let normalize = modules.exists()
        && load::read_json(&modules)?
            .as_array()
            .is_some_and(|m| m.iter().any(|x| x["type"].as_str().is_some_and(|t| t.ends_with("Normalize"))));
    let tensors = load::Tensors::open(&dir.join("model.safetensors"))?;
    let weights = load::weights(device, &tensors, &config, options.f16_weights)?;
    Ok(SentenceEmbedder {
        config,
        pooling,
        normalize,
        max_seq_length,
        tokenizer,
        device: device.clone(),
        weights,
        options,
        plans: Default::default(),
    })
}
