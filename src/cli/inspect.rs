//! `webtensor inspect FILE`: a .gguf file's metadata (long arrays summarized) and tensors, as gguf-py's
//! `gguf-dump` prints them; a .safetensors file's tensors and metadata; a .npy file's shape and dtype.

use super::util::{bytes, emit};
use super::CliError;
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
            let kind = a.first().map_or("empty", MetaValue::type_name);
            let head: Vec<String> = a.iter().take(if a.len() > 8 { 4 } else { 8 }).map(show).collect();
            let more = if a.len() > 8 { ", ..." } else { "" };
            format!("[{}{more}] ({} × {kind})", head.join(", "), a.len())
        }
        MetaValue::Bool(b) => b.to_string(),
        other => other.as_f64().map_or_else(|| other.type_name().to_string(), |x| format!("{x}")),
    }
}

fn gguf(path: &str) -> Result<String, CliError> {
    let f = GgufFile::open(path)?;
    let mut out = format!(
        "{path}: GGUF version {}, alignment {} bytes, {} metadata keys, {} tensors\n",
        f.version,
        f.alignment,
        f.metadata.len(),
        f.tensors.len()
    );
    for (k, v) in &f.metadata {
        out += &format!("  {k:<44} {:<7} {}\n", v.type_name(), show(v));
    }
    let total: u64 = f.tensors.iter().map(|t| t.bytes).sum();
    out += &format!("tensors ({} in all; shapes in numpy order, outermost first):\n", bytes(total));
    for t in &f.tensors {
        out += &format!(
            "  {:<36} {:<6} {:<18} {:>10} at {}\n",
            t.name,
            t.dtype.name(),
            format!("{:?}", t.shape),
            bytes(t.bytes),
            t.offset
        );
    }
    Ok(out)
}

fn safetensors(path: &str) -> Result<String, CliError> {
    let f = webtensor::io::SafetensorsFile::open(path)?;
    let mut entries: Vec<_> = f.tensors().iter().collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = format!("{path}: safetensors, {} tensors\n", entries.len());
    for (k, v) in f.metadata() {
        out += &format!("  {k}: {v}\n");
    }
    for t in entries {
        out += &format!(
            "  {:<48} {:<5} {:<18} {:>10}\n",
            t.name,
            t.dtype,
            format!("{:?}", t.shape),
            bytes(t.range.len() as u64)
        );
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
        format!("{p}: npy, {} {:?}, {}\n", t.dtype(), t.shape, bytes(t.data.as_bytes().len() as u64))
    } else {
        return Err(CliError::Msg(format!("{p}: not a .gguf, .safetensors or .npy file")));
    };
    emit(&out);
    Ok(())
}
