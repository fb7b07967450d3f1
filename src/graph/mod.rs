//! Graph building (stage 1): an arena of nodes, `Tensor` handles into it, views as layouts over storage.
//!
//! Op constructors live in [`ops`]; each validates its operands, records one node and returns its handle.

mod ops;
pub(crate) use ops::operand_layout;

use crate::shape::{check_shape, Layout};
use crate::{DType, Error, Result};
use std::sync::atomic::{AtomicU32, Ordering};

/// Index of a node in its graph's arena.
pub(crate) type NodeId = usize;

/// A handle to a tensor of a [`Graph`]: a node id plus the id of the graph that made it. Cheap to copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tensor {
    pub(crate) id: u32,
    pub(crate) graph: u32,
}

impl Tensor {
    /// Position of the node in its graph, in creation order.
    pub fn index(self) -> usize {
        self.id as usize
    }
}

/// Elementwise functions of one operand. Each matches the PyTorch function of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `x * s`; the f32 scale is stored as its bits so the op can be hashed.
    Scale(u32),
    Neg,
    Abs,
    Sqr,
    Sqrt,
    Exp,
    Log,
    Tanh,
    Relu,
    /// GELU, tanh approximation (`torch.nn.functional.gelu(x, approximate="tanh")`, ggml_gelu).
    Gelu,
    /// GELU, exact erf form (`torch.nn.functional.gelu(x)`, ggml_gelu_erf).
    GeluErf,
    Silu,
    Sigmoid,
    /// Identity: a contiguous copy, or a cast when the output dtype differs.
    Copy,
}

/// Elementwise functions of two operands with numpy broadcasting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// Reductions over the last axis, keeping it as size 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    /// Index of the first maximum, as i32.
    ArgMax,
}

/// What a node computes. Operands are node ids; their layouts are read from the operand nodes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Op {
    Input {
        name: String,
    },
    /// A view: same storage as `src`, a different layout.
    View {
        src: NodeId,
    },
    Unary {
        op: UnaryOp,
        x: NodeId,
    },
    Binary {
        op: BinaryOp,
        a: NodeId,
        b: NodeId,
    },
    MatMul {
        a: NodeId,
        b: NodeId,
    },
    Softmax {
        x: NodeId,
        mask: Option<NodeId>,
        scale: f32,
    },
    RmsNorm {
        x: NodeId,
        eps: f32,
    },
    LayerNorm {
        x: NodeId,
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
    /// Made by the fusion pass, never by the graph API: an elementwise expression over `srcs`.
    Fused {
        expr: crate::compile::fuse::Expr,
        srcs: Vec<NodeId>,
    },
    /// Made by the fusion pass: a matmul whose product passes through `expr` (its `Acc`) before the store.
    MatMulFused {
        a: NodeId,
        b: NodeId,
        expr: crate::compile::fuse::Expr,
        srcs: Vec<NodeId>,
    },
}

impl Op {
    /// Operand node ids, in order.
    pub(crate) fn srcs(&self) -> Vec<NodeId> {
        match *self {
            Op::Input { .. } => vec![],
            Op::View { src } => vec![src],
            Op::Unary { x, .. } | Op::RmsNorm { x, .. } | Op::LayerNorm { x, .. } | Op::Reduce { x, .. } => vec![x],
            Op::Binary { a, b, .. } | Op::MatMul { a, b } | Op::Concat { a, b, .. } => vec![a, b],
            Op::Softmax { x, mask, .. } => std::iter::once(x).chain(mask).collect(),
            Op::GetRows { table, idx } => vec![table, idx],
            Op::Fused { ref srcs, .. } => srcs.clone(),
            Op::MatMulFused { a, b, ref srcs, .. } => [a, b].into_iter().chain(srcs.iter().copied()).collect(),
        }
    }

    /// Short name of the op, as in error messages and plan statistics.
    pub(crate) fn name(&self) -> String {
        match self {
            Op::Input { .. } => "input".into(),
            Op::View { .. } => "view".into(),
            Op::Unary { op, .. } => format!("{op:?}").to_lowercase(),
            Op::Binary { op, .. } => format!("{op:?}").to_lowercase(),
            Op::MatMul { .. } => "matmul".into(),
            Op::Softmax { .. } => "softmax".into(),
            Op::RmsNorm { .. } => "rms_norm".into(),
            Op::LayerNorm { .. } => "layer_norm".into(),
            Op::Reduce { op, .. } => format!("{op:?}").to_lowercase(),
            Op::GetRows { .. } => "get_rows".into(),
            Op::Concat { .. } => "concat".into(),
            Op::Fused { .. } => "fused".into(),
            Op::MatMulFused { .. } => "matmul+epilogue".into(),
        }
    }
}

