//! What CPU lowering knows about the device ([`CpuTarget`]), and the helpers every family's lowering uses.

use super::elementwise::Leaf;
use super::lower;
use super::quant::Weight;
use crate::compile::ir::{Expr, Program};
use crate::compile::memory::{MemoryLimits, MemoryPlan};
use crate::compile::Target;
use crate::error::Result;
use crate::graph::NodeId;

/// Largest tensor the CPU backend holds, in bytes: 2 GiB on wasm32 (4 GiB address space), 16 GiB natively.
pub(super) const MAX_TENSOR_BYTES: u64 = if cfg!(target_pointer_width = "32") { 1 << 31 } else { 1 << 34 };

/// What lowering needs to know about the device and the plan's options.
pub(super) struct CpuTarget {
    /// Whether fusion and in-place execution run.
    pub(super) fusion: bool,
    /// The device's identity.
    pub(super) device: u64,
    /// Keep a quantized matmul's activations in f32 (no 8-bit rounding for the integer kernels).
    pub(super) f32_activations: bool,
}

impl Target for CpuTarget {
    type Kernel = lower::CpuKernel;

    fn device_id(&self) -> u64 {
        self.device
    }

    fn fusion(&self) -> bool {
        self.fusion
    }

    fn lowers(&self, p: &Program, id: NodeId) -> bool {
        lower::lower(p, id, self).is_ok()
    }

    fn memory_limits(&self) -> MemoryLimits {
        MemoryLimits { align: 64, max_arena: 1 << 40, max_tensor: MAX_TENSOR_BYTES, place_inputs: false }
    }

    fn lower(&self, p: &Program, _memory: &MemoryPlan, id: NodeId) -> Result<Vec<lower::CpuKernel>> {
        lower::lower(p, id, self).map(|k| vec![k])
    }
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

/// The weight behind `t(w)` (layout `[K, N]`, strides `[1, K]`) and N.
pub(super) fn weight_of_transposed(p: &Program, b: NodeId) -> (Weight, usize) {
    let l = &p.nodes[b].layout;
    let (k, n) = (l.shape[0], l.shape[1]);
    (Weight { storage: p.nodes[b].storage, dtype: p.nodes[b].dtype, row0: l.offset / k, k }, n)
}

/// The weight of a row-major `[.., K]` tensor (rows of a storage format) and its number of rows.
pub(super) fn weight_of_rows(p: &Program, x: NodeId) -> (Weight, usize) {
    let l = &p.nodes[x].layout;
    let k = l.shape.last().copied().unwrap_or(1);
    (Weight { storage: p.nodes[x].storage, dtype: p.nodes[x].dtype, row0: l.offset / k, k }, l.numel() / k)
}
