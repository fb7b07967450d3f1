//! What the fusion rules share: the rule's shape ([`Rule`]), the question they ask the backend ([`Lowers`]), and
//! the program queries and rewrites they are made of.

use crate::compile::ir::{ElemOp, Expr, Program, Step};
use crate::dtype::DType;
use crate::graph::{NodeId, Op};

/// Most operands one fused elementwise kernel reads (bounded by its uniform block).
pub(super) const MAX_LEAVES: usize = 6;
/// Most extra operands an epilogue reads, besides a matmul's A and B (a row op's x; its mask counts as one).
pub(super) const MAX_EPILOGUE_LEAVES: usize = 5;

/// Whether the backend lowers step `id` as `program` now holds it (`Target::lowers`).
pub(crate) type Lowers<'a> = dyn Fn(&Program, NodeId) -> bool + 'a;

/// One fusion: its name (its file's, logged at debug with the steps it saved) and its rewrite of the program.
pub(crate) struct Rule {
    pub name: &'static str,
    pub apply: fn(Program, &Lowers) -> Program,
}

/// Sets step `id` to `step` when the backend lowers it (true), else leaves the program as it was (false).
pub(super) fn try_step(p: &mut Program, id: NodeId, step: Step, lowers: &Lowers) -> bool {
    let old = std::mem::replace(&mut p.nodes[id].step, step);
    if lowers(p, id) {
        return true;
    }
    p.nodes[id].step = old;
    false
}

/// Offers each scheduled step `u` to `fused(p, u)`: where it gives the node `u` would absorb and `u`'s fused step,
/// and the backend lowers that step, `u` becomes it and the absorbed node leaves the schedule.
pub(super) fn absorb_each(
    mut p: Program,
    lowers: &Lowers,
    fused: impl Fn(&Program, NodeId) -> Option<(NodeId, Step)>,
) -> Program {
    let mut gone = Vec::new();
    for u in p.steps.clone() {
        if let Some((absorbed, step)) = fused(&p, u) {
            if try_step(&mut p, u, step, lowers) {
                gone.push(absorbed);
            }
        }
    }
    p.steps.retain(|id| !gone.contains(id));
    p
}

pub(super) fn is_elementwise_float(p: &Program, id: NodeId) -> bool {
    let n = &p.nodes[id];
    matches!(n.step, Step::Elementwise { .. })
        && n.dtype.is_float()
        && n.step.srcs().iter().all(|&s| p.nodes[s].dtype.is_float())
}

/// Whether step `id` reads a state: such a step stays where it was scheduled (a fused kernel runs where its root
/// is, which could be after a write to the state that the step must not see, or before one it must).
pub(super) fn reads_state(p: &Program, id: NodeId) -> bool {
    p.nodes[id].step.srcs().iter().any(|&s| p.is_state(p.nodes[s].storage))
}

/// Which nodes consume each node, which are read through views (or are outputs), and which are live.
pub(super) struct Readers {
    pub consumers: Vec<Vec<NodeId>>,
    pub materialize: Vec<bool>,
    pub live: Vec<bool>,
}

impl Readers {
    pub(super) fn of(p: &Program) -> Readers {
        let n = p.nodes.len();
        let mut consumers: Vec<Vec<NodeId>> = vec![Vec::new(); n];
        let mut materialize = vec![false; n];
        let mut live = vec![false; n];
        let mut stack: Vec<NodeId> = p.outputs.clone();
        while let Some(id) = stack.pop() {
            if !std::mem::replace(&mut live[id], true) {
                stack.extend(p.nodes[id].step.srcs());
            }
        }
        for id in (0..n).filter(|&i| live[i]) {
            for s in p.nodes[id].step.srcs() {
                if matches!(p.nodes[id].step, Step::Op(Op::View { .. })) {
                    materialize[s] = true;
                } else if !consumers[s].contains(&id) {
                    consumers[s].push(id);
                }
            }
        }
        for &o in &p.outputs {
            materialize[o] = true;
        }
        Readers { consumers, materialize, live }
    }

    /// Whether step `s` is read only by step `by`, directly (no view), and is no output.
    pub(super) fn only_by(&self, s: NodeId, by: NodeId) -> bool {
        self.consumers[s] == [by] && !self.materialize[s]
    }
}

/// A matmul's or row op's stored value as an epilogue reads it (`acc` or `acc2`): an f16 host's value rounds (and
/// overflows) to f16 first, as the unfused plan stores it.
pub(super) fn host_value(acc: Expr, dtype: DType) -> Expr {
    match dtype {
        DType::F16 => Expr::Node { op: ElemOp::Cast, args: vec![acc], dtype: DType::F16 },
        _ => acc,
    }
}

/// `expr` with leaf `k` replaced by `value` and the leaves after it renumbered down by one (leaf k's operand
/// removed from the list).
pub(super) fn replace_leaf(expr: &Expr, k: usize, value: &Expr) -> Expr {
    expr.map_leaves(&mut |j| match j.cmp(&k) {
        std::cmp::Ordering::Equal => value.clone(),
        std::cmp::Ordering::Greater => Expr::Leaf(j - 1),
        std::cmp::Ordering::Less => Expr::Leaf(j),
    })
}
