//! Rotary position embedding and attention on the CPU, in f32.

#[cfg(target_arch = "x86_64")]
use super::attention_rows::{attend, Block, Lane, Rows};
use super::attention_rows::{nan_max, softmax_in_place};
use super::buffer::Memory;
use super::gather::SetRowsKernel;
use super::matmul::product;
use super::parallel::{for_chunks, threads};
use super::sgemm::Operand;
use super::target::{leaf, CpuFamily, CpuTarget, Leaf};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::graph::Op;
use crate::ops::unary::exp;
use crate::ops::Rope;
use crate::shape::Layout;
#[cfg(target_arch = "x86_64")]
use half::f16;

/// `[.., T, H, D]` rotated at positions `pos[T]`.
#[derive(Clone, Debug)]
pub(crate) struct RopeKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    pub x: Leaf,
    pub pos: Leaf,
    /// Each pair's frequency factor (`[n_dims / 2]`, f32).
    pub factors: Option<Leaf>,
    pub rope: Rope,
}

/// (T, H, D) of a `[.., T, H, D]` layout and the number of leading (batch) rows.
fn thd(l: &Layout) -> (usize, usize, usize, usize) {
    let r = l.rank();
    let (t, h, d) = (l.shape[r - 3], l.shape[r - 2], l.shape[r - 1]);
    (l.numel() / (t * h * d), t, h, d)
}

/// The rope of `x` at `pos` (with frequency factors where given) into `out` of `dtype`.
fn rope_kernel(
    p: &Program,
    (out, out_dtype): (NodeId, DType),
    (x, pos, factors): RopeOperands,
    rope: Rope,
) -> RopeKernel {
    let (x, pos) = (leaf(p, x, None), leaf(p, pos, None));
    RopeKernel { out, out_dtype, x, pos, factors: factors.map(|f| leaf(p, f, None)), rope }
}

/// A rope's x, positions and frequency factors.
type RopeOperands = (NodeId, NodeId, Option<NodeId>);

impl CpuFamily for RopeKernel {
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::Op(Op::Rope { x, pos, factors, rope }) = p.nodes[id].step else { return None };
        Some(rope_kernel(p, (id, p.nodes[id].dtype), (x, pos, factors), rope))
    }

    fn run(&self, mem: &Memory) -> Result<()> {
        let out = mem.view(self.out, self.out_dtype);
        self.rotate(mem, &mut |first, row| out.write_f32(first, row));
        Ok(())
    }
}

impl RopeKernel {
    /// Passes each rotated row (a head of a position) of the contiguous output to `sink` as (flat index of its
    /// first element, values in f32); each position's angles computed once for all its heads.
    fn rotate(&self, mem: &Memory, sink: &mut dyn FnMut(usize, &[f32])) {
        let x = mem.view(self.x.storage, self.x.dtype);
        let pos = mem.view(self.pos.storage, self.pos.dtype);
        let (b, t, h, d) = thd(&self.x.layout);
        let l = &self.x.layout;
        let st = l.strides[l.rank() - 1];
        let mut row = vec![0f32; d];
        let factors: Vec<f32> = match &self.factors {
            Some(f) => {
                let v = mem.view(f.storage, f.dtype);
                (0..self.rope.n_dims / 2).map(|i| v.get(f.layout.index_of(i))).collect()
            }
            None => vec![1.0; self.rope.n_dims / 2],
        };
        let mut angles = vec![(0f32, 0f32); factors.len()];
        for bi in 0..b {
            for ti in 0..t {
                let p = pos.get_i32(self.pos.layout.index_of(ti));
                self.rope.sin_cos_table(p, &factors, &mut angles);
                for hi in 0..h {
                    let first = ((bi * t + ti) * h + hi) * d;
                    x.row_f32(l.index_of(first), st, &mut row);
                    for (i, &(sin, cos)) in angles.iter().enumerate() {
                        let (a, c) = self.rope.pair(i);
                        let (x0, x1) = (row[a], row[c]);
                        row[a] = x0 * cos - x1 * sin;
                        row[c] = x0 * sin + x1 * cos;
                    }
                    sink(first, &row);
                }
            }
        }
    }
}

