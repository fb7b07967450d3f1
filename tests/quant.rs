//! Ops on ggml's block formats on every backend, against f64 over the values the `gguf` Python package decodes
//! (tests/data/quant.gguf, written by scripts/make_quant_fixtures.py): `x @ t(w)` at M = 1 (mat-vec), small and
//! larger M, batched and transposed x, with an epilogue; get_rows from a quantized table; and casts (dequantize).

mod common;

use common::reference::{self as r, Arr};
use common::{inp, inp_given, inp_raw, run_suite, Case};
use webtensor::DType::{self, F16, F32, I32};

/// NMSE allowed where the CPU rounds activations to 8-bit blocks (a block's values to within 1/254 of its largest).
const Q8_ACTIVATION_NMSE: f64 = 1e-4;

/// `x @ t(w)` with the block-quantized `w [9, 512]` (`w()`): M = 1, 3, 33; a batched x; f16 x; a transposed x;
/// an epilogue; a row slice of w.
fn matmul_cases(dtype: DType, w: &dyn Fn() -> common::Input) -> Vec<Case> {
    let mut matmul_cases = Vec::new();
    for (name, xs) in
        [("matvec", vec![1usize, 512]), ("m3", vec![3, 512]), ("m33", vec![33, 512]), ("batch", vec![2, 5, 512])]
    {
        matmul_cases.push(Case::new(
            format!("{dtype}/matmul/{name}"),
            vec![inp(F32, &xs, 1), w()],
            |g, x| {
                let wt = g.t(x[1])?;
                g.matmul(x[0], wt)
            },
            |x| r::matmul(&x[0], &x[1].transpose(0, 1)),
        ));
    }
    matmul_cases.push(
        Case::new(
            format!("{dtype}/matmul/f16-x"),
            vec![inp(F16, &[4, 512], 1), w()],
            |g, x| {
                let wt = g.t(x[1])?;
                g.matmul(x[0], wt)
            },
            |x| r::matmul(&x[0], &x[1].transpose(0, 1)),
        )
        .tol(1e-6),
    );
    matmul_cases.push(Case::new(
        format!("{dtype}/matmul/transposed-x+bias+silu"),
        vec![inp(F32, &[512, 6], 1), w(), inp(F32, &[9], 3)],
        |g, x| {
            let (xt, wt) = (g.t(x[0])?, g.t(x[1])?);
            let y = g.matmul(xt, wt)?;
            let y = g.add(y, x[2])?;
            g.silu(y)
        },
        |x| r::binary(&r::matmul(&x[0].transpose(0, 1), &x[1].transpose(0, 1)), &x[2], |a, b| a + b).map(r::silu),
    ));
    // rows 2..7 of the weight: a row-aligned view
    matmul_cases.push(Case::new(
        format!("{dtype}/matmul/row-slice"),
        vec![inp(F32, &[2, 512], 1), w()],
        |g, x| {
            let rows = g.slice(x[1], 0, 2, 7)?;
            let wt = g.t(rows)?;
            g.matmul(x[0], wt)
        },
        |x| r::matmul(&x[0], &x[1].slice(0, 2, 7).transpose(0, 1)),
    ));
    matmul_cases
}

#[test]
fn quantized_matmul_get_rows_and_cast() {
    let mut cases = Vec::new();
    for (dtype, bytes, decoded) in common::quant_fixture() {
        let w = move || inp_raw(dtype, &[9, 512], bytes.clone(), decoded.clone());
        let matmul_cases = matmul_cases(dtype, &w);
        // the matmul's precision set to f32 (ggml_mul_mat_set_prec), through an epilogue that fusion moves into
        // it: the reference's tolerance on every backend, with the CPU's default options
        cases.push(Case::new(
            format!("{dtype}/matmul/precision-f32+bias"),
            vec![inp(F32, &[3, 512], 1), w(), inp(F32, &[9], 3)],
            |g, x| {
                let wt = g.t(x[1])?;
                let y = g.matmul(x[0], wt)?;
                g.set_matmul_precision(y, webtensor::MatmulPrecision::F32)?;
                g.add(y, x[2])
            },
            |x| r::binary(&r::matmul(&x[0], &x[1].transpose(0, 1)), &x[2], |a, b| a + b),
        ));
        // each matmul case with f32 activations (the reference's tolerance), and as the CPU runs it by default:
        // activations rounded to 8-bit blocks for the integer kernels, NMSE up to 3e-5 measured (GPUs: f32)
        for c in matmul_cases {
            let tol = c.tol;
            cases.push(c.clone().f32_activations());
            cases.push(c.tol(tol.max(Q8_ACTIVATION_NMSE)));
        }
        cases.push(Case::new(
            format!("{dtype}/get_rows"),
            vec![w(), inp_given(I32, &[5], vec![0.0, 8.0, 3.0, 3.0, 1.0])],
            |g, x| g.get_rows(x[0], x[1]),
            |x| r::get_rows(&x[0], &x[1]),
        ));
        for to in [F32, F16] {
            cases.push(
                Case::new(format!("{dtype}/cast-to-{to}"), vec![w()], move |g, x| g.cast(x[0], to), |x| x[0].clone())
                    .tol(if to == F16 { 1e-6 } else { 0.0 }),
            );
        }
    }
    run_suite("quant", &cases);
    let _ = Arr::new(&[1], vec![0.0]);
}

