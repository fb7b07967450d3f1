//! ggml's block-quantized types on the host: the typed block structs ([`blocks`]) whose sizes make the block
//! rows of the type table ([`DType`](crate::DType)'s, ggml's `type_traits[]`), and the decoders ([`decode`]),
//! `dequantize_row_*` of ggml-quants.c. The CPU backend's dot products read the same structs; the GPU's
//! `src/backend/gpu/wgsl/blocks.wgsl` reads the same byte layout.

pub(crate) mod blocks;
mod decode;
mod finite;
pub(crate) mod grids;
pub(crate) mod iq;

pub(crate) use blocks::*;
pub(crate) use decode::decode;
pub(crate) use finite::first_non_finite;
