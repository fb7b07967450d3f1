//! Lowering of row ops (softmax, the norms, reductions) to `rows.wgsl`.

use super::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::kernel::{Dispatch, KernelKey, KernelKind, RowKernel};
use crate::backend::gpu::params::{vec4, Params, RowsParams};
use crate::compile::ir::{Program, Step};
use crate::graph::{NodeId, Op};
use crate::Result;

/// One workgroup per row of step `id`'s operand.
pub(super) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Result<Dispatch> {
    let nodes = &program.nodes;
    let (op, x, mask, scale, eps) = match nodes[id].step {
        Step::Row { op, x, mask, params } => (RowKernel::Row(op), x, mask, params.scale, params.eps),
        Step::Op(Op::Reduce { op, x }) => (RowKernel::Reduce(op), x, None, 1.0, 0.0),
        _ => unreachable!("a row op"),
    };
    let lx = &nodes[x].layout;
    let n = lx.shape[lx.rank() - 1];
    let nrows = lx.numel() / n;
    let (xs, xst) = lx.padded4();
    let (mst, moff) = match mask {
        Some(m) => {
            let l = nodes[m].layout.broadcast_operand(&lx.shape);
            (l.padded4().1, l.offset)
        }
        None => ([0; 4], 0),
    };
    let p = RowsParams {
        n: n as u32,
        rows: nrows as u32,
        x_offset: lx.offset as u32,
        mask_offset: moff as u32,
        x_shape: vec4(xs),
        x_strides: vec4(xst),
        mask_strides: vec4(mst),
        scale,
        eps,
        first_row: 0,
        out_offset: 0,
    };
    let mut ins = vec![nodes[x].dtype];
    let mut bindings = vec![id, nodes[x].storage];
    if let Some(m) = mask {
        ins.push(nodes[m].dtype);
        bindings.push(nodes[m].storage);
    }
    let key = KernelKey::new(KernelKind::Rows { op, mask: mask.is_some() }, nodes[id].dtype, ins);
    let workgroups = grid(&nodes[id].step.name(), nrows as u64, t.max_groups)?;
    Ok(dispatch(key, Params::RowsParams(p), bindings, workgroups))
}
