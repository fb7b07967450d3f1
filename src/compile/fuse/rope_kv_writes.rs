//! A layer's queries, keys and values in one step: a rope `q` (the queries') and the two KV-cache writes that
//! follow it within [`KV_WINDOW`] steps become one [`Step::RopeKvWrites`] (see [`apply`]).

use super::rewrite::{reads_state, Lowers, Rule};
use crate::compile::ir::{Program, RowsWrite, Step};
use crate::graph::{NodeId, Op};

pub(super) const RULE: Rule = Rule { name: "rope_kv_writes", apply };

/// Whether the backend lowers step `id` as `step`; the program is left as it was.
fn lowers_as(p: &mut Program, id: NodeId, step: Step, lowers: &Lowers) -> bool {
    let old = std::mem::replace(&mut p.nodes[id].step, step);
    let ok = lowers(p, id);
    p.nodes[id].step = old;
    ok
}

/// Steps after a rope in which its layer's KV-cache writes are looked for.
const KV_WINDOW: usize = 8;

/// A layer's queries, keys and values in one step: a rope `q` (the queries') and the two KV-cache writes that
/// follow it within [`KV_WINDOW`] steps — a [`Step::RopeSetRows`] at the same positions with the same rope (the
/// keys) and a `set_rows` of the same indices (the values) into another state of as many rows — become one
/// [`Step::RopeKvWrites`] on `q`, scheduled at the latest of the three places where each may run
/// ([`placement`]); neither write may read a state or `q`. Needs the backend to lower the fused step; the writes'
/// nodes are no longer scheduled.
fn apply(mut p: Program, lowers: &Lowers) -> Program {
    let mut at = vec![None; p.nodes.len()];
    p.steps.iter().enumerate().for_each(|(j, &s)| at[s] = Some(j));
    let mut fused: Vec<(usize, [usize; 3], Step)> = Vec::new();
    for i in 0..p.steps.len() {
        if fused.last().is_some_and(|(_, moved, _)| moved.iter().any(|&j| j >= i)) {
            continue;
        }
        let Some((moved, written, step)) = kv_writes_after(&p, i) else { continue };
        let Some(place) = placement(&p, &at, moved, written) else { continue };
        // asked, then put back: the later candidates are found in the program as it was
        let q = p.steps[i];
        if lowers_as(&mut p, q, step.clone(), lowers) {
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
