//! Every block type and the mixture-of-experts ops in the browser: `tests/data/quant.gguf`'s weights (one per
//! block type, with the `gguf` package's decoding of each) decoded by `cast`, multiplied as a mat-vec and a matmul
//! and selected as experts by `mul_mat_id`, on WebGPU (the WGSL decoders, their grids from the device's table) and
//! the wasm CPU backend (its simd128 kernels), against f64 products of the reference values; `top_k` and
//! `take_along_axis` against values computed here.

use super::devices;
use wasm_bindgen_test::*;
use webtensor::{CompileOptions, DType, Graph, HostTensor};

/// (name, dtype, bytes, reference values) of each `w.*` tensor of tests/data/quant.gguf, all `[9, 512]`.
fn fixture() -> Vec<(String, DType, Vec<u8>, Vec<f64>)> {
    let bytes = webtensor::Bytes::from_vec(include_bytes!("../data/quant.gguf").to_vec());
    let f = webtensor::gguf::GgufFile::from_bytes("quant.gguf", bytes).unwrap();
    let names: Vec<String> = f.tensors.iter().filter_map(|t| t.name.strip_prefix("w.").map(String::from)).collect();
    assert!(names.len() >= 23, "quant.gguf has {} block types", names.len());
    names
        .into_iter()
        .map(|name| {
            let w = f.tensor(&format!("w.{name}")).unwrap();
            let reference = f.host_tensor(f.tensor(&format!("ref.{name}")).unwrap()).unwrap().data.to_f64();
            (name, w.dtype, f.data(w).as_slice().to_vec(), reference)
        })
        .collect()
}

/// Activations of `m` rows of `k`.
fn activations(m: usize, k: usize) -> Vec<f32> {
    (0..m * k).map(|i| (((i * 37 + 11) % 101) as f32 - 50.0) / 25.0).collect()
}

/// `a [m, k] @ w [n, k]ᵀ` in f64, and each output's sum of absolute products (its scale).
fn products(a: &[f32], w: &[f64], (m, n, k): (usize, usize, usize)) -> (Vec<f64>, Vec<f64>) {
    let mut out = (vec![0.0; m * n], vec![0.0; m * n]);
    for i in 0..m {
        for j in 0..n {
            let terms = (0..k).map(|p| a[i * k + p] as f64 * w[j * k + p]);
            out.0[i * n + j] = terms.clone().sum();
            out.1[i * n + j] = terms.map(f64::abs).sum();
        }
    }
    out
}

