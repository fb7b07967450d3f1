//! A compiled GPU plan (stage 3; its runs are stage 4): arenas, uniform blocks, pipelines and bind groups are created here, once, from the
//! pass list's result.
//! Each run writes the inputs, encodes every dispatch into one command buffer (or takes the one encoded ahead,
//! after the last run), submits once and reads the outputs back through one staging buffer.

use super::device::GpuBackend;
use super::external::GpuMemory;
use super::kernel::{Dispatch, DynamicGrid, SCRATCH, TABLES};
use super::readback::read_staging;
#[cfg(not(target_arch = "wasm32"))]
use super::readback::wait_for_submission;
use super::timing::DispatchTimer;
use crate::backend::gpu::config::MatmulKernels;
use crate::backend::{fetched, gather_bytes, Executable, Inputs, LocalFuture};
use crate::compile::ir::Program;
use crate::compile::memory::MemoryPlan;
use crate::compile::Compiled;
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::graph::{Graph, Tensor};
use crate::options::{CompileOptions, KernelTime, PlanStats, TransferStats};
use crate::run::Fetch;
use crate::tensor::HostTensor;
use std::collections::HashSet;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// Bytes reserved per dispatch's uniform block (every family's `Params` fits), also its alignment in the uniform
/// buffer.
const PARAMS_BYTES: u64 = 256;

pub(crate) struct GpuPlan {
    gpu: Arc<GpuBackend>,
    program: Program,
    mem: MemoryPlan,
    /// The plan's wgpu objects, released in `Drop for GpuPlan` under the device's serial lock.
    res: ManuallyDrop<Resources>,
    poison: bool,
    pipelines: usize,
    buffers: usize,
    kernels: Vec<String>,
    /// The kernel of every dispatch, in schedule order (a step split over bindings has several).
    dispatch_kernels: Vec<String>,
    /// The dispatches the last run ran, with their GPU times, where it was profiled.
    last_profile: Option<Vec<KernelTime>>,
    /// The kernel of each matmul dispatch (what the tuner judges a candidate configuration by; natively).
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    matmul_kernels: Vec<String>,
    /// Host time of the last run until its last submit, in microseconds (the encoding of the next run's passes
    /// after it not included).
    last_us: f64,
    /// Host time the last run spent encoding the next run's passes, in microseconds.
    ahead_us: f64,
    /// Runs so far.
    runs: u64,
    /// What the last run moved and copied.
    transfer: TransferStats,
}

/// The wgpu objects a plan owns. Releasing them takes the GL context on GL (buffers are deleted at once), so
/// they are dropped under [`GpuBackend::serialize`], like every other GL call of the library: wgpu-hal panics
/// when a thread waits more than a few seconds for the context while another thread's long run holds it.
/// One dispatch of a run: pipeline, bind group, workgroups, and the run-time x extent where there is one.
type Step = (Arc<wgpu::ComputePipeline>, wgpu::BindGroup, [u32; 3], Option<DynamicGrid>);

struct Resources {
    arenas: Vec<wgpu::Buffer>,
    /// The inputs' staging memory, written while mapped (see [`Upload`]).
    upload: Option<Upload>,
    /// Pipeline (shared with the device's cache), bind group (which keeps the uniforms buffer alive) and
    /// workgroups of each dispatch.
    steps: Vec<Step>,
    staging: wgpu::Buffer,
    /// Kept alive for the bind groups that use it.
    scratch: Option<wgpu::Buffer>,
    /// The next run's passes, encoded after the last run's submit.
    ahead: Option<Ahead>,
    /// Times each dispatch on the GPU while profiling (see [`Executable::set_profiling`]).
    timer: Option<DispatchTimer>,
}

