//! Fusion (stage 2, compile pass 2): chains of elementwise steps become one expression, an elementwise epilogue
//! (bias, activation, residual, gating) folds into the matmul or row op (a norm's weight and bias) that feeds it,
//! and a rope whose only reader is a KV-cache write (`set_rows`) is computed by that write.
//!
//! A node is absorbed into its consumer when it is an elementwise step on floats, has exactly one consuming
//! node, is read directly (not through a view), and is not a requested output. Absorbed nodes get no memory
//! and no dispatch; the consumer's expression grows over the remaining operands ("leaves"), each read through
//! its own strides broadcast to the output's shape. When one leaf is a matmul or a row op (softmax, a norm) of
//! the same shape with no other consumer, the expression moves into that step's store (its epilogue), which runs
//! where the expression's root was scheduled, so every other leaf is ready.
//!
//! Fusion never changes a result: every intermediate keeps the dtype the graph gave it (each backend rounds an
//! f16 node of an expression to f16, and a matmul's product to its dtype before its epilogue), so a fused plan
//! gives the unfused plan's values, overflow to inf included.

use super::ir::{ElemOp, Expr, NormIn, Program, RowsWrite, Step};
use crate::dtype::DType;
use crate::graph::{NodeId, Op};
use crate::ops::{BinaryOp, RowOp};

/// Most operands one fused elementwise kernel reads (bounded by its uniform block).
pub(crate) const MAX_LEAVES: usize = 6;
/// Most extra operands an epilogue reads, besides a matmul's A and B (a row op's x; its mask counts as one).
pub(crate) const MAX_EPILOGUE_LEAVES: usize = 5;

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

/// Which nodes are read through views (or are outputs), and which nodes consume each node.
fn consumers(p: &Program) -> (Vec<Vec<NodeId>>, Vec<bool>, Vec<bool>) {
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
    (consumers, materialize, live)
}

