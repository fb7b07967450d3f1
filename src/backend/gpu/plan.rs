//! A compiled GPU plan (stage 5): arenas, uniform blocks, pipelines and bind groups are created here, once, from the
//! pass list's result.
//! Each run writes the inputs, encodes every dispatch into one command buffer, submits once and reads the
//! outputs back through one staging buffer.

use super::device::GpuBackend;
use super::kernel::Dispatch;
use crate::backend::{gather, CompileOptions, Executable, LocalFuture, PlanStats};
use crate::compile::ir::Program;
use crate::compile::memory::MemoryPlan;
use crate::compile::Compiled;
use crate::gpu::MatmulKernels;
#[cfg(not(target_arch = "wasm32"))]
use crate::gpu::READBACK_TIMEOUT_ENV;
use crate::graph::NodeId;
use crate::{Data, Error, Graph, HostTensor, Result, Tensor};
use std::collections::HashSet;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// Bytes reserved per dispatch's uniform block (every family's `Params` fits), also its alignment in the uniform
/// buffer.
const PARAMS_BYTES: u64 = 256;

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

pub(crate) struct GpuPlan {
    gpu: Arc<GpuBackend>,
    program: Program,
    mem: MemoryPlan,
    /// The plan's wgpu objects, released in `Drop for GpuPlan` under the device's serial lock.
    res: ManuallyDrop<Resources>,
    /// Storage nodes read back, with their byte offset in `res.staging`.
    readback: Vec<(NodeId, u64)>,
    poison: bool,
    pipelines: usize,
    buffers: usize,
    kernels: Vec<String>,
}

/// The wgpu objects a plan owns. Releasing them takes the GL context on GL (buffers are deleted at once), so
/// they are dropped under [`GpuBackend::serialize`], like every other GL call of the library: wgpu-hal panics
/// when a thread waits more than a few seconds for the context while another thread's long run holds it.
/// One dispatch of a run: pipeline, bind group, workgroups.
type Step = (Arc<wgpu::ComputePipeline>, wgpu::BindGroup, [u32; 3]);

struct Resources {
    arenas: Vec<wgpu::Buffer>,
    /// Pipeline (shared with the device's cache), bind group (which keeps the uniforms buffer alive) and
    /// workgroups of each dispatch.
    steps: Vec<Step>,
    staging: wgpu::Buffer,
}

impl Drop for GpuPlan {
    fn drop(&mut self) {
        #[cfg(not(target_arch = "wasm32"))]
        let _serial = self.gpu.serialize();
        // SAFETY: `res` is dropped once, here, and never used again.
        unsafe { ManuallyDrop::drop(&mut self.res) };
    }
}

fn round4(n: u64) -> u64 {
    n.div_ceil(4) * 4
}

/// The storage nodes read back, with their byte offset in the staging buffer, and the staging size in bytes.
fn readback_layout(program: &Program, mem: &MemoryPlan) -> (Vec<(NodeId, u64)>, u64) {
    let mut readback = Vec::new();
    let mut size = 0u64;
    for &o in &program.outputs {
        let s = program.nodes[o].storage;
        if !readback.iter().any(|&(n, _)| n == s) {
            readback.push((s, size));
            size += round4(mem.blocks[&s].size).div_ceil(256) * 256;
        }
    }
    (readback, size)
}

