//! The mixture-of-experts ops on every backend against the f64 reference: top_k (ties toward the lower index,
//! NaN first), take_along_axis, and mul_mat_id with float and block-quantized experts (the fixture's types), one
//! row or a row per slot, strided activations, repeated experts.

mod common;

use common::reference::{self as r, Arr};
use common::{inp, inp_given, inp_map, inp_raw, run_suite, Case};
use webtensor::DType::{F16, F32, I32};

#[test]
fn top_k_and_take_along_axis() {
    let mut cases = Vec::new();
    for (shape, k) in
        [(vec![1usize, 8], 2usize), (vec![7, 128], 8), (vec![3, 5, 60], 4), (vec![2, 300], 300), (vec![9], 1)]
    {
        for dtype in [F32, F16] {
            cases.push(
                Case::new(
                    format!("top_k/{dtype}/{shape:?}/k{k}"),
                    vec![inp(dtype, &shape, 1)],
                    move |g, x| g.top_k(x[0], k),
                    move |x| r::top_k(&x[0], k),
                )
                .tol(0.0),
            );
            cases.push(Case::new(
                format!("top_k+take_along_axis/{dtype}/{shape:?}/k{k}"),
                vec![inp(dtype, &shape, 2)],
                move |g, x| {
                    let i = g.top_k(x[0], k)?;
                    g.take_along_axis(x[0], i)
                },
                move |x| r::take_along_axis(&x[0], &r::top_k(&x[0], k)),
            ));
        }
    }
    // ties (quantized to a few values: many equal entries) and NaN, which ranks first
    let ties: Vec<f64> = (0..64).map(|i| ((i * 7) % 5) as f64).collect();
    cases.push(
        Case::new("top_k/ties", vec![inp_given(F32, &[2, 32], ties)], |g, x| g.top_k(x[0], 9), |x| r::top_k(&x[0], 9))
            .tol(0.0),
    );
    let nan: Vec<f64> = (0..16).map(|i| if i == 11 || i == 4 { f64::NAN } else { i as f64 }).collect();
    cases.push(
        Case::new("top_k/nan", vec![inp_given(F32, &[1, 16], nan)], |g, x| g.top_k(x[0], 5), |x| r::top_k(&x[0], 5))
            .tol(0.0),
    );
    // a transposed x (its rows strided) and indices of a view
    cases.push(
        Case::new(
            "top_k/transposed",
            vec![inp(F32, &[40, 6], 3)],
            |g, x| {
                let t = g.t(x[0])?;
                g.top_k(t, 3)
            },
            |x| r::top_k(&x[0].transpose(0, 1), 3),
        )
        .tol(0.0),
    );
    cases.push(Case::new(
        "take_along_axis/i32+given",
        vec![
            inp_map(I32, &[3, 10], 4, |v| (v * 100.0).round()),
            inp_given(I32, &[3, 4], vec![0., 9., 3., 3., 1., 1., 2., 8., 7., 0., 5., 4.]),
        ],
        |g, x| g.take_along_axis(x[0], x[1]),
        |x| r::take_along_axis(&x[0], &x[1]),
    ));
    run_suite("experts", &cases);
}

/// Ids `[T, U]` over `e` experts, repeats included.
fn ids(t: usize, u: usize, e: usize, seed: usize) -> Vec<f64> {
    (0..t * u).map(|i| ((i * 7 + seed * 3 + i / u) % e) as f64).collect()
}

#[test]
fn mul_mat_id_float_experts() {
    let mut cases = Vec::new();
    for (t, u, a_rows, e, n, k) in
        [(1usize, 2usize, 1usize, 4usize, 24usize, 32usize), (5, 3, 3, 6, 33, 64), (17, 4, 1, 8, 16, 20)]
    {
        for (da, dw) in [(F32, F32), (F16, F16), (F32, F16)] {
            cases.push(Case::new(
                format!("mul_mat_id/{da}+{dw}/T{t}/U{u}/A{a_rows}/E{e}/N{n}/K{k}"),
                vec![inp(da, &[t, a_rows, k], 1), inp(dw, &[e, n, k], 2), inp_given(I32, &[t, u], ids(t, u, e, t))],
                |g, x| g.mul_mat_id(x[0], x[1], x[2]),
                |x| r::mul_mat_id(&x[0], &x[1], &x[2]),
            ));
        }
    }
    // activations as a strided view: [T, K] rows of a [T, 2K] tensor, one row a token
    cases.push(Case::new(
        "mul_mat_id/strided-a",
        vec![inp(F32, &[6, 2, 48], 1), inp(F32, &[3, 10, 48], 2), inp_given(I32, &[6, 2], ids(6, 2, 3, 1))],
        |g, x| {
            let a = g.slice(x[0], 1, 1, 2)?;
            g.mul_mat_id(a, x[1], x[2])
        },
        |x| r::mul_mat_id(&x[0].slice(1, 1, 2), &x[1], &x[2]),
    ));
    run_suite("experts", &cases);
}

/// The fixture's block types as experts: its `[9, 512]` weight as 3 experts of 3 rows, 1 to 20 tokens (a decode step
/// and a prefill's grouping by expert).
#[test]
fn mul_mat_id_quantized_experts() {
    let mut cases = Vec::new();
    for (dtype, bytes, decoded) in common::quant_fixture() {
        for (t, u) in [(1usize, 2usize), (20, 3)] {
            let (b, d) = (bytes.clone(), decoded.clone());
            cases.push(
                Case::new(
                    format!("mul_mat_id/{dtype}/T{t}/U{u}"),
                    vec![
                        inp(F32, &[t, 1, 512], 1),
                        inp_raw(dtype, &[3, 3, 512], b, d),
                        inp_given(I32, &[t, u], ids(t, u, 3, t)),
                    ],
                    |g, x| g.mul_mat_id(x[0], x[1], x[2]),
                    |x| r::mul_mat_id(&x[0], &x[1], &x[2]),
                )
                .tol(1e-4),
            );
        }
    }
    run_suite("experts", &cases);
    let _ = Arr::new(&[1], vec![0.0]);
}