/// rope fused with the KV-cache write: `set.dst[set.idx[r], :] = rope(x, pos)[r, :]` over the rope's output seen
/// as `set`'s rows, each value rounded to the rope's dtype first (as the unfused plan stores it).
#[derive(Clone, Debug)]
pub(crate) struct RopeSetRowsKernel {
    /// The rope; its `out` is unused (the rotated values go straight to `set`).
    pub rope: RopeKernel,
    /// The write; its `src` is unused (its rows are the rope's output).
    pub set: SetRowsKernel,
}

impl CpuFamily for RopeSetRowsKernel {
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::RopeSetRows { dst, idx, x, pos, factors, rope, rope_dtype } = p.nodes[id].step else { return None };
        Some(RopeSetRowsKernel {
            rope: rope_kernel(p, (id, rope_dtype), (x, pos, factors), rope),
            set: SetRowsKernel { dst: leaf(p, dst, None), idx: leaf(p, idx, None), src: leaf(p, x, None) },
        })
    }

    /// # Errors
    /// As `SetRowsKernel`'s run.
    fn run(&self, mem: &Memory) -> Result<()> {
        let mut rows = vec![0f32; self.rope.x.layout.numel()];
        let f16 = self.rope.out_dtype == DType::F16;
        self.rope.rotate(mem, &mut |first, row| {
            for (o, &v) in rows[first..first + row.len()].iter_mut().zip(row) {
                *o = if f16 { half::f16::from_f32(v).to_f32() } else { v };
            }
        });
        self.set.scatter(mem, &|i| rows[i])
    }
}

/// Query rows from which a prefill's attention runs as matrix products (below, a row at a time, where packing
/// the operands for `gemm` would cost more than it saves).
const GEMM_ROWS: usize = 64;
/// Scores a prefill's block of query rows holds at most (f32 values: 16 MiB).
const SCORES: usize = 1 << 22;

/// `softmax(q·kᵀ·scale + mask)·v` per (batch, head, query), written as `[.., T, H, Dv]`.
#[derive(Clone, Debug)]
pub(crate) struct AttentionKernel {
    pub out: NodeId,
    pub out_dtype: DType,
    /// `[.., H, T, D]`.
    pub q: Leaf,
    /// `[.., Hkv, S, D]`.
    pub k: Leaf,
    /// `[.., Hkv, S, Dv]`.
    pub v: Leaf,
    /// Broadcast to `[.., H, T, S]`.
    pub mask: Option<Leaf>,
    pub kv_len: Option<Leaf>,
    /// `[H]`: a logit per head in each softmax's denominator.
    pub sinks: Option<Leaf>,
    pub scale: f32,
    pub causal: bool,
}

/// Attention's sizes: query heads H, query rows T, key width D, KV heads Hkv, value width Dv.
struct Dims {
    h: usize,
    t: usize,
    d: usize,
    hkv: usize,
    dv: usize,
}

/// Start of `[.., a, b, :]` in a rank-r layout and the stride of its last dim.
fn row_at(l: &Layout, batch: usize, a: usize, b: usize) -> (usize, usize) {
    let r = l.rank();
    let mut off = l.offset + a * l.strides[r - 3] + b * l.strides[r - 2];
    if r == 4 {
        off += batch * l.strides[0];
    }
    (off, l.strides[r - 1])
}

impl AttentionKernel {
    /// Keys query row `ti` of `t` sees among `len`: all, or with causal masking those up to its position.
    fn visible(&self, len: usize, t: usize, ti: usize) -> usize {
        if self.causal {
            (len + ti + 1).saturating_sub(t).min(len)
        } else {
            len
        }
    }

    /// The mask's row for query `(b, head, ti)` (its first `out.len()` keys) into `out`; false without a mask.
    fn mask_row(&self, mem: &Memory, (b, hi, ti): (usize, usize, usize), s: usize, out: &mut [f32]) -> bool {
        let Some(m) = &self.mask else { return false };
        let Dims { h, t, .. } = self.dims();
        let ml = &m.layout;
        let (mo, ms) = (ml.index_of(((b * h + hi) * t + ti) * s), ml.strides[ml.rank() - 1]);
        mem.view(m.storage, m.dtype).row_f32(mo, ms, out);
        true
    }

    /// The sinks of every head (empty without them).
    fn sinks(&self, mem: &Memory) -> Vec<f32> {
        let Some(s) = &self.sinks else { return Vec::new() };
        let view = mem.view(s.storage, s.dtype);
        (0..s.layout.numel()).map(|i| view.get(s.layout.index_of(i))).collect()
    }