/// A run's compute passes encoded before the run (after the previous one's submit, while the GPU works: the
/// host's encoding leaves the critical path): the command buffers and the x extents they dispatch.
struct Ahead {
    xs: Vec<u32>,
    passes: Vec<wgpu::CommandBuffer>,
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

/// A plan's persistent upload staging: a MAP_WRITE buffer with a slot for each input, written while mapped and
/// copied into the arenas by the run's own command buffer; mapped again for the next run once the GPU has
/// read it (the run's readback wait completes that map). A run that finds it still mapped by the GPU (no
/// readback waited since) writes through the queue instead.
struct Upload {
    buffer: wgpu::Buffer,
    /// Each arena input's slot: node, byte offset in `buffer`, bytes (a multiple of 4).
    slots: Vec<(NodeId, u64, u64)>,
    /// [`UNMAPPED`] (the GPU may be reading it), [`MAP_PENDING`] or [`MAPPED`] (written by the map callback).
    state: Arc<std::sync::atomic::AtomicU8>,
}

const UNMAPPED: u8 = 0;
const MAP_PENDING: u8 = 1;
const MAPPED: u8 = 2;

impl Upload {
    /// The staging for `program`'s inputs that live in the arenas (None when there are none), created mapped.
    fn new(gpu: &GpuBackend, program: &Program, mem: &MemoryPlan) -> Option<Upload> {
        let mut slots = Vec::new();
        let mut at = 0u64;
        for &id in &program.inputs {
            let size = round4(mem.blocks[&id].size);
            slots.push((id, at, size));
            at += size.div_ceil(wgpu::MAP_ALIGNMENT) * wgpu::MAP_ALIGNMENT;
        }
        if at == 0 || at > gpu.caps.max_buffer_bytes {
            return None; // nothing to stage, or more than one buffer: the queue's own staging takes the inputs
        }
        let buffer = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("webtensor upload"),
            size: at,
            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        });
        Some(Upload { buffer, slots, state: Arc::new(std::sync::atomic::AtomicU8::new(MAPPED)) })
    }

    /// Writes `inputs` into their slots (one host copy of their bytes) and encodes their copies into the arenas;
    /// false (nothing done) when the buffer is not mapped yet.
    fn stage<'b>(
        &self,
        inputs: &Inputs<'_>,
        enc: &mut wgpu::CommandEncoder,
        dst: impl Fn(NodeId) -> (&'b wgpu::Buffer, u64),
    ) -> bool {
        use std::sync::atomic::Ordering;
        if self.state.load(Ordering::Acquire) != MAPPED {
            return false;
        }
        {
            let Ok(mut view) = self.buffer.get_mapped_range_mut(..) else { return false };
            for &(id, bytes) in inputs {
                let Some(&(_, at, size)) = self.slots.iter().find(|s| s.0 == id) else { continue };
                let at = at as usize;
                view.slice(at..at + bytes.len()).copy_from_slice(bytes);
                view.slice(at + bytes.len()..at + size as usize).fill(0);
            }
        }
        self.buffer.unmap();
        self.state.store(UNMAPPED, Ordering::Release);
        for &(id, _) in inputs {
            if let Some(&(_, at, size)) = self.slots.iter().find(|s| s.0 == id) {
                let (buffer, offset) = dst(id);
                enc.copy_buffer_to_buffer(&self.buffer, at, buffer, offset, size);
            }
        }
        true
    }

    /// Asks for the buffer mapped again once the GPU has read it (after the run's submit), unless a map is
    /// pending or done already. A failed map leaves it unmapped, to be asked for again after the next run.
    fn remap(&self) {
        use std::sync::atomic::Ordering;
        if self.state.compare_exchange(UNMAPPED, MAP_PENDING, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        let state = self.state.clone();
        self.buffer.map_async(wgpu::MapMode::Write, .., move |r| {
            state.store(if r.is_ok() { MAPPED } else { UNMAPPED }, Ordering::Release);
        });
    }
}

/// The staging buffer's size in bytes: room for every output read back whole.
fn staging_size(program: &Program, mem: &MemoryPlan) -> u64 {
    program.outputs.iter().map(|&o| round4(mem.blocks[&program.nodes[o].storage].size) + 8).sum()
}

