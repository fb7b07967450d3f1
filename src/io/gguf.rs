//! GGUF files (versions 2 and 3), llama.cpp's model format: metadata (typed key-value pairs, nested arrays
//! included) and tensor infos, then the tensors' data, aligned. Natively the file is memory-mapped, so weights are
//! never copied into the heap; on wasm it is read from bytes.
//!
//! The reader trusts nothing: every count and length is checked against the bytes left in the file before anything
//! is allocated, arrays nest at most 8 deep and are stored by element type (memory within a small factor of the
//! file's bytes), dimensions may not overflow, keys and tensor names are unique, the alignment is a power of two no
//! larger than 1 MiB, and every tensor's data lies inside the file, apart from every other tensor's. A malformed
//! file is an [`Error::Format`] naming the problem and its byte offset.
//!
//! Shapes are numpy order (outermost first): GGUF stores ggml's `ne` (innermost first), reversed here and
//! nowhere else.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::resident::Bytes;

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    /// Values of one type (GGUF arrays are homogeneous), possibly arrays themselves.
    Array(MetaArray),
}

/// A metadata array, stored by its element type (a file's array costs a small constant factor of its bytes in
/// memory: numbers as they are, strings as `String`s).
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Strings),
    Array(Vec<MetaArray>),
}

/// A list of strings held as one text and the end of each: 8 bytes a string beside its text, where a `String`
/// takes 24 and an allocation of its own (an array of six million one-byte strings cost 7 times its file).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Strings {
    text: String,
    ends: Vec<usize>,
}

impl Strings {
    /// Strings in the list.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when the list has no strings.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// String `i`.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.text[start..end])
    }

    /// The strings in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(|i| self.get(i).expect("in range"))
    }

    /// Bytes of heap the list holds.
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity() + self.ends.capacity() * std::mem::size_of::<usize>()
    }

    /// Appends `s`.
    pub fn push(&mut self, s: &str) {
        self.text.push_str(s);
        self.ends.push(self.text.len());
    }
}

impl<S: AsRef<str>> FromIterator<S> for Strings {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Strings {
        let mut out = Strings::default();
        iter.into_iter().for_each(|s| out.push(s.as_ref()));
        out
    }
}

impl MetaArray {
    /// Elements.
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::F64(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::String(v) => v.len(),
            MetaArray::Array(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a value (a copy; `None` past the end).
    pub fn get(&self, i: usize) -> Option<MetaValue> {
        Some(match self {
            MetaArray::U8(v) => MetaValue::U8(*v.get(i)?),
            MetaArray::I8(v) => MetaValue::I8(*v.get(i)?),
            MetaArray::U16(v) => MetaValue::U16(*v.get(i)?),
            MetaArray::I16(v) => MetaValue::I16(*v.get(i)?),
            MetaArray::U32(v) => MetaValue::U32(*v.get(i)?),
            MetaArray::I32(v) => MetaValue::I32(*v.get(i)?),
            MetaArray::U64(v) => MetaValue::U64(*v.get(i)?),
            MetaArray::I64(v) => MetaValue::I64(*v.get(i)?),
            MetaArray::F32(v) => MetaValue::F32(*v.get(i)?),
            MetaArray::F64(v) => MetaValue::F64(*v.get(i)?),
            MetaArray::Bool(v) => MetaValue::Bool(*v.get(i)?),
            MetaArray::String(v) => MetaValue::String(v.get(i)?.to_string()),
            MetaArray::Array(v) => MetaValue::Array(v.get(i)?.clone()),
        })
    }

    /// The elements as values (copies).
    pub fn iter(&self) -> impl Iterator<Item = MetaValue> + '_ {
        (0..self.len()).map(|i| self.get(i).expect("in range"))
    }

    /// The strings, when the elements are strings.
    pub fn as_strings(&self) -> Option<&Strings> {
        match self {
            MetaArray::String(v) => Some(v),
            _ => None,
        }
    }

    /// The elements as f64, when they are numbers.
    pub fn to_f64s(&self) -> Option<Vec<f64>> {
        fn all<T: Copy + Into<f64>>(v: &[T]) -> Vec<f64> {
            v.iter().map(|&x| x.into()).collect()
        }
        Some(match self {
            MetaArray::U8(v) => all(v),
            MetaArray::I8(v) => all(v),
            MetaArray::U16(v) => all(v),
            MetaArray::I16(v) => all(v),
            MetaArray::U32(v) => all(v),
            MetaArray::I32(v) => all(v),
            MetaArray::U64(v) => v.iter().map(|&x| x as f64).collect(),
            MetaArray::I64(v) => v.iter().map(|&x| x as f64).collect(),
            MetaArray::F32(v) => all(v),
            MetaArray::F64(v) => v.clone(),
            _ => return None,
        })
    }

    /// GGUF's name of the element type (`u32`, `string`, `array`).
    pub fn element_type_name(&self) -> &'static str {
        match self {
            MetaArray::U8(_) => "u8",
            MetaArray::I8(_) => "i8",
            MetaArray::U16(_) => "u16",
            MetaArray::I16(_) => "i16",
            MetaArray::U32(_) => "u32",
            MetaArray::I32(_) => "i32",
            MetaArray::U64(_) => "u64",
            MetaArray::I64(_) => "i64",
            MetaArray::F32(_) => "f32",
            MetaArray::F64(_) => "f64",
            MetaArray::Bool(_) => "bool",
            MetaArray::String(_) => "string",
            MetaArray::Array(_) => "array",
        }
    }
}

