//! Elementwise fusion (compile pass, GPU plans): chains of elementwise ops become one kernel, and an
//! elementwise epilogue (bias, activation, residual, gating) folds into the matmul that feeds it.
//!
//! A node is absorbed into its consumer when it is an elementwise op on floats, has exactly one consuming
//! node, is read directly (not through a view), and is not a requested output. Absorbed nodes get no memory
//! and no dispatch; the consumer becomes an [`Op::Fused`] expression over the remaining operands ("leaves"),
//! each read through its own strides broadcast to the output's shape. When one leaf is a matmul of the same
//! shape with no other consumer, the expression moves into that matmul's store ([`Op::MatMulFused`]), which
//! runs where the expression's root was scheduled, so every other leaf is ready.
//!
//! The CPU backend never sees fused ops: it runs the graph as built, which is what fused plans are tested
//! against.

use super::Program;
use crate::graph::{BinaryOp, NodeId, Op, UnaryOp};
use crate::shape::Layout;

/// Most operands one fused elementwise kernel reads (bounded by its 256-byte uniform block).
pub(crate) const MAX_LEAVES: usize = 6;
/// Most extra operands a matmul epilogue reads, besides A and B.
pub(crate) const MAX_EPILOGUE_LEAVES: usize = 5;

/// An elementwise expression tree, computed in f32.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Expr {
    /// The k-th operand of the fused op.
    Leaf(usize),
    /// The matmul's accumulated product (only inside [`Op::MatMulFused`]).
    Acc,
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
}

impl Expr {
    /// Renders the expression with `leaf(k)` for operand k and `acc` for the accumulator.
    pub fn render(
        &self,
        leaf: &dyn Fn(usize) -> String,
        unary: fn(UnaryOp, &str) -> String,
        binary: fn(BinaryOp, &str, &str) -> String,
    ) -> String {
        match self {
            Expr::Leaf(k) => leaf(*k),
            Expr::Acc => "acc".into(),
            Expr::Unary(op, x) => unary(*op, &x.render(leaf, unary, binary)),
            Expr::Binary(op, a, b) => binary(*op, &a.render(leaf, unary, binary), &b.render(leaf, unary, binary)),
        }
    }

    fn replace_leaf(self, k: usize, with: &Expr, shift_above: bool) -> Expr {
        match self {
            Expr::Leaf(j) if j == k => with.clone(),
            Expr::Leaf(j) if shift_above && j > k => Expr::Leaf(j - 1),
            Expr::Unary(op, x) => Expr::Unary(op, Box::new(x.replace_leaf(k, with, shift_above))),
            Expr::Binary(op, a, b) => Expr::Binary(
                op,
                Box::new(a.replace_leaf(k, with, shift_above)),
                Box::new(b.replace_leaf(k, with, shift_above)),
            ),
            other => other,
        }
    }
}

fn is_elementwise_float(p: &Program, id: NodeId) -> bool {
    let n = &p.nodes[id];
    matches!(n.op, Op::Unary { .. } | Op::Binary { .. })
        && n.dtype.is_float()
        && n.op.srcs().iter().all(|&s| p.nodes[s].dtype.is_float())
}

struct Builder<'a> {
    p: &'a Program,
    fusible: &'a [bool],
    absorbed: &'a mut Vec<bool>,
    leaves: Vec<NodeId>,
}

impl Builder<'_> {
    fn operand(&mut self, s: NodeId) -> Expr {
        if self.fusible[s] && !self.absorbed[s] {
            self.absorbed[s] = true;
            return self.build(s);
        }
        let k = self.leaves.iter().position(|&l| l == s).unwrap_or_else(|| {
            self.leaves.push(s);
            self.leaves.len() - 1
        });
        Expr::Leaf(k)
    }

    fn build(&mut self, id: NodeId) -> Expr {
        match self.p.nodes[id].op {
            Op::Unary { op, x } => Expr::Unary(op, Box::new(self.operand(x))),
            Op::Binary { op, a, b } => {
                let ea = self.operand(a);
                Expr::Binary(op, Box::new(ea), Box::new(self.operand(b)))
            }
            _ => unreachable!("only elementwise nodes are built into expressions"),
        }
    }
}

