//! Kernels (stage 4a): for each step of a program, the WGSL variant (a [`KernelKey`]), its uniform parameters
//! and its dispatch geometry. Shader text comes from `shaders/*.wgsl` with a few `{{TOKEN}}` substitutions.

use super::matmul::{self, CoopConfig, MatmulKernels, TileConfig};
use crate::compile::Program;
use crate::graph::{operand_layout, BinaryOp, NodeId, Op, ReduceOp, UnaryOp};
use crate::shape::Layout;
use crate::{DType, Error, Result};

/// Which shader file and which compile-time variant of it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum KernelKind {
    /// `out = expr(x0, x1, ..)`; `expr` is WGSL over the loaded operands.
    Elementwise {
        expr: String,
    },
    /// `matmul.wgsl`, with an optional epilogue expression over `acc` and operands x0.. (bindings 4..).
    MatMul {
        epi: Option<String>,
    },
    /// `matmul_tiled.wgsl`: register-blocked, vec4 loads (see [`super::matmul`]).
    MatMulTiled {
        cfg: TileConfig,
        a_kcontig: bool,
        b_ncontig: bool,
        out_vec4: bool,
        epi: Option<String>,
    },
    /// `matmul_coop.wgsl`: cooperative matrices, f16 operands (see [`super::coop`]).
    MatMulCoop {
        cfg: CoopConfig,
        a_kcontig: bool,
        b_ncontig: bool,
        epi: Option<String>,
        /// The cooperative operations written out in plain WGSL (tests on adapters without them).
        emulated: bool,
    },
    /// `matvec.wgsl`: one-row inputs.
    MatVec {
        b_ncontig: bool,
        subgroups: bool,
        epi: Option<String>,
    },
    /// A row op of rows.wgsl: 0 softmax, 1 rms_norm, 2 layer_norm, 3 sum, 4 mean, 5 max, 6 argmax.
    Rows {
        op: u32,
        mask: bool,
    },
    GetRows,
    Concat,
}

/// Everything that makes one WGSL variant: cached pipelines are keyed by it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct KernelKey {
    pub kind: KernelKind,
    /// Storage dtype of the output.
    pub out: DType,
    /// Storage dtypes of the inputs, in binding order.
    pub ins: Vec<DType>,
    /// For each binding (output first, then inputs), the first binding over the same memory (itself when none).
    pub alias: Vec<usize>,
    /// f16 tensors are stored as pairs in u32 words and unpacked in the shader (the adapter lacks SHADER_F16).
    pub packed_f16: bool,
}

/// One dispatch of a plan: the kernel, its uniform block, the storage nodes bound (output first), and the grid.
#[derive(Clone, Debug)]
pub(crate) struct Dispatch {
    pub key: KernelKey,
    pub params: [u32; 64],
    pub bindings: Vec<NodeId>,
    pub workgroups: [u32; 3],
}

/// Replaces each `{{NAME}}` and fails if any token is left unreplaced.
pub(crate) fn render(template: &str, subs: &[(&str, String)]) -> String {
    let mut s = template.to_string();
    for (k, v) in subs {
        s = s.replace(&format!("{{{{{k}}}}}"), v);
    }
    assert!(!s.contains("{{"), "unreplaced token in WGSL template:\n{s}");
    s
}

impl KernelKind {
    /// A short human-readable name: `elementwise`, `matmul`, `matmul_tiled 128x128x8`, `matvec`, ...
    pub fn name(&self) -> String {
        match self {
            KernelKind::Elementwise { .. } => "elementwise".into(),
            KernelKind::MatMul { epi } => format!("matmul{}", if epi.is_some() { "+epilogue" } else { "" }),
            KernelKind::MatMulTiled { cfg, epi, .. } => {
                format!("matmul_tiled {}{}", cfg.name(), if epi.is_some() { "+epilogue" } else { "" })
            }
            KernelKind::MatMulCoop { cfg, epi, emulated, .. } => format!(
                "matmul_coop {}{}{}",
                cfg.name(),
                if *emulated { " (emulated)" } else { "" },
                if epi.is_some() { "+epilogue" } else { "" }
            ),
            KernelKind::MatVec { subgroups, epi, .. } => format!(
                "matvec{}{}",
                if *subgroups { " subgroups" } else { "" },
                if epi.is_some() { "+epilogue" } else { "" }
            ),
            KernelKind::Rows { op, .. } => {
                let names = ["softmax", "rms_norm", "layer_norm", "sum", "mean", "max", "argmax"];
                format!("rows {}", names[*op as usize])
            }
            KernelKind::GetRows => "get_rows".into(),
            KernelKind::Concat => "concat".into(),
        }
    }

