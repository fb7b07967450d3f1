//! `.npy` files (numpy's `numpy.lib.format`, versions 1.0, 2.0 and 3.0).
//!
//! The header's Python dict is parsed by the `npyz` crate; everything around it is checked here first, so that no
//! count read from a file sizes an allocation before it is checked against the file's length: the header length is
//! capped as numpy caps it, the data must be as long as the shape says before any of it is copied. Versions 1.0
//! and 2.0 headers are latin-1 and 3.0 headers UTF-8, as numpy writes them. The writer writes byte for byte what
//! `numpy.save` writes.

use super::common::{fmt_err, write_atomic};
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::{Data, HostTensor};

const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// numpy's cap on a header's length when reading (`numpy.lib.format`'s default `max_header_size`), in bytes.
pub const MAX_HEADER_BYTES: usize = 10_000;

/// numpy's alignment of the data: the header is padded so that the data starts at a multiple of 64 bytes.
const ALIGN: usize = 64;

/// Reads a C-ordered `.npy` array of dtype float32, float16 or int32 (little-endian), rank 0..=4; a dimension may
/// be 0 (an empty array).
///
/// # Errors
/// [`crate::Error::Io`] when the file cannot be read; [`crate::Error::Format`] when it is not a valid `.npy`
/// (naming what is wrong and its byte offset), is truncated, Fortran-ordered, or of another dtype or rank.
pub fn read_npy(path: &str) -> Result<HostTensor> {
    // mapped natively: a regular file is required (a device such as /dev/zero would be read forever)
    #[cfg(not(target_arch = "wasm32"))]
    let bytes = super::common::map_file(path)?;
    #[cfg(target_arch = "wasm32")]
    let bytes = std::fs::read(path).map_err(|e| super::common::io_err(path, e))?;
    read_npy_bytes(path, bytes.as_ref())
}

/// The header's byte range in `bytes` and its format version, checked against the file's length and numpy's cap.
fn header_range(path: &str, bytes: &[u8]) -> Result<(u8, std::ops::Range<usize>)> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(fmt_err(path, "not a .npy file (no \\x93NUMPY magic at byte 0)"));
    }
    let version = bytes[6];
    let (len, start) = match version {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize, 12),
        2 | 3 => return Err(fmt_err(path, "truncated .npy prelude (12 bytes expected)")),
        v => return Err(fmt_err(path, format!("unsupported .npy format version {v}.{} at byte 6", bytes[7]))),
    };
    if len > MAX_HEADER_BYTES {
        return Err(fmt_err(
            path,
            format!("header length {len} bytes at byte 8 exceeds numpy's cap of {MAX_HEADER_BYTES}"),
        ));
    }
    if start + len > bytes.len() {
        let have = bytes.len() - start;
        return Err(fmt_err(path, format!("header length {len} bytes at byte 8, but the file has {have} after it")));
    }
    Ok((version, start..start + len))
}

/// The header as UTF-8 inside a version 3.0 prelude, the form `npyz` parses: 1.0 and 2.0 headers are latin-1.
fn utf8_header(version: u8, header: &[u8]) -> Vec<u8> {
    let text: String = if version == 3 {
        String::from_utf8_lossy(header).into_owned()
    } else {
        header.iter().map(|&b| b as char).collect()
    };
    let mut out = Vec::with_capacity(12 + text.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[3, 0]);
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out
}

