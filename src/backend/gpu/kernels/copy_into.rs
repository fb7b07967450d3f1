//! copy_into (`copy_into.wgsl`): `dst[c] = src[c]` through dst's strides, one invocation per element.

use crate::backend::gpu::kernel::{Binding, Dispatch, Family, KernelKey, KernelKind};
use crate::backend::gpu::params::{params, vec4, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::{compute_type, render};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{NodeId, Op};

const COPY_INTO: &str = include_str!("copy_into.wgsl");

params! {
    /// `copy_into.wgsl`: `dst[c] = src[c]` through dst's strides.
    CopyParams {
        /// Elements written.
        count: u32,
        /// dst's offset within its binding.
        dst_offset: u32,
        /// src's offset within its binding.
        src_offset: u32,
        _pad0: u32,
        /// dst's shape, rank 4.
        shape: [u32; 4],
        /// dst's strides.
        dst_strides: [u32; 4],
        /// src's strides, broadcast to dst's shape.
        src_strides: [u32; 4],
    }
}

/// `copy_into.wgsl`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CopyInto;

impl Family for CopyInto {
    fn name(&self) -> String {
        "copy_into".into()
    }

    fn params(&self) -> ParamsLayout {
        CopyParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        vec![Binding::output("out", key.out), Binding::input("src0", key.ins[0])]
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        render(COPY_INTO, &[("BINDINGS", bindings), ("OUT_C", compute_type(key.out).into())])
    }
}

/// Lowers copy_into: the destination is written in place.
pub(crate) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let nodes = &program.nodes;
    let Step::Op(Op::CopyInto { dst, src }) = nodes[id].step else { return None };
    let ld = &nodes[dst].layout;
    let ls = nodes[src].layout.broadcast_operand(&ld.shape);
    let (shape, dst_strides) = ld.padded4();
    let count = ld.numel();
    let params = CopyParams {
        count: count as u32,
        dst_offset: ld.offset as u32,
        src_offset: ls.offset as u32,
        _pad0: 0,
        shape: vec4(shape),
        dst_strides: vec4(dst_strides),
        src_strides: vec4(ls.padded4().1),
    };
    let key = KernelKey::new(KernelKind::new(CopyInto), nodes[dst].dtype, vec![nodes[src].dtype]);
    let bindings = vec![nodes[id].storage, nodes[src].storage];
    let workgroups = grid("copy_into", (count as u64).div_ceil(256), t.max_groups);
    Some(workgroups.map(|g| vec![dispatch(key, Params::new(params), bindings, g)]))
}

/// Destination and source dtypes as KV caches mix them.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    use DType::{F16, F32, I32};
    for (dst, src) in [(F32, F32), (F16, F32), (F16, F16), (F32, F16), (I32, I32)] {
        keys.push(KernelKey::new(KernelKind::new(CopyInto), dst, vec![src]));
    }
}
