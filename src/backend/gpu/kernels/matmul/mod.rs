//! The matmul family: four kernels, one file each beside its shader (generic, tiled, cooperative-matrix,
//! mat-vec), their shared parameters and epilogue (`common.rs`), and here the lowering that chooses among them,
//! their parameters and grid, and their variant list.
//!
//! The tiled kernel (`matmul_tiled.wgsl`) needs each operand's contiguous axis to have stride 1 and a length that
//! is a multiple of 4, with every other stride and offset a multiple of 4; the mat-vec kernel needs a one-row A
//! with contiguous K; the cooperative-matrix kernel needs the tiled kernel's conditions, f16 A and B (or a
//! block-quantized B, see `coop_operands`), and an adapter with cooperative matrices. Everything else takes the generic strided kernel, which handles any layout.

mod common;
mod coop;
mod generic;
mod matvec;
mod tiled;

use crate::tuning::{MatmulChoice, COOP_CONFIGS, DEFAULT_CONFIG, TILE_CONFIGS};
use crate::backend::gpu::config::MatmulKernels;
use crate::backend::gpu::kernel::{Dispatch, KernelKey, KernelKind, MatVecReduce};
use crate::backend::gpu::params::{set_packed, vec4, Params};
use crate::backend::gpu::target::{dispatch, grid, GpuTarget};
use crate::compile::ir::{ElemOp, Expr, NormIn, Program, Step};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::ops::{BinaryOp, GluOp, MatmulPrecision, UnaryOp};
pub(crate) use common::MatmulParams;
pub(crate) use coop::MatMulCoop;
pub(crate) use generic::MatMul;
pub(crate) use matvec::{MatVec, MatVecNorm};
pub(crate) use tiled::MatMulTiled;

/// What choosing a kernel needs to know about one matmul: sizes, strides (batch0, batch1, row, col) and offsets
/// in elements, all already broadcast to the output's batch dims.
#[derive(Clone)]
pub(crate) struct MatmulShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batches: usize,
    pub sa: [usize; 4],
    pub sb: [usize; 4],
    pub oa: usize,
    pub ob: usize,
}

fn aligned(v: &[usize]) -> bool {
    v.iter().all(|x| x % 4 == 0)
}

/// The operand layouts the vec4 kernels accept: A's contiguous axis (Some(true) = k), B's (Some(true) = n).
fn vec4_layouts(s: &MatmulShape) -> (Option<bool>, Option<bool>) {
    let a = if s.sa[3] == 1 && s.k.is_multiple_of(4) && aligned(&[s.sa[0], s.sa[1], s.sa[2], s.oa]) {
        Some(true)
    } else if s.sa[2] == 1 && s.m.is_multiple_of(4) && aligned(&[s.sa[0], s.sa[1], s.sa[3], s.oa]) {
        Some(false)
    } else {
        None
    };
    let b = if s.sb[3] == 1 && s.n.is_multiple_of(4) && aligned(&[s.sb[0], s.sb[1], s.sb[2], s.ob]) {
        Some(true)
    } else if s.sb[2] == 1 && s.k.is_multiple_of(4) && aligned(&[s.sb[0], s.sb[1], s.sb[3], s.ob]) {
        Some(false)
    } else {
        None
    };
    (a, b)
}

/// A workgroup count along one grid dimension, or [`Error::LimitExceeded`] naming the matmul.
fn groups(s: &MatmulShape, g: u64, what: &str, max_groups: u32) -> Result<u32> {
    if g > max_groups as u64 {
        return Err(Error::LimitExceeded {
            what: format!("matmul [{}, {}, {}] x {} batches: {what} = {g} workgroups", s.m, s.k, s.n, s.batches),
            size: g,
            unit: "workgroups",
            limit_name: "max_compute_workgroups_per_dimension",
            limit: max_groups as u64,
        });
    }
    Ok(g as u32)
}

