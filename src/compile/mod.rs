//! Compiling (stage 2): the pass list every backend runs, in order —
//!
//! 1. **dead nodes** ([`ir::Program::new`]): keep what the outputs need, translated into the compiler's steps;
//! 2. **fusion** ([`fuse`]): its list of rules, each kept only where the backend lowers the fused step —
//!    elementwise chains into one expression and epilogues into matmuls and row ops, a rope into its KV-cache
//!    write, a gated feed-forward's two matmuls into one step, an RMS norm into the mat-vec that reads it, a
//!    layer's rope of the queries and its KV-cache writes into one step;
//! 3. **in-place** ([`inplace`]): which operands a step may overwrite;
//! 4. **memory plan** ([`memory`]): arenas, blocks reused after their last reader;
//! 5. **lowering** (the backend's [`Target::lower`]): a kernel per step;
//! 6. **splitting** (the backend's [`Target::split`]): kernels over operands larger than a device limit.
//!
//! A backend describes itself through [`Target`]; its plan constructor then only creates device objects.

pub(crate) mod fuse;
pub(crate) mod inplace;
pub(crate) mod ir;
pub(crate) mod memory;

use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::graph::{Graph, Tensor};
use ir::Program;
use memory::{MemoryLimits, MemoryPlan};

/// What a backend tells the pass list about itself, and how it lowers a step.
pub(crate) trait Target {
    /// One lowered unit of work (a GPU dispatch, a CPU kernel call).
    type Kernel;

    /// The device's identity: every resident and state tensor the program uses must be on it.
    fn device_id(&self) -> u64;

    /// Whether the fusion and in-place passes run (off: one kernel per op, as built).
    fn fusion(&self) -> bool;

    /// Whether a step may write over storage node `storage` in place (a backend's own restriction).
    fn may_overwrite(&self, _program: &Program, _storage: NodeId) -> bool {
        true
    }

    /// Whether the backend lowers step `step` as `program` now holds it: the one question a fusion rule asks
    /// about the fused step it would make ([`fuse`]), answered by the same kernel families that lower it.
    fn lowers(&self, program: &Program, step: NodeId) -> bool;

    /// The memory the planner may use.
    fn memory_limits(&self) -> MemoryLimits;

    /// The kernels for step `step` (usually one; a step may need passes, such as split attention's combine).
    fn lower(&self, program: &Program, memory: &MemoryPlan, step: NodeId) -> Result<Vec<Self::Kernel>>;

    /// The kernel split into pieces that fit the device's limits (by default: as it is).
    fn split(&self, kernel: Self::Kernel, _program: &Program, _memory: &MemoryPlan) -> Result<Vec<Self::Kernel>> {
        Ok(vec![kernel])
    }
}

/// The error for step `id`, which no kernel family of `backend` lowers: inputs, views and externals are not
/// scheduled, and the other graph ops became the compiler's steps, so such a step is a fused step the backend
/// declined (a bug: the rule should have asked) or an op no family has a kernel for.
pub(crate) fn unlowered(program: &Program, id: NodeId, backend: &str) -> Error {
    let op = program.nodes[id].step.name();
    let reason = "no kernel of this backend computes this step".to_string();
    Error::Unsupported { op, backend: backend.into(), reason }
}

/// The result of the pass list: the program, where its tensors live, and each step's kernels (one or more when
/// split), in schedule order.
pub(crate) struct Compiled<K> {
    pub program: Program,
    pub memory: MemoryPlan,
    pub kernels: Vec<Vec<K>>,
}

/// Runs the passes in order (see the module docs) for `outputs` of `graph` on `target`.
pub(crate) fn compile<T: Target>(graph: &Graph, outputs: &[Tensor], target: &T) -> Result<Compiled<T::Kernel>> {
    let program = Program::new(graph, outputs)?;
    if let Some(&o) = program.outputs.iter().find(|&&o| program.nodes[o].dtype.is_storage_format()) {
        let n = &program.nodes[o];
        return Err(Error::UnsupportedDType {
            op: "compile",
            dtype: n.dtype,
            shape: n.layout.shape.clone(),
            reason: "an output in a storage format: cast it to f32 or f16 in the graph".into(),
        });
    }
    if let Some(r) = program.live_externals().into_iter().find(|r| r.ext.device != target.device_id()) {
        let what = if r.ext.writable { "state" } else { "resident tensor" };
        return Err(Error::InvalidArgument {
            op: "compile",
            reason: format!("{what} '{}' belongs to another device than the one compiling", r.ext.name),
        });
    }
    let program = if target.fusion() { fuse::fuse(program, &|p, id| target.lowers(p, id)) } else { program };
    let allowed = |s: NodeId| target.may_overwrite(&program, s);
    let inplace = |s: NodeId| if target.fusion() { inplace::candidates(&program, s, &allowed) } else { vec![] };
    let memory = memory::plan(&program, target.memory_limits(), &inplace)?;
    let mut kernels = Vec::with_capacity(program.steps.len());
    for &s in &program.steps {
        let mut step = Vec::new();
        // an empty tensor runs no kernel: a step with an empty output or operand has nothing to compute (graph
        // constructors refuse the ops whose non-empty result would come from an empty operand)
        if program.step_is_empty(s) {
            kernels.push(step);
            continue;
        }
        for k in target.lower(&program, &memory, s)? {
            step.extend(target.split(k, &program, &memory)?);
        }
        kernels.push(step);
    }
    Ok(Compiled { program, memory, kernels })
}