    fn dims(&self) -> Dims {
        let (q, k, v) = (&self.q.layout, &self.k.layout, &self.v.layout);
        let r = q.rank();
        Dims { h: q.shape[r - 3], t: q.shape[r - 2], d: q.shape[r - 1], hkv: k.shape[r - 3], dv: v.shape[r - 1] }
    }

    /// The KV length of this run: the run-time length, checked, or S.
    fn length(&self, mem: &Memory, s: usize) -> Result<usize> {
        let Some(l) = &self.kv_len else { return Ok(s) };
        let n = mem.view(l.storage, l.dtype).get_i32(l.layout.offset);
        if n < 1 || n as usize > s {
            return Err(Error::BadInput {
                name: "attention".into(),
                reason: format!("KV length {n} is outside 1..={s} (the keys' length)"),
            });
        }
        Ok(n as usize)
    }
}

impl CpuFamily for AttentionKernel {
    fn lower(p: &Program, id: NodeId, _t: &CpuTarget) -> Option<Self> {
        let Step::Op(Op::Attention { q, k, v, mask, kv_len, sinks, scale, causal }) = p.nodes[id].step else {
            return None;
        };
        let (q, k) = (leaf(p, q, None), leaf(p, k, None));
        let r = q.layout.rank();
        let mut full = q.layout.shape.clone();
        full[r - 1] = k.layout.shape[r - 2];
        Some(AttentionKernel {
            out: id,
            out_dtype: p.nodes[id].dtype,
            q,
            k,
            v: leaf(p, v, None),
            mask: mask.map(|m| leaf(p, m, Some(&full))),
            kv_len: kv_len.map(|l| leaf(p, l, None)),
            sinks: sinks.map(|s| leaf(p, s, None)),
            scale,
            causal,
        })
    }

    /// # Errors
    /// [`Error::BadInput`] when the run-time KV length is outside `1..=S`.
    ///
    /// From [`GEMM_ROWS`] query rows (a prefill) every K and V row is converted to contiguous f32 once and each
    /// (batch element, head) runs as matrix products (`prefill_head`); below (a decode step, a short prefill) each
    /// (batch element, KV head) converts its K and V rows once for the query rows of all its heads (`group`).
    fn run(&self, mem: &Memory) -> Result<()> {
        let (q, k, v) = (&self.q.layout, &self.k.layout, &self.v.layout);
        let r = q.rank();
        let (h, t) = (q.shape[r - 3], q.shape[r - 2]);
        let (hkv, s, d, dv) = (k.shape[r - 3], k.shape[r - 2], q.shape[r - 1], v.shape[r - 1]);
        let batches = if r == 4 { q.shape[0] } else { 1 };
        let len = self.length(mem, s)?;
        // res [batches, h, t, dv]: one row per (b, head, query)
        let mut res = vec![0f32; batches * h * t * dv];
        if t >= GEMM_ROWS {
            let kf = self.to_f32(mem, &self.k, batches * hkv, len, d);
            let vf = self.to_f32(mem, &self.v, batches * hkv, len, dv);
            // a long prefill: per (batch element, head), scores and weighted values as matrix products
            for_chunks(&mut res, t * dv, |ci, o| {
                let (b, hi) = (ci / h, ci % h);
                let (nk, nv) = (hkv * len * d, hkv * len * dv);
                self.prefill_head(mem, (b, hi), (len, s), (&kf[b * nk..(b + 1) * nk], &vf[b * nv..(b + 1) * nv]), o);
            });
        } else if len > KEY_SPLIT {
            // a decode step or a short prefill over many keys: each KV head's keys split among the threads
            self.split_keys(mem, batches, (len, s), &mut res);
        } else {
            // a decode step or a short prefill: per (batch element, KV head), every query row of its heads
            // (fewer KV heads than threads: each one's rows split among them)
            let splits = threads().div_ceil(batches * hkv);
            for_chunks(&mut res, h / hkv * t * dv, |ci, o| {
                self.group(mem, (ci / hkv, ci % hkv), (len, s), splits, o);
            });
        }
        // written as [.., t, h, dv]
        let out = mem.view(self.out, self.out_dtype);
        for (row, src) in res.chunks_exact(dv).enumerate() {
            let (b, hi, ti) = (row / (h * t), row / t % h, row % t);
            out.write_f32(((b * t + ti) * h + hi) * dv, src);
        }
        Ok(())
    }
}