/// The plan's buffers: arenas, the uniform block of every dispatch (written once, here), and the staging buffer.
/// Allocation failures come back as errors from wgpu's error scopes, not panics.
async fn allocate(
    gpu: &GpuBackend,
    mem: &MemoryPlan,
    dispatches: &[&Dispatch],
    staging_size: u64,
    uniform_stride: u64,
) -> Result<(Vec<wgpu::Buffer>, wgpu::Buffer, wgpu::Buffer)> {
    let caps = &gpu.caps;
    let uniform_size = (dispatches.len() as u64 * uniform_stride).max(PARAMS_BYTES);
    // wgpu rejects a buffer over max_buffer_size with a validation error; say which limit instead
    let sizes = mem.arena_bytes.iter().map(|&b| ("the plan's memory arena", b));
    for (what, size) in sizes.chain([("the readback of the outputs", staging_size), ("the uniforms", uniform_size)]) {
        if size > caps.max_buffer_bytes {
            let limit = caps.max_buffer_bytes;
            return Err(Error::LimitExceeded { what: what.into(), size, limit_name: "max_buffer_size", limit });
        }
    }
    let validation = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let oom = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let buffer = |label, size: u64, usage| {
        gpu.device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size, usage, mapped_at_creation: false })
    };
    let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let arenas: Vec<wgpu::Buffer> =
        mem.arena_bytes.iter().map(|&size| buffer("webtensor arena", size.max(4), usage)).collect();
    let uniforms = buffer("webtensor params", uniform_size, wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST);
    let mut params = vec![0u8; (dispatches.len() as u64 * uniform_stride) as usize];
    for (i, d) in dispatches.iter().enumerate() {
        let bytes = d.params.bytes();
        let at = i * uniform_stride as usize;
        params[at..at + bytes.len()].copy_from_slice(bytes);
    }
    if !params.is_empty() {
        gpu.queue.write_buffer(&uniforms, 0, &params);
    }
    let staging =
        buffer("webtensor readback", staging_size.max(4), wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
    let (oom, validation) = (oom.pop(), validation.pop());
    let bytes = mem.total_bytes() + uniform_size + staging_size;
    if let Some(e) = oom.await {
        let context = format!("allocating {bytes} bytes of GPU memory for the plan (out of memory)");
        return Err(Error::Gpu { context, message: e.to_string() });
    }
    if let Some(e) = validation.await {
        return Err(Error::Gpu { context: format!("allocating {bytes} bytes for the plan"), message: e.to_string() });
    }
    Ok((arenas, uniforms, staging))
}

/// The pipeline and bind group of every dispatch (pipelines from the device's cache).
async fn bind(
    gpu: &GpuBackend,
    mem: &MemoryPlan,
    dispatches: &[&Dispatch],
    arenas: &[wgpu::Buffer],
    uniforms: &wgpu::Buffer,
    uniform_stride: u64,
) -> Result<(Vec<Step>, usize)> {
    let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let mut steps = Vec::new();
    let mut keys = HashSet::new();
    for (i, d) in dispatches.iter().enumerate() {
        let pipeline = gpu.pipeline(&d.key).await?;
        keys.insert(d.key.clone());
        let layout = pipeline.get_bind_group_layout(0);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: uniforms,
                offset: i as u64 * uniform_stride,
                size: wgpu::BufferSize::new(d.params.bytes().len() as u64),
            }),
        }];
        for (b, &node) in d.bindings.iter().enumerate() {
            if d.key.alias[b] != b {
                continue; // served by the earlier binding over the same memory
            }
            let blk = mem.blocks[&node];
            let (offset, size) = d.windows[b].unwrap_or((0, round4(blk.size)));
            entries.push(wgpu::BindGroupEntry {
                binding: b as u32 + 1,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &arenas[blk.arena],
                    offset: blk.offset + offset,
                    size: wgpu::BufferSize::new(size),
                }),
            });
        }
        let bg = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &entries,
        });
        steps.push((pipeline, bg, d.workgroups));
    }
    if let Some(e) = scope.pop().await {
        return Err(Error::Gpu { context: "creating bind groups".into(), message: e.to_string() });
    }
    Ok((steps, keys.len()))
}

impl GpuPlan {
    /// Runs the pass list for `outputs` of `graph` with the matmul kernels `matmul`, then creates the plan.
    pub(crate) async fn compile(
        gpu: &Arc<GpuBackend>,
        graph: &Graph,
        outputs: &[Tensor],
        options: &CompileOptions,
        matmul: MatmulKernels,
    ) -> Result<GpuPlan> {
        let target = gpu.target(matmul, !options.no_fusion);
        let compiled = crate::compile::compile(graph, outputs, &target)?;
        GpuPlan::new(gpu.clone(), compiled, options).await
    }

    /// Creates the device objects of a compiled program: buffers, uniform blocks, pipelines, bind groups.
    pub(crate) async fn new(
        gpu: Arc<GpuBackend>,
        compiled: Compiled<Dispatch>,
        options: &CompileOptions,
    ) -> Result<GpuPlan> {
        let Compiled { program, memory: mem, kernels } = compiled;
        let dispatches: Vec<&Dispatch> = kernels.iter().flatten().collect();
        let (readback, staging_size) = readback_layout(&program, &mem);
        let uniform_stride = PARAMS_BYTES.max(gpu.caps.min_uniform_offset_alignment as u64);
        let (arenas, uniforms, staging) = allocate(&gpu, &mem, &dispatches, staging_size, uniform_stride).await?;
        let (steps, pipelines) = bind(&gpu, &mem, &dispatches, &arenas, &uniforms, uniform_stride).await?;
        // wgpu reports no errors for work on a lost device: a device lost during compile shows up only here
        gpu.check_alive("compile")?;
        let buffers = arenas.len() + 2;
        let kernels = kernels.iter().map(|k| k[0].key.kind.name()).collect();
        Ok(GpuPlan {
            gpu,
            program,
            mem,
            res: ManuallyDrop::new(Resources { arenas, steps, staging }),
            readback,
            poison: options.poison,
            pipelines,
            buffers,
            kernels,
        })
    }