/// The quantized mat-vec (every block type) on the kernel GPUs take, its sums split over 32 invocations and met
/// through subgroups or workgroup memory (`testing::device_with_matvec_reduce`): software adapters such as CI's
/// lavapipe take the serial one, which the suite above runs.
#[test]
fn quantized_matvec_reductions() {
    let Some(gpu) = common::gpu() else {
        eprintln!("no GPU adapter: SKIPPED");
        return;
    };
    let mut cases = Vec::new();
    for (dtype, bytes, decoded) in common::quant_fixture() {
        for (name, xs) in [("matvec", vec![1usize, 512]), ("matvec-batch", vec![2, 1, 512])] {
            let w = inp_raw(dtype, &[9, 512], bytes.clone(), decoded.clone());
            let case = Case::new(
                format!("{dtype}/{name}"),
                vec![inp(F32, &xs, 1), w],
                |g, x| {
                    let wt = g.t(x[1])?;
                    g.matmul(x[0], wt)
                },
                |x| r::matmul(&x[0], &x[1].transpose(0, 1)),
            );
            cases.push(case.expect_kernel("matvec"));
        }
    }
    for subgroups in [true, false] {
        let device = webtensor::testing::device_with_matvec_reduce(gpu.capabilities().backend, subgroups).unwrap();
        let (passed, _) = common::run_suite_on("quant-matvec", &cases, &[device]);
        assert_eq!(passed, cases.len());
    }
}

#[test]
fn storage_formats_are_refused_where_they_do_not_apply() {
    let mut g = webtensor::Graph::new();
    let w = g.input("w", DType::Q4_1, &[4, 64]).unwrap();
    let x = g.input("x", F32, &[2, 64]).unwrap();
    let msg = |r: webtensor::Result<webtensor::Tensor>| r.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg(g.matmul(x, w)).contains("x @ t(w)"), "w used untransposed");
    assert!(msg(g.add(w, w)).contains("q4_1"));
    assert!(msg(g.exp(w)).contains("q4_1"));
    assert!(msg(g.contiguous(w)).contains("q4_1"));
    assert!(msg(g.cast(w, I32)).contains("q4_1"));
    let wt = g.t(w).unwrap();
    assert!(msg(g.cast(wt, F32)).contains("q4_1"), "a strided view of blocks");
    assert!(webtensor::Device::cpu().compile(&g, &[w]).is_err(), "an output in a storage format");
    let e = g.set_matmul_precision(x, webtensor::MatmulPrecision::F32).unwrap_err().to_string();
    assert!(e.contains("set_matmul_precision") && e.contains("not a matmul"), "{e}");
    let e = webtensor::HostTensor::new(&[2, 48], webtensor::Data::Raw { dtype: DType::Q8_0, bytes: vec![0; 102] });
    assert!(e.is_err(), "rows of 48 values are not whole Q8_0 blocks");
}