impl MetaValue {
    /// The value as an unsigned integer, when it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v as u64),
            MetaValue::U16(v) => Some(v as u64),
            MetaValue::U32(v) => Some(v as u64),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as an f64, when it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v as f64),
            MetaValue::F64(v) => Some(v),
            MetaValue::I8(v) => Some(v as f64),
            MetaValue::I16(v) => Some(v as f64),
            MetaValue::I32(v) => Some(v as f64),
            MetaValue::I64(v) => Some(v as f64),
            ref v => v.as_u64().map(|u| u as f64),
        }
    }

    /// The string, when it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, when it is an array.
    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            MetaValue::Array(v) => Some(v),
            _ => None,
        }
    }

    /// The boolean, when it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// GGUF's name of the value's type (`u32`, `string`, `array`).
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::U8(_) => "u8",
            MetaValue::I8(_) => "i8",
            MetaValue::U16(_) => "u16",
            MetaValue::I16(_) => "i16",
            MetaValue::U32(_) => "u32",
            MetaValue::I32(_) => "i32",
            MetaValue::U64(_) => "u64",
            MetaValue::I64(_) => "i64",
            MetaValue::F32(_) => "f32",
            MetaValue::F64(_) => "f64",
            MetaValue::Bool(_) => "bool",
            MetaValue::String(_) => "string",
            MetaValue::Array(_) => "array",
        }
    }

    /// [`MetaValue::type_name`] with its article, for a sentence: "a u32", "an array", "an i8".
    pub fn a_type_name(&self) -> String {
        let name = self.type_name();
        let article = if name.starts_with(['a', 'i', 'f']) { "an" } else { "a" };
        format!("{article} {name}")
    }
}

/// One tensor's description: its name, shape (numpy order), dtype, and where its data lies in the file.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions in elements, outermost first (GGUF's `ne` reversed).
    pub shape: Vec<usize>,
    pub dtype: DType,
    /// Byte offset of the data from the start of the file.
    pub offset: u64,
    /// Bytes of data.
    pub bytes: u64,
}

/// A parsed GGUF file: its metadata and tensor infos, and the file's bytes (memory-mapped natively).
pub struct GgufFile {
    /// GGUF version (2 or 3).
    pub version: u32,
    /// Alignment of the tensors' data in bytes (`general.alignment`, 32 when absent).
    pub alignment: u64,
    /// The key-value pairs, in file order.
    pub metadata: Vec<(String, MetaValue)>,
    /// The tensors, in file order.
    pub tensors: Vec<TensorInfo>,
    bytes: Bytes,
    /// Names the file in errors.
    source: String,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GgufFile({}, v{}, {} keys, {} tensors)",
            self.source,
            self.version,
            self.metadata.len(),
            self.tensors.len()
        )
    }
}

/// Deepest nesting of metadata arrays accepted.
const MAX_DEPTH: usize = 8;

/// A cursor over the file's bytes; every read is checked against the end.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    source: &'a str,
}

impl<'a> Reader<'a> {
    fn err(&self, at: usize, msg: impl std::fmt::Display) -> Error {
        Error::Format { path: self.source.into(), message: format!("{msg} (at byte {at})") }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let left = self.b.len() - self.pos;
        if n > left {
            return Err(self.err(self.pos, format!("{what} needs {n} bytes but the file has {left} left")));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }

    /// A count of items of at least `min_bytes` each, checked against the bytes left before anything is sized by
    /// it.
    fn count(&mut self, what: &str, min_bytes: usize) -> Result<usize> {
        let at = self.pos;
        let n = self.u64(what)?;
        let left = (self.b.len() - self.pos) as u64;
        if n.saturating_mul(min_bytes.max(1) as u64) > left {
            return Err(
                self.err(at, format!("{what} says {n}, more than the {left} bytes left in the file could hold"))
            );
        }
        Ok(n as usize)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        self.str(what).map(str::to_string)
    }

    /// A length-prefixed UTF-8 string, in place.
    fn str(&mut self, what: &str) -> Result<&'a str> {
        let at = self.pos;
        let n = self.count(what, 1)?;
        let bytes = self.take(n, what)?;
        let noun = what.trim_end_matches("'s length");
        std::str::from_utf8(bytes).map_err(|_| self.err(at, format!("{noun} is not valid UTF-8")))
    }

