//! RMS norms into the matmul that reads them (llama.cpp's RMS_NORM + MUL before a mat-vec, in one kernel): a
//! matmul (or dual matmul) whose A is an f32 `rms_norm(x)` row step, bare or times a weight `[K]` (the norm's
//! epilogue `acc · w`), reads x and norms it on load ([`NormIn`]) when nothing else reads the norm (a view
//! counts), it is no output, its input x is f32, the weight's binding leaves the matmul within
//! [`MAX_EPILOGUE_LEAVES`] operands besides A and B, and the backend lowers the normed step. The norm gets no
//! memory and no kernel.

use super::rewrite::{absorb_each, Lowers, Readers, Rule, MAX_EPILOGUE_LEAVES};
use crate::compile::ir::{ElemOp, Expr, NormIn, Program, Step};
use crate::dtype::DType;
use crate::graph::NodeId;
use crate::ops::{BinaryOp, RowOp};

pub(super) const RULE: Rule = Rule { name: "norm_prologue", apply };

fn apply(p: Program, lowers: &Lowers) -> Program {
    let readers = Readers::of(&p);
    absorb_each(p, lowers, |p, u| normed(p, &readers, u))
}

/// The norm that matmul `u` reads as its A and may compute as it loads it, and `u`'s step that does.
fn normed(p: &Program, readers: &Readers, u: NodeId) -> Option<(NodeId, Step)> {
    let Step::MatMul { a, b2, norm: None, ref epilogue, .. } = p.nodes[u].step else { return None };
    // the weight is one more binding: the epilogue's operands, a dual's B2 and it within an epilogue's room
    let operands = epilogue.as_ref().map_or(0, |(_, s)| s.len()) + usize::from(b2.is_some());
    let n = &p.nodes[a];
    let Step::Row { op: RowOp::RmsNorm, x, mask: None, params, epilogue: ref norm_epilogue } = n.step else {
        return None;
    };
    let weight = match norm_epilogue {
        None => None,
        Some((Expr::Node { op: ElemOp::Binary(BinaryOp::Mul), args, dtype: DType::F32 }, leaves))
            if leaves.len() == 1 && matches!(args[..], [Expr::Acc, Expr::Leaf(0)] | [Expr::Leaf(0), Expr::Acc]) =>
        {
            Some(leaves[0])
        }
        Some(_) => return None,
    };
    let k = *n.layout.shape.last().unwrap_or(&0);
    let weight_ok = weight.is_none_or(|w| p.nodes[w].layout.shape == [k] && operands < MAX_EPILOGUE_LEAVES);
    if n.dtype != DType::F32 || p.nodes[x].dtype != DType::F32 || !readers.only_by(a, u) || !weight_ok {
        return None;
    }
    let mut step = p.nodes[u].step.clone();
    if let Step::MatMul { a, norm, .. } = &mut step {
        (*a, *norm) = (x, Some(NormIn { eps: params.eps, weight }));
    }
    Some((a, step))
}
