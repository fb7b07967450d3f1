//! Differential suite: every op, on every available backend, against the f64 reference
//! (tests/common/reference.rs). Shapes include 1, odd sizes (7, 13, 33, 255, 257, 1000), non-contiguous views
//! and broadcast operands, and the fault classes others have hit: broadcasts along size-1 inner dims, batch
//! broadcasting, inner dims not a multiple of 4, f16 row reductions, and norm widths around the vector tail.
//! The matmul kernels have their own suite (tests/matmul.rs).

mod common;

use common::reference::{self as r, Arr};
use common::{case_matches, inp, inp_given, inp_map, run_suite, Case};
use webtensor::DType::{self, F16, F32, I32};
use webtensor::{BinaryOp, GluOp, Graph, ReduceOp, Result, RowOp, Tensor, UnaryOp};

const SHAPES: &[&[usize]] = &[&[1], &[7, 13], &[33, 255], &[2, 3, 257], &[1000], &[2, 2, 3, 5]];

fn unary_case(op: UnaryOp, dtype: DType, shape: &[usize], transposed: bool) -> Case {
    let (f, domain) = r::unary_reference(op.name()).unwrap_or_else(|| panic!("no f64 reference for {}", op.name()));
    let params = r::unary_params(op.name());
    let (a, b) = (params.first().map_or(0.0, |&v| v as f64), params.get(1).map_or(0.0, |&v| v as f64));
    let domain = if dtype == I32 { |x: f64| (x * 1000.0).round() } else { domain };
    let label = format!("{}/{dtype}/{shape:?}{}", op.name(), if transposed { "/T" } else { "" });
    Case::new(
        label,
        vec![inp_map(dtype, shape, 1, domain)],
        move |g, x| {
            let x = if transposed { g.t(x[0])? } else { x[0] };
            g.unary(op, x, &params)
        },
        move |x| {
            let x = if transposed { x[0].transpose(x[0].shape.len() - 2, x[0].shape.len() - 1) } else { x[0].clone() };
            x.map(|v| f(v, a, b))
        },
    )
}

/// Every op of the unary table (`UnaryOp::ALL`), in every dtype it accepts, over plain, odd and transposed shapes.
#[test]
fn unary_ops() {
    let mut cases = Vec::new();
    for &op in UnaryOp::ALL {
        for shape in SHAPES {
            cases.push(unary_case(op, F32, shape, false));
        }
        cases.push(unary_case(op, F32, &[13, 33], true));
        cases.push(unary_case(op, F16, &[7, 257], false));
        cases.push(unary_case(op, F16, &[33, 7], true));
        if op.accepts().dtype(I32) {
            cases.push(unary_case(op, I32, &[7, 13], false));
        }
    }
    cases.push(Case::new(
        "contiguous/f32/T",
        vec![inp(F32, &[13, 33], 1)],
        |g, x| {
            let t = g.t(x[0])?;
            g.contiguous(t)
        },
        |x| x[0].transpose(0, 1),
    ));
    run_suite("unary", &cases);
}

/// Every GLU op (`GluOp::ALL`), split form over two operands (broadcast and mixed dtypes included) and fused form
/// over a halved last axis, also inside a larger fused chain.
#[test]
fn glu_ops() {
    // by name, so that a new row of the GLU table without a reference fails here
    let act = |op: GluOp| -> fn(f64) -> f64 {
        match op.name() {
            "swiglu" => r::silu,
            "geglu" => r::gelu_tanh,
            "geglu_erf" => r::gelu_erf,
            "geglu_quick" => |x| x * r::sigmoid(1.702 * x),
            other => panic!("no f64 reference for {other}"),
        }
    };
    let mut cases = Vec::new();
    for &op in GluOp::ALL {
        let f = act(op);
        for (sa, sb, da, db) in [
            (vec![7usize, 13], vec![7usize, 13], F32, F32),
            (vec![3, 257], vec![257], F32, F32),
            (vec![5, 33], vec![5, 33], F16, F16),
            (vec![5, 33], vec![5, 33], F16, F32),
        ] {
            cases.push(Case::new(
                format!("{}/split/{da}x{db}/{sa:?}x{sb:?}", op.name()),
                vec![inp_map(da, &sa, 1, |x| x * 6.0), inp(db, &sb, 2)],
                move |g, x| g.glu(op, x[0], x[1]),
                move |x| r::binary(&x[0], &x[1], |a, b| f(a) * b),
            ));
        }
        for dtype in [F32, F16] {
            cases.push(Case::new(
                format!("{}/fused/{dtype}/[3,2,66]", op.name()),
                vec![inp_map(dtype, &[3, 2, 66], 1, |x| x * 6.0)],
                move |g, x| g.glu_fused(op, x[0]),
                move |x| r::binary(&x[0].slice(2, 0, 33), &x[0].slice(2, 33, 66), |a, b| f(a) * b),
            ));
        }
        // inside a fused chain: (glu(a, b) + c) * 2
        cases.push(Case::new(
            format!("{}/in-chain", op.name()),
            vec![inp_map(F32, &[9, 17], 1, |x| x * 6.0), inp(F32, &[9, 17], 2), inp(F32, &[17], 3)],
            move |g, x| {
                let y = g.glu(op, x[0], x[1])?;
                let y = g.add(y, x[2])?;
                g.scale(y, 2.0)
            },
            move |x| r::binary(&r::binary(&x[0], &x[1], |a, b| f(a) * b), &x[2], |a, b| (a + b) * 2.0),
        ));
    }
    run_suite("glu", &cases);
}