/// The plan's buffers: arenas, the uniform block of every dispatch (written once, here), and the staging buffer.
/// Allocation failures come back as errors from wgpu's error scopes, not panics.
async fn allocate(
    gpu: &GpuBackend,
    mem: &MemoryPlan,
    dispatches: &[&Dispatch],
    staging_size: u64,
    uniform_stride: u64,
) -> Result<Buffers> {
    let caps = &gpu.caps;
    let uniform_size = (dispatches.len() as u64 * uniform_stride).max(PARAMS_BYTES);
    let scratch_size = dispatches.iter().map(|d| d.scratch).max().unwrap_or(0).div_ceil(4) * 4;
    // wgpu rejects a buffer over max_buffer_size with a validation error; say which limit instead
    let sizes = mem.arena_bytes.iter().map(|&b| ("the plan's memory arena", b));
    let others =
        [("the readback of the outputs", staging_size), ("the uniforms", uniform_size), ("the scratch", scratch_size)];
    for (what, size) in sizes.chain(others) {
        if size > caps.max_buffer_bytes {
            let limit = caps.max_buffer_bytes;
            return Err(Error::LimitExceeded {
                what: what.into(),
                size,
                unit: "bytes",
                limit_name: "max_buffer_size",
                limit,
            });
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
    let scratch = (scratch_size > 0).then(|| buffer("webtensor scratch", scratch_size, usage));
    let (oom, validation) = (oom.pop(), validation.pop());
    let bytes = mem.total_bytes() + uniform_size + staging_size + scratch_size;
    if let Some(e) = oom.await {
        let context = format!("allocating {bytes} bytes of GPU memory for the plan (out of memory)");
        return Err(Error::Gpu { context, message: e.to_string() });
    }
    if let Some(e) = validation.await {
        return Err(Error::Gpu { context: format!("allocating {bytes} bytes for the plan"), message: e.to_string() });
    }
    Ok(Buffers { arenas, uniforms, staging, scratch })
}

/// The buffers a plan owns.
struct Buffers {
    arenas: Vec<wgpu::Buffer>,
    /// Every dispatch's uniform block, written once at compile time.
    uniforms: wgpu::Buffer,
    staging: wgpu::Buffer,
    /// The partial results of split attention, when a dispatch needs them.
    scratch: Option<wgpu::Buffer>,
}

/// The pipeline and bind group of every dispatch (pipelines from the device's cache).
async fn bind(
    gpu: &GpuBackend,
    program: &Program,
    mem: &MemoryPlan,
    dispatches: &[&Dispatch],
    buffers: &Buffers,
    uniform_stride: u64,
) -> Result<(Vec<Step>, usize)> {
    let (arenas, uniforms) = (&buffers.arenas, &buffers.uniforms);
    let new: HashSet<&crate::backend::gpu::kernel::KernelKey> =
        dispatches.iter().map(|d| &d.key).filter(|k| !gpu.has_pipeline(k)).collect();
    if new.len() >= 8 {
        // a software adapter can take seconds per pipeline: say what the wait is
        log::info!(
            target: crate::backend::PROGRESS_LOG,
            "webtensor: building {} compute pipelines on {} (once per process: later plans reuse them)",
            new.len(),
            gpu.caps.name
        );
    }
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
            if node == TABLES {
                let resource = gpu.grid_table().as_entire_binding();
                entries.push(wgpu::BindGroupEntry { binding: b as u32 + 1, resource });
                continue;
            }
            if d.key.alias[b] != b {
                continue; // served by the earlier binding over the same memory
            }
            if node == SCRATCH {
                let scratch = buffers.scratch.as_ref().expect("allocated for the dispatches that need it");
                let resource =
                    wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer: scratch, offset: 0, size: None });
                entries.push(wgpu::BindGroupEntry { binding: b as u32 + 1, resource });
                continue;
            }
            let blk = mem.blocks[&node];
            let (offset, size) = d.windows[b].unwrap_or((0, round4(blk.size)));
            entries.push(wgpu::BindGroupEntry {
                binding: b as u32 + 1,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: buffer_of(arenas, program, mem, blk.arena),
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
        steps.push((pipeline, bg, d.workgroups, d.dynamic));
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
        let staging_size = staging_size(&program, &mem);
        let uniform_stride = PARAMS_BYTES.max(gpu.caps.min_uniform_offset_alignment as u64);
        let buffers = allocate(&gpu, &mem, &dispatches, staging_size, uniform_stride).await?;
        let (steps, pipelines) = bind(&gpu, &program, &mem, &dispatches, &buffers, uniform_stride).await?;
        // wgpu reports no errors for work on a lost device: a device lost during compile shows up only here
        gpu.check_alive("compile")?;
        let Buffers { arenas, staging, scratch, .. } = buffers;
        let upload = Upload::new(&gpu, &program, &mem);
        let n_buffers = arenas.len() + 2 + scratch.is_some() as usize + upload.is_some() as usize;
        let matmul_kernels = super::kernel::matmul_kernel_names(dispatches.iter().copied());
        let kernels = kernels.iter().filter_map(|k| k.first()).map(|k| k.key.kind.name()).collect();
        let dispatch_kernels = dispatches.iter().map(|d| d.key.kind.name()).collect();
        Ok(GpuPlan {
            gpu,
            program,
            mem,
            res: ManuallyDrop::new(Resources { arenas, upload, steps, staging, scratch, ahead: None, timer: None }),
            poison: options.poison,
            pipelines,
            buffers: n_buffers,
            kernels,
            dispatch_kernels,
            last_profile: None,
            matmul_kernels,
            last_us: 0.0,
            ahead_us: 0.0,
            runs: 0,
            transfer: TransferStats::default(),
        })
    }

    /// The kernel of each matmul dispatch, in schedule order.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) fn matmul_kernels(&self) -> &[String] {
        &self.matmul_kernels
    }

    /// The buffer holding block `blk`: an arena, or an external tensor's own buffer.
    fn buffer(&self, arena: usize) -> &wgpu::Buffer {
        buffer_of(&self.res.arenas, &self.program, &self.mem, arena)
    }

    /// Writes the run's inputs into their blocks: through the persistent upload buffer when the plan has one,
    /// else through the queue's own staging. Returns the transfer counts so far.
    fn upload(&self, inputs: &Inputs<'_>, enc: &mut wgpu::CommandEncoder) -> TransferStats {
        let up: u64 = inputs.iter().map(|(_, b)| b.len() as u64).sum();
        let mut transfer = TransferStats { upload_bytes: up, host_copy_bytes: up, ..Default::default() };
        let dst = |id: NodeId| {
            let blk = self.mem.blocks[&id];
            (self.buffer(blk.arena), blk.offset)
        };
        let staged = self.res.upload.as_ref().is_some_and(|u| u.stage(inputs, enc, dst));
        if !staged {
            // through the queue's own staging: one host copy too, plus a padded one for a length that is no
            // multiple of 4 bytes
            for &(id, bytes) in inputs {
                let (buffer, offset) = dst(id);
                if bytes.len() % 4 == 0 {
                    self.gpu.queue.write_buffer(buffer, offset, bytes);
                } else {
                    let mut padded = bytes.to_vec();
                    padded.resize(round4(bytes.len() as u64) as usize, 0);
                    transfer.host_copy_bytes += padded.len() as u64;
                    self.gpu.queue.write_buffer(buffer, offset, &padded);
                }
            }
        }
        transfer
    }

    /// Dispatches a submission holds: all, or on an adapter that runs on CPU cores [`SOFTWARE_PIECE`] (each
    /// piece waited for, so that the readback bound catches a stuck GPU, not a slow one: a batch of long sentences
    /// on lavapipe takes minutes).
    fn piece(&self) -> usize {
        if cfg!(target_arch = "wasm32") || self.gpu.caps.device_type != crate::caps::DeviceType::Cpu {
            usize::MAX
        } else {
            SOFTWARE_PIECE
        }
    }

    /// The x extent of every dispatch for the run whose inputs are `inputs` (0: skipped).
    fn extents(&self, inputs: &Inputs<'_>) -> Vec<u32> {
        self.res.steps.iter().map(|(_, _, [x, _, _], dynamic)| dynamic.map_or(*x, |d| d.x(inputs, *x))).collect()
    }

    /// The plan's compute passes with x extents `xs`: one command buffer per submission (see [`GpuPlan::piece`]);
    /// while profiling, a timestamp at the start of each and after each dispatch (a skipped one too).
    fn encode_passes(&self, xs: &[u32]) -> Vec<wgpu::CommandBuffer> {
        let piece = self.piece();
        let steps = self.res.steps.chunks(piece).zip(xs.chunks(piece));
        steps
            .enumerate()
            .map(|(p, (steps, xs))| {
                let descriptor = wgpu::CommandEncoderDescriptor { label: Some("webtensor run") };
                let mut enc = self.gpu.device.create_command_encoder(&descriptor);
                {
                    let mut pass =
                        enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
                    if let Some(t) = &self.res.timer {
                        t.write_start(&mut pass, p);
                    }
                    for (j, ((pipeline, bg, [_, y, z], _), &x)) in steps.iter().zip(xs).enumerate() {
                        if x > 0 {
                            pass.set_pipeline(pipeline);
                            pass.set_bind_group(0, bg, &[]);
                            pass.dispatch_workgroups(x, *y, *z);
                        }
                        if let Some(t) = &self.res.timer {
                            t.write_after(&mut pass, p * piece + j);
                        }
                    }
                }
                enc.finish()
            })
            .collect()
    }

    /// Submits the run: the uploads with the first pass, then each pass (waiting for each but the last where
    /// there are several), the readback copies with the last.
    fn submit(
        &self,
        uploads: wgpu::CommandBuffer,
        passes: Vec<wgpu::CommandBuffer>,
        readback: wgpu::CommandBuffer,
    ) -> Result<()> {
        let queue = &self.gpu.queue;
        let n = passes.len();
        if n == 0 {
            queue.submit([uploads, readback]);
            return Ok(());
        }
        let (mut uploads, mut readback) = (Some(uploads), Some(readback));
        for (i, pass) in passes.into_iter().enumerate() {
            let last = (i + 1 == n).then(|| readback.take()).flatten();
            let index = queue.submit(uploads.take().into_iter().chain([pass]).chain(last));
            if i + 1 < n {
                #[cfg(not(target_arch = "wasm32"))]
                wait_for_submission(&self.gpu, index)?;
                #[cfg(target_arch = "wasm32")]
                let _ = index;
            }
        }
        Ok(())
    }

    async fn run_async(&mut self, inputs: &Inputs<'_>, fetch: &[Fetch]) -> Result<Vec<Option<HostTensor>>> {
        let start = crate::backend::now();
        let gpu = self.gpu.clone();
        #[cfg(not(target_arch = "wasm32"))]
        let _serial = gpu.serialize();
        gpu.check_alive("run")?;
        let copies = self.copies(fetch)?;
        // a run that fails leaves no profile (not the run's before)
        self.last_profile = None;
        let validation = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let oom = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        if self.poison {
            for a in self.res.arenas.iter().chain(&self.res.scratch) {
                gpu.queue.write_buffer(a, 0, &vec![0xFF; a.size() as usize]);
            }
        }
        let label = |l| wgpu::CommandEncoderDescriptor { label: Some(l) };
        let mut enc = gpu.device.create_command_encoder(&label("webtensor upload"));
        let mut transfer = self.upload(inputs, &mut enc);
        // the passes encoded after the last run's submit serve when this run's extents are theirs
        let xs = self.extents(inputs);
        // which dispatches do work, for the profile (only while profiling: no allocation on a plain run)
        let ran: Option<Vec<bool>> = self.res.timer.as_ref().map(|_| xs.iter().map(|&x| x > 0).collect());
        let passes = match self.res.ahead.take() {
            Some(ahead) if ahead.xs == xs => ahead.passes,
            _ => self.encode_passes(&xs),
        };
        let readback = self.encode_readback(&copies);
        self.submit(enc.finish(), passes, readback)?;
        if let Some(u) = &self.res.upload {
            u.remap();
        }
        self.last_us = crate::backend::elapsed_us(start);
        // a plan run twice is likely run again: its next passes are encoded now, while the GPU works (wgpu
        // submits a command buffer once; a run whose extents differ encodes its own)
        let ahead = crate::backend::now();
        self.ahead_us = 0.0;
        if self.runs > 0 {
            self.res.ahead = Some(Ahead { passes: self.encode_passes(&xs), xs });
            self.ahead_us = crate::backend::elapsed_us(ahead);
        }
        self.runs += 1;
        let oom = oom.pop();
        let validation = validation.pop();
        if let Some(e) = oom.await {
            return Err(Error::Gpu { context: "run (out of memory)".into(), message: e.to_string() });
        }
        if let Some(e) = validation.await {
            return Err(Error::Gpu { context: "run".into(), message: e.to_string() });
        }
        let outputs = self.read_outputs(&gpu, &copies).await?;
        transfer.readback_bytes = copies.iter().flatten().map(|c| c.len).sum();
        transfer.host_copy_bytes +=
            outputs.iter().flatten().map(|t: &HostTensor| t.data.as_bytes().len() as u64).sum::<u64>();
        self.transfer = transfer;
        self.last_profile = match (&self.res.timer, ran) {
            // a dispatch its run-time length skipped did no work: its slot is left out
            (Some(t), Some(ran)) => Some(
                (t.read(&gpu).await?.into_iter().zip(&self.dispatch_kernels).zip(ran))
                    .filter(|(_, ran)| *ran)
                    .map(|((us, k), _)| KernelTime { kernel: k.clone(), gpu_us: us })
                    .collect(),
            ),
            _ => None,
        };
        Ok(outputs)
    }

    /// The commands that copy each fetched output into the staging buffer (and resolve the timestamps).
    fn encode_readback(&self, copies: &[Option<Copy>]) -> wgpu::CommandBuffer {
        let label = wgpu::CommandEncoderDescriptor { label: Some("webtensor readback") };
        let mut readback = self.gpu.device.create_command_encoder(&label);
        for c in copies.iter().flatten() {
            let blk = self.mem.blocks[&c.storage];
            readback.copy_buffer_to_buffer(self.buffer(blk.arena), blk.offset + c.from, &self.res.staging, c.to, c.len);
        }
        if let Some(t) = &self.res.timer {
            t.resolve(&mut readback);
        }
        readback.finish()
    }

    /// Each fetched output, built straight from the mapped staging memory: one host copy of what was fetched.
    async fn read_outputs(&self, gpu: &GpuBackend, copies: &[Option<Copy>]) -> Result<Vec<Option<HostTensor>>> {
        let total = copies.iter().flatten().map(|c| c.to + c.len).max().unwrap_or(0);
        let nodes = &self.program.nodes;
        if total == 0 {
            // nothing to read (empty outputs, or none fetched)
            return Ok(copies.iter().map(|c| c.as_ref().map(|c| c.output_from(nodes, &[]))).collect());
        }
        read_staging(gpu, &self.res.staging, total, |bytes| {
            copies.iter().map(|c| c.as_ref().map(|c| c.output_from(nodes, bytes))).collect()
        })
        .await
    }

    /// For each output, what this run copies back (`None`: nothing): the bytes its fetched layout spans, packed
    /// one after another from the start of the staging buffer.
    fn copies(&self, fetch: &[Fetch]) -> Result<Vec<Option<Copy>>> {
        let mut to = 0u64;
        let mut out = Vec::with_capacity(fetch.len());
        for (&o, f) in self.program.outputs.iter().zip(fetch) {
            let n = &self.program.nodes[o];
            let Some(layout) = fetched(&n.layout, f)? else {
                out.push(None);
                continue;
            };
            let esz = n.dtype.size_bytes() as u64;
            let from = layout.offset as u64 * esz / 4 * 4;
            let end = round4(layout.storage_extent() as u64 * esz).min(round4(self.mem.blocks[&n.storage].size));
            let len = end.saturating_sub(from);
            out.push(Some(Copy { output: o, storage: n.storage, layout, from, to, len }));
            to += round4(len);
        }
        Ok(out)
    }
}

