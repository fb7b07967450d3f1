//! Fusion (stage 2, compile pass 2): a list of rewrite rules ([`RULES`]), one file each, applied in order to the
//! program. Each rule finds a pattern of steps, builds the fused step that replaces it, and keeps it only where
//! the backend lowers that step ([`Lowers`], the one question a rule asks the backend): a fused step either
//! lowers on every backend that keeps it, or its rule declines and the steps stay as they were.
//!
//! Fused steps stay steps of the shared program, so the memory planner sees them (an absorbed node gets no
//! memory and no kernel) and `tests/fusion.rs` counts them on every backend.
//!
//! Fusion never changes a result: every intermediate keeps the dtype the graph gave it (each backend rounds an
//! f16 node of an expression to f16, and a matmul's product to its dtype before its epilogue), so a fused plan
//! gives the unfused plan's values, overflow to inf included.
//!
//! A new fusion is a file here with its `RULE` and one line in [`RULES`].

mod dual_matmul;
mod elementwise;
mod norm_prologue;
mod rope_kv_writes;
mod rope_set_rows;

use super::ir::{ElemOp, Expr, Program, Step};
use crate::dtype::DType;
use crate::graph::{NodeId, Op};

/// Most operands one fused elementwise kernel reads (bounded by its uniform block).
pub(crate) const MAX_LEAVES: usize = 6;
/// Most extra operands an epilogue reads, besides a matmul's A and B (a row op's x; its mask counts as one).
pub(crate) const MAX_EPILOGUE_LEAVES: usize = 5;

/// Whether the backend lowers step `id` as `program` now holds it (`Target::lowers`).
pub(crate) type Lowers<'a> = dyn Fn(&Program, NodeId) -> bool + 'a;

/// One fusion: its name (its file's, logged at debug with the steps it saved) and its rewrite of the program.
pub(crate) struct Rule {
    pub name: &'static str,
    pub apply: fn(Program, &Lowers) -> Program,
}

/// The rules, in the order they apply: each later rule sees the earlier ones' fused steps.
pub(crate) const RULES: [Rule; 5] =
    [elementwise::RULE, rope_set_rows::RULE, dual_matmul::RULE, norm_prologue::RULE, rope_kv_writes::RULE];

/// `program` rewritten by every rule in turn, each asking `lowers` about the steps it fuses.
pub(crate) fn fuse(program: Program, lowers: &Lowers) -> Program {
    RULES.iter().fold(program, |p, rule| {
        let before = p.steps.len();
        let p = (rule.apply)(p, lowers);
        log::debug!("fusion rule {}: {before} -> {} steps", rule.name, p.steps.len());
        p
    })
}

/// Sets step `id` to `step` when the backend lowers it (true), else leaves the program as it was (false).
fn try_step(p: &mut Program, id: NodeId, step: Step, lowers: &Lowers) -> bool {
    let old = std::mem::replace(&mut p.nodes[id].step, step);
    if lowers(p, id) {
        return true;
    }
    p.nodes[id].step = old;
    false
}

fn is_elementwise_float(p: &Program, id: NodeId) -> bool {
    let n = &p.nodes[id];
    matches!(n.step, Step::Elementwise { .. })
        && n.dtype.is_float()
        && n.step.srcs().iter().all(|&s| p.nodes[s].dtype.is_float())
}

/// Whether step `id` reads a state: such a step stays where it was scheduled (a fused kernel runs where its root
/// is, which could be after a write to the state that the step must not see, or before one it must).
fn reads_state(p: &Program, id: NodeId) -> bool {
    p.nodes[id].step.srcs().iter().any(|&s| p.is_state(p.nodes[s].storage))
}

/// Which nodes consume each node, which are read through views (or are outputs), and which are live.
struct Readers {
    consumers: Vec<Vec<NodeId>>,
    materialize: Vec<bool>,
    live: Vec<bool>,
}

impl Readers {
    fn of(p: &Program) -> Readers {
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
    fn only_by(&self, s: NodeId, by: NodeId) -> bool {
        self.consumers[s] == [by] && !self.materialize[s]
    }
}

/// A matmul's or row op's stored value as an epilogue reads it (`acc` or `acc2`): an f16 host's value rounds (and
/// overflows) to f16 first, as the unfused plan stores it.
fn host_value(acc: Expr, dtype: DType) -> Expr {
    match dtype {
        DType::F16 => Expr::Node { op: ElemOp::Cast, args: vec![acc], dtype: DType::F16 },
        _ => acc,
    }
}

/// `expr` with leaf `k` replaced by `value` and the leaves after it renumbered down by one (leaf k's operand
/// removed from the list).
fn replace_leaf(expr: &Expr, k: usize, value: &Expr) -> Expr {
    expr.map_leaves(&mut |j| match j.cmp(&k) {
        std::cmp::Ordering::Equal => value.clone(),
        std::cmp::Ordering::Greater => Expr::Leaf(j - 1),
        std::cmp::Ordering::Less => Expr::Leaf(j),
    })
}
