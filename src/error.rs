//! Error type shared by every stage: graph building, compiling, running, file loading.

use crate::dtype::DType;

/// Every fallible call in webtensor returns this error. Variants name the op and carry the shapes.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // ---- graph building -------------------------------------------------------------------
    /// Two operands' shapes cannot be combined (broadcast, matmul inner dimension, concat).
    #[error("{op}: incompatible shapes {lhs:?} and {rhs:?}: {reason}")]
    ShapeMismatch { op: &'static str, lhs: Vec<usize>, rhs: Vec<usize>, reason: String },
    /// A shape is invalid for the op (rank, element counts).
    #[error("{op}: invalid shape {shape:?}: {reason}")]
    InvalidShape { op: &'static str, shape: Vec<usize>, reason: String },
    /// An axis (or permutation, or slice range) is out of range for the tensor's rank or size.
    #[error("{op}: invalid axis {axis} for shape {shape:?}: {reason}")]
    InvalidAxis { op: &'static str, axis: isize, shape: Vec<usize>, reason: String },
    /// The op does not accept this dtype.
    #[error("{op}: unsupported dtype {dtype} for shape {shape:?}: {reason}")]
    UnsupportedDType { op: &'static str, dtype: DType, shape: Vec<usize>, reason: String },
    /// Operands have different dtypes where the op needs them equal.
    #[error("{op}: dtype mismatch {lhs} {lhs_shape:?} vs {rhs} {rhs_shape:?}")]
    DTypeMismatch { op: &'static str, lhs: DType, lhs_shape: Vec<usize>, rhs: DType, rhs_shape: Vec<usize> },
    /// An argument other than a tensor is invalid for the op (a parameter count, an unknown name).
    #[error("{op}: {reason}")]
    InvalidArgument { op: &'static str, reason: String },
    /// A tensor handle from another graph, or one that does not exist.
    #[error("{op}: tensor #{id} does not belong to this graph")]
    ForeignTensor { op: &'static str, id: usize },

    // ---- compiling and running ------------------------------------------------------------
    /// The input data given to `run` does not match the declared input.
    #[error("input '{name}': {reason}")]
    BadInput { name: String, reason: String },
    /// The backend cannot run this op with these dtypes or shapes.
    #[error("{op} is not supported on {backend}: {reason}")]
    Unsupported { op: String, backend: String, reason: String },
    /// A size exceeds a device limit that cannot be worked around.
    #[error("{what}: {size} {unit} exceeds the device limit {limit_name} = {limit} {unit}")]
    LimitExceeded { what: String, size: u64, unit: &'static str, limit_name: &'static str, limit: u64 },
    /// Host memory for `what` could not be allocated: `bytes` were asked for.
    #[error("{what}: {bytes} bytes ({gib:.1} GiB) could not be allocated (out of memory)", gib = *bytes as f64 / (1u64 << 30) as f64)]
    OutOfMemory { what: String, bytes: u64 },
    /// No adapter or device could be created for the requested backend.
    #[error("no device: {0}")]
    NoDevice(String),
    /// The GPU reported a failure: validation, out-of-memory, device loss, or a readback that did not finish.
    #[error("gpu error during {context}: {message}")]
    Gpu { context: String, message: String },

    // ---- files ----------------------------------------------------------------------------
    /// A file could not be read or written.
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    /// A file's contents are malformed, truncated, or of an unsupported dtype.
    #[error("{path}: {message}")]
    Format { path: String, message: String },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
