//! Storage bindings and their accessors. Kernel templates (`kernels/`) never touch a storage binding directly: they call
//! accessors generated here, `ld_NAME(i)` / `ld4_NAME(i)` to read element `i` (4 elements from `i` for vec4
//! bindings) as f32 (i32 for integer tensors) and `st_NAME(i, v)` / `st4_NAME(i, v)` to write. That keeps every
//! storage question in one place:
//! - f16 with SHADER_F16: `array<f16>` / `array<vec4<f16>>` and `enable f16;`;
//! - f16 without it (the browser's SwiftShader, GL): pairs packed in u32 words, unpacked with
//!   `unpack2x16float`; a scalar store into a shared word goes through two atomics (clear its half, then set it)
//!   so that two invocations writing the two halves never clobber each other; vec4 stores own whole words;
//! - bindings over the same memory (`x + x`, in-place): one declaration, the other name's accessors use it.

use super::template::compute_type;
use crate::backend::gpu::kernel::{Binding, KernelKey};
use crate::dtype::DType;

/// Declarations of the storage bindings (1..) and their accessors.
pub(super) fn declarations(key: &KernelKey) -> String {
    let binds = key.kind.bindings(key);
    let packed = |d: DType| d == DType::F16 && key.packed_f16;
    let alias = |i: usize| key.alias.get(i).copied().unwrap_or(i);
    // an input array is declared with vec4 elements only where every binding over it reads vec4: a vec4 array
    // holds floor(bytes / 16) elements, so a scalar read of the last 1-3 elements of memory whose length is no
    // multiple of 4 elements would fall outside it (`x[0:8] + x[8:9]` over an x of 9); an output is declared as
    // it is written (a vec4 output covers its memory exactly)
    let declared_vec4 =
        |t: usize| binds[t].vec4 && (binds[t].output || binds.iter().enumerate().all(|(i, b)| alias(i) != t || b.vec4));
    let mut out = String::new();
    if reads_grids(key) {
        out.push_str(&format!("@group(0) @binding({}) var<storage, read> iq_tables: array<u32>;\n", binds.len() + 1));
    }
    for (i, bd) in binds.iter().enumerate() {
        let t = alias(i);
        let target = &binds[t];
        let var_vec4 = declared_vec4(t);
        debug_assert!(target.dtype == bd.dtype, "aliased bindings must agree on the dtype");
        debug_assert!(!bd.output || var_vec4 == bd.vec4, "an output is declared as it is written");
        let atomic = packed(bd.dtype) && bd.output && !bd.vec4;
        if bd.dtype.is_storage_format() {
            // bound as u32 words; element accessors decode blocks (rows are whole blocks, so a flat element index
            // finds its block without the row length)
            let var = &target.name;
            if std::ptr::eq(target, bd) {
                out.push_str(&format!("@group(0) @binding({}) var<storage, read_write> {var}: array<u32>;\n", i + 1));
            }
            out.push_str(&block_accessors(bd, var));
            continue;
        }
        if std::ptr::eq(target, bd) {
            let elem = match (bd.dtype, var_vec4, packed(bd.dtype)) {
                (DType::F16, true, true) => "vec2<u32>".to_string(),
                (DType::F16, false, true) if atomic => "atomic<u32>".to_string(),
                (DType::F16, false, true) => "u32".to_string(),
                (d, true, false) => format!("vec4<{}>", wgsl_storage(d)),
                (d, false, _) => wgsl_storage(d).to_string(),
                (_, true, true) => unreachable!("only f16 is packed"),
            };
            let var = &target.name;
            out.push_str(&format!("@group(0) @binding({}) var<storage, read_write> {var}: array<{elem}>;\n", i + 1));
        }
        out.push_str(&accessors(bd, &target.name, packed(bd.dtype), atomic, var_vec4));
    }
    out
}

const BLOCKS: &str = include_str!("blocks.wgsl");

