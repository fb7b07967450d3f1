//! Sentence embeddings with BERT encoders from a sentence-transformers directory (all-MiniLM-L6-v2 and its
//! kin), as `SentenceTransformer.encode` computes them: the text stripped, tokenized by the model's
//! `tokenizer.json` (through Hugging Face's `tokenizers` crate) without padding and truncated at
//! `max_seq_length`; a batch padded to its longest sentence, with a padding mask; the encoder
//! (`BertModel`, post-LayerNorm, exact erf GELU; RoBERTa's family with positions from `pad_token_id + 1`, and
//! models without token-type embeddings); pooling over the real tokens as `1_Pooling/config.json` says
//! (mean, CLS, max, last token, mean over √n, position-weighted mean; one mode); the modules `modules.json`
//! lists after pooling (`Dense`, `Normalize`) applied in order, any other module refused.
//!
//! ```no_run
//! # fn main() -> webtensor::Result<()> {
//! use webtensor::models::bert::{EmbedderOptions, SentenceEmbedder};
//! let mut e = SentenceEmbedder::load(&webtensor::Device::cpu(), "all-MiniLM-L6-v2", EmbedderOptions::default())?;
//! let v = e.embed(&["A cat sits on the mat.", "Un chat est assis sur le tapis."])?;
//! let cos: f32 = v[0].iter().zip(&v[1]).map(|(a, b)| a * b).sum(); // unit vectors
//! # Ok(()) }
//! ```

mod gguf;
mod graph;
mod load;
mod pooling;

pub use graph::BertConfig;
pub use pooling::Pooling;

use self::graph::{build_batch, BatchGraph, Weights};
use crate::device::{Device, Plan};
use crate::error::{Error, Result};
use crate::options::CompileOptions;
use crate::resident::Bytes;
use crate::run::Value;

/// How an embedder is set up.
#[derive(Clone, Debug, Default)]
pub struct EmbedderOptions {
    /// Store the weight matrices in f16 (half the memory; computed in f32).
    pub f16_weights: bool,
    /// Options of every plan.
    pub compile: CompileOptions,
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
    /// Bytes of a text that can reach the first `max_seq_length` tokens: the rest is cut before tokenizing.
    text_bytes: usize,
    device: Device,
    weights: Weights,
    options: EmbedderOptions,
    /// Plans by (batch, padded length).
    plans: std::collections::HashMap<(usize, usize), (Plan, BatchGraph)>,
}

fn tok_err(e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument { op: "tokenizer", reason: e.to_string() }
}

/// The length a batch whose longest sentence has `longest` tokens is padded to, so that batches share plans:
/// on a GPU a multiple of 16 (each new length compiles pipelines); on the CPU, where a plan compiles in
/// milliseconds, a quarter of the power of two below (17 → 20, 40 → 40, 100 → 112): at most 25% padding,
/// about four plans per doubling of length.
fn padded_len(longest: usize, cpu: bool) -> usize {
    let step = match cpu {
        true => (1usize << longest.max(1).ilog2()).div_ceil(4).max(1),
        false => 16,
    };
    longest.div_ceil(step) * step
}

/// Tokens (sentences × padded length) a batch holds at most on an adapter that runs on CPU cores, so that no run
/// takes minutes there.
const SOFTWARE_TOKENS: usize = 2048;

/// How many of `sorted` (longest first) go in the next batch: at most `batch`, within `budget` tokens once padded
/// to the first's length, and not a sentence under half that length (it starts a batch of its own length instead
/// of being padded to twice its size).
fn batch_len(sorted: &[Vec<u32>], batch: usize, budget: usize) -> usize {
    let longest = sorted[0].len().max(1);
    let mut n = 1;
    while n < sorted.len() && n < batch && (n + 1) * longest <= budget && 2 * sorted[n].len() >= longest {
        n += 1;
    }
    n
}

