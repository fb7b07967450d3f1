//! The CPU backend: every op on every dtype, natively and on wasm. It runs the same pass list as the GPU (fusion,
//! in-place execution, the memory plan over one arena) and computes in f32 with f64 accumulation in row ops;
//! matmuls go through the `gemm` crate. It is the peer every GPU result is compared with in tuning, and every op is
//! checked against an f64 reference in the differential suite.

mod buffer;
mod elementwise;
mod gather;
mod matmul;
mod rows;

use super::{gather as gather_view, Backend, CompileOptions, Executable, LocalFuture, PlanStats};
use crate::caps::{BackendKind, Capabilities, DeviceType};
use crate::compile::ir::{Program, Step};
use crate::compile::memory::{MemoryLimits, MemoryPlan};
use crate::compile::{Compiled, Target};
use crate::graph::NodeId;
use crate::{DType, Data, Error, Graph, HostTensor, Result, Tensor};
use buffer::Memory;
use elementwise::{ElementwiseKernel, Leaf};
use gather::{ConcatKernel, GetRowsKernel};
use matmul::MatmulKernel;
use rows::{RowKind, RowsKernel};

/// Largest tensor the CPU backend holds, in bytes: 2 GiB on wasm32 (4 GiB address space), 16 GiB natively.
const MAX_TENSOR_BYTES: u64 = if cfg!(target_pointer_width = "32") { 1 << 31 } else { 1 << 34 };

pub(crate) struct CpuBackend {
    caps: Capabilities,
}

impl CpuBackend {
    pub(crate) fn new() -> CpuBackend {
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        CpuBackend {
            caps: Capabilities {
                backend: BackendKind::Cpu,
                name: format!("{} CPU, {threads} threads", std::env::consts::ARCH),
                device_type: DeviceType::Cpu,
                driver: "webtensor cpu".into(),
                max_storage_binding_bytes: MAX_TENSOR_BYTES,
                max_buffer_bytes: MAX_TENSOR_BYTES,
                max_workgroup_storage_bytes: 0,
                max_invocations_per_workgroup: 0,
                max_workgroups_per_dimension: 0,
                min_storage_offset_alignment: 4,
                min_uniform_offset_alignment: 4,
                shader_f16: false,
                subgroups: false,
                subgroup_size: (0, 0),
                cooperative_matrix: vec![],
                dtypes: vec![DType::F32, DType::F16, DType::I32],
            },
        }
    }
}

/// One lowered step.
#[derive(Clone, Debug)]
enum CpuKernel {
    Elementwise(ElementwiseKernel),
    MatMul(MatmulKernel),
    Rows(RowsKernel, usize),
    GetRows(GetRowsKernel),
    Concat(ConcatKernel),
}

/// The CPU's side of the pass list.
struct CpuTarget {
    fusion: bool,
}

fn leaf(p: &Program, src: NodeId, shape: Option<&[usize]>) -> Leaf {
    let n = &p.nodes[src];
    let layout = match shape {
        Some(s) => n.layout.broadcast_operand(s),
        None => n.layout.clone(),
    };
    Leaf { storage: n.storage, dtype: n.dtype, layout }
}

fn matmul_kernel(
    p: &Program,
    id: NodeId,
    a: NodeId,
    b: NodeId,
    epi: Option<&(crate::compile::ir::Expr, Vec<NodeId>)>,
) -> MatmulKernel {
    let node = &p.nodes[id];
    let shape = &node.layout.shape;
    let r = shape.len();
    let (m, n) = (shape[r - 2], shape[r - 1]);
    let k = p.nodes[a].layout.shape[p.nodes[a].layout.rank() - 1];
    let batch = &shape[..r - 2];
    let la = leaf(p, a, Some(&[batch, &[m, k]].concat()));
    let lb = leaf(p, b, Some(&[batch, &[k, n]].concat()));
    let epilogue = epi.map(|(e, srcs)| (e.clone(), srcs.iter().map(|&s| leaf(p, s, Some(shape))).collect()));
    MatmulKernel { out: id, out_dtype: node.dtype, a: la, b: lb, m, k, n, epilogue }
}

impl Target for CpuTarget {
    type Kernel = CpuKernel;

    fn fusion(&self) -> bool {
        self.fusion
    }

