//! Adapter profiles: the decisions that depend on an adapter (fusion, the tuner's acceptance, splitting, kernel
//! choice, the f16 path, subgroups, cooperative matrices) checked without that adapter, from the capabilities
//! recorded in `tests/data/profiles/` (`webtensor info --json` on the hardware, or the limits wgpu reports for
//! it; each file says its source). Plans of a set of graphs under every profile are compared with
//! `tests/snapshots/profiles.txt` (`WEBTENSOR_UPDATE_SNAPSHOT=1` rewrites it), key decisions are asserted, and
//! what lavapipe can carry out of each profile's decisions runs on lavapipe against the f64 reference.

mod common;

use common::reference::{self as r};
use common::{inp, profile, profiles, run_suite_on, Case};
use webtensor::gpu::{uses_cooperative_matrices, MatmulChoice, COOP_CONFIGS, TILE_CONFIGS};
use webtensor::testing::{plan_for_capabilities, tuner_verdict, ProfileDispatch};
use webtensor::{Attention, Capabilities, CompileOptions, DType, DeviceType, Graph, Result, Tensor};

const F32: DType = DType::F32;
const F16: DType = DType::F16;

type Build = fn(&mut Graph) -> Result<Vec<Tensor>>;

/// `x @ w` with x [m, k] and w [k, n] (`wt`: w stored [n, k], read through `t()`).
fn matmul(g: &mut Graph, dtype: DType, m: usize, k: usize, n: usize, wt: bool) -> Result<Tensor> {
    let x = g.input("x", dtype, &[m, k])?;
    let w = if wt {
        let w = g.input("w", dtype, &[n, k])?;
        g.t(w)?
    } else {
        g.input("w", dtype, &[k, n])?
    };
    g.matmul(x, w)
}

/// The graphs whose plans each profile's snapshot records.
fn graphs() -> Vec<(&'static str, Build)> {
    vec![
        ("matmul f32 1024x1024x1024", |g| Ok(vec![matmul(g, F32, 1024, 1024, 1024, false)?])),
        ("matmul f16 1024x1024x1024", |g| Ok(vec![matmul(g, F16, 1024, 1024, 1024, false)?])),
        ("matmul f32 5x576 @ t(w 64x576) + bias, silu, + residual", |g| {
            let y = matmul(g, F32, 5, 576, 64, true)?;
            let b = g.input("b", F32, &[64])?;
            let r = g.input("r", F32, &[5, 64])?;
            let y = g.add(y, b)?;
            let y = g.silu(y)?;
            Ok(vec![g.add(y, r)?])
        }),
        ("mat-vec x 1x4096 · t(w f16 4096x4096)", |g| {
            let x = g.input("x", F32, &[1, 4096])?;
            let w = g.input("w", F16, &[4096, 4096])?;
            let wt = g.t(w)?;
            Ok(vec![g.matmul(x, wt)?])
        }),
        ("mat-vec x 1x4096 @ w f32 4096x4096", |g| Ok(vec![matmul(g, F32, 1, 4096, 4096, false)?])),
        ("tuner's check: 8 matmuls 1024³ summed", |g| {
            let a = g.input("a", F32, &[1024, 1024])?;
            let b = g.input("b", F32, &[1024, 1024])?;
            let mut c = g.matmul(a, b)?;
            for _ in 1..8 {
                let d = g.matmul(a, b)?;
                c = g.add(c, d)?;
            }
            Ok(vec![c])
        }),
        ("chain of 12 adds over 13 inputs [4096]", |g| {
            let mut c = g.input("x0", F32, &[4096])?;
            for i in 1..13 {
                let x = g.input(&format!("x{i}"), F32, &[4096])?;
                c = g.add(c, x)?;
            }
            Ok(vec![c])
        }),
        ("f16 chain: exp(x) * y + z, rms_norm, softmax, mean", |g| {
            let x = g.input("x", F16, &[64, 256])?;
            let y = g.input("y", F16, &[64, 256])?;
            let z = g.input("z", F16, &[64, 256])?;
            let e = g.exp(x)?;
            let e = g.mul(e, y)?;
            let e = g.add(e, z)?;
            let n = g.rms_norm(e, 1e-5)?;
            let s = g.softmax(n)?;
            Ok(vec![s, g.mean(n)?])
        }),
        ("matmul f32 64x8192 @ t(w 16384x8192) (a 512 MiB weight)", |g| {
            Ok(vec![matmul(g, F32, 64, 8192, 16384, true)?])
        }),
        ("prefill projection x f32 512x576 @ t(w q4_1 1536x576)", |g| {
            let x = g.input("x", F32, &[512, 576])?;
            let w = g.input("w", DType::Q4_1, &[1536, 576])?;
            let wt = g.t(w)?;
            Ok(vec![g.matmul(x, wt)?])
        }),
        ("decode attention: 9 heads over 3 K/V heads of 64, f16 KV cache of 4096, run-time length", |g| {
            let q = g.input("q", F32, &[9, 1, 64])?;
            let k = g.input("k", F16, &[3, 4096, 64])?;
            let v = g.input("v", F16, &[3, 4096, 64])?;
            let l = g.input("len", DType::I32, &[1])?;
            g.attention(q, k, v, &Attention { scale: 0.125, causal: true, mask: None, kv_len: Some(l), sinks: None })
                .map(|o| vec![o])
        }),
    ]
}

