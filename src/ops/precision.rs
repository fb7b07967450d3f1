//! The precision a matmul is computed in, ggml's `ggml_prec`.

/// How precisely a matmul is computed, as ggml's `GGML_PREC_DEFAULT` / `GGML_PREC_F32` (set with
/// [`crate::Graph::set_matmul_precision`]).
///
/// The CPU backend rounds the activations of a matmul against block-quantized weights to 8-bit blocks (q8_0 /
/// q8_K, as llama.cpp does) so that the dot products run on integer SIMD; `F32` keeps them in f32 for that
/// matmul. GPU backends compute every matmul with f32 activations and f32 accumulation, so both values give the
/// same kernels there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MatmulPrecision {
    /// The backend's fastest accurate path (8-bit activations against quantized weights on the CPU).
    #[default]
    Default,
    /// f32 activations and f32 accumulation everywhere.
    F32,
}