    /// A matmul kernel of any kind (generic, tiled, cooperative-matrix, mat-vec).
    pub fn is_matmul(&self) -> bool {
        self.matmul_tile().is_some() || matches!(self, KernelKind::MatVec { .. })
    }

    /// Output rows and columns one workgroup of a 2-D matmul kernel covers (None for other kernels).
    pub fn matmul_tile(&self) -> Option<(u64, u64)> {
        match self {
            KernelKind::MatMul { .. } => Some((64, 64)),
            KernelKind::MatMulTiled { cfg, .. } => Some((64 * cfg.rm as u64, 64 * cfg.rn as u64)),
            KernelKind::MatMulCoop { cfg, .. } => Some((cfg.bm() as u64, cfg.bn() as u64)),
            _ => None,
        }
    }
}

impl KernelKey {
    /// The key with no aliased bindings.
    pub fn new(kind: KernelKind, out: DType, ins: Vec<DType>) -> KernelKey {
        let alias = (0..=ins.len()).collect();
        KernelKey { kind, out, ins, alias, packed_f16: false }
    }
}

/// WGSL for a unary op applied to operand expression `x` in compute type f32 (or i32 for integer ops).
pub(crate) fn unary_expr(op: UnaryOp, x: &str) -> String {
    match op {
        UnaryOp::Scale(bits) => format!("({x} * bitcast<f32>({bits:#x}u))"),
        UnaryOp::Neg => format!("(-{x})"),
        UnaryOp::Abs => format!("abs({x})"),
        UnaryOp::Sqr => format!("({x} * {x})"),
        UnaryOp::Sqrt => format!("sqrt({x})"),
        UnaryOp::Exp => format!("exp({x})"),
        UnaryOp::Log => format!("log({x})"),
        UnaryOp::Tanh => format!("wt_tanh({x})"),
        UnaryOp::Relu => format!("max({x}, 0.0)"),
        UnaryOp::Gelu => format!("wt_gelu({x})"),
        UnaryOp::GeluErf => format!("wt_gelu_erf({x})"),
        UnaryOp::Silu => format!("wt_silu({x})"),
        UnaryOp::Sigmoid => format!("wt_sigmoid({x})"),
        UnaryOp::Copy => x.to_string(),
    }
}

/// WGSL for a binary op.
pub(crate) fn binary_expr(op: BinaryOp, a: &str, b: &str) -> String {
    let sym = match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
    };
    format!("({a} {sym} {b})")
}

/// Workgroup grid for `groups` workgroups: 1-D when it fits `max_per_dim`, else split over x and y.
pub(crate) fn grid(what: &str, groups: u64, max_per_dim: u32) -> Result<[u32; 3]> {
    let max = max_per_dim.max(1) as u64;
    if groups <= max {
        return Ok([groups.max(1) as u32, 1, 1]);
    }
    let y = groups.div_ceil(max);
    if y > max {
        return Err(Error::LimitExceeded {
            what: format!("{what}: {groups} workgroups"),
            size: groups,
            limit_name: "max_compute_workgroups_per_dimension squared",
            limit: max * max,
        });
    }
    Ok([max as u32, y as u32, 1])
}

pub(crate) fn put4(p: &mut [u32; 64], slot: usize, v: [usize; 4]) {
    for (j, x) in v.iter().enumerate() {
        p[slot * 4 + j] = *x as u32;
    }
}

fn padded(l: &Layout) -> ([usize; 4], [usize; 4]) {
    l.padded4()
}

