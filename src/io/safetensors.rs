//! `.safetensors` files (Hugging Face's format): an 8-byte little-endian header length, a JSON header naming
//! each tensor's dtype, shape and byte range, then the data.
//!
//! The header is parsed here (with `serde_json`) rather than by the `safetensors` crate, whose parser lets a
//! duplicate name replace the first silently and refuses a whole file for one tensor of a dtype it does not know.
//! Here a duplicate name is an error; a tensor of an unknown dtype is listed, and only reading it fails. Every
//! count is checked against the file's length before it is used: the header length, each byte range (within the
//! data, no two overlapping), each shape's size against its range. Natively the file is memory-mapped, so
//! reading one tensor reads only its bytes.

use super::common::fmt_err;
use super::gguf::Strings;
use crate::dtype::DType;
use crate::error::Result;
use crate::resident::Bytes;
use crate::tensor::{Data, HostTensor};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
use std::ops::Range;

/// The safetensors crate's cap on the JSON header, in bytes.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor of a safetensors file, as its header describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetensorsEntry {
    /// The tensor's name.
    pub name: String,
    /// The header's dtype string (`F32`, `F16`, `BF16`, `I32`, ... or one this reader does not know).
    pub dtype: String,
    /// Dimensions in elements, numpy order.
    pub shape: Vec<usize>,
    /// Where its bytes are, as byte offsets into the file.
    pub range: Range<usize>,
}

/// A parsed `.safetensors` file: its tensors' entries and its bytes (mapped natively).
#[derive(Debug)]
pub struct SafetensorsFile {
    source: String,
    bytes: Bytes,
    entries: Vec<SafetensorsEntry>,
    /// `__metadata__`: keys and values alternating.
    metadata: Strings,
}

/// Bits per element of the dtypes the safetensors format defines; `None` for a dtype it does not define.
fn dtype_bits(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        "I64" | "U64" | "F64" | "C64" => 64,
        _ => return None,
    })
}

/// A header member: a tensor's entry, made (and checked) as it is read, or the `__metadata__` object.
enum Member {
    Tensor(Result<SafetensorsEntry>),
    Metadata(Option<Strings>),
}

/// The `__metadata__` object read pair by pair (string to string; other values as their JSON text): never held as
/// a JSON map (~200 bytes a pair); `None` when it is not an object.
struct MetadataPairs;

impl<'de> serde::de::DeserializeSeed<'de> for MetadataPairs {
    type Value = Option<Strings>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetadataPairs {
    type Value = Option<Strings>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Value, A::Error> {
        let mut pairs = Strings::default();
        while let Some(k) = map.next_key::<String>()? {
            let v: Value = map.next_value()?;
            pairs.push(&k);
            pairs.push(v.as_str().map_or_else(|| v.to_string(), str::to_string).as_str());
        }
        Ok(Some(pairs))
    }
    // anything else: read through, reported as not an object
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Value, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
}

/// Reads a header's members in file order, duplicates kept (so that they can be refused), each tensor's entry
/// made as it is read: a header of a million entries is never held as JSON values (~1 KB an entry).
struct Members<'a> {
    path: &'a str,
    base: usize,
    data_len: usize,
}

impl<'de> Visitor<'de> for Members<'_> {
    type Value = Vec<Member>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Vec<Member>, A::Error> {
        let mut out = Vec::new();
        let mut failed = false;
        while let Some(name) = map.next_key::<String>()? {
            if name == "__metadata__" {
                let pairs = map.next_value_seed(MetadataPairs)?;
                if !failed {
                    out.push(Member::Metadata(pairs));
                }
                continue;
            }
            let v: Value = map.next_value()?;
            if failed {
                continue; // the first bad entry is the error; the rest is only read through
            }
            out.push(Member::Tensor(entry(self.path, name, &v, self.base, self.data_len)));
            failed = matches!(out.last(), Some(Member::Tensor(Err(_))));
        }
        Ok(out)
    }
}

