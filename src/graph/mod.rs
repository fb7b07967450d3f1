//! Graph building (stage 1): an arena of nodes, `Tensor` handles into it, views as layouts over storage.
//!
//! Op constructors live in one file per op family ([`views`], [`elementwise`], [`linalg`], [`rows`], [`gather`]);
//! each validates its operands, records one node and returns its handle (ggml's `ggml_add` pattern, with
//! `Result`). Every constructor fails with [`Error::ForeignTensor`] for a handle of another graph, in addition to
//! the errors it lists. Shapes are numpy order; "last axis" is the innermost.

mod attention;
mod elementwise;
mod experts;
mod gather;
mod handle;
mod linalg;
mod op;
mod recurrent;
mod rows;
mod state;
mod views;

pub use handle::{Attention, Tensor};
pub(crate) use op::{NodeId, Op};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::resident::External;
use crate::shape::{check_shape, Layout};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

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
    /// The resident and state tensors the graph uses (their handles keep the memory alive).
    pub(crate) externals: Vec<ExternalRef>,
}

impl Default for Graph {
    fn default() -> Self {
        Self::new()
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph { id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed), nodes: Vec::new(), externals: Vec::new() }
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

    /// Node id, dtype and shape of `t`, checked to belong to this graph.
    pub(crate) fn info(&self, op: &'static str, t: Tensor) -> Result<(NodeId, DType, Vec<usize>)> {
        let n = self.node(op, t)?;
        Ok((t.id as usize, n.dtype, n.layout.shape.clone()))
    }

    /// As [`Graph::info`], failing with [`Error::UnsupportedDType`] unless `t` is f32 or f16.
    pub(crate) fn require_float(&self, op: &'static str, t: Tensor) -> Result<(NodeId, DType, Vec<usize>)> {
        let (id, dtype, shape) = self.info(op, t)?;
        if !dtype.is_float() {
            return Err(Error::UnsupportedDType { op, dtype, shape, reason: "needs f32 or f16".into() });
        }
        Ok((id, dtype, shape))
    }

    /// Declares a graph input: a tensor whose values are given at each run.
    ///
    /// # Errors
    /// [`Error::InvalidShape`] for rank over 4 or more than 2³² elements (rank 0 is a scalar, a dim of 0 an empty
    /// tensor: steps on empty tensors run no kernel); [`Error::BadInput`] for a duplicate name.
    pub fn input(&mut self, name: &str, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        check_shape("input", shape)?;
        if self.find_input(name).is_some() {
            return Err(Error::BadInput { name: name.into(), reason: "declared twice".into() });
        }
        self.push(Op::Input { name: name.into() }, dtype, shape)
    }
}

/// A graph's reference to an external tensor: the handle (which keeps the memory alive) and the node it became.
#[derive(Clone)]
pub(crate) struct ExternalRef {
    pub ext: Arc<External>,
    pub node: NodeId,
}

impl std::fmt::Debug for ExternalRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ExternalRef({} -> #{})", self.ext.name, self.node)
    }
}