/// The f64 reference of each row of the binary table (`BinaryOp::ALL`); a row without one fails here.
fn binary_reference(op: BinaryOp) -> fn(f64, f64) -> f64 {
    match op.name() {
        "add" => |a, b| a + b,
        "sub" => |a, b| a - b,
        "mul" => |a, b| a * b,
        "div" => |a, b| a / b,
        other => panic!("no f64 reference for binary op {other}"),
    }
}

#[test]
fn binary_ops() {
    let pairs: &[(&[usize], &[usize])] = &[
        (&[1], &[1]),
        (&[7, 13], &[7, 13]),
        (&[1000], &[1000]),
        (&[33, 255], &[255]),                   // row vector
        (&[33, 255], &[33, 1]),                 // column vector
        (&[33, 1], &[33, 255]),                 // swapped
        (&[2, 3, 257], &[3, 1]),                // middle broadcast
        (&[1, 64, 16, 16], &[1, 64, 1, 1]),     // per-channel bias over HxW (reduced channels)
        (&[1, 1280, 16, 16], &[1, 1280, 1, 1]), // per-channel bias over HxW, 1280 channels
        (&[4, 1, 5], &[1, 3, 1]),               // both sides broadcast
    ];
    let away_from_zero = |x: f64| if x.abs() < 0.25 { x.signum().max(0.0) * 0.5 + 0.25 } else { x };
    let mut cases = Vec::new();
    for &bop in BinaryOp::ALL {
        let (name, f) = (bop.name(), binary_reference(bop));
        let op = move |g: &mut Graph, a: Tensor, b: Tensor| g.binary(bop, a, b);
        for &(sa, sb) in pairs {
            for dtype in [F32, F16] {
                if dtype == F16 && sa.iter().product::<usize>() > 100_000 {
                    continue;
                }
                cases.push(Case::new(
                    format!("{name}/{dtype}/{sa:?}x{sb:?}"),
                    vec![inp(dtype, sa, 1), inp_map(dtype, sb, 2, away_from_zero)],
                    move |g, x| op(g, x[0], x[1]),
                    move |x| r::binary(&x[0], &x[1], f),
                ));
            }
        }
        // non-contiguous: both operands transposed views
        cases.push(Case::new(
            format!("{name}/f32/transposed"),
            vec![inp(F32, &[13, 33], 1), inp_map(F32, &[13, 33], 2, away_from_zero)],
            move |g, x| {
                let (a, b) = (g.t(x[0])?, g.t(x[1])?);
                op(g, a, b)
            },
            move |x| r::binary(&x[0].transpose(0, 1), &x[1].transpose(0, 1), f),
        ));
        // aliasing: the same tensor twice
        cases.push(Case::new(
            format!("{name}/f32/same-operand"),
            vec![inp_map(F32, &[7, 13], 1, away_from_zero)],
            move |g, x| op(g, x[0], x[0]),
            move |x| r::binary(&x[0], &x[0], f),
        ));
        // mixed dtypes promote to f32
        cases.push(Case::new(
            format!("{name}/f16+f32"),
            vec![inp(F16, &[7, 13], 1), inp_map(F32, &[13], 2, away_from_zero)],
            move |g, x| op(g, x[0], x[1]),
            move |x| r::binary(&x[0], &x[1], f),
        ));
        if name != "div" {
            cases.push(Case::new(
                format!("{name}/i32"),
                vec![
                    inp_map(I32, &[7, 13], 1, |x| (x * 1000.0).round()),
                    inp_map(I32, &[13], 2, |x| (x * 100.0).round()),
                ],
                move |g, x| op(g, x[0], x[1]),
                move |x| r::binary(&x[0], &x[1], f),
            ));
        }
    }
    exact_binary_cases(&mut cases);
    run_suite("binary", &cases);
}