impl AttentionKernel {
    /// The rows `[b, g, 0..len, :]` of `x` (K or V) for every batch element `b` and KV head `g` (`heads` of
    /// them in all), as f32 `[heads, len, width]`.
    fn to_f32(&self, mem: &Memory, x: &Leaf, heads: usize, len: usize, width: usize) -> Vec<f32> {
        let mut out = vec![0f32; heads * len * width];
        let hkv = x.layout.shape[x.layout.rank() - 3];
        let per = (heads * len).div_ceil(4 * threads()).max(1);
        for_chunks(&mut out, per * width, |ci, chunk| {
            let view = mem.view(x.storage, x.dtype);
            for (j, row) in chunk.chunks_exact_mut(width).enumerate() {
                let n = ci * per + j;
                let (bg, si) = (n / len, n % len);
                let (o, st) = row_at(&x.layout, bg / hkv, bg % hkv, si);
                view.row_f32(o, st, row);
            }
        });
        out
    }

    /// Every query row of head `hi` of batch element `b` (a prefill), into `out [T, Dv]`: `S = q·kᵀ·scale` for
    /// a block of query rows at a time by `gemm` (K and V converted to f32 `[Hkv, len, ·]` in `kf`/`vf`), the
    /// mask added, each row's softmax over its visible keys (a row with none gives zeros), then `P·v` by `gemm`
    /// and each row divided by its sum. Blocks of rows keep `S` within [`SCORES`] values.
    fn prefill_head(
        &self,
        mem: &Memory,
        (b, hi): (usize, usize),
        (len, s): (usize, usize),
        (kf, vf): (&[f32], &[f32]),
        out: &mut [f32],
    ) {
        let q = &self.q.layout;
        let Dims { h, t, d, hkv, dv } = self.dims();
        let g = hi / (h / hkv);
        let (kg, vg) = (&kf[g * len * d..(g + 1) * len * d], &vf[g * len * dv..(g + 1) * len * dv]);
        let block = (SCORES / len).clamp(1, t);
        let (mut qb, mut sc, mut mask) = (vec![0f32; block * d], vec![0f32; block * len], vec![0f32; len]);
        let qv = mem.view(self.q.storage, self.q.dtype);
        let sink = self.sinks(mem).get(hi).copied();
        for t0 in (0..t).step_by(block) {
            let rows = block.min(t - t0);
            for (i, row) in qb.chunks_exact_mut(d).take(rows).enumerate() {
                let (qo, qs) = row_at(q, b, hi, t0 + i);
                qv.row_f32(qo, qs, row);
            }
            let (qm, km) = (
                Operand { ptr: qb.as_ptr(), rs: d as isize, cs: 1 },
                Operand { ptr: kg.as_ptr(), rs: 1, cs: d as isize },
            );
            // SAFETY: qb holds rows × d, kg len × d (read as its transpose), sc rows × len.
            unsafe { product(rows, len, d, qm, km, &mut sc[..rows * len]) };
            let (mut sums, mut maxes) = (vec![0f32; rows], vec![0f32; rows]);
            for (i, x) in sc.chunks_exact_mut(len).take(rows).enumerate() {
                let ti = t0 + i;
                let visible = self.visible(len, t, ti);
                x.iter_mut().for_each(|e| *e *= self.scale);
                if self.mask_row(mem, (b, hi, ti), s, &mut mask[..visible]) {
                    x.iter_mut().zip(&mask[..visible]).for_each(|(e, m)| *e += m);
                }
                let max = x[..visible].iter().fold(f32::NEG_INFINITY, |a, &e| nan_max(a, e));
                if max == f32::NEG_INFINITY {
                    x.iter_mut().for_each(|e| *e = 0.0);
                    continue;
                }
                x[..visible].iter_mut().for_each(|e| *e = exp(*e - max));
                x[visible..].iter_mut().for_each(|e| *e = 0.0);
                sums[i] = x[..visible].iter().sum();
                maxes[i] = max;
            }
            let o = &mut out[t0 * dv..(t0 + rows) * dv];
            let (pm, vm) = (
                Operand { ptr: sc.as_ptr(), rs: len as isize, cs: 1 },
                Operand { ptr: vg.as_ptr(), rs: dv as isize, cs: 1 },
            );
            // SAFETY: sc holds rows × len, vg len × dv, o rows × dv.
            unsafe { product(rows, dv, len, pm, vm, o) };
            for ((row, &sum), &max) in o.chunks_exact_mut(dv).zip(&sums).zip(&maxes) {
                let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
                let inv = inv * sink.map_or(1.0, |s| sink_scale(max, sum, s));
                row.iter_mut().for_each(|a| *a *= inv);
            }
        }
    }

