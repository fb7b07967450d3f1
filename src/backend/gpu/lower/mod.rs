//! Lowering (stage 2, compile passes 5 and 6 for the GPU): each step of a program becomes a [`Dispatch`] — its WGSL variant,
//! typed parameters, bindings and grid — one module per kernel family; [`split`] then splits dispatches whose
//! operands exceed one storage binding.

mod attention;
mod elementwise;
mod gather;
pub(crate) mod matmul;
mod rows;
mod split;
pub(crate) mod target;

use crate::backend::gpu::kernel::{Dispatch, SCRATCH};
use crate::compile::ir::{ElemOp, Expr, Program, Step};
use crate::compile::memory::{MemoryLimits, MemoryPlan};
use crate::compile::Target;
use crate::graph::{NodeId, Op};
use crate::{DType, Error, Result};
use target::GpuTarget;

impl GpuTarget {
    /// What a dispatch's key needs from the memory plan: bindings over the same memory bound once (WebGPU rejects
    /// overlapping bindings in a dispatch when one is writable), and f16 packed where the adapter lacks SHADER_F16.
    fn finish(&self, d: &mut Dispatch, memory: &MemoryPlan) {
        let place = |n: &NodeId| {
            if *n == SCRATCH {
                (usize::MAX, 0)
            } else {
                (memory.blocks[n].arena, memory.blocks[n].offset)
            }
        };
        let blocks: Vec<(usize, u64)> = d.bindings.iter().map(place).collect();
        d.key.alias =
            (0..blocks.len()).map(|i| blocks.iter().position(|b| *b == blocks[i]).expect("present")).collect();
        let has_f16 = d.key.out == DType::F16 || d.key.ins.contains(&DType::F16);
        d.key.packed_f16 = !self.shader_f16 && has_f16;
    }
}

impl Target for GpuTarget {
    type Kernel = Dispatch;

    fn device_id(&self) -> u64 {
        self.device
    }

    fn fusion(&self) -> bool {
        self.fusion
    }

    fn may_overwrite(&self, program: &Program, storage: NodeId) -> bool {
        // a packed f16 output is written with atomics, so it cannot also serve as a plain input
        self.shader_f16 || program.nodes[storage].dtype != DType::F16
    }

    fn memory_limits(&self) -> MemoryLimits {
        let max = self.max_buffer.min(1 << 40);
        // a tensor may exceed one binding (it is then split), not one buffer
        MemoryLimits { align: self.align, max_arena: max, max_tensor: max, place_inputs: true }
    }

    fn lower(&self, program: &Program, memory: &MemoryPlan, id: NodeId) -> Result<Vec<Dispatch>> {
        let d = match &program.nodes[id].step {
            Step::Op(Op::Rope { x, pos, rope }) => attention::rope(program, id, *x, *pos, rope, self)?,
            Step::Dequantize { x } => {
                // the element accessors of a storage-format binding decode blocks: a copy kernel dequantizes
                let cast = Expr::Node { op: ElemOp::Cast, args: vec![Expr::Leaf(0)], dtype: program.nodes[id].dtype };
                elementwise::lower(program, id, &cast, &[*x], self)?
            }
            &Step::Op(Op::Attention { q, k, v, mask, kv_len, scale, causal }) => {
                let a = attention::AttentionStep { q, k, v, mask, kv_len, scale, causal };
                let mut ds = attention::attention(program, id, &a, self)?;
                ds.iter_mut().for_each(|d| self.finish(d, memory));
                return Ok(ds);
            }
            Step::Elementwise { expr, srcs } => elementwise::lower(program, id, expr, srcs, self)?,
            Step::MatMul { a, b, epilogue, .. } => {
                let mut ds = matmul::lower(program, id, *a, *b, epilogue.as_ref(), self)?;
                ds.iter_mut().for_each(|d| self.finish(d, memory));
                return Ok(ds);
            }
            Step::Row { .. } | Step::Op(Op::Reduce { .. }) => rows::lower(program, id, self)?,
            Step::Op(Op::GetRows { table, idx }) => gather::get_rows(program, id, *table, *idx, self)?,
            Step::Op(Op::Concat { a, b, axis }) => gather::concat(program, id, *a, *b, *axis, self)?,
            Step::Op(Op::SetRows { dst, idx, src }) => gather::set_rows(program, id, *dst, *idx, *src, self)?,
            Step::Op(Op::CopyInto { dst, src }) => gather::copy_into(program, id, *dst, *src, self)?,
            // inputs, views and externals are not scheduled; the other graph ops became the compiler's steps
            Step::Op(op) => {
                let reason = "this graph op has no kernel of its own (a bug: the compiler should have replaced it)";
                return Err(Error::Unsupported { op: op.name().into(), backend: "gpu".into(), reason: reason.into() });
            }
        };
        let mut d = d;
        self.finish(&mut d, memory);
        Ok(vec![d])
    }

    fn split(&self, d: Dispatch, program: &Program, memory: &MemoryPlan) -> Result<Vec<Dispatch>> {
        split::split(d, program, memory, self)
    }
}