/// Exact binary results: division correctly rounded, exact quotients, a column-vector broadcast.
fn exact_binary_cases(cases: &mut Vec<Case>) {
    // division correctly rounded to f32 (WGSL's `/` may be 2.5 ULP off: NVIDIA's driver gave 6 / 3 = 1.9999999),
    // against the f64 quotient of the f32 inputs rounded to f32 (exact: f64 has over 2 × 24 + 2 bits), and exact
    // quotients exact
    cases.push(
        Case::new(
            "div/f32/correctly-rounded",
            vec![inp_map(F32, &[64, 257], 1, |x| x * 1e3), inp_map(F32, &[64, 257], 2, |x| x * 7.0 + 7.5)],
            |g, x| g.div(x[0], x[1]),
            |x| r::binary(&x[0], &x[1], |a, b| (a / b) as f32 as f64),
        )
        .tol(0.0),
    );
    let (nums, dens): (Vec<f64>, Vec<f64>) = (1..=1024)
        .map(|i| (3.0 + (i % 61) as f64, [3.0, 7.0, 0.1f32 as f64, 49.0][i % 4]))
        .map(|(k, d)| (k * d, d))
        .unzip();
    cases.push(
        Case::new(
            "div/f32/exact-quotients",
            vec![inp_given(F32, &[1024], nums), inp_given(F32, &[1024], dens)],
            |g, x| g.div(x[0], x[1]),
            |x| r::binary(&x[0], &x[1], |a, b| (a / b) as f32 as f64),
        )
        .tol(0.0),
    );
    // a column-vector broadcast, exact values (the wrong-axis signature would be [[20, 80], [60, 160]])
    cases.push(
        Case::new(
            "mul/column-vector-exact",
            vec![inp_given(F32, &[2, 2], vec![10., 20., 30., 40.]), inp_given(F32, &[2, 1], vec![2., 4.])],
            |g, x| g.mul(x[0], x[1]),
            |_| Arr::new(&[2, 2], vec![20., 40., 120., 160.]),
        )
        .tol(0.0),
    );
}

/// Norms over widths around the vector tail, then `* w` (`+ b`).
fn norm_width_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for h in [1, 3, 767, 768, 769, 770, 771, 4095, 4097] {
        for dtype in [F32, F16] {
            cases.push(Case::new(
                format!("norm-width/rms_norm*w/{dtype}/7x{h}"),
                vec![inp(dtype, &[7, h], 1), inp(dtype, &[h], 5)],
                |g, x| {
                    let n = g.rms_norm(x[0], 1e-6)?;
                    g.mul(n, x[1])
                },
                |x| r::rms_norm(&x[0], Some(&x[1]), 1e-6),
            ));
            cases.push(
                Case::new(
                    format!("norm-width/layer_norm*w+b/{dtype}/7x{h}"),
                    vec![inp(dtype, &[7, h], 1), inp(dtype, &[h], 5), inp(dtype, &[h], 6)],
                    |g, x| {
                        let n = g.layer_norm(x[0], 1e-6)?;
                        let n = g.mul(n, x[1])?;
                        g.add(n, x[2])
                    },
                    |x| r::layer_norm(&x[0], Some(&x[1]), Some(&x[2]), 1e-6),
                )
                .tol(if dtype == F16 { 2e-6 } else { 1e-7 }),
            );
        }
    }
    cases
}

/// Softmax and the norms: every op of the row-op table (`RowOp::ALL`; the cases below name each, and a row
/// without cases fails here).
#[test]
fn row_ops() {
    for op in RowOp::ALL {
        let named = ["softmax", "rms_norm", "layer_norm", "l2_norm"];
        assert!(named.contains(&op.name()), "no cases for row op {}", op.name());
    }
    let mut cases = Vec::new();
    let shapes: &[&[usize]] = &[&[1], &[1, 1], &[7, 13], &[3, 257], &[2, 1000], &[2, 3, 33], &[1, 2, 3, 255]];
    for &s in shapes {
        for dtype in [F32, F16] {
            cases.push(Case::new(
                format!("softmax/{dtype}/{s:?}"),
                vec![inp_map(dtype, s, 1, |x| x * 8.0)],
                |g, x| g.softmax(x[0]),
                |x| r::softmax(&x[0], None, 1.0),
            ));
            cases.push(Case::new(
                format!("rms_norm/{dtype}/{s:?}"),
                vec![inp(dtype, s, 1)],
                |g, x| g.rms_norm(x[0], 1e-6),
                |x| r::rms_norm(&x[0], None, 1e-6),
            ));
            cases.push(Case::new(
                format!("layer_norm/{dtype}/{s:?}"),
                vec![inp(dtype, s, 1)],
                |g, x| g.layer_norm(x[0], 1e-5),
                |x| r::layer_norm(&x[0], None, None, 1e-5),
            ));
            cases.push(Case::new(
                format!("l2_norm/{dtype}/{s:?}"),
                vec![inp(dtype, s, 1)],
                |g, x| g.l2_norm(x[0], 1e-6),
                |x| common::recurrent::l2_norm(&x[0], 1e-6),
            ));
        }
    }
    // softmax with a broadcast causal-style mask and a scale
    cases.push(Case::new(
        "softmax/mask+scale",
        vec![inp(F32, &[2, 7, 13], 1), inp_map(F32, &[7, 13], 2, |x| if x < -0.5 { f64::NEG_INFINITY } else { x })],
        |g, x| g.softmax_ext(x[0], Some(x[1]), 0.125),
        |x| r::softmax(&x[0], Some(&x[1]), 0.125),
    ));
    cases.push(Case::new(
        "softmax/all-masked-row",
        vec![
            inp(F32, &[3, 5], 1),
            inp_given(
                F32,
                &[3, 5],
                [vec![f64::NEG_INFINITY; 5], vec![0.0; 5], vec![f64::NEG_INFINITY, 0., 0., 0., 0.]].concat(),
            ),
        ],
        |g, x| g.softmax_ext(x[0], Some(x[1]), 1.0),
        |x| r::softmax(&x[0], Some(&x[1]), 1.0),
    ));
    cases.push(Case::new(
        "softmax/transposed",
        vec![inp(F32, &[33, 13], 1)],
        |g, x| {
            let t = g.t(x[0])?;
            g.softmax(t)
        },
        |x| r::softmax(&x[0].transpose(0, 1), None, 1.0),
    ));
    cases.extend(norm_width_cases());
    cases.push(Case::new(
        "rms_norm/transposed",
        vec![inp(F32, &[257, 7], 1)],
        |g, x| {
            let t = g.t(x[0])?;
            g.rms_norm(t, 1e-6)
        },
        |x| r::rms_norm(&x[0].transpose(0, 1), None, 1e-6),
    ));
    run_suite("rows", &cases);
}

