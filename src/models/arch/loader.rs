//! Weights from a GGUF file onto a device, each checked against the shape the metadata implies and a dtype some
//! kernel takes, before any byte moves: whole tensors, optional ones, and the parts of fused ones.

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::io::gguf::{GgufFile, TensorInfo};
use crate::models::arch::hparams::{vector_dtype, weight_dtype};
use crate::resident::{Bytes, Resident};

/// Uploads the tensors of one file to one device, noting which it was asked for.
pub(crate) struct Loader<'a> {
    pub device: &'a Device,
    pub f: &'a GgufFile,
    used: std::cell::RefCell<std::collections::HashSet<String>>,
}

impl<'a> Loader<'a> {
    pub(crate) fn new(device: &'a Device, f: &'a GgufFile) -> Loader<'a> {
        Loader { device, f, used: Default::default() }
    }

    /// Every tensor of the file was asked for, as llama.cpp's loader requires ("wrong number of tensors"): a
    /// file whose metadata describes less than its tensors (a block count below the blocks present) would
    /// otherwise run a smaller model than the file holds.
    ///
    /// # Errors
    /// [`Error::Format`] naming the first tensors not used and how many there are.
    pub(crate) fn all_used(&self) -> Result<()> {
        let used = self.used.borrow();
        let unused: Vec<&str> = self.f.tensors.iter().map(|t| t.name.as_str()).filter(|n| !used.contains(*n)).collect();
        if unused.is_empty() {
            return Ok(());
        }
        let first: Vec<&str> = unused.iter().take(3).copied().collect();
        Err(self.error(format!(
            "{} tensors of the file are not part of the model its metadata describes ({}{}); is the block count right?",
            unused.len(),
            first.join(", "),
            if unused.len() > 3 { ", ..." } else { "" }
        )))
    }

    /// Counts every tensor whose name starts with `prefix` as used without loading it (blocks the forward pass
    /// does not run).
    pub(crate) fn skip(&self, prefix: &str) {
        let mut used = self.used.borrow_mut();
        self.f.tensors.iter().filter(|t| t.name.starts_with(prefix)).for_each(|t| {
            used.insert(t.name.clone());
        });
    }

    pub(crate) fn error(&self, message: String) -> Error {
        Error::Format { path: self.f.source().into(), message }
    }

    /// The tensor `name`, which must have `shape` (numpy order) and a dtype a kernel takes for it.
    pub(crate) fn info(&self, name: &str, shape: &[usize]) -> Result<&'a TensorInfo> {
        let t = self.f.tensor(name).ok_or_else(|| self.error(format!("no tensor {name}")))?;
        self.used.borrow_mut().insert(name.to_string());
        if t.shape != shape {
            return Err(self.error(format!("tensor {name} is {:?}, expected {shape:?}", t.shape)));
        }
        // a norm's weight or a bias scales or shifts elementwise (f32, f16); a matrix is a matmul weight or the
        // embedding table
        let (ok, want) = if shape.len() == 1 {
            (vector_dtype(t.dtype), "f32 or f16")
        } else {
            (weight_dtype(t.dtype), "a float or block type")
        };
        if !ok {
            return Err(self.error(format!("tensor {name} is {}, which no kernel takes here ({want})", t.dtype)));
        }
        Ok(t)
    }

    /// The tensor `name` of `shape`, resident.
    ///
    /// # Errors
    /// [`Error::Format`] naming the file and the tensor when it is missing, of another shape or of a dtype no
    /// kernel takes; device errors from uploading.
    pub fn tensor(&self, name: &str, shape: &[usize]) -> Result<Resident> {
        let t = self.info(name, shape)?;
        self.resident(name, t)
    }

    /// The matrix `name` of `shape`, resident: in f16 where `f16` is set and the file holds it in f32 (half the
    /// memory, as [`EmbedderOptions::f16_weights`](crate::models::bert::EmbedderOptions::f16_weights) asks); otherwise
    /// as [`Loader::tensor`] uploads it.
    ///
    /// # Errors
    /// As [`Loader::tensor`].
    pub fn matrix(&self, name: &str, shape: &[usize], f16: bool) -> Result<Resident> {
        let t = self.info(name, shape)?;
        let bytes = self.finite_data(name, t)?;
        if !(f16 && t.dtype == DType::F32) {
            return self.device.upload_bytes(name, t.dtype, &t.shape, bytes);
        }
        use crate::tensor::{Data, HostTensor};
        let values = Data::from_bytes(DType::F32, bytes.as_slice()).to_f32();
        let host = HostTensor::new(&t.shape, Data::F16(values.into_iter().map(half::f16::from_f32).collect()))?;
        self.device.upload(name, host)
    }

    /// The data of tensor `name`, every value (or block scale) finite.
    ///
    /// # Errors
    /// [`Error::Format`] naming the file, the tensor and the first element that is NaN or infinite.
    pub(crate) fn finite_data(&self, name: &str, t: &TensorInfo) -> Result<crate::resident::Bytes> {
        let data = self.f.data(t);
        match crate::quant::first_non_finite(t.dtype, data.as_slice()) {
            None => Ok(data),
            Some((i, v)) => Err(self.error(non_finite_message(name, t.dtype, i, v))),
        }
    }

    /// The optional f32 vector `name` of `n` elements, each finite and above 0 (factors something is divided by:
    /// rope's frequency factors), resident.
    ///
    /// # Errors
    /// [`Error::Format`] naming the file and the tensor when it is of another shape or dtype, or holds a value
    /// that is not finite and positive; device errors from uploading.
    pub fn factors(&self, name: &str, n: usize) -> Result<Option<Resident>> {
        if self.f.tensor(name).is_none() {
            return Ok(None);
        }
        let t = self.info(name, &[n])?;
        if t.dtype != DType::F32 {
            return Err(self.error(format!("tensor {name} is {}, expected {}", t.dtype, DType::F32)));
        }
        let data = self.f.data(t);
        for (i, b) in data.as_slice().chunks_exact(4).enumerate() {
            let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if !(v.is_finite() && v > 0.0) {
                return Err(self.error(format!("tensor {name}[{i}] is {v}: factors must be finite and above 0")));
            }
        }
        self.device.upload_bytes(name, t.dtype, &t.shape, data).map(Some)
    }

    /// The f32 vector `name` of `n` elements, resident (attention sinks, which ggml takes in f32 only).
    ///
    /// # Errors
    /// As [`Loader::tensor`], and [`Error::Format`] for a dtype other than f32.
    pub fn f32_vector(&self, name: &str, n: usize) -> Result<Resident> {
        let t = self.info(name, &[n])?;
        if t.dtype != DType::F32 {
            return Err(self.error(format!("tensor {name} is {}, expected {}", t.dtype, DType::F32)));
        }
        self.resident(name, t)
    }

    /// Tensor `name` (described by `t`), resident.
    pub(crate) fn resident(&self, name: &str, t: &TensorInfo) -> Result<Resident> {
        self.device.upload_bytes(name, t.dtype, &t.shape, self.finite_data(name, t)?)
    }

    /// Tensors `ts` (of one dtype, named `names`) one after another, resident as `name` of `shape` (Q, K and V
    /// as one matrix: [`super::common::qkv`]); the copied tensors' file pages are given back.
    pub(crate) fn concat(&self, name: &str, ts: &[&TensorInfo], names: &[&str], shape: &[usize]) -> Result<Resident> {
        let mut bytes = Vec::new();
        for (t, n) in ts.iter().zip(names) {
            let part = self.finite_data(n, t)?;
            bytes.extend_from_slice(part.as_slice());
            // the copy replaces it: a memory-mapped file's pages leave this process
            part.page_out(0..part.len());
        }
        self.device.upload_bytes(name, ts[0].dtype, shape, Bytes::from_vec(bytes))
    }

    /// Row blocks of the matrix `name` of `shape` `[Σ rows, in]`, one resident each (`rows` in order): the
    /// gate and up of a fused `ffn_up`. A row of any dtype is whole bytes (a
    /// block type's rows are whole blocks), so each part is a byte range of the tensor, used in place.
    pub fn split_rows(&self, name: &str, shape: &[usize], rows: &[usize]) -> Result<Vec<Resident>> {
        let t = self.info(name, shape)?;
        debug_assert_eq!(rows.iter().sum::<usize>(), shape[0]);
        let row_bytes = t.bytes as usize / shape[0];
        let data = self.finite_data(name, t)?;
        let mut start = 0;
        rows.iter()
            .enumerate()
            .map(|(i, &n)| {
                let part = data.slice(start * row_bytes..(start + n) * row_bytes)?;
                start += n;
                self.device.upload_bytes(&format!("{name}[{i}]"), t.dtype, &[n, shape[1]], part)
            })
            .collect()
    }
}

/// What [`Loader::finite_data`] reports: the tensor, the element and what it is (for a block type, the block's
/// scale or min).
pub(crate) fn non_finite_message(name: &str, dtype: DType, i: usize, v: f32) -> String {
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        format!(
            "tensor {name} has a block (from element {i}) whose {dtype} scale or min is {v}: weights must be finite"
        )
    } else {
        format!("tensor {name} has {v} at element {i}: weights must be finite")
    }
}