/// What lowering needs to know about the device and the plan's options.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target {
    /// Workgroups per dispatch dimension.
    pub max_groups: u32,
    /// Workgroup memory, in bytes.
    pub max_shared: u32,
    /// The subgroup size when the adapter has subgroups and a fixed size.
    pub subgroup_size: Option<u32>,
    pub matmul: MatmulKernels,
    /// The fragment size of the adapter's f16 → f32 cooperative-matrix shape (16 or 8), when the device has
    /// EXPERIMENTAL_COOPERATIVE_MATRIX and subgroups of 32.
    pub coop_frag: Option<u32>,
    /// Cooperative matrices are emulated in plain WGSL (`testing::device_with_emulated_coop`).
    pub coop_emulated: bool,
}

/// Lowers one step of `program` to a dispatch.
pub(crate) fn lower(program: &Program, id: NodeId, target: &Target) -> Result<Dispatch> {
    let max_groups = target.max_groups;
    let nodes = &program.nodes;
    let node = &nodes[id];
    let shape = &node.layout.shape;
    let numel = node.layout.numel();
    let mut p = [0u32; 64];
    let dt = |n: NodeId| nodes[n].dtype;
    let st = |n: NodeId| nodes[n].storage;
    let name = node.op.name();
    let elementwise = |expr: String, srcs: &[NodeId], p: &mut [u32; 64]| -> Result<Dispatch> {
        p[0] = numel as u32;
        put4(p, 1, padded(&node.layout).0);
        for (k, &s) in srcs.iter().enumerate() {
            let l = operand_layout(&nodes[s].layout, shape);
            put4(p, 2 + 2 * k, padded(&l).1);
            p[(3 + 2 * k) * 4] = l.offset as u32;
        }
        Ok(Dispatch {
            key: KernelKey::new(KernelKind::Elementwise { expr }, node.dtype, srcs.iter().map(|&s| dt(s)).collect()),
            params: *p,
            bindings: std::iter::once(id).chain(srcs.iter().map(|&s| st(s))).collect(),
            workgroups: grid(&name, (numel as u64).div_ceil(256), max_groups)?,
        })
    };
    match node.op {
        Op::Unary { op, x } => elementwise(unary_expr(op, "x0"), &[x], &mut p),
        Op::Binary { op, a, b } => elementwise(binary_expr(op, "x0", "x1"), &[a, b], &mut p),
        Op::MatMul { a, b } => matmul::lower(program, id, a, b, None, target),
        Op::MatMulFused { a, b, ref expr, ref srcs } => matmul::lower(program, id, a, b, Some((expr, srcs)), target),
        Op::Fused { ref expr, ref srcs } => {
            elementwise(expr.render(&|k| format!("x{k}"), unary_expr, binary_expr), srcs, &mut p)
        }
        Op::Softmax { x, mask, scale } => rows(program, id, x, mask, 0, scale, 0.0, max_groups),
        Op::RmsNorm { x, eps } => rows(program, id, x, None, 1, 1.0, eps, max_groups),
        Op::LayerNorm { x, eps } => rows(program, id, x, None, 2, 1.0, eps, max_groups),
        Op::Reduce { op, x } => {
            let code = match op {
                ReduceOp::Sum => 3,
                ReduceOp::Mean => 4,
                ReduceOp::Max => 5,
                ReduceOp::ArgMax => 6,
            };
            rows(program, id, x, None, code, 1.0, 0.0, max_groups)
        }
        Op::GetRows { table, idx } => {
            let lt = &nodes[table].layout;
            let li = &nodes[idx].layout;
            let (ishape, istrides) = li.padded4();
            put4(&mut p, 0, [numel, lt.shape[1], lt.shape[0], lt.offset]);
            put4(&mut p, 1, ishape);
            put4(&mut p, 2, istrides);
            put4(&mut p, 3, [li.offset, lt.strides[0], lt.strides[1], 0]);
            Ok(Dispatch {
                key: KernelKey::new(KernelKind::GetRows, node.dtype, vec![dt(table), dt(idx)]),
                params: p,
                bindings: vec![id, st(table), st(idx)],
                workgroups: grid("get_rows", (numel as u64).div_ceil(256), max_groups)?,
            })
        }
        Op::Concat { a, b, axis } => {
            let la = &nodes[a].layout;
            let lb = &nodes[b].layout;
            let lead = 4 - shape.len();
            put4(&mut p, 0, [numel, lead + axis, la.shape[axis], 0]);
            put4(&mut p, 1, node.layout.padded4().0);
            put4(&mut p, 2, la.padded4().1);
            put4(&mut p, 3, lb.padded4().1);
            put4(&mut p, 4, [la.offset, lb.offset, 0, 0]);
            Ok(Dispatch {
                key: KernelKey::new(KernelKind::Concat, node.dtype, vec![dt(a), dt(b)]),
                params: p,
                bindings: vec![id, st(a), st(b)],
                workgroups: grid("concat", (numel as u64).div_ceil(256), max_groups)?,
            })
        }
        Op::Input { .. } | Op::View { .. } => unreachable!("not a step"),
    }
}

