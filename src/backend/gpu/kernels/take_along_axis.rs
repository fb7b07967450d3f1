//! take_along_axis (`take_along_axis.wgsl`): `out[r, j] = x[r, idx[r, j]]`, one invocation per output element.

use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind};
use crate::backend::gpu::params::{params, vec4, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::{compute_type, render};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{NodeId, Op};

const TAKE: &str = include_str!("take_along_axis.wgsl");

params! {
    /// `take_along_axis.wgsl`: entries of each row picked by the same row of the indices.
    TakeAlongAxisParams {
        /// Output elements.
        count: u32,
        /// x's row length N.
        n: u32,
        /// Indices a row J.
        j: u32,
        /// x's offset within its binding.
        x_offset: u32,
        /// x's shape, rank 4.
        x_shape: [u32; 4],
        /// x's strides.
        x_strides: [u32; 4],
        /// idx's shape, rank 4.
        idx_shape: [u32; 4],
        /// idx's strides.
        idx_strides: [u32; 4],
        /// idx's offset within its binding.
        idx_offset: u32,
        _pad0: u32,
        _pad1: u32,
        _pad2: u32,
    }
}

/// `take_along_axis.wgsl`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TakeAlongAxis;

impl Family for TakeAlongAxis {
    fn name(&self) -> String {
        "take_along_axis".into()
    }

    fn params(&self) -> ParamsLayout {
        TakeAlongAxisParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        vec![Binding::output("out", key.out), Binding::input("src0", key.ins[0]), Binding::input("src1", key.ins[1])]
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        render(TAKE, &[("BINDINGS", bindings), ("OUT_C", compute_type(key.out).into())])
    }
}

/// Lowers take_along_axis.
pub(crate) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &program.nodes;
    let Step::Op(Op::TakeAlongAxis { x, idx }) = nodes[id].step else { return None };
    let (lx, li) = (&nodes[x].layout, &nodes[idx].layout);
    let count = li.numel();
    let ((xs, xst), (is, ist)) = (lx.padded4(), li.padded4());
    let p = TakeAlongAxisParams {
        count: count as u32,
        n: lx.shape[lx.rank() - 1] as u32,
        j: li.shape[li.rank() - 1] as u32,
        x_offset: lx.offset as u32,
        x_shape: vec4(xs),
        x_strides: vec4(xst),
        idx_shape: vec4(is),
        idx_strides: vec4(ist),
        idx_offset: li.offset as u32,
        ..Default::default()
    };
    let key = KernelKey::new(KernelKind::new(TakeAlongAxis), nodes[id].dtype, vec![nodes[x].dtype, DType::I32]);
    let bindings = vec![id, nodes[x].storage, nodes[idx].storage];
    let workgroups = grid("take_along_axis", (count as u64).div_ceil(256), t.max_groups);
    Some(workgroups.map(|g| vec![dispatch(key, Params::new(p), bindings, g)]))
}

/// Values of f32, f16 and i32.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    for d in [DType::F32, DType::F16, DType::I32] {
        keys.push(KernelKey::new(KernelKind::new(TakeAlongAxis), d, vec![d, DType::I32]));
    }
}
