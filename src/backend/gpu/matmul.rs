//! Matmul kernels (stage 4a, matmul part): which of the three kernels a matmul gets, its parameters, and the
//! per-device choice of tile configuration.
//!
//! - `matvec.wgsl` for one-row inputs (decode-style), vec4 loads, subgroups where the adapter has them;
//! - `matmul_tiled.wgsl`, register-blocked with vec4 loads, in several tile configurations, for operands whose
//!   contiguous axis is 4-aligned (row-major, or a transposed view such as `x @ t(w)`);
//! - `matmul_coop.wgsl` ([`super::coop`]), on cooperative matrices (tensor cores), for f16 × f16 matmuls on
//!   adapters with EXPERIMENTAL_COOPERATIVE_MATRIX, under the same layout preconditions as the tiled kernel;
//! - `matmul.wgsl`, the generic strided kernel, for everything else (any strides, any sizes).
//!
//! The tile configurations are chosen per device on first use: each candidate runs a 512³ problem, is checked
//! against the CPU backend (a candidate that fails is never used), and the fastest wins (f32 for the tiled
//! kernel, f16 for the cooperative one). `WEBTENSOR_MATMUL` pins a choice (a config name, or `generic`);
//! [`crate::CompileOptions::matmul`] pins it per plan.

pub use super::coop::{CoopConfig, COOP_CONFIGS};
use super::kernels::{binary_expr, grid, put4, unary_expr, Dispatch, KernelKey, KernelKind, Target};
use crate::compile::fuse::Expr;
use crate::compile::Program;
use crate::graph::{operand_layout, NodeId};
use crate::{Error, Result};

/// Environment variable that pins the matmul kernel: a [`TileConfig`] name such as `128x128x8`, a
/// [`CoopConfig`] name such as `coop16-64x64x32-4sg`, or `generic`.
pub const MATMUL_ENV: &str = "WEBTENSOR_MATMUL";

/// A tile shape of `matmul_tiled.wgsl`: TM = 64·rm rows, TN = 64·rn columns, K steps of bk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileConfig {
    /// Row blocks of 64: the tile has TM = 64·rm rows.
    pub rm: u32,
    /// Column blocks of 64: the tile has TN = 64·rn columns.
    pub rn: u32,
    /// K elements staged in workgroup memory per step.
    pub bk: u32,
}

impl TileConfig {
    /// `TMxTNxBK`, e.g. `128x128x8`.
    pub fn name(self) -> String {
        format!("{}x{}x{}", 64 * self.rm, 64 * self.rn, self.bk)
    }

    /// Workgroup memory the configuration needs, in bytes.
    pub fn shared_bytes(self) -> u32 {
        (64 * self.rm + 64 * self.rn) * self.bk * 4
    }
}

/// Every tile configuration the tuner may choose from (each loads a whole number of vec4 per invocation).
pub const TILE_CONFIGS: [TileConfig; 4] = [
    TileConfig { rm: 2, rn: 2, bk: 8 },
    TileConfig { rm: 1, rn: 1, bk: 16 },
    TileConfig { rm: 2, rn: 2, bk: 16 },
    TileConfig { rm: 2, rn: 1, bk: 16 },
];

/// The configuration used when nothing was tuned (on wasm, and before tuning).
pub const DEFAULT_CONFIG: TileConfig = TILE_CONFIGS[0];

/// A pinned or tuned choice of matmul kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatmulChoice {
    /// Always the generic strided kernel.
    Generic,
    /// The tiled kernel with this configuration where its preconditions hold (no cooperative matrices).
    Tiled(TileConfig),
    /// f16 × f16 matmuls on cooperative matrices with this configuration where the adapter and the layouts
    /// allow it; every other matmul takes the tiled kernel with [`DEFAULT_CONFIG`].
    Coop(CoopConfig),
}

impl MatmulChoice {
    /// The name `WEBTENSOR_MATMUL` accepts for this choice.
    pub fn name(self) -> String {
        match self {
            MatmulChoice::Generic => "generic".into(),
            MatmulChoice::Tiled(c) => c.name(),
            MatmulChoice::Coop(c) => c.name(),
        }
    }
}

