//! `webtensor inspect FILE`: a .gguf file's metadata (long arrays summarized) and tensors, as gguf-py's
//! `gguf-dump` prints them; a .safetensors file's tensors and metadata; a .npy file's shape and dtype.

use super::error::CliError;
use super::util::{bytes, emit, escape_control};
use webtensor::gguf::{GgufFile, MetaValue};

#[derive(clap::Args)]
pub struct InspectArgs {
    /// A .gguf, .safetensors or .npy file.
    file: String,
}

/// A metadata value on one line: strings quoted and cut at 80 characters, arrays of more than 8 summarized.
fn show(v: &MetaValue) -> String {
    match v {
        MetaValue::String(s) => {
            let one: String = s.chars().take(80).collect::<String>().replace('\n', "\\n");
            if s.chars().count() > 80 {
                format!("{one:?}... ({} chars)", s.chars().count())
            } else {
                format!("{one:?}")
            }
        }
        MetaValue::Array(a) => {
            let kind = if a.is_empty() { "empty" } else { a.element_type_name() };
            let head: Vec<String> = a.iter().take(if a.len() > 8 { 4 } else { 8 }).map(|v| show(&v)).collect();
            let more = if a.len() > 8 { ", ..." } else { "" };
            format!("[{}{more}] ({} × {kind})", head.join(", "), a.len())
        }
        MetaValue::Bool(b) => b.to_string(),
        // the shortest decimal that reads back as this f32 (1e-5, not f64's 0.000009999999747378752)
        MetaValue::F32(x) => format!("{x}"),
        other => other.as_f64().map_or_else(|| other.type_name().to_string(), |x| format!("{x}")),
    }
}

/// The width of a column holding `cells`: the longest, at most `max` characters.
fn width<'a>(cells: impl Iterator<Item = &'a str>, max: usize) -> usize {
    cells.map(|c| c.chars().count()).max().unwrap_or(0).min(max)
}

/// One line naming the file's architecture and whether webtensor runs it (with the model's widths when it
/// does, or why not).
fn model_line(f: &GgufFile) -> String {
    use webtensor::models::arch::{architecture, supported};
    let name = escape_control(architecture(f));
    if f.get("general.architecture").is_none() {
        return "architecture: none (general.architecture is missing): not a model webtensor runs\n".into();
    }
    if architecture(f) == "bert" {
        return match webtensor::models::bert::BertConfig::from_gguf(f) {
            Ok(c) => format!(
                "architecture: bert (BERT sentence embedders): supported by embed and serve --embedding-model; {} \
                 layers, width {}, {} heads, feed-forward {}, vocabulary {}, {} positions\n",
                c.layers, c.hidden, c.heads, c.intermediate, c.vocab, c.max_positions
            ),
            Err(e) => format!(
                "architecture: bert (BERT sentence embedders): cannot run this file: {}\n",
                escape_control(&e.to_string())
            ),
        };
    }
    match webtensor::models::decoder::DecoderConfig::from_gguf(f) {
        Ok(c) => {
            let models = supported().find(|(a, _)| *a == c.arch).map_or("", |(_, m)| m);
            let kv = 2 * c.attention_layers() * c.n_kv_heads * c.head_dim * 2;
            let state = match c.recurrent_state_bytes() {
                0 => String::new(),
                b => format!(
                    " and {:.2} MiB of recurrent state, whatever its length ({} gated delta-net layers)",
                    b as f64 / (1u64 << 20) as f64,
                    c.n_layers - c.attention_layers()
                ),
            };
            format!(
                "architecture: {name} ({models}): supported by generate, chat and serve; {} layers, width {}, \
                 {} heads ({} key/value) of {} dims, feed-forward {}, vocabulary {}, trained context {} tokens; a \
                 sequence costs {:.1} KiB of f16 KV cache a position{state}\n",
                c.n_layers,
                c.n_embd,
                c.n_heads,
                c.n_kv_heads,
                c.head_dim,
                c.n_ff,
                c.n_vocab,
                c.n_ctx_train,
                kv as f64 / 1024.0
            )
        }
        Err(e) => match supported().find(|(a, _)| *a == architecture(f)) {
            Some((_, models)) => {
                format!("architecture: {name} ({models}): cannot run this file: {}\n", escape_control(&e.to_string()))
            }
            None => {
                let known: Vec<&str> = supported().map(|(a, _)| a).collect();
                format!("architecture: {name}: not supported (webtensor runs {})\n", known.join(", "))
            }
        },
    }
}

