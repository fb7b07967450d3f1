//! Memory planning (stage 2, compile pass 4): place every tensor's storage in arenas, reusing memory after its last reader.
//!
//! Rules, after ggml-alloc: inputs are placed first and never share memory; outputs are never freed; a
//! computed tensor's block is freed right after the last step that reads it; a new block takes the best-fitting
//! free block, else grows the arena; adjacent free blocks merge. A step's output is placed before its operands
//! are freed, so an op never writes over what it reads.

use super::ir::Program;
use crate::error::{Error, Result};
use crate::graph::NodeId;
use std::collections::HashMap;

/// Where one tensor's storage lives: arena index and byte offset, and its size in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    pub arena: usize,
    /// Byte offset in the arena, a multiple of the plan's alignment.
    pub offset: u64,
    /// Bytes used by the tensor (not rounded).
    pub size: u64,
}

/// The placement of every storage node of a program.
#[derive(Clone, Debug, Default)]
pub(crate) struct MemoryPlan {
    pub blocks: HashMap<NodeId, Block>,
    /// Size in bytes of each arena. Blocks with `arena >= arena_bytes.len()` are external tensors: block
    /// `arena_bytes.len() + k` is the whole of `externals[k]`.
    pub arena_bytes: Vec<u64>,
    /// The storage nodes of the program's resident and state tensors, in order.
    pub externals: Vec<NodeId>,
    /// Largest sum of live tensor sizes (rounded to the alignment) at any step, in bytes.
    pub peak_live_bytes: u64,
}

impl MemoryPlan {
    /// Total bytes of all arenas.
    /// Bytes of the plan's own arenas (resident and state tensors are not the plan's).
    pub(crate) fn total_bytes(&self) -> u64 {
        self.arena_bytes.iter().sum()
    }
}

#[derive(Default)]
struct Arena {
    /// Free ranges (offset, size), sorted by offset.
    free: Vec<(u64, u64)>,
    end: u64,
}

impl Arena {
    fn release(&mut self, offset: u64, size: u64) {
        let pos = self.free.partition_point(|&(o, _)| o < offset);
        self.free.insert(pos, (offset, size));
        if pos + 1 < self.free.len() && self.free[pos].0 + self.free[pos].1 == self.free[pos + 1].0 {
            self.free[pos].1 += self.free.remove(pos + 1).1;
        }
        if pos > 0 && self.free[pos - 1].0 + self.free[pos - 1].1 == self.free[pos].0 {
            self.free[pos - 1].1 += self.free.remove(pos).1;
        }
        if let Some(&(o, s)) = self.free.last() {
            if o + s == self.end {
                self.end = o;
                self.free.pop();
            }
        }
    }
}

/// What a backend's memory looks like to the planner, in bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemoryLimits {
    /// Every block starts at a multiple of this.
    pub align: u64,
    /// Largest arena (a device's max buffer size).
    pub max_arena: u64,
    /// Largest tensor (tensors larger than one binding are split later, at dispatch).
    pub max_tensor: u64,
    /// Whether inputs get blocks (the GPU uploads them there); otherwise they stay in the caller's memory.
    pub place_inputs: bool,
}

/// The planner's state while it walks the schedule.
struct Planner<'a> {
    program: &'a Program,
    limits: MemoryLimits,
    arenas: Vec<Arena>,
    out: MemoryPlan,
    live_bytes: u64,
}