/// One header member as an entry, its range made absolute (the data starts at `base`), checked against the data.
fn entry(path: &str, name: String, v: &Value, base: usize, data_len: usize) -> Result<SafetensorsEntry> {
    let bad = |what: &str| fmt_err(path, format!("tensor '{name}': {what}"));
    let obj = v.as_object().ok_or_else(|| bad("its entry is not a JSON object"))?;
    let dtype = obj.get("dtype").and_then(Value::as_str).ok_or_else(|| bad("no dtype string"))?.to_string();
    let shape: Vec<usize> = obj
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no shape array"))?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("shape is not a list of non-negative integers"))?;
    let offsets: Vec<usize> = obj
        .get("data_offsets")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok())).collect::<Option<_>>())
        .filter(|a: &Vec<usize>| a.len() == 2)
        .ok_or_else(|| bad("data_offsets is not [begin, end]"))?;
    let (begin, end) = (offsets[0], offsets[1]);
    if begin > end {
        return Err(bad(&format!("data_offsets [{begin}, {end}] end before they begin")));
    }
    if end > data_len {
        return Err(bad(&format!("data_offsets [{begin}, {end}] lie outside the {data_len} bytes of data")));
    }
    if let Some(bits) = dtype_bits(&dtype) {
        let need = shape.iter().try_fold(bits, |acc, &d| acc.checked_mul(d)).map(|b| b.div_ceil(8));
        if need != Some(end - begin) {
            let need = need.map_or("more than usize::MAX".into(), |n| n.to_string());
            return Err(bad(&format!("{dtype} shape {shape:?} needs {need} bytes, data_offsets give {}", end - begin)));
        }
    }
    Ok(SafetensorsEntry { name, dtype, shape, range: base + begin..base + end })
}

/// The entries and metadata of the header of `bytes`, checked (see the module docs).
type Header = (Vec<SafetensorsEntry>, Strings);

fn parse(path: &str, bytes: &[u8]) -> Result<Header> {
    let head: [u8; 8] = bytes.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(|| {
        fmt_err(path, format!("not a .safetensors file: {} bytes, shorter than the 8-byte header length", bytes.len()))
    })?;
    let n = u64::from_le_bytes(head);
    let rest = bytes.len() as u64 - 8;
    if n > MAX_HEADER_BYTES || n > rest {
        let why = if n > MAX_HEADER_BYTES {
            format!("over the cap of {MAX_HEADER_BYTES}")
        } else {
            format!("the file has {rest} after it")
        };
        return Err(fmt_err(path, format!("header length {n} bytes at byte 0: {why}")));
    }
    let base = 8 + n as usize;
    let unparsed =
        |e: serde_json::Error| fmt_err(path, format!("the JSON header (bytes 8..{base}) does not parse: {e}"));
    let mut de = serde_json::Deserializer::from_slice(&bytes[8..base]);
    let members = de.deserialize_map(Members { path, base, data_len: bytes.len() - base }).map_err(unparsed)?;
    de.end().map_err(unparsed)?;
    let (mut entries, mut meta) = (Vec::with_capacity(members.len()), None);
    for m in members {
        match m {
            Member::Tensor(e) => entries.push(e?),
            Member::Metadata(_) if meta.is_some() => {
                return Err(fmt_err(path, "the header names tensor '__metadata__' twice"));
            }
            Member::Metadata(pairs) => {
                meta = Some(pairs.ok_or_else(|| fmt_err(path, "__metadata__ is not a JSON object"))?)
            }
        }
    }
    let mut order: Vec<u32> = (0..entries.len() as u32).collect();
    order.sort_unstable_by(|&a, &b| entries[a as usize].name.cmp(&entries[b as usize].name));
    if let Some(w) = order.windows(2).find(|w| entries[w[0] as usize].name == entries[w[1] as usize].name) {
        let name = &entries[w[0] as usize].name;
        return Err(fmt_err(path, format!("the header names tensor '{name}' twice")));
    }
    let meta = meta.unwrap_or_default();
    let mut ranges: Vec<&SafetensorsEntry> = entries.iter().filter(|e| !e.range.is_empty()).collect();
    ranges.sort_by_key(|e| e.range.start);
    if let Some(w) = ranges.windows(2).find(|w| w[1].range.start < w[0].range.end) {
        return Err(fmt_err(path, format!("tensors '{}' and '{}' overlap", w[0].name, w[1].name)));
    }
    Ok((entries, meta))
}

