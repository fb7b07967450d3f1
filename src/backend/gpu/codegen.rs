//! WGSL generation (stage 4a, text): a [`KernelKey`] becomes the complete source of its variant.
//!
//! Templates in `shaders/` never touch a storage binding directly: they call accessors generated here,
//! `ld_NAME(i)` / `ld4_NAME(i)` to read element `i` (4 elements from `i` for vec4 bindings) as f32 (i32 for
//! integer tensors) and `st_NAME(i, v)` / `st4_NAME(i, v)` to write. That keeps every storage question in one
//! place:
//! - f16 with SHADER_F16: `array<f16>` / `array<vec4<f16>>` and `enable f16;`;
//! - f16 without it (the browser's SwiftShader, GL): pairs packed in u32 words, unpacked with
//!   `unpack2x16float`; a scalar store into a shared word goes through two atomics (clear its half, then set it)
//!   so that two invocations writing the two halves never clobber each other; vec4 stores own whole words;
//! - bindings over the same memory (`x + x`, in-place): one declaration, the other name's accessors use it.

use super::kernels::{render, KernelKey, KernelKind};
use super::matmul;
use crate::DType;

const COMMON: &str = include_str!("../../../shaders/common.wgsl");
const ELEMENTWISE: &str = include_str!("../../../shaders/elementwise.wgsl");
const MATMUL: &str = include_str!("../../../shaders/matmul.wgsl");
const ROWS: &str = include_str!("../../../shaders/rows.wgsl");
const GATHER: &str = include_str!("../../../shaders/gather.wgsl");

/// One storage binding of a kernel: its variable name, dtype, whether it is read as vec4, whether it is the output.
struct Binding {
    name: String,
    dtype: DType,
    vec4: bool,
    output: bool,
}

/// The WGSL scalar type an element is computed in: f32 for float tensors, i32 for integer ones.
pub(crate) fn compute_type(d: DType) -> &'static str {
    if d == DType::I32 {
        "i32"
    } else {
        "f32"
    }
}

impl KernelKey {
    /// Whether the variant declares f16 arithmetic (`enable f16;`).
    pub fn uses_f16(&self) -> bool {
        !self.packed_f16 && (self.out == DType::F16 || self.ins.contains(&DType::F16))
    }

    fn bindings(&self) -> Vec<Binding> {
        let b = |name: &str, dtype: DType, vec4: bool, output: bool| Binding { name: name.into(), dtype, vec4, output };
        let extra = |v: &mut Vec<Binding>| {
            for (k, &d) in self.ins.iter().enumerate().skip(2) {
                v.push(b(&format!("e{}", k - 2), d, false, false));
            }
        };
        let mut v = Vec::new();
        match &self.kind {
            KernelKind::Elementwise { .. } => {
                v.push(b("out", self.out, false, true));
                for (k, &d) in self.ins.iter().enumerate() {
                    v.push(b(&format!("in{k}"), d, false, false));
                }
            }
            KernelKind::MatMul { .. } => {
                v.extend([b("c_out", self.out, false, true), b("a_in", self.ins[0], false, false)]);
                v.push(b("b_in", self.ins[1], false, false));
                extra(&mut v);
            }
            KernelKind::MatMulTiled { out_vec4, .. } => {
                v.extend([b("c_out", self.out, *out_vec4, true), b("a_in", self.ins[0], true, false)]);
                v.push(b("b_in", self.ins[1], true, false));
                extra(&mut v);
            }
            KernelKind::MatMulCoop { .. } => {
                v.extend([b("c_out", self.out, false, true), b("a_in", self.ins[0], true, false)]);
                v.push(b("b_in", self.ins[1], true, false));
                extra(&mut v);
            }
            KernelKind::MatVec { .. } => {
                v.extend([b("y_out", self.out, false, true), b("x_in", self.ins[0], true, false)]);
                v.push(b("b_in", self.ins[1], true, false));
                extra(&mut v);
            }
            KernelKind::Rows { .. } => {
                v.extend([b("out", self.out, false, true), b("x_in", self.ins[0], false, false)]);
                if self.ins.len() > 1 {
                    v.push(b("m_in", self.ins[1], false, false));
                }
            }
            KernelKind::GetRows | KernelKind::Concat => {
                v.extend([b("out", self.out, false, true), b("src0", self.ins[0], false, false)]);
                v.push(b("src1", self.ins[1], false, false));
            }
        }
        v
    }

