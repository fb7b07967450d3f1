//! Rope fused with the KV-cache write (llama.cpp's rope + set_rows): `set_rows(dst, idx, v)` where `v` is a
//! contiguous reshape (offset 0) of a rope `r` becomes one step writing the rotated rows straight into `dst`,
//! when nothing else reads `r` or `v` (a view counts as a reader), neither is an output, `r` reads no state (it
//! now runs where the write was scheduled), and the backend lowers the fused step. `r` gets no memory and no
//! kernel.

use super::rewrite::{reads_state, try_step, Lowers, Rule};
use crate::compile::ir::{Program, Step};
use crate::graph::{NodeId, Op};

pub(super) const RULE: Rule = Rule { name: "rope_set_rows", apply };

fn apply(mut p: Program, lowers: &Lowers) -> Program {
    let mut scheduled = vec![false; p.nodes.len()];
    p.steps.iter().for_each(|&s| scheduled[s] = true);
    let mut readers = vec![0usize; p.nodes.len()];
    for (id, node) in p.nodes.iter().enumerate() {
        if scheduled[id] || matches!(node.step, Step::Op(Op::View { .. })) {
            node.step.srcs().into_iter().for_each(|s| readers[s] += 1);
        }
    }
    let sole = |p: &Program, id: NodeId| readers[id] == 1 && !p.outputs.contains(&id);
    let mut gone = Vec::new();
    for s in p.steps.clone() {
        let Step::Op(Op::SetRows { dst, idx, src: v }) = p.nodes[s].step else { continue };
        let Step::Op(Op::View { src: r }) = p.nodes[v].step else { continue };
        let Step::Op(Op::Rope { x, pos, factors, rope }) = p.nodes[r].step else { continue };
        let (lv, lr) = (&p.nodes[v].layout, &p.nodes[r].layout);
        let reshape = lv.is_contiguous() && lv.offset == 0 && lv.numel() == lr.numel() && lr.is_contiguous();
        if reshape && sole(&p, v) && sole(&p, r) && p.nodes[r].storage == r && !reads_state(&p, r) {
            let rope_dtype = p.nodes[r].dtype;
            let step = Step::RopeSetRows { dst, idx, x, pos, factors, rope, rope_dtype };
            if try_step(&mut p, s, step, lowers) {
                gone.push(r);
            }
        }
    }
    p.steps.retain(|id| !gone.contains(id));
    p
}
