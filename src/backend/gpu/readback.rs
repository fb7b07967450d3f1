//! Waiting for the GPU and reading its buffers back (stage 4): every wait is bounded natively
//! ([`READBACK_TIMEOUT_ENV`], 60 s by default), so a stuck GPU is an error and never a hang.

use super::device::GpuBackend;
use crate::error::{Error, Result};
#[cfg(not(target_arch = "wasm32"))]
use crate::tuning::READBACK_TIMEOUT_ENV;

/// The readback bound: `WEBTENSOR_READBACK_TIMEOUT_MS` if set to a positive number, else 60 s.
#[cfg(not(target_arch = "wasm32"))]
fn readback_timeout() -> std::time::Duration {
    static TIMEOUT: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *TIMEOUT.get_or_init(|| {
        let default = std::time::Duration::from_secs(60);
        match std::env::var(READBACK_TIMEOUT_ENV) {
            Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => std::time::Duration::from_millis(ms),
                _ => {
                    log::warn!("webtensor: ignoring {READBACK_TIMEOUT_ENV}={v:?} (not a positive number of ms)");
                    default
                }
            },
            _ => default,
        }
    })
}

/// Waits, for at most the readback bound, until the GPU has done submission `index`.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn wait_for_submission(gpu: &GpuBackend, index: wgpu::SubmissionIndex) -> Result<()> {
    let timeout = readback_timeout();
    gpu.poll(wgpu::PollType::Wait { submission_index: Some(index), timeout: Some(timeout) }).map(drop).map_err(|e| {
        let why = match e {
            Error::Gpu { message, .. } => message,
            e => e.to_string(),
        };
        Error::Gpu {
            context: "run".into(),
            message: format!("the GPU did not finish a part of the plan within {timeout:?} ({why}); {READBACK_TIMEOUT_ENV} sets this bound"),
        }
    })?;
    gpu.check_alive("run")
}

/// The first `len` bytes of `buffer` (a state), through a staging buffer of their own.
pub(crate) async fn read_buffer(gpu: &GpuBackend, buffer: &wgpu::Buffer, len: u64) -> Result<Vec<u8>> {
    #[cfg(not(target_arch = "wasm32"))]
    let _serial = gpu.serialize();
    gpu.check_alive("reading a state")?;
    let size = len.div_ceil(8) * 8;
    let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("webtensor state readback"),
        size: size.max(8),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
    enc.copy_buffer_to_buffer(buffer, 0, &staging, 0, (len.div_ceil(4) * 4).min(buffer.size()));
    gpu.queue.submit([enc.finish()]);
    read_staging(gpu, &staging, len, |bytes| bytes[..len as usize].to_vec()).await
}

/// Maps the first `len` bytes of `staging` for reading and returns what `take` makes of them (read in place,
/// before the buffer is unmapped). Natively the device is polled until the GPU is done, for at most
/// [`READBACK_TIMEOUT_ENV`] (60 s by default), and the map has then completed or failed: this never blocks
/// longer. On wasm the browser completes (or, when the device is lost, fails) the map and this future awaits its
/// callback.
///
/// # Errors
/// [`Error::Gpu`] when the device is lost, the wait times out, or the map fails. The buffer is left unmapped
/// in every case, so a later run can map it again.
pub(crate) async fn read_staging<T>(
    gpu: &GpuBackend,
    staging: &wgpu::Buffer,
    len: u64,
    take: impl FnOnce(&[u8]) -> T,
) -> Result<T> {
    let (tx, rx) = futures_channel::oneshot::channel();
    // map offsets and sizes are multiples of 8 bytes (wgpu::MAP_ALIGNMENT); the staging buffer is large enough
    let len = len.div_ceil(8) * 8;
    let range = 0..len.min(staging.size());
    staging.map_async(wgpu::MapMode::Read, range.clone(), move |r| {
        let _ = tx.send(r);
    });
    match wait_for_map(gpu, rx).await {
        Ok(()) => {
            let taken = staging.get_mapped_range(range).map(|view| take(&view));
            staging.unmap();
            taken.map_err(|e| Error::Gpu { context: "readback".into(), message: e.to_string() })
        }
        Err(e) => {
            // Forget the failed or still pending map, else every later map of this buffer fails at once. (On a
            // buffer whose map failed, unmapping is itself an error; the scope swallows it.)
            let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
            staging.unmap();
            drop(scope);
            Err(e)
        }
    }
}

/// Waits for the map callback of [`read_staging`]: see there.
async fn wait_for_map(
    gpu: &GpuBackend,
    rx: futures_channel::oneshot::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>,
) -> Result<()> {
    let failed = |message: String| Error::Gpu { context: "readback".into(), message };
    #[cfg(not(target_arch = "wasm32"))]
    let mapped = {
        let mut rx = rx;
        let timeout = readback_timeout();
        if let Err(e) = gpu.poll(wgpu::PollType::Wait { submission_index: None, timeout: Some(timeout) }) {
            gpu.check_alive("readback")?;
            let why = match e {
                Error::Gpu { message, .. } => message,
                e => e.to_string(),
            };
            return Err(failed(format!(
                "the GPU did not finish within {timeout:?} ({why}); {READBACK_TIMEOUT_ENV} sets this bound"
            )));
        }
        // a device lost while the GPU worked is reported now (its buffers are gone, even if the map succeeded)
        gpu.check_alive("readback")?;
        // The wait covered every submission, but wgpu runs map callbacks on whichever thread polls: when another
        // thread's poll took ours, the callback may still be on its way. Poll again until the bound, never block.
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match rx.try_recv() {
                Ok(Some(mapped)) => break mapped,
                Ok(None) if std::time::Instant::now() < deadline => {
                    gpu.poll(wgpu::PollType::Poll)?;
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                Ok(None) => {
                    return Err(failed(format!(
                        "the GPU finished but the buffer was not mapped within {timeout:?}; {READBACK_TIMEOUT_ENV} sets this bound"
                    )))
                }
                Err(_) => return Err(failed("the map callback was dropped".into())),
            }
        }
    };
    #[cfg(target_arch = "wasm32")]
    let mapped = rx.await.map_err(|_| failed("the map callback was dropped".into()))?;
    mapped.map_err(|e| gpu.check_alive("readback").err().unwrap_or_else(|| failed(e.to_string())))
}