/// The kernel and its workgroup grid for a matmul of `shape`. `epi` is a fused epilogue; when `scalar_only` (an
/// epilogue operand shares memory with A or B, so one scalar binding must serve both), the generic kernel is
/// used. `coop_operands`: A and B are both f16, or B is block-quantized and A may be rounded to f16 (see
/// [`coop_operands`]): a cooperative-matrix candidate.
pub(crate) fn choose(
    s: &MatmulShape,
    (epi, dual, norm): (Option<Expr>, bool, Option<MatVecNorm>),
    scalar_only: bool,
    coop_operands: bool,
    t: &GpuTarget,
) -> Result<(KernelKind, [u32; 3])> {
    let MatmulKernels { tiled: choice, coop, .. } = t.matmul;
    let (a, b) = if scalar_only { (None, None) } else { vec4_layouts(s) };
    // batches past one dispatch's z count are dispatched in groups (see `lower`)
    let z = s.batches.min(t.max_groups.max(1) as usize) as u32;
    if s.m == 1 && a == Some(true) {
        if let Some(b_ncontig) = b {
            // subgroupAdd is used when subgroups tile each 32-lane row group exactly
            let fits = t.subgroup_size.is_some_and(|g| g > 0 && 32 % g == 0) && !b_ncontig;
            let reduce = match t.matvec {
                Some(MatVecReduce::Subgroups) | None if fits => MatVecReduce::Subgroups,
                Some(MatVecReduce::Serial) => MatVecReduce::Serial,
                _ => MatVecReduce::Shared,
            };
            let mv = MatVec { b_ncontig, reduce, epi, dual, norm };
            let [x, y, _] = grid("matmul (mat-vec)", s.n.div_ceil(mv.columns() as usize) as u64, t.max_groups)?;
            return Ok((KernelKind::new(mv), [x, y, z]));
        }
    }
    if dual || norm.is_some() {
        // `dual_matvec` and `norm_matvec` allowed only what runs as the mat-vec: a bug if reached
        let reason = format!("a dual or normed matmul of [{}, {}] x [{}, {}] that is no mat-vec", s.m, s.k, s.k, s.n);
        return Err(Error::Unsupported { op: "matmul".into(), backend: "GPU".into(), reason });
    }
    if let (Some(cfg), Some(a_kcontig), Some(b_ncontig)) = (coop, a, b) {
        if coop_operands && t.coop_frag == Some(cfg.frag) && cfg.shared_bytes() <= t.max_shared {
            let gx = groups(s, s.n.div_ceil(cfg.bn() as usize) as u64, "N / tile", t.max_groups)?;
            let gy = groups(s, s.m.div_ceil(cfg.bm() as usize) as u64, "M / tile", t.max_groups)?;
            let emulated = t.coop_emulated;
            let kind = KernelKind::new(MatMulCoop { cfg, a_kcontig, b_ncontig, epi, emulated });
            return Ok((kind, [gx, gy, z]));
        }
    }
    let tiled = match choice {
        MatmulChoice::Tiled(cfg) => Some(cfg),
        MatmulChoice::Coop(_) => Some(DEFAULT_CONFIG),
        MatmulChoice::Generic => None,
    };
    if let (Some(cfg), Some(a_kcontig), Some(b_ncontig)) = (tiled, a, b) {
        if cfg.shared_bytes() <= t.max_shared {
            let gx = groups(s, s.n.div_ceil(64 * cfg.rn as usize) as u64, "N / tile", t.max_groups)?;
            let gy = groups(s, s.m.div_ceil(64 * cfg.rm as usize) as u64, "M / tile", t.max_groups)?;
            let out_vec4 = s.n.is_multiple_of(4);
            let kind = KernelKind::new(MatMulTiled { cfg, a_kcontig, b_ncontig, out_vec4, epi });
            return Ok((kind, [gx, gy, z]));
        }
    }
    let gx = groups(s, s.n.div_ceil(64) as u64, "N / 64", t.max_groups)?;
    let gy = groups(s, s.m.div_ceil(64) as u64, "M / 64", t.max_groups)?;
    Ok((KernelKind::new(MatMul { epi }), [gx, gy, z]))
}

