//! Compiling (stage 2): dead-node removal and a topological schedule of the nodes that compute something.
//!
//! The result, a [`Program`], is what every backend turns into an executable plan. The memory plan
//! ([`memory`]) is computed from it.

pub(crate) mod fuse;
pub(crate) mod memory;

use crate::graph::{Node, NodeId, Op};
use crate::{Error, Graph, Result, Tensor};

/// A graph reduced to what its outputs need, in execution order.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    /// The graph's nodes (all of them; ids index this vector).
    pub nodes: Vec<Node>,
    /// Nodes that compute (neither inputs nor views), in a valid execution order.
    pub steps: Vec<NodeId>,
    /// Input nodes the outputs depend on, in declaration order.
    pub inputs: Vec<NodeId>,
    /// The requested outputs (possibly views), in the order given.
    pub outputs: Vec<NodeId>,
}

impl Program {
    /// Removes nodes that no output depends on and orders the rest. Node ids are already topological (an op
    /// only refers to earlier nodes), so the schedule is the live compute nodes in id order.
    pub fn new(graph: &Graph, outputs: &[Tensor]) -> Result<Program> {
        if outputs.is_empty() {
            return Err(Error::InvalidShape { op: "compile", shape: vec![], reason: "no outputs requested".into() });
        }
        let mut live = vec![false; graph.nodes.len()];
        let mut stack = Vec::new();
        for &t in outputs {
            graph.node("compile", t)?;
            stack.push(t.id as usize);
        }
        while let Some(id) = stack.pop() {
            if !std::mem::replace(&mut live[id], true) {
                stack.extend(graph.nodes[id].op.srcs());
            }
        }
        let nodes = graph.nodes.clone();
        let steps = (0..nodes.len())
            .filter(|&i| live[i] && !matches!(nodes[i].op, Op::Input { .. } | Op::View { .. }))
            .collect();
        let inputs = (0..nodes.len()).filter(|&i| live[i] && matches!(nodes[i].op, Op::Input { .. })).collect();
        Ok(Program { nodes, steps, inputs, outputs: outputs.iter().map(|t| t.id as usize).collect() })
    }

    /// Size in bytes of the storage owned by `id` (an input or a step).
    pub fn storage_bytes(&self, id: NodeId) -> u64 {
        let n = &self.nodes[id];
        n.layout.numel() as u64 * n.dtype.size_bytes() as u64
    }

    /// The name of input node `id`.
    pub fn input_name(&self, id: NodeId) -> &str {
        match &self.nodes[id].op {
            Op::Input { name } => name,
            _ => unreachable!("input_name on a non-input"),
        }
    }

    /// For each storage node, the index of the last step that reads it (`None` if no step reads it).
    pub fn last_reads(&self) -> Vec<Option<usize>> {
        let mut last = vec![None; self.nodes.len()];
        for (i, &s) in self.steps.iter().enumerate() {
            for src in self.nodes[s].op.srcs() {
                last[self.nodes[src].storage] = Some(i);
            }
        }
        last
    }
}
