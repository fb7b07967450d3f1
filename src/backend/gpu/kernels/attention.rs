//! Flash attention (`attention.wgsl`) and the combine pass of its split form (`attention_combine.wgsl`): the
//! two kernels share their parameters and are lowered together.

use crate::backend::gpu::kernel::{Binding, Dispatch, DynamicGrid, Family, KernelKey, KernelKind, SCRATCH};
use crate::backend::gpu::params::{params, vec4, Params, ParamsBlock, ParamsLayout};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::backend::gpu::wgsl::template::{compute_type, render};
use crate::compile::ir::{Program, Step};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{NodeId, Op};
use crate::shape::Layout;

const ATTENTION: &str = include_str!("attention.wgsl");
const COMBINE: &str = include_str!("attention_combine.wgsl");

params! {
    /// `attention.wgsl` and `attention_combine.wgsl`.
    AttentionParams {
        /// Query heads H.
        h: u32,
        /// Queries T.
        t: u32,
        /// Key positions S (the keys' length: the most the run-time length may be).
        s: u32,
        /// Query heads per K/V head (H / Hkv).
        group: u32,
        /// The KV length when it is not given at run time (S).
        static_len: u32,
        /// 1 for causal masking.
        causal: u32,
        /// Multiplies q·k.
        scale: f32,
        /// Splits of the keys per query (1 without the combine pass).
        splits: u32,
        /// Keys per split.
        split_len: u32,
        /// Batches B.
        batch: u32,
        /// The mask's offset within its binding.
        mask_offset: u32,
        /// The run-time length's offset within its binding.
        kv_len_offset: u32,
        /// q's strides (b, h, t, d).
        q_strides: [u32; 4],
        /// k's strides (b, g, s, d).
        k_strides: [u32; 4],
        /// v's strides (b, g, s, d).
        v_strides: [u32; 4],
        /// The mask's strides (b, h, t, s), broadcast.
        mask_strides: [u32; 4],
        /// q's offset within its binding.
        q_offset: u32,
        /// k's offset within its binding.
        k_offset: u32,
        /// v's offset within its binding.
        v_offset: u32,
        /// Head dim of q and k (the kernel's D, as a loop bound).
        d: u32,
        /// Head dim of v (DV).
        dv: u32,
        /// Keys a tile (BC).
        bc: u32,
        /// The sinks' offset within their binding.
        sinks_offset: u32,
        _pad1: u32,
    }
}

/// `attention.wgsl`: head dims `d` and `dv`, `br` query rows (of a K/V head's group) and `bc` keys a tile,
/// `partial` results of a split for the combine pass, an additive `mask`, a run-time length (`dyn_len`), attention
/// `sinks`; `decode` for one query a head (the rows are then the group's heads).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Attention {
    pub d: u32,
    pub dv: u32,
    pub br: u32,
    pub bc: u32,
    pub partial: bool,
    pub mask: bool,
    pub dyn_len: bool,
    pub sinks: bool,
    pub decode: bool,
}

impl Family for Attention {
    fn name(&self) -> String {
        let stage = if self.decode { "decode" } else { "prefill" };
        format!("attention {stage}{}", if self.partial { " split" } else { "" })
    }

