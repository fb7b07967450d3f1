//! The cooperative-matrix matmul kernel (`src/backend/gpu/kernels/matmul/matmul_coop.wgsl`) against the f64 reference.
//!
//! Adapters here (lavapipe) have no cooperative matrices, so the kernel runs with the cooperative operations
//! emulated in plain WGSL (`testing::device_with_emulated_coop`): the tiling, the staging of A and B in every
//! layout, edges, batches, epilogues and stores are the real kernel's; only `coopLoad`/`coopMultiplyAdd`/
//! `coopStore` are replaced by code with their documented semantics. Where the adapter has cooperative matrices,
//! the same cases also run on the real kernel.

mod common;

use common::reference::{self as r, Arr};
use common::{gpu, guarded_matmul, inp, run_suite_on, Case};
use webtensor::gpu::{MatmulChoice, COOP_CONFIGS};
use webtensor::DType::{self, F16, F32};
use webtensor::{BackendKind, CompileOptions, Device, Graph};

/// The devices the cases run on: the GPU adapter with cooperative matrices emulated, and the adapter itself
/// when it runs the real kernel. Empty when there is no GPU with SHADER_F16 (the harness reports a missing GPU).
fn coop_devices() -> Vec<Device> {
    let Some(g) = gpu() else { return vec![] };
    let c = g.capabilities();
    if !c.shader_f16 {
        eprintln!("{}: no SHADER_F16, cooperative-matrix cases SKIPPED", c.name);
        return vec![];
    }
    let kind: BackendKind = c.backend;
    let mut v = vec![webtensor::testing::device_with_emulated_coop(kind).expect("the same adapter")];
    if uses_coop(g) {
        v.push(g.clone());
    }
    v
}