/// Rows up to which a matmul takes one serial mat-vec a row on adapters that run on CPU cores, where a tile of the
/// tiled kernel (128 rows) would mostly compute padding. SmolLM2's prefill of 5 tokens: 18.0 -> 3.8 s on
/// SwiftShader, 3.6 -> 1.1 s on lavapipe; of 26 tokens on lavapipe: 3.9 s with 32 here, 6.1 s with 8.
const SERIAL_ROWS: usize = 32;

/// Whether matmul `s` runs as one serial mat-vec a row (see [`SERIAL_ROWS`]): 2..=32 rows, no batch dims, A with
/// K contiguous, B in a vec4 layout and within one binding (`b_bytes`: its storage), on a target that takes the
/// serial mat-vec, unless the plan pins its matmul kernels.
fn rows_as_batch(s: &MatmulShape, b_bytes: Option<usize>, scalar_only: bool, t: &GpuTarget) -> bool {
    let (a, b) = vec4_layouts(s);
    t.matvec == Some(MatVecReduce::Serial)
        && !t.matmul.pinned
        && b_bytes.is_some_and(|x| x as u64 <= t.max_binding)
        && s.batches == 1
        && (2..=SERIAL_ROWS).contains(&s.m)
        && !scalar_only
        && a == Some(true)
        && b.is_some()
}

/// Recasts `[m, k] @ [k, n]` as m mat-vecs: the rows become batch dim 1 (A's row stride its stride there, B
/// broadcast, each epilogue operand's row stride its batch-1 stride; output rows lie `ldc` = n apart as batches of
/// one row do). Returns the batch count, m.
fn one_matvec_a_row(s: &mut MatmulShape, p: &mut MatmulParams) -> usize {
    let rows = s.m;
    s.sa[1] = s.sa[2];
    s.sb[1] = 0;
    s.m = 1;
    s.batches = rows;
    p.m = 1;
    p.batch1 = rows as u32;
    p.a_strides[1] = p.a_strides[2];
    p.b_strides[1] = 0;
    for st in p.epi_strides.iter_mut() {
        st[1] = st[2];
    }
    rows
}

/// Lowers matmul steps (`a @ b`, optionally with a fused epilogue over extra operands) to dispatches: one, or
/// one per group of batches when there are more than a dispatch's z may count.
pub(crate) fn lower(program: &Program, id: NodeId, t: &GpuTarget) -> Option<Result<Vec<Dispatch>>> {
    let Step::MatMul { a, b, b2, epilogue, norm, prec } = &program.nodes[id].step else { return None };
    if let Some(b2) = b2 {
        if !dual_matvec(program, (*a, *b, *b2), t) {
            return Some(Err(declined(program, id, "a dual matmul runs only as a mat-vec of like weights")));
        }
    }
    if let Some(nm) = norm {
        if !norm_matvec(program, id, (*a, nm.weight), t) {
            return Some(Err(declined(program, id, "a normed matmul runs only as a mat-vec with its own bindings")));
        }
    }
    Some(lower_matmul(program, id, (*a, *b, *b2), (epilogue.as_ref(), norm.as_ref()), *prec, t))
}

/// The error for a fused matmul step whose kernel is missing (its fusion rule asks first: see `Target::lowers`).
fn declined(program: &Program, id: NodeId, reason: &str) -> Error {
    Error::Unsupported { op: program.nodes[id].step.name(), backend: "GPU".into(), reason: reason.into() }
}

/// Whether `a @ b` may run on cooperative matrices (f16 operands, f32 accumulation): A and B f16; or B in a
/// block-quantized format (a language model's weight, decoded to f16 as it is staged) and A f32 or f16 rounded
/// to f16 on load, unless the matmul's precision is `F32` — llama.cpp's f16 tensor-core path for quantized
/// weights. bf16 weights (whose range f16 lacks) keep the tiled kernel.
fn coop_operands(a: DType, b: DType, prec: MatmulPrecision) -> bool {
    let blocks = b.block_size() > 1;
    (a == DType::F16 && b == DType::F16) || (blocks && a.is_float() && prec == MatmulPrecision::Default)
}

