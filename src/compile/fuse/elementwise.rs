//! Elementwise fusion: chains of elementwise steps become one expression, and an elementwise epilogue (bias,
//! activation, residual, gating) folds into the matmul or row op (a norm's weight and bias) that feeds it.
//!
//! A node is absorbed into its consumer when it is an elementwise step on floats, has exactly one consuming
//! node, is read directly (not through a view), and is not a requested output. Absorbed nodes get no memory
//! and no dispatch; the consumer's expression grows over the remaining operands ("leaves"), each read through
//! its own strides broadcast to the output's shape. When one leaf is a matmul or a row op (softmax, a norm) of
//! the same shape with no other consumer, the expression moves into that step's store (its epilogue), which runs
//! where the expression's root was scheduled, so every other leaf is ready.

use super::rewrite::{host_value, is_elementwise_float, reads_state, replace_leaf, try_step, Lowers, Readers, Rule};
use super::rewrite::{MAX_EPILOGUE_LEAVES, MAX_LEAVES};
use crate::compile::ir::{Expr, Program, Step};
use crate::graph::NodeId;

pub(super) const RULE: Rule = Rule { name: "elementwise", apply };

/// Builds one fused expression: operands are expanded depth-first while the expression keeps to
/// [`MAX_LEAVES`] operands; an operand whose expansion would not leave room for its later siblings stays a leaf
/// (it then roots a fused kernel of its own), so a chain too long for one kernel is fused in pieces.
struct Builder<'a> {
    p: &'a Program,
    fusible: &'a [bool],
    absorbed: &'a mut Vec<bool>,
    leaves: Vec<NodeId>,
    /// The nodes absorbed so far, in order (a trial expansion that does not fit is undone from here).
    journal: Vec<NodeId>,
    /// The expression of each node expanded so far: an operand read twice is expanded once.
    expanded: Vec<(NodeId, Expr)>,
}

impl Builder<'_> {
    fn leaf(&mut self, s: NodeId) -> Expr {
        let k = self.leaves.iter().position(|&l| l == s).unwrap_or_else(|| {
            self.leaves.push(s);
            self.leaves.len() - 1
        });
        Expr::Leaf(k)
    }

    /// Operand `s` of an expression that needs room for `reserve` more leaves after it.
    fn operand(&mut self, s: NodeId, reserve: usize) -> Expr {
        if let Some((_, e)) = self.expanded.iter().find(|(n, _)| *n == s) {
            return e.clone();
        }
        if self.fusible[s] && !self.absorbed[s] {
            let (leaves, journal, expanded) = (self.leaves.len(), self.journal.len(), self.expanded.len());
            self.absorbed[s] = true;
            self.journal.push(s);
            let e = self.build(s, reserve);
            if self.leaves.len() + reserve <= MAX_LEAVES {
                self.expanded.push((s, e.clone()));
                return e;
            }
            // too many operands: undo the trial, read s as a leaf
            for n in self.journal.drain(journal..) {
                self.absorbed[n] = false;
            }
            self.leaves.truncate(leaves);
            self.expanded.truncate(expanded);
        }
        self.leaf(s)
    }

    /// The expression of elementwise node `id` with its operands expanded (fusible ones, while they fit) or made
    /// leaves, leaving room for `reserve` more leaves.
    fn build(&mut self, id: NodeId, reserve: usize) -> Expr {
        let Step::Elementwise { expr, srcs } = &self.p.nodes[id].step else {
            unreachable!("only elementwise steps are built into expressions")
        };
        let n = srcs.len();
        expr.map_leaves(&mut |k| self.operand(srcs[k], reserve + n - 1 - k))
    }
}

/// Fuses every elementwise root, last first (see the module docs).
fn apply(mut p: Program, lowers: &Lowers) -> Program {
    let n = p.nodes.len();
    let readers = Readers::of(&p);
    let fusible: Vec<bool> = (0..n)
        .map(|i| {
            readers.live[i]
                && is_elementwise_float(&p, i)
                && !readers.materialize[i]
                && readers.consumers[i].len() == 1
                && !reads_state(&p, i)
        })
        .collect();
    let mut absorbed = vec![false; n];
    for &root in p.steps.clone().iter().rev() {
        if absorbed[root] || !is_elementwise_float(&p, root) {
            continue;
        }
        let mut trial = absorbed.clone();
        let mut b = Builder {
            p: &p,
            fusible: &fusible,
            absorbed: &mut trial,
            leaves: Vec::new(),
            journal: Vec::new(),
            expanded: Vec::new(),
        };
        let expr = b.build(root, 0);
        let leaves = b.leaves;
        let hosted = match hosted(&p, &readers, root, (&expr, &leaves)) {
            Some((host, step)) => {
                let ok = try_step(&mut p, root, step, lowers);
                trial[host] |= ok;
                ok
            }
            None => false,
        };
        if !hosted
            && (leaves.len() > MAX_LEAVES || !try_step(&mut p, root, Step::Elementwise { expr, srcs: leaves }, lowers))
        {
            continue;
        }
        absorbed = trial;
    }
    p.steps.retain(|&s| !absorbed[s]);
    p
}

/// The leaf of `root`'s expression that hosts it in its epilogue, and the host's step with the epilogue: a matmul
/// or row-op leaf of the root's shape, the latest, with no other consumer, reading no state, whose bindings
/// leave room for the expression's other operands.
fn hosted(p: &Program, readers: &Readers, root: NodeId, (expr, leaves): (&Expr, &[NodeId])) -> Option<(NodeId, Step)> {
    let shape = &p.nodes[root].layout.shape;
    let (k, l) = leaves
        .iter()
        .enumerate()
        .filter(|&(_, &l)| {
            matches!(p.nodes[l].step, Step::MatMul { epilogue: None, .. } | Step::Row { epilogue: None, .. })
                && !reads_state(p, l)
                && readers.consumers[l].len() == 1
                && !readers.materialize[l]
                && &p.nodes[l].layout.shape == shape
        })
        .max_by_key(|&(_, &l)| l)
        .map(|(k, &l)| (k, l))?;
    // the host's own operands besides A and B (the row op's x and mask) count against the bindings
    let room = match p.nodes[l].step {
        Step::Row { mask, .. } => MAX_EPILOGUE_LEAVES - usize::from(mask.is_some()),
        _ => MAX_EPILOGUE_LEAVES,
    };
    if leaves.len() - 1 > room {
        return None;
    }
    // the host's value keeps its dtype: an f16 matmul's sum or row rounds (and overflows) to f16 first
    let expr = replace_leaf(expr, k, &host_value(Expr::Acc, p.nodes[l].dtype));
    let mut leaves = leaves.to_vec();
    leaves.remove(k);
    let epilogue = Some((expr, leaves));
    let step = match p.nodes[l].step {
        Step::MatMul { a, b, prec, .. } => Step::MatMul { a, b, b2: None, epilogue, prec, norm: None },
        Step::Row { op, x, mask, params, .. } => Step::Row { op, x, mask, params, epilogue },
        _ => return None,
    };
    Some((l, step))
}