    fn params(&self) -> ParamsLayout {
        AttentionParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        let mut v = vec![Binding::output("out", key.out), Binding::input("q", key.ins[0])];
        v.extend([Binding::input("k", key.ins[1]), Binding::input("v", key.ins[2])]);
        let mut rest = key.ins[3..].iter();
        let mut next = |name: &str| Binding::input(name, *rest.next().expect("a binding per flag"));
        if self.mask {
            v.push(next("mask"));
        }
        if self.dyn_len {
            v.push(next("kv"));
        }
        if self.sinks {
            v.push(next("sinks"));
        }
        if self.partial {
            v.push(Binding { output: true, ..next("fin") });
        }
        v
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        let Attention { d, dv, br, bc, partial, mask, dyn_len, sinks, .. } = *self;
        // the mask's and the length's accessors exist only in the variants that bind them
        let mask_fn = if mask {
            "fn mask_at(b: u32, h: u32, t: u32, s: u32) -> f32 {\n    let st = P.mask_strides;\n    \
             return f32(ld_mask(P.mask_offset + b * st.x + h * st.y + t * st.z + s * st.w));\n}"
        } else {
            "fn mask_at(b: u32, h: u32, t: u32, s: u32) -> f32 {\n    return 0.0;\n}"
        };
        let visible_fn = if mask { VISIBLE_END } else { VISIBLE_END_ALL };
        let n = |v: u32| v.to_string();
        let subs = [
            ("BINDINGS", bindings),
            ("OUT_C", compute_type(key.out).to_string()),
            ("BR", n(br)),
            ("BC", n(bc)),
            ("D", n(d)),
            ("DV", n(dv)),
            ("PARTIAL", partial.to_string()),
            ("LPR", n(lanes_per_row(br, bc))),
            ("Q_SHARED", n(br * d)),
            ("K_SHARED", n(bc * (d + 1))),
            ("V_SHARED", n(bc * dv)),
            ("P_SHARED", n(br * bc)),
            ("LENGTH_FN", length_fn(dyn_len, true)),
            ("FIN_STORE", fin_store(key, partial)),
            ("MASK_FN", mask_fn.into()),
            ("VISIBLE_FN", visible_fn.into()),
            ("SINK_FN", sink_fn(sinks)),
        ];
        render(ATTENTION, &subs)
    }
}

/// `attention_combine.wgsl`: head dim `dv`; with `dyn_len`, only the splits a run-time length reaches; `sinks`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AttentionCombine {
    pub dv: u32,
    pub dyn_len: bool,
    pub sinks: bool,
}

impl Family for AttentionCombine {
    fn name(&self) -> String {
        "attention combine".into()
    }

    fn params(&self) -> ParamsLayout {
        AttentionParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        let mut v = vec![Binding::output("out", key.out), Binding::input("src0", key.ins[0])];
        let mut rest = key.ins[1..].iter();
        if self.dyn_len {
            v.push(Binding::input("kv", *rest.next().expect("a binding per flag")));
        }
        if self.sinks {
            v.push(Binding::input("sinks", *rest.next().expect("a binding per flag")));
        }
        v
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        let subs = [
            ("BINDINGS", bindings),
            ("OUT_C", compute_type(key.out).to_string()),
            ("DV", self.dv.to_string()),
            ("MAX_SPLITS", MAX_SPLITS.to_string()),
            ("LENGTH_FN", length_fn(self.dyn_len, false)),
            ("SINK_FN", sink_fn(self.sinks)),
        ];
        render(COMBINE, &subs)
    }
}

/// `sink_weight(h, m)`: head h's sink logit as a weight at a row's largest score m (`exp(sink − m)`), 0 without
/// sinks.
fn sink_fn(sinks: bool) -> String {
    if sinks {
        "fn sink_weight(h: u32, m: f32) -> f32 {\n    return exp(f32(ld_sinks(P.sinks_offset + h)) - m);\n}".into()
    } else {
        "fn sink_weight(h: u32, m: f32) -> f32 {\n    return 0.0;\n}".into()
    }
}

/// `visible_end(lid, (b, g, row0), s_begin, s_end)`, with a mask: one past the last key of `s_begin..s_end`
/// that any of the workgroup's rows sees (its mask above `HIDDEN`, or NaN), at least `s_begin`; the keys after it
/// are masked for every row and go unread. Uniform (through `workgroupUniformLoad`): call it in uniform control
/// flow.
const VISIBLE_END: &str = "var<workgroup> visible_a: atomic<u32>;
var<workgroup> visible_s: u32;

