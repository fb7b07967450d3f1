//! Lowering (stage 2, compile passes 5 and 6 for the GPU): each step of a program becomes [`Dispatch`]es — its
//! WGSL variant, typed parameters, bindings and grid — by the kernel family that lowers it (`kernels/`); [`split`]
//! then splits dispatches whose operands exceed one storage binding.

mod split;

use crate::backend::gpu::kernel::{Dispatch, SCRATCH, TABLES};
use crate::backend::gpu::kernels;
use crate::backend::gpu::target::GpuTarget;
use crate::backend::gpu::wgsl::reads_grids;
use crate::compile::ir::Program;
use crate::compile::memory::{MemoryLimits, MemoryPlan};
use crate::compile::Target;
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::NodeId;

impl GpuTarget {
    /// What a dispatch's key needs from the memory plan: bindings over the same memory bound once (WebGPU rejects
    /// overlapping bindings in a dispatch when one is writable), and f16 packed where the adapter lacks SHADER_F16;
    /// and the device's grid table bound last where the dispatch reads an IQ type.
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
        if reads_grids(&d.key) {
            d.bindings.push(TABLES);
            d.windows.push(None);
        }
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

    fn lowers(&self, program: &Program, id: NodeId) -> bool {
        kernels::lower(program, id, self).is_ok()
    }

    fn memory_limits(&self) -> MemoryLimits {
        let max = self.max_buffer.min(1 << 40);
        // a tensor may exceed one binding (it is then split), not one buffer
        MemoryLimits { align: self.align, max_arena: max, max_tensor: max, place_inputs: true }
    }

    fn lower(&self, program: &Program, memory: &MemoryPlan, id: NodeId) -> Result<Vec<Dispatch>> {
        let mut ds = kernels::lower(program, id, self)?;
        ds.iter_mut().for_each(|d| self.finish(d, memory));
        Ok(ds)
    }

    fn split(&self, d: Dispatch, program: &Program, memory: &MemoryPlan) -> Result<Vec<Dispatch>> {
        split::split(d, program, memory, self)
    }
}