#[allow(clippy::too_many_arguments)]
fn rows(
    program: &Program,
    id: NodeId,
    x: NodeId,
    mask: Option<NodeId>,
    op: u32,
    scale: f32,
    eps: f32,
    max_groups: u32,
) -> Result<Dispatch> {
    let nodes = &program.nodes;
    let lx = &nodes[x].layout;
    let n = lx.shape[lx.rank() - 1];
    let nrows = lx.numel() / n;
    let (xs, xst) = lx.padded4();
    let mut p = [0u32; 64];
    let (mst, moff) = match mask {
        Some(m) => {
            let l = operand_layout(&nodes[m].layout, &lx.shape);
            (l.padded4().1, l.offset)
        }
        None => ([0; 4], 0),
    };
    put4(&mut p, 0, [n, nrows, lx.offset, moff]);
    put4(&mut p, 1, xs);
    put4(&mut p, 2, xst);
    put4(&mut p, 3, mst);
    p[16] = scale.to_bits();
    p[17] = eps.to_bits();
    let mut ins = vec![nodes[x].dtype];
    let mut bindings = vec![id, nodes[x].storage];
    if let Some(m) = mask {
        ins.push(nodes[m].dtype);
        bindings.push(nodes[m].storage);
    }
    Ok(Dispatch {
        key: KernelKey::new(KernelKind::Rows { op, mask: mask.is_some() }, nodes[id].dtype, ins),
        params: p,
        bindings,
        workgroups: grid(&nodes[id].op.name(), nrows as u64, max_groups)?,
    })
}