/// Rewrites `p` with fused steps (see the module docs).
pub(crate) fn fuse(mut p: Program) -> Program {
    let n = p.nodes.len();
    let (consumers, materialize, live) = consumers(&p);
    let fusible: Vec<bool> = (0..n)
        .map(|i| {
            live[i] && is_elementwise_float(&p, i) && !materialize[i] && consumers[i].len() == 1 && !reads_state(&p, i)
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
        let mut expr = b.build(root, 0);
        let mut leaves = b.leaves;
        // a matmul or row-op leaf of the root's shape with no other consumer hosts the expression
        let shape = &p.nodes[root].layout.shape;
        let host = leaves
            .iter()
            .enumerate()
            .filter(|&(_, &l)| {
                matches!(p.nodes[l].step, Step::MatMul { epilogue: None, .. } | Step::Row { epilogue: None, .. })
                    && !reads_state(&p, l)
                    && !materialize[l]
                    && consumers[l].len() == 1
                    && &p.nodes[l].layout.shape == shape
            })
            .max_by_key(|&(_, &l)| l)
            .map(|(k, &l)| (k, l));
        // the host's own operands besides A and B (the row op's x and mask) count against the bindings
        let room = |l: NodeId| match p.nodes[l].step {
            Step::Row { mask, .. } => MAX_EPILOGUE_LEAVES - usize::from(mask.is_some()),
            _ => MAX_EPILOGUE_LEAVES,
        };
        match host {
            Some((k, l)) if leaves.len() - 1 <= room(l) => {
                // the host's value keeps its dtype: an f16 matmul's sum or row rounds (and overflows) to f16 first
                let acc = match p.nodes[l].dtype {
                    DType::F16 => Expr::Node { op: ElemOp::Cast, args: vec![Expr::Acc], dtype: DType::F16 },
                    _ => Expr::Acc,
                };
                expr = expr.map_leaves(&mut |j| match j.cmp(&k) {
                    std::cmp::Ordering::Equal => acc.clone(),
                    std::cmp::Ordering::Greater => Expr::Leaf(j - 1),
                    std::cmp::Ordering::Less => Expr::Leaf(j),
                });
                leaves.remove(k);
                trial[l] = true;
                p.nodes[root].step = match p.nodes[l].step {
                    Step::MatMul { a, b, prec, .. } => {
                        Step::MatMul { a, b, b2: None, epilogue: Some((expr, leaves)), prec, norm: None }
                    }
                    Step::Row { op, x, mask, params, .. } => {
                        Step::Row { op, x, mask, params, epilogue: Some((expr, leaves)) }
                    }
                    _ => unreachable!("hosts are matmuls and row ops"),
                };
            }
            _ if leaves.len() <= MAX_LEAVES => p.nodes[root].step = Step::Elementwise { expr, srcs: leaves },
            _ => continue,
        }
        absorbed = trial;
    }
    p.steps.retain(|&s| !absorbed[s]);
    fuse_rope_set_rows(&mut p);
    p
}

/// Dual matmuls (llama.cpp's fused gate and up): a matmul `u = a @ b` whose epilogue reads another matmul `g = a
/// @ b2` of the same A, shape, dtype and precision (a gated feed-forward's `act(x @ gate) · (x @ up)`) computes
/// both products in one step, `g` becoming [`Expr::Acc2`], when nothing else reads `g` (a view counts), `g` is no
/// output, has no epilogue of its own and reads no state, and the backend says it multiplies that pair
/// (`allowed(program, a, b, b2)`). `g` gets no memory and no kernel; A is read once.
pub(crate) fn fuse_dual_matmuls(mut p: Program, allowed: &dyn Fn(&Program, NodeId, NodeId, NodeId) -> bool) -> Program {
    let (consumers, materialize, _) = consumers(&p);
    let mut fused = Vec::new();
    for &u in &p.steps {
        let Step::MatMul { a, b, b2: None, epilogue: Some((expr, leaves)), prec, norm: None } = &p.nodes[u].step else {
            continue;
        };
        let second = leaves.iter().position(|&g| {
            let n = &p.nodes[g];
            matches!(n.step, Step::MatMul { a: ga, b2: None, epilogue: None, prec: gp, norm: None, .. } if ga == *a && gp == *prec)
                && n.dtype == p.nodes[u].dtype
                && n.layout.shape == p.nodes[u].layout.shape
                && consumers[g] == [u]
                && !materialize[g]
                && !reads_state(&p, g)
        });
        let Some(k) = second else { continue };
        let g = leaves[k];
        let Step::MatMul { b: gb, .. } = p.nodes[g].step else { unreachable!("checked above") };
        if !allowed(&p, *a, *b, gb) {
            continue;
        }
        // the second product keeps its dtype, as the host's does (an f16 matmul's sum rounds to f16 first)
        let acc2 = match p.nodes[g].dtype {
            DType::F16 => Expr::Node { op: ElemOp::Cast, args: vec![Expr::Acc2], dtype: DType::F16 },
            _ => Expr::Acc2,
        };
        let expr = expr.map_leaves(&mut |j| match j.cmp(&k) {
            std::cmp::Ordering::Equal => acc2.clone(),
            std::cmp::Ordering::Greater => Expr::Leaf(j - 1),
            std::cmp::Ordering::Less => Expr::Leaf(j),
        });
        let mut leaves = leaves.clone();
        leaves.remove(k);
        let step = Step::MatMul { a: *a, b: *b, b2: Some(gb), epilogue: Some((expr, leaves)), prec: *prec, norm: None };
        fused.push((u, g, step));
    }
    for (u, g, step) in fused {
        p.nodes[u].step = step;
        p.steps.retain(|&id| id != g);
    }
    p
}

/// Whether a backend norms a matmul's A on load: `(program, matmul, x, weight)` (`Target::norm_matmul`).
pub(crate) type NormAllowed<'a> = dyn Fn(&Program, NodeId, NodeId, Option<NodeId>) -> bool + 'a;

/// RMS norms into the matmul that reads them (llama.cpp's RMS_NORM + MUL before a mat-vec, in one kernel): a
/// matmul (or dual matmul) whose A is an f32 `rms_norm(x)` row step, bare or times a weight `[K]` (the norm's
/// epilogue `acc · w`), reads x and norms it on load ([`NormIn`]) when nothing else reads the norm (a view
/// counts), it is no output, its input x is f32, the weight's binding leaves the matmul within
/// [`MAX_EPILOGUE_LEAVES`] operands besides A and B, and the backend says it has the kernel (`allowed(program,
/// matmul, x, weight)`). The norm gets no memory and no kernel.
pub(crate) fn fuse_norm_prologues(mut p: Program, allowed: &NormAllowed) -> Program {
    let (consumers, materialize, _) = consumers(&p);
    let mut fused = Vec::new();
    for &u in &p.steps {
        let Step::MatMul { a, b2, norm: None, ref epilogue, .. } = p.nodes[u].step else { continue };
        // the weight is one more binding: the epilogue's operands, a dual's B2 and it within an epilogue's room
        let operands = epilogue.as_ref().map_or(0, |(_, s)| s.len()) + usize::from(b2.is_some());
        let n = &p.nodes[a];
        let Step::Row { op: RowOp::RmsNorm, x, mask: None, params, epilogue } = &n.step else { continue };
        let weight = match epilogue {
            None => None,
            Some((Expr::Node { op: ElemOp::Binary(BinaryOp::Mul), args, dtype: DType::F32 }, leaves))
                if leaves.len() == 1 && matches!(args[..], [Expr::Acc, Expr::Leaf(0)] | [Expr::Leaf(0), Expr::Acc]) =>
            {
                Some(leaves[0])
            }
            Some(_) => continue,
        };
        let k = *n.layout.shape.last().unwrap_or(&0);
        let weight_ok = weight.is_none_or(|w| p.nodes[w].layout.shape == [k] && operands < MAX_EPILOGUE_LEAVES);
        if n.dtype != DType::F32
            || p.nodes[*x].dtype != DType::F32
            || consumers[a] != [u]
            || materialize[a]
            || !weight_ok
            || !allowed(&p, u, *x, weight)
        {
            continue;
        }
        fused.push((u, a, *x, NormIn { eps: params.eps, weight }));
    }
    for (u, norm_node, x, n) in fused {
        if let Step::MatMul { a, norm, .. } = &mut p.nodes[u].step {
            (*a, *norm) = (x, Some(n));
        }
        p.steps.retain(|&id| id != norm_node);
    }
    p
}

/// Rope fused with the KV-cache write (llama.cpp's rope + set_rows): `set_rows(dst, idx, v)` where `v` is a
/// contiguous reshape (offset 0) of a rope `r` becomes one step writing the rotated rows straight into `dst`,
/// when nothing else reads `r` or `v` (a view counts as a reader), neither is an output, and `r` reads no state
/// (it now runs where the write was scheduled). `r` gets no memory and no kernel.
fn fuse_rope_set_rows(p: &mut Program) {
    let mut scheduled = vec![false; p.nodes.len()];
    p.steps.iter().for_each(|&s| scheduled[s] = true);
    let mut readers = vec![0usize; p.nodes.len()];
    for (id, node) in p.nodes.iter().enumerate() {
        if scheduled[id] || matches!(node.step, Step::Op(Op::View { .. })) {
            node.step.srcs().into_iter().for_each(|s| readers[s] += 1);
        }
    }
    let sole = |id: NodeId| readers[id] == 1 && !p.outputs.contains(&id);
    let mut fused = Vec::new();
    for &s in &p.steps {
        let Step::Op(Op::SetRows { dst, idx, src: v }) = p.nodes[s].step else { continue };
        let Step::Op(Op::View { src: r }) = p.nodes[v].step else { continue };
        let Step::Op(Op::Rope { x, pos, factors, rope }) = p.nodes[r].step else { continue };
        let (lv, lr) = (&p.nodes[v].layout, &p.nodes[r].layout);
        let reshape = lv.is_contiguous() && lv.offset == 0 && lv.numel() == lr.numel() && lr.is_contiguous();
        if reshape && sole(v) && sole(r) && p.nodes[r].storage == r && !reads_state(p, r) {
            let rope_dtype = p.nodes[r].dtype;
            fused.push((s, r, Step::RopeSetRows { dst, idx, x, pos, factors, rope, rope_dtype }));
        }
    }
    for (s, r, step) in fused {
        p.nodes[s].step = step;
        p.steps.retain(|&id| id != r);
    }
}

/// Whether the backend runs [`Step::RopeKvWrites`] over the storage nodes it would bind (output first).
pub(crate) type KvWritesAllowed<'a> = dyn Fn(&Program, &[NodeId]) -> bool + 'a;

/// Steps after a rope in which its layer's KV-cache writes are looked for.
const KV_WINDOW: usize = 8;

/// A layer's queries, keys and values in one step: a rope `q` (the queries') and the two KV-cache writes that
/// follow it within [`KV_WINDOW`] steps — a [`Step::RopeSetRows`] at the same positions with the same rope (the
/// keys) and a `set_rows` of the same indices (the values) into another state of as many rows — become one
/// [`Step::RopeKvWrites`] on `q`, scheduled at the latest of the three places where each may run
/// ([`placement`]); neither write may read a state or `q`. Needs the backend's kernel (`allowed`); the writes'
/// nodes are no longer scheduled.
pub(crate) fn fuse_rope_kv_writes(mut p: Program, allowed: &KvWritesAllowed) -> Program {
    let mut at = vec![None; p.nodes.len()];
    p.steps.iter().enumerate().for_each(|(j, &s)| at[s] = Some(j));
    let mut fused: Vec<(usize, [usize; 3], Step)> = Vec::new();
    for i in 0..p.steps.len() {
        if fused.last().is_some_and(|(_, moved, _)| moved.iter().any(|&j| j >= i)) {
            continue;
        }
        let Some((moved, written, step)) = kv_writes_after(&p, i) else { continue };
        let Some(place) = placement(&p, &at, moved, written) else { continue };
        if allowed(&p, &binding_storages(&p, p.steps[i], &step)) {
            fused.push((place, moved, step));
        }
    }
    let mut gone = vec![false; p.steps.len()];
    for (place, moved, step) in fused {
        let q = p.steps[moved[0]];
        p.nodes[q].step = step;
        moved.iter().for_each(|&j| gone[j] = true);
        gone[place] = false;
        p.steps[place] = q;
    }
    let mut keep = gone.iter().map(|g| !g);
    p.steps.retain(|_| keep.next().unwrap_or(true));
    p
}

/// The fused step for the rope at `p.steps[i]`, with the positions of the rope and the two writes it takes and
/// the storage each writes (see [`fuse_rope_kv_writes`]), if they are there.
fn kv_writes_after(p: &Program, i: usize) -> Option<([usize; 3], [NodeId; 3], Step)> {
    let q = p.steps[i];
    let Step::Op(Op::Rope { x, pos, factors, rope }) = p.nodes[q].step else { return None };
    if p.nodes[q].storage != q || reads_state(p, q) {
        return None;
    }
    let window = i + 1..p.steps.len().min(i + 1 + KV_WINDOW);
    let jk = window.clone().find(|&j| {
        matches!(p.nodes[p.steps[j]].step, Step::RopeSetRows { pos: kp, factors: kf, rope: kr, .. }
            if kp == pos && kf == factors && kr == rope)
    })?;
    let Step::RopeSetRows { dst: kd, idx, x: kx, rope_dtype, .. } = p.nodes[p.steps[jk]].step else { return None };
    let jv = window
        .clone()
        .find(|&j| matches!(p.nodes[p.steps[j]].step, Step::Op(Op::SetRows { idx: vi, .. }) if vi == idx))?;
    let Step::Op(Op::SetRows { dst: vd, src: vx, .. }) = p.nodes[p.steps[jv]].step else { return None };
    let st = |n: NodeId| p.nodes[n].storage;
    let (sk, sv) = (st(kd), st(vd));
    let rows = |d: NodeId| p.nodes[d].layout.shape.first().copied();
    if sk == sv || !p.is_state(sk) || !p.is_state(sv) || rows(kd) != rows(vd) {
        return None;
    }
    if [kx, vx, idx].into_iter().any(|n| p.is_state(st(n)) || st(n) == q) {
        return None;
    }
    let (k, v) = (RowsWrite { dst: kd, src: kx }, RowsWrite { dst: vd, src: vx });
    Some(([i, jk, jv], [q, sk, sv], Step::RopeKvWrites { x, pos, factors, rope, idx, k, k_rope_dtype: rope_dtype, v }))
}

/// Where the three steps at positions `moved`, writing storages `written`, may run as one: the latest of their
/// positions to which each can move — no other step between its place and there reads what it writes, and one
/// that moves earlier finds every operand computed (`at`: each scheduled node's position).
fn placement(p: &Program, at: &[Option<usize>], moved: [usize; 3], written: [NodeId; 3]) -> Option<usize> {
    let st = |n: NodeId| p.nodes[n].storage;
    let fits = |place: usize| {
        moved.iter().zip(written).all(|(&j, written)| {
            let step = &p.nodes[p.steps[j]].step;
            let between = (j.min(place) + 1..j.max(place)).filter(|b| !moved.contains(b));
            let clear = between.into_iter().all(|b| p.nodes[p.steps[b]].step.srcs().iter().all(|&s| st(s) != written));
            let ready = j <= place || step.srcs().iter().all(|&s| at[st(s)].is_none_or(|a| a < place));
            clear && ready
        })
    };
    moved.into_iter().filter(|&place| fits(place)).max()
}

/// The distinct storage nodes a [`Step::RopeKvWrites`] on `q` binds: its output, then its operands'.
fn binding_storages(p: &Program, q: NodeId, step: &Step) -> Vec<NodeId> {
    let mut out = vec![q];
    for s in step.srcs() {
        let s = p.nodes[s].storage;
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}