fn visible_end(lid: u32, bgr: vec3<u32>, s_begin: u32, s_end: u32) -> u32 {
    let rows = P.group * P.t;
    if (lid == 0u) {
        atomicStore(&visible_a, s_begin);
    }
    workgroupBarrier();
    var last = s_begin;
    for (var s = s_begin + lid; s < s_end; s = s + WGS) {
        for (var r = 0u; r < BR; r = r + 1u) {
            if (bgr.z + r < rows) {
                let ht = row_of(bgr.y, bgr.z + r);
                let m = mask_at(bgr.x, ht.x, ht.y, s);
                if (m > HIDDEN || is_nan(m)) {
                    last = s + 1u;
                }
            }
        }
    }
    atomicMax(&visible_a, last);
    workgroupBarrier();
    if (lid == 0u) {
        visible_s = atomicLoad(&visible_a);
    }
    return workgroupUniformLoad(&visible_s);
}";

/// `visible_end` without a mask: every key of the range.
const VISIBLE_END_ALL: &str = "fn visible_end(lid: u32, bgr: vec3<u32>, s_begin: u32, s_end: u32) -> u32 {
    return s_end;
}";

/// In a split variant: the final output's store when the length reaches only the first split.
fn fin_store(key: &KernelKey, partial: bool) -> String {
    if !partial {
        return String::new();
    }
    let c = compute_type(*key.ins.last().expect("the final output's dtype"));
    format!(
        "if ((L + P.split_len - 1u) / P.split_len <= 1u) {{\n                    \
         st_fin(((b * T + t) * P.h + hi) * ndv + d, {c}(finish(r, hi, acc[j])));\n                }}"
    )
}

/// `kv_length()`: the run-time length (clamped at 0) where the variant binds one, else the static length. With
/// `uniform`, the run-time length goes through `workgroupUniformLoad`, so that loops bounded by it may hold
/// barriers: a value read from a storage buffer is not uniform to WGSL's uniformity analysis (Tint rejects the
/// kernel; naga does not check), one loaded that way is. That form must be called in uniform control flow.
fn length_fn(dyn_len: bool, uniform: bool) -> String {
    if dyn_len && uniform {
        "var<workgroup> kv_length_s: u32;\n\nfn kv_length() -> u32 {\n    \
         // every invocation stores the same value\n    kv_length_s = u32(max(ld_kv(P.kv_len_offset), 0));\n    \
         return workgroupUniformLoad(&kv_length_s);\n}"
            .into()
    } else if dyn_len {
        "fn kv_length() -> u32 {\n    return u32(max(ld_kv(P.kv_len_offset), 0));\n}".into()
    } else {
        "fn kv_length() -> u32 {\n    return P.static_len;\n}".into()
    }
}

/// Workgroup memory of an attention tile, in bytes, as WebGPU counts it (each variable's size rounded up to 16
/// bytes): the queries, the keys (each padded by a word), the values, the scores, the row statistics' partials
/// (64), the rows' running values and flags (four arrays of `br`), and three words of state.
pub(crate) fn shared_bytes(d: u32, dv: u32, br: u32, bc: u32) -> u32 {
    let words = |n: u32| (4 * n).div_ceil(16) * 16;
    let tiles = [br * d, bc * (d + 1), bc * dv, br * bc, 64].map(words).iter().sum::<u32>();
    tiles + 4 * words(br) + 3 * words(1)
}

/// Invocations a row in `attention.wgsl`'s row statistics (LPR): the largest power of two with `br` rows of it
/// within the workgroup's 64 and at most `bc`, the tile's keys.
fn lanes_per_row(br: u32, bc: u32) -> u32 {
    let most = (64 / br.max(1)).min(bc).max(1);
    1 << most.ilog2()
}

/// Strides (b, h, t, last) of a `[.., h, t, last]` layout, batch stride 0 without a batch dim.
fn strides4(l: &Layout) -> [u32; 4] {
    let r = l.rank();
    let b = if r == 4 { l.strides[0] } else { 0 };
    vec4([b, l.strides[r - 3], l.strides[r - 2], l.strides[r - 1]])
}