    fn memory_limits(&self) -> MemoryLimits {
        MemoryLimits { align: 64, max_arena: 1 << 40, max_tensor: MAX_TENSOR_BYTES, place_inputs: false }
    }

    fn lower(&self, p: &Program, _memory: &MemoryPlan, id: NodeId) -> Result<CpuKernel> {
        let node = &p.nodes[id];
        let shape = &node.layout.shape;
        let (out, out_dtype) = (id, node.dtype);
        let rows = |op: RowKind, x: NodeId, mask: Option<NodeId>| {
            let x = leaf(p, x, None);
            let n = x.layout.shape.last().copied().unwrap_or(1);
            let count = x.layout.numel() / n.max(1);
            let mask = mask.map(|m| leaf(p, m, Some(&x.layout.shape)));
            CpuKernel::Rows(RowsKernel { op, out, out_dtype, x, mask, n }, count)
        };
        Ok(match &node.step {
            Step::Elementwise { expr, srcs } => CpuKernel::Elementwise(ElementwiseKernel {
                out,
                out_dtype,
                numel: node.layout.numel(),
                expr: expr.clone(),
                leaves: srcs.iter().map(|&s| leaf(p, s, Some(shape))).collect(),
            }),
            Step::MatMul { a, b, epilogue } => CpuKernel::MatMul(matmul_kernel(p, id, *a, *b, epilogue.as_ref())),
            Step::Row { op, x, mask, params } => rows(RowKind::Row(*op, *params), *x, *mask),
            Step::Reduce { op, x } => rows(RowKind::Reduce(*op), *x, None),
            Step::GetRows { table, idx } => CpuKernel::GetRows(GetRowsKernel {
                out,
                out_dtype,
                table: leaf(p, *table, None),
                idx: leaf(p, *idx, None),
            }),
            Step::Concat { a, b, axis } => CpuKernel::Concat(ConcatKernel {
                out,
                out_dtype,
                out_shape: shape.clone(),
                a: leaf(p, *a, None),
                b: leaf(p, *b, None),
                axis: *axis,
            }),
            Step::Input { .. } | Step::View { .. } => unreachable!("inputs and views are not scheduled"),
        })
    }
}

impl CpuKernel {
    fn run(&self, mem: &Memory) -> Result<()> {
        match self {
            CpuKernel::Elementwise(k) => k.run(mem, 0..k.numel),
            CpuKernel::MatMul(k) => k.run(mem),
            CpuKernel::Rows(k, rows) => k.run(mem, 0..*rows),
            CpuKernel::GetRows(k) => k.run(mem)?,
            CpuKernel::Concat(k) => k.run(mem),
        }
        Ok(())
    }
}

impl Backend for CpuBackend {
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn compile<'a>(
        &'a self,
        graph: &'a Graph,
        outputs: &'a [Tensor],
        options: &'a CompileOptions,
    ) -> LocalFuture<'a, Result<Box<dyn Executable>>> {
        let plan = compile(graph, outputs, options).map(|p| Box::new(p) as Box<dyn Executable>);
        Box::pin(async move { plan })
    }
}

fn compile(graph: &Graph, outputs: &[Tensor], options: &CompileOptions) -> Result<CpuPlan> {
    let Compiled { program, memory, kernels } =
        crate::compile::compile(graph, outputs, &CpuTarget { fusion: !options.no_fusion })?;
    for &id in program.inputs.iter() {
        let size = program.storage_bytes(id);
        if size > MAX_TENSOR_BYTES {
            let n = &program.nodes[id];
            return Err(Error::LimitExceeded {
                what: format!("input {} {:?} on the CPU backend", n.dtype, n.layout.shape),
                size,
                limit_name: "the CPU backend's largest tensor",
                limit: MAX_TENSOR_BYTES,
            });
        }
    }
    let arenas = memory.arena_bytes.iter().map(|&b| vec![0u64; (b as usize).div_ceil(8)]).collect();
    let kernels = kernels.into_iter().flatten().collect();
    Ok(CpuPlan { program, memory, kernels, arenas, poison: options.poison })
}

/// Runs `outputs` of `graph` once on the CPU backend (for checks inside the library, such as GPU tuning).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn run_graph(
    graph: &Graph,
    outputs: &[Tensor],
    inputs: &[(Tensor, &HostTensor)],
) -> Result<Vec<HostTensor>> {
    let mut plan = compile(graph, outputs, &CompileOptions::default())?;
    let ins: Vec<(NodeId, &HostTensor)> = inputs.iter().map(|&(t, v)| (t.index(), v)).collect();
    plan.run_sync(&ins)
}

