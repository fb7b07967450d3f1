//! What CPU lowering knows about the device ([`CpuTarget`]), the operand every kernel reads ([`Leaf`]), the
//! contract every kernel family fulfils ([`CpuFamily`]), and the helpers every family's lowering uses. Nothing here
//! names a family: `lower.rs` lists them.

use super::buffer::Memory;
use crate::compile::ir::{Expr, Program};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::NodeId;
use crate::shape::Layout;

/// Largest tensor the CPU backend holds, in bytes: 2 GiB on wasm32 (4 GiB address space), 16 GiB natively.
pub(super) const MAX_TENSOR_BYTES: u64 = if cfg!(target_pointer_width = "32") { 1 << 31 } else { 1 << 34 };

/// Rows of a matmul's A at most for the mat-vec paths (every weight row read once, dotted with each row of A).
pub(crate) const VEC_ROWS: usize = 8;

/// What lowering needs to know about the device and the plan's options.
pub(super) struct CpuTarget {
    /// Whether fusion and in-place execution run.
    pub(super) fusion: bool,
    /// The device's identity.
    pub(super) device: u64,
    /// Keep a quantized matmul's activations in f32 (no 8-bit rounding for the integer kernels).
    pub(super) f32_activations: bool,
}

/// A CPU kernel family: its kernel, lowered from the steps it takes, and run over the plan's memory.
pub(super) trait CpuFamily: Sized {
    /// The kernel of step `id` of `p` when this family takes it (as `p` holds the step now).
    fn lower(p: &Program, id: NodeId, t: &CpuTarget) -> Option<Self>;

    /// Runs the kernel over the plan's memory.
    ///
    /// # Errors
    /// What the kernel finds wrong in its inputs at run time (an index out of range).
    fn run(&self, mem: &Memory) -> Result<()>;
}

/// One operand of a kernel: its storage, dtype, and layout (broadcast to the output's shape where the kernel
/// reads it so).
#[derive(Clone, Debug)]
pub(crate) struct Leaf {
    pub storage: NodeId,
    pub dtype: DType,
    pub layout: Layout,
}

/// Operand `src` of a kernel: its storage, dtype and layout (broadcast to `shape` where given).
pub(super) fn leaf(p: &Program, src: NodeId, shape: Option<&[usize]>) -> Leaf {
    let n = &p.nodes[src];
    let layout = match shape {
        Some(s) => n.layout.broadcast_operand(s),
        None => n.layout.clone(),
    };
    Leaf { storage: n.storage, dtype: n.dtype, layout }
}

/// A step's epilogue with its operands as leaves broadcast to the output's `shape`.
pub(super) fn epilogue(p: &Program, epi: Option<&(Expr, Vec<NodeId>)>, shape: &[usize]) -> Option<(Expr, Vec<Leaf>)> {
    epi.map(|(e, srcs)| (e.clone(), srcs.iter().map(|&s| leaf(p, s, Some(shape))).collect()))
}