/// Dispatches a submission holds on an adapter that runs on CPU cores (see [`GpuPlan::piece`]).
const SOFTWARE_PIECE: usize = 24;

/// One output's readback in a run: `len` bytes from byte `from` of its storage's block to byte `to` of staging.
struct Copy {
    output: NodeId,
    storage: NodeId,
    layout: crate::shape::Layout,
    from: u64,
    to: u64,
    len: u64,
}

impl Copy {
    /// The output's values from the staging bytes `staged` (its fetched layout gathered from them).
    fn output_from(&self, nodes: &[crate::compile::ir::Node], staged: &[u8]) -> HostTensor {
        let n = &nodes[self.output];
        let esz = n.dtype.size_bytes();
        let chunk = &staged[self.to as usize..(self.to + self.len) as usize];
        let mut layout = self.layout.clone();
        layout.offset -= (self.from / esz as u64) as usize;
        HostTensor {
            shape: layout.shape.clone(),
            data: gather_bytes(n.dtype, &chunk[..chunk.len() / esz * esz], &layout),
        }
    }
}

/// The buffer of block arena index `arena`: one of the plan's arenas, or an external tensor's own buffer.
fn buffer_of<'a>(arenas: &'a [wgpu::Buffer], program: &'a Program, mem: &MemoryPlan, arena: usize) -> &'a wgpu::Buffer {
    if arena < arenas.len() {
        return &arenas[arena];
    }
    let node = mem.externals[arena - arenas.len()];
    program
        .external(node)
        .and_then(|r| GpuMemory::buffer_of(r.ext.memory.as_ref()))
        .expect("compile checked that every external tensor is on this device")
}

