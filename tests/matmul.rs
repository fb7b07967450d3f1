//! Differential suite of the matmul kernels, on every available backend, against the f64 reference
//! (tests/common/reference.rs): sizes around every tile, transposed and permuted operands, batch broadcasting,
//! rank-1 operands, narrow N with a bias, f16 and mixed dtypes, NaN guard borders; and the mat-vec kernel's
//! three ways of summing an output (serial, subgroups, workgroup memory) on the same adapter.

mod common;

use common::reference::{self as r, Arr};
use common::{guarded_matmul, inp, inp_given, run_suite, run_suite_on, Case};
use webtensor::gpu::MatmulChoice;
use webtensor::DType::{self, F16, F32};

fn mm_case(name: String, sa: &[usize], sb: &[usize], ta: bool, tb: bool, da: DType, db: DType) -> Case {
    // ta/tb: the operand is stored transposed ([.., K, M] / [.., N, K]) and presented through a t() view
    let swap = |s: &[usize]| {
        let mut s = s.to_vec();
        let n = s.len();
        s.swap(n - 2, n - 1);
        s
    };
    let stored_a = if ta { swap(sa) } else { sa.to_vec() };
    let stored_b = if tb { swap(sb) } else { sb.to_vec() };
    Case::new(
        name,
        vec![inp(da, &stored_a, 1), inp(db, &stored_b, 2)],
        move |g, x| {
            let a = if ta { g.t(x[0])? } else { x[0] };
            let b = if tb { g.t(x[1])? } else { x[1] };
            g.matmul(a, b)
        },
        move |x| {
            let t = |a: &Arr| a.transpose(a.shape.len() - 2, a.shape.len() - 1);
            let a = if ta { t(&x[0]) } else { x[0].clone() };
            let b = if tb { t(&x[1]) } else { x[1].clone() };
            r::matmul(&a, &b)
        },
    )
}

#[test]
fn matmul() {
    let mut cases = shape_cases();
    special_cases(&mut cases);
    run_suite("matmul", &cases);
}

/// Sizes around the tiles, transposed operands, f16, and batch broadcasting.
fn shape_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // sizes around the 64x64x16 tile, in a spread of combinations
    let sizes = [1usize, 2, 3, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129];
    for (i, &m) in sizes.iter().enumerate() {
        for (j, &n) in sizes.iter().enumerate() {
            let k = sizes[(i * 5 + j * 3) % sizes.len()];
            if (i + j) % 2 == 0 {
                cases.push(mm_case(format!("sweep/{m}x{k}x{n}"), &[m, k], &[k, n], false, false, F32, F32));
            }
        }
    }
    for &(m, k, n) in &[(7, 13, 33), (1, 1000, 7), (33, 257, 1), (255, 7, 257), (64, 64, 64), (65, 17, 129)] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            cases.push(mm_case(format!("{m}x{k}x{n}/ta={ta}/tb={tb}"), &[m, k], &[k, n], ta, tb, F32, F32));
        }
        cases.push(mm_case(format!("{m}x{k}x{n}/f16"), &[m, k], &[k, n], false, true, F16, F16).tol(5e-6));
        cases.push(mm_case(format!("{m}x{k}x{n}/f16xf32"), &[m, k], &[k, n], false, false, F16, F32));
    }
    // batch broadcasting, operands of different ranks
    for (sa, sb) in [
        (vec![2, 4, 3, 3], vec![4, 3, 3]),
        (vec![4, 3, 3], vec![2, 4, 3, 3]),
        (vec![3, 1, 5, 7], vec![1, 4, 7, 6]),
        (vec![1, 2, 3], vec![3, 4]),
        (vec![5, 7, 13], vec![13, 9]),
        (vec![2, 5, 33], vec![1, 33, 17]),
    ] {
        cases.push(mm_case(format!("batch/{sa:?}@{sb:?}"), &sa, &sb, false, false, F32, F32));
        cases.push(mm_case(format!("batch/{sa:?}@{sb:?}/tb"), &sa, &sb, false, true, F32, F32));
    }
    cases
}

