//! `webtensor embed --model DIR [TEXT ...] [--file lines.txt]`: sentence embeddings from a sentence-transformers
//! directory or a BERT GGUF file, printed as JSON or written as .npy, or the file's lines ranked by cosine similarity to a query.

use super::device::{choose_device, describe, short_name};
use super::error::CliError;
use super::util::{emit, outln};
use webtensor::models::bert::{EmbedderOptions, SentenceEmbedder};
use webtensor::{io, HostTensor};

#[derive(clap::Args)]
pub struct EmbedArgs {
    /// A sentence-transformers directory (all-MiniLM-L6-v2: config.json, tokenizer.json, model.safetensors, ...)
    /// or a BERT GGUF file as llama.cpp's converter writes it.
    #[arg(long, value_name = "DIR|FILE.gguf|NAME", value_parser = super::models::any_path)]
    model: String,
    /// Texts to embed.
    texts: Vec<String>,
    /// Embed every line of this file too (empty lines included).
    #[arg(long, value_name = "lines.txt")]
    file: Option<String>,
    /// Sentences per batch (each batch padded to its longest sentence).
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Print the embeddings as one JSON array of arrays (the default prints one line per text: its first values).
    #[arg(long)]
    json: bool,
    /// Write the embeddings as an f32 .npy [texts, dim]. An existing file is replaced whole (written beside it,
    /// then renamed), never left half-written.
    #[arg(long, value_name = "out.npy")]
    npy: Option<String>,
    /// Print the texts sorted by cosine similarity to QUERY, with the scores.
    #[arg(long, value_name = "QUERY")]
    rank: Option<String>,
    /// Store the weight matrices in f16.
    #[arg(long)]
    f16: bool,
    /// Device to run on. Without the flag, Device::best() decides and honours WEBTENSOR_BACKEND.
    #[arg(long, value_parser = crate::cli::device::backend_parser())]
    backend: Option<webtensor::BackendKind>,
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    dot / (n(a) * n(b))
}

pub fn run(args: &EmbedArgs) -> Result<(), CliError> {
    let mut texts = args.texts.clone();
    if let Some(f) = &args.file {
        let path = std::path::Path::new(f);
        if !path.is_file() {
            let what = if path.exists() { "not a regular file" } else { "no such file" };
            return Err(CliError::Msg(format!("{f}: {what} (--file takes a text file, one text a line)")));
        }
        let body = std::fs::read_to_string(f).map_err(|e| CliError::Msg(format!("{f}: {e}")))?;
        texts.extend(body.lines().map(str::to_string));
    }
    if args.batch == 0 {
        return Err(CliError::Msg("--batch must be at least 1".into()));
    }
    let chosen = choose_device(args.backend)?;
    let t = std::time::Instant::now();
    let options = EmbedderOptions { f16_weights: args.f16, ..Default::default() };
    eprintln!("loading {} on {} ...", args.model, describe(&chosen.device));
    let mut e = SentenceEmbedder::load(&chosen.device, &args.model, options)?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let t1 = std::time::Instant::now();
    let vecs = e.embed_batched(&refs, args.batch).map_err(|err| CliError::from(err).naming(&args.model))?;
    let ms = t1.elapsed().as_secs_f64() * 1e3;
    eprintln!(
        "embedded {} texts in {ms:.1} ms ({:.1} sentences/s) on {}, loaded in {:.0} ms",
        texts.len(),
        texts.len() as f64 / (ms / 1e3).max(1e-9),
        short_name(&chosen.device),
        (t1 - t).as_secs_f64() * 1e3
    );
    if let Some(q) = &args.rank {
        let qv = e.embed(&[q]).map_err(|err| CliError::from(err).naming(&args.model))?.swap_remove(0);
        let mut scored: Vec<(f32, &str)> = vecs.iter().zip(&refs).map(|(v, t)| (cosine(&qv, v), *t)).collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (s, t) in scored {
            outln!("{s:>7.4}  {t}");
        }
    }
    if let Some(p) = &args.npy {
        let dim = vecs.first().map_or(e.config.hidden, Vec::len);
        let t = HostTensor::f32(&[vecs.len(), dim], vecs.iter().flatten().copied().collect())?;
        io::write_npy(p, &t)?;
        eprintln!("wrote {p}: [{}, {dim}] f32", vecs.len());
    }
    if args.json {
        let doc = serde_json::to_string(&vecs).map_err(|e| CliError::Msg(format!("JSON: {e}")))?;
        emit(&format!("{doc}\n"));
    } else if args.rank.is_none() && args.npy.is_none() {
        for (v, t) in vecs.iter().zip(&refs) {
            let head: Vec<String> = v.iter().take(4).map(|x| format!("{x:+.4}")).collect();
            outln!("[{}, ...] ({} dims)  {t}", head.join(", "), v.len());
        }
    }
    Ok(())
}