/// Text written out a chunk at a time (a file of millions of keys or tensors is not held as one string).
struct Chunks(String);

impl Chunks {
    fn push(&mut self, line: &str) {
        self.0.push_str(line);
        if self.0.len() > 1 << 16 {
            emit(&self.0);
            self.0.clear();
        }
    }
}

/// The longest of `lengths` (characters), at most `max`.
fn widest(lengths: impl Iterator<Item = usize>, max: usize) -> usize {
    lengths.max().unwrap_or(0).min(max)
}

fn gguf(path: &str) -> Result<String, CliError> {
    let f = GgufFile::open(path)?;
    let mut out = Chunks(format!(
        "{}: GGUF version {}, alignment {} bytes, {} metadata keys, {} tensors\n",
        escape_control(path),
        f.version,
        f.alignment,
        f.metadata.len(),
        f.tensors.len()
    ));
    out.push(&model_line(&f));
    // column widths from each cell's length, the cells made again as each line is written
    let kw = widest(f.metadata.iter().map(|(k, _)| escape_control(k).chars().count()), 60);
    for (k, v) in &f.metadata {
        out.push(&format!("  {:<kw$} {:<7} {}\n", escape_control(k), v.type_name(), show(v)));
    }
    let total: u64 = f.tensors.iter().map(|t| t.bytes).sum();
    out.push(&format!("tensors ({} in all; shapes in numpy order, outermost first):\n", bytes(total)));
    let shape = |t: &webtensor::gguf::TensorInfo| format!("{:?}", t.shape);
    let (nw, dw, sw, bw) = (
        widest(f.tensors.iter().map(|t| escape_control(&t.name).chars().count()), 60),
        widest(f.tensors.iter().map(|t| t.dtype.name().len()), 10),
        widest(f.tensors.iter().map(|t| shape(t).len()), 40),
        widest(f.tensors.iter().map(|t| bytes(t.bytes).len()), 40),
    );
    for t in &f.tensors {
        out.push(&format!(
            "  {:<nw$} {:<dw$} {:<sw$} {:>bw$} at byte {}\n",
            escape_control(&t.name),
            t.dtype.name(),
            shape(t),
            bytes(t.bytes),
            t.offset
        ));
    }
    Ok(out.0)
}

fn safetensors(path: &str) -> Result<String, CliError> {
    let f = webtensor::io::SafetensorsFile::open(path)?;
    let mut entries: Vec<_> = f.tensors().iter().collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = format!("{}: safetensors, {} tensors\n", escape_control(path), entries.len());
    for (k, v) in f.metadata() {
        out += &format!("  {}: {}\n", escape_control(k), escape_control(v));
    }
    let names: Vec<String> = entries.iter().map(|t| escape_control(&t.name)).collect();
    let shapes: Vec<String> = entries.iter().map(|t| format!("{:?}", t.shape)).collect();
    let sizes: Vec<String> = entries.iter().map(|t| bytes(t.range.len() as u64)).collect();
    let dtypes: Vec<String> = entries.iter().map(|t| escape_control(&t.dtype)).collect();
    let (nw, dw, sw, bw) = (
        width(names.iter().map(String::as_str), 60),
        width(dtypes.iter().map(String::as_str), 10),
        width(shapes.iter().map(String::as_str), 40),
        width(sizes.iter().map(String::as_str), 40),
    );
    for (i, _) in entries.iter().enumerate() {
        out += &format!("  {:<nw$} {:<dw$} {:<sw$} {:>bw$}\n", names[i], dtypes[i], shapes[i], sizes[i]);
    }
    Ok(out)
}

pub fn run(args: &InspectArgs) -> Result<(), CliError> {
    let p = args.file.as_str();
    let out = if p.ends_with(".gguf") {
        gguf(p)?
    } else if p.ends_with(".safetensors") {
        safetensors(p)?
    } else if p.ends_with(".npy") {
        let t = webtensor::io::read_npy(p)?;
        format!("{}: npy, {} {:?}, {}\n", escape_control(p), t.dtype(), t.shape, bytes(t.data.as_bytes().len() as u64))
    } else {
        return Err(CliError::Msg(format!("{p}: not a .gguf, .safetensors or .npy file (named by its extension)")));
    };
    emit(&out);
    Ok(())
}
