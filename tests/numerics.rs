//! Numerics at the extremes and aliasing (operands over the same memory), on every backend, against f64.

mod common;

use common::reference::{self as r, Arr};
use common::{inp_given, run_suite, Case};
use webtensor::DType::F32;

#[test]
fn activations_at_large_magnitudes_are_finite_and_right() {
    let xs: Vec<f64> = vec![
        -3.0e38, -1e30, -1e4, -100.0, -89.0, -88.0, -20.0, -1e-30, 0.0, 1e-30, 20.0, 88.0, 89.0, 100.0, 1e4, 1e30,
        3.0e38,
    ];
    let n = xs.len();
    type A = (
        &'static str,
        fn(&mut webtensor::Graph, webtensor::Tensor) -> webtensor::Result<webtensor::Tensor>,
        fn(f64) -> f64,
    );
    let ops: [A; 5] = [
        ("tanh", |g, x| g.tanh(x), f64::tanh),
        ("sigmoid", |g, x| g.sigmoid(x), r::sigmoid),
        ("silu", |g, x| g.silu(x), r::silu),
        ("gelu", |g, x| g.gelu(x), r::gelu_tanh),
        ("gelu_erf", |g, x| g.gelu_erf(x), r::gelu_erf),
    ];
    let mut cases = Vec::new();
    for (name, op, f) in ops {
        // gelu and silu of -3e38 are -0 in exact math; x*sigmoid(x) in f32 gives -0 or a tiny value: fine.
        // But x³ in gelu's tanh form overflows to inf for |x| > 7e12: the result must still be finite.
        cases.push(
            Case::new(
                format!("{name}/extremes"),
                vec![inp_given(F32, &[n], xs.clone())],
                move |g, x| op(g, x[0]),
                move |x| {
                    x[0].map(|v| {
                        let y = f(v);
                        // f32 results of f64 values beyond f32's range: the reference clamps the same way
                        if y.is_finite() {
                            y.clamp(-f32::MAX as f64, f32::MAX as f64)
                        } else {
                            y
                        }
                    })
                },
            )
            .tol(1e-7),
        );
    }
    run_suite("extremes", &cases);
}

#[test]
fn softmax_rows_of_neg_inf_and_lowest() {
    let low = f32::MIN as f64;
    let ninf = f64::NEG_INFINITY;
    let rows = [
        vec![ninf; 4],
        vec![low; 4],
        vec![low, ninf, low, ninf],
        vec![ninf, 0.0, ninf, ninf],
        vec![3.0e38, -3.0e38, 0.0, 1.0],
        vec![1e4, 1e4 - 1.0, -1e4, 0.0],
    ];
    let data: Vec<f64> = rows.concat();
    let cases = vec![Case::new(
        "softmax/extreme-rows",
        vec![inp_given(F32, &[rows.len(), 4], data)],
        |g, x| g.softmax(x[0]),
        |x| r::softmax(&x[0], None, 1.0),
    )];
    run_suite("softmax-extremes", &cases);
    // and never NaN for a finite input
    for device in common::devices() {
        let mut g = webtensor::Graph::new();
        let x = g.input("x", F32, &[2, 4]).unwrap();
        let y = g.softmax(x).unwrap();
        let v =
            webtensor::HostTensor::f32(&[2, 4], vec![f32::MIN, f32::MAX, 0.0, 1.0, f32::MIN, f32::MIN, -1.0, f32::MAX])
                .unwrap();
        let out = device.compile(&g, &[y]).unwrap().run(&[(x, &v)]).unwrap();
        assert!(out[0].data.to_f32().iter().all(|v| v.is_finite()), "{:?}", out[0].data);
    }
}

/// A mask far from zero (f16's lowest, −65504, on every key): `x·scale + mask` must not be rounded at that
/// magnitude (ulp 2⁻⁸ in f32) before the row's maximum is subtracted. Rows: the mask −65504 everywhere, −65504
/// with some −inf, −65504 beside 0 (those keys vanish), and a mask of mixed large values.
#[test]
fn masked_softmax_keeps_precision_at_large_mask_offsets() {
    let n = 67;
    let x: Vec<f64> = (0..4 * n).map(|i| ((i * 37 % 101) as f64 - 50.0) / 7.0).collect();
    let low = -65504.0;
    let mut mask = vec![low; n];
    mask.extend((0..n).map(|j| if j % 3 == 0 { f64::NEG_INFINITY } else { low }));
    mask.extend((0..n).map(|j| if j % 2 == 0 { 0.0 } else { low }));
    mask.extend((0..n).map(|j| -60000.0 - (j % 4) as f64 * 1024.0));
    let cases = vec![Case::new(
        "softmax/mask-at-f16-lowest",
        vec![inp_given(F32, &[4, n], x), inp_given(webtensor::DType::F16, &[4, n], mask)],
        |g, x| g.softmax_ext(x[0], Some(x[1]), 0.5),
        |x| r::softmax(&x[0], Some(&x[1]), 0.5),
    )
    .tol(1e-10)];
    run_suite("softmax-mask-offsets", &cases);
}

