//! The compiler's program (stage 2, compile pass 1): the graph reduced to what its outputs need, in the compiler's own step
//! vocabulary. Unary, binary, GLU and cast nodes become one-node elementwise expressions, which the fusion pass
//! merges; a matmul may carry an elementwise epilogue. Every backend lowers these steps.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::ExternalRef;
use crate::graph::{Graph, Tensor};
use crate::graph::{Node as GraphNode, NodeId, Op};
use crate::ops::{BinaryOp, GluOp, MatmulPrecision, Rope, RowOp, RowParams, UnaryOp};
use crate::shape::Layout;

/// One elementwise function in an expression tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ElemOp {
    /// A unary op with its f32 parameters as bits.
    Unary {
        op: UnaryOp,
        a: u32,
        b: u32,
    },
    Binary(BinaryOp),
    /// `act(arg0) · arg1`.
    Glu(GluOp),
    /// The identity: a copy, or a conversion to the node's dtype.
    Cast,
}

/// An elementwise expression tree over a step's operands. Values are f32 (i32 when every dtype is i32).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Expr {
    /// The k-th operand of the step, read through its own strides broadcast to the output's shape.
    Leaf(usize),
    /// A matmul's accumulated product (only in a matmul's epilogue).
    Acc,
    /// A dual matmul's second product, `a @ b2` (only in the epilogue of a matmul with `b2`).
    Acc2,
    /// `op(args)`; `dtype` is the dtype the graph gave this intermediate.
    Node { op: ElemOp, args: Vec<Expr>, dtype: DType },
}

impl Expr {
    /// Renders the expression: `leaf(k)` for operand k, `acc` for the accumulator, `node(op, dtype, args)` for
    /// each node with its arguments already rendered.
    pub(crate) fn render(
        &self,
        leaf: &dyn Fn(usize) -> String,
        node: &dyn Fn(ElemOp, DType, &[String]) -> String,
    ) -> String {
        match self {
            Expr::Leaf(k) => leaf(*k),
            Expr::Acc => "acc".into(),
            Expr::Acc2 => "acc2".into(),
            Expr::Node { op, args, dtype } => {
                let args: Vec<String> = args.iter().map(|a| a.render(leaf, node)).collect();
                node(*op, *dtype, &args)
            }
        }
    }

    /// The expression with every leaf `k` replaced by `f(k)`.
    pub(crate) fn map_leaves(&self, f: &mut dyn FnMut(usize) -> Expr) -> Expr {
        match self {
            Expr::Leaf(k) => f(*k),
            Expr::Acc => Expr::Acc,
            Expr::Acc2 => Expr::Acc2,
            Expr::Node { op, args, dtype } => {
                Expr::Node { op: *op, args: args.iter().map(|a| a.map_leaves(f)).collect(), dtype: *dtype }
            }
        }
    }
}

/// A matmul's A normed as it is loaded (llama.cpp's RMS_NORM + MUL ahead of a mat-vec, in one kernel): the rows
/// `x` multiply as `rms_norm(x, eps) · weight` (weight `[K]`, broadcast over the rows, where given). Computed as
/// `(Σ_k x·w·B) / √(mean(x²) + eps)`: the norm's scale is a row's one factor, applied to the sums.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct NormIn {
    pub eps: f32,
    pub weight: Option<NodeId>,
}