/// Rewrites `p` with fused ops (see the module docs).
pub(crate) fn fuse(mut p: Program) -> Program {
    let n = p.nodes.len();
    let mut consumers: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    let mut materialize = vec![false; n];
    let mut live = vec![false; n];
    let mut stack: Vec<NodeId> = p.outputs.clone();
    while let Some(id) = stack.pop() {
        if !std::mem::replace(&mut live[id], true) {
            stack.extend(p.nodes[id].op.srcs());
        }
    }
    for id in (0..n).filter(|&i| live[i]) {
        for s in p.nodes[id].op.srcs() {
            if matches!(p.nodes[id].op, Op::View { .. }) {
                materialize[s] = true;
            } else if !consumers[s].contains(&id) {
                consumers[s].push(id);
            }
        }
    }
    for &o in &p.outputs {
        materialize[o] = true;
    }
    let fusible: Vec<bool> =
        (0..n).map(|i| live[i] && is_elementwise_float(&p, i) && !materialize[i] && consumers[i].len() == 1).collect();
    let mut absorbed = vec![false; n];
    for &root in p.steps.clone().iter().rev() {
        if absorbed[root] || !is_elementwise_float(&p, root) {
            continue;
        }
        let mut trial = absorbed.clone();
        let mut b = Builder { p: &p, fusible: &fusible, absorbed: &mut trial, leaves: Vec::new() };
        let mut expr = b.build(root);
        let mut leaves = b.leaves;
        if leaves.len() > MAX_LEAVES + 1 {
            continue; // too many operands for one kernel: leave this root unfused
        }
        // a matmul leaf of the root's shape with no other consumer hosts the expression
        let shape = &p.nodes[root].layout.shape;
        let host = leaves
            .iter()
            .enumerate()
            .filter(|&(_, &l)| {
                matches!(p.nodes[l].op, Op::MatMul { .. })
                    && !materialize[l]
                    && consumers[l].len() == 1
                    && &p.nodes[l].layout.shape == shape
            })
            .max_by_key(|&(_, &l)| l)
            .map(|(k, &l)| (k, l));
        match host {
            Some((k, l)) if leaves.len() - 1 <= MAX_EPILOGUE_LEAVES => {
                let Op::MatMul { a, b } = p.nodes[l].op else { unreachable!() };
                expr = expr.replace_leaf(k, &Expr::Acc, true);
                leaves.remove(k);
                trial[l] = true;
                p.nodes[root].op = Op::MatMulFused { a, b, expr, srcs: leaves };
            }
            _ if leaves.len() <= MAX_LEAVES => p.nodes[root].op = Op::Fused { expr, srcs: leaves },
            _ => continue,
        }
        absorbed = trial;
    }
    p.steps.retain(|&s| !absorbed[s]);
    p
}

/// Storage nodes that step `id` may write over in place: operands it reads at exactly the index it writes
/// (same shape, contiguous, offset 0, same dtype and byte size), and that no other operand of the step reads
/// through another layout. Matmuls never write in place (their vec4 output binding could not serve a scalar
/// operand). Whether one is free to take (read for
/// the last time here, not an input or output) is the memory planner's decision.
pub(crate) fn inplace_candidates(p: &Program, id: NodeId) -> Vec<NodeId> {
    let node = &p.nodes[id];
    let same_index = |s: NodeId| {
        let l: &Layout = &p.nodes[s].layout;
        l.shape == node.layout.shape
            && l.is_contiguous()
            && l.offset == 0
            && p.nodes[s].dtype == node.dtype
            && p.storage_bytes(p.nodes[s].storage) == p.storage_bytes(id)
    };
    let (candidates, excluded): (Vec<NodeId>, Vec<NodeId>) = match &node.op {
        // a matmul's vec4 output binding could not also serve a scalar operand
        Op::Unary { x, .. } => (vec![*x], vec![]),
        Op::Binary { a, b, .. } => (vec![*a, *b], vec![]),
        Op::Fused { srcs, .. } => (srcs.clone(), vec![]),
        Op::Softmax { x, mask, .. } => (vec![*x], mask.iter().copied().collect()),
        Op::RmsNorm { x, .. } | Op::LayerNorm { x, .. } => (vec![*x], vec![]),
        _ => (vec![], vec![]),
    };
    let reads: Vec<NodeId> = node.op.srcs();
    let mut out = Vec::new();
    for c in candidates {
        let st = p.nodes[c].storage;
        let clash = excluded.iter().any(|&e| p.nodes[e].storage == st)
            || reads.iter().any(|&r| p.nodes[r].storage == st && p.nodes[r].layout != p.nodes[c].layout);
        if same_index(c) && !clash && !out.contains(&st) {
            out.push(st);
        }
    }
    out
}
