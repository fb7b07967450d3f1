//! The cooperative-matrix matmul (stage 4a, matmul part): tile configurations of `shaders/matmul_coop.wgsl` and
//! the WGSL they generate. Chosen by [`super::matmul::choose`] for f16 × f16 matmuls on adapters with wgpu's
//! EXPERIMENTAL_COOPERATIVE_MATRIX, an F×F×F f16 → f32 tile shape and a subgroup size of 32; each configuration
//! is checked against the CPU backend on the device before it is used (see [`super::tune`]).

use super::kernels::{render, KernelKey, KernelKind};

/// A tile shape of `matmul_coop.wgsl`: a workgroup of `wm × wn` subgroups (32 invocations each), each owning
/// `sm × sn` accumulator fragments of `frag × frag` elements; K advances `bk` elements per step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CoopConfig {
    /// Fragment size in elements (16 for `coop_mat16x16`; the template also takes 8, `coop_mat8x8`).
    pub frag: u32,
    /// Subgroups along M (rows of the block).
    pub wm: u32,
    /// Subgroups along N (columns of the block).
    pub wn: u32,
    /// Accumulator fragments per subgroup along M.
    pub sm: u32,
    /// Accumulator fragments per subgroup along N.
    pub sn: u32,
    /// K elements staged per step (a multiple of `frag`).
    pub bk: u32,
}

/// Every cooperative-matrix configuration the tuner may choose from. All use 16×16×16 fragments: the only
/// adapters offering 8×8×8 f16 → f32 (Metal) have variable subgroup sizes, which the kernel cannot use.
pub const COOP_CONFIGS: [CoopConfig; 4] = [
    CoopConfig { frag: 16, wm: 2, wn: 2, sm: 2, sn: 2, bk: 32 },
    CoopConfig { frag: 16, wm: 2, wn: 2, sm: 4, sn: 2, bk: 32 },
    CoopConfig { frag: 16, wm: 2, wn: 2, sm: 4, sn: 4, bk: 32 },
    CoopConfig { frag: 16, wm: 2, wn: 4, sm: 4, sn: 2, bk: 32 },
];

impl CoopConfig {
    /// Block rows (elements).
    pub fn bm(self) -> u32 {
        self.wm * self.sm * self.frag
    }

    /// Block columns (elements).
    pub fn bn(self) -> u32 {
        self.wn * self.sn * self.frag
    }

    /// Invocations per workgroup (32 per subgroup).
    pub fn invocations(self) -> u32 {
        32 * self.wm * self.wn
    }

    /// `coopF-BMxBNxBK-Ssg`, e.g. `coop16-64x64x32-4sg`.
    pub fn name(self) -> String {
        format!("coop{}-{}x{}x{}-{}sg", self.frag, self.bm(), self.bn(), self.bk, self.wm * self.wn)
    }

    /// Row strides (in halves) of the A and B staging blocks for the operands' layouts.
    fn strides(self, a_kcontig: bool, b_ncontig: bool) -> (u32, u32) {
        let sa = if a_kcontig { self.bk + 8 } else { self.bm() + 8 };
        let sb = if b_ncontig { self.bn() + 8 } else { self.bk + 8 };
        (sa, sb)
    }

    /// Workgroup memory the configuration needs, in bytes (the larger of the two operand layouts).
    pub fn shared_bytes(self) -> u32 {
        let a = (self.bm() * (self.bk + 8)).max(self.bk * (self.bm() + 8));
        let b = (self.bn() * (self.bk + 8)).max(self.bk * (self.bn() + 8));
        2 * (a + b) + 4 * self.wm * self.wn * self.frag * self.frag
    }
}