impl Planner<'_> {
    fn round(&self, n: u64) -> u64 {
        n.max(4).div_ceil(self.limits.align) * self.limits.align
    }

    /// Places storage node `id`: the best-fitting free block of any arena, else the end of the first arena with
    /// room, else a new arena.
    fn alloc(&mut self, id: NodeId) -> Result<()> {
        let size = self.program.storage_bytes(id);
        let node = &self.program.nodes[id];
        if size > self.limits.max_tensor {
            return Err(Error::LimitExceeded {
                what: format!("tensor #{id} ({} {:?})", node.dtype, node.layout.shape),
                size,
                unit: "bytes",
                limit_name: "max_buffer_size",
                limit: self.limits.max_tensor,
            });
        }
        let need = self.round(size);
        let mut best: Option<(usize, usize, u64)> = None;
        for (a, arena) in self.arenas.iter().enumerate() {
            for (f, &(_, fsize)) in arena.free.iter().enumerate() {
                if fsize >= need && best.is_none_or(|(_, _, b)| fsize < b) {
                    best = Some((a, f, fsize));
                }
            }
        }
        let (arena, offset) = match best {
            Some((a, f, _)) => {
                let (o, s) = self.arenas[a].free[f];
                if s == need {
                    self.arenas[a].free.remove(f);
                } else {
                    self.arenas[a].free[f] = (o + need, s - need);
                }
                (a, o)
            }
            None => {
                let max_arena = self.limits.max_arena;
                let a = match self.arenas.iter().position(|ar| ar.end + need <= max_arena) {
                    Some(a) => a,
                    None => {
                        self.arenas.push(Arena::default());
                        self.arenas.len() - 1
                    }
                };
                let o = self.arenas[a].end;
                self.arenas[a].end += need;
                (a, o)
            }
        };
        self.live_bytes += need;
        self.out.peak_live_bytes = self.out.peak_live_bytes.max(self.live_bytes);
        self.out.blocks.insert(id, Block { arena, offset, size });
        Ok(())
    }

    fn free(&mut self, id: NodeId) {
        let b = self.out.blocks[&id];
        let size = self.round(b.size);
        self.arenas[b.arena].release(b.offset, size);
        self.live_bytes -= size;
    }

    /// Frees the operands step `id` (at position `step`) reads for the last time.
    fn free_operands(
        &mut self,
        id: NodeId,
        step: usize,
        pinned: &[bool],
        handed_over: &[bool],
        last: &[Option<usize>],
    ) {
        let mut freed: Vec<NodeId> =
            self.program.nodes[id].step.srcs().iter().map(|&s| self.program.nodes[s].storage).collect();
        freed.sort_unstable();
        freed.dedup();
        for s in freed {
            if !pinned[s] && !handed_over[s] && last[s] == Some(step) {
                self.free(s);
            }
        }
    }

    fn note_peaks(&self, arena_peak: &mut Vec<u64>) {
        arena_peak.resize(self.arenas.len(), 0);
        for (a, ar) in self.arenas.iter().enumerate() {
            arena_peak[a] = arena_peak[a].max(ar.end);
        }
    }
}

