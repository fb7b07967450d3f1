//! What a graph node computes: only what users build. The compiler's own step type (fused expressions, matmuls
//! with epilogues) lives in `compile::ir`.

use crate::ops::{BinaryOp, GluOp, MatmulPrecision, ReduceOp, RowOp, UnaryOp};

/// Index of a node in its graph's arena.
pub(crate) type NodeId = usize;

/// One recorded operation. Operands are node ids; their layouts are read from the operand nodes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Op {
    /// A tensor whose values are given at each run.
    Input {
        name: String,
    },
    /// A resident or state tensor: `slot` indexes the graph's externals.
    External {
        slot: usize,
    },
    /// Row `i` of `src` written to row `idx[i]` of `dst` (a state, or a view of one); the node aliases `dst`.
    SetRows {
        dst: NodeId,
        idx: NodeId,
        src: NodeId,
    },
    /// `src` (broadcast) written into `dst` (a view of a state); the node aliases `dst`.
    CopyInto {
        dst: NodeId,
        src: NodeId,
    },
    /// Rotary position embedding of `x` at positions `pos`, each pair's angle divided by its frequency factor.
    Rope {
        x: NodeId,
        pos: NodeId,
        factors: Option<NodeId>,
        rope: crate::ops::Rope,
    },
    /// Flash attention (see `Graph::attention`).
    Attention {
        q: NodeId,
        k: NodeId,
        v: NodeId,
        mask: Option<NodeId>,
        kv_len: Option<NodeId>,
        /// f32 `[H]`: a logit per query head in each softmax's denominator (attention sinks).
        sinks: Option<NodeId>,
        scale: f32,
        causal: bool,
    },
    /// A view: same storage as `src`, a different layout.
    View {
        src: NodeId,
    },
    /// `op(x)` with f32 parameters `a`, `b` stored as bits.
    Unary {
        op: UnaryOp,
        x: NodeId,
        a: u32,
        b: u32,
    },
    Binary {
        op: BinaryOp,
        a: NodeId,
        b: NodeId,
    },
    /// `act(a) · b`, the split form of a GLU.
    Glu {
        op: GluOp,
        a: NodeId,
        b: NodeId,
    },
    /// A contiguous copy, converted to the node's dtype.
    Cast {
        x: NodeId,
    },
    MatMul {
        a: NodeId,
        b: NodeId,
        prec: MatmulPrecision,
    },
    /// A row op over the last axis; `mask` and `scale` are softmax's, `eps` the norms'.
    Row {
        op: RowOp,
        x: NodeId,
        mask: Option<NodeId>,
        scale: f32,
        eps: f32,
    },
    Reduce {
        op: ReduceOp,
        x: NodeId,
    },
    GetRows {
        table: NodeId,
        idx: NodeId,
    },
    Concat {
        a: NodeId,
        b: NodeId,
        axis: usize,
    },
    /// The indices of the `k` largest entries of each last-axis row of `x`, largest first.
    TopK {
        x: NodeId,
        k: usize,
    },
    /// `x`'s entries picked by `idx` along the last axis.
    TakeAlongAxis {
        x: NodeId,
        idx: NodeId,
    },
    /// `a`'s rows times the experts of `w` that `ids` selects.
    MulMatId {
        a: NodeId,
        w: NodeId,
        ids: NodeId,
    },
    /// The causal depthwise conv of `x` (its carried rows first) by `w`.
    SsmConv {
        x: NodeId,
        w: NodeId,
    },
    /// The gated delta rule: the output of every token, then the new state, flat.
    GatedDeltaNet {
        q: NodeId,
        k: NodeId,
        v: NodeId,
        g: NodeId,
        beta: NodeId,
        state: NodeId,
        scale: f32,
    },
}

impl Op {
    /// The op's name, as in error messages and plan statistics (the table's name for the table ops).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::External { .. } => "external",
            Op::SetRows { .. } => "set_rows",
            Op::CopyInto { .. } => "copy_into",
            Op::Rope { .. } => "rope",
            Op::Attention { .. } => "attention",
            Op::View { .. } => "view",
            Op::Unary { op, .. } => op.name(),
            Op::Binary { op, .. } => op.name(),
            Op::Glu { op, .. } => op.name(),
            Op::Cast { .. } => "cast",
            Op::MatMul { .. } => "matmul",
            Op::Row { op, .. } => op.name(),
            Op::Reduce { op, .. } => op.name(),
            Op::GetRows { .. } => "get_rows",
            Op::Concat { .. } => "concat",
            Op::TopK { .. } => "top_k",
            Op::TakeAlongAxis { .. } => "take_along_axis",
            Op::MulMatId { .. } => "mul_mat_id",
            Op::SsmConv { .. } => "ssm_conv",
            Op::GatedDeltaNet { .. } => "gated_delta_net",
        }
    }

    /// Operand node ids, in order.
    pub(crate) fn srcs(&self) -> Vec<NodeId> {
        match *self {
            Op::Input { .. } | Op::External { .. } => vec![],
            Op::SetRows { dst, idx, src } => vec![dst, idx, src],
            Op::CopyInto { dst, src } => vec![dst, src],
            Op::Rope { x, pos, factors, .. } => [x, pos].into_iter().chain(factors).collect(),
            Op::Attention { q, k, v, mask, kv_len, sinks, .. } => {
                [q, k, v].into_iter().chain(mask).chain(kv_len).chain(sinks).collect()
            }
            Op::View { src } => vec![src],
            Op::Unary { x, .. } | Op::Cast { x } | Op::Reduce { x, .. } => vec![x],
            Op::Binary { a, b, .. } | Op::Glu { a, b, .. } | Op::MatMul { a, b, .. } | Op::Concat { a, b, .. } => {
                vec![a, b]
            }
            Op::Row { x, mask, .. } => std::iter::once(x).chain(mask).collect(),
            Op::GetRows { table, idx } => vec![table, idx],
            Op::TopK { x, .. } => vec![x],
            Op::TakeAlongAxis { x, idx } => vec![x, idx],
            Op::MulMatId { a, w, ids } => vec![a, w, ids],
            Op::SsmConv { x, w } => vec![x, w],
            Op::GatedDeltaNet { q, k, v, g, beta, state, .. } => vec![q, k, v, g, beta, state],
        }
    }
}
