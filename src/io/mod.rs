//! Reading and writing tensors and model files: `.npy` ([`npy`]), `.safetensors` ([`safetensors`]) and GGUF
//! ([`gguf`], also `webtensor::gguf`; [`read_tensor`] reads a GGUF file's tensors too). Every malformed, truncated, hostile or unsupported file gives
//! [`Error::Format`](crate::Error::Format) (naming the problem and, where there is one, its byte offset) or
//! [`Error::Io`](crate::Error::Io) naming the path; nothing here panics on file contents, and no count read from a file sizes an allocation before it is
//! checked against the file's length. Writers replace an existing file whole (a temporary file beside it,
//! renamed over it), never leave a part of one.

mod common;
#[cfg(not(target_arch = "wasm32"))]
pub(crate) use common::map_file;
pub mod gguf;
pub mod npy;
pub mod safetensors;

pub use npy::{npy_bytes, read_npy, read_npy_bytes, write_npy};
pub use safetensors::{read_safetensors, SafetensorsEntry, SafetensorsFile};

use crate::error::Result;
use crate::tensor::HostTensor;
use common::fmt_err;

/// Writes `bytes` to `path`, replacing an existing file whole: through a temporary file beside it, synced and
/// renamed over `path`, so that a reader sees the old file or the new one and a write that fails halfway leaves
/// the old file in place.
///
/// # Errors
/// [`Error::Io`](crate::Error::Io) naming `path` when the file cannot be written.
pub fn write_file(path: &str, bytes: &[u8]) -> Result<()> {
    common::write_atomic(path, bytes)
}

/// Reads a tensor named like the CLI does: `file.npy`, `file.safetensors:tensor.name` or `file.gguf:tensor.name`
/// (GGUF's block types stay encoded, as [`Data::Raw`](crate::Data::Raw)).
///
/// # Errors
/// As [`read_npy`] and [`read_safetensors`]; [`Error::Format`](crate::Error::Format) for a `.safetensors` or
/// `.gguf` path without a tensor name, or naming a tensor the file lacks.
pub fn read_tensor(spec: &str) -> Result<HostTensor> {
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(named) = split_spec(spec, ".gguf") {
        let (path, name) = named?;
        let f = crate::io::gguf::GgufFile::open(path)?;
        let t = f
            .tensor(name)
            .ok_or_else(|| fmt_err(path, format!("no tensor '{name}' (webtensor inspect {path} lists them)")))?;
        return f.host_tensor(t);
    }
    if let Some(named) = split_spec(spec, ".safetensors") {
        let (path, name) = named?;
        return read_safetensors(path, name);
    }
    read_npy(spec)
}

/// `file.EXT:name` split into the path and the name; `None` when `spec` does not name a `.EXT` file, an error
/// when it names one without a tensor.
fn split_spec<'a>(spec: &'a str, ext: &str) -> Option<Result<(&'a str, &'a str)>> {
    let idx = spec.find(ext)?;
    let (path, rest) = spec.split_at(idx + ext.len());
    let name = rest.strip_prefix(':').filter(|n| !n.is_empty());
    Some(name.map(|n| (path, n)).ok_or_else(|| fmt_err(path, format!("name the tensor too: file{ext}:tensor.name"))))
}
