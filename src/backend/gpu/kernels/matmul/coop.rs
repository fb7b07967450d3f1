//! The cooperative-matrix matmul kernel (`matmul_coop.wgsl`): the per-fragment code of a
//! [`CoopConfig`] unrolled into the template's tokens. Chosen by lowering for f16 × f16 matmuls (and f32 or f16
//! activations against block-quantized weights, both staged as f16) on adapters with
//! wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX, an F×F×F f16 → f32 tile shape and a subgroup size of 32; each
//! configuration is checked against the CPU backend on the device before it is used (`tune.rs`).

use super::common::{batch_lets, bindings, epi_suffix, epilogue, MatmulParams, BATCH};
use crate::tuning::CoopConfig;
use crate::backend::gpu::kernel::{Binding, Family, KernelKey, MatmulKernel, SplitRule};
use crate::backend::gpu::params::{ParamsBlock, ParamsLayout};
use crate::backend::gpu::wgsl::template::render;
use crate::compile::ir::Expr;
use crate::dtype::DType;

const COOP: &str = include_str!("matmul_coop.wgsl");
const EMULATION: &str = include_str!("matmul_coop_emulation.wgsl");

/// `matmul_coop.wgsl`: cooperative matrices, f16 operands; A's contiguous axis K (`a_kcontig`) or M, B's N
/// (`b_ncontig`) or K, an optional epilogue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct MatMulCoop {
    pub cfg: CoopConfig,
    pub a_kcontig: bool,
    pub b_ncontig: bool,
    pub epi: Option<Expr>,
    /// The cooperative operations written out in plain WGSL (tests on adapters without them).
    pub emulated: bool,
}

impl Family for MatMulCoop {
    fn name(&self) -> String {
        let emulated = if self.emulated { " (emulated)" } else { "" };
        format!("matmul_coop {}{emulated}{}", self.cfg.name(), epi_suffix(&self.epi))
    }

    fn params(&self) -> ParamsLayout {
        MatmulParams::layout()
    }

    fn bindings(&self, key: &KernelKey) -> Vec<Binding> {
        bindings(key, ["c_out", "a_in"], false, true)
    }

    fn enables(&self) -> &'static str {
        if self.emulated {
            ""
        } else {
            "enable wgpu_cooperative_matrix;\n"
        }
    }

    fn wgsl(&self, key: &KernelKey, bindings: String) -> String {
        wgsl(self, key, bindings)
    }

    fn needs_shader_f16(&self) -> bool {
        true
    }

    fn as_matmul(&self) -> Option<&dyn MatmulKernel> {
        Some(self)
    }

    fn split(&self) -> SplitRule {
        SplitRule::RowsOrColumns
    }
}

/// Indentation of generated lines.
fn ind(n: usize) -> String {
    " ".repeat(n)
}

/// The per-fragment code: accumulator declarations, one K step's loads and multiply-adds, and the stores of the
/// accumulators through the scratch fragment.
fn fragments(cfg: CoopConfig, a_kcontig: bool, b_ncontig: bool, emulated: bool) -> (String, String, String) {
    let f = cfg.frag;
    // one cooperative-matrix load: `what` = `a` or `b`, row-major (`coopLoadT`) or column-major (`coopLoad`)
    let load = |what: &str, row_major: bool, at: String, stride: &str| {
        if emulated {
            format!("emu_load(({at}), {stride}, {row_major})")
        } else {
            let t = if row_major { "T" } else { "" };
            format!("coopLoad{t}<coop_mat{f}x{f}<f16, {}>>(&{what}_s[{at}], {stride})", what.to_uppercase())
        }
    };
    let (mut acc, mut mma, mut store) = (String::new(), String::new(), String::new());
    for i in 0..cfg.sm {
        let at = if a_kcontig { format!("(sr + {i}u * F) * SA + kk") } else { format!("kk * SA + sr + {i}u * F") };
        mma += &format!("{}let a{i} = {};\n", ind(12), load("a", a_kcontig, at, "SA"));
    }
    for j in 0..cfg.sn {
        let at = if b_ncontig { format!("kk * SB + sc + {j}u * F") } else { format!("(sc + {j}u * F) * SB + kk") };
        mma += &format!("{}let b{j} = {};\n", ind(12), load("b", b_ncontig, at, "SB"));
    }
    let (acc_ty, mma_fn, store_frag) = if emulated {
        (format!("array<f32, {}>", f * f / 32), "emu_multiply_add", "emu_store(v, scratch, lane);".to_string())
    } else {
        // naga 30's SPIR-V writer needs coopStore's arguments bound with `let` first
        let store = "let p = &c_s[scratch];\n        coopStoreT(v, p, F);";
        (format!("coop_mat{f}x{f}<f32, C>"), "coopMultiplyAdd", store.to_string())
    };
    let lane_arg = if emulated { ", lane" } else { "" };
    for i in 0..cfg.sm {
        for j in 0..cfg.sn {
            acc += &format!("    var c{i}_{j} = {acc_ty}();\n");
            mma += &format!("{}c{i}_{j} = {mma_fn}(a{i}, b{j}, c{i}_{j}{lane_arg});\n", ind(12));
            let at = format!("row0 + sr + {i}u * F, col0 + sc + {j}u * F");
            store += &format!(
                "    {{\n        let v = c{i}_{j};\n        {store_frag}\n        workgroupBarrier();\n        \
                 store_scratch(scratch, lane, sg_size, {at}, b0, b1, c_base);\n        workgroupBarrier();\n    }}\n"
            );
        }
    }
    (acc, mma, store)
}

