//! GPU time of each dispatch of a plan's run, for profiling (native adapters with timestamp queries inside compute
//! passes): a timestamp at the start of each of the run's passes and one after each dispatch, resolved after the
//! run's passes and read back after its outputs. Dispatch j's time is the span between the timestamps around it,
//! so it counts the wait at the barrier before it as well as its kernel: the spans add up to the run's GPU time
//! (on adapters that run on CPU cores, whose runs are submitted in pieces, less the gaps between pieces).

use super::device::GpuBackend;
use super::readback::read_staging;
use crate::error::{Error, Result};

/// The query set and buffers that time one plan's dispatches.
pub(crate) struct DispatchTimer {
    set: wgpu::QuerySet,
    /// Where the queries are resolved (QUERY_RESOLVE), then copied to `read` (MAP_READ).
    resolve: wgpu::Buffer,
    read: wgpu::Buffer,
    /// Timestamps a run writes: one at the start of each pass and one after each dispatch.
    queries: u32,
    /// Dispatches a pass holds (the last may hold fewer), at most the run's.
    piece: usize,
    dispatches: usize,
}

impl DispatchTimer {
    /// A timer for `dispatches` dispatches on `gpu`, encoded `piece` a pass.
    ///
    /// # Errors
    /// [`Error::Unsupported`] where the device has no timestamp queries inside compute passes (the browser's
    /// WebGPU, GL without `GL_ARB_timer_query`, Apple GPUs); [`Error::LimitExceeded`] for more dispatches than a
    /// query set holds.
    pub(crate) fn new(gpu: &GpuBackend, dispatches: usize, piece: usize) -> Result<DispatchTimer> {
        if !gpu.timestamps {
            return Err(Error::Unsupported {
                op: "profiling".into(),
                backend: gpu.caps.backend.to_string(),
                reason: format!("{} has no timestamp queries inside compute passes", gpu.caps.name),
            });
        }
        let piece = piece.clamp(1, dispatches.max(1));
        let queries = (dispatches + dispatches.div_ceil(piece).max(1)) as u64;
        if queries > wgpu::QUERY_SET_MAX_QUERIES as u64 {
            return Err(Error::LimitExceeded {
                what: format!("profiling a plan of {dispatches} dispatches (a timestamp after each, one a pass)"),
                size: queries,
                unit: "timestamps",
                limit_name: "wgpu::QUERY_SET_MAX_QUERIES",
                limit: wgpu::QUERY_SET_MAX_QUERIES as u64,
            });
        }
        let set = gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("webtensor dispatch times"),
            ty: wgpu::QueryType::Timestamp,
            count: queries as u32,
        });
        let bytes = queries * 8;
        let buffer = |usage, label| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        let resolve = buffer(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC, "webtensor timestamps");
        let read = buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST, "webtensor timestamps read");
        Ok(DispatchTimer { set, resolve, read, queries: queries as u32, piece, dispatches })
    }

    /// Writes the timestamp that starts pass `p` (before its first dispatch).
    pub(crate) fn write_start(&self, pass: &mut wgpu::ComputePass<'_>, p: usize) {
        pass.write_timestamp(&self.set, (p * (self.piece + 1)) as u32);
    }

    /// Writes the timestamp after dispatch `j` (of the whole run).
    pub(crate) fn write_after(&self, pass: &mut wgpu::ComputePass<'_>, j: usize) {
        pass.write_timestamp(&self.set, self.after(j) as u32);
    }

    /// The query written after dispatch `j`: its pass's start query and those of the dispatches before it in
    /// the run come first.
    fn after(&self, j: usize) -> usize {
        j + j / self.piece + 1
    }

    /// Resolves the run's timestamps and copies them where [`DispatchTimer::read`] maps them.
    pub(crate) fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        enc.resolve_query_set(&self.set, 0..self.queries, &self.resolve, 0);
        enc.copy_buffer_to_buffer(&self.resolve, 0, &self.read, 0, self.queries as u64 * 8);
    }

    /// Each dispatch's GPU time in the last run, in microseconds (the span from the timestamp before it, its pass's
    /// start or the previous dispatch's, to the one after it; 0 where the clock did not advance).
    pub(crate) async fn read(&self, gpu: &GpuBackend) -> Result<Vec<f64>> {
        let ns_per_tick = gpu.queue.get_timestamp_period() as f64;
        let ticks = read_staging(gpu, &self.read, self.queries as u64 * 8, |bytes| {
            bytes.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).collect::<Vec<u64>>()
        })
        .await?;
        let span = |j: usize| {
            let after = self.after(j);
            ticks[after].saturating_sub(ticks[after - 1]) as f64 * ns_per_tick / 1e3
        };
        Ok((0..self.dispatches).map(span).collect())
    }
}
