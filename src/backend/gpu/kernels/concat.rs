//! concat (`concat.wgsl`): `out = concatenate([a, b], axis)`, one invocation per output element.

use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind};
use crate::backend::gpu::params::{params, vec4, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::{compute_type, render};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{NodeId, Op};

const CONCAT: &str = include_str!("concat.wgsl");

params! {
    /// `concat.wgsl`: `out = concatenate([a, b], axis)`.
    ConcatParams {
        /// Output elements.
        count: u32,
        /// The axis, in rank-4 coordinates.
        axis: u32,
        /// a's size along the axis.
        split: u32,
        _pad0: u32,
        /// Output shape, rank 4.
        out_shape: [u32; 4],
        /// a's strides.
        a_strides: [u32; 4],
        /// b's strides.
        b_strides: [u32; 4],
        /// a's offset within its binding.
        a_offset: u32,
        /// b's offset within its binding.
        b_offset: u32,
        _pad1: u32,
        _pad2: u32,
    }
}

/// `concat.wgsl`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Concat;

impl Family for Concat {
    fn name(&self) -> String {
        "concat".into()
    }

    fn params(&self) -> ParamsLayout {
        ConcatParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        vec![Binding::output("out", key.out), Binding::input("src0", key.ins[0]), Binding::input("src1", key.ins[1])]
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        render(CONCAT, &[("BINDINGS", bindings), ("OUT_C", compute_type(key.out).into())])
    }
}

/// Lowers concat.
pub(crate) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &program.nodes;
    let node = &nodes[id];
    let Step::Op(Op::Concat { a, b, axis }) = node.step else { return None };
    let numel = node.layout.numel();
    let (la, lb) = (&nodes[a].layout, &nodes[b].layout);
    let lead = 4 - node.layout.rank();
    let p = ConcatParams {
        count: numel as u32,
        axis: (lead + axis) as u32,
        split: la.shape[axis] as u32,
        out_shape: vec4(node.layout.padded4().0),
        a_strides: vec4(la.padded4().1),
        b_strides: vec4(lb.padded4().1),
        a_offset: la.offset as u32,
        b_offset: lb.offset as u32,
        ..Default::default()
    };
    let key = KernelKey::new(KernelKind::new(Concat), node.dtype, vec![nodes[a].dtype, nodes[b].dtype]);
    let bindings = vec![id, nodes[a].storage, nodes[b].storage];
    let workgroups = grid("concat", (numel as u64).div_ceil(256), t.max_groups);
    Some(workgroups.map(|g| vec![dispatch(key, Params::new(p), bindings, g)]))
}

/// Every dtype.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    for d in [DType::F32, DType::F16, DType::I32] {
        keys.push(KernelKey::new(KernelKind::new(Concat), d, vec![d, d]));
    }
}