/// The WGSL of a [`KernelKind::MatMulCoop`] variant, given the generated bindings and accessors (the caller
/// prepends `enable`s and common.wgsl).
pub(crate) fn wgsl(key: &KernelKey, bindings: String) -> String {
    let KernelKind::MatMulCoop { cfg, a_kcontig, b_ncontig, ref epi, emulated } = key.kind else {
        unreachable!("coop::wgsl on {:?}", key.kind)
    };
    let (sa, sb) = cfg.strides(a_kcontig, b_ncontig);
    let f = cfg.frag;
    let ind = |n: usize| " ".repeat(n);
    // one cooperative-matrix load: `what` = `a` or `b`, row-major (`coopLoadT`) or column-major (`coopLoad`)
    let load = |what: &str, row_major: bool, at: String, stride: &str| {
        if emulated {
            format!("emu_load(({at}), {stride}, {row_major})")
        } else {
            let t = if row_major { "T" } else { "" };
            format!("coopLoad{t}<coop_mat{f}x{f}<f16, {}>>(&{what}_s[{at}], {stride})", what.to_uppercase())
        }
    };
    let mut acc = String::new();
    let mut mma = String::new();
    let mut store = String::new();
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
        (
            format!("coop_mat{f}x{f}<f32, C>"),
            "coopMultiplyAdd",
            "let p = &c_s[scratch];\n        coopStoreT(v, p, F);".into(),
        )
    };
    for i in 0..cfg.sm {
        for j in 0..cfg.sn {
            acc += &format!("    var c{i}_{j} = {acc_ty}();\n");
            let lane_arg = if emulated { ", lane" } else { "" };
            mma += &format!("{}c{i}_{j} = {mma_fn}(a{i}, b{j}, c{i}_{j}{lane_arg});\n", ind(12));
            store += &format!(
                "    {{
        let v = c{i}_{j};
        {store_frag}
        workgroupBarrier();
        for (var e = lane; e < F * F; e = e + sg_size) {{
            let gm = row0 + sr + {i}u * F + e / F;
            let gn = col0 + sc + {j}u * F + e % F;
            if (gm < M && gn < N) {{
                let x = epilogue(c_s[scratch + e], vec4<u32>(b0, b1, m0 + gm, n0 + gn));
                st_c_out(c_base + (m0 + gm) * ldc + n0 + gn, x);
            }}
        }}
        workgroupBarrier();
    }}
"
            );
        }
    }
    // Staging of A and B in three pieces: the index of vec4 `e` of a block (`outer` row, `q` column of the
    // staged layout), the global load into registers for the K step starting at `kf` (zero outside the operand),
    // and the store from registers into workgroup memory.
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
    let fetch_one = |reg: &str, loads: &str, outer: &str, len: &str, cond: &str, at: &str, x: &str| {
        format!(
            "{i}for (var l = 0u; l < {loads}; l = l + 1u) {{
{j}let e = lid + l * INV;
{j}{idx}
{j}{reg}[l] = vec4<f16>();
{j}if ({cond}) {{
{j}    {reg}[l] = ld4h_{x}_in({at});
{j}}}
{i}}}
",
            i = ind(12),
            j = ind(16),
            idx = index(outer, len, 16),
        )
    };
    let fetch = fetch_one("ra", "A_LOADS", a_outer, a_len, a_cond, a_at, "a")
        + &fetch_one("rb", "B_LOADS", b_outer, b_len, b_cond, b_at, "b");
    let put_a = format!("{i}{}\n{i}put_a({a_outer} * SA + q, ra[l]);", index(a_outer, a_len, 12), i = ind(12));
    let put_b = format!("{i}{}\n{i}put_b({b_outer} * SB + q, rb[l]);", index(b_outer, b_len, 12), i = ind(12));
    let a_shared = if a_kcontig { cfg.bm() * sa } else { cfg.bk * sa };
    let b_shared = if b_ncontig { cfg.bk * sb } else { cfg.bn() * sb };
    let (subgroup_args, subgroup_lets, emulation) = if emulated {
        let lets = "    let sg = lid / 32u;\n    let lane = lid % 32u;\n    let sg_size = 32u;";
        (String::new(), lets.to_string(), render(EMULATION, &[("PER_LANE", (f * f / 32).to_string())]))
    } else {
        let args = ",\n        @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) lane: u32,\n        @builtin(subgroup_size) sg_size: u32";
        (args.to_string(), String::new(), String::new())
    };
    let text = render(
        include_str!("../../../shaders/matmul_coop.wgsl"),
        &[
            ("BINDINGS", bindings),
            ("EPILOGUE", key.epilogue(epi.as_deref())),
            ("PROLOGUE", super::matmul::PROLOGUE.into()),
            ("F", f.to_string()),
            ("BM", cfg.bm().to_string()),
            ("BN", cfg.bn().to_string()),
            ("BK", cfg.bk.to_string()),
            ("WN", cfg.wn.to_string()),
            ("SM", cfg.sm.to_string()),
            ("SN", cfg.sn.to_string()),
            ("INV", cfg.invocations().to_string()),
            ("SA", sa.to_string()),
            ("SB", sb.to_string()),
            ("A_SHARED", a_shared.to_string()),
            ("B_SHARED", b_shared.to_string()),
            ("C_SHARED", (cfg.wm * cfg.wn * f * f).to_string()),
            ("ACC_DECL", acc),
            ("FETCH", fetch),
            ("PUT_A", put_a),
            ("PUT_B", put_b),
            ("MMA", mma),
            ("STORE", store),
            ("SUBGROUP_ARGS", subgroup_args),
            ("SUBGROUP_LETS", subgroup_lets),
        ],
    );
    text + &emulation
}