/// Whether node `n`'s storage fits one binding of the target.
fn fits_binding(program: &Program, n: NodeId, t: &GpuTarget) -> bool {
    let st = &program.nodes[program.nodes[n].storage];
    st.dtype.bytes_of(st.layout.numel()).is_some_and(|x| x as u64 <= t.max_binding)
}

/// `a [m, K] @ b [K, N]` (both 2-D, A's rows and B K-contiguous) where it runs as the mat-vec kernel: one row, or
/// rows as batches on adapters with the serial mat-vec. `None` otherwise.
fn as_matvec(program: &Program, a: NodeId, b: NodeId, t: &GpuTarget) -> Option<MatmulShape> {
    let (la, lb) = (&program.nodes[a].layout, &program.nodes[b].layout);
    if la.rank() != 2 || lb.rank() != 2 {
        return None;
    }
    let (m, k, n) = (la.shape[0], la.shape[1], lb.shape[1]);
    let pad = |s: &[usize]| [0, 0, s[0], s[1]];
    let s = MatmulShape { m, n, k, batches: 1, sa: pad(&la.strides), sb: pad(&lb.strides), oa: la.offset, ob: lb.offset };
    let one_row = m == 1 || rows_as_batch(&s, Some(0), false, t);
    (one_row && vec4_layouts(&s) == (Some(true), Some(false))).then_some(s)
}

/// Whether matmul step `matmul` (`a @ b`, or a dual `a @ b`, `a @ b2`) lowers to a mat-vec that norms its A on
/// load when A is `rms_norm(x) · weight` (the `norm_prologue` fusion): x f32 `[m, K]` with K contiguous and every
/// offset a multiple of 4, B K-contiguous, the weight (where there is one) `[K]`, contiguous, at an offset that is
/// a multiple of 4, in a storage no other operand uses, no epilogue operand in A's or B's memory, where the matmul
/// runs as the mat-vec kernel (one row, or rows as batches on adapters with the serial mat-vec).
fn norm_matvec(program: &Program, matmul: NodeId, (x, weight): (NodeId, Option<NodeId>), t: &GpuTarget) -> bool {
    let nodes = &program.nodes;
    let Step::MatMul { b, b2, epilogue, .. } = &nodes[matmul].step else { return false };
    let Some(s) = as_matvec(program, x, *b, t) else { return false };
    let operands = [Some(x), Some(*b), *b2].map(|o| o.map(|o| nodes[o].storage));
    let epilogue_storages = || epilogue.iter().flat_map(|(_, s)| s.iter()).map(|&o| Some(nodes[o].storage));
    // an epilogue operand in A's or B's memory makes `lower_matmul` take the generic kernel (`scalar_only`)
    let scalar_only = epilogue_storages().any(|st| operands.contains(&st));
    let weight_ok = weight.is_none_or(|w| {
        let (lw, own) = (&nodes[w].layout, Some(nodes[w].storage));
        lw.is_contiguous()
            && lw.offset.is_multiple_of(4)
            && fits_binding(program, w, t)
            && !operands.contains(&own)
            && !epilogue_storages().any(|st| st == own)
    });
    nodes[matmul].layout.rank() == 2
        && s.oa.is_multiple_of(4)
        && s.k.is_multiple_of(4)
        && !scalar_only
        && weight_ok
        && fits_binding(program, x, t)
        && fits_binding(program, *b, t)
}

/// Whether `a @ b` and `a @ b2` lower to one dual mat-vec (the `dual_matmul` fusion): A `[m, K]` and both weights
/// `[K, N]` views (K contiguous) of one dtype and layout, whose bindings need no split, where the matmul runs as
/// the mat-vec kernel (one row, or rows as batches on adapters with the serial mat-vec).
fn dual_matvec(program: &Program, (a, b, b2): (NodeId, NodeId, NodeId), t: &GpuTarget) -> bool {
    let nodes = &program.nodes;
    let (lb, lb2) = (&nodes[b].layout, &nodes[b2].layout);
    let Some(s) = as_matvec(program, a, b, t) else { return false };
    let s2 = MatmulShape { ob: lb2.offset, ..s };
    lb.shape == lb2.shape
        && lb.strides == lb2.strides
        && nodes[b].dtype == nodes[b2].dtype
        && [a, b, b2].into_iter().all(|n| fits_binding(program, n, t))
        && vec4_layouts(&s2) == (Some(true), Some(false))
}