/// Graph index of the decode attention in [`graphs`].
const DECODE_ATTENTION: usize = 10;

fn plan(caps: &Capabilities, build: Build) -> Result<Vec<ProfileDispatch>> {
    let mut g = Graph::new();
    let outs = build(&mut g)?;
    plan_for_capabilities(caps, &g, &outs, &CompileOptions::default())
}

fn describe(ds: &[ProfileDispatch]) -> String {
    let packed = if ds.iter().any(|d| d.packed_f16) { ", f16 packed" } else { "" };
    let mut kernels: Vec<(String, usize)> = Vec::new();
    for d in ds {
        match kernels.last_mut() {
            Some((k, n)) if *k == d.kernel => *n += 1,
            _ => kernels.push((d.kernel.clone(), 1)),
        }
    }
    let list: Vec<String> = kernels.iter().map(|(k, n)| if *n > 1 { format!("{k} ×{n}") } else { k.clone() }).collect();
    format!("{} dispatches{packed}: {}", ds.len(), list.join(", "))
}

#[test]
fn profiles_load_and_say_which_adapters_cannot_compute() {
    let all = profiles();
    assert!(all.len() >= 5, "profiles: {:?}", all.iter().map(|p| &p.0).collect::<Vec<_>>());
    for (name, caps) in &all {
        println!("{name}: {} ({}, {}), unusable: {:?}", caps.name, caps.backend, caps.device_type, caps.unusable);
    }
    let gl = profile("nvidia-h200-gl");
    assert!(gl.unusable.as_deref().is_some_and(|w| w.contains("compute")), "{:?}", gl.unusable);
    let e = plan(&gl, graphs()[0].1).expect_err("an adapter without compute compiles nothing");
    assert!(e.to_string().contains("cannot run compute kernels"), "{e}");
    assert!(Capabilities::from_json("{\"backend\": \"vulkan\"}").is_err());
}

/// The H200 run's finding 1: the tuner passed over every tiled and cooperative-matrix configuration because
/// its check plan had unfused adds; a candidate is judged on its matmul dispatches, and those adds fuse.
#[test]
fn tuner_accepts_every_candidate_under_hardware_profiles() {
    let mut judged = 0;
    for (name, caps) in profiles() {
        if caps.unusable.is_some() || caps.device_type == DeviceType::Cpu {
            continue;
        }
        let tiled = TILE_CONFIGS.iter().filter(|c| c.shared_bytes() <= caps.max_workgroup_storage_bytes);
        let mut candidates: Vec<MatmulChoice> = tiled.map(|&c| MatmulChoice::Tiled(c)).collect();
        if uses_cooperative_matrices(&caps) {
            let fit = COOP_CONFIGS.iter().filter(|c| c.shared_bytes() <= caps.max_workgroup_storage_bytes);
            candidates.extend(fit.map(|&c| MatmulChoice::Coop(c)));
        }
        for c in candidates {
            let verdict = tuner_verdict(&caps, c).unwrap();
            println!("{name}: {}: {verdict:?}", c.name());
            assert_eq!(verdict, Ok(()), "{name}: the tuner passes {} over", c.name());
            judged += 1;
        }
    }
    assert!(judged >= 12, "only {judged} candidates judged");
}