/// Grouped heads, rank-1 operands, exact results, permuted operands and narrow outputs with a bias.
fn special_cases(cases: &mut Vec<Case>) {
    // grouped heads: 8 query heads share 2 K/V heads (kv head h/4), via broadcast of a [2,1,9,64] view
    cases.push(Case::new(
        "batch/grouped-heads",
        vec![inp(F32, &[8, 5, 64], 1), inp(F32, &[2, 9, 64], 2)],
        |g, x| {
            let q = g.reshape(x[0], &[2, 4, 5, 64])?;
            let k = g.reshape(x[1], &[2, 1, 9, 64])?;
            let kt = g.t(k)?;
            let s = g.matmul(q, kt)?; // [2, 4, 5, 9]
            g.reshape(s, &[8, 5, 9])
        },
        |x| {
            let q = x[0].reshape(&[2, 4, 5, 64]);
            let k = x[1].reshape(&[2, 1, 9, 64]).transpose(2, 3);
            r::matmul(&q, &k).reshape(&[8, 5, 9])
        },
    ));
    // rank-1 operands (numpy promotion)
    cases.push(Case::new(
        "vec@mat",
        vec![inp(F32, &[33], 1), inp(F32, &[33, 7], 2)],
        |g, x| g.matmul(x[0], x[1]),
        |x| r::matmul(&x[0], &x[1]),
    ));
    cases.push(Case::new(
        "mat@vec",
        vec![inp(F32, &[7, 33], 1), inp(F32, &[33], 2)],
        |g, x| g.matmul(x[0], x[1]),
        |x| r::matmul(&x[0], &x[1]),
    ));
    // a transposed lhs, exact: transpose(A) @ ones gives A's column sums
    cases.push(
        Case::new(
            "transposed-lhs-exact",
            vec![
                inp_given(F32, &[2, 3], vec![0.5, -1.5, 2.0, -0.25, 1.0, -3.0]),
                inp_given(F32, &[2, 2], vec![1.0; 4]),
            ],
            |g, x| {
                let at = g.t(x[0])?;
                g.matmul(at, x[1])
            },
            |_| Arr::new(&[3, 2], vec![0.25, 0.25, -0.5, -0.5, -1.0, -1.0]),
        )
        .tol(0.0),
    );
    // operands stored in a permuted axis order and presented through permute
    cases.push(Case::new(
        "permuted-operands",
        vec![inp(F32, &[3, 16, 2, 256], 1), inp(F32, &[256, 2, 3, 8], 2)],
        |g, x| {
            let a = g.permute(x[0], &[0, 2, 1, 3])?; // [3, 2, 16, 256]
            let b = g.permute(x[1], &[2, 1, 0, 3])?; // [3, 2, 256, 8]
            g.matmul(a, b)
        },
        |x| r::matmul(&x[0].permute(&[0, 2, 1, 3]), &x[1].permute(&[2, 1, 0, 3])),
    ));
    exact_and_narrow_cases(cases);
}

/// Narrow outputs (N not a multiple of 4) with a bias, and 200x200 ones (exact).
fn exact_and_narrow_cases(cases: &mut Vec<Case>) {
    // narrow N (not a multiple of 4) with a bias
    for n in [1, 2, 3, 5, 6, 7] {
        cases.push(Case::new(
            format!("narrow-n/1x768x{n}+bias"),
            vec![inp(F32, &[1, 768], 1), inp(F32, &[768, n], 3), inp(F32, &[1, n], 4)],
            |g, x| {
                let y = g.matmul(x[0], x[1])?;
                g.add(y, x[2])
            },
            |x| r::binary(&r::matmul(&x[0], &x[1]), &x[2], |a, b| a + b),
        ));
    }
    // 200x200 ones (not a multiple of any tile): every element exactly 200
    cases.push(
        Case::new(
            "ones-200",
            vec![inp_given(F32, &[200, 200], vec![1.0; 40000]), inp_given(F32, &[200, 200], vec![1.0; 40000])],
            |g, x| g.matmul(x[0], x[1]),
            |_| Arr::new(&[200, 200], vec![200.0; 40000]),
        )
        .tol(0.0),
    );
}

