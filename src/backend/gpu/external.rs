//! The wgpu backend's memory for resident and state tensors ([`ExternalMemory`]): a buffer of their own.

use super::device::GpuBackend;
use super::readback::read_buffer;
use crate::error::Result;
use crate::resident::{ExternalMemory, LocalFuture};
use std::sync::Arc;

/// An external tensor's buffer (its size rounded up to 4 bytes) and the device that made it.
pub(crate) struct GpuMemory {
    pub buffer: wgpu::Buffer,
    pub device: Arc<GpuBackend>,
}

impl GpuMemory {
    /// The buffer of `memory`, when it is a wgpu backend's.
    pub(crate) fn buffer_of(memory: &dyn ExternalMemory) -> Option<&wgpu::Buffer> {
        memory.as_any().downcast_ref::<GpuMemory>().map(|m| &m.buffer)
    }
}

impl ExternalMemory for GpuMemory {
    fn write(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        let _serial = self.device.serialize();
        self.device.check_alive("writing a state")?;
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().div_ceil(4) * 4, 0);
        self.device.queue.write_buffer(&self.buffer, offset, &padded);
        Ok(())
    }

    fn read(&self, len: u64) -> LocalFuture<'_, Result<Vec<u8>>> {
        Box::pin(read_buffer(&self.device, &self.buffer, len))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for GpuMemory {
    fn drop(&mut self) {
        #[cfg(not(target_arch = "wasm32"))]
        let _serial = self.device.serialize(); // releasing a GL buffer takes the context (see `GpuBackend::serialize`)
        self.buffer.destroy();
    }
}