/// For tests on adapters without cooperative matrices (`testing::device_with_emulated_coop`): the cooperative
/// operations written out in plain WGSL with their documented semantics. An A or B fragment is a reference to
/// its elements in workgroup memory (row-major: element (r, c) at `at + r * stride + c`; column-major: at
/// `at + c * stride + r`), read when multiplied, which happens before the blocks are overwritten; lane `l` of
/// the 32 in a (virtual) subgroup holds accumulator elements `l, l + 32, ..` (row-major).
const EMULATION: &str = "
struct EmuFrag {
    at: u32,
    stride: u32,
    row_major: bool,
}

fn emu_load(at: u32, stride: u32, row_major: bool) -> EmuFrag {
    return EmuFrag(at, stride, row_major);
}

fn emu_at(m: EmuFrag, r: u32, c: u32) -> u32 {
    return select(m.at + c * m.stride + r, m.at + r * m.stride + c, m.row_major);
}

fn emu_multiply_add(a: EmuFrag, b: EmuFrag, c: array<f32, {{PER_LANE}}>, lane: u32) -> array<f32, {{PER_LANE}}> {
    var d = c;
    for (var t = 0u; t < {{PER_LANE}}u; t = t + 1u) {
        let e = lane + 32u * t;
        var s = d[t];
        for (var k = 0u; k < F; k = k + 1u) {
            s = fma(f32(a_s[emu_at(a, e / F, k)]), f32(b_s[emu_at(b, k, e % F)]), s);
        }
        d[t] = s;
    }
    return d;
}

fn emu_store(v: array<f32, {{PER_LANE}}>, at: u32, lane: u32) {
    for (var t = 0u; t < {{PER_LANE}}u; t = t + 1u) {
        c_s[at + lane + 32u * t] = v[t];
    }
}
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_load_whole_vec4s_and_fit_steps() {
        for c in COOP_CONFIGS {
            let inv = c.invocations();
            assert_eq!((c.bm() * c.bk / 4) % inv, 0, "{}: A loads", c.name());
            assert_eq!((c.bn() * c.bk / 4) % inv, 0, "{}: B loads", c.name());
            assert_eq!(c.bk % c.frag, 0, "{}: K step", c.name());
            // padded rows and fragment offsets keep every cooperative load's pointer and stride 16-byte aligned
            // (Vulkan: the lesser of 16 bytes and one row), in all four layouts; the f32 scratch too
            assert_eq!(c.frag % 8, 0);
            for (a, b) in [(true, true), (true, false), (false, true), (false, false)] {
                let (sa, sb) = c.strides(a, b);
                assert_eq!((sa * 2) % 16, 0, "{}: A stride {sa}", c.name());
                assert_eq!((sb * 2) % 16, 0, "{}: B stride {sb}", c.name());
            }
            assert_eq!((c.frag * c.frag * 4) % 16, 0);
        }
        let names: std::collections::HashSet<String> = COOP_CONFIGS.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), COOP_CONFIGS.len(), "names are unique");
    }
}
