//! The linear-attention ops in the browser: `l2_norm`, `ssm_conv` and `gated_delta_net` (output and new state) on
//! WebGPU and the wasm CPU backend, NaN-free outputs against the recurrence computed here in f64 (a small prefill
//! of 9 tokens, value heads tiled over the key heads).

use super::devices;
use wasm_bindgen_test::*;
use webtensor::{CompileOptions, DType, Graph, HostTensor};

fn values(n: usize, seed: usize, scale: f32, offset: f32) -> Vec<f32> {
    (0..n).map(|i| (((i * 37 + seed * 11) % 101) as f32 / 50.0 - 1.0) * scale + offset).collect()
}

/// `x / max(‖x‖, eps)` of each row of `n`.
fn l2(x: &[f32], n: usize) -> Vec<f64> {
    let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for row in out.chunks_mut(n) {
        let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-6);
        row.iter_mut().for_each(|v| *v /= norm);
    }
    out
}

fn close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-12);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(((g as f64) - w).abs() <= 1e-4 * scale, "{what}[{i}]: {g} vs {w}");
    }
}

#[wasm_bindgen_test]
async fn ssm_conv_and_the_gated_delta_rule() {
    let (t, hk, hv, d, k, c) = (9usize, 1usize, 2usize, 8usize, 4usize, 6usize);
    let (x, w) = (values((t + k - 1) * c, 1, 1.0, 0.0), values(c * k, 2, 0.5, 0.0));
    let (q, kk, v) =
        (values(t * hk * d, 3, 1.0, 0.0), values(t * hk * d, 4, 1.0, 0.0), values(t * hv * d, 5, 1.0, 0.0));
    let (g, beta, s0) = (values(t * hv, 6, 0.4, -0.5), values(t * hv, 7, 0.4, 0.5), values(hv * d * d, 8, 0.1, 0.0));
    // the references: the conv, then the recurrence token by token (state rows a value index each)
    let conv: Vec<f64> = (0..t * c)
        .map(|i| (0..k).map(|j| w[(i % c) * k + j] as f64 * x[(i / c + j) * c + i % c] as f64).sum())
        .collect();
    let (qn, kn) = (l2(&q, d), l2(&kk, d));
    let mut state: Vec<f64> = s0.iter().map(|&v| v as f64).collect();
    let mut out = vec![0.0; t * hv * d];
    for ti in 0..t {
        for h in 0..hv {
            let (kr, qr) = (&kn[ti * d..(ti + 1) * d], &qn[ti * d..(ti + 1) * d]); // key head h mod 1
            let (decay, b) = ((g[ti * hv + h] as f64).exp(), beta[ti * hv + h] as f64);
            for j in 0..d {
                let row = &mut state[(h * d + j) * d..(h * d + j + 1) * d];
                row.iter_mut().for_each(|s| *s *= decay);
                let delta = b * (v[(ti * hv + h) * d + j] as f64 - row.iter().zip(kr).map(|(a, b)| a * b).sum::<f64>());
                row.iter_mut().zip(kr).for_each(|(s, k)| *s += delta * k);
                out[(ti * hv + h) * d + j] = row.iter().zip(qr).map(|(a, b)| a * b).sum::<f64>() / (d as f64).sqrt();
            }
        }
    }
    for dev in devices().await {
        let mut gr = Graph::new();
        let [xi, wi] =
            [("x", &[1, t + k - 1, c][..]), ("w", &[c, k][..])].map(|(n, s)| gr.input(n, DType::F32, s).unwrap());
        let y = gr.ssm_conv(xi, wi).unwrap();
        let qi = gr.input("q", DType::F32, &[1, t, hk, d]).unwrap();
        let ki = gr.input("k", DType::F32, &[1, t, hk, d]).unwrap();
        let vi = gr.input("v", DType::F32, &[1, t, hv, d]).unwrap();
        let gi = gr.input("g", DType::F32, &[1, t, hv]).unwrap();
        let bi = gr.input("beta", DType::F32, &[1, t, hv]).unwrap();
        let si = gr.input("s", DType::F32, &[1, hv, d, d]).unwrap();
        let (qn_t, kn_t) = (gr.l2_norm(qi, 1e-6).unwrap(), gr.l2_norm(ki, 1e-6).unwrap());
        let scale = 1.0 / (d as f32).sqrt();
        let (o, s) = gr.gated_delta_net(qn_t, kn_t, vi, gi, bi, si, scale).unwrap();
        let mut plan = dev.compile_async(&gr, &[y, qn_t, o, s], &CompileOptions::default()).await.unwrap();
        let h = |shape: &[usize], v: &[f32]| HostTensor::f32(shape, v.to_vec()).unwrap();
        let inputs = [
            (xi, h(&[1, t + k - 1, c], &x)),
            (wi, h(&[c, k], &w)),
            (qi, h(&[1, t, hk, d], &q)),
            (ki, h(&[1, t, hk, d], &kk)),
            (vi, h(&[1, t, hv, d], &v)),
            (gi, h(&[1, t, hv], &g)),
            (bi, h(&[1, t, hv], &beta)),
            (si, h(&[1, hv, d, d], &s0)),
        ];
        let refs: Vec<_> = inputs.iter().map(|(t, v)| (*t, v)).collect();
        let got = plan.run_async(&refs).await.unwrap();
        close(&format!("{dev:?} ssm_conv"), &got[0].data.to_f32(), &conv);
        close(&format!("{dev:?} l2_norm"), &got[1].data.to_f32(), &qn);
        close(&format!("{dev:?} gated_delta_net out"), &got[2].data.to_f32(), &out);
        close(&format!("{dev:?} gated_delta_net state"), &got[3].data.to_f32(), &state);
    }
}
