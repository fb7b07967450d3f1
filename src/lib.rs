//! # webtensor
//!
//! Tensor graphs compiled to WGSL compute pipelines on wgpu (Vulkan, Metal, DX12, GL; WebGPU in the browser),
//! with a CPU backend wherever no GPU is present. In the spirit of ggml: build a graph, compile it once for a
//! device, run it many times.
//!
//! ```
//! use webtensor::{DType, Device, Graph, HostTensor};
//! // ggml's examples/simple: ggml_mul_mat(A, B) = B · Aᵀ
//! let mut g = Graph::new();
//! let a = g.input("a", DType::F32, &[4, 2])?;
//! let b = g.input("b", DType::F32, &[3, 2])?;
//! let at = g.t(a)?;
//! let c = g.matmul(b, at)?; // [3, 4]
//! let mut plan = Device::cpu().compile(&g, &[c])?;
//! let av = HostTensor::f32(&[4, 2], vec![2., 8., 5., 1., 4., 2., 8., 6.])?;
//! let bv = HostTensor::f32(&[3, 2], vec![10., 5., 9., 9., 5., 4.])?;
//! let out = plan.run(&[(a, &av), (b, &bv)])?;
//! assert_eq!(out[0].data.to_f32()[..4], [60., 55., 50., 110.]);
//! # Ok::<(), webtensor::Error>(())
//! ```
//!
//! Four stages, one module each, numbered alike in every module's doc: 1 `graph` (build: [`Graph`], [`Tensor`]) →
//! 2 `compile` (the pass list: 1 dead nodes, 2 fusion, 3 in-place, 4 memory plan, 5 lowering, 6 splitting) →
//! 3 `backend` (the CPU and wgpu plans: device objects made once) → 4 `run` ([`Plan::run`]). The op tables
//! ([`UnaryOp`], [`BinaryOp`], [`GluOp`], [`ReduceOp`]) are the vocabulary every stage shares.
//!
//! ## Running a model: weights, KV cache, a growing sequence
//!
//! - **Weights** are uploaded once ([`Device::upload`], [`Device::upload_bytes`] for the bytes of a
//!   memory-mapped file, GGUF's block types included) and bound into any number of plans with
//!   [`Graph::resident`]; they are never passed to a run. On the CPU the bytes are used where they lie.
//! - **A KV cache** is a [`State`] ([`Device::state`]), read with [`Graph::state`] and written in place by
//!   [`Graph::set_rows`] (ggml's `ggml_set_rows`) and [`Graph::copy_into`]; a prefill plan and a decode plan of one
//!   device share it.
//! - **Run-time integers** (token ids, positions, the KV length) are [`Value::I32`] slices given to
//!   [`Plan::run_with`], which also chooses what to read back ([`Fetch`]: all, a row range, or nothing).
//! - **A growing sequence uses one plan for every length** (dynamic extents, not length buckets): the cache is
//!   compiled at its capacity and the KV length `L` is an i32 input of [`Graph::attention`]
//!   ([`Attention::kv_len`]). Kernels read `L` at run time and never touch keys at or past it; a decode step's
//!   attention splits the capacity's keys into chunks, and when `L` is a host input the run dispatches only the
//!   chunks `L` reaches (and skips the combining pass when one chunk holds them all), so a step costs what a plan
//!   built for exactly `L` costs (`cargo bench --bench runtime`: at `L` = 64 with a capacity of 8192, 1.00-1.03×
//!   the cost of a plan made for 64, on the CPU, lavapipe and GL). Nothing is compiled after the first step.

mod backend;
mod caps;
mod compile;
mod device;
mod dtype;
mod error;
mod graph;
/// GPU tuning vocabulary: the matmul kernels' tile configurations, the choice a plan or the environment can pin,
/// the environment variables the GPU backend reads, and what the tuner chose for an adapter. Everything else
/// about a GPU device is in [`Capabilities`].
pub mod gpu {
    pub use crate::backend::gpu::target::uses_cooperative_matrices;
    #[cfg(not(target_arch = "wasm32"))]
    pub use crate::backend::gpu::tune::tuned_kernels;
    pub use crate::tuning::*;
}
pub mod io;
pub use io::gguf;
#[cfg(feature = "models")]
pub mod models;
mod ops;
mod options;
mod quant;
mod resident;
mod run;
mod shape;
mod tensor;
mod tuning;
#[cfg(target_arch = "wasm32")]
pub mod wasm;

pub use backend::PROGRESS_LOG;
pub use caps::{BackendKind, Capabilities, DeviceType, BACKEND_ENV};
pub use device::{Device, Plan};
pub use dtype::DType;
pub use error::{Error, Result};
pub use graph::{Attention, Graph, Tensor};
pub use ops::{Accepts, BinaryOp, GluOp, MatmulPrecision, ReduceOp, Rope, RopeMode, RowOp, UnaryOp};
pub use options::{CompileOptions, KernelTime, PlanStats, TransferStats};
pub use resident::{Bytes, Resident, State};
pub use run::{Fetch, Value};
pub use shape::MAX_RANK;
pub use tensor::{Data, HostTensor};