#[test]
fn reductions_over_a_million_elements() {
    let n = 1_000_000;
    let cases = vec![
        Case::new("sum/1e6", vec![common::inp(F32, &[2, n], 3)], |g, x| g.sum(x[0]), |x| r::sum_last(&x[0])).tol(1e-9),
        Case::new("mean/1e6", vec![common::inp(F32, &[2, n], 3)], |g, x| g.mean(x[0]), |x| r::mean_last(&x[0]))
            .tol(1e-9),
        Case::new("max/1e6", vec![common::inp(F32, &[2, n], 3)], |g, x| g.max(x[0]), |x| r::max_last(&x[0])).tol(0.0),
        Case::new(
            "sum/1e6-positive",
            vec![common::inp_map(F32, &[1, n], 4, |v| v.abs() + 1.0)],
            |g, x| g.sum(x[0]),
            |x| r::sum_last(&x[0]),
        )
        .tol(1e-12),
        Case::new(
            "softmax/1e6",
            vec![common::inp_map(F32, &[1, n], 5, |v| v * 10.0)],
            |g, x| g.softmax(x[0]),
            |x| r::softmax(&x[0], None, 1.0),
        ),
        Case::new(
            "rms_norm/1e6",
            vec![common::inp(F32, &[1, n], 6)],
            |g, x| g.rms_norm(x[0], 1e-6),
            |x| r::rms_norm(&x[0], None, 1e-6),
        ),
    ];
    run_suite("long-rows", &cases);
}

#[test]
fn aliasing_never_breaks_bindings() {
    let cases = vec![
        Case::new(
            "x+x",
            vec![common::inp(F32, &[7, 13], 1)],
            |g, x| g.add(x[0], x[0]),
            |x| r::binary(&x[0], &x[0], |a, b| a + b),
        ),
        Case::new(
            "x*x^T (square, same buffer)",
            vec![common::inp(F32, &[13, 13], 1)],
            |g, x| {
                let t = g.t(x[0])?;
                g.mul(x[0], t)
            },
            |x| r::binary(&x[0], &x[0].transpose(0, 1), |a, b| a * b),
        ),
        Case::new(
            "overlapping slices",
            vec![common::inp(F32, &[10, 8], 1)],
            |g, x| {
                let a = g.slice(x[0], 0, 0, 7)?;
                let b = g.slice(x[0], 0, 3, 10)?;
                g.sub(a, b)
            },
            |x| r::binary(&x[0].slice(0, 0, 7), &x[0].slice(0, 3, 10), |a, b| a - b),
        ),
        Case::new(
            "concat(t, t)",
            vec![common::inp(F32, &[3, 5], 1)],
            |g, x| g.concat(&[x[0], x[0]], 0),
            |x| r::concat(&x[0], &x[0], 0),
        ),
        Case::new(
            "matmul(x, x)",
            vec![common::inp(F32, &[16, 16], 1)],
            |g, x| g.matmul(x[0], x[0]),
            |x| r::matmul(&x[0], &x[0]),
        ),
        Case::new(
            "matmul(x, x^T) tiled",
            vec![common::inp(F32, &[64, 64], 1)],
            |g, x| {
                let t = g.t(x[0])?;
                g.matmul(x[0], t)
            },
            |x| r::matmul(&x[0], &x[0].transpose(0, 1)),
        ),
        Case::new(
            "chain reusing memory",
            vec![common::inp(F32, &[1000], 1)],
            |g, x| {
                let mut y = x[0];
                for _ in 0..6 {
                    let e = g.tanh(y)?;
                    y = g.add(e, y)?;
                }
                Ok(y)
            },
            |x| {
                let mut y = x[0].clone();
                for _ in 0..6 {
                    y = r::binary(&y.map(f64::tanh), &y, |a, b| a + b);
                }
                y
            },
        ),
        Case::new(
            "softmax(x, mask=x)",
            vec![common::inp(F32, &[5, 9], 1)],
            |g, x| g.softmax_ext(x[0], Some(x[0]), 0.5),
            |x| r::softmax(&x[0], Some(&x[0]), 0.5),
        ),
    ];
    let _ = Arr::new(&[1], vec![0.0]);
    run_suite("aliasing", &cases);
}