/// Every op of the reduction table (`ReduceOp::ALL`, referenced by name so a new row without a reference fails).
#[test]
fn reductions() {
    let reference = |op: ReduceOp| -> fn(&Arr) -> Arr {
        match op.name() {
            "sum" => r::sum_last,
            "mean" => r::mean_last,
            "max" => r::max_last,
            "argmax" => r::argmax_last,
            other => panic!("no f64 reference for {other}"),
        }
    };
    let ops = ReduceOp::ALL.iter().map(|&op| (op.name(), op, reference(op)));
    let mut cases = Vec::new();
    for (name, op, f) in ops {
        let op = move |g: &mut Graph, x: Tensor| g.reduce(op, x);
        for s in [&[1usize][..], &[7, 13], &[2, 1000], &[2, 3, 257], &[1, 2, 3, 33], &[5, 4096]] {
            for dtype in [F32, F16] {
                cases.push(Case::new(
                    format!("{name}/{dtype}/{s:?}"),
                    vec![inp(dtype, s, 1)],
                    move |g, x| op(g, x[0]),
                    move |x| f(&x[0]),
                ));
            }
        }
        // f16 row reductions must not mix rows: row r filled with r + 1, exact results
        for (rows, cols) in [(2usize, 32usize), (3, 33), (2, 1), (1, 2048), (7, 255), (64, 2)] {
            for dtype in [F32, F16] {
                let v: Vec<f64> = (0..rows * cols).map(|i| (i / cols + 1) as f64).collect();
                cases.push(
                    Case::new(
                        format!("rows-apart/{name}/{dtype}/{rows}x{cols}"),
                        vec![inp_given(dtype, &[rows, cols], v)],
                        move |g, x| op(g, x[0]),
                        move |x| f(&x[0]),
                    )
                    .tol(0.0),
                );
            }
        }
        // strided: reduce a transposed view
        cases.push(Case::new(
            format!("{name}/transposed"),
            vec![inp(F32, &[33, 7], 1)],
            move |g, x| {
                let t = g.t(x[0])?;
                op(g, t)
            },
            move |x| f(&x[0].transpose(0, 1)),
        ));
    }
    // argmax picks the first of equal maxima
    cases.push(
        Case::new(
            "argmax/ties",
            vec![inp_given(F32, &[2, 6], vec![1., 3., 3., 0., 3., 2., 5., 5., 5., 5., 5., 5.])],
            |g, x| g.argmax(x[0]),
            |_| Arr::new(&[2, 1], vec![1., 0.]),
        )
        .tol(0.0),
    );
    run_suite("reduce", &cases);
}

#[test]
fn data_movement() {
    let mut cases = Vec::new();
    // casts
    for (from, to) in [(F32, F16), (F16, F32), (F32, I32), (I32, F32), (F16, I32), (I32, F16)] {
        let dom = |x: f64| (x * 1000.0).round() / 4.0;
        cases.push(
            Case::new(
                format!("cast/{from}->{to}"),
                vec![inp_map(from, &[7, 257], 1, dom)],
                move |g, x| g.cast(x[0], to),
                move |x| if to == I32 { x[0].map(f64::trunc) } else { x[0].clone() },
            )
            .tol(if to == F16 { 1e-6 } else { 0.0 }),
        );
    }
    // contiguous copies of views
    cases.push(Case::new(
        "contiguous/permute4d",
        vec![inp(F32, &[2, 3, 5, 7], 1)],
        |g, x| {
            let p = g.permute(x[0], &[3, 1, 0, 2])?;
            g.contiguous(p)
        },
        |x| x[0].permute(&[3, 1, 0, 2]),
    ));
    cases.push(Case::new(
        "contiguous/slice",
        vec![inp(F32, &[13, 33], 1)],
        |g, x| {
            let s = g.slice(x[0], 1, 5, 30)?;
            let s = g.slice(s, 0, 1, 12)?;
            g.contiguous(s)
        },
        |x| x[0].slice(1, 5, 30).slice(0, 1, 12),
    ));
    cases.push(Case::new(
        "contiguous/broadcast",
        vec![inp(F32, &[7, 1], 1)],
        |g, x| {
            let b = g.broadcast_to(x[0], &[3, 7, 13])?;
            g.contiguous(b)
        },
        |x| x[0].broadcast_to(&[3, 7, 13]),
    ));
    cases.push(Case::new(
        "reshape-of-transpose",
        vec![inp(F32, &[6, 35], 1)],
        |g, x| {
            let t = g.t(x[0])?;
            g.reshape(t, &[7, 5, 6])
        },
        |x| x[0].transpose(0, 1).reshape(&[7, 5, 6]),
    ));
    cases.push(Case::new(
        "slice-output-view",
        vec![inp(F32, &[7, 13], 1)],
        |g, x| {
            let y = g.exp(x[0])?;
            g.slice(y, 1, 3, 9)
        },
        |x| x[0].map(f64::exp).slice(1, 3, 9),
    ));
    // heads of odd width stored back to back
    for hd in [1usize, 2, 3, 5, 6, 7, 9] {
        cases.push(
            Case::new(
                format!("odd-heads/head_dim={hd}"),
                vec![
                    inp_given(F32, &[2, 1, 1], vec![1.0, 1.0]),
                    inp_given(F32, &[1, 1, hd], (1..=hd).map(|v| v as f64).collect()),
                ],
                |g, x| g.matmul(x[0], x[1]),
                |x| r::matmul(&x[0], &x[1]),
            )
            .tol(0.0),
        );
    }
    gather_cases(&mut cases);
    run_suite("data", &cases);
}

