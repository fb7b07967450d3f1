//! Tensors that outlive a run: [`Resident`] weights, uploaded once and bound by any number of plans at compile
//! time, and [`State`] tensors (a KV cache) that plans write in place and later runs read. Both belong to one
//! [`Device`](crate::Device); their memory is freed when the last handle and the last plan using them are dropped.
//! [`Bytes`] lets a resident's bytes come from a memory-mapped file without an intermediate copy.

use crate::graph::NodeId;
use crate::{DType, Error, HostTensor, Result};
use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::Arc;

/// Bytes shared without copying: a `Vec<u8>`, a memory map, or anything else that holds bytes. Cheap to clone.
#[derive(Clone)]
pub struct Bytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bytes({} bytes)", self.len)
    }
}

impl Bytes {
    /// The bytes of a vector (moved, not copied).
    pub fn from_vec(v: Vec<u8>) -> Bytes {
        let len = v.len();
        Bytes { owner: Arc::new(v), start: 0, len }
    }

    /// Bytes `range` of `owner` (a memory map, for example), kept alive as long as these bytes are.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `range` is not inside the owner's bytes.
    pub fn from_owner<T: AsRef<[u8]> + Send + Sync + 'static>(
        owner: Arc<T>,
        range: std::ops::Range<usize>,
    ) -> Result<Bytes> {
        let total = (*owner).as_ref().len();
        if range.start > range.end || range.end > total {
            return Err(Error::InvalidArgument {
                op: "Bytes::from_owner",
                reason: format!("range {range:?} is outside the owner's {total} bytes"),
            });
        }
        Ok(Bytes { owner, start: range.start, len: range.end - range.start })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.start..self.start + self.len]
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Checks that `bytes` hold exactly a tensor of `dtype` and `shape`; `what` names it in the error.
pub(crate) fn check_bytes(what: &str, dtype: DType, shape: &[usize], bytes: usize) -> Result<()> {
    crate::shape::check_shape("upload", shape)?;
    let Some(want) = dtype.bytes_of_shape(shape) else {
        return Err(Error::BadInput {
            name: what.into(),
            reason: format!(
                "{dtype} {shape:?} is not a whole number of {dtype} blocks of {} elements in its last dimension",
                dtype.block_size()
            ),
        });
    };
    if bytes != want {
        return Err(Error::BadInput {
            name: what.into(),
            reason: format!("{bytes} bytes given for {dtype} {shape:?}, which holds {want} bytes"),
        });
    }
    Ok(())
}

/// Where an external tensor's memory lives, by backend.
pub(crate) enum ExternalMemory {
    /// CPU: read-only bytes (a resident), shared, never copied; and, made on first use, an f32 `[K, R]` copy of
    /// an f32 `[R, K]` resident that a plan multiplies as `t(w)` with many rows (`backend::cpu::transposed`).
    CpuBytes(Bytes, std::sync::OnceLock<Vec<f32>>),
    /// CPU: a writable buffer (a state), 8-byte words; plans that use it lock `lock` for the length of a run.
    CpuState { words: std::cell::UnsafeCell<Vec<u64>>, lock: std::sync::Mutex<()> },
    /// GPU: a buffer of its own.
    Gpu { buffer: wgpu::Buffer, device: Arc<crate::backend::gpu::GpuBackend> },
}

// SAFETY: the CPU state's words are only accessed while `lock` is held (by a run, or by `State::read`/`write`/
// `zero`), so no two threads touch them at once; the other variants are Send + Sync themselves.
unsafe impl Sync for ExternalMemory {}

/// The shared body of a [`Resident`] or a [`State`].
pub(crate) struct External {
    pub id: u64,
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// The device that holds it.
    pub device: u64,
    /// True for a state (written by plans), false for a resident (read-only).
    pub writable: bool,
    pub memory: ExternalMemory,
    /// Counts the bytes toward the device's resident total while this lives.
    pub accounting: Arc<AtomicU64>,
}

impl External {
    /// Size in bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.dtype.bytes_of_shape(&self.shape).unwrap_or(0) as u64
    }
}

impl Drop for External {
    fn drop(&mut self) {
        self.accounting.fetch_sub(self.bytes(), Ordering::Relaxed);
        if let ExternalMemory::CpuBytes(_, transposed) = &self.memory {
            let copy = transposed.get().map_or(0, |t| 4 * t.len() as u64);
            self.accounting.fetch_sub(copy, Ordering::Relaxed);
        }
        if let ExternalMemory::Gpu { buffer, device } = &self.memory {
            #[cfg(not(target_arch = "wasm32"))]
            let _serial = device.serialize(); // releasing a GL buffer takes the context (see `GpuBackend::serialize`)
            buffer.destroy();
            let _ = device;
        }
    }
}

/// A tensor placed in a device's memory once — a model weight — and bound by plans at compile time through
/// [`Graph::resident`](crate::Graph::resident), never passed to `run`. Cheap to clone (a shared handle); the memory
/// is freed when the last handle and the last plan using it are dropped. On the CPU backend its bytes are used
/// where they are (a memory-mapped file stays mapped, nothing is copied) — except that an f32 weight multiplied
/// as `t(w)` by more than 8 rows gets a transposed f32 copy on the first such compile, shared by every plan and
/// counted in [`Device::resident_bytes`](crate::Device::resident_bytes): the `gemm` crate packs a transposed
/// operand element by element, 3-12x slower than a row-major one at the shapes of an encoder.
#[derive(Clone)]
pub struct Resident {
    pub(crate) inner: Arc<External>,
}

/// A tensor that persists across runs and may be shared by plans of one device — a KV cache. Graphs read it
/// through views of [`Graph::state`](crate::Graph::state) and write it in place with
/// [`Graph::set_rows`](crate::Graph::set_rows) and [`Graph::copy_into`](crate::Graph::copy_into); writes happen in
/// schedule order, and a read later in the same run sees them. Created zeroed by
/// [`Device::state`](crate::Device::state). Cheap to clone (a shared handle).
#[derive(Clone)]
pub struct State {
    pub(crate) inner: Arc<External>,
}

macro_rules! external_accessors {
    ($t:ty) => {
        impl $t {
            /// The name given at creation (errors name the tensor by it).
            pub fn name(&self) -> &str {
                &self.inner.name
            }
            /// Element type.
            pub fn dtype(&self) -> DType {
                self.inner.dtype
            }
            /// Shape, numpy order, in elements.
            pub fn shape(&self) -> &[usize] {
                &self.inner.shape
            }
            /// Size in bytes.
            pub fn bytes(&self) -> u64 {
                self.inner.bytes()
            }
        }

        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({} {} {:?})", stringify!($t), self.inner.name, self.inner.dtype, self.inner.shape)
            }
        }
    };
}
external_accessors!(Resident);
external_accessors!(State);

/// A graph's reference to an external tensor: the handle (which keeps the memory alive) and the node it became.
#[derive(Clone)]
pub(crate) struct ExternalRef {
    pub ext: Arc<External>,
    pub node: NodeId,
}

/// A state's values as a host tensor, from its bytes.
pub(crate) fn host_tensor(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<HostTensor> {
    HostTensor::new(shape, crate::Data::from_bytes(dtype, bytes))
}
