//! The variant catalogue: every WGSL variant the compiler can emit for the ops of the graph API (elementwise
//! expressions one op each), for validation with naga and the kernel snapshot (`tests/wgsl.rs`,
//! `tests/kernels.rs`).

use super::kernel::{KernelKey, KernelKind, MatVecReduce, RowKernel};
use super::wgsl::elementwise::node;
use crate::backend::gpu::config::{COOP_CONFIGS, TILE_CONFIGS};
use crate::compile::ir::ElemOp;
use crate::ops::{BinaryOp, GluOp, RowOp, UnaryOp};
use crate::DType::{self, F16, F32, I32};

const FLOATS: [DType; 2] = [F32, F16];

fn elementwise(op: ElemOp, out: DType, ins: Vec<DType>) -> KernelKey {
    let args: Vec<String> = (0..ins.len()).map(|k| format!("x{k}")).collect();
    KernelKey::new(KernelKind::Elementwise { expr: node(op, out, &args) }, out, ins)
}

/// One-op elementwise kernels of every table, in every dtype each accepts, and every cast.
fn elementwise_keys(keys: &mut Vec<KernelKey>) {
    for &op in UnaryOp::ALL {
        let (a, b) = (1.5f32.to_bits(), 2.5f32.to_bits());
        for d in FLOATS {
            keys.push(elementwise(ElemOp::Unary { op, a, b }, d, vec![d]));
        }
        if op.accepts().dtype(I32) {
            keys.push(elementwise(ElemOp::Unary { op, a, b }, I32, vec![I32]));
        }
    }
    for (from, to) in [(F32, F16), (F16, F32), (F32, I32), (I32, F32), (F16, I32), (I32, F16), (F32, F32), (I32, I32)] {
        keys.push(elementwise(ElemOp::Cast, to, vec![from]));
    }
    for &op in BinaryOp::ALL {
        for (a, b, o) in [(F32, F32, F32), (F16, F16, F16), (F16, F32, F32), (F32, F16, F32), (I32, I32, I32)] {
            if op.accepts().dtype(o) {
                keys.push(elementwise(ElemOp::Binary(op), o, vec![a, b]));
            }
        }
    }
    for &op in GluOp::ALL {
        for (a, b, o) in [(F32, F32, F32), (F16, F16, F16), (F16, F32, F32)] {
            keys.push(elementwise(ElemOp::Glu(op), o, vec![a, b]));
        }
    }
}

/// Every matmul kernel in every operand layout and dtype mix, with and without an epilogue.
fn matmul_keys(keys: &mut Vec<KernelKey>) {
    let epis = [None, Some("wt_silu((acc + x0))".to_string())];
    for (a, b, o) in [(F32, F32, F32), (F16, F16, F16), (F16, F32, F32), (F32, F16, F32)] {
        for epi in &epis {
            let ins = if epi.is_some() { vec![a, b, o] } else { vec![a, b] };
            keys.push(KernelKey::new(KernelKind::MatMul { epi: epi.clone() }, o, ins.clone()));
            for cfg in TILE_CONFIGS {
                for (a_kcontig, b_ncontig, out_vec4) in bools3() {
                    let kind = KernelKind::MatMulTiled { cfg, a_kcontig, b_ncontig, out_vec4, epi: epi.clone() };
                    keys.push(KernelKey::new(kind, o, ins.clone()));
                }
            }
            if a == F16 && b == F16 {
                for cfg in COOP_CONFIGS {
                    for (a_kcontig, b_ncontig, emulated) in bools3() {
                        let epi = epi.clone();
                        let kind = KernelKind::MatMulCoop { cfg, a_kcontig, b_ncontig, epi, emulated };
                        keys.push(KernelKey::new(kind.clone(), o, ins.clone()));
                        // an f32 output (a fused cast)
                        keys.push(KernelKey::new(kind, F32, ins.clone()));
                    }
                }
            }
            let layouts =
                [(true, MatVecReduce::Shared), (false, MatVecReduce::Subgroups), (false, MatVecReduce::Shared)];
            let serial = [(true, MatVecReduce::Serial), (false, MatVecReduce::Serial)];
            for (b_ncontig, reduce) in layouts.into_iter().chain(serial) {
                let kind = KernelKind::MatVec { b_ncontig, reduce, epi: epi.clone() };
                keys.push(KernelKey::new(kind, o, ins.clone()));
            }
        }
    }
}

fn bools3() -> impl Iterator<Item = (bool, bool, bool)> {
    (0..8).map(|i| (i & 4 != 0, i & 2 != 0, i & 1 != 0))
}