/// Every kernel variant the compiler can emit for the ops of the graph API (elementwise expressions one op
/// each), for validation with naga in tests.
#[doc(hidden)]
pub fn all_variants() -> Vec<(String, String)> {
    use DType::*;
    let mut keys = Vec::new();
    let floats = [F32, F16];
    let unary = [
        UnaryOp::Scale(1.5f32.to_bits()),
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Sqr,
        UnaryOp::Sqrt,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Tanh,
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::GeluErf,
        UnaryOp::Silu,
        UnaryOp::Sigmoid,
        UnaryOp::Copy,
    ];
    for op in unary {
        for d in floats {
            keys.push(KernelKey::new(KernelKind::Elementwise { expr: unary_expr(op, "x0") }, d, vec![d]));
        }
    }
    for op in [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Sqr, UnaryOp::Copy] {
        keys.push(KernelKey::new(KernelKind::Elementwise { expr: unary_expr(op, "x0") }, I32, vec![I32]));
    }
    for (from, to) in [(F32, F16), (F16, F32), (F32, I32), (I32, F32), (F16, I32), (I32, F16)] {
        keys.push(KernelKey::new(KernelKind::Elementwise { expr: "x0".into() }, to, vec![from]));
    }
    for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
        for (a, b, o) in [(F32, F32, F32), (F16, F16, F16), (F16, F32, F32), (F32, F16, F32), (I32, I32, I32)] {
            if op == BinaryOp::Div && o == I32 {
                continue;
            }
            keys.push(KernelKey::new(KernelKind::Elementwise { expr: binary_expr(op, "x0", "x1") }, o, vec![a, b]));
        }
    }
    let epis = [None, Some("wt_silu((acc + x0))".to_string())];
    for (a, b, o) in [(F32, F32, F32), (F16, F16, F16), (F16, F32, F32), (F32, F16, F32)] {
        for epi in &epis {
            let ins = if epi.is_some() { vec![a, b, o] } else { vec![a, b] };
            keys.push(KernelKey::new(KernelKind::MatMul { epi: epi.clone() }, o, ins.clone()));
            for cfg in matmul::TILE_CONFIGS {
                for a_kcontig in [true, false] {
                    for b_ncontig in [true, false] {
                        for out_vec4 in [true, false] {
                            let kind =
                                KernelKind::MatMulTiled { cfg, a_kcontig, b_ncontig, out_vec4, epi: epi.clone() };
                            keys.push(KernelKey::new(kind, o, ins.clone()));
                        }
                    }
                }
            }
            if a == F16 && b == F16 {
                for cfg in matmul::COOP_CONFIGS {
                    for a_kcontig in [true, false] {
                        for b_ncontig in [true, false] {
                            for emulated in [false, true] {
                                let epi = epi.clone();
                                let kind = KernelKind::MatMulCoop { cfg, a_kcontig, b_ncontig, epi, emulated };
                                keys.push(KernelKey::new(kind.clone(), o, ins.clone()));
                                keys.push(KernelKey::new(kind, F32, ins.clone()));
                                // an f32 output (a fused cast)
                            }
                        }
                    }
                }
            }
            for (b_ncontig, subgroups) in [(true, false), (false, true), (false, false)] {
                let kind = KernelKind::MatVec { b_ncontig, subgroups, epi: epi.clone() };
                keys.push(KernelKey::new(kind, o, ins.clone()));
            }
        }
    }
    // shared memory bound once: matmul(x, x), x + x, softmax(x, mask = x), in-place x = exp(x)
    let mut k = KernelKey::new(KernelKind::MatMul { epi: None }, F32, vec![F32, F32]);
    k.alias = vec![0, 1, 1];
    keys.push(k);
    let mut k = KernelKey::new(KernelKind::Elementwise { expr: "(x0 + x1)".into() }, F32, vec![F32, F32]);
    k.alias = vec![0, 1, 1];
    keys.push(k);
    let mut k = KernelKey::new(KernelKind::Rows { op: 0, mask: true }, F32, vec![F32, F32]);
    k.alias = vec![0, 0, 0];
    keys.push(k);
    let mut k = KernelKey::new(KernelKind::Elementwise { expr: "exp(x0)".into() }, F32, vec![F32]);
    k.alias = vec![0, 0];
    keys.push(k);
    for d in floats {
        for op in 0..=6u32 {
            let out = if op == 6 { I32 } else { d };
            keys.push(KernelKey::new(KernelKind::Rows { op, mask: false }, out, vec![d]));
        }
        for m in floats {
            keys.push(KernelKey::new(KernelKind::Rows { op: 0, mask: true }, d, vec![d, m]));
        }
    }
    for d in [F32, F16, I32] {
        keys.push(KernelKey::new(KernelKind::GetRows, d, vec![d, I32]));
        keys.push(KernelKey::new(KernelKind::Concat, d, vec![d, d]));
    }
    // every f16 variant again with f16 packed in u32 words (adapters without SHADER_F16)
    let packed: Vec<KernelKey> = keys
        .iter()
        .filter(|k| k.out == F16 || k.ins.contains(&F16))
        .filter(|k| !matches!(k.kind, KernelKind::MatMulCoop { .. })) // needs SHADER_F16
        .map(|k| KernelKey { packed_f16: true, ..k.clone() })
        .collect();
    keys.extend(packed);
    keys.into_iter().map(|k| (format!("{k:?}"), k.wgsl())).collect()
}