impl SafetensorsFile {
    /// Opens `path`, memory-mapped.
    ///
    /// # Errors
    /// [`crate::Error::Io`] when the file cannot be opened or mapped; [`crate::Error::Format`] when its header
    /// is not valid (see the module docs).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: &str) -> Result<SafetensorsFile> {
        SafetensorsFile::from_bytes(path, super::common::map_file(path)?)
    }

    /// Parses a safetensors file held in `bytes`; `source` names it in errors.
    ///
    /// # Errors
    /// [`crate::Error::Format`] when the header is not valid.
    pub fn from_bytes(source: &str, bytes: Bytes) -> Result<SafetensorsFile> {
        let (entries, metadata) = parse(source, bytes.as_slice())?;
        Ok(SafetensorsFile { source: source.into(), bytes, entries, metadata })
    }

    /// Every tensor, in header order.
    pub fn tensors(&self) -> &[SafetensorsEntry] {
        &self.entries
    }

    /// The header's `__metadata__` pairs, key and value, in file order (none when it has none).
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        (0..self.metadata.len() / 2)
            .map(|i| (self.metadata.get(2 * i).unwrap_or(""), self.metadata.get(2 * i + 1).unwrap_or("")))
    }

    /// The tensor named `name`.
    pub fn entry(&self, name: &str) -> Option<&SafetensorsEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// The bytes of `e` (a slice of the file, not a copy).
    pub fn data(&self, e: &SafetensorsEntry) -> Result<Bytes> {
        self.bytes.slice(e.range.clone())
    }

    /// Tensor `name` as a host tensor: F32, F16 and I32 as they are, BF16 widened to f32.
    ///
    /// # Errors
    /// [`crate::Error::Format`] when there is no such tensor (the message lists a few that exist), or its dtype
    /// or shape is not one a [`HostTensor`] holds.
    pub fn host_tensor(&self, name: &str) -> Result<HostTensor> {
        let path = &self.source;
        let e = self.entry(name).ok_or_else(|| {
            let mut names: Vec<&str> = self.entries.iter().map(|e| e.name.as_str()).collect();
            names.sort();
            let some = names.iter().take(5).copied().collect::<Vec<_>>().join(", ");
            fmt_err(path, format!("no tensor named '{name}' (it has {} tensors, e.g. {some})", names.len()))
        })?;
        crate::shape::check_shape("read_safetensors", &e.shape).map_err(|err| fmt_err(path, err.to_string()))?;
        let raw = &self.bytes.as_slice()[e.range.clone()];
        let data = match e.dtype.as_str() {
            "F32" => Data::from_bytes(DType::F32, raw),
            "F16" => Data::from_bytes(DType::F16, raw),
            "I32" => Data::from_bytes(DType::I32, raw),
            "BF16" => {
                Data::F32(raw.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect())
            }
            other => {
                return Err(fmt_err(path, format!("tensor '{name}' has dtype {other}; supported: F32, F16, BF16, I32")))
            }
        };
        HostTensor::new(&e.shape, data)
    }
}

/// Reads tensor `name` from a `.safetensors` file (memory-mapped natively: only its bytes are read). F32, F16
/// and I32 load as they are; BF16 is widened to f32.
///
/// # Errors
/// [`crate::Error::Io`] when the file cannot be read; [`crate::Error::Format`] when the header is invalid or
/// truncated, the tensor is missing (the message lists a few names that exist), or its dtype or rank is
/// unsupported.
pub fn read_safetensors(path: &str, name: &str) -> Result<HostTensor> {
    #[cfg(not(target_arch = "wasm32"))]
    let file = SafetensorsFile::open(path)?;
    #[cfg(target_arch = "wasm32")]
    let file = SafetensorsFile::from_bytes(
        path,
        Bytes::from_vec(std::fs::read(path).map_err(|e| super::common::io_err(path, e))?),
    )?;
    file.host_tensor(name)
}
