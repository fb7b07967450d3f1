//! Dual matmuls (llama.cpp's fused gate and up): a matmul `u = a @ b` whose epilogue reads another matmul `g = a
//! @ b2` of the same A, shape, dtype and precision (a gated feed-forward's `act(x @ gate) · (x @ up)`) computes
//! both products in one step, `g` becoming [`Expr::Acc2`], when nothing else reads `g` (a view counts), `g` is no
//! output, has no epilogue of its own and reads no state, and the backend lowers the dual step. `g` gets no
//! memory and no kernel; A is read once.

use super::rewrite::{absorb_each, host_value, reads_state, replace_leaf, Lowers, Readers, Rule};
use crate::compile::ir::{Expr, Program, Step};
use crate::graph::NodeId;

pub(super) const RULE: Rule = Rule { name: "dual_matmul", apply };

fn apply(p: Program, lowers: &Lowers) -> Program {
    let readers = Readers::of(&p);
    absorb_each(p, lowers, |p, u| dual(p, &readers, u))
}

/// The matmul that `u`'s epilogue reads and `u` may compute beside its own product, and `u`'s dual step.
fn dual(p: &Program, readers: &Readers, u: NodeId) -> Option<(NodeId, Step)> {
    let Step::MatMul { a, b, b2: None, epilogue: Some((expr, leaves)), prec, norm: None } = &p.nodes[u].step else {
        return None;
    };
    let k = leaves.iter().position(|&g| {
        let n = &p.nodes[g];
        matches!(n.step, Step::MatMul { a: ga, b2: None, epilogue: None, prec: gp, norm: None, .. } if ga == *a && gp == *prec)
            && n.dtype == p.nodes[u].dtype
            && n.layout.shape == p.nodes[u].layout.shape
            && readers.only_by(g, u)
            && !reads_state(p, g)
    })?;
    let g = leaves[k];
    let Step::MatMul { b: gb, .. } = p.nodes[g].step else { return None };
    // the second product keeps its dtype, as the host's does (an f16 matmul's sum rounds to f16 first)
    let expr = replace_leaf(expr, k, &host_value(Expr::Acc2, p.nodes[g].dtype));
    let mut leaves = leaves.clone();
    leaves.remove(k);
    let step = Step::MatMul { a: *a, b: *b, b2: Some(gb), epilogue: Some((expr, leaves)), prec: *prec, norm: None };
    Some((g, step))
}