/// Every matmul kernel (generic, each tiled configuration, mat-vec) on sizes one below, at and one above each
/// tile size, in every operand layout (row-major and transposed views), f32 and f16, with batch broadcasting.
#[test]
fn matmul_kernels() {
    let mut choices = vec![MatmulChoice::Generic];
    choices.extend(webtensor::gpu::TILE_CONFIGS.iter().map(|&c| MatmulChoice::Tiled(c)));
    let mut cases = Vec::new();
    let mk = [(1usize, 4usize), (3, 60), (63, 64), (64, 68), (65, 124), (127, 128), (128, 132), (129, 16)];
    let ns = [1usize, 4, 63, 64, 65, 127, 128, 129];
    for &choice in &choices {
        let tag = choice.name();
        for (i, &(m, k)) in mk.iter().enumerate() {
            let n = ns[(i * 3 + 1) % ns.len()];
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                cases.push(
                    mm_case(format!("{tag}/{m}x{k}x{n}/ta={ta}/tb={tb}"), &[m, k], &[k, n], ta, tb, F32, F32)
                        .matmul(choice),
                );
            }
            cases.push(
                mm_case(format!("{tag}/{m}x{k}x{n}/f16"), &[m, k], &[k, n], false, true, F16, F16)
                    .tol(5e-6)
                    .matmul(choice),
            );
            cases.push(
                mm_case(format!("{tag}/{m}x{k}x{n}/f32xf16"), &[m, k], &[k, n], false, true, F32, F16).matmul(choice),
            );
        }
        cases.push(
            mm_case(format!("{tag}/batch"), &[2, 3, 68, 32], &[3, 32, 36], false, false, F32, F32).matmul(choice),
        );
        cases.push(
            mm_case(format!("{tag}/batch/tb"), &[2, 1, 68, 32], &[3, 32, 36], false, true, F32, F32).matmul(choice),
        );
        // mat-vec (M = 1): decode-style x @ W^T with W [N, K], and x @ W with W [K, N]
        for &(k, n) in &[(4usize, 1usize), (64, 63), (68, 64), (1000, 65), (1024, 129), (4096, 8)] {
            cases.push(
                mm_case(format!("{tag}/matvec/1x{k}x{n}/nt"), &[1, k], &[k, n], false, true, F32, F32).matmul(choice),
            );
            cases.push(
                mm_case(format!("{tag}/matvec/1x{k}x{n}/nn"), &[1, k], &[k, n], false, false, F32, F32).matmul(choice),
            );
            cases.push(
                mm_case(format!("{tag}/matvec/1x{k}x{n}/f16w"), &[1, k], &[k, n], false, true, F32, F16).matmul(choice),
            );
        }
        cases.push(
            mm_case(format!("{tag}/matvec/batch"), &[3, 1, 64], &[3, 64, 20], false, true, F32, F32).matmul(choice),
        );
        // NaN guard borders around both operands (the kernels may run without wgpu's runtime checks)
        for (m, k, n) in [(37, 36, 44), (1, 64, 20)] {
            let case = guarded_matmul(format!("{tag}/nan-guarded/{m}x{k}x{n}"), F32, m, k, n).matmul(choice);
            cases.push(match (choice, m) {
                (MatmulChoice::Generic, _) => case,
                (_, 1) => case.expect_kernel("matvec"),
                _ => case.expect_kernel("matmul_tiled"),
            });
        }
    }
    run_suite("matmul-kernels", &cases);
}

/// Mat-vec cases: both weight layouts (W [N, K] read as t(W), and W [K, N]), odd K and N, f16 weights, a batch,
/// a fused bias and activation, and NaN guard borders; each expects the kernel `expect(k_contiguous)` names.
fn matvec_cases(expect: impl Fn(bool) -> &'static str) -> Vec<Case> {
    let mut cases = Vec::new();
    let sizes =
        [(4usize, 1usize), (8, 3), (64, 63), (68, 64), (1000, 65), (1024, 129), (576, 1536), (4096, 8), (12, 20)];
    for (k, n) in sizes.into_iter().chain([(1000, 260)]) {
        for (tb, db, tag) in [(true, F32, "nt"), (false, F32, "nn"), (true, F16, "f16w"), (false, F16, "f16w-nn")] {
            if !tb && n % 4 != 0 {
                continue; // W [K, N] takes the mat-vec kernel when rows are whole vec4s
            }
            let name = format!("1x{k}x{n}/{tag}");
            cases.push(mm_case(name, &[1, k], &[k, n], false, tb, F32, db).expect_kernel(expect(tb)));
        }
    }
    cases.push(mm_case("batch".into(), &[3, 1, 64], &[3, 64, 20], false, true, F32, F32).expect_kernel(expect(true)));
    cases.push(
        Case::new(
            "1x576x1536/nt+bias+silu",
            vec![inp(F32, &[1, 576], 1), inp(F16, &[1536, 576], 2), inp(F32, &[1536], 3)],
            |g, x| {
                let w = g.t(x[1])?;
                let y = g.matmul(x[0], w)?;
                let y = g.add(y, x[2])?;
                g.silu(y)
            },
            |x| {
                let y = r::matmul(&x[0], &x[1].transpose(0, 1));
                r::binary(&y, &x[2], |a, b| a + b).map(r::silu)
            },
        )
        .expect_kernel(expect(true)),
    );
    cases.push(guarded_matmul("nan-guarded/1x64x20".into(), F32, 1, 64, 20).expect_kernel(expect(false)));
    cases
}