/// One recorded operation and the tensor it produces.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub op: Op,
    pub dtype: DType,
    /// Where this tensor's elements sit inside the storage of `storage`.
    pub layout: Layout,
    /// The node that owns the memory: itself for inputs and computed nodes, the viewed node's owner for views.
    pub storage: NodeId,
}

static NEXT_GRAPH_ID: AtomicU32 = AtomicU32::new(1);

/// A tensor graph: define it once, [compile](crate::Device::compile) it for a device, run it many times.
///
/// ```
/// use webtensor::{Graph, DType};
/// let mut g = Graph::new();
/// let x = g.input("x", DType::F32, &[2, 3])?;
/// let w = g.input("w", DType::F32, &[4, 3])?;
/// let wt = g.t(w)?;             // [3, 4] view, no copy
/// let y = g.matmul(x, wt)?;     // [2, 4]
/// let y = g.relu(y)?;
/// assert_eq!(g.shape(y)?, &[2, 4]);
/// # Ok::<(), webtensor::Error>(())
/// ```
#[derive(Debug)]
pub struct Graph {
    pub(crate) id: u32,
    pub(crate) nodes: Vec<Node>,
}

impl Default for Graph {
    fn default() -> Self {
        Self::new()
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph { id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed), nodes: Vec::new() }
    }

    /// Number of nodes recorded so far (views included).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when no node has been recorded.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node behind `t`, or [`Error::ForeignTensor`] when `t` comes from another graph.
    pub(crate) fn node(&self, op: &'static str, t: Tensor) -> Result<&Node> {
        if t.graph != self.id || t.id as usize >= self.nodes.len() {
            return Err(Error::ForeignTensor { op, id: t.id as usize });
        }
        Ok(&self.nodes[t.id as usize])
    }

    pub(crate) fn handle(&self, id: NodeId) -> Tensor {
        Tensor { id: id as u32, graph: self.id }
    }

    /// Shape of `t`, numpy order, in elements.
    pub fn shape(&self, t: Tensor) -> Result<&[usize]> {
        Ok(&self.node("shape", t)?.layout.shape)
    }

    /// Element type of `t`.
    pub fn dtype(&self, t: Tensor) -> Result<DType> {
        Ok(self.node("dtype", t)?.dtype)
    }

    /// Name of the input `t`, or `None` when `t` is not an input.
    pub fn input_name(&self, t: Tensor) -> Option<&str> {
        match &self.node("input_name", t).ok()?.op {
            Op::Input { name } => Some(name),
            _ => None,
        }
    }

    /// The input named `name`, if one was declared.
    pub fn find_input(&self, name: &str) -> Option<Tensor> {
        self.nodes.iter().position(|n| matches!(&n.op, Op::Input { name: nm } if nm == name)).map(|id| self.handle(id))
    }

    /// All inputs, in declaration order.
    pub fn inputs(&self) -> Vec<Tensor> {
        (0..self.nodes.len())
            .filter(|&i| matches!(self.nodes[i].op, Op::Input { .. }))
            .map(|i| self.handle(i))
            .collect()
    }

    /// Records a node that owns its storage (contiguous output) and returns its handle.
    pub(crate) fn push(&mut self, op: Op, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        check_shape("graph", shape)?;
        let id = self.nodes.len();
        self.nodes.push(Node { op, dtype, layout: Layout::contiguous(shape), storage: id });
        Ok(self.handle(id))
    }

    /// Records a view of `src` with `layout` over `src`'s storage.
    pub(crate) fn push_view(&mut self, src: NodeId, layout: Layout) -> Tensor {
        let id = self.nodes.len();
        let (dtype, storage) = (self.nodes[src].dtype, self.nodes[src].storage);
        self.nodes.push(Node { op: Op::View { src }, dtype, layout, storage });
        self.handle(id)
    }

    /// Declares a graph input: a tensor whose values are given at each run.
    ///
    /// # Errors
    /// [`Error::InvalidShape`] for rank outside 1..=4 or a zero dim; [`Error::BadInput`] for a duplicate name.
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        check_shape("input", shape)?;
        if self.find_input(name).is_some() {
            return Err(Error::BadInput { name: name.into(), reason: "declared twice".into() });
        }
        self.push(Op::Input { name: name.into() }, dtype, shape)
    }
}
