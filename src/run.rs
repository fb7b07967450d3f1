//! What a run (stage 4) takes and gives back: [`Value`]s for the inputs (a host tensor, or a borrowed slice, so a decode
//! step passes its token id without building a tensor) and a [`Fetch`] per output (all of it, a range of rows, or
//! nothing).

use crate::dtype::DType;
use crate::tensor::HostTensor;
use half::f16;

/// The values of one input for a run. A slice must hold exactly as many elements as the input's shape, in
/// row-major order, of the input's dtype.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    /// A host tensor (its shape must equal the input's).
    Host(&'a HostTensor),
    F32(&'a [f32]),
    F16(&'a [f16]),
    I32(&'a [i32]),
}

impl<'a> From<&'a HostTensor> for Value<'a> {
    fn from(t: &'a HostTensor) -> Value<'a> {
        Value::Host(t)
    }
}

impl Value<'_> {
    /// The element type of the values.
    pub fn dtype(&self) -> DType {
        match self {
            Value::Host(t) => t.dtype(),
            Value::F32(_) => DType::F32,
            Value::F16(_) => DType::F16,
            Value::I32(_) => DType::I32,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Value::Host(t) => t.data.len(),
            Value::F32(v) => v.len(),
            Value::F16(v) => v.len(),
            Value::I32(v) => v.len(),
        }
    }

    /// True for no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The shape the values carry, if any (host tensors do; slices take the input's).
    pub fn shape(&self) -> Option<&[usize]> {
        match self {
            Value::Host(t) => Some(&t.shape),
            _ => None,
        }
    }

    /// The values' little-endian bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Value::Host(t) => t.data.as_bytes(),
            Value::F32(v) => bytemuck::cast_slice(v),
            Value::F16(v) => bytemuck::cast_slice(v),
            Value::I32(v) => bytemuck::cast_slice(v),
        }
    }
}

/// What a run reads back of one output.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Fetch {
    /// The whole output.
    #[default]
    All,
    /// Rows `range` along the output's first axis (for a rank-1 output: elements), e.g. the last position's
    /// logits of a `[T, V]` output: `Fetch::Rows(t - 1..t)`. Only those bytes are copied back.
    Rows(std::ops::Range<usize>),
    /// Nothing: the output is computed but not copied back.
    Skip,
}
