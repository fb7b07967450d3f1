//! In-place selection (stage 2, compile pass 3): which operands a step may write its output over.

use super::ir::{Program, Step};
use crate::graph::NodeId;
use crate::shape::Layout;

/// Storage nodes that step `id` may write over in place: operands it reads at exactly the index it writes
/// (same shape, contiguous, offset 0, same dtype and byte size), and that no other operand of the step reads
/// through another layout. Matmuls never write in place (their vec4 output binding could not serve a scalar
/// operand). Whether one is free to take (read for the last time here, not an input or output) is the memory
/// planner's decision; `allowed` lets a backend veto a storage node.
pub(crate) fn candidates(p: &Program, id: NodeId, allowed: &dyn Fn(NodeId) -> bool) -> Vec<NodeId> {
    let node = &p.nodes[id];
    let same_index = |s: NodeId| {
        let l: &Layout = &p.nodes[s].layout;
        l.shape == node.layout.shape
            && l.is_contiguous()
            && l.offset == 0
            && p.nodes[s].dtype == node.dtype
            && p.storage_bytes(p.nodes[s].storage) == p.storage_bytes(id)
    };
    let (candidates, excluded): (Vec<NodeId>, Vec<NodeId>) = match &node.step {
        Step::Elementwise { srcs, .. } => (srcs.clone(), vec![]),
        Step::Row { x, mask, .. } => (vec![*x], mask.iter().copied().collect()),
        _ => (vec![], vec![]),
    };
    let reads: Vec<NodeId> = node.step.srcs();
    let mut out = Vec::new();
    for c in candidates {
        let st = p.nodes[c].storage;
        let clash = excluded.iter().any(|&e| p.nodes[e].storage == st)
            || reads.iter().any(|&r| p.nodes[r].storage == st && p.nodes[r].layout != p.nodes[c].layout);
        if same_index(c) && !clash && !out.contains(&st) && allowed(st) {
            out.push(st);
        }
    }
    out
}
