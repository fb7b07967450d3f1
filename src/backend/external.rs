//! Reading, writing and zeroing [`State`]s from the host (for tests and for saving a session), on every backend.

use super::gpu::plan::read_buffer;
use crate::resident::{host_tensor, External, ExternalMemory, State};
use crate::{Error, HostTensor, Result};

fn check(ext: &External, t: &HostTensor) -> Result<()> {
    if t.dtype() != ext.dtype || t.shape != ext.shape {
        return Err(Error::BadInput {
            name: ext.name.clone(),
            reason: format!("expected {} {:?}, got {} {:?}", ext.dtype, ext.shape, t.dtype(), t.shape),
        });
    }
    Ok(())
}

/// Overwrites the state's bytes with `bytes` (its exact size).
fn write_bytes(ext: &External, bytes: &[u8]) -> Result<()> {
    match &ext.memory {
        ExternalMemory::CpuState { words, lock } => {
            let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the words are only touched while `lock` is held (see `ExternalMemory`).
            let dst: &mut [u8] = bytemuck::cast_slice_mut(unsafe { &mut *words.get() });
            dst[..bytes.len()].copy_from_slice(bytes);
            Ok(())
        }
        ExternalMemory::Gpu { buffer, device } => {
            #[cfg(not(target_arch = "wasm32"))]
            let _serial = device.serialize();
            device.check_alive("writing a state")?;
            let mut padded = bytes.to_vec();
            padded.resize(bytes.len().div_ceil(4) * 4, 0);
            device.queue.write_buffer(buffer, 0, &padded);
            Ok(())
        }
        ExternalMemory::CpuBytes(..) => unreachable!("states are writable"),
    }
}

impl State {
    /// Sets every element to zero.
    ///
    /// # Errors
    /// [`Error::Gpu`] when the device was lost.
    pub fn zero(&self) -> Result<()> {
        write_bytes(&self.inner, &vec![0u8; self.inner.bytes() as usize])
    }

    /// Overwrites the state with `t`'s values (for tests, and for restoring a saved session).
    ///
    /// # Errors
    /// [`Error::BadInput`] naming the state when `t`'s dtype or shape differs; [`Error::Gpu`] when the device was
    /// lost.
    pub fn write(&self, t: &HostTensor) -> Result<()> {
        check(&self.inner, t)?;
        write_bytes(&self.inner, t.data.as_bytes())
    }

    /// The state's values, asynchronously (as the last run that wrote them left them).
    ///
    /// # Errors
    /// [`Error::Gpu`] when the device was lost or the readback failed.
    pub async fn read_async(&self) -> Result<HostTensor> {
        let ext = &self.inner;
        let bytes = match &ext.memory {
            ExternalMemory::CpuState { words, lock } => {
                let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
                // SAFETY: as in `write_bytes`.
                let src: &[u8] = bytemuck::cast_slice(unsafe { &*words.get() });
                src[..ext.bytes() as usize].to_vec()
            }
            ExternalMemory::Gpu { buffer, device } => read_buffer(device, buffer, ext.bytes()).await?,
            ExternalMemory::CpuBytes(..) => unreachable!("states are writable"),
        };
        host_tensor(ext.dtype, &ext.shape, &bytes)
    }

    /// Blocking form of [`State::read_async`] (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read(&self) -> Result<HostTensor> {
        pollster::block_on(self.read_async())
    }
}
