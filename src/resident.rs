//! Tensors that outlive a run: [`Resident`] weights, uploaded once and bound by any number of plans at compile
//! time, and [`State`] tensors (a KV cache) that plans write in place and later runs read. Both belong to one
//! [`Device`](crate::Device); their memory is freed when the last handle and the last plan using them are dropped.
//! [`Bytes`] lets a resident's bytes come from a memory-mapped file without an intermediate copy.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::HostTensor;
use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::Arc;

/// Bytes shared without copying: a `Vec<u8>`, a memory map, or anything else that holds bytes. Cheap to clone.
#[derive(Clone)]
pub struct Bytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
    /// The owner is a read-only memory map of a file ([`Bytes::from_file_map`]): its pages can be dropped and are
    /// read back from the file.
    file_map: bool,
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
        Bytes { owner: Arc::new(v), start: 0, len, file_map: false }
    }

    /// The whole of a read-only memory map of a file.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn from_file_map(map: memmap2::Mmap) -> Bytes {
        let len = map.len();
        Bytes { owner: Arc::new(map), start: 0, len, file_map: true }
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
        Ok(Bytes { owner, start: range.start, len: range.end - range.start, file_map: false })
    }

    /// Bytes `range` of these bytes (sharing their owner; nothing is copied).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `range` is not inside these bytes.
    pub fn slice(&self, range: std::ops::Range<usize>) -> Result<Bytes> {
        if range.start > range.end || range.end > self.len {
            return Err(Error::InvalidArgument {
                op: "Bytes::slice",
                reason: format!("range {range:?} is outside {} bytes", self.len),
            });
        }
        let (start, len) = (self.start + range.start, range.end - range.start);
        Ok(Bytes { owner: self.owner.clone(), start, len, file_map: self.file_map })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.start..self.start + self.len]
    }

    /// Gives the pages wholly inside `range` of these bytes back to the kernel now, after a copy made of them
    /// replaces them for every read (a repacked weight, weights concatenated at load): a read-only memory map of a
    /// file drops them from this process
    /// (`MADV_DONTNEED`: read back from the file if ever touched again, even where another process maps the same
    /// file); other memory is paged out (`MADV_PAGEOUT`: it keeps its contents, and may go to swap). Elsewhere than
    /// Linux, or where the kernel refuses, nothing happens.
    pub(crate) fn page_out(&self, range: std::ops::Range<usize>) {
        #[cfg(target_os = "linux")]
        {
            const PAGE: usize = 4096;
            let slice = &self.as_slice()[range];
            let start = (slice.as_ptr() as usize).next_multiple_of(PAGE);
            let end = (slice.as_ptr() as usize + slice.len()) / PAGE * PAGE;
            let advice = if self.file_map { libc::MADV_DONTNEED } else { libc::MADV_PAGEOUT };
            if end > start {
                // SAFETY: the range lies inside these bytes, which stay mapped. MADV_PAGEOUT never changes what
                // memory holds; MADV_DONTNEED is given only for a read-only map of a file, whose pages are never written
                // and so are read back unchanged from the file. The result is a hint's: ignored.
                unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = range;
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
/// `n` zeroed values in a new vector, or `None` when the allocator refuses: memory the system zeroes lazily
/// (`calloc`), so untouched parts cost nothing until written (a KV cache of a long context).
pub(crate) fn try_zeroed<T: bytemuck::Zeroable + Copy>(n: usize) -> Option<Vec<T>> {
    let layout = std::alloc::Layout::array::<T>(n).ok()?;
    if layout.size() == 0 {
        return Some(Vec::new());
    }
    // SAFETY: the layout has a non-zero size; `alloc_zeroed` returns memory of that layout, valid as `n` values
    // of `T` (all-zero bytes are a valid `T`: Zeroable), which the vector then owns with the same layout.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut T;
        (!p.is_null()).then(|| Vec::from_raw_parts(p, n, n))
    }
}

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

/// `Send + Sync` natively; nothing on wasm, where GPU handles are single-threaded.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) trait MaybeSendSync: Send + Sync {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send + Sync> MaybeSendSync for T {}
/// `Send + Sync` natively; nothing on wasm, where GPU handles are single-threaded.
#[cfg(target_arch = "wasm32")]
pub(crate) trait MaybeSendSync {}
#[cfg(target_arch = "wasm32")]
impl<T> MaybeSendSync for T {}

/// A boxed future, not necessarily `Send` (wgpu's are not on wasm).
pub(crate) type LocalFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>;

/// An external tensor's memory, as its backend holds it: each backend has its own type (`backend::cpu::external`,
/// `backend::gpu::external`) and finds it again with [`ExternalMemory::as_any`]. Its drop frees the memory.
pub(crate) trait ExternalMemory: MaybeSendSync + std::any::Any {
    /// Overwrites `bytes.len()` bytes from byte `offset` (a state's, from the host; both multiples of 4).
    fn write(&self, offset: u64, bytes: &[u8]) -> Result<()>;
    /// The first `len` bytes (a state's, as the last run that wrote them left them).
    fn read(&self, len: u64) -> LocalFuture<'_, Result<Vec<u8>>>;
    /// Bytes held for the tensor besides its own (a copy made on first use), counted while it lives.
    fn extra_bytes(&self) -> u64 {
        0
    }
    /// The backend's own type, for a downcast.
    fn as_any(&self) -> &dyn std::any::Any;
}

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
    pub memory: Box<dyn ExternalMemory>,
    /// Counts the bytes toward the device's resident total while this lives.
    pub accounting: Arc<AtomicU64>,
}

/// What an external tensor is: its name, dtype, shape, and whether plans write it (a state).
pub(crate) struct ExternalInfo<'a> {
    pub name: &'a str,
    pub dtype: DType,
    pub shape: &'a [usize],
    pub writable: bool,
}