    /// A value of GGUF type id `t`.
    fn value(&mut self, t: u32, depth: usize) -> Result<MetaValue> {
        let at = self.pos;
        fn b<'a>(r: &mut Reader<'a>, n: usize) -> Result<&'a [u8]> {
            r.take(n, "a metadata value")
        }
        Ok(match t {
            0 => MetaValue::U8(b(self, 1)?[0]),
            1 => MetaValue::I8(b(self, 1)?[0] as i8),
            2 => MetaValue::U16(u16::from_le_bytes(b(self, 2)?.try_into().expect("2"))),
            3 => MetaValue::I16(i16::from_le_bytes(b(self, 2)?.try_into().expect("2"))),
            4 => MetaValue::U32(u32::from_le_bytes(b(self, 4)?.try_into().expect("4"))),
            5 => MetaValue::I32(i32::from_le_bytes(b(self, 4)?.try_into().expect("4"))),
            6 => MetaValue::F32(f32::from_le_bytes(b(self, 4)?.try_into().expect("4"))),
            7 => match self.u8("a bool")? {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                v => return Err(self.err(at, format!("a bool of value {v}"))),
            },
            8 => MetaValue::String(self.string("a string's length")?),
            9 => MetaValue::Array(self.array(depth)?),
            10 => MetaValue::U64(self.u64("a u64")?),
            11 => MetaValue::I64(self.u64("an i64")? as i64),
            12 => MetaValue::F64(f64::from_bits(self.u64("an f64")?)),
            _ => return Err(self.err(at, format!("unknown metadata value type {t}"))),
        })
    }
}

impl Reader<'_> {
    /// An array's element type, count and elements, stored by type (see [`MetaArray`]).
    fn array(&mut self, depth: usize) -> Result<MetaArray> {
        let at = self.pos;
        if depth >= MAX_DEPTH {
            return Err(self.err(at, format!("arrays nested deeper than {MAX_DEPTH}")));
        }
        let et = self.u32("an array's element type")?;
        let min = match et {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            8..=12 => 8,
            _ => return Err(self.err(at, format!("an array of unknown element type {et}"))),
        };
        let n = self.count("an array's length", min)?;
        fn nums<T, const N: usize>(r: &mut Reader, n: usize, f: fn([u8; N]) -> T) -> Result<Vec<T>> {
            let b = r.take(n * N, "an array's elements")?;
            Ok(b.chunks_exact(N).map(|c| f(c.try_into().expect("N bytes"))).collect())
        }
        Ok(match et {
            0 => MetaArray::U8(nums(self, n, |b: [u8; 1]| b[0])?),
            1 => MetaArray::I8(nums(self, n, |b: [u8; 1]| b[0] as i8)?),
            2 => MetaArray::U16(nums(self, n, u16::from_le_bytes)?),
            3 => MetaArray::I16(nums(self, n, i16::from_le_bytes)?),
            4 => MetaArray::U32(nums(self, n, u32::from_le_bytes)?),
            5 => MetaArray::I32(nums(self, n, i32::from_le_bytes)?),
            6 => MetaArray::F32(nums(self, n, f32::from_le_bytes)?),
            7 => {
                let b = self.take(n, "an array's bools")?;
                match b.iter().position(|&v| v > 1) {
                    Some(i) => return Err(self.err(at, format!("a bool of value {} in an array", b[i]))),
                    None => MetaArray::Bool(b.iter().map(|&v| v == 1).collect()),
                }
            }
            // n was checked against the bytes left (8 or more an element): the vectors are sized once
            8 => {
                let mut v = Strings { text: String::new(), ends: Vec::with_capacity(n) };
                for _ in 0..n {
                    v.push(self.str("a string's length")?);
                }
                MetaArray::String(v)
            }
            9 => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array(depth + 1)?);
                }
                MetaArray::Array(v)
            }
            10 => MetaArray::U64(nums(self, n, u64::from_le_bytes)?),
            11 => MetaArray::I64(nums(self, n, i64::from_le_bytes)?),
            _ => MetaArray::F64(nums(self, n, f64::from_le_bytes)?),
        })
    }
}

