//! Lowering of elementwise steps (fused or not) to `elementwise.wgsl`.

use super::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::kernel::{Dispatch, KernelKey, KernelKind};
use crate::backend::gpu::params::{set_packed, vec4, ElementwiseParams, Params};
use crate::backend::gpu::wgsl::elementwise::render_expr;
use crate::compile::ir::{Expr, Program};
use crate::graph::NodeId;
use crate::Result;

/// `expr(srcs)` over every element of step `id`'s contiguous output.
pub(super) fn lower(program: &Program, id: NodeId, expr: &Expr, srcs: &[NodeId], t: &GpuTarget) -> Result<Dispatch> {
    let node = &program.nodes[id];
    let numel = node.layout.numel();
    let mut p =
        ElementwiseParams { count: numel as u32, out_shape: vec4(node.layout.padded4().0), ..Default::default() };
    for (k, &s) in srcs.iter().enumerate() {
        let l = program.operand_layout(s, id);
        p.in_strides[k] = vec4(l.padded4().1);
        set_packed(&mut p.in_offsets, k, l.offset);
    }
    let ins = srcs.iter().map(|&s| program.nodes[s].dtype).collect();
    let key = KernelKey::new(KernelKind::Elementwise { expr: render_expr(expr) }, node.dtype, ins);
    let bindings = std::iter::once(id).chain(srcs.iter().map(|&s| program.nodes[s].storage)).collect();
    let name = node.step.name();
    Ok(dispatch(key, Params::ElementwiseParams(p), bindings, grid(&name, (numel as u64).div_ceil(256), t.max_groups)?))
}