impl std::str::FromStr for MatmulChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<MatmulChoice> {
        if s == "generic" {
            return Ok(MatmulChoice::Generic);
        }
        let tiled = TILE_CONFIGS.iter().map(|&c| MatmulChoice::Tiled(c));
        let all = tiled.chain(COOP_CONFIGS.iter().map(|&c| MatmulChoice::Coop(c)));
        all.clone().find(|c| c.name() == s).ok_or_else(|| {
            let names: Vec<String> = all.map(|c| c.name()).collect();
            Error::Unsupported {
                op: "matmul".into(),
                backend: "wgpu".into(),
                reason: format!("unknown matmul kernel '{s}' (expected generic or one of {})", names.join(", ")),
            }
        })
    }
}

/// The kernels a plan's matmuls may use: the tiled configuration (or the generic kernel) and, for f16 × f16
/// matmuls on adapters that have them, a cooperative-matrix configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MatmulKernels {
    /// [`MatmulChoice::Tiled`] or [`MatmulChoice::Generic`].
    pub tiled: MatmulChoice,
    pub coop: Option<CoopConfig>,
}

impl MatmulKernels {
    /// What a pinned [`MatmulChoice`] means: `Coop(c)` is `c` for f16 × f16 and the default tiled kernel for the
    /// rest; `Tiled` and `Generic` use no cooperative matrices.
    pub fn pinned(c: MatmulChoice) -> MatmulKernels {
        match c {
            MatmulChoice::Coop(cfg) => MatmulKernels { tiled: MatmulChoice::Tiled(DEFAULT_CONFIG), coop: Some(cfg) },
            c => MatmulKernels { tiled: c, coop: None },
        }
    }
}

/// What `lower` needs to know about one matmul: sizes, strides (batch0, batch1, row, col) and offsets in
/// elements, all already broadcast to the output's batch dims.
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

/// The kernel, its workgroup grid, for a matmul of `shape` on a device. `epi` is a fused epilogue; when
/// `scalar_only` (an epilogue operand shares memory with A or B, so one scalar binding must serve both), the
/// generic kernel is used. `f16_operands`: A and B are both f16 (a cooperative-matrix candidate).
pub(crate) fn choose(
    s: &MatmulShape,
    epi: Option<String>,
    scalar_only: bool,
    f16_operands: bool,
    target: &Target,
) -> Result<(KernelKind, [u32; 3])> {
    let Target { max_groups, max_shared, subgroup_size, matmul, coop_frag, coop_emulated: emulated } = *target;
    let MatmulKernels { tiled: choice, coop } = matmul;
    let (a, b) = if scalar_only { (None, None) } else { vec4_layouts(s) };
    let batches = s.batches as u64;
    let check = |g: u64, what: &str| -> Result<u32> {
        if g > max_groups as u64 {
            return Err(Error::LimitExceeded {
                what: format!("matmul [{}, {}, {}] x {} batches: {what} = {g} workgroups", s.m, s.k, s.n, s.batches),
                size: g,
                limit_name: "max_compute_workgroups_per_dimension",
                limit: max_groups as u64,
            });
        }
        Ok(g as u32)
    };
    let z = check(batches, "batches")?;
    if s.m == 1 && a == Some(true) {
        if let Some(b_ncontig) = b {
            let per_group = if b_ncontig { 64 } else { 8 };
            let [x, y, _] = grid("matmul (mat-vec)", s.n.div_ceil(per_group) as u64, max_groups)?;
            // subgroupAdd is used when subgroups tile each 32-lane row group exactly
            let subgroups = subgroup_size.filter(|&g| g > 0 && 32 % g == 0 && !b_ncontig);
            return Ok((KernelKind::MatVec { b_ncontig, subgroups: subgroups.is_some(), epi }, [x, y, z]));
        }
    }
    if let (Some(cfg), Some(a_kcontig), Some(b_ncontig)) = (coop, a, b) {
        if f16_operands && coop_frag == Some(cfg.frag) && cfg.shared_bytes() <= max_shared {
            let gx = check(s.n.div_ceil(cfg.bn() as usize) as u64, "N / tile")?;
            let gy = check(s.m.div_ceil(cfg.bm() as usize) as u64, "M / tile")?;
            return Ok((KernelKind::MatMulCoop { cfg, a_kcontig, b_ncontig, epi, emulated }, [gx, gy, z]));
        }
    }
    let tiled = match choice {
        MatmulChoice::Tiled(cfg) => Some(cfg),
        MatmulChoice::Coop(_) => Some(DEFAULT_CONFIG),
        MatmulChoice::Generic => None,
    };
    if let (Some(cfg), Some(a_kcontig), Some(b_ncontig)) = (tiled, a, b) {
        if cfg.shared_bytes() <= max_shared {
            let gx = check(s.n.div_ceil(64 * cfg.rn as usize) as u64, "N / tile")?;
            let gy = check(s.m.div_ceil(64 * cfg.rm as usize) as u64, "M / tile")?;
            let out_vec4 = s.n.is_multiple_of(4);
            return Ok((KernelKind::MatMulTiled { cfg, a_kcontig, b_ncontig, out_vec4, epi }, [gx, gy, z]));
        }
    }
    let gx = check(s.n.div_ceil(64) as u64, "N / 64")?;
    let gy = check(s.m.div_ceil(64) as u64, "M / 64")?;
    Ok((KernelKind::MatMul { epi }, [gx, gy, z]))
}

