//! top_k (`top_k.wgsl`): the indices of the k largest values of each row of the last axis, one workgroup a row.

use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind};
use crate::backend::gpu::params::{params, vec4, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::render;
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{NodeId, Op};

const TOP_K: &str = include_str!("top_k.wgsl");

params! {
    /// `top_k.wgsl`: the k largest of each row, largest first.
    TopKParams {
        /// Row length N.
        n: u32,
        /// Rows.
        rows: u32,
        /// Indices a row.
        k: u32,
        /// x's offset within its binding.
        x_offset: u32,
        /// x's shape, rank 4.
        x_shape: [u32; 4],
        /// x's strides.
        x_strides: [u32; 4],
    }
}

/// `top_k.wgsl`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TopK;

impl Family for TopK {
    fn name(&self) -> String {
        "top_k".into()
    }

    fn params(&self) -> ParamsLayout {
        TopKParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        vec![Binding::output("out", key.out), Binding::input("src0", key.ins[0])]
    }

    fn wgsl(&self, _key: &KernelKey, bindings: String) -> String {
        render(TOP_K, &[("BINDINGS", bindings)])
    }
}

/// Lowers top_k.
pub(crate) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &program.nodes;
    let Step::Op(Op::TopK { x, k }) = nodes[id].step else { return None };
    let lx = &nodes[x].layout;
    let n = lx.shape[lx.rank() - 1];
    let rows = lx.numel() / n.max(1);
    let (shape, strides) = lx.padded4();
    let p = TopKParams {
        n: n as u32,
        rows: rows as u32,
        k: k as u32,
        x_offset: lx.offset as u32,
        x_shape: vec4(shape),
        x_strides: vec4(strides),
    };
    let key = KernelKey::new(KernelKind::new(TopK), DType::I32, vec![nodes[x].dtype]);
    let workgroups = grid("top_k", rows as u64, t.max_groups);
    Some(workgroups.map(|g| vec![dispatch(key, Params::new(p), vec![id, nodes[x].storage], g)]))
}

/// Rows of f32 and f16.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    for d in [DType::F32, DType::F16] {
        keys.push(KernelKey::new(KernelKind::new(TopK), DType::I32, vec![d]));
    }
}