#[test]
fn key_decisions_per_profile() {
    let kernels = |p: &str, i: usize| plan(&profile(p), graphs()[i].1).unwrap();
    let first = |p: &str, i: usize| kernels(p, i)[0].kernel.clone();
    // f16 matmuls: tensor cores where the adapter has 16x16x16 f16 -> f32, the tiled kernel elsewhere
    assert!(first("nvidia-h200-vulkan", 1).starts_with("matmul_coop"), "{}", first("nvidia-h200-vulkan", 1));
    assert!(first("apple-m1-pro-metal", 1).starts_with("matmul_tiled"), "{}", first("apple-m1-pro-metal", 1));
    // a few rows: the tiled kernel on GPUs, a serial mat-vec a row on software adapters
    assert!(first("nvidia-h200-vulkan", 2).starts_with("matmul_tiled"));
    assert!(first("swiftshader-webgpu", 2).starts_with("matvec serial"));
    // one row: a subgroup reduction where the subgroup size is fixed, workgroup memory where it varies (Apple)
    assert_eq!(first("nvidia-h200-vulkan", 3), "matvec subgroups");
    assert_eq!(first("apple-m1-pro-metal", 3), "matvec shared");
    assert_eq!(first("lavapipe-vulkan", 3), "matvec serial");
    // the tuner's check plan: only its 8 matmuls, the adds fused into their epilogues
    for p in ["nvidia-h200-vulkan", "apple-m1-pro-metal", "lavapipe-vulkan"] {
        let ds = kernels(p, 5);
        assert_eq!(ds.len(), 8, "{p}: {}", describe(&ds));
        assert!(ds.iter().all(|d| d.kernel.starts_with("matmul_tiled")), "{p}: {}", describe(&ds));
    }
    // a chain longer than one kernel's operands is fused in pieces
    assert_eq!(kernels("nvidia-h200-vulkan", 6).len(), 3, "{}", describe(&kernels("nvidia-h200-vulkan", 6)));
    // f16 storage packed where the adapter lacks shader-f16
    assert!(kernels("swiftshader-webgpu", 7).iter().all(|d| d.packed_f16));
    assert!(kernels("nvidia-h200-vulkan", 7).iter().all(|d| !d.packed_f16));
    // a 512 MiB operand is split over lavapipe's 128 MiB bindings, bound whole on the H200
    assert_eq!(kernels("nvidia-h200-vulkan", 8).len(), 1);
    assert!(kernels("lavapipe-vulkan", 8).len() > 1);
    // a prefill's projection against Q4_1 weights: tensor cores where the adapter has them (the weight decoded to
    // f16 as it is staged), the tiled kernel elsewhere
    assert!(first("nvidia-h200-vulkan", 9).starts_with("matmul_coop"), "{}", first("nvidia-h200-vulkan", 9));
    assert!(first("apple-m1-pro-metal", 9).starts_with("matmul_tiled"), "{}", first("apple-m1-pro-metal", 9));
    // a decode step's attention: on GPUs a split of one tile of keys a workgroup (64 keys where 48 KiB of workgroup
    // memory holds such a tile, 32 in 32 KiB), so a long context runs on many cores at once; on adapters that run
    // on CPU cores splits of 256 keys, as the CPU backend's
    for (p, splits) in [("nvidia-h200-vulkan", 64), ("apple-m1-pro-metal", 128), ("lavapipe-vulkan", 16)] {
        let ds = kernels(p, DECODE_ATTENTION);
        assert_eq!(ds.len(), 2, "{p}: {}", describe(&ds));
        assert_eq!((ds[0].kernel.as_str(), ds[1].kernel.as_str()), ("attention decode split", "attention combine"));
        assert_eq!(ds[0].workgroups, [splits, 3, 1], "{p}: splits of the keys, K/V heads, row blocks");
    }
}