/// A NaN reaches the output on the CPU backend: an attention row with a NaN score is NaN (as PyTorch's softmax
/// gives), not zeros, in both of the kernel's paths (a few query rows; 64 and more by `gemm`), and a matmul whose
/// activation row holds a NaN is NaN with a quantized weight (its activations' 8-bit rounding dropped a NaN to 0).
#[test]
fn nan_propagates_through_attention_rows_and_quantized_matmul() {
    use webtensor::{Attention, Data, Device, Graph, HostTensor};
    let cpu = Device::cpu();
    // on every backend (WGSL's max() and comparisons drop a NaN: the GPU kernels test the bits), prefill tiles
    // (T 2, 70) and decode over a long cache (T 1, 1000 keys: the split kernel and its combine pass), and on the
    // GPU under the H200's decisions too (1000 keys in splits of one tile)
    let kind = common::gpu().map(|g| g.capabilities().backend);
    let h200 = kind.map(|k| {
        let profile = common::profile("nvidia-h200-vulkan");
        webtensor::testing::device_with_profile(k, &profile, false, (128, 8)).expect("the same adapter")
    });
    for dev in common::devices().iter().chain(h200.as_ref()) {
        for (t, s) in [(2usize, 3usize), (70, 3), (1, 1000)] {
            let mut g = Graph::new();
            let q = g.input("q", F32, &[1, t, 4]).unwrap();
            let k = g.input("k", F32, &[1, s, 4]).unwrap();
            let o = g
                .attention(q, k, k, &Attention { scale: 0.5, causal: false, mask: None, kv_len: None, sinks: None })
                .unwrap();
            let mut plan = dev.compile(&g, &[o]).unwrap();
            let kt = HostTensor::f32(&[1, s, 4], vec![0.2; s * 4]).unwrap();
            let mut qv = vec![0.1f32; t * 4];
            let nan_row = t / 2;
            qv[nan_row * 4] = f32::NAN;
            let qt = HostTensor::f32(&[1, t, 4], qv).unwrap();
            let out = plan.run(&[(q, &qt), (k, &kt)]).unwrap().remove(0).data.to_f32();
            let name = if dev.is_cpu() { "cpu" } else { "gpu" };
            for (row, o) in out.chunks(4).enumerate() {
                let want_nan = row == nan_row;
                assert!(
                    o.iter().all(|x| x.is_nan() == want_nan && (want_nan || x.is_finite())),
                    "{name} T {t} S {s}: row {row} {o:?}"
                );
            }
            // a NaN key: every row sees it
            let mut kv = vec![0.2f32; s * 4];
            kv[(s - 1) * 4 + 1] = f32::NAN;
            let (qt, kt) =
                (HostTensor::f32(&[1, t, 4], vec![0.1; t * 4]).unwrap(), HostTensor::f32(&[1, s, 4], kv).unwrap());
            let out = plan.run(&[(q, &qt), (k, &kt)]).unwrap().remove(0).data.to_f32();
            assert!(out.iter().all(|x| x.is_nan()), "{name} T {t} S {s}: a NaN key {:?}", &out[..4]);
        }
        // softmax, max and argmax over rows of 300 (more than a workgroup's 256): row 1 has a NaN at 260
        let mut g = Graph::new();
        let x = g.input("x", F32, &[3, 300]).unwrap();
        let outs = [g.softmax(x).unwrap(), g.max(x).unwrap(), g.argmax(x).unwrap()];
        let mut plan = dev.compile(&g, &outs).unwrap();
        let mut xv: Vec<f32> = (0..900).map(|i| (i % 300) as f32 / 100.0).collect();
        xv[300 + 260] = f32::NAN;
        let out = plan.run(&[(x, &HostTensor::f32(&[3, 300], xv).unwrap())]).unwrap();
        let (sm, mx, am) = (out[0].data.to_f32(), out[1].data.to_f32(), out[2].data.to_f32());
        let name = if dev.is_cpu() { "cpu" } else { "gpu" };
        assert!(sm[300..600].iter().all(|x| x.is_nan()), "{name}: softmax of a row with a NaN");
        assert!(sm[..300].iter().chain(&sm[600..]).all(|x| x.is_finite()), "{name}: softmax of the other rows");
        assert!(mx[1].is_nan() && mx[0] == 2.99 && mx[2] == 2.99, "{name}: max {mx:?}");
        assert_eq!(am, [299.0, 260.0, 299.0], "{name}: argmax");
    }
    // Q8_0 [4, 32]: each row one block, d = 1 (f16 0x3c00), q = 1
    let block: Vec<u8> = [0x00u8, 0x3c].into_iter().chain([1u8; 32]).collect();
    let w = HostTensor::new(&[4, 32], Data::Raw { dtype: webtensor::DType::Q8_0, bytes: block.repeat(4) }).unwrap();
    let mut g = Graph::new();
    let x = g.input("x", F32, &[1, 32]).unwrap();
    let wi = g.input("w", webtensor::DType::Q8_0, &[4, 32]).unwrap();
    let wt = g.t(wi).unwrap();
    let y = g.matmul(x, wt).unwrap();
    let mut plan = cpu.compile(&g, &[y]).unwrap();
    let mut xv = vec![0.5f32; 32];
    let ok = plan.run(&[(x, &HostTensor::f32(&[1, 32], xv.clone()).unwrap()), (wi, &w)]).unwrap().remove(0);
    assert_eq!(ok.data.to_f32(), [16.0; 4]);
    xv[3] = f32::NAN;
    let out = plan.run(&[(x, &HostTensor::f32(&[1, 32], xv).unwrap()), (wi, &w)]).unwrap().remove(0).data.to_f32();
    assert!(out.iter().all(|v| v.is_nan()), "{out:?}");
}