impl Executable for GpuPlan {
    fn run<'a>(
        &'a mut self,
        inputs: &'a Inputs<'a>,
        fetch: &'a [Fetch],
    ) -> LocalFuture<'a, Result<Vec<Option<HostTensor>>>> {
        Box::pin(self.run_async(inputs, fetch))
    }

    fn stats(&self) -> PlanStats {
        PlanStats {
            dispatches: self.res.steps.len(),
            pipelines: self.pipelines,
            memory_bytes: self.mem.total_bytes(),
            peak_live_bytes: self.mem.peak_live_bytes,
            resident_read_bytes: self.program.resident_read_bytes(),
            resident_bytes: self.program.resident_bytes(),
            buffers: self.buffers,
            kernels: self.kernels.clone(),
            transfer: self.transfer,
        }
    }

    fn input_ids(&self) -> &[NodeId] {
        &self.program.inputs
    }

    fn last_host_us(&self) -> f64 {
        self.last_us
    }

    fn last_encode_ahead_us(&self) -> f64 {
        self.ahead_us
    }

    fn set_profiling(&mut self, on: bool) -> Result<()> {
        // the timer's objects are created and released under the device's lock, as every GL call
        #[cfg(not(target_arch = "wasm32"))]
        let _serial = self.gpu.serialize();
        // passes encoded ahead were encoded with the old setting
        self.res.ahead = None;
        let timer = if on { Some(DispatchTimer::new(&self.gpu, self.res.steps.len(), self.piece())?) } else { None };
        self.res.timer = timer;
        Ok(())
    }

    fn last_profile(&self) -> Option<Vec<KernelTime>> {
        self.last_profile.clone()
    }
}