/// The block readers and decoder of a storage-format binding (from `blocks.wgsl`) and its element
/// accessors: `ld_NAME(i)` and `ld4_NAME(i)` (4 elements from `i`, within one block: `i` is a multiple of 4).
fn block_accessors(bd: &Binding, var: &str) -> String {
    let (bs, bb) = (bd.dtype.block_size(), bd.dtype.block_bytes());
    let marker = format!("//! @{}\n", bd.dtype.name());
    let readers = &BLOCKS[..BLOCKS.find("//! @").expect("sections")];
    let start = BLOCKS.find(&marker).map(|i| i + marker.len()).expect("a decoder for every storage format");
    let section = &BLOCKS[start..start + BLOCKS[start..].find("//! @").expect("the next marker")];
    let text = format!("{readers}{section}");
    let name = &bd.name;
    let mut out = text.replace("{{GRID}}", &grid(bd.dtype)).replace("{{N}}", name).replace("{{VAR}}", var);
    out.push_str(&format!(
        "fn ld_{name}(i: u32) -> f32 {{\n    return dq_{name}((i / {bs}u) * {bb}u, i % {bs}u);\n}}\n"
    ));
    // vec4 loads start at a multiple of 4, so with blocks of 4 or more elements the four lie in one block
    let ld4 = if section.contains("fn dq4_") {
        format!("return dq4_{name}((i / {bs}u) * {bb}u, i % {bs}u);")
    } else if bs >= 4 {
        format!("let b = (i / {bs}u) * {bb}u;\n    let e = i % {bs}u;\n    return vec4<f32>(dq_{name}(b, e), dq_{name}(b, e + 1u), dq_{name}(b, e + 2u), dq_{name}(b, e + 3u));")
    } else {
        format!("return vec4<f32>(ld_{name}(i), ld_{name}(i + 1u), ld_{name}(i + 2u), ld_{name}(i + 3u));")
    };
    out.push_str(&format!("fn ld4_{name}(i: u32) -> vec4<f32> {{\n    {ld4}\n}}\n"));
    out
}

/// The lookup grids of the IQ block types (`crate::quant::grids`) as u32 words, in the order of [`GRIDS`]: two
/// words a row of 8 bytes (the 2-bit and 1-bit types' grids), one a row of 4 (the 3-bit ones'). A device uploads
/// it once and binds it to the dispatches that read such a type, after their own bindings.
pub(crate) fn grid_table() -> Vec<u32> {
    use crate::quant::grids::*;
    let eights = |g: &[u64]| g.iter().flat_map(|&r| [r as u32, (r >> 32) as u32]).collect::<Vec<u32>>();
    [eights(&IQ2XXS_GRID), eights(&IQ2XS_GRID), eights(&IQ2S_GRID), eights(&IQ1S_GRID)]
        .into_iter()
        .chain([IQ3XXS_GRID.to_vec(), IQ3S_GRID.to_vec()])
        .flatten()
        .collect()
}

/// Words of [`grid_table`].
pub(crate) const GRID_WORDS: u64 = 512 + 1024 + 2048 + 4096 + 256 + 512;

/// Each grid type's grid in [`grid_table`]: (dtype, first word, words a row).
const GRIDS: [(DType, usize, usize); 7] = [
    (DType::IQ2_XXS, 0, 2),
    (DType::IQ2_XS, 512, 2),
    (DType::IQ2_S, 512 + 1024, 2),
    (DType::IQ1_S, 512 + 1024 + 2048, 2),
    (DType::IQ1_M, 512 + 1024 + 2048, 2),
    (DType::IQ3_XXS, 512 + 1024 + 2048 + 4096, 1),
    (DType::IQ3_S, 512 + 1024 + 2048 + 4096 + 256, 1),
];

/// Whether a binding of `dtype` reads the device's grid table.
pub(crate) fn needs_grid(dtype: DType) -> bool {
    GRIDS.iter().any(|g| g.0 == dtype)
}

/// Whether the variant `key` reads the device's grid table (bound after its own bindings, as `iq_tables`).
pub(crate) fn reads_grids(key: &KernelKey) -> bool {
    key.ins.iter().any(|&d| needs_grid(d))
}

/// A grid type's accessors of its grid in the `iq_tables` binding: `grid8_{{N}}(row, j)` / `grid4_{{N}}(row, j)`,
/// byte j of a row, and `sign_{{N}}(index, j)`: ±1 from bit j of the even-parity sign byte of a 7-bit index
/// (ggml's ksigns_iq2xs: the index, its parity in bit 7). Empty for the other types.
fn grid(dtype: DType) -> String {
    let Some(&(_, at, per_row)) = GRIDS.iter().find(|g| g.0 == dtype) else { return String::new() };
    let access = if per_row == 1 {
        format!("fn grid4_{{{{N}}}}(row: u32, j: u32) -> u32 {{\n    return (iq_tables[{at}u + row] >> (8u * j)) & 0xffu;\n}}\n")
    } else {
        format!("fn grid8_{{{{N}}}}(row: u32, j: u32) -> u32 {{\n    return (iq_tables[{at}u + 2u * row + j / 4u] >> (8u * (j % 4u))) & 0xffu;\n}}\n")
    };
    let sign = "fn sign_{{N}}(index: u32, j: u32) -> f32 {\n    let s = index | ((countOneBits(index) & 1u) << 7u);\n    return select(1.0, -1.0, ((s >> j) & 1u) != 0u);\n}\n";
    access + sign
}