/// A matmul dispatch's parameters, input dtypes and bindings as they are filled.
struct Bound<'a> {
    p: &'a mut MatmulParams,
    ins: &'a mut Vec<DType>,
    bindings: &'a mut Vec<NodeId>,
}

impl Bound<'_> {
    /// Binds the epilogue's operands of matmul `id` (of `a`, `b`, `b2`): its expression, and whether one operand
    /// shares memory with A or B, so one scalar binding must serve both (the generic kernel then).
    fn epilogue(
        &mut self,
        program: &Program,
        id: NodeId,
        (a, b, b2): (NodeId, NodeId, Option<NodeId>),
        epilogue: Option<&(Expr, Vec<NodeId>)>,
    ) -> (Option<Expr>, bool) {
        let nodes = &program.nodes;
        let Some((expr, srcs)) = epilogue else { return (None, false) };
        let mut scalar_only = false;
        for (j, &s) in srcs.iter().enumerate() {
            let l = program.operand_layout(s, id);
            self.p.epi_strides[j] = vec4(l.padded4().1);
            set_packed(&mut self.p.epi_offsets, j, l.offset);
            self.ins.push(nodes[s].dtype);
            self.bindings.push(nodes[s].storage);
            let weights = [Some(a), Some(b), b2].map(|w| w.map(|w| nodes[w].storage));
            scalar_only |= weights.contains(&Some(nodes[s].storage));
        }
        (Some(expr.clone()), scalar_only)
    }

    /// Binds a normed A's weight after the epilogue's `slot` operands, its offset in the next slot (`norm_matvec`:
    /// `[K]`, contiguous, its own storage).
    fn norm(&mut self, program: &Program, nm: &NormIn, slot: usize) -> MatVecNorm {
        if let Some(w) = nm.weight {
            let n = &program.nodes[w];
            set_packed(&mut self.p.epi_offsets, slot, n.layout.offset);
            self.ins.push(n.dtype);
            self.bindings.push(n.storage);
        }
        MatVecNorm { eps_bits: nm.eps.to_bits(), weight: nm.weight.is_some() }
    }
}