impl GgufFile {
    /// Opens `path`, memory-mapped (natively).
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be opened or mapped; [`Error::Format`] when it is not a valid GGUF file
    /// of version 2 or 3 (see the module docs for what is checked).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(path: &str) -> Result<GgufFile> {
        GgufFile::from_bytes(path, super::common::map_file(path)?)
    }

    /// Parses a GGUF file held in `bytes`; `source` names it in errors.
    ///
    /// # Errors
    /// [`Error::Format`] when the bytes are not a valid GGUF file of version 2 or 3.
    pub fn from_bytes(source: &str, bytes: Bytes) -> Result<GgufFile> {
        let (version, alignment, metadata, tensors) = parse(source, bytes.as_slice())?;
        Ok(GgufFile { version, alignment, metadata, tensors, bytes, source: source.into() })
    }

    /// The metadata value of `key`.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The data of `t` (a slice of the file's bytes, not a copy).
    pub fn data(&self, t: &TensorInfo) -> Bytes {
        let start = t.offset as usize;
        self.bytes.slice(start..start + t.bytes as usize).expect("checked against the file when parsed")
    }

    /// The tensor `t` as a host tensor (a copy of its bytes; storage formats stay encoded, as [`Data::Raw`]).
    ///
    /// [`Data::Raw`]: crate::Data::Raw
    ///
    /// # Errors
    /// Only if the tensor's shape cannot be a host tensor's (checked when parsed, so never for a parsed file).
    pub fn host_tensor(&self, t: &TensorInfo) -> Result<crate::tensor::HostTensor> {
        let data = crate::tensor::Data::from_bytes(t.dtype, self.data(t).as_slice());
        crate::tensor::HostTensor::new(&t.shape, data)
    }

    /// The file's name as given.
    pub fn source(&self) -> &str {
        &self.source
    }
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

type Parsed = (u32, u64, Vec<(String, MetaValue)>, Vec<TensorInfo>);

fn parse(source: &str, b: &[u8]) -> Result<Parsed> {
    let mut r = Reader { b, pos: 0, source };
    if r.take(4, "the magic")? != b"GGUF" {
        return Err(r.err(0, "not a GGUF file (the magic is not \"GGUF\")"));
    }
    let version = r.u32("the version")?;
    match version {
        2 | 3 => {}
        1 => {
            return Err(r.err(
                4,
                "GGUF version 1 is not supported (versions 2 and 3 are); convert the file with a current llama.cpp",
            ))
        }
        v if v.swap_bytes() <= 3 => {
            return Err(r.err(4, "a big-endian GGUF file; only little-endian files are supported"))
        }
        v => return Err(r.err(4, format!("unknown GGUF version {v}"))),
    }
    // a tensor info takes at least 24 bytes, a key-value pair at least 13
    let n_tensors = r.count("the tensor count", 24)?;
    let n_kv = r.count("the metadata count", 13)?;
    let mut metadata = Vec::with_capacity(n_kv);
    let mut key_at = Vec::with_capacity(n_kv);
    for _ in 0..n_kv {
        key_at.push(r.pos);
        let key = r.string("a key's length")?;
        let t = r.u32("a value's type")?;
        let v = r.value(t, 0).map_err(|e| match e {
            Error::Format { path, message } => Error::Format { path, message: format!("metadata {key}: {message}") },
            other => other,
        })?;
        metadata.push((key, v));
    }
    if let Some(i) = first_duplicate(metadata.len(), |i| metadata[i].0.as_str()) {
        return Err(r.err(key_at[i], format!("duplicate key '{}'", metadata[i].0)));
    }
    drop(key_at);
    let alignment = alignment(source, &metadata)?;
    let mut infos = Vec::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        infos.push(tensor_info(&mut r)?);
    }
    if let Some(i) = first_duplicate(infos.len(), |i| infos[i].0.as_str()) {
        return Err(r.err(infos[i].4, format!("duplicate tensor name '{}'", infos[i].0)));
    }
    let data_start = (r.pos as u64).div_ceil(alignment) * alignment;
    let tensors = infos
        .into_iter()
        .map(|(name, shape, dtype, rel, at)| place(&r, name, shape, dtype, rel, at, data_start, alignment))
        .collect::<Result<Vec<_>>>()?;
    no_overlap(&r, &tensors)?;
    Ok((version, alignment, metadata, tensors))
}