/// Plans memory for `program` within `limits`. `inplace(step)` lists storage nodes the step may overwrite (see
/// `inplace::candidates`): the first that is read for the last time by that step, and is neither an input nor
/// an output, gives its block to the step's output instead of a new one.
pub(crate) fn plan(
    program: &Program,
    limits: MemoryLimits,
    inplace: &dyn Fn(NodeId) -> Vec<NodeId>,
) -> Result<MemoryPlan> {
    let mut pl = Planner { program, limits, arenas: Vec::new(), out: MemoryPlan::default(), live_bytes: 0 };
    let mut pinned = vec![false; program.nodes.len()];
    for &o in &program.outputs {
        pinned[program.nodes[o].storage] = true;
    }
    for &i in &program.inputs {
        pinned[i] = true;
        if limits.place_inputs {
            pl.alloc(i)?;
        }
    }
    let mut arena_peak: Vec<u64> = Vec::new();
    let last = program.last_reads();
    let mut handed_over = vec![false; program.nodes.len()];
    let externals: Vec<NodeId> = (0..program.nodes.len()).filter(|&i| program.external(i).is_some()).collect();
    for &e in &externals {
        pinned[e] = true;
    }
    for (step, &id) in program.steps.iter().enumerate() {
        if program.nodes[id].storage != id {
            // a write into a state: no memory of its own
            pl.free_operands(id, step, &pinned, &handed_over, &last);
            continue;
        }
        let donor = inplace(id).into_iter().find(|&c| !pinned[c] && !handed_over[c] && last[c] == Some(step));
        match donor {
            Some(c) => {
                let b = pl.out.blocks[&c];
                pl.out.blocks.insert(id, Block { size: program.storage_bytes(id), ..b });
                handed_over[c] = true;
            }
            None => pl.alloc(id)?,
        }
        pl.note_peaks(&mut arena_peak);
        pl.free_operands(id, step, &pinned, &handed_over, &last);
        // a step nobody reads and nobody asked for is dead code removed earlier; an output stays pinned
        if !pinned[id] && last[id].is_none() {
            pl.free(id);
        }
    }
    pl.note_peaks(&mut arena_peak);
    for (k, &e) in externals.iter().enumerate() {
        let block = Block { arena: arena_peak.len() + k, offset: 0, size: program.storage_bytes(e) };
        pl.out.blocks.insert(e, block);
    }
    pl.out.arena_bytes = arena_peak;
    pl.out.externals = externals;
    Ok(pl.out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::ir::Program;
    use crate::dtype::DType;
    use crate::graph::Graph;

    fn limits(max: u64) -> MemoryLimits {
        MemoryLimits { align: 256, max_arena: max, max_tensor: max, place_inputs: true }
    }

    fn overlaps(a: Block, b: Block) -> bool {
        a.arena == b.arena && a.offset < b.offset + b.size && b.offset < a.offset + a.size
    }

    #[test]
    fn reuses_after_last_reader_and_never_overlaps_live_tensors() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[64]).unwrap();
        let a = g.exp(x).unwrap();
        let b = g.exp(a).unwrap(); // a dies here
        let c = g.exp(b).unwrap(); // can take a's block
        let d = g.add(c, x).unwrap();
        let p = Program::new(&g, &[d]).unwrap();
        let m = plan(&p, limits(1 << 30), &|_| vec![]).unwrap();
        let blk = |t: crate::graph::Tensor| m.blocks[&(t.index())];
        assert_eq!(blk(c).offset, blk(a).offset, "c reuses a's memory");
        assert!(!overlaps(blk(x), blk(a)) && !overlaps(blk(x), blk(c)) && !overlaps(blk(x), blk(d)));
        assert!(!overlaps(blk(a), blk(b)) && !overlaps(blk(b), blk(c)) && !overlaps(blk(c), blk(d)));
        assert_eq!(m.total_bytes(), 3 * 256, "x, a and b are live together at most");
    }

    #[test]
    fn in_place_takes_the_dying_operand_block() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[64]).unwrap();
        let a = g.exp(x).unwrap();
        let b = g.tanh(a).unwrap(); // may overwrite a
        let c = g.add(b, x).unwrap(); // may overwrite b (x is an input: never)
        let p = Program::new(&g, &[c]).unwrap();
        let m = plan(&p, limits(1 << 30), &|s| crate::compile::inplace::candidates(&p, s, &|_| true)).unwrap();
        let blk = |t: crate::graph::Tensor| m.blocks[&(t.index())];
        assert_eq!(blk(b).offset, blk(a).offset);
        assert_eq!(blk(c).offset, blk(b).offset, "the output may reuse a dying temporary");
        assert_ne!(blk(c).offset, blk(x).offset, "inputs are never overwritten");
        assert_eq!(m.total_bytes(), 2 * 256);
    }

    #[test]
    fn tensor_over_binding_limit_is_an_error() {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[1000]).unwrap();
        let y = g.exp(x).unwrap();
        let p = Program::new(&g, &[y]).unwrap();
        let e = plan(&p, MemoryLimits { max_tensor: 1024, ..limits(1 << 30) }, &|_| vec![]).unwrap_err();
        assert!(e.to_string().contains("max_buffer_size"), "{e}");
    }
}
