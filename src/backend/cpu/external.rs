//! The CPU backend's memory for resident and state tensors ([`ExternalMemory`]).

use crate::error::{Error, Result};
use crate::resident::{Bytes, ExternalMemory, LocalFuture};
use std::cell::UnsafeCell;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// A resident's read-only bytes, shared and never copied (a memory-mapped file's, or an aligned copy); and, made on
/// first use, an f32 `[K, R]` copy of an f32 `[R, K]` resident that a plan multiplies as `t(w)` with many rows
/// (`matmul::TransposedB`), or a block-quantized resident repacked for the AVX-512 VNNI kernel
/// (`quant::RepackedW`).
pub(crate) struct CpuBytes {
    pub bytes: Bytes,
    pub transposed: OnceLock<Vec<f32>>,
    #[cfg(target_arch = "x86_64")]
    pub repacked: OnceLock<super::qdot::repack::Repacked>,
}

impl CpuBytes {
    pub(crate) fn new(bytes: Bytes) -> CpuBytes {
        CpuBytes {
            bytes,
            transposed: OnceLock::new(),
            #[cfg(target_arch = "x86_64")]
            repacked: OnceLock::new(),
        }
    }
}

impl ExternalMemory for CpuBytes {
    fn write(&self, _offset: u64, _bytes: &[u8]) -> Result<()> {
        let reason = "a resident tensor is read-only (a State is written)".to_string();
        Err(Error::InvalidArgument { op: "write", reason })
    }

    fn read(&self, len: u64) -> LocalFuture<'_, Result<Vec<u8>>> {
        let bytes = self.bytes.as_slice()[..(len as usize).min(self.bytes.len())].to_vec();
        Box::pin(async move { Ok(bytes) })
    }

    fn extra_bytes(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        let repacked = self.repacked.get().map_or(0, |r| r.bytes() as u64);
        #[cfg(not(target_arch = "x86_64"))]
        let repacked = 0;
        self.transposed.get().map_or(0, |t| 4 * t.len() as u64) + repacked
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A state's words (8-byte aligned), written by runs and by the host under `lock`.
pub(crate) struct CpuState {
    words: UnsafeCell<Vec<u64>>,
    lock: Mutex<()>,
}

// SAFETY: the words are only accessed while `lock` is held (by a run, or by the host's reads and writes), so no two
// threads touch them at once.
unsafe impl Sync for CpuState {}

impl CpuState {
    pub(crate) fn new(words: Vec<u64>) -> CpuState {
        CpuState { words: UnsafeCell::new(words), lock: Mutex::new(()) }
    }

    /// Locks the state for a run (a poisoned lock is taken over: the words are plain data).
    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The words' address, for a run that holds [`CpuState::lock`] while it uses it.
    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        // SAFETY: only the pointer is taken here; the caller holds the lock while it reads or writes through it.
        unsafe { (*self.words.get()).as_mut_ptr() as *mut u8 }
    }
}

impl ExternalMemory for CpuState {
    fn write(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        let _guard = self.lock();
        // SAFETY: the words are only touched while `lock` is held.
        let dst: &mut [u8] = bytemuck::cast_slice_mut(unsafe { &mut *self.words.get() });
        let at = offset as usize;
        dst[at..at + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    fn read(&self, len: u64) -> LocalFuture<'_, Result<Vec<u8>>> {
        let bytes = {
            let _guard = self.lock();
            // SAFETY: as in `write`.
            let src: &[u8] = bytemuck::cast_slice(unsafe { &*self.words.get() });
            src[..len as usize].to_vec()
        };
        Box::pin(async move { Ok(bytes) })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