/// get_rows (every dtype, a transposed table) and concat (every axis, views, the same tensor twice).
fn gather_cases(cases: &mut Vec<Case>) {
    // get_rows
    for dtype in [F32, F16, I32] {
        let dom = |x: f64| (x * 1000.0).round();
        cases.push(Case::new(
            format!("get_rows/{dtype}/[50,33]"),
            vec![
                inp_map(dtype, &[50, 33], 1, dom),
                inp_given(I32, &[2, 5], vec![0., 49., 7., 7., 13., 1., 2., 3., 48., 0.]),
            ],
            |g, x| g.get_rows(x[0], x[1]),
            |x| r::get_rows(&x[0], &x[1]),
        ));
    }
    cases.push(Case::new(
        "get_rows/transposed-table",
        vec![inp(F32, &[257, 30], 1), inp_given(I32, &[4], vec![29., 0., 3., 3.])],
        |g, x| {
            let t = g.t(x[0])?; // [30, 257]
            g.get_rows(t, x[1])
        },
        |x| r::get_rows(&x[0].transpose(0, 1), &x[1]),
    ));
    // concat
    for axis in [0isize, 1, -1] {
        cases.push(Case::new(
            format!("concat/axis{axis}"),
            vec![inp(F32, &[7, 13, 5], 1), inp(F32, &[7, 13, 5], 2)],
            move |g, x| g.concat(&[x[0], x[1]], axis),
            move |x| r::concat(&x[0], &x[1], axis.rem_euclid(3) as usize),
        ));
    }
    cases.push(Case::new(
        "concat/three-with-views",
        vec![inp(F32, &[4, 6], 1), inp(F32, &[6, 3], 2)],
        |g, x| {
            let t = g.t(x[1])?; // [3, 6]
            let s = g.slice(x[0], 0, 1, 3)?; // [2, 6]
            g.concat(&[x[0], t, s], 0)
        },
        |x| r::concat(&r::concat(&x[0], &x[1].transpose(0, 1), 0), &x[0].slice(0, 1, 3), 0),
    ));
    cases.push(Case::new(
        "concat/same-tensor",
        vec![inp(F16, &[3, 5], 1)],
        |g, x| g.concat(&[x[0], x[0]], 1),
        |x| r::concat(&x[0], &x[0], 1),
    ));
}

/// Writes into states: set_rows (f32 into f32 and into f16, first, last and repeated indices, the last repeated
/// row winning) and copies into views of a state (strided, broadcast, converting), read back through the written
/// tensor.
/// Copies into views: a strided (permuted) slice of a state, a broadcast source, f32 into f16.
fn copy_into_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    cases.push(
        Case::new(
            "copy_into/permuted-slice",
            vec![inp(F32, &[3, 5], 1)],
            |g, x| {
                let v = g.permute(x[1], &[1, 0, 2])?; // [6, 4, 5] view of the [4, 6, 5] state
                let v = g.slice(v, 0, 2, 5)?; // rows 2..5 of axis 0: [3, 4, 5]
                let v = g.slice(v, 1, 1, 2)?; // [3, 1, 5]
                let src = g.reshape(x[0], &[3, 1, 5])?;
                g.copy_into(v, src)?;
                let whole = g.permute(x[1], &[0, 1, 2])?;
                g.contiguous(whole)
            },
            |x| {
                let mut out = x[1].clone(); // [4, 6, 5]; view (a, b, c) -> state (b + 1, a + 2, c)
                for a in 0..3 {
                    for c in 0..5 {
                        out.data[(6 + a + 2) * 5 + c] = x[0].data[a * 5 + c];
                    }
                }
                out
            },
        )
        .with_state(inp(F32, &[4, 6, 5], 2))
        .tol(0.0),
    );
    cases.push(
        Case::new(
            "copy_into/broadcast-f32-into-f16",
            vec![inp(F32, &[1, 7], 1)],
            |g, x| {
                let v = g.slice(x[1], 0, 1, 4)?; // rows 1..4
                g.copy_into(v, x[0])
            },
            |x| x[0].broadcast_to(&[3, 7]),
        )
        .with_state(inp(F16, &[5, 7], 2))
        .tol(1e-6),
    );
    cases
}

