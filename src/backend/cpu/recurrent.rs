//! The linear-attention kernels on the CPU: the causal depthwise conv (`ssm_conv`) and the gated delta rule
//! (`gated_delta_net`), its state kept in f32 per task (a block of a head's value rows) across the tokens.

use super::buffer::{Memory, View};
use super::parallel::for_ranges;
use super::target::{leaf, CpuFamily, CpuTarget, Leaf};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::Result;
use crate::graph::{NodeId, Op};

/// `out[b, t, c] = Σ_k w[c, k] · x[b, t + k, c]`.
#[derive(Clone, Debug)]
pub(crate) struct SsmConvKernel {
    pub out: NodeId,
    pub x: Leaf,
    pub w: Leaf,
}

impl CpuFamily for SsmConvKernel {
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::Op(Op::SsmConv { x, w }) = p.nodes[id].step else { return None };
        Some(SsmConvKernel { out: id, x: leaf(p, x, None), w: leaf(p, w, None) })
    }

    fn run(&self, mem: &Memory) -> Result<()> {
        let (lx, lw) = (&self.x.layout, &self.w.layout);
        let (c, k) = (lw.shape[0], lw.shape[1]);
        let rows = lx.shape[lx.rank() - 2];
        let (t, batches) = (rows + 1 - k, lx.numel() / (rows * c).max(1));
        // the taps as [K, C]: tap j of every channel one contiguous row
        let mut w = vec![0f32; c * k];
        mem.view(self.w.storage, self.w.dtype).row_f32(lw.offset, 1, &mut w);
        let taps: Vec<f32> = (0..k * c).map(|i| w[(i % c) * k + i / c]).collect();
        for_ranges(batches * t, (4096 / c.max(1)).max(1), |range| {
            // views made in the task (a view holds a raw pointer; the memory is shared between threads)
            let (x, out) = (mem.view(self.x.storage, self.x.dtype), mem.view(self.out, DType::F32));
            let (mut acc, mut row) = (vec![0f32; c], vec![0f32; c]);
            for r in range {
                let (bi, ti) = (r / t, r % t);
                acc.fill(0.0);
                for j in 0..k {
                    x.row_f32(lx.offset + (bi * rows + ti + j) * c, 1, &mut row);
                    let tap = &taps[j * c..(j + 1) * c];
                    acc.iter_mut().zip(tap.iter().zip(&row)).for_each(|(a, (w, x))| *a += w * x);
                }
                out.write_f32(r * c, &acc);
            }
        });
        Ok(())
    }
}

/// The gated delta rule (see `Graph::gated_delta_net`): the output of every token, then the new state.
#[derive(Clone, Debug)]
pub(crate) struct GatedDeltaNetKernel {
    pub out: NodeId,
    /// q, k, v, g, beta, state.
    pub ins: [Leaf; 6],
    pub scale: f32,
}

/// Value rows a task owns of a head's state.
const ROWS_PER_TASK: usize = 16;

impl CpuFamily for GatedDeltaNetKernel {
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::Op(Op::GatedDeltaNet { q, k, v, g, beta, state, scale }) = p.nodes[id].step else {
            return None;
        };
        let ins = [q, k, v, g, beta, state].map(|s| leaf(p, s, None));
        Some(GatedDeltaNetKernel { out: id, ins, scale })
    }

    fn run(&self, mem: &Memory) -> Result<()> {
        let sq = &self.ins[0].layout.shape;
        let sv = &self.ins[2].layout.shape;
        let dims = Dims { b: sq[0], t: sq[1], hk: sq[2], dk: sq[3], hv: sv[2], dv: sv[3] };
        let blocks = dims.dv.div_ceil(ROWS_PER_TASK);
        for_ranges(dims.b * dims.hv * blocks, 1, |range| {
            // views made in the task (a view holds a raw pointer; the memory is shared between threads)
            let views = self.ins.each_ref().map(|l| (mem.view(l.storage, l.dtype), l.layout.offset));
            let out = mem.view(self.out, DType::F32);
            for task in range {
                let (bh, blk) = (task / blocks, task % blocks);
                let rows = blk * ROWS_PER_TASK..((blk + 1) * ROWS_PER_TASK).min(dims.dv);
                head_rows(&dims, &views, out, self.scale, bh, rows);
            }
        });
        Ok(())
    }
}

/// The gated delta rule's dims: batch, tokens, key heads and width, value heads and width.
struct Dims {
    b: usize,
    t: usize,
    hk: usize,
    dk: usize,
    hv: usize,
    dv: usize,
}

/// [`head_rows_body`] compiled for AVX2 where the CPU has it (the loops over a row vectorize 8 wide; the crate's
/// baseline x86-64 gives them SSE's 4), else as the baseline.
fn head_rows(d: &Dims, ins: &[(View, usize); 6], out: View, scale: f32, bh: usize, rows: std::ops::Range<usize>) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above)
        return unsafe { head_rows_avx2(d, ins, out, scale, bh, rows) };
    }
    head_rows_body(d, ins, out, scale, bh, rows)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn head_rows_avx2(
    d: &Dims,
    ins: &[(View, usize); 6],
    out: View,
    scale: f32,
    bh: usize,
    rows: std::ops::Range<usize>,
) {
    head_rows_body(d, ins, out, scale, bh, rows)
}

/// Value rows `rows` of head `bh` (batch · Hv + head) over every token: the state's rows kept in f32 here, each
/// token's output entries written as they are made, the rows' new state at the end.
#[inline(always)]
fn head_rows_body(d: &Dims, ins: &[(View, usize); 6], out: View, scale: f32, bh: usize, rows: std::ops::Range<usize>) {
    let (bi, h) = (bh / d.hv, bh % d.hv);
    let kh = h % d.hk;
    let n = rows.len();
    let [(q, oq), (k, ok), (v, ov), (g, og), (beta, ob), (state, os)] = *ins;
    let mut s = vec![0f32; n * d.dk];
    state.row_f32(os + (bh * d.dv + rows.start) * d.dk, 1, &mut s);
    let (mut kt, mut qt, mut vt, mut ot) = (vec![0f32; d.dk], vec![0f32; d.dk], vec![0f32; n], vec![0f32; n]);
    for ti in 0..d.t {
        let tok = bi * d.t + ti;
        k.row_f32(ok + (tok * d.hk + kh) * d.dk, 1, &mut kt);
        q.row_f32(oq + (tok * d.hk + kh) * d.dk, 1, &mut qt);
        v.row_f32(ov + (tok * d.hv + h) * d.dv + rows.start, 1, &mut vt);
        let (decay, b) = (g.get(og + tok * d.hv + h).exp(), beta.get(ob + tok * d.hv + h));
        for (j, row) in s.chunks_exact_mut(d.dk).enumerate() {
            // S·k of the decayed state is decay·(S·k): one read of the row, then one pass that decays, updates
            // and dots the updated row with q
            let delta = b * (vt[j] - decay * dot(row, &kt));
            row.iter_mut().zip(&kt).for_each(|(x, k)| *x = decay * *x + delta * k);
            ot[j] = scale * dot(row, &qt);
        }
        out.write_f32((tok * d.hv + h) * d.dv + rows.start, &ot);
    }
    let states_at = d.b * d.t * d.hv * d.dv;
    out.write_f32(states_at + (bh * d.dv + rows.start) * d.dk, &s);
}

/// `Σ a·b` in eight lanes (so that the compiler vectorizes it).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        (0..8).for_each(|i| acc[i] += x[i] * y[i]);
    }
    acc.iter().sum::<f32>() + tail
}
