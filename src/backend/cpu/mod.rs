//! The CPU backend: every op on every dtype, natively and on wasm. It runs the same pass list as the GPU (fusion,
//! in-place execution, the memory plan over one arena) and computes in f32 with f64 accumulation in row ops;
//! matmuls go through the `gemm` crate. It is the peer every GPU result is compared with in tuning, and every op is
//! checked against an f64 reference in the differential suite.
//!
//! Laid out as the GPU backend is: the device ([`device`]: capabilities, uploads), what lowering knows about it
//! ([`target`]), lowering ([`lower`]: the list of kernel families, a kernel per step, compile pass 5), the plan
//! ([`plan`]: arenas and runs), and one module per kernel family, each owning its kernels and their lowering.

mod attention;
mod attention_rows;
mod buffer;
mod device;
mod elementwise;
mod experts;
mod external;
mod gather;
mod lower;
mod matmul;
mod parallel;
mod plan;
mod qdot;
mod quant;
mod recurrent;
mod rows;
// natively the `gemm` crate multiplies (its AVX kernels); sgemm runs there only in its tests
#[cfg_attr(not(all(target_arch = "wasm32", target_feature = "simd128")), allow(dead_code))]
mod sgemm;
mod target;
mod widen;

pub(crate) use device::CpuBackend;
#[cfg(not(target_arch = "wasm32"))]
pub(crate) use plan::run_graph;