    /// Every query row of the heads sharing KV head `g` of batch element `b` (heads `g·gs .. (g + 1)·gs`, `gs·T`
    /// rows), into `out [gs, T, Dv]`, split over `splits` tasks (see [`AttentionKernel::attend_rows`]). Each row's
    /// value depends on its own keys only, not on the split or on the KV length of the run beyond them (a key
    /// masked with −inf adds an exact 0).
    fn group(&self, mem: &Memory, (b, g): (usize, usize), (len, s): (usize, usize), splits: usize, out: &mut [f32]) {
        let Dims { h, t, hkv, dv, .. } = self.dims();
        let kv = Kv::of(self, mem, (b, g), 0..len);
        let per = (h / hkv * t).div_ceil(splits.max(1));
        for_chunks(out, per * dv, |ci, chunk| {
            self.attend_rows(mem, &kv, (b, g), (len, s), (ci * per, 0..len), chunk, &mut []);
        });
    }

    /// The rows `first ..` of KV head `g`'s group (as many as `out [rows, Dv]` holds) over the keys `keys` of
    /// their visible ones (`kv` holds those keys' rows): with AVX2 (`attention_rows`) four rows at a time over the
    /// K and V rows in place (f16 or f32), else a row at a time over them converted to f32. Each row's output is
    /// normalized over those keys; its (largest score, sum of exponentials) go to `stats` (two values a row) when
    /// it is not empty.
    #[allow(clippy::too_many_arguments)]
    fn attend_rows(
        &self,
        mem: &Memory,
        kv: &Kv,
        (b, g): (usize, usize),
        (len, s): (usize, usize),
        (first, keys): (usize, std::ops::Range<usize>),
        out: &mut [f32],
        stats: &mut [f32],
    ) {
        let Dims { h, t, d, hkv, dv } = self.dims();
        let qv = mem.view(self.q.storage, self.q.dtype);
        let rows = out.len() / dv;
        let masked = self.mask.is_some();
        // the masks' rows only where there is a mask (4·len values each task: a long context's decode step would
        // otherwise clear megabytes)
        let (mut q, mut scores) = (vec![0f32; 4 * d], vec![0f32; 4 * keys.len()]);
        let mut masks = if masked { vec![0f32; 4 * len] } else { Vec::new() };
        // a row's sink applies where its output is final (not a split's part, which the combine finishes)
        let sinks = if stats.is_empty() { self.sinks(mem) } else { Vec::new() };
        for (bi, o) in out.chunks_mut(4 * dv).enumerate() {
            let first = first + bi * 4;
            let mut visible = [0usize; 4];
            for i in 0..(rows - bi * 4).min(4) {
                let (hi, ti) = (g * (h / hkv) + (first + i) / t, (first + i) % t);
                let (qo, qs) = row_at(&self.q.layout, b, hi, ti);
                qv.row_f32(qo, qs, &mut q[i * d..(i + 1) * d]);
                visible[i] = self.visible(len, t, ti);
                if !masked {
                    continue;
                }
                let m = &mut masks[i * len..i * len + visible[i]];
                if self.mask_row(mem, (b, hi, ti), s, m) {
                    // keys masked with −inf at the end (a batched row's positions past its own length) are not
                    // read: each adds an exact 0, and a sequence's cost follows its own length
                    visible[i] = m.iter().rposition(|&x| x != f32::NEG_INFINITY).map_or(0, |p| p + 1);
                }
            }
            // the visible keys within `keys`, counted from its start
            let seen: [usize; 4] = std::array::from_fn(|i| visible[i].clamp(keys.start, keys.end) - keys.start);
            let mask: [&[f32]; 4] = std::array::from_fn(|i| {
                let from = i * len + keys.start;
                if masked {
                    &masks[from..from + seen[i]]
                } else {
                    &[][..]
                }
            });
            let st = kv.attend((&q, seen, mask), self.scale, &mut scores, o);
            for (i, (row, &(max, sum))) in o.chunks_exact_mut(dv).zip(&st).enumerate() {
                if let Some(&s) = sinks.get(g * (h / hkv) + (first + i) / t) {
                    let f = sink_scale(max, sum, s);
                    row.iter_mut().for_each(|a| *a *= f);
                }
            }
            for (i, (max, sum)) in st.into_iter().take(o.len() / dv).enumerate() {
                if let Some(pair) = stats.get_mut((bi * 4 + i) * 2..(bi * 4 + i) * 2 + 2) {
                    pair.copy_from_slice(&[max, sum]);
                }
            }
        }
    }