/// Internals exposed for the test suite (WGSL variants for naga validation, the kernel parameter layouts). Not a
/// stable API.
#[doc(hidden)]
pub mod testing {
    pub use crate::backend::gpu::catalogue::all_variants as wgsl_variants;

    pub use crate::backend::gpu::params::ParamsLayout;

    /// The workgroup memory, in bytes, that attention's lowering counts for a tile of `br` query rows and `bc`
    /// keys with head dims `d` and `dv` when it picks the tile that fits the adapter.
    pub fn attention_shared_bytes(d: u32, dv: u32, br: u32, bc: u32) -> u32 {
        crate::backend::gpu::kernels::attention::shared_bytes(d, dv, br, bc)
    }

    /// Every kernel family's parameters as Rust and the generated WGSL lay them out, for checking the two against
    /// each other.
    pub fn params_layouts() -> Vec<ParamsLayout> {
        crate::backend::gpu::catalogue::params_layouts()
    }

    /// One dispatch of a plan compiled for an adapter profile: its kernel's name and workgroup grid.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ProfileDispatch {
        pub kernel: String,
        pub workgroups: [u32; 3],
        /// f16 tensors are stored packed in u32 words (the adapter lacks SHADER_F16).
        pub packed_f16: bool,
    }

    /// The dispatches a GPU with capabilities `caps` (a recorded adapter profile, [`crate::Capabilities::from_json`])
    /// runs for `outputs` of `graph`, compiled without a device: the pass list and lowering, with every decision
    /// that depends on the adapter (fusion, kernel choice, f16 path, subgroups, cooperative matrices, splitting)
    /// taken from `caps`. Matmuls take `options.matmul` when pinned, else the default tiled configuration and
    /// the first cooperative-matrix configuration that fits (as if tuned to those).
    pub fn plan_for_capabilities(
        caps: &crate::Capabilities,
        graph: &crate::Graph,
        outputs: &[crate::Tensor],
        options: &crate::CompileOptions,
    ) -> crate::Result<Vec<ProfileDispatch>> {
        let ds = crate::backend::gpu::profile::plan_for_capabilities(caps, graph, outputs, options)?;
        Ok(ds
            .iter()
            .map(|d| ProfileDispatch {
                kernel: d.key.kind.name(),
                workgroups: d.workgroups,
                packed_f16: d.key.packed_f16,
            })
            .collect())
    }

    /// The matmul tuner's verdict on `choice` for an adapter with capabilities `caps`, from its problem's plans
    /// compiled without the adapter: `Ok(Err(why))` when the tuner would pass the candidate over before checking
    /// its results (its plans do not build, or a matmul dispatch runs another kernel).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn tuner_verdict(
        caps: &crate::Capabilities,
        choice: crate::tuning::MatmulChoice,
    ) -> crate::Result<std::result::Result<(), String>> {
        crate::backend::gpu::tune::verdict_for_capabilities(caps, choice)
    }

    /// A GPU device of `kind` that takes the decisions an adapter with capabilities `profile` takes, where this
    /// adapter can carry them out (device type, shader-f16 and subgroups where both have them, cooperative
    /// matrices emulated where the profile has them and `emulate_coop`, the smaller of each limit); its matmul
    /// tuner times `tune_problem` = (n, repetitions). For running the suites under a recorded profile on lavapipe.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn device_with_profile(
        kind: crate::BackendKind,
        profile: &crate::Capabilities,
        emulate_coop: bool,
        tune_problem: (usize, usize),
    ) -> crate::Result<crate::Device> {
        crate::Device::with_profile(kind, profile, emulate_coop, tune_problem)
    }

    /// A GPU device of `kind` created without SHADER_F16, so f16 tensors are stored packed in u32 words and
    /// unpacked in the shader, as on adapters that lack the feature (the browser's, GL).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn device_without_f16(kind: crate::BackendKind) -> crate::Result<crate::Device> {
        crate::Device::without_f16(kind)
    }

    /// A GPU device of `kind` whose f16 × f16 matmuls take the cooperative-matrix kernel with the cooperative
    /// operations emulated in plain WGSL, for testing that kernel's tiling, layouts, edges and epilogues on
    /// adapters without cooperative matrices (lavapipe). Pin a configuration with `CompileOptions::matmul =
    /// Some(MatmulChoice::Coop(..))` (16×16 fragments); unpinned, the device tunes as usual.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn device_with_emulated_coop(kind: crate::BackendKind) -> crate::Result<crate::Device> {
        crate::Device::with_emulated_coop(kind)
    }

    /// A GPU device of `kind` whose one-row matmuls take the mat-vec kernel that splits each output's sum over
    /// 32 invocations, met through `subgroupAdd` when `subgroups` (and the adapter's subgroups fit) or else
    /// through workgroup memory: what GPUs run. Software adapters (lavapipe, SwiftShader) otherwise take the
    /// serial kernel (one invocation an output, no barriers), so this tests the other two there.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn device_with_matvec_reduce(kind: crate::BackendKind, subgroups: bool) -> crate::Result<crate::Device> {
        crate::Device::with_matvec_reduce(kind, subgroups)
    }
}