/// The attention step's operands.
struct AttentionStep {
    pub q: NodeId,
    pub k: NodeId,
    pub v: NodeId,
    pub mask: Option<NodeId>,
    pub kv_len: Option<NodeId>,
    pub sinks: Option<NodeId>,
    pub scale: f32,
    pub causal: bool,
}

/// Tile sizes (BR query rows, BC keys) for head dims `d`, `dv`, `t` queries and `group` query heads a K/V head
/// that fit `max_shared` bytes: a decode step's rows are the group's heads (up to 16), a prefill's 16.
fn tiles(d: u32, dv: u32, (t, group): (usize, usize), max_shared: u32) -> Result<(u32, u32)> {
    let br = if t == 1 { group.clamp(1, 16) as u32 } else { 16 };
    [64, 32, 16, 8, 4].into_iter().find(|&bc| shared_bytes(d, dv, br, bc) <= max_shared).map(|bc| (br, bc)).ok_or_else(
        || Error::LimitExceeded {
            what: format!("attention with head dims {d}/{dv}: workgroup memory of its smallest tile"),
            size: shared_bytes(d, dv, br, 4) as u64,
            unit: "bytes",
            limit_name: "max_compute_workgroup_storage_size",
            limit: max_shared as u64,
        },
    )
}

/// The attention step's uniforms, for `splits` splits of `split_len` keys and tiles of `bc` keys.
fn params(p: &Program, a: &AttentionStep, splits: usize, split_len: usize, bc: u32) -> AttentionParams {
    let nodes = &p.nodes;
    let (lq, lk, lv) = (&nodes[a.q].layout, &nodes[a.k].layout, &nodes[a.v].layout);
    let r = lq.rank();
    let (h, tq, d) = (lq.shape[r - 3], lq.shape[r - 2], lq.shape[r - 1]);
    let (hkv, s, dv) = (lk.shape[r - 3], lk.shape[r - 2], lv.shape[r - 1]);
    let (mask_strides, mask_offset) = match a.mask {
        Some(m) => {
            let mut full = lq.shape.clone();
            full[r - 1] = s;
            let l = nodes[m].layout.broadcast_operand(&full);
            (strides4(&l), l.offset as u32)
        }
        None => ([0; 4], 0),
    };
    AttentionParams {
        h: h as u32,
        t: tq as u32,
        s: s as u32,
        group: (h / hkv) as u32,
        static_len: s as u32,
        causal: a.causal as u32,
        scale: a.scale,
        splits: splits as u32,
        split_len: split_len as u32,
        batch: if r == 4 { lq.shape[0] as u32 } else { 1 },
        mask_offset,
        kv_len_offset: a.kv_len.map_or(0, |l| nodes[l].layout.offset as u32),
        q_strides: strides4(lq),
        k_strides: strides4(lk),
        v_strides: strides4(lv),
        mask_strides,
        q_offset: lq.offset as u32,
        k_offset: lk.offset as u32,
        v_offset: lv.offset as u32,
        d: d as u32,
        dv: dv as u32,
        bc,
        sinks_offset: a.sinks.map_or(0, |s| nodes[s].layout.offset as u32),
        _pad1: 0,
    }
}

/// Lowers attention: one dispatch, or for one query over many keys (decode) a split over the keys and a combine
/// pass through the plan's scratch buffer.
pub(crate) fn lower(p: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let Step::Op(Op::Attention { q, k, v, mask, kv_len, sinks, scale, causal }) = p.nodes[id].step else {
        return None;
    };
    Some(attention(p, id, &AttentionStep { q, k, v, mask, kv_len, sinks, scale, causal }, t))
}

