//! Reading and writing tensors: `.npy` (through the `npyz` crate) and `.safetensors` (through the
//! `safetensors` crate). Every malformed, truncated or unsupported file gives [`Error::Format`] or
//! [`Error::Io`] naming the path; nothing here panics on file contents.

use crate::{DType, Data, Error, HostTensor, Result};
use half::f16;
use npyz::WriterBuilder;

fn io_err(path: &str, e: impl std::fmt::Display) -> Error {
    Error::Io { path: path.into(), message: e.to_string() }
}

fn fmt_err(path: &str, msg: impl Into<String>) -> Error {
    Error::Format { path: path.into(), message: msg.into() }
}

/// Reads a C-ordered `.npy` array of dtype float32, float16 or int32 (little-endian), rank 1..=4.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read; [`Error::Format`] when it is not a valid `.npy`, is truncated,
/// Fortran-ordered, or of another dtype or rank.
pub fn read_npy(path: &str) -> Result<HostTensor> {
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    read_npy_bytes(path, &bytes)
}

/// [`read_npy`] from bytes in memory; `path` only names the source in errors.
pub fn read_npy_bytes(path: &str, bytes: &[u8]) -> Result<HostTensor> {
    let npy = npyz::NpyFile::new(bytes).map_err(|e| fmt_err(path, format!("not a valid .npy file: {e}")))?;
    if npy.order() == npyz::Order::Fortran {
        return Err(fmt_err(path, "Fortran-ordered arrays are not supported; save with numpy.ascontiguousarray"));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    crate::shape::check_shape("read_npy", &shape).map_err(|e| fmt_err(path, e.to_string()))?;
    let descr = npy.dtype().descr();
    let trunc = |e: std::io::Error| fmt_err(path, format!("truncated or unreadable data: {e}"));
    let data = match descr.as_str() {
        "'<f4'" => Data::F32(npy.into_vec::<f32>().map_err(trunc)?),
        "'<f2'" => Data::F16(npy.into_vec::<f16>().map_err(trunc)?),
        "'<i4'" => Data::I32(npy.into_vec::<i32>().map_err(trunc)?),
        other => {
            let dtype = npy_dtype_name(other);
            return Err(fmt_err(path, format!("dtype {dtype} is not supported (use float32, float16 or int32)")));
        }
    };
    HostTensor::new(&shape, data).map_err(|_| fmt_err(path, "data is shorter than the shape says (truncated file)"))
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

/// Writes `t` as a C-ordered little-endian `.npy` file.
///
/// # Errors
/// [`Error::Io`] when the file cannot be written.
pub fn write_npy(path: &str, t: &HostTensor) -> Result<()> {
    let file = std::fs::File::create(path).map_err(|e| io_err(path, e))?;
    let mut w = std::io::BufWriter::new(file);
    let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    fn put<T: npyz::AutoSerialize + Copy>(w: &mut impl std::io::Write, shape: &[u64], v: &[T]) -> std::io::Result<()> {
        let mut out = npyz::WriteOptions::new().default_dtype().shape(shape).writer(w).begin_nd()?;
        out.extend(v.iter().copied())?;
        out.finish()
    }
    match &t.data {
        Data::F32(v) => put(&mut w, &shape, v),
        Data::F16(v) => put(&mut w, &shape, v),
        Data::I32(v) => put(&mut w, &shape, v),
        Data::Raw { .. } => put(&mut w, &shape, &t.data.to_f32()),
    }
    .map_err(|e| io_err(path, e))
}

/// Reads tensor `name` from a `.safetensors` file. F32, F16 and I32 load as they are; BF16 is widened to f32.
///
/// # Errors
/// [`Error::Io`] when the file cannot be read; [`Error::Format`] when the header is invalid or truncated, the
/// tensor is missing (the message lists a few names that exist), or its dtype or rank is unsupported.
pub fn read_safetensors(path: &str, name: &str) -> Result<HostTensor> {
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| fmt_err(path, format!("not a valid .safetensors file: {e}")))?;
    let view = st.tensor(name).map_err(|_| {
        let mut names = st.names();
        names.sort();
        let some: Vec<_> = names.iter().take(5).map(|s| &**s).collect();
        fmt_err(path, format!("no tensor named '{name}' (it has {} tensors, e.g. {})", names.len(), some.join(", ")))
    })?;
    let shape = view.shape().to_vec();
    crate::shape::check_shape("read_safetensors", &shape).map_err(|e| fmt_err(path, e.to_string()))?;
    let raw = view.data();
    let data = match view.dtype() {
        safetensors::Dtype::F32 => Data::from_bytes(DType::F32, raw),
        safetensors::Dtype::F16 => Data::from_bytes(DType::F16, raw),
        safetensors::Dtype::I32 => Data::from_bytes(DType::I32, raw),
        safetensors::Dtype::BF16 => {
            Data::F32(raw.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect())
        }
        other => {
            return Err(fmt_err(path, format!("tensor '{name}' has dtype {other:?}; supported: F32, F16, BF16, I32")))
        }
    };
    HostTensor::new(&shape, data).map_err(|_| fmt_err(path, format!("tensor '{name}' is truncated")))
}

/// Reads a tensor named like the CLI does: `file.npy`, `file.safetensors:tensor.name` or `file.gguf:tensor.name`
/// (GGUF's block types stay encoded, as [`Data::Raw`]).
///
/// # Errors
/// As [`read_npy`] and [`read_safetensors`]; [`Error::Format`] for a `.safetensors` or `.gguf` path without a
/// tensor name, or naming a tensor the file lacks.
pub fn read_tensor(spec: &str) -> Result<HostTensor> {
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(idx) = spec.find(".gguf") {
        let (path, rest) = spec.split_at(idx + ".gguf".len());
        let name = rest
            .strip_prefix(':')
            .filter(|n| !n.is_empty())
            .ok_or_else(|| fmt_err(path, "name the tensor too: file.gguf:tensor.name"))?;
        let f = crate::gguf::GgufFile::open(path)?;
        let t = f
            .tensor(name)
            .ok_or_else(|| fmt_err(path, format!("no tensor '{name}' (webtensor inspect {path} lists them)")))?;
        return f.host_tensor(t);
    }
    if let Some(idx) = spec.find(".safetensors") {
        let (path, rest) = spec.split_at(idx + ".safetensors".len());
        let name = rest
            .strip_prefix(':')
            .filter(|n| !n.is_empty())
            .ok_or_else(|| fmt_err(path, "name the tensor too: file.safetensors:tensor.name"))?;
        return read_safetensors(path, name);
    }
    read_npy(spec)
}