/// Row kernels, get_rows and concat, and variants whose bindings share memory.
fn other_keys(keys: &mut Vec<KernelKey>) {
    for d in FLOATS {
        for op in RowKernel::all() {
            let out = if let RowKernel::Reduce(r) = op { r.out_dtype(d) } else { d };
            keys.push(KernelKey::new(KernelKind::Rows { op, mask: false }, out, vec![d]));
        }
        for m in FLOATS {
            keys.push(KernelKey::new(
                KernelKind::Rows { op: RowKernel::Row(RowOp::Softmax), mask: true },
                d,
                vec![d, m],
            ));
        }
    }
    for d in [F32, F16, I32] {
        keys.push(KernelKey::new(KernelKind::GetRows, d, vec![d, I32]));
        keys.push(KernelKey::new(KernelKind::Concat, d, vec![d, d]));
    }
    for (dst, src) in [(F32, F32), (F16, F32), (F16, F16), (F32, F16), (I32, I32)] {
        keys.push(KernelKey::new(KernelKind::SetRows, dst, vec![src, I32]));
        keys.push(KernelKey::new(KernelKind::CopyInto, dst, vec![src]));
    }
    for d in FLOATS {
        keys.push(KernelKey::new(KernelKind::Rope, d, vec![d, I32]));
    }
    // attention: prefill and decode tiles, the split pass and its combine, with and without mask and length
    for (d, dv, br, bc) in [(64, 64, 16, 32), (64, 64, 1, 32), (32, 32, 16, 64), (128, 128, 16, 16)] {
        for (partial, mask, dyn_len) in bools3() {
            if partial && br != 1 {
                continue;
            }
            for (q, kv) in [(F32, F32), (F32, F16), (F16, F16)] {
                let kind = KernelKind::Attention { d, dv, br, bc, partial, mask, dyn_len };
                let mut ins = vec![q, kv, kv];
                if mask {
                    ins.push(q);
                }
                if dyn_len {
                    ins.push(I32);
                }
                if partial {
                    ins.push(q);
                }
                keys.push(KernelKey::new(kind, if partial { F32 } else { q }, ins));
            }
        }
        for out in FLOATS {
            keys.push(KernelKey::new(KernelKind::AttentionCombine { dv, dyn_len: false }, out, vec![F32]));
            keys.push(KernelKey::new(KernelKind::AttentionCombine { dv, dyn_len: true }, out, vec![F32, I32]));
        }
    }
    // shared memory bound once: matmul(x, x), x + x, softmax(x, mask = x), in-place x = exp(x)
    let aliased = [
        (KernelKind::MatMul { epi: None }, vec![F32, F32], vec![0, 1, 1]),
        (KernelKind::Elementwise { expr: "(x0 + x1)".into() }, vec![F32, F32], vec![0, 1, 1]),
        (KernelKind::Rows { op: RowKernel::Row(RowOp::Softmax), mask: true }, vec![F32, F32], vec![0, 0, 0]),
        (KernelKind::Elementwise { expr: "exp(x0)".into() }, vec![F32], vec![0, 0]),
    ];
    for (kind, ins, alias) in aliased {
        let mut k = KernelKey::new(kind, F32, ins);
        k.alias = alias;
        keys.push(k);
    }
}

/// Kernels that read a storage format (bf16, the GGUF block types): casts to f32 and f16, get_rows, and matmuls
/// whose B is a weight (`t(w)`, K contiguous) in every matmul kernel that takes one.
fn storage_format_keys(keys: &mut Vec<KernelKey>) {
    for q in DType::ALL.into_iter().filter(|d| d.is_storage_format()) {
        for out in FLOATS {
            keys.push(elementwise(ElemOp::Cast, out, vec![q]));
            keys.push(KernelKey::new(KernelKind::GetRows, out, vec![q, I32]));
        }
        for a in FLOATS {
            keys.push(KernelKey::new(KernelKind::MatMul { epi: None }, F32, vec![a, q]));
            for reduce in [MatVecReduce::Subgroups, MatVecReduce::Shared, MatVecReduce::Serial] {
                let kind = KernelKind::MatVec { b_ncontig: false, reduce, epi: None };
                keys.push(KernelKey::new(kind, F32, vec![a, q]));
            }
            for cfg in TILE_CONFIGS {
                for (a_kcontig, out_vec4) in [(true, true), (false, false)] {
                    let kind = KernelKind::MatMulTiled { cfg, a_kcontig, b_ncontig: false, out_vec4, epi: None };
                    keys.push(KernelKey::new(kind, F32, vec![a, q]));
                }
            }
        }
    }
}

/// Every kernel variant the compiler can emit: `(name, WGSL)`.
pub fn all_variants() -> Vec<(String, String)> {
    let mut keys = Vec::new();
    elementwise_keys(&mut keys);
    matmul_keys(&mut keys);
    other_keys(&mut keys);
    storage_format_keys(&mut keys);
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