fn lower_matmul(
    program: &Program,
    id: NodeId,
    (a, b, b2): (NodeId, NodeId, Option<NodeId>),
    (epilogue, norm): (Option<&(Expr, Vec<NodeId>)>, Option<&NormIn>),
    prec: MatmulPrecision,
    t: &GpuTarget,
) -> Result<Vec<Dispatch>> {
    let nodes = &program.nodes;
    let shape = &nodes[id].layout.shape;
    let r = shape.len();
    let (m, n) = (shape[r - 2], shape[r - 1]);
    let k = nodes[a].layout.shape[nodes[a].layout.rank() - 1];
    let mut batch4 = [1usize; 4];
    batch4[4 - (r - 2)..].copy_from_slice(&shape[..r - 2]);
    // strides (batch0, batch1, row, col) of an operand broadcast to [batch.., rows, cols]
    let full = |src: NodeId, rows: usize, cols: usize| {
        let mut s = shape[..r - 2].to_vec();
        s.extend([rows, cols]);
        let l = nodes[src].layout.broadcast_operand(&s);
        let (_, st) = l.padded4();
        let nb = r - 2;
        let b0 = if nb == 2 { st[0] } else { 0 };
        let b1 = if nb >= 1 { st[1] } else { 0 };
        ([b0, b1, st[2], st[3]], l.offset)
    };
    let (sa, oa) = full(a, m, k);
    let (sb, ob) = full(b, k, n);
    let batches = batch4[2] * batch4[3];
    let mut p = MatmulParams {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        batch1: batch4[3] as u32,
        a_strides: vec4(sa),
        b_strides: vec4(sb),
        a_offset: oa as u32,
        b_offset: ob as u32,
        ldc: n as u32,
        ..Default::default()
    };
    let mut ins = vec![nodes[a].dtype, nodes[b].dtype];
    let mut bindings = vec![id, nodes[a].storage, nodes[b].storage];
    if let Some(b2) = b2 {
        // a dual matmul's second weight: B's layout (`dual_matvec`), its own offset
        p.b2_offset = full(b2, k, n).1 as u32;
        ins.push(nodes[b2].dtype);
        bindings.push(nodes[b2].storage);
    }
    let mut bound = Bound { p: &mut p, ins: &mut ins, bindings: &mut bindings };
    let (epi, scalar_only) = bound.epilogue(program, id, (a, b, b2), epilogue);
    let norm = norm.map(|nm| bound.norm(program, nm, epilogue.map_or(0, |(_, srcs)| srcs.len())));
    let mut ms = MatmulShape { m, n, k, batches, sa, sb, oa, ob };
    let b_storage = &nodes[nodes[b].storage];
    let b_bytes = b_storage.dtype.bytes_of(b_storage.layout.numel());
    let batches = if rows_as_batch(&ms, b_bytes, scalar_only, t) { one_matvec_a_row(&mut ms, &mut p) } else { batches };
    let coop = b2.is_none() && coop_operands(nodes[a].dtype, nodes[b].dtype, prec);
    let (kind, workgroups) = choose(&ms, (epi, b2.is_some(), norm), scalar_only, coop, t)?;
    let key = KernelKey::new(kind, nodes[id].dtype, ins);
    let per = workgroups[2] as usize;
    let groups = (0..batches).step_by(per.max(1)).map(|b0| {
        let mut wg = workgroups;
        wg[2] = per.min(batches - b0) as u32;
        let params = MatmulParams { batch0: b0 as u32, ..p };
        dispatch(key.clone(), Params::new(params), bindings.clone(), wg)
    });
    Ok(groups.collect())
}

/// Every matmul kernel in every operand layout and dtype mix, with and without an epilogue; matmuls whose B is a
/// storage-format weight (`t(w)`, K contiguous) in every kernel that takes one; and `matmul(x, x)`, bound once.
pub(crate) fn variants(keys: &mut Vec<KernelKey>) {
    use DType::{F16, F32};
    // silu(acc + x0), computed in f32
    let sum = Expr::Node { op: ElemOp::Binary(BinaryOp::Add), args: vec![Expr::Acc, Expr::Leaf(0)], dtype: F32 };
    let silu = ElemOp::Unary { op: UnaryOp::Silu, a: 0, b: 0 };
    let epis = [None, Some(Expr::Node { op: silu, args: vec![sum], dtype: F32 })];
    for (a, b, o) in [(F32, F32, F32), (F16, F16, F16), (F16, F32, F32), (F32, F16, F32)] {
        for epi in &epis {
            let ins = if epi.is_some() { vec![a, b, o] } else { vec![a, b] };
            let mut add = |kind: KernelKind, out: DType| keys.push(KernelKey::new(kind, out, ins.clone()));
            add(KernelKind::new(MatMul { epi: epi.clone() }), o);
            for cfg in TILE_CONFIGS {
                for (a_kcontig, b_ncontig, out_vec4) in bools3() {
                    add(KernelKind::new(MatMulTiled { cfg, a_kcontig, b_ncontig, out_vec4, epi: epi.clone() }), o);
                }
            }
            if a == F16 && b == F16 {
                for cfg in COOP_CONFIGS {
                    for (a_kcontig, b_ncontig, emulated) in bools3() {
                        let kind = KernelKind::new(MatMulCoop { cfg, a_kcontig, b_ncontig, epi: epi.clone(), emulated });
                        add(kind.clone(), o);
                        add(kind, F32); // an f32 output (a fused cast)
                    }
                }
            }
            let layouts =
                [(true, MatVecReduce::Shared), (false, MatVecReduce::Subgroups), (false, MatVecReduce::Shared)];
            let serial = [(true, MatVecReduce::Serial), (false, MatVecReduce::Serial)];
            for (b_ncontig, reduce) in layouts.into_iter().chain(serial) {
                add(KernelKind::new(MatVec { b_ncontig, reduce, epi: epi.clone(), dual: false, norm: None }), o);
            }
        }
    }
    storage_format_variants(keys);
    let mut same = KernelKey::new(KernelKind::new(MatMul { epi: None }), F32, vec![F32, F32]);
    same.alias = vec![0, 1, 1];
    keys.push(same);
}