/// Whether this CPU runs the AVX-512 VNNI kernels (webtensor's own check, repeated).
fn has_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::env::var_os("WEBTENSOR_CPU_NO_VNNI").is_none();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Resident weights, as a model's, on the CPU backend: `x @ t(w[3..36])` (33 rows from the middle of a 37-row
/// weight: neither end on a multiple of 16) for 1 to 20 rows of x, against f64; and each row of x gets the same bits
/// at every row count: up to 8 rows on every CPU (the mat-vec kernels), and at any count where the CPU has AVX-512
/// VNNI for the types repacked at first use (all but Q2_K and Q3_K: one kernel for every count). So a sequence decoded
/// alone or in a batch with others multiplies identically.
#[test]
fn resident_weights_give_each_row_the_same_bits_at_every_row_count() {
    let device = webtensor::Device::cpu();
    let (k, rows, m_max) = (512, 37, 20);
    let x: Vec<f32> = (0..m_max * k).map(|i| ((i * 7919 + 13) % 2001) as f32 / 1000.0 - 1.0).collect();
    for (dtype, bytes, decoded) in common::quant_fixture() {
        // the fixture's 9 rows repeated to 37 (each row its own blocks)
        let row_bytes = bytes.len() / 9;
        let w_bytes: Vec<u8> =
            (0..rows).flat_map(|r| bytes[(r % 9) * row_bytes..(r % 9 + 1) * row_bytes].to_vec()).collect();
        let w_f64: Vec<f64> = (0..rows).flat_map(|r| decoded[(r % 9) * k..(r % 9 + 1) * k].to_vec()).collect();
        let host = webtensor::HostTensor::new(&[rows, k], webtensor::Data::Raw { dtype, bytes: w_bytes }).unwrap();
        let w = device.upload("w", host).unwrap();
        let (lo, hi) = (3, 36);
        use DType::*;
        let repacked = has_vnni() && [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K].contains(&dtype);
        // each row's bits at 20 rows and at 8 rows of x
        let (mut at20, mut at8): (Vec<Vec<u32>>, Vec<Vec<u32>>) = (vec![], vec![]);
        for m in (1..=m_max).rev() {
            let mut g = webtensor::Graph::new();
            let xi = g.input("x", F32, &[m, k]).unwrap();
            let wr = g.resident(&w).unwrap();
            let ws = g.slice(wr, 0, lo, hi).unwrap();
            let wt = g.t(ws).unwrap();
            let y = g.matmul(xi, wt).unwrap();
            let mut plan = device.compile(&g, &[y]).unwrap();
            let xv = webtensor::HostTensor::f32(&[m, k], x[..m * k].to_vec()).unwrap();
            let out = plan.run(&[(xi, &xv)]).unwrap().remove(0).data.to_f32();
            let n = hi - lo;
            for r in 0..m {
                let got = &out[r * n..(r + 1) * n];
                for (j, &v) in got.iter().enumerate() {
                    let wrow = &w_f64[(lo + j) * k..(lo + j + 1) * k];
                    let xr = &x[r * k..(r + 1) * k];
                    let want: f64 = wrow.iter().zip(xr).map(|(a, &b)| a * b as f64).sum();
                    let scale: f64 = wrow.iter().zip(xr).map(|(a, &b)| (a * b as f64).abs()).sum();
                    assert!(
                        (v as f64 - want).abs() <= 0.01 * scale + 1e-6,
                        "{dtype} m {m} row {r} col {j}: {v} vs {want}"
                    );
                }
                let bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                match m {
                    20 => at20.push(bits),
                    _ if repacked => assert_eq!(bits, at20[r], "{dtype}: row {r} among {m} rows and among 20"),
                    8 => at8.push(bits),
                    _ if m < 8 => assert_eq!(bits, at8[r], "{dtype}: row {r} among {m} rows and among 8"),
                    _ => {}
                }
            }
        }
    }
}