/// What one node of the program computes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Step {
    /// A graph op the compiler passes through as the graph recorded it: inputs, externals, views, the writes into
    /// states (`SetRows`, `CopyInto`), rope, attention, reductions, get_rows and concat. The other variants are
    /// what the compiler creates or changes.
    Op(Op),
    /// `x` (a storage format, row-major) decoded to the node's float dtype (a graph cast from a storage format).
    Dequantize { x: NodeId },
    /// `expr` over `srcs` (leaf k is `srcs[k]`), one value per output element.
    Elementwise { expr: Expr, srcs: Vec<NodeId> },
    /// `a @ b`, its product passed through `epilogue` (an expression over [`Expr::Acc`] and the extra operands)
    /// before the store. With `b2` (a dual matmul: a gated feed-forward's gate and up), `a @ b2` of the same
    /// shape too, [`Expr::Acc2`] in the epilogue.
    /// With `norm`, A is the input of an RMS norm that only this matmul reads: the product is that of the normed
    /// rows (see [`NormIn`]).
    MatMul {
        a: NodeId,
        b: NodeId,
        b2: Option<NodeId>,
        epilogue: Option<(Expr, Vec<NodeId>)>,
        prec: MatmulPrecision,
        norm: Option<NormIn>,
    },
    /// A row op over the last axis of `x` (its own layout); the mask broadcasts to x. Its values pass through
    /// `epilogue` (over [`Expr::Acc`] and the extra operands, as a matmul's) before the store: a norm's weight and
    /// bias, a residual add (ggml's fused RMS_NORM + MUL).
    Row { op: RowOp, x: NodeId, mask: Option<NodeId>, params: RowParams, epilogue: Option<(Expr, Vec<NodeId>)> },
    /// `set_rows(dst, idx, reshape(rope(x, pos)))`: the rotated rows written straight into `dst` (a KV cache),
    /// each value rounded to `rope_dtype` (the rope's own dtype) first, as the unfused plan stores it.
    RopeSetRows {
        dst: NodeId,
        idx: NodeId,
        x: NodeId,
        pos: NodeId,
        factors: Option<NodeId>,
        rope: Rope,
        rope_dtype: DType,
    },
    /// `rope(x, pos)` (this node's value, contiguous as the rope step stores it) and, in the same kernel, a
    /// layer's two KV-cache writes of rows `idx` that the compiler moved here from their own steps: the keys
    /// `k.dst[idx[r], :] = rope(k.src, pos)[r, :]` (rounded to `k_rope_dtype`, as [`Step::RopeSetRows`]) and the
    /// values `v.dst[idx[r], :] = v.src[r, :]`. A decode step's queries, keys and values in one dispatch.
    RopeKvWrites {
        x: NodeId,
        pos: NodeId,
        factors: Option<NodeId>,
        rope: Rope,
        idx: NodeId,
        k: RowsWrite,
        k_rope_dtype: DType,
        v: RowsWrite,
    },
}

/// One write moved into [`Step::RopeKvWrites`]: rows of `src` into the state `dst` (`[R, C]`). The write's own
/// node stays in the program, unscheduled (its storage is `dst`'s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RowsWrite {
    pub dst: NodeId,
    pub src: NodeId,
}

impl Step {
    /// Operand node ids, in order.
    pub(crate) fn srcs(&self) -> Vec<NodeId> {
        match self {
            Step::Op(op) => op.srcs(),
            Step::Dequantize { x } => vec![*x],
            Step::Elementwise { srcs, .. } => srcs.clone(),
            Step::MatMul { a, b, b2, epilogue, norm, .. } => [*a, *b]
                .into_iter()
                .chain(*b2)
                .chain(epilogue.iter().flat_map(|(_, s)| s.iter().copied()))
                .chain(norm.as_ref().and_then(|n| n.weight))
                .collect(),
            Step::Row { x, mask, epilogue, .. } => {
                std::iter::once(*x).chain(*mask).chain(epilogue.iter().flat_map(|(_, s)| s.iter().copied())).collect()
            }
            Step::RopeSetRows { dst, idx, x, pos, factors, .. } => {
                [*dst, *idx, *x, *pos].into_iter().chain(*factors).collect()
            }
            Step::RopeKvWrites { x, pos, factors, idx, k, v, .. } => {
                [*x, *pos].into_iter().chain(*factors).chain([*idx, k.dst, k.src, v.dst, v.src]).collect()
            }
        }
    }

    /// Short name, as in error messages and plan statistics.
    pub(crate) fn name(&self) -> String {
        match self {
            Step::Op(op) => op.name().into(),
            Step::Dequantize { .. } => "dequantize".into(),
            Step::Elementwise { expr: Expr::Node { op, args, .. }, .. }
                if args.iter().all(|a| matches!(a, Expr::Leaf(_))) =>
            {
                match op {
                    ElemOp::Unary { op, .. } => op.name().into(),
                    ElemOp::Binary(op) => op.name().into(),
                    ElemOp::Glu(op) => op.name().into(),
                    ElemOp::Cast => "cast".into(),
                }
            }
            Step::Elementwise { .. } => "fused".into(),
            Step::MatMul { b2, epilogue, norm, .. } => format!(
                "{}{}matmul{}",
                if norm.is_some() { "rms_norm+" } else { "" },
                if b2.is_some() { "dual_" } else { "" },
                if epilogue.is_some() { "+epilogue" } else { "" }
            ),
            Step::Row { op, epilogue: None, .. } => op.name().into(),
            Step::Row { op, .. } => format!("{}+epilogue", op.name()),
            Step::RopeSetRows { .. } => "rope+set_rows".into(),
            Step::RopeKvWrites { .. } => "rope+kv_writes".into(),
        }
    }
}