/// The mat-vec kernel's three ways of summing one output, on the same adapter: serial (one invocation an
/// output, what software adapters take), and 32 invocations an output met through subgroups (where the
/// adapter's fit; K-contiguous weights only) or through workgroup memory (what GPUs take; pinned here with
/// `testing::device_with_matvec_reduce`).
#[test]
fn matvec_reductions() {
    let Some(gpu) = common::gpu() else {
        eprintln!("no GPU adapter: SKIPPED");
        return;
    };
    let caps = gpu.capabilities();
    let software = caps.device_type == webtensor::DeviceType::Cpu;
    let (lo, hi) = caps.subgroup_size;
    let fits = caps.subgroups && lo == hi && lo > 0 && 32 % lo == 0;
    let pinned =
        |subgroups| webtensor::testing::device_with_matvec_reduce(caps.backend, subgroups).expect("the same adapter");
    // the kernel each device takes: (W [N, K] read as t(W), W [K, N])
    let serial = if software { "matvec serial" } else { "matvec" };
    let runs = [
        (gpu.clone(), [serial, serial]),
        (pinned(true), [if fits { "matvec subgroups" } else { "matvec shared" }, "matvec shared"]),
        (pinned(false), ["matvec shared", "matvec shared"]),
    ];
    for (device, expect) in runs {
        let cases = matvec_cases(|k_contiguous| if k_contiguous { expect[0] } else { expect[1] });
        let (passed, _) = run_suite_on("matvec-reductions", &cases, std::slice::from_ref(&device));
        assert_eq!(passed, cases.len(), "every case runs on {}", device.capabilities().name);
    }
}

/// A few rows (2..=32: a short prefill chunk) on adapters that run on CPU cores take one serial mat-vec a row, the
/// rows as a batch dim with B broadcast; the tiled kernel elsewhere. Both weight layouts, f16 weights, and fused
/// epilogues whose operands vary along the rows (a residual [m, n]) and along the columns (a bias).
#[test]
fn few_rows() {
    let software = common::gpu().is_some_and(|g| g.capabilities().device_type == webtensor::DeviceType::Cpu);
    let expect = |c: Case| if software { c.expect_kernel("matvec serial") } else { c };
    let mut cases = Vec::new();
    for (m, k, n) in [(2usize, 8usize, 3usize), (5, 576, 64), (8, 68, 129), (17, 64, 20), (32, 256, 36)] {
        cases.push(expect(mm_case(format!("{m}x{k}x{n}/nt"), &[m, k], &[k, n], false, true, F32, F32)));
        cases.push(expect(mm_case(format!("{m}x{k}x{n}/f16w"), &[m, k], &[k, n], false, true, F32, F16)));
        if n % 4 == 0 {
            cases.push(expect(mm_case(format!("{m}x{k}x{n}/nn"), &[m, k], &[k, n], false, false, F32, F32)));
        }
    }
    cases.push(expect(Case::new(
        "5x576x64/nt+bias+silu+residual",
        vec![inp(F32, &[5, 576], 1), inp(F16, &[64, 576], 2), inp(F32, &[64], 3), inp(F32, &[5, 64], 4)],
        |g, x| {
            let w = g.t(x[1])?;
            let y = g.matmul(x[0], w)?;
            let y = g.add(y, x[2])?;
            let y = g.silu(y)?;
            g.add(y, x[3])
        },
        |x| {
            let y = r::binary(&r::matmul(&x[0], &x[1].transpose(0, 1)), &x[2], |a, b| a + b).map(r::silu);
            r::binary(&y, &x[3], |a, b| a + b)
        },
    )));
    // 33 rows: the tiled kernel again
    cases
        .push(mm_case("33x64x20/nt".into(), &[33, 64], &[64, 20], false, true, F32, F32).expect_kernel("matmul_tiled"));
    run_suite("few-rows", &cases);
}
