//! The tiled matmul kernel (`matmul_tiled.wgsl`): register-blocked, vec4 loads, one of
//! [`TILE_CONFIGS`](crate::tuning::TILE_CONFIGS).

use super::common::{batch_lets, bindings, epi_suffix, epilogue, MatmulParams, BATCH};
use crate::tuning::TileConfig;
use crate::backend::gpu::kernel::{Binding, Family, KernelKey, MatmulKernel, SplitRule};
use crate::backend::gpu::params::{ParamsBlock, ParamsLayout};
use crate::backend::gpu::wgsl::template::render;
use crate::compile::ir::Expr;

const TILED: &str = include_str!("matmul_tiled.wgsl");
const STORE_VEC4: &str = include_str!("matmul_store_vec4.wgsl");
const STORE_SCALAR: &str = include_str!("matmul_store_scalar.wgsl");
const STAGE: &str = include_str!("matmul_tiled_stage.wgsl");

/// `matmul_tiled.wgsl`: A's contiguous axis K (`a_kcontig`) or M, B's N (`b_ncontig`) or K, C stored as vec4
/// (`out_vec4`), an optional epilogue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MatMulTiled {
    pub cfg: TileConfig,
    pub a_kcontig: bool,
    pub b_ncontig: bool,
    pub out_vec4: bool,
    pub epi: Option<Expr>,
}

impl Family for MatMulTiled {
    fn name(&self) -> String {
        format!("matmul_tiled {}{}", self.cfg.name(), epi_suffix(&self.epi))
    }

    fn params(&self) -> ParamsLayout {
        MatmulParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        bindings(key, ["c_out", "a_in"], self.out_vec4, true)
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        let cfg = self.cfg;
        let text = render(
            TILED,
            &[
                ("BINDINGS", bindings),
                ("BATCH_LETS", batch_lets().into()),
                ("EPILOGUE", epilogue(key, self.epi.as_ref())),
                ("RM", cfg.rm.to_string()),
                ("RN", cfg.rn.to_string()),
                ("BK", cfg.bk.to_string()),
                ("A_KCONTIG", self.a_kcontig.to_string()),
                ("B_NCONTIG", self.b_ncontig.to_string()),
                ("A_SHARED", (cfg.bk * 16 * cfg.rm).to_string()),
                ("PRODUCT", tiled_product(cfg.rm, cfg.rn)),
                ("STORE", tiled_store(cfg.rm, cfg.rn)),
                ("B_SHARED", (cfg.bk * 16 * cfg.rn).to_string()),
            ],
        );
        // one staging text for both operands: A by its rows (K contiguous or not), B by its columns
        let stage = |x: &str, t: &str, loads: &str, kcontig: &str| {
            let subs = [("X", x.into()), ("T", t.into()), ("LOADS", loads.into()), ("KCONTIG", kcontig.into())];
            render(STAGE, &subs)
        };
        let store = if self.out_vec4 { STORE_VEC4 } else { STORE_SCALAR };
        let (stage_a, stage_b) = (stage("a", "TM", "A_LOADS", "A_KCONTIG"), stage("b", "TN", "B_LOADS", "!B_NCONTIG"));
        text + "\n" + store + &stage_a + &stage_b + BATCH
    }

    fn as_matmul(&self) -> Option<&dyn MatmulKernel> {
        Some(self)
    }

    fn split(&self) -> SplitRule {
        SplitRule::RowsOrColumns
    }
}

/// One K step of the tiled kernel's register block, unrolled: RM vec4 of A (rows ty*4 + 64r ..+3) and RN vec4
/// of B (columns tx*4 + 64s ..+3) from workgroup memory, then 16·RM·RN vec4 FMAs into `acc`, every index a
/// constant.
fn tiled_product(rm: u32, rn: u32) -> String {
    let mut w = String::new();
    for r in 0..rm {
        w += &format!("            let av{r} = a_s[ka + {}u];\n", r * 16);
    }
    for s in 0..rn {
        w += &format!("            let bv{s} = b_s[kb + {}u];\n", s * 16);
    }
    for r in 0..rm {
        for (i, c) in ["x", "y", "z", "w"].iter().enumerate() {
            for s in 0..rn {
                let at = (r * 4 + i as u32) * rn + s;
                w += &format!("            acc[{at}] = fma(vec4<f32>(av{r}.{c}), bv{s}, acc[{at}]);\n");
            }
        }
    }
    w
}

/// The tiled kernel's store of its register block, unrolled like [`tiled_product`]: row ty*4 + i + 64r,
/// columns tx*4 + 64s ..+3 from `acc[(r*4 + i)*RN + s]` through `store_tile`.
fn tiled_store(rm: u32, rn: u32) -> String {
    let mut w = String::new();
    for r in 0..rm {
        for i in 0..4 {
            w += &format!("    let gm{r}{i} = row0 + {}u + ty * 4u;\n", r * 64 + i);
            w += &format!("    if (gm{r}{i} < M) {{\n");
            for s in 0..rn {
                let at = (r * 4 + i) * rn + s;
                w += &format!(
                    "        {{\n            let gn = col0 + {}u + tx * 4u;\n            let gm = gm{r}{i};\n            \
                     store_tile(c_base + (m0 + gm) * ldc + n0 + gn, gn, N, vec4<u32>(b0, b1, m0 + gm, n0 + gn), \
                     acc[{at}]);\n        }}\n",
                    s * 64
                );
            }
            w += "    }\n";
        }
    }
    w
}

impl MatmulKernel for MatMulTiled {
    fn tile(&self) -> (u64, u64) {
        (64 * self.cfg.rm as u64, 64 * self.cfg.rn as u64)
    }
}