/// One node of the program: its step, dtype, layout over its storage, and the node that owns the storage.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub step: Step,
    pub dtype: DType,
    /// Where this tensor's elements sit inside the storage of `storage`, in elements.
    pub layout: Layout,
    /// The node that owns the memory: itself for inputs and computed nodes, the viewed node's owner for views.
    pub storage: NodeId,
}

/// A graph reduced to what its outputs need, in execution order.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    /// Every node of the graph (ids index this vector; nodes no output needs stay, unscheduled).
    pub nodes: Vec<Node>,
    /// Nodes that compute (neither inputs nor views), in a valid execution order.
    pub steps: Vec<NodeId>,
    /// Input nodes the outputs depend on, in declaration order.
    pub inputs: Vec<NodeId>,
    /// The requested outputs (possibly views), in the order given.
    pub outputs: Vec<NodeId>,
    /// The resident and state tensors of the graph (`Op::External` slots index this).
    pub externals: Vec<ExternalRef>,
}

/// The compiler's step for a graph op: elementwise ops become one-node expressions.
fn step_of(op: &Op, dtype: DType) -> Step {
    let node = |op: ElemOp, srcs: Vec<NodeId>| {
        let args = (0..srcs.len()).map(Expr::Leaf).collect();
        Step::Elementwise { expr: Expr::Node { op, args, dtype }, srcs }
    };
    match *op {
        Op::Unary { op, x, a, b } => node(ElemOp::Unary { op, a, b }, vec![x]),
        Op::Binary { op, a, b } => node(ElemOp::Binary(op), vec![a, b]),
        Op::Glu { op, a, b } => node(ElemOp::Glu(op), vec![a, b]),
        Op::Cast { x } => node(ElemOp::Cast, vec![x]),
        Op::MatMul { a, b, prec } => Step::MatMul { a, b, b2: None, epilogue: None, prec, norm: None },
        Op::Row { op, x, mask, scale, eps } => {
            Step::Row { op, x, mask, params: RowParams { scale, eps }, epilogue: None }
        }
        Op::Input { .. }
        | Op::External { .. }
        | Op::SetRows { .. }
        | Op::CopyInto { .. }
        | Op::Rope { .. }
        | Op::Attention { .. }
        | Op::View { .. }
        | Op::Reduce { .. }
        | Op::GetRows { .. }
        | Op::Concat { .. }
        | Op::TopK { .. }
        | Op::TakeAlongAxis { .. }
        | Op::MulMatId { .. }
        | Op::SsmConv { .. }
        | Op::GatedDeltaNet { .. } => Step::Op(op.clone()),
    }
}

impl Program {
    /// The dead-node pass and the translation into the IR: keeps what `outputs` depend on, in id order (node
    /// ids are already topological: an op only refers to earlier nodes).
    /// Writes into states are kept as well: they are effects the graph asked for.
    pub(crate) fn new(graph: &Graph, outputs: &[Tensor]) -> Result<Program> {
        let writes: Vec<NodeId> = (0..graph.nodes.len())
            .filter(|&i| matches!(graph.nodes[i].op, Op::SetRows { .. } | Op::CopyInto { .. }))
            .collect();
        if outputs.is_empty() && writes.is_empty() {
            return Err(Error::InvalidShape { op: "compile", shape: vec![], reason: "no outputs requested".into() });
        }
        let mut live = vec![false; graph.nodes.len()];
        let mut stack = writes;
        for &t in outputs {
            graph.node("compile", t)?;
            stack.push(t.id as usize);
        }
        while let Some(id) = stack.pop() {
            if !std::mem::replace(&mut live[id], true) {
                stack.extend(graph.nodes[id].op.srcs());
            }
        }
        let step = |n: &GraphNode| match n.op {
            // a cast from a storage format decodes blocks: a step of its own, never an elementwise expression
            Op::Cast { x } if graph.nodes[x].dtype.is_storage_format() => Step::Dequantize { x },
            ref op => step_of(op, n.dtype),
        };
        let nodes: Vec<Node> = graph
            .nodes
            .iter()
            .map(|n: &GraphNode| Node { step: step(n), dtype: n.dtype, layout: n.layout.clone(), storage: n.storage })
            .collect();
        let steps = (0..nodes.len())
            .filter(|&i| {
                live[i] && !matches!(nodes[i].step, Step::Op(Op::Input { .. } | Op::View { .. } | Op::External { .. }))
            })
            .collect();
        let inputs =
            (0..nodes.len()).filter(|&i| live[i] && matches!(nodes[i].step, Step::Op(Op::Input { .. }))).collect();
        let outputs = outputs.iter().map(|t| t.id as usize).collect();
        Ok(Program { nodes, steps, inputs, outputs, externals: graph.externals.clone() })
    }