#[test]
fn plans_under_each_profile_match_the_snapshot() {
    let path = common::repo_file("tests/snapshots/profiles.txt");
    let mut text = String::from(
        "# Plans per adapter profile (tests/profiles.rs): regenerate with WEBTENSOR_UPDATE_SNAPSHOT=1 cargo test --test profiles\n",
    );
    for (name, caps) in profiles() {
        text += &format!("\n## {name}: {} ({}, {})\n", caps.name, caps.backend, caps.device_type);
        for (what, build) in graphs() {
            let line = match plan(&caps, build) {
                Ok(ds) => describe(&ds),
                Err(e) => format!("error: {e}"),
            };
            text += &format!("{what}: {line}\n");
        }
    }
    if std::env::var("WEBTENSOR_UPDATE_SNAPSHOT").as_deref() == Ok("1") {
        std::fs::write(&path, &text).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    if want != text {
        for (a, b) in want.lines().zip(text.lines()).filter(|(a, b)| a != b) {
            println!("- {a}\n+ {b}");
        }
        panic!("the plans differ from tests/snapshots/profiles.txt (regenerate with WEBTENSOR_UPDATE_SNAPSHOT=1)");
    }
}

/// The cases that each profile's decisions run on lavapipe: a few rows (the tiled kernel on hardware profiles,
/// once the tuner picked one), one row (the profile's mat-vec reduction), a mean and a division that are exact.
fn lavapipe_cases(hardware: bool) -> Vec<Case> {
    let few = Case::new(
        "few-rows 5x576x64 + bias, silu",
        vec![inp(F32, &[5, 576], 1), inp(F16, &[64, 576], 2), inp(F32, &[64], 3)],
        |g, x| {
            let w = g.t(x[1])?;
            let y = g.matmul(x[0], w)?;
            let y = g.add(y, x[2])?;
            g.silu(y)
        },
        |x| r::binary(&r::matmul(&x[0], &x[1].transpose(0, 1)), &x[2], |a, b| a + b).map(r::silu),
    );
    let rows33 = Case::new(
        "33x64x20",
        vec![inp(F32, &[33, 64], 4), inp(F32, &[64, 20], 5)],
        |g, x| g.matmul(x[0], x[1]),
        |x| r::matmul(&x[0], &x[1]),
    );
    let one = Case::new(
        "one row 1x256 · t(w f16 96x256)",
        vec![inp(F32, &[1, 256], 6), inp(F16, &[96, 256], 7)],
        |g, x| {
            let w = g.t(x[1])?;
            g.matmul(x[0], w)
        },
        |x| r::matmul(&x[0], &x[1].transpose(0, 1)),
    );
    let mean = Case::new(
        "mean of rows of equal values, 7x255",
        vec![common::inp_given(F32, &[7, 255], (0..7 * 255).map(|i| (i / 255) as f64 + 1.0).collect())],
        |g, x| g.mean(x[0]),
        |x| r::mean_last(&x[0]),
    )
    .tol(0.0);
    let (few, rows33) = if hardware {
        (few.expect_kernel("matmul_tiled"), rows33.expect_kernel("matmul_tiled"))
    } else {
        (few.expect_kernel("matvec serial"), rows33.expect_kernel("matmul_tiled"))
    };
    let mut cases = vec![few, rows33, one, mean];
    cases.extend(decode_attention_cases(hardware));
    cases
}

/// Decode attention (one query a head) as each profile splits its keys: a run-time length over a long cache (the
/// splits it reaches and their combine), the first split alone, groups of more heads than one workgroup's rows,
/// a batch whose padding mask leaves rows of 600, 300, 100 and no keys. On hardware profiles each is split.
fn decode_attention_cases(hardware: bool) -> Vec<Case> {
    let run_time_len = |s: usize, l: usize| {
        Case::new(
            format!("decode attention L = {l} over a cache of {s}"),
            vec![inp(F32, &[6, 1, 32], 1), inp(F16, &[2, s, 32], 2), inp(F16, &[2, s, 32], 3), {
                common::inp_given(DType::I32, &[1], vec![l as f64])
            }],
            |g, x| {
                g.attention(
                    x[0],
                    x[1],
                    x[2],
                    &Attention { scale: 0.2, causal: true, mask: None, kv_len: Some(x[3]), sinks: None },
                )
            },
            move |x| r::attention(&x[0], &x[1], &x[2], None, 0.2, true, l),
        )
    };
    let heads = Case::new(
        "decode attention, 40 heads over 2 K/V heads of 16, 300 keys",
        vec![inp(F32, &[40, 1, 16], 4), inp(F32, &[2, 300, 16], 5), inp(F32, &[2, 300, 16], 6)],
        |g, x| {
            g.attention(
                x[0],
                x[1],
                x[2],
                &Attention { scale: 0.25, causal: true, mask: None, kv_len: None, sinks: None },
            )
        },
        |x| r::attention(&x[0], &x[1], &x[2], None, 0.25, true, 300),
    );
    let padding = common::padding_mask_long_case();
    let cases = vec![run_time_len(2048, 600), run_time_len(2048, 1), heads, padding];
    cases.into_iter().map(|c| if hardware { c.expect_kernel("attention decode split") } else { c }).collect()
}

#[test]
fn lavapipe_runs_each_profiles_decisions() {
    let Some(gpu) = common::gpu() else {
        println!("no GPU adapter: SKIPPED");
        return;
    };
    let kind = gpu.capabilities().backend;
    for (name, caps) in profiles() {
        if caps.unusable.is_some() {
            continue;
        }
        // the tuner's repeated problem at 128³ (its structure, 8 matmuls summed, is what the H200 tripped on)
        let device = webtensor::testing::device_with_profile(kind, &caps, false, (128, 8)).unwrap();
        println!("{name}: {}", device.capabilities().name);
        run_suite_on(&format!("profile {name}"), &lavapipe_cases(caps.device_type != DeviceType::Cpu), &[device]);
    }
}
