//! What compiling takes and a compiled plan reports, beside [`Device`](crate::Device) and
//! [`Plan`](crate::Plan): [`CompileOptions`], [`PlanStats`] (with [`TransferStats`]) and [`KernelTime`]. Plain
//! data, below the backends that fill them, so that the model runners and bindings above the public face need
//! nothing of the backends.

/// Counts that describe a compiled plan, for tests and `webtensor demo --stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Kernel launches per run (GPU dispatches, or CPU kernel calls).
    pub dispatches: usize,
    /// Distinct compute pipelines the plan uses (0 on the CPU).
    pub pipelines: usize,
    /// Device memory the plan holds for tensors, in bytes (all arenas).
    pub memory_bytes: u64,
    /// Largest sum of live tensor sizes at one point of the schedule, in bytes.
    pub peak_live_bytes: u64,
    /// Bytes of resident tensors (weights) the steps read per run: each step's view of each (once, however it
    /// broadcasts), only the gathered rows for `get_rows`. A language model's decode step reads its weights once
    /// at best: this against the weights' bytes is then 1.0.
    pub resident_read_bytes: u64,
    /// Bytes of the resident tensors the plan uses, each once (as stored: a copy a backend keeps, such as the
    /// CPU's repacked weights, not counted).
    pub resident_bytes: u64,
    /// Buffers the plan created at compile time.
    pub buffers: usize,
    /// The kernel of each step, in schedule order (e.g. `matmul_tiled 128x128x8`, `matvec`, `rows softmax`): its
    /// first dispatch's where a step takes several (a split over a large tensor, split attention's combine pass).
    pub kernels: Vec<String>,
    /// What the last run moved between the host and the device (zeros before the first run, and on the CPU
    /// backend, where nothing moves).
    pub transfer: TransferStats,
}

/// Bytes one run moved between host and device memory, and the bytes it copied on the host doing so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Input bytes written to the device.
    pub upload_bytes: u64,
    /// Output bytes copied back from the device (only what was fetched).
    pub readback_bytes: u64,
    /// Bytes copied by the host: inputs into staging memory, outputs out of it (and any padding or
    /// intermediate copy). A run that copies each byte once has `upload_bytes + readback_bytes`.
    pub host_copy_bytes: u64,
}

/// Options for [`Device::compile_with`](crate::Device::compile_with).
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Fill every non-input tensor with NaN (0xFFFF… bit patterns) before each run, so that an element a
    /// kernel never writes shows up. For tests; costs one extra write of the plan's memory per run.
    pub poison: bool,
    /// Pins the GPU matmul kernel for this plan (else `WEBTENSOR_MATMUL`, else the device's tuned choice).
    pub matmul: Option<crate::tuning::MatmulChoice>,
    /// Turn off elementwise fusion and in-place execution (GPU plans): one dispatch per op, as built.
    pub no_fusion: bool,
    /// CPU backend: keep the activations of matmuls with block-quantized weights in f32. By default they are
    /// rounded to 8-bit blocks of 32 (ggml's Q8_1, as llama.cpp's CPU backend does) for the integer kernels of
    /// the block types, which moves each dot product by about 0.3% of its magnitude and reads the weights several
    /// times faster. GPU backends always compute in f32.
    pub f32_activations: bool,
}

/// One dispatch of a profiled run ([`Plan::set_profiling`](crate::Plan::set_profiling)): its kernel, named as in
/// [`PlanStats::kernels`], and its time on the device in microseconds, from the timestamp written before it to the
/// one after it (so the wait at the barrier before it counts too: a run's dispatch times add up to its GPU time).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    pub kernel: String,
    pub gpu_us: f64,
}