/// A gated feed-forward's gate and up (`silu(x @ gate) · (x @ up)`, both quantized weights of one type): on the
/// CPU one dual matmul (one kernel, the activations rounded once), on a GPU one dual mat-vec (x read once, both
/// weights summed alongside) at one row: its values the unfused plan's bit for bit at 1, 3, 8 and 20 rows, and
/// within the 8-bit activations' error of the f64 product.
#[test]
fn gate_and_up_are_one_dual_matmul() {
    let k = 512;
    for (dtype, bytes, decoded) in common::quant_fixture() {
        let row_bytes = bytes.len() / 9;
        // 36 rows: the fixture's 9 four times; gate rows 0..18, up rows 18..36
        let w_bytes: Vec<u8> =
            (0..36).flat_map(|r| bytes[(r % 9) * row_bytes..(r % 9 + 1) * row_bytes].to_vec()).collect();
        let w_f64: Vec<f64> = (0..36).flat_map(|r| decoded[(r % 9) * k..(r % 9 + 1) * k].to_vec()).collect();
        // and the mat-vec's sums split over 32 invocations, met through subgroups and through workgroup memory
        let reductions = common::gpu().into_iter().flat_map(|gpu| {
            [true, false].map(|sub| webtensor::testing::device_with_matvec_reduce(gpu.capabilities().backend, sub))
        });
        let devices: Vec<webtensor::Device> =
            common::devices().iter().cloned().chain(reductions.map(|d| d.unwrap())).collect();
        for device in &devices {
            let dev = &device.capabilities().name;
            let host = webtensor::HostTensor::new(&[36, k], webtensor::Data::Raw { dtype, bytes: w_bytes.clone() });
            let w = device.upload("w", host.unwrap()).unwrap();
            for m in [1usize, 3, 8, 20] {
                let mut g = webtensor::Graph::new();
                let x = g.input("x", F32, &[m, k]).unwrap();
                let wr = g.resident(&w).unwrap();
                let proj = |g: &mut webtensor::Graph, lo: usize| {
                    let ws = g.slice(wr, 0, lo, lo + 18).unwrap();
                    let wt = g.t(ws).unwrap();
                    g.matmul(x, wt).unwrap()
                };
                let (gate, up) = (proj(&mut g, 0), proj(&mut g, 18));
                let y = g.swiglu(gate, up).unwrap();
                let xv: Vec<f32> = (0..m * k).map(|i| ((i * 7919 + 13) % 2001) as f32 / 1000.0 - 1.0).collect();
                let xh = webtensor::HostTensor::f32(&[m, k], xv.clone()).unwrap();
                let run = |no_fusion| {
                    let options = webtensor::CompileOptions { poison: true, no_fusion, ..Default::default() };
                    let mut plan = device.compile_with(&g, &[y], &options).unwrap();
                    (plan.run(&[(x, &xh)]).unwrap().remove(0).data.to_f32(), plan.stats().kernels)
                };
                let ((fused, kernels), (unfused, _)) = (run(false), run(true));
                // a GPU's dual mat-vec takes one row (and rows as batches where the adapter runs the serial one)
                let dual = kernels.iter().any(|k| k.contains("dual"));
                let cpu = device.capabilities().backend == webtensor::BackendKind::Cpu;
                assert!(dual || !(cpu || m == 1), "{dev} {dtype} m {m}: {kernels:?}");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
                assert_eq!(bits(&fused), bits(&unfused), "{dev} {dtype} m {m}: fused vs unfused");
                for (i, &v) in fused.iter().enumerate() {
                    let (r, j) = (i / 18, i % 18);
                    let dot = |row: usize| -> (f64, f64) {
                        let (wr, xr) = (&w_f64[row * k..(row + 1) * k], &xv[r * k..(r + 1) * k]);
                        let d = wr.iter().zip(xr).map(|(a, &b)| a * b as f64).sum();
                        (d, wr.iter().zip(xr).map(|(a, &b)| (a * b as f64).abs()).sum())
                    };
                    let ((gv, gs), (uv, us)) = (dot(j), dot(18 + j));
                    let want = gv / (1.0 + (-gv).exp()) * uv;
                    // each product within 1% of its terms' magnitude; silu's slope is at most 1.1
                    let tol = 0.02 * (gs * (uv.abs() + us) + us * gv.abs()) + 1e-5;
                    assert!((v as f64 - want).abs() <= tol, "{dev} {dtype} m {m} [{r}, {j}]: {v} vs {want}");
                }
            }
        }
    }
}