struct CpuPlan {
    program: Program,
    memory: MemoryPlan,
    kernels: Vec<CpuKernel>,
    /// The memory plan's arenas (8-byte words; blocks are 64-byte aligned within them).
    arenas: Vec<Vec<u64>>,
    poison: bool,
}

impl Executable for CpuPlan {
    fn run<'a>(&'a mut self, inputs: &'a [(NodeId, &'a HostTensor)]) -> LocalFuture<'a, Result<Vec<HostTensor>>> {
        Box::pin(async move { self.run_sync(inputs) })
    }

    fn stats(&self) -> PlanStats {
        PlanStats {
            dispatches: self.kernels.len(),
            pipelines: 0,
            memory_bytes: self.memory.total_bytes(),
            peak_live_bytes: self.memory.peak_live_bytes,
            buffers: self.arenas.len(),
            kernels: self.program.steps.iter().map(|&s| self.program.nodes[s].step.name()).collect(),
        }
    }

    fn input_ids(&self) -> &[NodeId] {
        &self.program.inputs
    }
}

impl CpuPlan {
    /// Where every storage node lives for a run: the caller's tensors for inputs (read in place, never written:
    /// steps only write their own blocks), the arena for steps.
    fn memory(&mut self, inputs: &[(NodeId, &HostTensor)]) -> Result<Memory> {
        let mut mem = Memory::new(self.program.nodes.len());
        for &id in &self.program.inputs {
            let Some((_, t)) = inputs.iter().find(|(i, _)| *i == id) else {
                // `Plan::run` checks this first; an executable called without it must not read a stale tensor
                return Err(Error::BadInput { name: self.program.input_name(id).into(), reason: "missing".into() });
            };
            let bytes = t.data.as_bytes();
            mem.set(id, bytes.as_ptr() as *mut u8, bytes.len());
        }
        for (&id, blk) in &self.memory.blocks {
            let arena = &mut self.arenas[blk.arena];
            let base = arena.as_mut_ptr() as *mut u8;
            // SAFETY: the block lies inside its arena (the planner sized the arena to hold it).
            mem.set(id, unsafe { base.add(blk.offset as usize) }, blk.size as usize);
        }
        Ok(mem)
    }

    fn run_sync(&mut self, inputs: &[(NodeId, &HostTensor)]) -> Result<Vec<HostTensor>> {
        if self.poison {
            self.arenas.iter_mut().for_each(|a| a.fill(u64::MAX));
        }
        let mem = self.memory(inputs)?;
        for k in &self.kernels {
            k.run(&mem)?;
        }
        Ok(self.program.outputs.iter().map(|&o| self.read(&mem, o)).collect())
    }

    /// Output `o` (possibly a view) as a new row-major tensor.
    fn read(&self, mem: &Memory, o: NodeId) -> HostTensor {
        let n = &self.program.nodes[o];
        let v = mem.view(n.storage, n.dtype);
        let shape = n.layout.shape.clone();
        if n.layout.is_contiguous() {
            // one copy of the elements as stored, straight into the result
            let range = n.layout.offset..n.layout.offset + n.layout.numel();
            let mut data = match n.dtype {
                DType::F32 => Data::F32(vec![0.0; range.len()]),
                DType::F16 => Data::F16(vec![half::f16::ZERO; range.len()]),
                DType::I32 => Data::I32(vec![0; range.len()]),
            };
            let bytes: &mut [u8] = match &mut data {
                Data::F32(d) => bytemuck::cast_slice_mut(d),
                Data::F16(d) => bytemuck::cast_slice_mut(d),
                Data::I32(d) => bytemuck::cast_slice_mut(d),
            };
            v.copy_bytes(range, bytes);
            return HostTensor { shape, data };
        }
        let all = 0..v.len();
        let storage = match n.dtype {
            DType::F32 => Data::F32(all.map(|i| v.get(i)).collect()),
            DType::F16 => Data::F16(all.map(|i| half::f16::from_f32(v.get(i))).collect()),
            DType::I32 => Data::I32(all.map(|i| v.get_i32(i)).collect()),
        };
        HostTensor { shape, data: gather_view(&storage, &n.layout) }
    }
}
