//! The linear-attention ops on every backend against f64 references: ssm_conv (the causal depthwise conv, its
//! carried rows first), and gated_delta_net (the gated delta rule: its output and its new state) from a decode
//! step to a 2048-token prefill, q and k l2-normalized in the graph as the models do; the recurrence's reference
//! against its chunked form; the ops' shape errors.

mod common;

use common::recurrent::{self as rr, Delta};
use common::reference::Arr;
use common::{inp, inp_map, run_suite, Case};
use webtensor::DType::{F16, F32};
use webtensor::{Graph, Result, Tensor};

#[test]
fn ssm_conv() {
    let mut cases = Vec::new();
    // (batch, rows = T + K − 1, channels, taps): a decode step, a prefill, one tap, no batch axis
    for (b, rows, c, k) in [(1usize, 4usize, 8usize, 4usize), (2, 40, 96, 4), (3, 7, 5, 1), (0, 6, 3, 2)] {
        for dtype in [F32, F16] {
            let x = if b == 0 { vec![rows, c] } else { vec![b, rows, c] };
            cases.push(Case::new(
                format!("ssm_conv/{dtype}/{x:?}/K{k}"),
                vec![inp(dtype, &x, 1), inp(dtype, &[c, k], 2)],
                |g, x| g.ssm_conv(x[0], x[1]),
                |x| rr::ssm_conv(&x[0], &x[1]),
            ));
        }
    }
    // x as a strided view (the state and the new rows concatenated along time, as a model builds it)
    cases.push(Case::new(
        "ssm_conv/concat-state",
        vec![inp(F32, &[2, 3, 16], 1), inp(F32, &[2, 9, 16], 2), inp(F32, &[16, 4], 3)],
        |g, x| {
            let xs = g.concat(&[x[0], x[1]], 1)?;
            g.ssm_conv(xs, x[2])
        },
        |x| rr::ssm_conv(&common::reference::concat(&x[0], &x[1], 1), &x[2]),
    ));
    run_suite("recurrent", &cases);
}

/// log-decays g ≤ 0 (−softplus-like) and β in (0, 1), as the models' gates give them.
fn log_decay(x: f64) -> f64 {
    -0.5 * (x + 1.0)
}
fn unit_gate(x: f64) -> f64 {
    0.5 + 0.45 * x
}

/// q, k l2-normalized in the graph, then the gated delta rule; `state_out` picks the new state, else the output.
fn delta_graph(g: &mut Graph, x: &[Tensor], scale: f32, state_out: bool) -> Result<Tensor> {
    let (q, k) = (g.l2_norm(x[0], 1e-6)?, g.l2_norm(x[1], 1e-6)?);
    let (out, state) = g.gated_delta_net(q, k, x[2], x[3], x[4], x[5], scale)?;
    Ok(if state_out { state } else { out })
}

fn delta_reference(x: &[Arr], scale: f64, state_out: bool) -> Arr {
    let (q, k) = (rr::l2_norm(&x[0], 1e-6), rr::l2_norm(&x[1], 1e-6));
    let d = Delta { q: &q, k: &k, v: &x[2], g: &x[3], beta: &x[4], state: &x[5], scale };
    let (out, state) = rr::gated_delta_net(&d);
    if state_out {
        state
    } else {
        out
    }
}

