//! A compiled CPU plan (stage 3; its runs are stage 4): the program, its memory plan over 8-byte-word arenas, and
//! the kernels, run in order on rayon's threads.

use super::buffer::Memory;
use super::external::{CpuBytes, CpuState};
use super::lower::CpuKernel;
use super::target::{CpuTarget, MAX_TENSOR_BYTES};
use crate::backend::LocalFuture;
use crate::backend::{elapsed_us, fetched, gather as gather_view, now, Executable, Inputs};
use crate::compile::ir::Program;
use crate::compile::memory::MemoryPlan;
use crate::compile::Compiled;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::graph::{Graph, Tensor};
use crate::options::CompileOptions;
use crate::options::PlanStats;
use crate::resident::External;
use crate::run::Fetch;
use crate::tensor::{Data, HostTensor};
use std::sync::Arc;

pub(super) fn compile(graph: &Graph, outputs: &[Tensor], options: &CompileOptions, device: u64) -> Result<CpuPlan> {
    let target = CpuTarget { fusion: !options.no_fusion, device, f32_activations: options.f32_activations };
    let Compiled { program, memory, kernels } = crate::compile::compile(graph, outputs, &target)?;
    for &id in program.inputs.iter() {
        let size = program.storage_bytes(id);
        if size > MAX_TENSOR_BYTES {
            let n = &program.nodes[id];
            return Err(Error::LimitExceeded {
                what: format!("input {} {:?} on the CPU backend", n.dtype, n.layout.shape),
                size,
                unit: "bytes",
                limit_name: "the CPU backend's largest tensor",
                limit: MAX_TENSOR_BYTES,
            });
        }
    }
    let arenas = memory.arena_bytes.iter().map(|&b| vec![0u64; (b as usize).div_ceil(8)]).collect();
    let kernels = kernels.into_iter().flatten().collect();
    Ok(CpuPlan { program, memory, kernels, arenas, poison: options.poison, last_us: 0.0 })
}

/// Runs `outputs` of `graph` once on the CPU backend (for checks inside the library, such as GPU tuning).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn run_graph(
    graph: &Graph,
    outputs: &[Tensor],
    inputs: &[(Tensor, &HostTensor)],
) -> Result<Vec<HostTensor>> {
    // no external tensors: a device of its own will do
    let mut plan = compile(graph, outputs, &CompileOptions::default(), 0)?;
    let ins: Vec<(NodeId, &[u8])> = inputs.iter().map(|&(t, v)| (t.index(), v.data.as_bytes())).collect();
    let fetch = vec![Fetch::All; outputs.len()];
    Ok(plan.run_sync(&ins, &fetch)?.into_iter().flatten().collect())
}

pub(super) struct CpuPlan {
    program: Program,
    memory: MemoryPlan,
    kernels: Vec<CpuKernel>,
    /// The memory plan's arenas (8-byte words; blocks are 64-byte aligned within them).
    arenas: Vec<Vec<u64>>,
    poison: bool,
    /// Wall time of the last run, in microseconds.
    last_us: f64,
}

impl Executable for CpuPlan {
    fn run<'a>(
        &'a mut self,
        inputs: &'a Inputs<'a>,
        fetch: &'a [Fetch],
    ) -> LocalFuture<'a, Result<Vec<Option<HostTensor>>>> {
        Box::pin(async move { self.run_sync(inputs, fetch) })
    }

    fn stats(&self) -> PlanStats {
        PlanStats {
            dispatches: self.kernels.len(),
            pipelines: 0,
            memory_bytes: self.memory.total_bytes(),
            peak_live_bytes: self.memory.peak_live_bytes,
            resident_read_bytes: self.program.resident_read_bytes(),
            resident_bytes: self.program.resident_bytes(),
            buffers: self.arenas.len(),
            kernels: self.program.steps.iter().map(|&s| self.program.nodes[s].step.name()).collect(),
            transfer: Default::default(),
        }
    }

    fn input_ids(&self) -> &[NodeId] {
        &self.program.inputs
    }

    fn last_host_us(&self) -> f64 {
        self.last_us
    }
}