impl External {
    /// A new external tensor of device `device` in `memory`, its bytes added to `accounting` (the device's resident
    /// total) until it is dropped.
    pub(crate) fn new(
        info: ExternalInfo<'_>,
        device: u64,
        memory: Box<dyn ExternalMemory>,
        accounting: &Arc<AtomicU64>,
    ) -> Arc<External> {
        let ExternalInfo { name, dtype, shape, writable } = info;
        let bytes = dtype.bytes_of_shape(shape).unwrap_or(0) as u64;
        accounting.fetch_add(bytes, Ordering::Relaxed);
        let accounting = accounting.clone();
        let (id, name, shape) = (crate::caps::next_id(), name.to_string(), shape.to_vec());
        // Send + Sync natively; on wasm32 (one thread) wgpu's handles are neither, as for Device
        #[allow(clippy::arc_with_non_send_sync)]
        Arc::new(External { id, name, dtype, shape, device, writable, memory, accounting })
    }

    /// Size in bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.dtype.bytes_of_shape(&self.shape).unwrap_or(0) as u64
    }
}

impl Drop for External {
    fn drop(&mut self) {
        // the memory itself is freed by its own drop, after this
        self.accounting.fetch_sub(self.bytes() + self.memory.extra_bytes(), Ordering::Relaxed);
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
/// A state's values as a host tensor, from its bytes.
pub(crate) fn host_tensor(dtype: DType, shape: &[usize], bytes: &[u8]) -> Result<HostTensor> {
    HostTensor::new(shape, crate::tensor::Data::from_bytes(dtype, bytes))
}

/// Checks that `t` has the state's dtype and shape.
fn check_matches(ext: &External, t: &HostTensor) -> Result<()> {
    if t.dtype() != ext.dtype || t.shape != ext.shape {
        return Err(Error::BadInput {
            name: ext.name.clone(),
            reason: format!("expected {} {:?}, got {} {:?}", ext.dtype, ext.shape, t.dtype(), t.shape),
        });
    }
    Ok(())
}

impl State {
    /// Sets every element to zero.
    ///
    /// # Errors
    /// [`Error::Gpu`] when the device was lost.
    pub fn zero(&self) -> Result<()> {
        self.inner.memory.write(0, &vec![0u8; self.inner.bytes() as usize])
    }

    /// Sets rows `rows` of the first axis to zero (a sequence's slot of a recurrent state).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for rows past the first axis; [`Error::Gpu`] when the device was lost.
    pub fn zero_rows(&self, rows: std::ops::Range<usize>) -> Result<()> {
        let ext = &self.inner;
        let n = ext.shape.first().copied().unwrap_or(1);
        if rows.start > rows.end || rows.end > n {
            let reason = format!("rows {rows:?} of state '{}', whose first axis has {n}", ext.name);
            return Err(Error::InvalidArgument { op: "zero_rows", reason });
        }
        let row = ext.bytes() / n.max(1) as u64;
        ext.memory.write(rows.start as u64 * row, &vec![0u8; (row * rows.len() as u64) as usize])
    }

    /// Overwrites the state with `t`'s values (for tests, and for restoring a saved session).
    ///
    /// # Errors
    /// [`Error::BadInput`] naming the state when `t`'s dtype or shape differs; [`Error::Gpu`] when the device was
    /// lost.
    pub fn write(&self, t: &HostTensor) -> Result<()> {
        check_matches(&self.inner, t)?;
        self.inner.memory.write(0, t.data.as_bytes())
    }

    /// The state's values, asynchronously (as the last run that wrote them left them).
    ///
    /// # Errors
    /// [`Error::Gpu`] when the device was lost or the readback failed.
    pub async fn read_async(&self) -> Result<HostTensor> {
        let ext = &self.inner;
        let bytes = ext.memory.read(ext.bytes()).await?;
        host_tensor(ext.dtype, &ext.shape, &bytes)
    }

    /// Blocking form of [`State::read_async`] (native only).
    ///
    /// # Errors
    /// As [`State::read_async`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read(&self) -> Result<HostTensor> {
        pollster::block_on(self.read_async())
    }
}