    /// Declarations of the storage bindings (1..) and their accessors.
    fn bindings_wgsl(&self) -> String {
        let binds = self.bindings();
        let packed = |d: DType| d == DType::F16 && self.packed_f16;
        let mut out = String::new();
        for (i, bd) in binds.iter().enumerate() {
            let target = &binds[self.alias.get(i).copied().unwrap_or(i)];
            debug_assert!(target.dtype == bd.dtype && target.vec4 == bd.vec4, "aliased bindings must agree");
            let var = &target.name;
            let atomic = packed(bd.dtype) && bd.output && !bd.vec4;
            if std::ptr::eq(target, bd) {
                let elem = match (bd.dtype, bd.vec4, packed(bd.dtype)) {
                    (DType::F16, true, true) => "vec2<u32>".to_string(),
                    (DType::F16, false, true) if atomic => "atomic<u32>".to_string(),
                    (DType::F16, false, true) => "u32".to_string(),
                    (d, true, false) => format!("vec4<{}>", wgsl_storage(d)),
                    (d, false, _) => wgsl_storage(d).to_string(),
                    (_, true, true) => unreachable!(),
                };
                out.push_str(&format!(
                    "@group(0) @binding({}) var<storage, read_write> {var}: array<{elem}>;\n",
                    i + 1
                ));
            }
            let c = compute_type(bd.dtype);
            let name = &bd.name;
            if bd.output {
                if bd.vec4 {
                    let body = match (bd.dtype, packed(bd.dtype)) {
                        (DType::F16, true) => {
                            format!("{var}[i / 4u] = vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw));")
                        }
                        (d, _) => format!("{var}[i / 4u] = vec4<{}>(v);", wgsl_storage(d)),
                    };
                    out.push_str(&format!("fn st4_{name}(i: u32, v: vec4<f32>) {{\n    {body}\n}}\n"));
                } else {
                    let body = if atomic {
                        format!(
                            "let sh = (i & 1u) * 16u;\n    atomicAnd(&{var}[i >> 1u], ~(0xffffu << sh));\n    atomicOr(&{var}[i >> 1u], (pack2x16float(vec2<f32>(v, 0.0)) & 0xffffu) << sh);"
                        )
                    } else {
                        format!("{var}[i] = {}(v);", wgsl_storage(bd.dtype))
                    };
                    out.push_str(&format!("fn st_{name}(i: u32, v: {c}) {{\n    {body}\n}}\n"));
                }
            } else if bd.vec4 {
                let body = match (bd.dtype, packed(bd.dtype)) {
                    (DType::F16, true) => {
                        format!(
                            "let w = {var}[i / 4u];\n    return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));"
                        )
                    }
                    _ => format!("return vec4<f32>({var}[i / 4u]);"),
                };
                out.push_str(&format!("fn ld4_{name}(i: u32) -> vec4<f32> {{\n    {body}\n}}\n"));
                if bd.dtype == DType::F16 && !packed(bd.dtype) {
                    // the f16 elements as stored, for kernels that compute in f16 (cooperative matrices)
                    out.push_str(&format!("fn ld4h_{name}(i: u32) -> vec4<f16> {{\n    return {var}[i / 4u];\n}}\n"));
                }
            } else {
                let body = match (bd.dtype, packed(bd.dtype)) {
                    (DType::F16, true) => format!("return unpack2x16float({var}[i >> 1u])[i & 1u];"),
                    _ => format!("return {c}({var}[i]);"),
                };
                out.push_str(&format!("fn ld_{name}(i: u32) -> {c} {{\n    {body}\n}}\n"));
            }
        }
        out
    }