impl CpuPlan {
    /// Where every storage node lives for a run: the caller's tensors for inputs (read in place, never written:
    /// steps only write their own blocks or states), the arena for steps, and resident and state tensors where
    /// they are.
    fn memory(&mut self, inputs: &Inputs<'_>) -> Result<Memory> {
        let mut mem = Memory::new(self.program.nodes.len());
        for &id in &self.program.inputs {
            let Some((_, bytes)) = inputs.iter().find(|(i, _)| *i == id) else {
                // `Plan::run` checks this first; an executable called without it must not read a stale tensor
                return Err(Error::BadInput { name: self.program.input_name(id).into(), reason: "missing".into() });
            };
            mem.set(id, bytes.as_ptr() as *mut u8, bytes.len());
        }
        let n_arenas = self.arenas.len();
        for (&id, blk) in &self.memory.blocks {
            if blk.arena >= n_arenas {
                continue;
            }
            let base = self.arenas[blk.arena].as_mut_ptr() as *mut u8;
            // SAFETY: the block lies inside its arena (the planner sized the arena to hold it).
            mem.set(id, unsafe { base.add(blk.offset as usize) }, blk.size as usize);
        }
        for r in &self.program.externals {
            let len = r.ext.bytes() as usize;
            let any = r.ext.memory.as_any();
            let ptr = if let Some(b) = any.downcast_ref::<CpuBytes>() {
                // never written: only states are written, and set_rows and copy_into check their destination
                b.bytes.as_slice().as_ptr() as *mut u8
            } else if let Some(state) = any.downcast_ref::<CpuState>() {
                // the run holds the state's lock (see `run_steps`) while it uses this pointer
                state.as_mut_ptr()
            } else {
                return Err(Error::InvalidArgument {
                    op: "run",
                    reason: format!("{} is not a CPU backend tensor", r.ext.name),
                });
            };
            mem.set(r.node, ptr, len);
        }
        Ok(mem)
    }

    fn run_sync(&mut self, inputs: &Inputs<'_>, fetch: &[Fetch]) -> Result<Vec<Option<HostTensor>>> {
        let start = now();
        let out = self.run_steps(inputs, fetch);
        self.last_us = elapsed_us(start);
        out
    }

    fn run_steps(&mut self, inputs: &Inputs<'_>, fetch: &[Fetch]) -> Result<Vec<Option<HostTensor>>> {
        if self.poison {
            self.arenas.iter_mut().for_each(|a| a.fill(u64::MAX));
        }
        // the states this plan uses, locked in a fixed order (ids) for the whole run
        let mut states: Vec<Arc<External>> =
            self.program.externals.iter().map(|r| r.ext.clone()).filter(|e| e.writable).collect();
        states.sort_by_key(|e| e.id);
        states.dedup_by_key(|e| e.id);
        let _guards: Vec<_> =
            states.iter().filter_map(|e| e.memory.as_any().downcast_ref::<CpuState>().map(CpuState::lock)).collect();
        let mem = self.memory(inputs)?;
        // natively the kernels run on one of rayon's threads, so that a kernel's parallel loop is shared by that
        // thread and the others: the caller sleeps once per run, not once per kernel (at ~300 kernels per decode
        // step of a language model, a blocked caller's wake-ups cost a third of the step). The states are locked
        // before, on the caller's thread: a rayon thread that runs another plan's kernels while it waits never
        // holds a lock that plan needs.
        let kernels = &self.kernels;
        let run_all = || kernels.iter().try_for_each(|k| k.run(&mem));
        #[cfg(not(target_arch = "wasm32"))]
        rayon::scope(|_| run_all())?;
        #[cfg(target_arch = "wasm32")]
        run_all()?;
        let mut out = Vec::with_capacity(fetch.len());
        for (&o, f) in self.program.outputs.iter().zip(fetch) {
            out.push(fetched(&self.program.nodes[o].layout, f)?.map(|l| self.read(&mem, o, &l)));
        }
        Ok(out)
    }

    /// The elements of output `o` under `layout` (its layout, or rows of it) as a new row-major tensor.
    fn read(&self, mem: &Memory, o: NodeId, layout: &crate::shape::Layout) -> HostTensor {
        let n = &self.program.nodes[o];
        let v = mem.view(n.storage, n.dtype);
        let shape = layout.shape.clone();
        if layout.is_contiguous() {
            // one copy of the elements as stored, straight into the result
            let range = layout.offset..layout.offset + layout.numel();
            let mut data = match n.dtype {
                DType::F32 => Data::F32(vec![0.0; range.len()]),
                DType::F16 => Data::F16(vec![half::f16::ZERO; range.len()]),
                DType::I32 => Data::I32(vec![0; range.len()]),
                dtype => Data::Raw { dtype, bytes: vec![0; dtype.bytes_of(range.len()).unwrap_or(0)] },
            };
            let bytes: &mut [u8] = match &mut data {
                Data::F32(d) => bytemuck::cast_slice_mut(d),
                Data::F16(d) => bytemuck::cast_slice_mut(d),
                Data::I32(d) => bytemuck::cast_slice_mut(d),
                Data::Raw { bytes, .. } => bytes,
            };
            v.copy_bytes(range, bytes);
            return HostTensor { shape, data };
        }
        let all = 0..v.len();
        let storage = match n.dtype {
            DType::F32 => Data::F32(all.map(|i| v.get(i)).collect()),
            DType::F16 => Data::F16(all.map(|i| half::f16::from_f32(v.get(i))).collect()),
            DType::I32 => Data::I32(all.map(|i| v.get_i32(i)).collect()),
            // a strided view of a storage format: compile refuses it (only whole rows are views of blocks)
            dtype => Data::Raw { dtype, bytes: v.block_bytes(0..v.len() / dtype.block_size()).to_vec() },
        };
        HostTensor { shape, data: gather_view(&storage, layout) }
    }
}
