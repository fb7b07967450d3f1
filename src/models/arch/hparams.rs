//! A model's hyperparameters read from GGUF metadata and checked before anything is sized by them, as llama.cpp's
//! loader (`llama-model-loader.cpp`, `llama-hparams`) would want them and more: counts are integers from 1 to a
//! bound no real model comes near, epsilons and rope bases are finite and positive, products of widths do not
//! overflow, and a key present with the wrong type is an error naming the key and the file.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::io::gguf::{GgufFile, MetaValue};

/// The metadata of one architecture's keys (`{arch}.block_count`, ...) in one file.
pub(crate) struct Hparams<'a> {
    pub f: &'a GgufFile,
    pub arch: &'a str,
}

impl<'a> Hparams<'a> {
    /// An error naming the file.
    pub fn error(&self, message: String) -> Error {
        Error::Format { path: self.f.source().into(), message }
    }

    /// A setting of the file this runner does not implement, named with the file.
    pub fn unsupported(&self, what: String) -> Error {
        self.error(format!("{what} is not supported by webtensor's {} runner", self.arch))
    }

    fn value(&self, key: &str) -> Option<&'a MetaValue> {
        self.f.get(&format!("{}.{key}", self.arch))
    }

    /// The count `{arch}.{key}`, an integer in `1..=max` (`default` when absent, an error when absent without
    /// one).
    pub fn count(&self, key: &str, default: Option<usize>, max: usize) -> Result<usize> {
        let name = format!("{}.{key}", self.arch);
        let Some(v) = self.value(key) else {
            return default.ok_or_else(|| self.error(format!("metadata {name} is missing")));
        };
        let n = match (v.as_u64(), v.as_f64()) {
            (Some(n), _) => n,
            (None, Some(x)) if v.type_name().starts_with('i') => {
                return Err(self.error(format!("metadata {name} is {x}: a count must be at least 1")))
            }
            _ => return Err(self.error(format!("metadata {name} is {}, not an integer", v.a_type_name()))),
        };
        if n == 0 || n > max as u64 {
            return Err(self.error(format!("metadata {name} is {n}: it must be from 1 to {max}")));
        }
        Ok(n as usize)
    }

    /// The integer `{arch}.{key}` (0 allowed), which must be present.
    pub fn integer(&self, key: &str) -> Result<u64> {
        let name = format!("{}.{key}", self.arch);
        let v = self.value(key).ok_or_else(|| self.error(format!("metadata {name} is missing")))?;
        match (v.as_u64(), v.as_f64()) {
            (Some(n), _) => Ok(n),
            (None, Some(x)) if v.type_name().starts_with('i') => {
                Err(self.error(format!("metadata {name} is {x}: it must be at least 0")))
            }
            _ => Err(self.error(format!("metadata {name} is {}, not an integer", v.a_type_name()))),
        }
    }

    /// The boolean `{arch}.{key}`, if present; an error when it is not a boolean.
    pub fn flag(&self, key: &str) -> Result<Option<bool>> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| {
                self.error(format!("metadata {}.{key} is {}, not a boolean", self.arch, v.a_type_name()))
            }),
        }
    }

    /// The number `{arch}.{key}` (`default` when absent), which must be finite and satisfy `valid` (described by
    /// `what`, e.g. "above 0 and below 1").
    pub fn number(&self, key: &str, default: f32, valid: impl Fn(f32) -> bool, what: &str) -> Result<f32> {
        let name = format!("{}.{key}", self.arch);
        let x = match self.value(key) {
            None => return Ok(default),
            Some(v) => {
                v.as_f64().ok_or_else(|| self.error(format!("metadata {name} is {}, not a number", v.a_type_name())))?
            }
        };
        let x32 = x as f32;
        if !x32.is_finite() || !valid(x32) {
            // an f32 value as f32 prints it (1e-5, not its f64 widening 0.000009999999747378752), in exponent
            // form where the plain one is long (1e-45, not 0.000..0001)
            let shown =
                if matches!(self.value(key), Some(MetaValue::F32(_))) { format!("{x32:?}") } else { format!("{x:?}") };
            return Err(self.error(format!("metadata {name} is {shown}: it must be finite and {what}")));
        }
        Ok(x32)
    }

    /// The string `{arch}.{key}`, if present; an error when it is not a string.
    pub fn text(&self, key: &str) -> Result<Option<&'a str>> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| {
                self.error(format!("metadata {}.{key} is {}, not a string", self.arch, v.a_type_name()))
            }),
        }
    }

    /// `a · b`, or an error naming what overflowed.
    pub fn product(&self, what: &str, a: usize, b: usize) -> Result<usize> {
        a.checked_mul(b).ok_or_else(|| self.error(format!("{what} ({a} × {b}) overflows")))
    }
}

/// Whether a weight of `dtype` can be a matmul weight or an embedding table (a float, bf16 or a block type).
pub(crate) fn weight_dtype(dtype: DType) -> bool {
    dtype != DType::I32
}

/// Whether a weight of `dtype` can scale elementwise (a norm's weight: f32 or f16).
pub(crate) fn vector_dtype(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16)
}
