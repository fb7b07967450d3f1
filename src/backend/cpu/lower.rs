//! Lowering for the CPU (stage 2, compile pass 5): each step of a program becomes the kernel of the family that
//! takes it. Each family file owns its kernel and its `lower` (the `CpuFamily` contract); the list below names
//! each kernel once and generates [`CpuKernel`], the dispatch and its `run`. A new kernel-backed op is a family
//! file (or a kernel in one) and one line in the list.

use super::buffer::Memory;
use super::target::{CpuFamily, CpuTarget, MAX_TENSOR_BYTES};
use super::{attention, elementwise, experts, gather, matmul, quant, recurrent, rows};
use crate::compile::ir::Program;
use crate::compile::memory::{MemoryLimits, MemoryPlan};
use crate::compile::Target;
use crate::error::Result;
use crate::graph::NodeId;

/// Declares [`CpuKernel`] with one variant a kernel; lowering asks each in the order listed (the first that takes
/// a step lowers it: quantized kernels before the float ones that would take the same op).
macro_rules! families {
    ($($family:ident :: $kernel:ident),* $(,)?) => {
        /// One lowered step (a variant a kernel type, named as it is).
        #[derive(Clone, Debug)]
        #[allow(clippy::enum_variant_names)]
        pub(super) enum CpuKernel {
            $($kernel($family::$kernel),)*
        }

        /// The kernel of step `id`, from the first family that takes it; a step none takes is
        /// [`crate::Error::Unsupported`].
        pub(super) fn lower(p: &Program, id: NodeId, t: &CpuTarget) -> Result<CpuKernel> {
            $(if let Some(k) = <$family::$kernel as CpuFamily>::lower(p, id, t) {
                return Ok(CpuKernel::$kernel(k));
            })*
            Err(crate::compile::unlowered(p, id, "cpu"))
        }

        impl CpuKernel {
            pub(super) fn run(&self, mem: &Memory) -> Result<()> {
                match self {
                    $(CpuKernel::$kernel(k) => k.run(mem),)*
                }
            }
        }
    };
}

families! {
    elementwise::ElementwiseKernel,
    quant::QMatmulKernel,
    matmul::MatmulKernel,
    rows::RowsKernel,
    quant::GetRowsQKernel,
    gather::GetRowsKernel,
    quant::DequantizeKernel,
    gather::ConcatKernel,
    gather::SetRowsKernel,
    gather::CopyIntoKernel,
    attention::RopeKernel,
    attention::RopeSetRowsKernel,
    attention::AttentionKernel,
    experts::TopKKernel,
    experts::TakeAlongAxisKernel,
    experts::MulMatIdKernel,
    recurrent::SsmConvKernel,
    recurrent::GatedDeltaNetKernel,
}

impl Target for CpuTarget {
    type Kernel = CpuKernel;

    fn device_id(&self) -> u64 {
        self.device
    }

    fn fusion(&self) -> bool {
        self.fusion
    }

    fn lowers(&self, p: &Program, id: NodeId) -> bool {
        lower(p, id, self).is_ok()
    }

    fn memory_limits(&self) -> MemoryLimits {
        MemoryLimits { align: 64, max_arena: 1 << 40, max_tensor: MAX_TENSOR_BYTES, place_inputs: false }
    }

    fn lower(&self, p: &Program, _memory: &MemoryPlan, id: NodeId) -> Result<Vec<CpuKernel>> {
        lower(p, id, self).map(|k| vec![k])
    }
}