#[test]
fn state_writes() {
    let mut cases = Vec::new();
    let set_rows_ref = |dst: &Arr, idx: &Arr, src: &Arr| {
        let d = dst.shape[1];
        let mut out = dst.clone();
        for (i, &r) in idx.data.iter().enumerate() {
            for c in 0..d {
                out.data[r as usize * d + c] = src.data[i * d + c];
            }
        }
        out
    };
    for dst in [F32, F16] {
        for (name, idx) in [
            ("first", vec![0.0]),
            ("last", vec![9.0]),
            ("several", vec![3.0, 0.0, 9.0, 5.0]),
            ("repeated", vec![2.0, 7.0, 2.0, 2.0, 7.0]),
        ] {
            let n = idx.len();
            cases.push(
                Case::new(
                    format!("set_rows/{dst}/{name}"),
                    vec![inp_given(I32, &[n], idx), inp(F32, &[n, 33], 2)],
                    |g, x| g.set_rows(x[2], x[0], x[1]),
                    move |x| set_rows_ref(&x[2], &x[0], &x[1]),
                )
                .with_state(inp(dst, &[10, 33], 3))
                .tol(if dst == F16 { 1e-6 } else { 0.0 }),
            );
        }
    }
    // two writes in one graph, the second reading the first through the returned tensor
    cases.push(
        Case::new(
            "set_rows/twice-then-read",
            vec![inp_given(I32, &[1], vec![4.0]), inp_given(I32, &[1], vec![5.0]), inp(F32, &[1, 8], 2)],
            |g, x| {
                let w = g.set_rows(x[3], x[0], x[2])?;
                let row = g.slice(w, 0, 4, 5)?; // the row just written
                let twice = g.scale(row, 2.0)?;
                g.set_rows(w, x[1], twice)
            },
            |x| {
                let mut out = x[3].clone();
                for c in 0..8 {
                    out.data[4 * 8 + c] = x[2].data[c];
                    out.data[5 * 8 + c] = 2.0 * x[2].data[c];
                }
                out
            },
        )
        .with_state(inp(F32, &[6, 8], 3))
        .tol(0.0),
    );
    cases.extend(copy_into_cases());
    run_suite("state-writes", &cases);
}

/// Attention (flash on the GPU): odd lengths and widths, GQA ratios 1, 3 and 8, causal and masked (rows fully masked),
/// KV lengths 1 and 4097 (the split-key decode path), a run-time KV length, f16 K/V, batches with a padding
/// mask, and K/V read as views of a KV-cache state.
#[test]
fn attention() {
    use webtensor::Attention;
    let mut cases = Vec::new();
    let plain = |scale: f32, causal: bool| Attention { scale, causal, mask: None, kv_len: None, sinks: None };
    // (H, Hkv, T, S, D, causal)
    for (h, hkv, t, s, d, causal) in [
        (3, 3, 5, 13, 64, false),
        (9, 3, 7, 7, 64, true),
        (8, 1, 17, 17, 32, true),
        (8, 1, 1, 1, 64, false),
        (9, 3, 1, 4097, 64, true),
        (4, 2, 1, 300, 32, false),
        (2, 2, 33, 40, 16, true),
        // a width the CPU's vector kernel does not take (not a multiple of 8): K and V converted first
        (6, 2, 3, 21, 12, true),
        // the same over keys the CPU splits in runs of 256
        (6, 2, 1, 300, 12, true),
        // the CPU's matrix-product path for long prefills (64 query rows or more)
        (4, 2, 70, 70, 32, true),
        (2, 1, 64, 100, 16, false),
        // groups of more heads than a GPU workgroup's 16 decode rows (two blocks of a K/V head's heads), split and not
        (40, 2, 1, 300, 16, true),
        (34, 2, 1, 40, 16, false),
    ] {
        for (dq, dkv) in [(F32, F32), (F32, F16)] {
            let scale = 1.0 / (d as f32).sqrt();
            cases.push(Case::new(
                format!("attention/{dq}+{dkv}/H{h}/Hkv{hkv}/T{t}/S{s}/D{d}/causal={causal}"),
                vec![inp(dq, &[h, t, d], 1), inp(dkv, &[hkv, s, d], 2), inp(dkv, &[hkv, s, d], 3)],
                move |g, x| g.attention(x[0], x[1], x[2], &plain(scale, causal)),
                move |x| r::attention(&x[0], &x[1], &x[2], None, scale as f64, causal, s),
            ));
        }
    }
    narrow_values_cases(&mut cases);
    kv_len_cases(&mut cases);
    // masks: a broadcast [T, S] mask with fully masked rows; a batch with a padding mask [B, 1, 1, S]
    let row_masked = |v: f64| if v < -0.3 { f64::NEG_INFINITY } else { v };
    cases.push(Case::new(
        "attention/mask/fully-masked-rows",
        vec![inp(F32, &[2, 4, 16], 1), inp(F32, &[2, 9, 16], 2), inp(F32, &[2, 9, 16], 3), {
            let mut m: Vec<f64> = (0..36).map(|i| row_masked(r::u(i, 9))).collect();
            m[9..18].iter_mut().for_each(|x| *x = f64::NEG_INFINITY); // query 1 sees nothing
            inp_given(F32, &[4, 9], m)
        }],
        |g, x| g.attention(x[0], x[1], x[2], &masked(0.25, x[3])),
        |x| r::attention(&x[0], &x[1], &x[2], Some(&x[3]), 0.25, false, 9),
    ));
    sliding_window_case(&mut cases);
    cases.push(Case::new(
        "attention/batch/padding-mask",
        vec![inp(F32, &[3, 4, 6, 32], 1), inp(F32, &[3, 2, 6, 32], 2), inp(F32, &[3, 2, 6, 32], 3), {
            let m: Vec<f64> = (0..18).map(|i| if i % 6 >= 6 - i / 6 * 2 { f64::NEG_INFINITY } else { 0.0 }).collect();
            inp_given(F32, &[3, 1, 1, 6], m)
        }],
        |g, x| g.attention(x[0], x[1], x[2], &masked(0.18, x[3])),
        |x| r::attention(&x[0], &x[1], &x[2], Some(&x[3]), 0.18, false, 6),
    ));
    cases.push(common::padding_mask_long_case());
    kv_cache_views_case(&mut cases);
    sinks_cases(&mut cases);
    run_suite("attention", &cases);
}