    /// Size in bytes of the storage owned by `id` (an input or a step).
    /// True when step `id` has nothing to compute: its output or one of its operands has no elements.
    pub(crate) fn step_is_empty(&self, id: NodeId) -> bool {
        let empty = |n: NodeId| self.nodes[n].layout.shape.contains(&0);
        empty(id) || self.nodes[id].step.srcs().into_iter().any(empty)
    }

    pub(crate) fn storage_bytes(&self, id: NodeId) -> u64 {
        let n = &self.nodes[id];
        n.dtype.bytes_of(n.layout.numel()).map_or(u64::MAX, |b| b as u64)
    }

    /// The name of input node `id` (empty for other nodes).
    pub(crate) fn input_name(&self, id: NodeId) -> &str {
        match &self.nodes[id].step {
            Step::Op(Op::Input { name }) => name,
            _ => "",
        }
    }

    /// For each storage node, the index of the last step that reads it (`None` if no step reads it).
    pub(crate) fn last_reads(&self) -> Vec<Option<usize>> {
        let mut last = vec![None; self.nodes.len()];
        for (i, &s) in self.steps.iter().enumerate() {
            for src in self.nodes[s].step.srcs() {
                last[self.nodes[src].storage] = Some(i);
            }
        }
        last
    }

    /// The external tensor behind storage node `s`, if it is one.
    pub(crate) fn external(&self, s: NodeId) -> Option<&ExternalRef> {
        match self.nodes[s].step {
            Step::Op(Op::External { slot }) => Some(&self.externals[slot]),
            _ => None,
        }
    }

    /// The external tensors the scheduled steps and the outputs use.
    pub(crate) fn live_externals(&self) -> Vec<&ExternalRef> {
        let used = self.steps.iter().flat_map(|&s| self.nodes[s].step.srcs()).chain(self.outputs.iter().copied());
        let mut out: Vec<&ExternalRef> = Vec::new();
        for n in used {
            if let Some(r) = self.external(self.nodes[n].storage) {
                if !out.iter().any(|o| o.node == r.node) {
                    out.push(r);
                }
            }
        }
        out
    }

    /// Bytes of resident (read-only external) tensors the steps read per run: each step's view of each resident
    /// operand (once per step, however it broadcasts), for `get_rows` of a resident table only the rows it
    /// gathers, and for `mul_mat_id` only as many experts as it has ids (at most). A decode step of a language model reads each weight once at best: this against the weights'
    /// bytes is 1.0 then (a tied embedding: its rows plus the whole table in the head).
    pub(crate) fn resident_read_bytes(&self) -> u64 {
        let mut total = 0u64;
        for &s in &self.steps {
            for src in self.nodes[s].step.srcs() {
                let n = &self.nodes[src];
                if self.external(n.storage).is_none_or(|e| e.ext.writable) {
                    continue;
                }
                let numel = match self.nodes[s].step {
                    Step::Op(Op::GetRows { table, idx }) if table == src => {
                        self.nodes[idx].layout.numel() * n.layout.shape.last().copied().unwrap_or(1)
                    }
                    // the experts a step selects, at most one for each of its ids
                    Step::Op(Op::MulMatId { w, ids, .. }) if w == src => {
                        let experts = n.layout.shape[0].max(1);
                        experts.min(self.nodes[ids].layout.numel()) * (n.layout.numel() / experts)
                    }
                    _ => n.layout.numel(),
                };
                total += n.dtype.bytes_of(numel).unwrap_or(0) as u64;
            }
        }
        total
    }

    /// Bytes of the resident (read-only external) tensors the steps and outputs use, each counted once.
    pub(crate) fn resident_bytes(&self) -> u64 {
        self.live_externals().iter().filter(|r| !r.ext.writable).map(|r| r.ext.bytes()).sum()
    }

    /// Whether storage node `s` is a state (written by the graph's steps, read across runs).
    pub(crate) fn is_state(&self, s: NodeId) -> bool {
        self.external(s).is_some_and(|e| e.ext.writable)
    }

    /// The layout through which step `id` reads operand `src`, broadcast to the step's output shape.
    pub(crate) fn operand_layout(&self, src: NodeId, id: NodeId) -> Layout {
        self.nodes[src].layout.broadcast_operand(&self.nodes[id].layout.shape)
    }
}