    /// A decode step (or a short prefill) over more than [`KEY_SPLIT`] keys: each KV head's keys in splits of
    /// that many, a task each (so that every thread works however few KV heads there are, and each key is read
    /// once), then each row's splits combined into `res [B, H, T, Dv]`: `Σ_i o_i·w_i / Σ_i w_i` with
    /// `w_i = l_i·exp(m_i − M)` (flash-decoding's rescaling). The splits are fixed runs of keys, whatever the
    /// threads or the run's length: a row whose keys lie in one split gets the unsplit path's bits.
    fn split_keys(&self, mem: &Memory, batches: usize, (len, s): (usize, usize), res: &mut [f32]) {
        let Dims { h, t, hkv, dv, .. } = self.dims();
        let (rows, splits) = (h / hkv * t, len.div_ceil(KEY_SPLIT));
        // per task: the group's rows normalized over the split's keys, then each row's (max, sum)
        let width = rows * (dv + 2);
        let mut part = vec![0f32; batches * hkv * splits * width];
        for_chunks(&mut part, width, |ci, chunk| {
            let (bg, c) = (ci / splits, ci % splits);
            let keys = c * KEY_SPLIT..((c + 1) * KEY_SPLIT).min(len);
            let kv = Kv::of(self, mem, (bg / hkv, bg % hkv), keys.clone());
            let (o, st) = chunk.split_at_mut(rows * dv);
            self.attend_rows(mem, &kv, (bg / hkv, bg % hkv), (len, s), (0, keys), o, st);
        });
        let sinks = self.sinks(mem);
        for (bg, dst) in res.chunks_exact_mut(rows * dv).enumerate() {
            let parts: Vec<&[f32]> = part[bg * splits * width..(bg + 1) * splits * width].chunks_exact(width).collect();
            for (r, o) in dst.chunks_exact_mut(dv).enumerate() {
                // a split's part: the rows' outputs, then each row's (max, sum)
                let (max, sum) = combine(
                    parts.iter().map(|&p| (&p[r * dv..(r + 1) * dv], p[rows * dv + 2 * r], p[rows * dv + 2 * r + 1])),
                    o,
                );
                if let Some(&s) = sinks.get((bg % hkv) * (h / hkv) + r / t) {
                    let f = sink_scale(max, sum, s);
                    o.iter_mut().for_each(|a| *a *= f);
                }
            }
        }
    }
}

/// Keys per task where a decode step's attention splits its keys ([`AttentionKernel::split_keys`]).
const KEY_SPLIT: usize = 256;

/// The factor that turns a row normalized over its keys (largest score `max`, sum of exponentials `sum`) into
/// one whose softmax also counts a sink logit `sink`: `Σ / (Σ + e^(sink))` in the row's scale. A row that saw
/// no key (zeros) or a NaN score keeps its values.
fn sink_scale(max: f32, sum: f32, sink: f32) -> f32 {
    if sum > 0.0 {
        1.0 / (1.0 + exp(sink - max) / sum)
    } else {
        1.0
    }
}

/// One row's output from its splits' `(normalized output, largest score, sum of exponentials)`: zeros when no
/// split saw a key, NaN when one met a NaN score, the one split's output as it is when only one saw keys, else
/// the splits rescaled to the largest score and weighted by their sums, in split order. Returns the row's
/// (largest score, sum of exponentials at it) as [`softmax_in_place`]'s.
fn combine<'a>(splits: impl Iterator<Item = (&'a [f32], f32, f32)> + Clone, out: &mut [f32]) -> (f32, f32) {
    if splits.clone().any(|(_, _, l)| l.is_nan()) {
        out.fill(f32::NAN);
        return (f32::NAN, f32::NAN);
    }
    let live = splits.filter(|&(_, _, l)| l > 0.0);
    let mut first_two = live.clone();
    match (first_two.next(), first_two.next()) {
        (None, _) => {
            out.fill(0.0);
            (f32::NEG_INFINITY, 0.0)
        }
        (Some((o, m, l)), None) => {
            out.copy_from_slice(o);
            (m, l)
        }
        _ => {
            let m = live.clone().fold(f32::NEG_INFINITY, |a, (_, m, _)| a.max(m));
            out.fill(0.0);
            let mut total = 0f32;
            for (o, mi, l) in live {
                let w = l * exp(mi - m);
                total += w;
                out.iter_mut().zip(o).for_each(|(a, &x)| *a += x * w);
            }
            let inv = 1.0 / total;
            out.iter_mut().for_each(|a| *a *= inv);
            (m, total)
        }
    }
}

