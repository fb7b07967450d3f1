//! Host-side tensors: values of every dtype with their shape.

use crate::dtype::DType;
use half::f16;

/// Host-side values of a tensor, one variant per [`DType`], row-major.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F32(Vec<f32>),
    F16(Vec<f16>),
    I32(Vec<i32>),
    /// A storage format (bf16, a block-quantized type) as its little-endian bytes: whole blocks.
    Raw {
        dtype: DType,
        bytes: Vec<u8>,
    },
}

impl Data {
    /// The dtype of these values.
    pub fn dtype(&self) -> DType {
        match self {
            Data::F32(_) => DType::F32,
            Data::F16(_) => DType::F16,
            Data::I32(_) => DType::I32,
            Data::Raw { dtype, .. } => *dtype,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Data::F32(v) => v.len(),
            Data::F16(v) => v.len(),
            Data::I32(v) => v.len(),
            Data::Raw { dtype, bytes } => bytes.len() / dtype.block_bytes() * dtype.block_size(),
        }
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The raw little-endian bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Data::F32(v) => bytemuck::cast_slice(v),
            Data::F16(v) => bytemuck::cast_slice(v),
            Data::I32(v) => bytemuck::cast_slice(v),
            Data::Raw { bytes, .. } => bytes,
        }
    }

    /// Values converted to f32 (f16 widened exactly, i32 rounded to nearest).
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            Data::F32(v) => v.clone(),
            Data::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Data::I32(v) => v.iter().map(|&x| x as f32).collect(),
            Data::Raw { dtype, bytes } => {
                let mut out = vec![0f32; self.len()];
                crate::quant::decode(*dtype, bytes, &mut out);
                out
            }
        }
    }

    /// [`Data::to_f32`], taking the values: f32 data is returned as it is, without a copy.
    pub fn into_f32(self) -> Vec<f32> {
        match self {
            Data::F32(v) => v,
            other => other.to_f32(),
        }
    }

    /// Values converted to f64 (exact for every dtype).
    pub fn to_f64(&self) -> Vec<f64> {
        match self {
            Data::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            Data::I32(v) => v.iter().map(|&x| x as f64).collect(),
            Data::Raw { .. } => self.to_f32().into_iter().map(|x| x as f64).collect(),
        }
    }

    /// Values of `dtype` from little-endian bytes (storage formats kept as bytes). `bytes.len()` must be a multiple
    /// of the element (or block) size.
    pub fn from_bytes(dtype: DType, bytes: &[u8]) -> Data {
        match dtype {
            DType::F32 => Data::F32(bytemuck::pod_collect_to_vec(bytes)),
            DType::F16 => Data::F16(bytemuck::pod_collect_to_vec(bytes)),
            DType::I32 => Data::I32(bytemuck::pod_collect_to_vec(bytes)),
            d => Data::Raw { dtype: d, bytes: bytes.to_vec() },
        }
    }

    /// Values of `dtype` converted from f64 (rounded to nearest; i32 saturates; bf16 rounded to nearest even).
    /// Block-quantized types have no conversion from values here: `None`.
    pub fn from_f64(dtype: DType, v: &[f64]) -> Option<Data> {
        Some(match dtype {
            DType::F32 => Data::F32(v.iter().map(|&x| x as f32).collect()),
            DType::F16 => Data::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
            DType::I32 => Data::I32(v.iter().map(|&x| x as i32).collect()),
            DType::BF16 => {
                let bytes = v.iter().flat_map(|&x| half::bf16::from_f64(x).to_le_bytes()).collect();
                Data::Raw { dtype, bytes }
            }
            _ => return None,
        })
    }
}

impl AsRef<[u8]> for Data {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// A tensor's values on the host together with its shape (numpy order, outermost first).
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Dimensions in elements, outermost first.
    pub shape: Vec<usize>,
    /// Row-major values; `data.len()` equals the product of `shape`.
    pub data: Data,
}

impl HostTensor {
    /// An f32 tensor. Fails with [`crate::Error::InvalidShape`] when `data.len()` is not the product of `shape`.
    pub fn f32(shape: &[usize], data: Vec<f32>) -> crate::error::Result<HostTensor> {
        HostTensor::new(shape, Data::F32(data))
    }

    /// A tensor of any dtype, checked like [`HostTensor::f32`]; a storage format's rows must be whole blocks.
    pub fn new(shape: &[usize], data: Data) -> crate::error::Result<HostTensor> {
        let n: usize = shape.iter().product();
        let dtype = data.dtype();
        if dtype.block_size() > 1 && shape.last().is_some_and(|r| r % dtype.block_size() != 0) {
            return Err(crate::error::Error::InvalidShape {
                op: "HostTensor::new",
                shape: shape.to_vec(),
                reason: format!("rows of {dtype} must be whole blocks of {} values", dtype.block_size()),
            });
        }
        if n != data.len() || dtype.bytes_of(n) != Some(data.as_bytes().len()) {
            return Err(crate::error::Error::InvalidShape {
                op: "HostTensor::new",
                shape: shape.to_vec(),
                reason: format!("shape holds {n} elements but {} values were given", data.len()),
            });
        }
        Ok(HostTensor { shape: shape.to_vec(), data })
    }

    /// The dtype of the values.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }
}