impl SentenceEmbedder {
    /// Loads the sentence-transformers directory `dir` onto `device`, or the BERT GGUF file `dir` when it is a
    /// file named `*.gguf` (see [`SentenceEmbedder::from_gguf`]).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file for a missing or unreadable `config.json`, `tokenizer.json`,
    /// `model.safetensors`; [`Error::Format`] for a file that does not parse or lacks a tensor (named).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn load(device: &Device, dir: &str, options: EmbedderOptions) -> Result<SentenceEmbedder> {
        let root = std::path::Path::new(dir);
        if root.is_file() && dir.ends_with(".gguf") {
            return SentenceEmbedder::from_gguf(device, &crate::io::gguf::GgufFile::open(dir)?, options);
        }
        if !root.is_dir() {
            let what = if root.exists() { "not a directory" } else { "no such directory" };
            let message = format!(
                "{what}; expected a sentence-transformers directory (config.json, tokenizer.json, model.safetensors) \
                 or a BERT .gguf file"
            );
            return Err(Error::Io { path: dir.into(), message });
        }
        // a file that is missing is None; one that is there but not a regular file (a FIFO, a directory, a device)
        // is an error, also when optional (a pooling config that cannot be read must not become mean pooling)
        let read = |name: &str| -> Result<Option<Bytes>> {
            let path = root.join(name);
            match std::fs::metadata(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                _ => crate::io::map_file(&path.display().to_string()).map(Some),
            }
        };
        SentenceEmbedder::from_files(device, dir, &read, options)
    }

    /// The embedder whose files `read` gives by their path in a sentence-transformers directory
    /// (`config.json`, `tokenizer.json`, `model.safetensors`, and where present `sentence_bert_config.json`,
    /// `1_Pooling/config.json`, `modules.json`); `read` answers `None` for a file the directory lacks. `source`
    /// names the directory in errors. The weights are uploaded from the bytes `read` gives (on the CPU backend
    /// used where they lie).
    ///
    /// # Errors
    /// [`Error::Io`] naming a required file that is missing; [`Error::Format`] for a file that does not parse or
    /// lacks a tensor (named); errors from `read` as they are.
    pub fn from_files(
        device: &Device,
        source: &str,
        read: &dyn Fn(&str) -> Result<Option<Bytes>>,
        options: EmbedderOptions,
    ) -> Result<SentenceEmbedder> {
        from_files(device, source, read, options)
    }

    /// The BERT encoder of a GGUF file as llama.cpp's converter writes it (`general.architecture` `bert`: its
    /// hyperparameters, weights in any dtype the kernels take, WordPiece vocabulary and `bert.pooling_type`:
    /// mean, CLS or last token), embedding as llama.cpp's `llama-embedding` does: L2-normalized vectors,
    /// sentences truncated at `bert.context_length` tokens. The WordPiece tokenizer lower-cases and strips
    /// accents (BERT's uncased normalizer, as the embedding models converted to GGUF are). The weights are used
    /// in the file's dtypes, but for f32 matrices with `options.f16_weights`, stored in f16 as a directory's are.
    ///
    /// # Errors
    /// [`Error::Format`] naming the file and the key or tensor: another architecture, a hyperparameter missing
    /// or out of range, a tensor missing or of another shape or dtype, a vocabulary that is not WordPiece or
    /// lacks `[CLS]`, `[SEP]` or `[UNK]`, a pooling type other than mean, CLS or last token.
    pub fn from_gguf(
        device: &Device,
        f: &crate::io::gguf::GgufFile,
        options: EmbedderOptions,
    ) -> Result<SentenceEmbedder> {
        let m = gguf::load(device, f, options.f16_weights)?;
        Ok(SentenceEmbedder {
            max_seq_length: m.config.max_tokens(),
            text_bytes: text_bytes(&m.tokenizer, m.config.max_tokens()),
            config: m.config,
            pooling: m.pooling,
            normalize: true,
            tokenizer: m.tokenizer,
            device: device.clone(),
            weights: m.weights,
            options,
            plans: Default::default(),
        })
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
        // a long text is cut before tokenizing (an 18 MB line took 1.8 GB), and cut longer while the words before
        // the one cut make too few tokens (a word of over 100 characters is one token however long)
        let (text, mut limit) = (text.trim(), self.text_bytes);
        let content = self.max_seq_length.saturating_sub(2);
        let mut ids = loop {
            let mut end = limit.min(text.len()).min(MAX_TEXT_BYTES);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let enc = self.tokenizer.encode(&text[..end], true).map_err(tok_err)?;
            let words = enc.get_word_ids();
            let last = words.iter().rev().find_map(|w| *w);
            let whole = words.iter().filter(|w| w.is_some() && **w != last).count();
            if end == text.len() || whole >= content || end >= MAX_TEXT_BYTES {
                break enc.get_ids().to_vec();
            }
            limit = limit.saturating_mul(4);
        };
        if ids.len() > self.max_seq_length {
            // keep the final [SEP], as truncation with the post-processor does
            let last = *ids.last().expect("not empty");
            ids.truncate(self.max_seq_length);
            *ids.last_mut().expect("max_seq_length ≥ 1") = last;
        }
        Ok(ids)
    }

    /// The statistics of the batch plans compiled so far, by (batch, padded length) in increasing order:
    /// dispatches, pipelines, memory and each step's kernel.
    pub fn plan_stats(&self) -> Vec<((usize, usize), crate::PlanStats)> {
        let mut v: Vec<_> = self.plans.iter().map(|(&bt, (plan, _))| (bt, plan.stats())).collect();
        v.sort_by_key(|(bt, _)| *bt);
        v
    }

    /// Times each dispatch of the following runs of every batch plan compiled so far on the GPU, or stops (see
    /// [`Plan::set_profiling`]); plans compiled later are not profiled.
    ///
    /// # Errors
    /// As [`Plan::set_profiling`] (the CPU backend, adapters without timestamp queries).
    pub fn set_profiling(&mut self, on: bool) -> Result<()> {
        crate::Plan::set_profiling_all(self.plans.values_mut().map(|(plan, _)| plan).collect(), on)
    }

    /// The last profiled run of each batch plan that has one, by (batch, padded length) in increasing order: each
    /// dispatch with its kernel and GPU time ([`Plan::last_profile`]).
    pub fn plan_profiles(&self) -> Vec<((usize, usize), Vec<crate::options::KernelTime>)> {
        let mut v: Vec<_> = self.plans.iter().filter_map(|(&bt, (plan, _))| Some((bt, plan.last_profile()?))).collect();
        v.sort_by_key(|(bt, _)| *bt);
        v
    }

    /// Embeds every text, in batches of 32: one vector of `config.hidden` f32 per text (unit length when
    /// `normalize`). An empty list gives an empty result; an empty string is embedded as `[CLS] [SEP]`.
    ///
    /// # Errors
    /// As [`SentenceEmbedder::embed_batched`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        self.embed_batched(texts, 32)
    }

    /// Blocking form of [`SentenceEmbedder::embed_async`] (native only).
    ///
    /// # Errors
    /// As [`SentenceEmbedder::embed_async`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn embed_batched(&mut self, texts: &[&str], batch: usize) -> Result<Vec<Vec<f32>>> {
        pollster::block_on(self.embed_async(texts, batch))
    }

    /// Embeds every text in batches of up to `batch` sentences, each padded to its longest: one vector of
    /// `config.hidden` f32 per text (the Dense module's width where there is one), in the order given (unit
    /// length when `normalize`). As sentence-transformers does, the texts are batched longest first, so that a
    /// batch holds sentences of similar lengths; a sentence under half its batch's longest starts a new batch
    /// rather than be padded, and on an adapter that runs on CPU cores a batch holds at most 2048 tokens. An empty list gives an empty result; an empty string is embedded as `[CLS] [SEP]`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a batch of 0; device errors from the runs.
    pub async fn embed_async(&mut self, texts: &[&str], batch: usize) -> Result<Vec<Vec<f32>>> {
        if batch == 0 {
            return Err(Error::InvalidArgument { op: "embed", reason: "the batch size must be at least 1".into() });
        }
        let mut ids = texts.iter().map(|t| self.tokenize(t)).collect::<Result<Vec<_>>>()?;
        // longest first (a stable sort: equal lengths keep their order), then back to the caller's order
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(ids[i].len()));
        let sorted: Vec<Vec<u32>> = order.iter().map(|&i| std::mem::take(&mut ids[i])).collect();
        let mut out = vec![Vec::new(); texts.len()];
        let mut next = order.iter();
        let caps = self.device.capabilities();
        let software = !self.device.is_cpu() && caps.device_type == crate::caps::DeviceType::Cpu;
        let budget = if software { SOFTWARE_TOKENS } else { usize::MAX };
        let mut rest = &sorted[..];
        while !rest.is_empty() {
            let n = batch_len(rest, batch, budget);
            for v in self.run_batch(&rest[..n]).await? {
                out[*next.next().expect("one vector per text")] = v;
            }
            rest = &rest[n..];
        }
        Ok(out)
    }

    async fn run_batch(&mut self, ids: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let b = ids.len();
        let longest = ids.iter().map(Vec::len).max().unwrap_or(1).max(1);
        let cpu = self.device.capabilities().backend == crate::caps::BackendKind::Cpu;
        let t = padded_len(longest, cpu);
        let t = t.min(self.config.max_tokens()).max(longest);
        // an id the tokenizer gives past the embedding table (a sloppy tokenizer.json) is an error on every
        // backend, before anything runs
        if let Some(&bad) = ids.iter().flatten().find(|&&id| id as usize >= self.config.vocab) {
            let reason = format!(
                "token id {bad} (from tokenizer.json) is outside the vocabulary of {} (vocab_size)",
                self.config.vocab
            );
            return Err(Error::InvalidArgument { op: "embed", reason });
        }
        let max = self.pooling == Pooling::Max;
        if !self.plans.contains_key(&(b, t)) {
            let g = build_batch(&self.config, &self.weights, b, t, max)?;
            let plan = self.device.compile_async(&g.graph, &[g.out], &self.options.compile).await?;
            self.plans.insert((b, t), (plan, g));
        }
        let (plan, g) = self.plans.get_mut(&(b, t)).expect("inserted above");
        let mut tok = vec![0i32; b * t];
        let mut mask = vec![f32::NEG_INFINITY; b * t];
        let mut pool = vec![if max { f32::NEG_INFINITY } else { 0.0 }; b * t];
        for (i, s) in ids.iter().enumerate() {
            for (j, &id) in s.iter().enumerate() {
                tok[i * t + j] = id as i32;
                mask[i * t + j] = 0.0;
                pool[i * t + j] = if max { 0.0 } else { self.pooling.weight(j, s.len()) };
            }
        }
        let types = vec![0i32; b * t];
        let offset = self.config.position_offset;
        let pos: Vec<i32> = (0..b * t).map(|i| (i % t + offset) as i32).collect();
        let mut inputs = vec![
            (g.ids, Value::I32(&tok)),
            (g.pos, Value::I32(&pos)),
            (g.mask, Value::F32(&mask)),
            (g.pool, Value::F32(&pool)),
        ];
        if let Some(ty) = g.types {
            inputs.push((ty, Value::I32(&types)));
        }
        let out = plan.run_with_async(&inputs, &[]).await?.swap_remove(0).expect("fetched").data.to_f32();
        if out.iter().any(|x| !x.is_finite()) {
            let reason = "the model's embeddings are not finite (NaN or infinite): an activation overflowed or a \
                          weight is not finite"
                .to_string();
            return Err(Error::InvalidArgument { op: "embed", reason });
        }
        let e = self.weights.dense.as_ref().map_or(self.config.hidden, |d| d.out);
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

/// Bytes of a text the embedder tokenizes at most: a text whose first `max_seq_length` tokens reach past them
/// (words of hundreds of kilobytes: one unknown token each, whole or cut) is cut there (a 36 MB word took 19 s
/// and 2.1 GB to become one [UNK]).
const MAX_TEXT_BYTES: usize = 1 << 20;

/// Bytes of text that usually make more than `tokens` tokens with `tokenizer`: its longest piece, or at least 400
/// bytes (WordPiece's 100 characters) a token, capped at 4 MiB (a sloppy vocabulary's megabyte-long piece would
/// lift it to gigabytes). A text cut there that makes too few tokens is cut again four times longer.
fn text_bytes(tokenizer: &tokenizers::Tokenizer, tokens: usize) -> usize {
    let longest = tokenizer.get_vocab(true).keys().map(String::len).max().unwrap_or(0);
    tokens.saturating_add(2).saturating_mul(longest.max(400)).min(4 << 20)
}

fn from_files(
    device: &Device,
    source: &str,
    read: &dyn Fn(&str) -> Result<Option<Bytes>>,
    options: EmbedderOptions,
) -> Result<SentenceEmbedder> {
    let path = |name: &str| format!("{}/{name}", source.trim_end_matches('/'));
    let required = |name: &str| -> Result<Bytes> {
        read(name)?.ok_or_else(|| Error::Io { path: path(name), message: "no such file".into() })
    };
    let json = |name: &str| -> Result<Option<serde_json::Value>> {
        read(name)?.map(|b| load::parse_json(&path(name), b.as_slice())).transpose()
    };
    let config = load::config(
        &path("config.json"),
        &load::parse_json(&path("config.json"), required("config.json")?.as_slice())?,
    )?;
    let tk = required("tokenizer.json")?;
    let mut tokenizer = tokenizers::Tokenizer::from_bytes(tk.as_slice())
        .map_err(|e| Error::Format { path: path("tokenizer.json"), message: e.to_string() })?;
    // sentence-transformers pads a batch to its longest sentence, not to the file's fixed length
    tokenizer.with_padding(None);
    tokenizer.with_truncation(None).map_err(tok_err)?;
    // a tokenizer that cannot encode a word it does not know (a WordPiece vocabulary without its [UNK]) fails here,
    // not on the first such sentence
    tokenizer.encode("webtensor \u{2603} \u{1F600} \u{10FFFF}", true).map_err(|e| Error::Format {
        path: path("tokenizer.json"),
        message: format!("the tokenizer cannot encode unknown words: {e}"),
    })?;
    let max_seq_length = match json("sentence_bert_config.json")?.map(|j| j["max_seq_length"].clone()) {
        None | Some(serde_json::Value::Null) => config.max_tokens(),
        // [CLS], a token of text, [SEP] at least; beyond the position table, the table's length
        Some(v) => match v.as_u64() {
            Some(n) if n >= 3 => (n as usize).min(config.max_tokens()),
            _ => {
                let message = format!("max_seq_length is {v}: an integer of at least 3 ([CLS], text, [SEP])");
                return Err(Error::Format { path: path("sentence_bert_config.json"), message });
            }
        },
    };
    let pooling = load::pooling(&path("1_Pooling/config.json"), json("1_Pooling/config.json")?.as_ref())?;
    let modules = load::modules(&path("modules.json"), json("modules.json")?.as_ref())?;
    let st_path = path("model.safetensors");
    let file = crate::io::SafetensorsFile::from_bytes(&st_path, required("model.safetensors")?)?;
    let tensors = load::Tensors { path: st_path, file };
    let mut weights = load::weights(device, &tensors, &config, options.f16_weights)?;
    if let Some(dir) = &modules.dense {
        weights.dense = Some(load::dense(device, &path(dir), &|name| read(&format!("{dir}/{name}")), config.hidden)?);
    }
    let normalize = modules.normalize;
    Ok(SentenceEmbedder {
        config,
        pooling,
        normalize,
        max_seq_length,
        text_bytes: text_bytes(&tokenizer, max_seq_length),
        tokenizer,
        device: device.clone(),
        weights,
        options,
        plans: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn batches_keep_to_their_budget_and_similar_lengths() {
        let s = |lens: &[usize]| lens.iter().map(|&n| vec![1u32; n]).collect::<Vec<_>>();
        assert_eq!(super::batch_len(&s(&[256, 10, 10, 10]), 32, usize::MAX), 1);
        assert_eq!(super::batch_len(&s(&[20, 18, 12, 9]), 32, usize::MAX), 3);
        assert_eq!(super::batch_len(&s(&[20, 18, 12]), 2, usize::MAX), 2);
        assert_eq!(super::batch_len(&s(&[256, 256, 256, 256, 256, 256, 256, 256, 256]), 32, 2048), 8);
    }

    #[test]
    fn padding_wastes_at_most_a_quarter_on_the_cpu() {
        let cpu: Vec<usize> = [1, 7, 16, 17, 40, 100, 256].iter().map(|&t| super::padded_len(t, true)).collect();
        assert_eq!(cpu, [1, 7, 16, 20, 40, 112, 256]);
        for t in 1..=512 {
            let p = super::padded_len(t, true);
            assert!(p >= t && 4 * (p - t) <= t, "{t} -> {p}");
            assert_eq!(super::padded_len(t, false) % 16, 0);
        }
    }
}