/// A group's K and V rows as the kernels read them.
enum Kv {
    #[cfg(target_arch = "x86_64")]
    F16(Rows<f16>, Rows<f16>),
    #[cfg(target_arch = "x86_64")]
    F32(Rows<f32>, Rows<f32>),
    /// Converted to contiguous f32 `[len, D]` and `[len, Dv]`; `fast`: the AVX2 kernel reads them.
    Converted { k: Vec<f32>, v: Vec<f32>, d: usize, fast: bool },
}

// SAFETY: the pointers address the run's storage, which outlives the kernel's tasks, and nothing writes K or V
// while the attention step runs.
unsafe impl Sync for Kv {}

impl Kv {
    /// The K and V rows `keys` of (`b`, `g`) (row 0 the first of `keys`): in place where AVX2 is there, D and Dv
    /// are multiples of 8 and both are f16 or f32 rows of contiguous elements; else converted.
    fn of(a: &AttentionKernel, mem: &Memory, (b, g): (usize, usize), keys: std::ops::Range<usize>) -> Kv {
        let len = keys.len();
        let Dims { d, dv, .. } = a.dims();
        #[cfg(target_arch = "x86_64")]
        let fast = d % 8 == 0 && dv % 8 == 0 && super::qdot::fma_available();
        #[cfg(not(target_arch = "x86_64"))]
        let fast = false;
        #[cfg(target_arch = "x86_64")]
        if fast {
            let place = |x: &Leaf, w: usize, dt: DType| {
                let (start, st) = row_at(&x.layout, b, g, keys.start);
                let stride = x.layout.strides[x.layout.rank() - 2];
                let ok = st == 1 || w == 1;
                let ptr = mem.view(x.storage, x.dtype).rows_ptr(dt, start, (len, stride, w)).filter(|_| ok)?;
                Some((ptr, stride))
            };
            let (k16, v16) = (place(&a.k, d, DType::F16), place(&a.v, dv, DType::F16));
            if let (Some((k, ks)), Some((v, vs))) = (k16, v16) {
                return Kv::F16(
                    Rows { base: k.cast(), stride: ks, width: d },
                    Rows { base: v.cast(), stride: vs, width: dv },
                );
            }
            let (k32, v32) = (place(&a.k, d, DType::F32), place(&a.v, dv, DType::F32));
            if let (Some((k, ks)), Some((v, vs))) = (k32, v32) {
                return Kv::F32(
                    Rows { base: k.cast(), stride: ks, width: d },
                    Rows { base: v.cast(), stride: vs, width: dv },
                );
            }
        }
        let convert = |x: &Leaf, w: usize| {
            let view = mem.view(x.storage, x.dtype);
            let mut out = vec![0f32; len * w];
            for (si, row) in out.chunks_exact_mut(w).enumerate() {
                let (o, st) = row_at(&x.layout, b, g, keys.start + si);
                view.row_f32(o, st, row);
            }
            out
        };
        Kv::Converted { k: convert(&a.k, d), v: convert(&a.v, dv), d, fast }
    }

