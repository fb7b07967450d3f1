//! Rotary position embeddings on every backend against the f64 reference (tests/common/reference.rs): both pair
//! layouts, partial rotation, large positions, strided inputs, frequency factors, YaRN and attn_factor.

mod common;

use common::reference as r;
use common::{inp, inp_given, run_suite, Case};
use webtensor::DType::{F16, F32, I32};
use webtensor::{Rope, RopeMode};

/// Rotary position embedding (ggml_rope_ext): modes normal and neox, all or the first n_dims of each head, large
/// positions, a strided input, f32 and f16, with and without a batch dim.
#[test]
fn rope() {
    let mut cases = Vec::new();
    let positions = |t: usize| (0..t).map(|i| [0.0, 1.0, 7.0, 100.0, 4000.0, 8191.0, 3.0][i % 7]).collect::<Vec<f64>>();
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for (shape, n_dims, dtype) in [
            (vec![7usize, 3, 64], 64usize, F32),
            (vec![7, 3, 64], 32, F32),
            (vec![2, 5, 2, 16], 16, F32),
            (vec![6, 2, 32], 32, F16),
        ] {
            let t = shape[shape.len() - 3];
            let rope = Rope::new(n_dims, mode, 10000.0);
            cases.push(Case::new(
                format!("rope/{mode:?}/{dtype}/{shape:?}/n_dims={n_dims}"),
                vec![inp(dtype, &shape, 1), inp_given(I32, &[t], positions(t))],
                move |g, x| g.rope(x[0], x[1], &rope),
                move |x| r::rope(&x[0], &x[1], &rope),
            ));
        }
        // a strided input: [H, T, D] stored, presented as [T, H, D]; another base and a position scale
        let rope = Rope { freq_scale: 0.5, ..Rope::new(64, mode, 100000.0) };
        cases.push(Case::new(
            format!("rope/{mode:?}/strided"),
            vec![inp(F32, &[3, 9, 64], 1), inp_given(I32, &[9], positions(9))],
            move |g, x| {
                let v = g.permute(x[0], &[1, 0, 2])?;
                g.rope(v, x[1], &rope)
            },
            move |x| r::rope(&x[0].permute(&[1, 0, 2]), &x[1], &rope),
        ));
        // frequency factors per pair (Llama 3's rope scaling: 1 for high frequencies, up to 8 for low ones)
        let rope = Rope::new(32, mode, 500000.0);
        let factors: Vec<f64> = (0..16).map(|i| [1.0, 1.0, 1.5, 3.25, 8.0, 8.0, 2.0, 0.75][i % 8]).collect();
        for dtype in [F32, F16] {
            cases.push(Case::new(
                format!("rope/{mode:?}/{dtype}/factors"),
                vec![
                    inp(dtype, &[2, 7, 3, 48], 1),
                    inp_given(I32, &[7], positions(7)),
                    inp_given(F32, &[16], factors.clone()),
                ],
                move |g, x| g.rope_ext(x[0], x[1], Some(x[2]), &rope),
                move |x| r::rope_ext(&x[0], &x[1], Some(&x[2]), &rope),
            ));
        }
        yarn_cases(&mut cases, mode, &positions);
    }
    run_suite("rope", &cases);
}

/// YaRN (Qwen2.5's long-context setting, factor 4 over an original 32768 positions; and a ramp placed by hand
/// across a few pairs, with ext_factor 0.5), and attn_factor alone (LongRoPE's scale), f32 and f16.
fn yarn_cases(cases: &mut Vec<Case>, mode: RopeMode, positions: &dyn Fn(usize) -> Vec<f64>) {
    let qwen = Rope {
        freq_scale: 0.25,
        ext_factor: 1.0,
        corr_dims: Rope::yarn_corr_dims(64, 32768, 1e6, 32.0, 1.0),
        ..Rope::new(64, mode, 1e6)
    };
    let by_hand = Rope { freq_scale: 0.125, ext_factor: 0.5, corr_dims: [3.0, 9.0], ..Rope::new(32, mode, 1e4) };
    let scaled = Rope { attn_factor: 1.19, ..Rope::new(32, mode, 1e4) };
    for (name, rope) in [("yarn-qwen", qwen), ("yarn-by-hand", by_hand), ("attn-factor", scaled)] {
        for dtype in [F32, F16] {
            cases.push(Case::new(
                format!("rope/{mode:?}/{dtype}/{name}"),
                vec![inp(dtype, &[7, 3, 64], 1), inp_given(I32, &[7], positions(7))],
                move |g, x| g.rope(x[0], x[1], &rope),
                move |x| r::rope(&x[0], &x[1], &rope),
            ));
        }
    }
}

/// Rope parameters that cannot describe an angle are errors naming the op, never NaN outputs.
#[test]
fn bad_parameters_are_errors() {
    let base = Rope::new(8, RopeMode::Neox, 1e4);
    for bad in [
        Rope { freq_scale: 0.0, ..base },
        Rope { freq_base: -1.0, ..base },
        Rope { attn_factor: f32::NAN, ..base },
        Rope { ext_factor: f32::INFINITY, ..base },
        Rope { corr_dims: [0.0, f32::NAN], ..base },
    ] {
        let mut g = webtensor::Graph::new();
        let x = g.input("x", F32, &[2, 1, 8]).unwrap();
        let pos = g.input("pos", I32, &[2]).unwrap();
        let err = g.rope(x, pos, &bad).expect_err(&format!("{bad:?} accepted"));
        assert!(err.to_string().contains("rope"), "{err}");
    }
}