#[test]
fn gated_delta_net() {
    let mut cases = Vec::new();
    // (B, T, Hk, Dk, Hv, Dv): a decode step, tiled heads (Hv = 2·Hk), unequal widths, batched prefill, and a long
    // sequence at Qwen3.5's widths (a drift in the state over thousands of tokens shows in both results; on llvmpipe
    // both run as several dispatches)
    let dims = [(1usize, 1usize, 2usize, 16usize, 4usize, 16usize), (2, 33, 2, 32, 4, 24), (3, 5, 1, 8, 3, 70)];
    for (i, &(b, t, hk, dk, hv, dv)) in
        dims.iter().chain(&[(1, 2048, 1, 64, 2, 64), (1, 1024, 2, 128, 4, 128)]).enumerate()
    {
        let scale = 1.0 / (dk as f32).sqrt();
        for state_out in [false, true] {
            let dtype = if i == 2 { F16 } else { F32 };
            let inputs = vec![
                inp(dtype, &[b, t, hk, dk], 1),
                inp(dtype, &[b, t, hk, dk], 2),
                inp(dtype, &[b, t, hv, dv], 3),
                inp_map(F32, &[b, t, hv], 4, log_decay),
                inp_map(F32, &[b, t, hv], 5, unit_gate),
                inp_map(F32, &[b, hv, dv, dk], 6, |x| 0.1 * x),
            ];
            let what = if state_out { "state" } else { "out" };
            cases.push(Case::new(
                format!("gated_delta_net/{what}/{dtype}/B{b}T{t}/Hk{hk}x{dk}/Hv{hv}x{dv}"),
                inputs,
                move |g, x| delta_graph(g, x, scale, state_out),
                move |x| delta_reference(x, scale as f64, state_out),
            ));
        }
    }
    run_suite("recurrent", &cases);
}

/// The recurrence's reference and the chunked form's agree (chunks of 64 over 300 tokens, a partial last chunk;
/// chunks of 1 are the recurrence itself): the chunked algebra a chunked kernel follows is right.
#[test]
fn chunked_form_matches_the_recurrence() {
    let (b, t, hk, dk, hv, dv) = (2usize, 300usize, 2usize, 16usize, 4usize, 12usize);
    let gen = |shape: &[usize], seed: u64, f: fn(f64) -> f64| Arr::from_fn(shape, |i| f(common::reference::u(i, seed)));
    let q = rr::l2_norm(&gen(&[b, t, hk, dk], 1, |x| x), 1e-6);
    let k = rr::l2_norm(&gen(&[b, t, hk, dk], 2, |x| x), 1e-6);
    let (v, g) = (gen(&[b, t, hv, dv], 3, |x| x), gen(&[b, t, hv], 4, log_decay));
    let (beta, state) = (gen(&[b, t, hv], 5, unit_gate), gen(&[b, hv, dv, dk], 6, |x| 0.1 * x));
    let d = Delta { q: &q, k: &k, v: &v, g: &g, beta: &beta, state: &state, scale: 0.25 };
    let (out, s) = rr::gated_delta_net(&d);
    for c in [1usize, 7, 64] {
        let (oc, sc) = rr::gated_delta_net_chunked(&d, c);
        let worst = |a: &Arr, b: &Arr| a.data.iter().zip(&b.data).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        assert!(
            worst(&out, &oc) < 1e-9 && worst(&s, &sc) < 1e-9,
            "chunks of {c}: {} {}",
            worst(&out, &oc),
            worst(&s, &sc)
        );
    }
}

#[test]
fn shape_errors_name_the_op() {
    let mut g = Graph::new();
    let x = g.input("x", F32, &[2, 10, 8]).unwrap();
    let w = g.input("w", F32, &[9, 4]).unwrap();
    let e = g.ssm_conv(x, w).unwrap_err().to_string();
    assert!(e.contains("ssm_conv") && e.contains("channels"), "{e}");
    let w1 = g.input("w1", F32, &[8, 12]).unwrap();
    let e = g.ssm_conv(x, w1).unwrap_err().to_string();
    assert!(e.contains("ssm_conv"), "{e}");
    let q = g.input("q", F32, &[1, 3, 2, 16]).unwrap();
    let v = g.input("v", F32, &[1, 3, 3, 16]).unwrap();
    let gate = g.input("g", F32, &[1, 3, 3]).unwrap();
    let s = g.input("s", F32, &[1, 3, 16, 16]).unwrap();
    let e = g.gated_delta_net(q, q, v, gate, gate, s, 0.25).unwrap_err().to_string();
    assert!(e.contains("gated_delta_net") && e.contains("multiple"), "{e}");
    let v4 = g.input("v4", F32, &[1, 3, 4, 16]).unwrap();
    let e = g.gated_delta_net(q, q, v4, gate, gate, s, 0.25).unwrap_err().to_string();
    assert!(e.contains("gated_delta_net") && e.contains("g and beta"), "{e}");
}