/// Matmuls whose B is a storage-format weight (bf16, the GGUF block types), in every kernel that takes one.
fn storage_format_variants(keys: &mut Vec<KernelKey>) {
    use DType::{F16, F32};
    for q in DType::ALL.into_iter().filter(|d| d.is_storage_format()) {
        for a in [F32, F16] {
            let mut add = |kind: KernelKind| keys.push(KernelKey::new(kind, F32, vec![a, q]));
            add(KernelKind::new(MatMul { epi: None }));
            for reduce in [MatVecReduce::Subgroups, MatVecReduce::Shared, MatVecReduce::Serial] {
                add(KernelKind::new(MatVec { b_ncontig: false, reduce, epi: None, dual: false, norm: None }));
            }
            for cfg in TILE_CONFIGS {
                for (a_kcontig, out_vec4) in [(true, true), (false, false)] {
                    add(KernelKind::new(MatMulTiled { cfg, a_kcontig, b_ncontig: false, out_vec4, epi: None }));
                }
            }
            // block-quantized weights on cooperative matrices, decoded to f16 as they are staged
            for cfg in COOP_CONFIGS.into_iter().filter(|_| q.block_size() > 1) {
                for (a_kcontig, emulated) in [(true, false), (true, true), (false, false), (false, true)] {
                    add(KernelKind::new(MatMulCoop { cfg, a_kcontig, b_ncontig: false, epi: None, emulated }));
                }
            }
            // a gated feed-forward's gate and up in one dual mat-vec: swiglu(acc2, acc)
            for reduce in [MatVecReduce::Subgroups, MatVecReduce::Shared, MatVecReduce::Serial] {
                let args = vec![Expr::Acc2, Expr::Acc];
                let epi = Some(Expr::Node { op: ElemOp::Glu(GluOp::ALL[0]), args, dtype: F32 });
                let dual = KernelKind::new(MatVec { b_ncontig: false, reduce, epi: epi.clone(), dual: true, norm: None });
                keys.push(KernelKey::new(dual, F32, vec![a, q, q]));
                // x an RMS norm's input, normed on load: with a weight (f32 or f16), the dual's too; without
                let norm = Some(MatVecNorm { eps_bits: 1e-5f32.to_bits(), weight: true });
                if a == F32 {
                    for nw in [F32, F16] {
                        let kind = KernelKind::new(MatVec { b_ncontig: false, reduce, epi: None, dual: false, norm });
                        keys.push(KernelKey::new(kind, F32, vec![a, q, nw]));
                        let kind = KernelKind::new(MatVec { b_ncontig: false, reduce, epi: epi.clone(), dual: true, norm });
                        keys.push(KernelKey::new(kind, F32, vec![a, q, q, nw]));
                    }
                    let bare = Some(MatVecNorm { eps_bits: 1e-6f32.to_bits(), weight: false });
                    let kind = KernelKind::new(MatVec { b_ncontig: false, reduce, epi: None, dual: false, norm: bare });
                    keys.push(KernelKey::new(kind, F32, vec![a, q]));
                }
            }
        }
    }
}

fn bools3() -> impl Iterator<Item = (bool, bool, bool)> {
    (0..8).map(|i| (i & 4 != 0, i & 2 != 0, i & 1 != 0))
}