    /// Attention of up to four query rows (`q [4, D]`, the first `out.len() / Dv` of them used), each over its
    /// visible keys with its mask; each row's (largest score, sum of exponentials).
    fn attend(
        &self,
        (q, visible, mask): (&[f32], [usize; 4], [&[f32]; 4]),
        scale: f32,
        sc: &mut [f32],
        out: &mut [f32],
    ) -> [(f32, f32); 4] {
        match self {
            #[cfg(target_arch = "x86_64")]
            Kv::F16(k, v) => attend_block(q, (visible, mask), (*k, *v), scale, sc, out),
            #[cfg(target_arch = "x86_64")]
            Kv::F32(k, v) => attend_block(q, (visible, mask), (*k, *v), scale, sc, out),
            Kv::Converted { k, v, d, fast } => {
                let dv = v.len() / (k.len() / d).max(1);
                #[cfg(target_arch = "x86_64")]
                if *fast {
                    let (k, v) = (
                        Rows { base: k.as_ptr(), stride: *d, width: *d },
                        Rows { base: v.as_ptr(), stride: dv, width: dv },
                    );
                    return attend_block(q, (visible, mask), (k, v), scale, sc, out);
                }
                let _ = fast;
                // out holds exactly the block's rows
                let mut stats = [(f32::NEG_INFINITY, 0.0); 4];
                for (i, o) in out.chunks_exact_mut(dv).enumerate() {
                    let n = visible[i];
                    let (qi, kv) = (&q[i * d..(i + 1) * d], (&k[..n * d], &v[..n * dv]));
                    stats[i] = row_softmax_v(qi, kv, (scale, mask[i]), sc, o);
                }
                stats
            }
        }
    }
}

/// [`attend`] for the block's rows (1 to 4).
#[cfg(target_arch = "x86_64")]
fn attend_block<T: Lane>(
    q: &[f32],
    (visible, mask): ([usize; 4], [&[f32]; 4]),
    kv: (Rows<T>, Rows<T>),
    scale: f32,
    sc: &mut [f32],
    out: &mut [f32],
) -> [(f32, f32); 4] {
    let d = kv.0.width;
    let rows = out.len() / kv.1.width;
    let widen = |st: &[(f32, f32)]| std::array::from_fn(|i| st.get(i).copied().unwrap_or((f32::NEG_INFINITY, 0.0)));
    macro_rules! block {
        ($r:literal) => {{
            let blk = Block::<$r> {
                q: &q[..$r * d],
                visible: std::array::from_fn(|i| visible[i]),
                masks: std::array::from_fn(|i| mask[i]),
            };
            // SAFETY: the CPU has AVX2, FMA and F16C (`Kv::of` checked); K and V address `len` rows, at least
            // every row's visible count.
            widen(&unsafe { attend(&blk, kv, scale, sc, out) })
        }};
    }
    match rows {
        1 => block!(1),
        2 => block!(2),
        3 => block!(3),
        _ => block!(4),
    }
}

/// One attention row: `out = softmax(q·kᵀ·scale + mask)·v` over the keys `k [n, D]` and values `v [n, Dv]`
/// (f32, contiguous; `mask` empty or `n` long). No key gives zeros; a NaN score gives NaN (as PyTorch's softmax),
/// never zeros. Returns the softmax's (largest score, sum of exponentials).
fn row_softmax_v(
    q: &[f32],
    (k, v): (&[f32], &[f32]),
    (scale, mask): (f32, &[f32]),
    sc: &mut [f32],
    out: &mut [f32],
) -> (f32, f32) {
    let (d, dv) = (q.len(), out.len());
    let n = k.len() / d.max(1);
    let sc = &mut sc[..n];
    for (x, key) in sc.iter_mut().zip(k.chunks_exact(d)) {
        *x = dot(q, key) * scale;
    }
    let (max, sum) = softmax_in_place(sc, mask);
    out.iter_mut().for_each(|a| *a = 0.0);
    if sum == 0.0 {
        return (max, sum);
    }
    for (&p, val) in sc.iter().zip(v.chunks_exact(dv)) {
        out.iter_mut().zip(val).for_each(|(a, &x)| *a += p * x);
    }
    let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
    out.iter_mut().for_each(|a| *a *= inv);
    (max, sum)
}

/// `Σ a[i]·b[i]` with 16 independent sums added pairwise at the end (vector adds, where a sum in order would be
/// 15 dependent ones: most of a short row's time).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let n = a.len() / 16 * 16;
    for (ca, cb) in a[..n].chunks_exact(16).zip(b[..n].chunks_exact(16)) {
        for j in 0..16 {
            acc[j] += ca[j] * cb[j];
        }
    }
    for w in [8, 4, 2, 1] {
        for j in 0..w {
            acc[j] += acc[j + w];
        }
    }
    acc[0] + a[n..].iter().zip(&b[n..]).map(|(x, y)| x * y).sum::<f32>()
}