/// Attention sinks (gpt-oss), a logit per head in each softmax's denominator, on every path: a long prefill (the
/// CPU's matrix products), a short one and a decode step (the grouped rows), decode over keys the CPU and the GPU
/// split (with a run-time length reaching one split and several), with a mask hiding every key of a row (zeros,
/// the sink notwithstanding). Sinks from −3 to 4: some outweigh every key, some none.
fn sinks_cases(cases: &mut Vec<Case>) {
    use webtensor::Attention;
    let sinks = |h: usize| inp_given(F32, &[h], (0..h).map(|i| -3.0 + 7.0 * i as f64 / (h - 1) as f64).collect());
    // (H, Hkv, T, S, run-time length)
    for (h, hkv, t, s, l) in [
        (4, 2, 70, 70, None),
        (6, 2, 5, 21, None),
        (8, 2, 1, 40, None),
        (8, 2, 1, 300, Some(300)),
        (4, 1, 1, 2048, Some(600)),
    ]
    .into_iter()
    .chain([(4, 1, 1, 2048, Some(30))])
    {
        let len = l.unwrap_or(s);
        let mut ins = vec![inp(F32, &[h, t, 32], 1), inp(F16, &[hkv, s, 32], 2), inp(F16, &[hkv, s, 32], 3), sinks(h)];
        ins.extend(l.map(|l| inp_given(I32, &[1], vec![l as f64])));
        cases.push(Case::new(
            format!("attention/sinks/H{h}/Hkv{hkv}/T{t}/S{s}/L{len}"),
            ins,
            move |g, x| {
                let a =
                    Attention { scale: 0.3, causal: true, mask: None, kv_len: x.get(4).copied(), sinks: Some(x[3]) };
                g.attention(x[0], x[1], x[2], &a)
            },
            move |x| r::attention_sinks(&x[0], &x[1], &x[2], (None, Some(&x[3])), 0.3, true, len),
        ));
    }
    let masked = |i: usize| if i / 9 == 1 || (i % 9).is_multiple_of(3) { f64::NEG_INFINITY } else { 0.0 };
    cases.push(Case::new(
        "attention/sinks/fully-masked-row",
        vec![inp(F32, &[2, 4, 16], 1), inp(F32, &[2, 9, 16], 2), inp(F32, &[2, 9, 16], 3), sinks(2), {
            inp_given(F32, &[4, 9], (0..36).map(masked).collect())
        }],
        |g, x| {
            let a = Attention { scale: 0.25, causal: false, mask: Some(x[4]), kv_len: None, sinks: Some(x[3]) };
            g.attention(x[0], x[1], x[2], &a)
        },
        |x| r::attention_sinks(&x[0], &x[1], &x[2], (Some(&x[4]), Some(&x[3])), 0.25, false, 9),
    ));
}

/// Values narrower than keys (Dv ≠ D): a width the CPU's vector kernel takes and one it does not.
fn narrow_values_cases(cases: &mut Vec<Case>) {
    use webtensor::Attention;
    let plain = Attention { scale: 0.3, causal: true, mask: None, kv_len: None, sinks: None };
    for (h, hkv, t, s, d, dv) in [(4, 2, 1, 9, 16, 8), (6, 3, 5, 11, 20, 12)] {
        cases.push(Case::new(
            format!("attention/f16/H{h}/Hkv{hkv}/T{t}/S{s}/D{d}/Dv{dv}"),
            vec![inp(F32, &[h, t, d], 1), inp(F16, &[hkv, s, d], 2), inp(F16, &[hkv, s, dv], 3)],
            move |g, x| g.attention(x[0], x[1], x[2], &plain),
            move |x| r::attention(&x[0], &x[1], &x[2], None, 0.3, true, s),
        ));
    }
}