fn attention(p: &Program, id: NodeId, a: &AttentionStep, t: &GpuTarget) -> Result<Vec<Dispatch>> {
    let nodes = &p.nodes;
    let (lq, lk, lv) = (&nodes[a.q].layout, &nodes[a.k].layout, &nodes[a.v].layout);
    let r = lq.rank();
    let (h, tq, d) = (lq.shape[r - 3], lq.shape[r - 2], lq.shape[r - 1]);
    let (hkv, s, dv) = (lk.shape[r - 3], lk.shape[r - 2], lv.shape[r - 1]);
    let group = h / hkv.max(1);
    let batch = if r == 4 { lq.shape[0] } else { 1 };
    let (br, bc) = tiles(d as u32, dv as u32, (tq, group), t.max_shared)?;
    // the splits' partial rows (DV + 2 words each) within half of a binding: a batch of long rows splits less
    let row_bytes = (batch * h * tq * (dv + 2) * 4).max(1) as u64;
    let most = (t.max_binding / 2 / row_bytes).min(MAX_SPLITS as u64) as usize;
    let split_len = if tq == 1 { decode_split_len(s, bc, t.decode_split_min, most) } else { s };
    let splits = s.div_ceil(split_len);
    debug_assert!(splits <= MAX_SPLITS, "the combine pass stages at most MAX_SPLITS splits");
    let params = params(p, a, splits, split_len, bc);
    let partial = splits > 1;
    let (mask, dyn_len, sinks) = (a.mask.is_some(), a.kv_len.is_some(), a.sinks.is_some());
    let decode = tq == 1;
    let kind =
        KernelKind::new(Attention { d: d as u32, dv: dv as u32, br, bc, partial, mask, dyn_len, sinks, decode });
    let mut ins = vec![nodes[a.q].dtype, nodes[a.k].dtype, nodes[a.v].dtype];
    let out = nodes[id].storage;
    let mut bindings =
        vec![if partial { SCRATCH } else { out }, nodes[a.q].storage, nodes[a.k].storage, nodes[a.v].storage];
    for n in a.mask.iter().chain(&a.kv_len).chain(&a.sinks) {
        ins.push(nodes[*n].dtype);
        bindings.push(nodes[*n].storage);
    }
    if partial {
        // the output too: a run whose length reaches one split writes it directly, and skips the combine
        ins.push(nodes[id].dtype);
        bindings.push(out);
    }
    // a workgroup's rows are of one K/V head's group of heads (its K/V tiles staged once for all of them)
    let z = batch * (group * tq).div_ceil(br as usize);
    if [splits, hkv, z].into_iter().any(|n| n > t.max_groups as usize) {
        return Err(Error::LimitExceeded {
            what: format!(
                "attention over {splits} splits, {hkv} K/V heads and {z} query blocks: workgroups per dimension"
            ),
            size: splits.max(hkv).max(z) as u64,
            unit: "workgroups",
            limit_name: "max_compute_workgroups_per_dimension",
            limit: t.max_groups as u64,
        });
    }
    let workgroups = [splits as u32, hkv as u32, z as u32];
    let out_dtype = if partial { DType::F32 } else { nodes[id].dtype };
    let mut first =
        dispatch(KernelKey::new(kind, out_dtype, ins), Params::new(params), bindings, workgroups);
    if !partial {
        return Ok(vec![first]);
    }
    // a KV cache's capacity sets the splits; a run-time length the run uploads sets how many are dispatched
    let host_len = a.kv_len.filter(|&l| p.inputs.contains(&nodes[l].storage));
    let grid_of = |l: NodeId, skip_single| DynamicGrid {
        input: nodes[l].storage,
        offset: nodes[l].layout.offset,
        per_group: split_len as u32,
        max_len: s as u32,
        skip_single,
    };
    first.dynamic = host_len.map(|l| grid_of(l, false));
    first.scratch = (batch * h * tq * splits * (dv + 2) * 4) as u64;
    let mut ins = vec![DType::F32];
    let mut bindings = vec![out, SCRATCH];
    for n in a.kv_len.iter().chain(&a.sinks) {
        ins.push(nodes[*n].dtype);
        bindings.push(nodes[*n].storage);
    }
    let combine = AttentionCombine { dv: dv as u32, dyn_len, sinks };
    let key = KernelKey::new(KernelKind::new(combine), nodes[id].dtype, ins);
    let groups = grid("attention combine", (batch * h * tq) as u64, t.max_groups)?;
    let mut combine = dispatch(key, Params::new(params), bindings, groups);
    combine.scratch = first.scratch;
    combine.dynamic = host_len.map(|l| grid_of(l, true));
    Ok(vec![first, combine])
}