/// [`read_npy`] from bytes in memory; `path` only names the source in errors.
pub fn read_npy_bytes(path: &str, bytes: &[u8]) -> Result<HostTensor> {
    let (version, range) = header_range(path, bytes)?;
    if version == 3 && std::str::from_utf8(&bytes[range.clone()]).is_err() {
        return Err(fmt_err(path, format!("a version 3.0 header must be UTF-8 (bytes {range:?})")));
    }
    let header = utf8_header(version, &bytes[range.clone()]);
    let npy = npyz::NpyFile::new(&header[..]).map_err(|e| fmt_err(path, format!("not a valid .npy header: {e}")))?;
    if npy.order() == npyz::Order::Fortran {
        return Err(fmt_err(path, "Fortran-ordered arrays are not supported; save with numpy.ascontiguousarray"));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| usize::try_from(d).unwrap_or(usize::MAX)).collect();
    crate::shape::check_shape("read_npy", &shape).map_err(|e| fmt_err(path, e.to_string()))?;
    let descr = npy.dtype().descr();
    let dtype = match descr.as_str() {
        "'<f4'" => DType::F32,
        "'<f2'" => DType::F16,
        "'<i4'" => DType::I32,
        other => {
            let dtype = npy_dtype_name(other);
            return Err(fmt_err(path, format!("dtype {dtype} is not supported (use float32, float16 or int32)")));
        }
    };
    let need = dtype.bytes_of_shape(&shape).unwrap_or(usize::MAX);
    let data = &bytes[range.end..];
    if data.len() < need {
        let have = data.len();
        let at = range.end;
        return Err(fmt_err(
            path,
            format!("truncated: shape {shape:?} needs {need} bytes of data at byte {at}, the file has {have}"),
        ));
    }
    HostTensor::new(&shape, Data::from_bytes(dtype, &data[..need]))
}

/// numpy's name for a `.npy` descr, with the descr: `'<f8'` → `float64 ('<f8')`, so that an error says what
/// the file holds. Descrs it does not know (structured dtypes, strings) are returned as they are.
fn npy_dtype_name(descr: &str) -> String {
    let d = descr.trim_matches('\'');
    let (order, code) = match d.as_bytes().first() {
        Some(b'>') => ("big-endian ", &d[1..]),
        Some(b'<' | b'|' | b'=') => ("", &d[1..]),
        _ => ("", d),
    };
    let name = match code {
        "f2" => "float16",
        "f4" => "float32",
        "f8" => "float64",
        "i1" => "int8",
        "i2" => "int16",
        "i4" => "int32",
        "i8" => "int64",
        "u1" => "uint8",
        "u2" => "uint16",
        "u4" => "uint32",
        "u8" => "uint64",
        "b1" => "bool",
        "c8" => "complex64",
        "c16" => "complex128",
        _ => return descr.to_string(),
    };
    format!("{order}{name} ({descr})")
}

/// The bytes `numpy.save` writes for `t`: the header of `numpy.lib.format` (version 1.0, keys sorted, shape as
/// Python's tuple repr, the spare space numpy leaves for growing the first axis, padded to 64 bytes) and the
/// little-endian data. A storage format (a GGUF block type) is written as its f32 values.
pub fn npy_bytes(t: &HostTensor) -> Vec<u8> {
    let (descr, data): (&str, std::borrow::Cow<'_, [u8]>) = match &t.data {
        Data::F32(_) => ("<f4", t.data.as_bytes().into()),
        Data::F16(_) => ("<f2", t.data.as_bytes().into()),
        Data::I32(_) => ("<i4", t.data.as_bytes().into()),
        Data::Raw { .. } => ("<f4", bytemuck::cast_slice(&t.data.to_f32()).to_vec().into()),
    };
    let dims: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // numpy's GROWTH_AXIS_MAX_DIGITS: room for the first dimension to grow to 21 digits in place
    if let Some(first) = dims.first() {
        header.push_str(&" ".repeat(21usize.saturating_sub(first.len())));
    }
    let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat(ALIGN - unpadded % ALIGN));
    header.push('\n');
    // the header is under 200 bytes: always version 1.0 (a u16 length), as numpy chooses for it
    let mut out = Vec::with_capacity(10 + header.len() + data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    out
}

/// Writes `t` as `numpy.save` does (see [`npy_bytes`]). The file is written beside `path` under a temporary name
/// and renamed over it, so an existing file is replaced whole or not at all.
///
/// # Errors
/// [`crate::Error::Io`] when the file cannot be written.
pub fn write_npy(path: &str, t: &HostTensor) -> Result<()> {
    write_atomic(path, &npy_bytes(t))
}