    async fn run_async(&mut self, inputs: &[(NodeId, &HostTensor)]) -> Result<Vec<HostTensor>> {
        let gpu = self.gpu.clone();
        #[cfg(not(target_arch = "wasm32"))]
        let _serial = gpu.serialize();
        gpu.check_alive("run")?;
        let validation = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let oom = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        if self.poison {
            for a in &self.res.arenas {
                gpu.queue.write_buffer(a, 0, &vec![0xFF; a.size() as usize]);
            }
        }
        for &(id, t) in inputs {
            let blk = self.mem.blocks[&id];
            let bytes = t.data.as_bytes();
            if bytes.len() % 4 == 0 {
                gpu.queue.write_buffer(&self.res.arenas[blk.arena], blk.offset, bytes);
            } else {
                let mut padded = bytes.to_vec();
                padded.resize(round4(bytes.len() as u64) as usize, 0);
                gpu.queue.write_buffer(&self.res.arenas[blk.arena], blk.offset, &padded);
            }
        }
        let mut enc =
            gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("webtensor run") });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
            for (pipeline, bg, [x, y, z]) in &self.res.steps {
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, bg, &[]);
                pass.dispatch_workgroups(*x, *y, *z);
            }
        }
        for &(node, off) in &self.readback {
            let blk = self.mem.blocks[&node];
            enc.copy_buffer_to_buffer(
                &self.res.arenas[blk.arena],
                blk.offset,
                &self.res.staging,
                off,
                round4(blk.size),
            );
        }
        gpu.queue.submit([enc.finish()]);
        let oom = oom.pop();
        let validation = validation.pop();
        if let Some(e) = oom.await {
            return Err(Error::Gpu { context: "run (out of memory)".into(), message: e.to_string() });
        }
        if let Some(e) = validation.await {
            return Err(Error::Gpu { context: "run".into(), message: e.to_string() });
        }
        let bytes = read_staging(&gpu, &self.res.staging).await?;
        Ok(self
            .program
            .outputs
            .iter()
            .map(|&o| {
                let n = &self.program.nodes[o];
                let (_, off) = *self.readback.iter().find(|&&(s, _)| s == n.storage).expect("staged");
                let size = self.mem.blocks[&n.storage].size as usize;
                let storage = Data::from_bytes(n.dtype, &bytes[off as usize..off as usize + size]);
                HostTensor { shape: n.layout.shape.clone(), data: gather(&storage, &n.layout) }
            })
            .collect())
    }
}

/// Maps `staging` for reading and returns its bytes. Natively the device is polled until the GPU is done, for
/// at most [`READBACK_TIMEOUT_ENV`] (60 s by default), and the map has then completed or failed: this never
/// blocks longer. On wasm the browser completes (or, when the device is lost, fails) the map and this future
/// awaits its callback.
///
/// # Errors
/// [`Error::Gpu`] when the device is lost, the wait times out, or the map fails. The buffer is left unmapped
/// in every case, so a later run can map it again.
async fn read_staging(gpu: &GpuBackend, staging: &wgpu::Buffer) -> Result<Vec<u8>> {
    let (tx, rx) = futures_channel::oneshot::channel();
    staging.map_async(wgpu::MapMode::Read, .., move |r| {
        let _ = tx.send(r);
    });
    match wait_for_map(gpu, rx).await {
        Ok(()) => {
            let bytes = staging.get_mapped_range(..).map(|view| view.to_vec());
            staging.unmap();
            bytes.map_err(|e| Error::Gpu { context: "readback".into(), message: e.to_string() })
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

impl Executable for GpuPlan {
    fn run<'a>(&'a mut self, inputs: &'a [(NodeId, &'a HostTensor)]) -> LocalFuture<'a, Result<Vec<HostTensor>>> {
        Box::pin(self.run_async(inputs))
    }

    fn stats(&self) -> PlanStats {
        PlanStats {
            dispatches: self.res.steps.len(),
            pipelines: self.pipelines,
            memory_bytes: self.mem.total_bytes(),
            peak_live_bytes: self.mem.peak_live_bytes,
            buffers: self.buffers,
            kernels: self.kernels.clone(),
        }
    }

    fn input_ids(&self) -> &[NodeId] {
        &self.program.inputs
    }
}