/// Each block type decoded (`cast`), as a mat-vec, as a matmul of 5 rows and as experts (`mul_mat_id` over the
/// weight seen as 3 experts of 3 rows, each of 2 tokens taking 2), NaN-prefilled outputs, on both backends.
/// Decoding is exact to f32; products are within 1% of their scale on the CPU (8-bit activations, as llama.cpp),
/// 1e-5 on WebGPU.
#[wasm_bindgen_test]
async fn every_block_type_decodes_and_multiplies_as_gguf_quants() {
    let (n, k) = (9usize, 512usize);
    let options = CompileOptions { poison: true, ..CompileOptions::default() };
    for dev in devices().await {
        let cpu = dev.capabilities().backend == webtensor::BackendKind::Cpu;
        for (name, dtype, bytes, reference) in fixture() {
            let w = dev.upload_bytes("w", dtype, &[n, k], webtensor::Bytes::from_vec(bytes)).unwrap();
            let mut g = Graph::new();
            let (x1, x5) = (g.input("x1", DType::F32, &[1, k]).unwrap(), g.input("x5", DType::F32, &[5, k]).unwrap());
            let xe = g.input("xe", DType::F32, &[2, 1, k]).unwrap();
            let ids = g.input("ids", DType::I32, &[2, 2]).unwrap();
            let wt = g.resident(&w).unwrap();
            let t = g.t(wt).unwrap();
            let (y1, y5) = (g.matmul(x1, t).unwrap(), g.matmul(x5, t).unwrap());
            let experts = g.reshape(wt, &[3, 3, k]).unwrap();
            let ye = g.mul_mat_id(xe, experts, ids).unwrap();
            let dense = g.cast(wt, DType::F32).unwrap();
            let mut plan = dev.compile_async(&g, &[dense, y1, y5, ye], &options).await.unwrap();
            let (a1, a5, ae) = (activations(1, k), activations(5, k), activations(2, k));
            let id_values = vec![2, 0, 1, 2];
            let inputs = [
                (x1, HostTensor::f32(&[1, k], a1.clone()).unwrap()),
                (x5, HostTensor::f32(&[5, k], a5.clone()).unwrap()),
                (xe, HostTensor::f32(&[2, 1, k], ae.clone()).unwrap()),
                (ids, HostTensor::new(&[2, 2], webtensor::Data::I32(id_values.clone())).unwrap()),
            ];
            let refs: Vec<_> = inputs.iter().map(|(t, h)| (*t, h)).collect();
            let out = plan.run_async(&refs).await.unwrap();
            let decoded = out[0].data.to_f32();
            for (i, (&got, &want)) in decoded.iter().zip(&reference).enumerate() {
                assert!((got as f64 - want).abs() <= 1e-6 * want.abs().max(1e-3), "{dev:?} {name}: [{i}] {got} {want}");
            }
            let tol = if cpu { 0.01 } else { 1e-5 };
            let check = |what: &str, got: &[f32], (want, scale): (Vec<f64>, Vec<f64>)| {
                for (i, &g) in got.iter().enumerate() {
                    let err = (g as f64 - want[i]).abs();
                    assert!(err <= tol * scale[i] + 1e-6, "{dev:?} {name} {what}: [{i}] {g} vs {} ({err})", want[i]);
                }
            };
            check("mat-vec", &out[1].data.to_f32(), products(&a1, &reference, (1, n, k)));
            check("matmul", &out[2].data.to_f32(), products(&a5, &reference, (5, n, k)));
            // token t's slot j: expert ids[t, j]'s rows (3 of the weight's 9) times token t's row
            let mut want = (vec![], vec![]);
            for (p, &e) in id_values.iter().enumerate() {
                let rows = &reference[e as usize * 3 * k..(e as usize + 1) * 3 * k];
                let (v, s) = products(&ae[p / 2 * k..(p / 2 + 1) * k], rows, (1, 3, k));
                want.0.extend(v);
                want.1.extend(s);
            }
            check("mul_mat_id", &out[3].data.to_f32(), want);
        }
    }
}

/// `top_k` (largest first, ties to the lower index) and `take_along_axis` on both backends.
#[wasm_bindgen_test]
async fn top_k_and_take_along_axis() {
    let x = vec![0.5f32, -1.0, 2.0, 0.5, 3.0, 2.0, /* row 2 */ -4.0, 7.0, 7.0, 1.0, -2.0, 0.0];
    for dev in devices().await {
        let mut g = Graph::new();
        let xi = g.input("x", DType::F32, &[2, 6]).unwrap();
        let top = g.top_k(xi, 3).unwrap();
        let picked = g.take_along_axis(xi, top).unwrap();
        let mut plan = dev.compile_async(&g, &[top, picked], &CompileOptions::default()).await.unwrap();
        let xh = HostTensor::f32(&[2, 6], x.clone()).unwrap();
        let out = plan.run_async(&[(xi, &xh)]).await.unwrap();
        assert_eq!(out[0].data.to_f64(), vec![4.0, 2.0, 5.0, 1.0, 2.0, 3.0], "{dev:?}: indices");
        assert_eq!(out[1].data.to_f32(), vec![3.0, 2.0, 2.0, 7.0, 7.0, 1.0], "{dev:?}: values");
    }
}