/// The file's `general.alignment` (32 where it has none), a power of two up to 1 MiB.
fn alignment(source: &str, metadata: &[(String, MetaValue)]) -> Result<u64> {
    let message = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => return Ok(32),
        Some((_, MetaValue::U32(a))) if a.is_power_of_two() && *a <= 1 << 20 => return Ok(*a as u64),
        Some((_, MetaValue::U32(a))) => format!("general.alignment is {a}: it must be a power of two up to 1 MiB"),
        Some((_, other)) => {
            format!("general.alignment is {}, not a u32 (a power of two up to 1 MiB)", other.a_type_name())
        }
    };
    Err(Error::Format { path: source.into(), message })
}

/// No two tensors share bytes: a writer that points two names at one region is not llama.cpp's.
fn no_overlap(r: &Reader, tensors: &[TensorInfo]) -> Result<()> {
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.offset);
    match order.windows(2).find(|w| w[0].offset + w[0].bytes > w[1].offset) {
        Some(w) => {
            let (a, b) = (w[0], w[1]);
            let (end, from) = (a.offset + a.bytes, b.offset);
            Err(r.err(
                0,
                format!("tensors '{}' (bytes {}..{end}) and '{}' (from byte {from}) overlap", a.name, a.offset, b.name),
            ))
        }
        None => Ok(()),
    }
}

type RawInfo = (String, Vec<usize>, DType, u64, usize);

/// The later of the first two of `n` names (`name(i)`) that are equal, found by sorting indices (4 bytes a name,
/// where a set of copies cost several times the names).
fn first_duplicate<'s>(n: usize, name: impl Fn(usize) -> &'s str) -> Option<usize> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_unstable_by(|&a, &b| name(a as usize).cmp(name(b as usize)).then(a.cmp(&b)));
    order.windows(2).find(|w| name(w[0] as usize) == name(w[1] as usize)).map(|w| w[1] as usize)
}

/// One tensor info: name, shape (numpy order), dtype, data offset relative to the data section, and where the info
/// starts (for errors).
fn tensor_info(r: &mut Reader) -> Result<RawInfo> {
    let at = r.pos;
    let name = r.string("a tensor name's length")?;
    let n_dims = r.u32("a tensor's rank")? as usize;
    if n_dims > crate::shape::MAX_RANK {
        return Err(r.err(at, format!("tensor '{name}' has {n_dims} dimensions (at most {})", crate::shape::MAX_RANK)));
    }
    let mut ne = Vec::with_capacity(n_dims);
    for _ in 0..n_dims {
        ne.push(r.u64("a dimension")?);
    }
    let t = r.u32("a tensor's type")?;
    let dtype = DType::from_ggml_type(t)
        .ok_or_else(|| r.err(at, format!("tensor '{name}' has ggml type {t}, which webtensor does not read")))?;
    let rel = r.u64("a tensor's offset")?;
    let numel = ne.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).filter(|&n| n <= u32::MAX as u64);
    let Some(_) = numel else {
        return Err(r.err(at, format!("tensor '{name}' has dimensions {ne:?} whose product overflows")));
    };
    if ne.contains(&0) {
        return Err(r.err(at, format!("tensor '{name}' has a zero dimension {ne:?}")));
    }
    let row = ne.first().copied().unwrap_or(1) as usize;
    if !row.is_multiple_of(dtype.block_size()) {
        let bs = dtype.block_size();
        return Err(
            r.err(at, format!("tensor '{name}' has rows of {row} values, not a multiple of {dtype}'s block of {bs}"))
        );
    }
    let shape: Vec<usize> = ne.iter().rev().map(|&d| d as usize).collect();
    Ok((name, shape, dtype, rel, at))
}

/// The tensor's place in the file, checked: aligned, inside the file.
#[allow(clippy::too_many_arguments)]
fn place(
    r: &Reader,
    name: String,
    shape: Vec<usize>,
    dtype: DType,
    rel: u64,
    at: usize,
    data_start: u64,
    alignment: u64,
) -> Result<TensorInfo> {
    if !rel.is_multiple_of(alignment) {
        return Err(
            r.err(at, format!("tensor '{name}' starts at offset {rel}, not a multiple of the alignment {alignment}"))
        );
    }
    let bytes = dtype.bytes_of(shape.iter().product()).map(|b| b as u64);
    let end = bytes.and_then(|b| data_start.checked_add(rel)?.checked_add(b));
    match (bytes, end) {
        (Some(bytes), Some(end)) if end <= r.b.len() as u64 => {
            Ok(TensorInfo { name, shape, dtype, offset: data_start + rel, bytes })
        }
        _ => Err(r.err(
            at,
            format!("tensor '{name}' ({dtype} {shape:?}) has data past the end of the {}-byte file", r.b.len()),
        )),
    }
}