/// An RMS norm whose only reader is a mat-vec (`rms_norm(x) · nw @ t(w)`, bare, with a weight of f32 or f16, with
/// a bias after the product, and as the A of a dual gate-and-up) is normed by the mat-vec as it loads x on a GPU
/// (`rms_norm+matvec`, one dispatch fewer) at one row, and at 3 and 8 where the adapter runs rows as batches: its
/// values within f32 rounding of the unfused plan's and within the CPU's 8-bit activations' error of the f64
/// result, on every device and mat-vec reduction.
#[test]
fn rms_norm_is_normed_by_the_mat_vec_that_reads_it() {
    let (k, eps) = (512, 1e-5f32);
    let weights: Vec<_> =
        common::quant_fixture().into_iter().filter(|(d, ..)| matches!(d.name(), "q4_1" | "q8_0" | "q6_k")).collect();
    assert_eq!(weights.len(), 3);
    let reductions = common::gpu().into_iter().flat_map(|gpu| {
        [true, false].map(|sub| webtensor::testing::device_with_matvec_reduce(gpu.capabilities().backend, sub))
    });
    let devices: Vec<webtensor::Device> =
        common::devices().iter().cloned().chain(reductions.map(|d| d.unwrap())).collect();
    for (dtype, bytes, decoded) in weights {
        let row_bytes = bytes.len() / 9;
        let w_bytes: Vec<u8> =
            (0..18).flat_map(|r| bytes[(r % 9) * row_bytes..(r % 9 + 1) * row_bytes].to_vec()).collect();
        let w_f64: Vec<f64> = (0..18).flat_map(|r| decoded[(r % 9) * k..(r % 9 + 1) * k].to_vec()).collect();
        for device in &devices {
            let dev = &device.capabilities().name;
            let host = webtensor::HostTensor::new(&[18, k], webtensor::Data::Raw { dtype, bytes: w_bytes.clone() });
            let w = device.upload("w", host.unwrap()).unwrap();
            let cases = ["bare", "weight", "f16 weight", "bias", "dual", "x residual", "5 operands"];
            for (case, m) in cases.into_iter().flat_map(|c| [1, 3, 8].map(|m| (c, m))) {
                let nw_dtype = if case == "f16 weight" { webtensor::DType::F16 } else { F32 };
                let (g, [x, nw, _], y) = norm_case_graph(case, (m, k, eps), nw_dtype, &w);
                let xv: Vec<f32> = (0..m * k).map(|i| ((i * 7919 + 13) % 2001) as f32 / 500.0 - 2.0).collect();
                let nv: Vec<f32> = (0..k).map(|i| 0.5 + ((i * 31) % 17) as f32 / 16.0).collect();
                let bv: Vec<f32> = (0..9).map(|i| i as f32 * 0.25 - 1.0).collect();
                let xh = webtensor::HostTensor::f32(&[m, k], xv.clone()).unwrap();
                let nh = match nw_dtype {
                    F32 => webtensor::HostTensor::f32(&[k], nv.clone()).unwrap(),
                    _ => webtensor::HostTensor::new(
                        &[k],
                        webtensor::Data::F16(nv.iter().map(|&v| half::f16::from_f32(v)).collect()),
                    )
                    .unwrap(),
                };
                let bh = webtensor::HostTensor::f32(&[9], bv.clone()).unwrap();
                let run = |no_fusion| {
                    let options = webtensor::CompileOptions { poison: true, no_fusion, ..Default::default() };
                    let mut plan = device.compile_with(&g, &[y], &options).unwrap();
                    // the bias, and its copies `e0..`, take `bh`
                    let value = |t: webtensor::Tensor| {
                        if t == x {
                            &xh
                        } else if t == nw {
                            &nh
                        } else {
                            &bh
                        }
                    };
                    let inputs: Vec<_> = plan.inputs().into_iter().map(|t| (t, value(t))).collect();
                    (plan.run(&inputs).unwrap().remove(0).data.to_f32(), plan.stats())
                };
                let ((fused, st), (unfused, _)) = (run(false), run(true));
                let label = format!("{dev} {dtype} {case} m {m}");
                let gpu = device.capabilities().backend != webtensor::BackendKind::Cpu;
                let normed_by_matvec = st.kernels.iter().any(|k| k.starts_with("rms_norm+matvec"));
                // an epilogue in A's memory, or one binding too many: unfused (a plan, not an error)
                let refused = matches!(case, "x residual" | "5 operands");
                assert!(!(refused && normed_by_matvec), "{label}: {:?}", st.kernels);
                assert!(normed_by_matvec || !gpu || m > 1 || refused, "{label}: {:?}", st.kernels);
                assert!(!normed_by_matvec || !st.kernels.iter().any(|k| k.contains("rows rms_norm")), "{label}");
                for (i, (&v, &u)) in fused.iter().zip(&unfused).enumerate() {
                    let (r, j) = (i / 9, i % 9);
                    let xr = &xv[r * k..(r + 1) * k];
                    let (want, terms) = norm_case_want(case, (xr, &nv, &bv), (&w_f64, k, eps), j);
                    assert!(
                        v.is_finite() && (v as f64 - u as f64).abs() <= 1e-5 * terms + 1e-6,
                        "{label} [{r}, {j}]: fused {v}, unfused {u}"
                    );
                    assert!((v as f64 - want).abs() <= 0.02 * terms + 1e-5, "{label} [{r}, {j}]: {v} vs {want}");
                }
            }
        }
    }
}