/// Whether `device` runs f16 × f16 matmuls on the real cooperative-matrix kernel (the adapter reports a shape
/// webtensor uses, with subgroups of 32).
fn uses_coop(device: &Device) -> bool {
    let mut g = Graph::new();
    let a = g.input("a", F16, &[64, 64]).unwrap();
    let b = g.input("b", F16, &[64, 64]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let options = CompileOptions { matmul: Some(configs().next().unwrap()), ..Default::default() };
    device.compile_with(&g, &[c], &options).is_ok_and(|p| p.stats().kernels[0].starts_with("matmul_coop"))
}

/// `a @ b` with f16 operands of logical shapes `sa` and `sb`, each stored transposed when `ta` / `tb` (and
/// presented through a t() view); `out` is the output dtype (a fused cast for f32).
fn case(name: String, sa: &[usize], sb: &[usize], ta: bool, tb: bool, out: DType, choice: MatmulChoice) -> Case {
    let swap = |s: &[usize], t: bool| {
        let mut s = s.to_vec();
        let n = s.len();
        if t {
            s.swap(n - 2, n - 1);
        }
        s
    };
    Case::new(
        name,
        vec![inp(F16, &swap(sa, ta), 1), inp(F16, &swap(sb, tb), 2)],
        move |g, x| {
            let a = if ta { g.t(x[0])? } else { x[0] };
            let b = if tb { g.t(x[1])? } else { x[1] };
            let c = g.matmul(a, b)?;
            if out == F32 {
                g.cast(c, F32)
            } else {
                Ok(c)
            }
        },
        move |x| {
            let t = |a: &Arr, on: bool| if on { a.transpose(a.shape.len() - 2, a.shape.len() - 1) } else { a.clone() };
            r::matmul(&t(&x[0], ta), &t(&x[1], tb))
        },
    )
    .tol(if out == F16 { 5e-6 } else { 1e-7 })
    .matmul(choice)
    .expect_kernel("matmul_coop")
}

fn configs() -> impl Iterator<Item = MatmulChoice> {
    COOP_CONFIGS.iter().filter(|c| c.frag == 16).map(|&c| MatmulChoice::Coop(c))
}

/// Every 16×16 configuration on sizes one below, at and one above its block, in every operand layout, with
/// batches and a fused epilogue (on a software adapter, the first configuration so; the others in one layout).
#[test]
fn coop_kernels_match_reference() {
    let devices = coop_devices();
    let mut cases = Vec::new();
    for (c, choice) in configs().enumerate() {
        let MatmulChoice::Coop(cfg) = choice else { unreachable!() };
        let (bm, bn, bk) = (cfg.bm() as usize, cfg.bn() as usize, cfg.bk as usize);
        let tag = choice.name();
        // (m, k, n): one below, at and one above the block; K and N (which the vec4 layouts need in multiples
        // of 4 where contiguous) a step of 4 around theirs
        let sizes = [(bm - 1, bk - 4, bn + 4), (bm, bk, bn), (bm + 1, 3 * bk + 4, bn - 4), (1 + bm / 2, 4, 12)];
        // every layout and case on the first configuration; on a software adapter (common::full_on: each layout
        // and output dtype is a pipeline of its own, tens of seconds of LLVM on lavapipe) the others, which differ
        // only in their tiling, in the plain layout with f16 output, and the NaN-guarded views
        let full = c == 0 || devices.iter().all(common::full_on);
        let layouts: &[(bool, bool)] =
            if full { &[(false, false), (false, true), (true, false), (true, true)] } else { &[(false, false)] };
        for (i, &(m, k, n)) in sizes.iter().enumerate() {
            if !full && i % 2 == 1 {
                continue; // the f32-output sizes
            }
            for &(ta, tb) in layouts {
                // a transposed A needs M % 4 == 0 for its vec4 loads: round M up there
                let m = if ta { m.next_multiple_of(4) } else { m };
                let out = if i % 2 == 0 { F16 } else { F32 };
                let name = format!("{tag}/{m}x{k}x{n}/ta={ta}/tb={tb}/{out:?}");
                cases.push(case(name, &[m, k], &[k, n], ta, tb, out, choice));
            }
        }
        let name = format!("{tag}/nan-guarded-views");
        cases.push(guarded_matmul(name, F16, 37, 36, 44).matmul(choice).expect_kernel("matmul_coop"));
        if !full {
            continue;
        }
        // batches, broadcast over the leading dims
        cases.push(case(format!("{tag}/batch"), &[2, 3, 20, 36], &[3, 36, 24], false, false, F16, choice));
        cases.push(case(format!("{tag}/batch/tb"), &[2, 1, 20, 36], &[3, 36, 24], false, true, F32, choice));
        // a fused epilogue: silu(a @ b + bias)
        cases.push(
            Case::new(
                format!("{tag}/epilogue"),
                vec![inp(F16, &[37, 40], 1), inp(F16, &[40, 72], 2), inp(F16, &[72], 3)],
                |g, x| {
                    let y = g.matmul(x[0], x[1])?;
                    let y = g.add(y, x[2])?;
                    g.silu(y)
                },
                |x| r::binary(&r::matmul(&x[0], &x[1]), &x[2], |a, b| a + b).map(r::silu),
            )
            .tol(5e-6)
            .matmul(choice)
            .expect_kernel("matmul_coop"),
        );
    }
    let (pass, _) = run_suite_on("matmul-coop", &cases, &devices);
    if !devices.is_empty() {
        assert_eq!(pass, cases.len() * devices.len(), "every cooperative-matrix case ran");
    }
}

/// The cooperative-matrix kernel is what those plans use (not a fallback), where the layout allows it; the
/// generic kernel takes over where it does not (K not a multiple of 4), the tiled one for f32 operands and the
/// mat-vec kernel for one-row inputs.
#[test]
fn coop_kernel_is_chosen_where_it_applies() {
    for device in coop_devices() {
        let choice = configs().next().expect("a 16x16 configuration");
        let kernels = |da: DType, db: DType, m: usize, k: usize, n: usize| {
            let mut g = Graph::new();
            let a = g.input("a", da, &[m, k]).unwrap();
            let b = g.input("b", db, &[k, n]).unwrap();
            let c = g.matmul(a, b).unwrap();
            let options = CompileOptions { matmul: Some(choice), ..Default::default() };
            device.compile_with(&g, &[c], &options).unwrap().stats().kernels
        };
        let k = kernels(F16, F16, 64, 64, 64);
        assert!(k[0].starts_with("matmul_coop"), "{k:?}");
        let k = kernels(F16, F16, 64, 30, 64);
        assert_eq!(k[0], "matmul");
        let k = kernels(F32, F32, 64, 64, 64);
        assert!(k[0].starts_with("matmul_tiled"), "{k:?}");
        let k = kernels(F16, F16, 1, 64, 64);
        assert!(k[0].starts_with("matvec"), "{k:?}");
    }
}

/// Unpinned, a device with cooperative matrices tunes them on first use: every configuration (two on an emulated
/// device) is checked against the CPU backend, the fastest that passes is used and cached on disk beside the
/// tiled choice.
#[test]
fn coop_configuration_is_tuned_checked_and_cached() {
    let Some(g) = gpu().filter(|g| g.capabilities().shader_f16) else { return };
    let cache = std::env::temp_dir().join(format!("webtensor-coop-tune-{}.txt", std::process::id()));
    let _ = std::fs::remove_file(&cache);
    // only this test tunes (every other test here pins its kernel), so the variable affects nothing else
    std::env::set_var("WEBTENSOR_TUNE_CACHE", &cache);
    let kind: BackendKind = g.capabilities().backend;
    // the tiled choice given in the file (the documented format, `backend|adapter name|driver = choice`): only the
    // cooperative-matrix configurations are tuned, not every tiled one too (minutes of shader compiles on lavapipe)
    let c = webtensor::testing::device_with_emulated_coop(kind).unwrap().capabilities().clone();
    let tiled = format!("{}|{}|{}", c.backend, c.name, c.driver).replace(['\n', '='], " ") + " = generic\n";
    std::fs::write(&cache, &tiled).unwrap();
    let compile = || {
        let device = webtensor::testing::device_with_emulated_coop(kind).unwrap();
        let mut graph = Graph::new();
        let a = graph.input("a", F16, &[96, 64]).unwrap();
        let b = graph.input("b", F16, &[64, 80]).unwrap();
        let c = graph.matmul(a, b).unwrap();
        device.compile(&graph, &[c]).unwrap().stats().kernels
    };
    let kernels = compile();
    assert!(kernels[0].starts_with("matmul_coop"), "{kernels:?}");
    let text = std::fs::read_to_string(&cache).expect("the tuning cache");
    assert!(text.starts_with(&tiled), "the tiled choice came from the file: {text}");
    let coop: Vec<&str> =
        text.lines().filter(|l| l.contains("[cooperative matrices emulated]") && l.contains("|f16 coop = ")).collect();
    assert_eq!((coop.len(), text.lines().count()), (1, 2), "{text}");
    assert!(kernels[0].contains(coop[0].rsplit(" = ").next().unwrap()), "{kernels:?} vs {text}");
    // a new device reads the choice from the cache instead of tuning again
    assert_eq!(compile(), kernels);
    let again = std::fs::read_to_string(&cache).unwrap();
    assert_eq!(again, text);
    let _ = std::fs::remove_file(&cache);
}

/// Block-quantized weights on cooperative matrices (`x @ t(w)`, w [9, 512] of tests/data/quant.gguf): f32
/// activations of 33 and 70 rows (and f16 ones) staged as f16, each weight value decoded to f16 as it is staged,
/// within f16 rounding of the f64 reference over gguf-py's decoding; under the precision F32 the tiled kernel, in
/// f32. Every block type on a hardware adapter; on a software one (each case a pipeline of its own, seconds of
/// LLVM on lavapipe) the types of the language models people download, at 70 rows, the rest on Q4_1.
#[test]
fn block_quantized_weights_run_on_cooperative_matrices() {
    let devices = coop_devices();
    let full = devices.iter().all(common::full_on);
    let choice = configs().next().expect("a 16x16 configuration");
    let mut cases = Vec::new();
    let xwt = |g: &mut Graph, x: &[webtensor::Tensor]| {
        let wt = g.t(x[1])?;
        g.matmul(x[0], wt)
    };
    let common_types = ["q4_0", "q4_1", "q8_0", "q4_k", "q5_k", "q6_k"];
    for (dtype, bytes, decoded) in common::quant_fixture() {
        let q4_1 = dtype.name() == "q4_1";
        if dtype.block_size() == 1 || !(full || common_types.contains(&dtype.name())) {
            continue;
        }
        let w = move || common::inp_raw(dtype, &[9, 512], bytes.clone(), decoded.clone());
        let all = full || q4_1;
        let shapes = [(70, F32, true), (33, F32, all), (33, F16, all)];
        for (m, x, _) in shapes.into_iter().filter(|s| s.2) {
            let case = Case::new(format!("{dtype}/{m}x512/{x:?}"), vec![inp(x, &[m, 512], 1), w()], xwt, |x| {
                r::matmul(&x[0], &x[1].transpose(0, 1))
            });
            cases.push(case.tol(1e-6).matmul(choice).expect_kernel("matmul_coop"));
        }
        if !all {
            continue;
        }
        let f32_prec = Case::new(
            format!("{dtype}/precision-f32"),
            vec![inp(F32, &[33, 512], 1), w()],
            move |g, x| {
                let y = xwt(g, x)?;
                g.set_matmul_precision(y, webtensor::MatmulPrecision::F32)?;
                Ok(y)
            },
            |x| r::matmul(&x[0], &x[1].transpose(0, 1)),
        );
        cases.push(f32_prec.matmul(choice).expect_kernel("matmul_tiled"));
    }
    let (pass, _) = run_suite_on("matmul-coop-quantized", &cases, &devices);
    if !devices.is_empty() {
        assert_eq!(pass, cases.len() * devices.len(), "every case ran");
    }
}