/// Lowers matmul step `id` (`a @ b`, optionally with a fused epilogue over `srcs`) to a dispatch.
pub(crate) fn lower(
    program: &Program,
    id: NodeId,
    a: NodeId,
    b: NodeId,
    epilogue: Option<(&Expr, &[NodeId])>,
    target: &Target,
) -> Result<Dispatch> {
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
        let l = operand_layout(&nodes[src].layout, &s);
        let (_, st) = l.padded4();
        let nb = r - 2;
        let b0 = if nb == 2 { st[0] } else { 0 };
        let b1 = if nb >= 1 { st[1] } else { 0 };
        ([b0, b1, st[2], st[3]], l.offset)
    };
    let (sa, oa) = full(a, m, k);
    let (sb, ob) = full(b, k, n);
    let batches = batch4[2] * batch4[3];
    let mut p = [0u32; 64];
    put4(&mut p, 0, [m, n, k, batch4[3]]);
    put4(&mut p, 1, sa);
    put4(&mut p, 2, sb);
    put4(&mut p, 3, [oa, ob, 0, n]);
    let mut ins = vec![nodes[a].dtype, nodes[b].dtype];
    let mut bindings = vec![id, nodes[a].storage, nodes[b].storage];
    let mut epi = None;
    let mut scalar_only = false;
    if let Some((expr, srcs)) = epilogue {
        for (j, &s) in srcs.iter().enumerate() {
            let l = operand_layout(&nodes[s].layout, shape);
            put4(&mut p, 4 + 2 * j, l.padded4().1);
            p[(5 + 2 * j) * 4] = l.offset as u32;
            ins.push(nodes[s].dtype);
            bindings.push(nodes[s].storage);
            scalar_only |= nodes[s].storage == nodes[a].storage || nodes[s].storage == nodes[b].storage;
        }
        epi = Some(expr.render(&|j| format!("x{j}"), unary_expr, binary_expr));
    }
    let ms = MatmulShape { m, n, k, batches, sa, sb, oa, ob };
    let f16_operands = nodes[a].dtype == crate::DType::F16 && nodes[b].dtype == crate::DType::F16;
    let (kind, workgroups) = choose(&ms, epi, scalar_only, f16_operands, target)?;
    Ok(Dispatch { key: KernelKey::new(kind, nodes[id].dtype, ins), params: p, bindings, workgroups })
}

/// The start of every matmul kernel's `main` (`{{PROLOGUE}}`): sizes, the batch `wg.z` as (b0, b1), and the
/// operands' strides, from the Params layout of matmul.wgsl.
pub(crate) const PROLOGUE: &str = "    let M = P.v[0].x;
    let N = P.v[0].y;
    let K = P.v[0].z;
    let b1 = wg.z % P.v[0].w;
    let b0 = wg.z / P.v[0].w;
    let sa = P.v[1];
    let sb = P.v[2];";

