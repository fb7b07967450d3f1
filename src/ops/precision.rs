//! The precision a matmul is computed in, ggml's `ggml_prec`.

/// How precisely a matmul is computed, as ggml's `GGML_PREC_DEFAULT` / `GGML_PREC_F32` (set with
/// [`crate::Graph::set_matmul_precision`]).
///
/// The CPU backend rounds the activations of a matmul against block-quantized weights to 8-bit blocks (q8_0 /
/// q8_K, as llama.cpp does) so that the dot products run on integer SIMD; `F32` keeps them in f32 for that
/// matmul. GPU backends compute every matmul with f32 activations and f32 accumulation, so both values give the
/// same kernels there, except on adapters with cooperative matrices (tensor cores), where a matmul of many rows
/// against block-quantized weights stages both operands as f16 (activations rounded to f16, each weight value
/// decoded to f16, f32 accumulation; llama.cpp's f16 tensor-core path) under `Default`, and keeps the f32 tiled
/// kernel under `F32`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MatmulPrecision {
    /// The backend's fastest accurate path (8-bit activations against quantized weights on the CPU).
    #[default]
    Default,
    /// f32 activations and f32 accumulation everywhere.
    F32,
}