/// The graph of a case of `rms_norm_is_normed_by_the_mat_vec_that_reads_it` over the 18 rows of `w`: its inputs
/// x `[m, k]`, the norm's weight `[k]` and a bias `[9]` (with "5 operands" five more copies of it, inputs `e0..`),
/// and its output.
fn norm_case_graph(
    case: &str,
    (m, k, eps): (usize, usize, f32),
    nw_dtype: DType,
    w: &webtensor::Resident,
) -> (webtensor::Graph, [webtensor::Tensor; 3], webtensor::Tensor) {
    let mut g = webtensor::Graph::new();
    let x = g.input("x", F32, &[m, k]).unwrap();
    let nw = g.input("nw", nw_dtype, &[k]).unwrap();
    let bias = g.input("bias", F32, &[9]).unwrap();
    let normed = g.rms_norm(x, eps).unwrap();
    let normed = if case == "bare" { normed } else { g.mul(normed, nw).unwrap() };
    let wr = g.resident(w).unwrap();
    let proj = |g: &mut webtensor::Graph, lo: usize| {
        let ws = g.slice(wr, 0, lo, lo + 9).unwrap();
        let wt = g.t(ws).unwrap();
        g.matmul(normed, wt).unwrap()
    };
    let y = match case {
        "dual" => {
            let (gate, up) = (proj(&mut g, 0), proj(&mut g, 9));
            g.swiglu(gate, up).unwrap()
        }
        "bias" => {
            let p = proj(&mut g, 0);
            g.add(p, bias).unwrap()
        }
        "x residual" => {
            // an epilogue operand in A's memory: the generic kernel, unfused (a plan, not an error)
            let p = proj(&mut g, 0);
            let r = g.slice(x, 1, 0, 9).unwrap();
            g.add(p, r).unwrap()
        }
        "5 operands" => {
            // an epilogue of 5 operands (the bias 5 times, each its own input): the weight's binding would be a
            // ninth (unfused)
            let mut y = proj(&mut g, 0);
            for i in 0..5 {
                let e = g.input(&format!("e{i}"), F32, &[9]).unwrap();
                y = g.add(y, e).unwrap();
            }
            y
        }
        _ => proj(&mut g, 0),
    };
    (g, [x, nw, bias], y)
}

/// The f64 value of output column `j` of a row `xr` in a case of `rms_norm_is_normed_by_the_mat_vec_that_reads_it`
/// (norm weight `nv`, bias `bv`, weights `w` `[18, k]`), and the sum of its terms' magnitudes.
fn norm_case_want(
    case: &str,
    (xr, nv, bv): (&[f32], &[f32], &[f32]),
    (w, k, eps): (&[f64], usize, f32),
    j: usize,
) -> (f64, f64) {
    let inv = 1.0 / (xr.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / k as f64 + eps as f64).sqrt();
    let scale = |c: usize| if case == "bare" { inv } else { inv * nv[c] as f64 };
    let dot = |row: usize| -> (f64, f64) {
        let wr = &w[row * k..(row + 1) * k];
        let terms = wr.iter().zip(xr).enumerate().map(|(c, (a, &b))| a * b as f64 * scale(c));
        terms.fold((0.0, 0.0), |(s, t), p| (s + p, t + p.abs()))
    };
    let ((pv, ps), (uv, us)) = (dot(j), dot(9 + j));
    match case {
        "dual" => (pv / (1.0 + (-pv).exp()) * uv, ps * (uv.abs() + us) + us * pv.abs()),
        "bias" => (pv + bv[j] as f64, ps),
        "x residual" => (pv + xr[j] as f64, ps),
        _ => (pv, ps),
    }
}