const TILED: &str = include_str!("../../../shaders/matmul_tiled.wgsl");
const MATVEC: &str = include_str!("../../../shaders/matvec.wgsl");

/// WGSL body of the tiled and mat-vec variants, given the generated storage bindings and accessors (the
/// caller prepends `enable`s and common.wgsl).
pub(crate) fn wgsl(key: &KernelKey, bindings: String) -> Option<String> {
    match key.kind {
        KernelKind::MatMulTiled { cfg, a_kcontig, b_ncontig, out_vec4, ref epi } => {
            let store = if out_vec4 {
                "if (gn < N) {\n                    let c4 = vec4<u32>(b0, b1, m0 + gm, n0 + gn);\n                    let e = vec4<f32>(epilogue(v.x, c4), epilogue(v.y, c4 + vec4<u32>(0u, 0u, 0u, 1u)), epilogue(v.z, c4 + vec4<u32>(0u, 0u, 0u, 2u)), epilogue(v.w, c4 + vec4<u32>(0u, 0u, 0u, 3u)));\n                    st4_c_out(at, e);\n                }"
            } else {
                "for (var j = 0u; j < 4u; j = j + 1u) {\n                    if (gn + j < N) {\n                        st_c_out(at + j, epilogue(v[j], vec4<u32>(b0, b1, m0 + gm, n0 + gn + j)));\n                    }\n                }"
            };
            Some(super::kernels::render(
                TILED,
                &[
                    ("BINDINGS", bindings),
                    ("EPILOGUE", key.epilogue(epi.as_deref())),
                    ("PROLOGUE", PROLOGUE.into()),
                    ("RM", cfg.rm.to_string()),
                    ("RN", cfg.rn.to_string()),
                    ("BK", cfg.bk.to_string()),
                    ("A_KCONTIG", a_kcontig.to_string()),
                    ("B_NCONTIG", b_ncontig.to_string()),
                    ("OUT_VEC4", out_vec4.to_string()),
                    ("A_SHARED", (cfg.bk * 16 * cfg.rm).to_string()),
                    ("B_SHARED", (cfg.bk * 16 * cfg.rn).to_string()),
                    ("STORE", store.into()),
                ],
            ))
        }
        KernelKind::MatVec { b_ncontig, subgroups, ref epi } => {
            let reduce = if subgroups {
                "let sum = subgroupAdd(total);\n        if (sg_lane == 0u) {\n            part[lid / sg_size].x = sum;\n        }\n        workgroupBarrier();\n        if (lane == 0u && n < N) {\n            let per = 32u / sg_size;\n            var t = 0.0;\n            for (var j = 0u; j < per; j = j + 1u) {\n                t = t + part[row * per + j].x;\n            }\n            st_y_out(y_base + n, epilogue(t, vec4<u32>(b0, b1, 0u, n0 + n)));\n        }"
            } else {
                "part[lid] = vec4<f32>(total, 0.0, 0.0, 0.0);\n        workgroupBarrier();\n        for (var h = 16u; h > 0u; h = h >> 1u) {\n            if (lane < h) {\n                part[lid].x = part[lid].x + part[lid + h].x;\n            }\n            workgroupBarrier();\n        }\n        if (lane == 0u && n < N) {\n            st_y_out(y_base + n, epilogue(part[lid].x, vec4<u32>(b0, b1, 0u, n0 + n)));\n        }"
            };
            let sg_args = if subgroups {
                ",\n        @builtin(subgroup_invocation_id) sg_lane: u32, @builtin(subgroup_size) sg_size: u32"
            } else {
                ""
            };
            Some(super::kernels::render(
                MATVEC,
                &[
                    ("BINDINGS", bindings),
                    ("EPILOGUE", key.epilogue(epi.as_deref())),
                    ("PROLOGUE", PROLOGUE.into()),
                    ("B_NCONTIG", b_ncontig.to_string()),
                    ("SUBGROUPS", subgroups.to_string()),
                    ("SUBGROUP_ARGS", sg_args.into()),
                    ("REDUCE_ROW", reduce.into()),
                ],
            ))
        }
        KernelKind::MatMulCoop { .. } => Some(super::coop::wgsl(key, bindings)),
        _ => None,
    }
}