/// Most splits of a decode step's keys: the combine pass stages each split's weight in workgroup memory.
pub(crate) const MAX_SPLITS: usize = 256;

/// Keys a split of a decode step over `s` key positions with tiles of `bc` keys: at least `min` keys (the target's
/// [`GpuTarget::decode_split_min`]), at least one tile, and enough that `s` needs at most `most` splits (at most
/// [`MAX_SPLITS`]), in whole tiles; at most `s` keys (one split). On a GPU that is one tile, so that a step's
/// critical path is one tile's work whatever its length (the run-time length sets how many splits run, each on a
/// workgroup of its own, as flash-decoding spreads a long context over the GPU's cores). A split's length is fixed
/// by the plan, not by the run-time length or the batch, so that a row's bits do not depend on the other rows of a
/// batched step.
fn decode_split_len(s: usize, bc: u32, min: u32, most: usize) -> usize {
    let bc = bc as usize;
    let keys = s.div_ceil(most.clamp(1, MAX_SPLITS)).max(min as usize).min(s);
    keys.div_ceil(bc).max(1) * bc
}

/// Prefill and decode tiles, the split pass and its combine, with and without mask and run-time length; with
/// sinks as gpt-oss's layers take them (head dim 64, masked, a run-time length).
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    use DType::{F16, F32, I32};
    for (d, dv, br, bc) in [(64, 64, 16, 32), (64, 64, 1, 32), (64, 64, 3, 32), (32, 32, 16, 64), (128, 128, 16, 16)] {
        for i in 0..16 {
            let (partial, mask, dyn_len, sinks) = (i & 4 != 0, i & 2 != 0, i & 1 != 0, i & 8 != 0);
            let decode = br < 16;
            if (partial && !decode) || (sinks && (d != 64 || !mask || !dyn_len)) {
                continue;
            }
            for (q, kv) in [(F32, F32), (F32, F16), (F16, F16)] {
                let kind = KernelKind::new(Attention { d, dv, br, bc, partial, mask, dyn_len, sinks, decode });
                let mut ins = vec![q, kv, kv];
                ins.extend(mask.then_some(q));
                ins.extend(dyn_len.then_some(I32));
                ins.extend(sinks.then_some(F32));
                ins.extend(partial.then_some(q));
                keys.push(KernelKey::new(kind, if partial { F32 } else { q }, ins));
            }
        }
        for out in [F32, F16] {
            let combine = |dyn_len, sinks| KernelKind::new(AttentionCombine { dv, dyn_len, sinks });
            keys.push(KernelKey::new(combine(false, false), out, vec![F32]));
            keys.push(KernelKey::new(combine(true, false), out, vec![F32, I32]));
            if d == 64 {
                keys.push(KernelKey::new(combine(true, true), out, vec![F32, I32, F32]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::decode_split_len;

    #[test]
    fn decode_splits_are_whole_tiles_within_their_bounds() {
        // a GPU: one tile; an adapter on CPU cores: 256 keys
        assert_eq!(decode_split_len(4096, 64, 0, 256), 64);
        assert_eq!(decode_split_len(4096, 32, 256, 256), 256);
        // at most 256 splits (100,000 keys: 391 a split, rounded up to whole tiles)
        assert_eq!(decode_split_len(100_000, 64, 0, 256), 448);
        // fewer where the partial rows would not fit the scratch: 4 splits, or one
        assert_eq!(decode_split_len(4096, 64, 0, 4), 1024);
        assert_eq!(decode_split_len(4096, 64, 0, 0), 4096);
        // a minimum past the keys (WEBTENSOR_DECODE_SPLIT=4294967295) is one split, not an overflow
        assert_eq!(decode_split_len(4096, 64, u32::MAX, 256), 4096);
        assert_eq!(decode_split_len(100, 64, u32::MAX, 256), 128);
    }
}