/// Attention's parameters for a non-causal `mask`.
fn masked(scale: f32, mask: Tensor) -> webtensor::Attention {
    webtensor::Attention { scale, causal: false, mask: Some(mask), kv_len: None, sinks: None }
}

/// A run-time KV length L < S (prefill and decode), causal; over a cache of 2048 (decode splits the keys: only
/// the splits L reaches run), L given or computed in the graph (L - 1 + 1: the run cannot see it).
fn kv_len_cases(cases: &mut Vec<Case>) {
    use webtensor::Attention;
    for (t, s, l, computed) in
        [(1usize, 300usize, 77usize, false), (5, 300, 77, false), (1, 300, 1, false), (1, 300, 299, false)]
            .into_iter()
            .chain([(1, 2048, 600, false), (1, 2048, 600, true), (1, 2048, 2048, false), (64, 300, 150, false)])
    {
        let len = l;
        let mut ins = vec![
            inp(F32, &[6, t, 32], 1),
            inp(F16, &[2, s, 32], 2),
            inp(F16, &[2, s, 32], 3),
            inp_given(I32, &[1], vec![(l - computed as usize) as f64]),
        ];
        if computed {
            ins.push(inp_given(I32, &[1], vec![1.0]));
        }
        cases.push(Case::new(
            format!("attention/kv_len={l}/S{s}/T{t}{}", if computed { "/computed" } else { "" }),
            ins,
            move |g, x| {
                let kv_len = if computed { g.add(x[3], x[4])? } else { x[3] };
                g.attention(
                    x[0],
                    x[1],
                    x[2],
                    &Attention { scale: 0.2, causal: true, mask: None, kv_len: Some(kv_len), sinks: None },
                )
            },
            move |x| r::attention(&x[0], &x[1], &x[2], None, 0.2, true, len),
        ));
    }
}

/// K and V as views of an f16 KV-cache state [S, Hkv * D] (a row per position), q a view of [T, H, D].
fn kv_cache_views_case(cases: &mut Vec<Case>) {
    use webtensor::Attention;
    cases.push(
        Case::new(
            "attention/kv-cache-views",
            vec![inp(F32, &[5, 6, 32], 1), inp_given(I32, &[1], vec![41.0])],
            |g, x| {
                let view = |g: &mut Graph, c| -> Result<Tensor> {
                    let c = g.reshape(c, &[64, 2, 32])?;
                    g.permute(c, &[1, 0, 2]) // [2, 64, 32]
                };
                let (k, v) = (view(g, x[2])?, view(g, x[3])?);
                let q = g.permute(x[0], &[1, 0, 2])?; // [6, 5, 32]
                g.attention(
                    q,
                    k,
                    v,
                    &Attention { scale: 0.3, causal: true, mask: None, kv_len: Some(x[1]), sinks: None },
                )
            },
            |x| {
                let kv = |c: &Arr| c.reshape(&[64, 2, 32]).permute(&[1, 0, 2]);
                r::attention(&x[0].permute(&[1, 0, 2]), &kv(&x[2]), &kv(&x[3]), None, 0.3, true, 41)
            },
        )
        .with_state(inp(F16, &[64, 64], 2))
        .with_state(inp(F16, &[64, 64], 3)),
    );
}

/// A sliding window of 8 as a mask over 64 queries (the CPU's matrix-product path), rows near the start seeing
/// fewer keys.
fn sliding_window_case(cases: &mut Vec<Case>) {
    let window = |i: usize| if (i / 64).abs_diff(i % 64) < 8 && i % 64 <= i / 64 { 0.0 } else { f64::NEG_INFINITY };
    cases.push(Case::new(
        "attention/mask/sliding-window",
        vec![inp(F32, &[2, 64, 16], 1), inp(F16, &[2, 64, 16], 2), inp(F16, &[2, 64, 16], 3), {
            inp_given(F32, &[64, 64], (0..64 * 64).map(window).collect())
        }],
        |g, x| g.attention(x[0], x[1], x[2], &masked(0.25, x[3])),
        |x| r::attention(&x[0], &x[1], &x[2], Some(&x[3]), 0.25, false, 64),
    ));
}

/// `WEBTENSOR_CASE=...` runs the cases whose `suite/name` contains one of its comma-separated parts.
#[test]
fn case_filter_selects_by_suite_and_name() {
    assert!(case_matches(None, "ops", "add/float32/[7, 13]"));
    assert!(case_matches(Some("add/float16"), "ops", "add/float16/[1]"));
    assert!(!case_matches(Some("add/float16"), "ops", "add/float32/[1]"));
    assert!(case_matches(Some("rope,ops/sub"), "ops", "sub/int32/[1000]"));
    assert!(case_matches(Some("rope,ops/sub"), "rows", "rope/neox"));
    assert!(!case_matches(Some("rope,ops/sub"), "ops", "mul/int32/[1000]"));
    assert!(case_matches(Some(","), "ops", "anything"));
}
