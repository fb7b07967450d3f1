//! ssm_conv (`ssm_conv.wgsl`): the causal depthwise conv over the sequence, one invocation an output element.

use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind};
use crate::backend::gpu::params::{params, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::render;
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{NodeId, Op};

const SSM_CONV: &str = include_str!("ssm_conv.wgsl");

params! {
    /// `ssm_conv.wgsl`: `out[b, t, c] = Σ_k w[c, k] · x[b, t + k, c]`.
    SsmConvParams {
        /// Output elements B·T·C.
        count: u32,
        /// Channels C.
        c: u32,
        /// Output rows a batch T.
        t: u32,
        /// Taps K.
        k: u32,
        /// x's offset within its binding.
        x_offset: u32,
        /// w's offset within its binding.
        w_offset: u32,
        _pad0: u32,
        _pad1: u32,
    }
}

/// `ssm_conv.wgsl`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SsmConv;

impl Family for SsmConv {
    fn name(&self) -> String {
        "ssm_conv".into()
    }

    fn params(&self) -> ParamsLayout {
        SsmConvParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        vec![Binding::output("out", key.out), Binding::input("src0", key.ins[0]), Binding::input("src1", key.ins[1])]
    }

    fn wgsl(&self, _key: &KernelKey, bindings: String) -> String {
        render(SSM_CONV, &[("BINDINGS", bindings)])
    }
}

/// Lowers ssm_conv (its operands contiguous f32: `Graph::ssm_conv` makes them so).
pub(crate) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &program.nodes;
    let Step::Op(Op::SsmConv { x, w }) = nodes[id].step else { return None };
    let (lx, lw, lo) = (&nodes[x].layout, &nodes[w].layout, &nodes[id].layout);
    let count = lo.numel();
    let p = SsmConvParams {
        count: count as u32,
        c: lw.shape[0] as u32,
        t: lo.shape[lo.rank() - 2] as u32,
        k: lw.shape[1] as u32,
        x_offset: lx.offset as u32,
        w_offset: lw.offset as u32,
        ..Default::default()
    };
    let key = KernelKey::new(KernelKind::new(SsmConv), DType::F32, vec![DType::F32, DType::F32]);
    let bindings = vec![id, nodes[x].storage, nodes[w].storage];
    let workgroups = grid("ssm_conv", (count as u64).div_ceil(256), t.max_groups);
    Some(workgroups.map(|g| vec![dispatch(key, Params::new(p), bindings, g)]))
}

/// f32 only.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    keys.push(KernelKey::new(KernelKind::new(SsmConv), DType::F32, vec![DType::F32, DType::F32]));
}