/// Staging of A and B in three pieces: the global load into registers for the K step starting at `kf` (zero
/// outside the operand), and the stores from registers into workgroup memory; each computes the index of vec4 `e`
/// of a block (`outer` row, `q` column of the staged layout). An operand that is not f16 (`dtypes`: A's and B's)
/// is loaded as f32 and rounded to f16: f32 activations, and a block-quantized weight's four values of one block
/// (K contiguous: a vec4 from a multiple of 4 lies within a block).
fn staging(a_kcontig: bool, b_ncontig: bool, dtypes: [DType; 2]) -> (String, String, String) {
    let index = |outer: &str, outer_len: &str, indent: usize| {
        format!("let {outer} = e / ({outer_len} / 4u);\n{i}let q = (e % ({outer_len} / 4u)) * 4u;", i = ind(indent))
    };
    let (a_outer, a_len, a_cond, a_at) = if a_kcontig {
        ("r", "BK", "row0 + r < M && kf + q < K", "a_base + (row0 + r) * sa.z + kf + q")
    } else {
        ("k", "BM", "row0 + q < M && kf + k < K", "a_base + (kf + k) * sa.w + row0 + q")
    };
    let (b_outer, b_len, b_cond, b_at) = if b_ncontig {
        ("k", "BN", "col0 + q < N && kf + k < K", "b_base + (kf + k) * sb.z + col0 + q")
    } else {
        ("n", "BK", "col0 + n < N && kf + q < K", "b_base + (col0 + n) * sb.w + kf + q")
    };
    let fetch_one = |reg: &str, loads: &str, outer: &str, len: &str, cond: &str, at: &str, x: &str, d: DType| {
        let (i, j, idx) = (ind(12), ind(16), index(outer, len, 16));
        let load = if d == DType::F16 { format!("ld4h_{x}_in({at})") } else { format!("vec4<f16>(ld4_{x}_in({at}))") };
        format!(
            "{i}for (var l = 0u; l < {loads}; l = l + 1u) {{\n{j}let e = lid + l * INV;\n{j}{idx}\n{j}{reg}[l] = \
             vec4<f16>();\n{j}if ({cond}) {{\n{j}    {reg}[l] = {load};\n{j}}}\n{i}}}\n"
        )
    };
    let fetch = fetch_one("ra", "A_LOADS", a_outer, a_len, a_cond, a_at, "a", dtypes[0])
        + &fetch_one("rb", "B_LOADS", b_outer, b_len, b_cond, b_at, "b", dtypes[1]);
    let put_a = format!("{i}{}\n{i}put_a({a_outer} * SA + q, ra[l]);", index(a_outer, a_len, 12), i = ind(12));
    let put_b = format!("{i}{}\n{i}put_b({b_outer} * SB + q, rb[l]);", index(b_outer, b_len, 12), i = ind(12));
    (fetch, put_a, put_b)
}

/// The WGSL of variant `v`, given the generated bindings and accessors.
fn wgsl(v: &MatMulCoop, key: &KernelKey, bindings: String) -> String {
    let MatMulCoop { cfg, a_kcontig, b_ncontig, ref epi, emulated } = *v;
    let (sa, sb) = cfg.strides(a_kcontig, b_ncontig);
    let f = cfg.frag;
    let (acc, mma, store) = fragments(cfg, a_kcontig, b_ncontig, emulated);
    let (fetch, put_a, put_b) = staging(a_kcontig, b_ncontig, [key.ins[0], key.ins[1]]);
    let a_shared = if a_kcontig { cfg.bm() * sa } else { cfg.bk * sa };
    let b_shared = if b_ncontig { cfg.bk * sb } else { cfg.bn() * sb };
    let (subgroup_args, subgroup_lets, emulation) = if emulated {
        let lets = "    let sg = lid / 32u;\n    let lane = lid % 32u;\n    let sg_size = 32u;";
        (String::new(), lets.to_string(), render(EMULATION, &[("PER_LANE", (f * f / 32).to_string())]))
    } else {
        let args = ",\n        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32,\n        \
                    @builtin(subgroup_size) sg_size: u32";
        (args.to_string(), String::new(), String::new())
    };
    let n = |v: u32| v.to_string();
    let subs = [
        ("BINDINGS", bindings),
        ("BATCH_LETS", batch_lets().into()),
        ("EPILOGUE", epilogue(key, epi.as_ref())),
        ("F", n(f)),
        ("BM", n(cfg.bm())),
        ("BN", n(cfg.bn())),
        ("BK", n(cfg.bk)),
        ("WN", n(cfg.wn)),
        ("SM", n(cfg.sm)),
        ("SN", n(cfg.sn)),
        ("INV", n(cfg.invocations())),
        ("SA", n(sa)),
        ("SB", n(sb)),
        ("A_SHARED", n(a_shared)),
        ("B_SHARED", n(b_shared)),
        ("C_SHARED", n(cfg.wm * cfg.wn * f * f)),
        ("ACC_DECL", acc),
        ("FETCH", fetch),
        ("PUT_A", put_a),
        ("PUT_B", put_b),
        ("MMA", mma),
        ("STORE", store),
        ("SUBGROUP_ARGS", subgroup_args),
        ("SUBGROUP_LETS", subgroup_lets),
    ];
    render(COOP, &subs) + &emulation + BATCH
}

impl MatmulKernel for MatMulCoop {
    fn tile(&self) -> (u64, u64) {
        (self.cfg.bm() as u64, self.cfg.bn() as u64)
    }
}