/// The `ld`/`st` functions of binding `bd`, whose array is `var` (declared with vec4 elements when `var_vec4`:
/// an input may be read at another width than its memory's declaration, as an elementwise kernel's vec4 operand
/// beside a broadcast one over the same memory).
fn accessors(bd: &Binding, var: &str, packed: bool, atomic: bool, var_vec4: bool) -> String {
    let c = compute_type(bd.dtype);
    let name = &bd.name;
    if !bd.output && bd.vec4 != var_vec4 {
        return other_width_load(bd, var, packed);
    }
    match (bd.output, bd.vec4) {
        (true, true) => {
            let body = if packed {
                format!("{var}[i / 4u] = vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw));")
            } else {
                format!("{var}[i / 4u] = vec4<{}>(v);", wgsl_storage(bd.dtype))
            };
            format!("fn st4_{name}(i: u32, v: vec4<f32>) {{\n    {body}\n}}\n")
        }
        (true, false) => {
            let body = if atomic {
                format!(
                    "let sh = (i & 1u) * 16u;\n    atomicAnd(&{var}[i >> 1u], ~(0xffffu << sh));\n    atomicOr(&{var}[i >> 1u], (pack2x16float(vec2<f32>(v, 0.0)) & 0xffffu) << sh);"
                )
            } else {
                format!("{var}[i] = {}(v);", wgsl_storage(bd.dtype))
            };
            format!("fn st_{name}(i: u32, v: {c}) {{\n    {body}\n}}\n")
        }
        (false, true) => {
            let body = if packed {
                format!("let w = {var}[i / 4u];\n    return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));")
            } else {
                format!("return vec4<f32>({var}[i / 4u]);")
            };
            let mut s = format!("fn ld4_{name}(i: u32) -> vec4<f32> {{\n    {body}\n}}\n");
            if bd.dtype == DType::F16 && !packed {
                // the f16 elements as stored, for kernels that compute in f16 (cooperative matrices)
                s.push_str(&format!("fn ld4h_{name}(i: u32) -> vec4<f16> {{\n    return {var}[i / 4u];\n}}\n"));
            }
            s
        }
        (false, false) => {
            let body = if packed {
                format!("return unpack2x16float({var}[i >> 1u])[i & 1u];")
            } else {
                format!("return {c}({var}[i]);")
            };
            format!("fn ld_{name}(i: u32) -> {c} {{\n    {body}\n}}\n")
        }
    }
}

/// The load of input `bd` from `var`, an array of the other width (vec4 elements where `bd` is scalar, scalar
/// elements where `bd` is vec4); f16 packed in u32 words when `packed` (as `vec2<u32>` in a vec4 array).
fn other_width_load(bd: &Binding, var: &str, packed: bool) -> String {
    let name = &bd.name;
    if bd.vec4 {
        let body = if packed {
            format!("let w = i / 2u;\n    return vec4<f32>(unpack2x16float({var}[w]), unpack2x16float({var}[w + 1u]));")
        } else {
            let e = |j: &str| format!("f32({var}[i{j}])");
            format!("return vec4<f32>({}, {}, {}, {});", e(""), e(" + 1u"), e(" + 2u"), e(" + 3u"))
        };
        return format!("fn ld4_{name}(i: u32) -> vec4<f32> {{\n    {body}\n}}\n");
    }
    let c = compute_type(bd.dtype);
    let body = if packed {
        format!("return unpack2x16float({var}[i / 4u][(i / 2u) % 2u])[i % 2u];")
    } else {
        format!("return {c}({var}[i / 4u][i % 4u]);")
    };
    format!("fn ld_{name}(i: u32) -> {c} {{\n    {body}\n}}\n")
}

/// The WGSL element type of a native storage array.
fn wgsl_storage(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::I32 => "i32",
        // storage formats are bound as u32 words and decoded by the kernel's block reader
        _ => "u32",
    }
}