    /// The `epilogue(acc, coords)` function of a matmul variant: the expression over `acc` and the extra operands
    /// (`ins[2..]`), each read at the output element's coordinates (b0, b1, m, n) through the strides in Params
    /// v[4 + 2k] and the offset in v[5 + 2k].x. The identity when nothing was fused.
    pub fn epilogue(&self, epi: Option<&str>) -> String {
        let Some(expr) = epi else {
            return "fn epilogue(acc: f32, c: vec4<u32>) -> f32 {\n    return acc;\n}".into();
        };
        let loads: String = (0..self.ins.len() - 2)
            .map(|k| format!("    let x{k} = f32(ld_e{k}(at(c, P.v[{}], P.v[{}].x)));\n", 4 + 2 * k, 5 + 2 * k))
            .collect();
        format!("fn epilogue(acc: f32, c: vec4<u32>) -> f32 {{\n{loads}    return {expr};\n}}")
    }

    /// The complete WGSL source of this variant.
    pub fn wgsl(&self) -> String {
        let mut enable = String::new();
        if self.uses_f16() {
            enable.push_str("enable f16;\n");
        }
        // Browsers require the directive; naga (native) rejects it and gates subgroup ops by capability instead.
        if cfg!(target_arch = "wasm32") && matches!(self.kind, KernelKind::MatVec { subgroups: true, .. }) {
            enable.push_str("enable subgroups;\n");
        }
        if matches!(self.kind, KernelKind::MatMulCoop { emulated: false, .. }) {
            enable.push_str("enable wgpu_cooperative_matrix;\n");
        }
        let bindings = self.bindings_wgsl();
        let out_c = compute_type(self.out).to_string();
        let body = match &self.kind {
            KernelKind::Elementwise { expr } => {
                let int = self.out == DType::I32 && self.ins.iter().all(|&d| d == DType::I32);
                let c = if int { "i32" } else { "f32" };
                let loads = (0..self.ins.len())
                    .map(|k| format!("    let x{k} = {c}(ld_in{k}(at(c, P.v[{}], P.v[{}].x)));", 2 + 2 * k, 3 + 2 * k))
                    .collect::<Vec<_>>()
                    .join("\n");
                render(
                    ELEMENTWISE,
                    &[("BINDINGS", bindings), ("OUT_C", out_c), ("LOADS", loads), ("EXPR", expr.clone())],
                )
            }
            KernelKind::MatMul { epi } => {
                let prologue = ("PROLOGUE", matmul::PROLOGUE.to_string());
                render(MATMUL, &[("BINDINGS", bindings), ("EPILOGUE", self.epilogue(epi.as_deref())), prologue])
            }
            KernelKind::Rows { op, mask } => {
                let f = if *mask {
                    "fn load_mask(base: u32, j: u32) -> f32 {\n    return f32(ld_m_in(base + j * P.v[3].w));\n}"
                } else {
                    "fn load_mask(base: u32, j: u32) -> f32 {\n    return 0.0;\n}"
                };
                render(
                    ROWS,
                    &[
                        ("BINDINGS", bindings),
                        ("OUT_C", out_c),
                        ("MASK_FN", f.into()),
                        ("OP", op.to_string()),
                        ("HAS_MASK", mask.to_string()),
                    ],
                )
            }
            KernelKind::MatMulTiled { .. } | KernelKind::MatVec { .. } | KernelKind::MatMulCoop { .. } => {
                matmul::wgsl(self, bindings).expect("a matmul variant")
            }
            KernelKind::GetRows | KernelKind::Concat => render(
                GATHER,
                &[("BINDINGS", bindings), ("OUT_C", out_c), ("CONCAT", (self.kind == KernelKind::Concat).to_string())],
            ),
        };
        format!("{enable}{COMMON}\n{body}")
    }
}

/// The WGSL element type of a native storage array.
fn wgsl_storage(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::I32 => "i32",
    }
}
