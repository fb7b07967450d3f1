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

/// One layer's queries, keys and values as a language model builds them (see `qkv_layer`).
#[derive(Clone, Copy, Debug)]
struct Layer {
    /// Q, K and V are column views of one projection's rows (else three inputs).
    one_projection: bool,
    /// The positions are the written rows (else indices of their own, one repeated).
    idx_is_pos: bool,
    factors: bool,
    cache: webtensor::DType,
    /// K is RMS-normed per head before its rope (Qwen3, Gemma 3): a step between the queries' rope and the writes.
    k_norm: bool,
    /// The old keys' cache is read between the queries' rope and the writes (the fused step runs where the keys'
    /// write was, after it).
    read_old: bool,
    /// The queries' rope is read before the writes, and the old keys' cache too: the three must stay apart.
    read_q: bool,
}

const QKV: (usize, usize, usize, usize, usize) = (3, 4, 2, 8, 5); // rows, heads, KV heads, head dim, cache rows
const POSITIONS: [i32; 3] = [2, 0, 2];
const ROWS: [i32; 3] = [4, 1, 4];

/// A layer's graph, its inputs with their values, its outputs and its two cache states.
struct LayerGraph {
    g: webtensor::Graph,
    inputs: Vec<(webtensor::Tensor, webtensor::HostTensor)>,
    outs: Vec<webtensor::Tensor>,
    caches: [webtensor::State; 2],
}

/// The layer's graph; its outputs: the roped queries, where `read_q` their sums, where `read_old` the old keys'
/// row sums, and both caches (as f32).
fn qkv_layer(device: &webtensor::Device, l: Layer, rope: &Rope) -> LayerGraph {
    let (t, h, hkv, d, cap) = QKV;
    let caches =
        [device.state("kc", l.cache, &[cap, hkv * d]).unwrap(), device.state("vc", l.cache, &[cap, hkv * d]).unwrap()];
    let mut g = webtensor::Graph::new();
    let mut inputs = Vec::new();
    let mut input = |g: &mut webtensor::Graph, name: &str, shape: &[usize], seed: usize| {
        let n: usize = shape.iter().product();
        let v = (0..n).map(|i| (((i + seed) * 37 % 23) as f32 - 11.0) / 8.0).collect();
        let x = g.input(name, F32, shape).unwrap();
        inputs.push((x, webtensor::HostTensor::f32(shape, v).unwrap()));
        x
    };
    let (q, k, v) = if l.one_projection {
        let y = input(&mut g, "qkv", &[t, (h + 2 * hkv) * d], 0);
        let (nq, nkv) = (h * d, hkv * d);
        (
            g.slice(y, 1, 0, nq).unwrap(),
            g.slice(y, 1, nq, nq + nkv).unwrap(),
            g.slice(y, 1, nq + nkv, nq + 2 * nkv).unwrap(),
        )
    } else {
        (input(&mut g, "q", &[t, h * d], 1), input(&mut g, "k", &[t, hkv * d], 2), input(&mut g, "v", &[t, hkv * d], 3))
    };
    let ints = |v: &[i32]| webtensor::HostTensor::new(&[t], webtensor::Data::I32(v.to_vec())).unwrap();
    let pos = g.input("pos", I32, &[t]).unwrap();
    inputs.push((pos, ints(&POSITIONS)));
    let idx = if l.idx_is_pos { pos } else { g.input("idx", I32, &[t]).unwrap() };
    if !l.idx_is_pos {
        inputs.push((idx, ints(&ROWS)));
    }
    let factors = l.factors.then(|| g.input("factors", F32, &[3]).unwrap());
    if let Some(f) = factors {
        inputs.push((f, webtensor::HostTensor::f32(&[3], vec![1.0, 2.5, 8.0]).unwrap()));
    }
    let q = g.reshape(q, &[t, h, d]).unwrap();
    let q = g.rope_ext(q, pos, factors, rope).unwrap();
    let mut outs = vec![q];
    if l.read_q {
        outs.push(g.sum(q).unwrap());
    }
    if l.read_old {
        let old = g.state(&caches[0]).unwrap();
        let old = g.cast(old, F32).unwrap();
        outs.push(g.sum(old).unwrap());
    }
    let mut k = g.reshape(k, &[t, hkv, d]).unwrap();
    if l.k_norm {
        k = g.rms_norm(k, 1e-6).unwrap();
    }
    let k = g.rope_ext(k, pos, factors, rope).unwrap();
    let k = g.reshape(k, &[t, hkv * d]).unwrap();
    for (c, rows) in caches.iter().zip([k, v]) {
        let c = g.state(c).unwrap();
        let c = g.set_rows(c, idx, rows).unwrap();
        outs.push(g.cast(c, F32).unwrap());
    }
    LayerGraph { g, inputs, outs, caches }
}

/// The f64 reference of `qkv_layer`'s outputs from its inputs' values (the caches zero before the run).
fn qkv_layer_reference(l: Layer, rope: &Rope, inputs: &[(webtensor::Tensor, webtensor::HostTensor)]) -> Vec<Vec<f64>> {
    let (t, h, hkv, d, cap) = QKV;
    let arr =
        |i: usize, shape: &[usize]| r::Arr::new(shape, inputs[i].1.data.to_f32().iter().map(|&v| v as f64).collect());
    let (q, k, v) = if l.one_projection {
        let y = arr(0, &[t, (h + 2 * hkv) * d]);
        let cols = |from: usize, n: usize| {
            let data = (0..t).flat_map(|r| y.data[r * (h + 2 * hkv) * d + from..][..n].to_vec()).collect();
            r::Arr::new(&[t, n], data)
        };
        (cols(0, h * d), cols(h * d, hkv * d), cols((h + hkv) * d, hkv * d))
    } else {
        (arr(0, &[t, h * d]), arr(1, &[t, hkv * d]), arr(2, &[t, hkv * d]))
    };
    let pos = r::Arr::new(&[t], POSITIONS.iter().map(|&p| p as f64).collect());
    let factors = r::Arr::new(&[3], vec![1.0, 2.5, 8.0]);
    let factors = l.factors.then_some(&factors);
    let q = r::rope_ext(&r::Arr::new(&[t, h, d], q.data), &pos, factors, rope);
    let mut k = r::Arr::new(&[t, hkv, d], k.data);
    if l.k_norm {
        k = r::rms_norm(&k, None, 1e-6);
    }
    let k = r::rope_ext(&k, &pos, factors, rope);
    let idx = if l.idx_is_pos { POSITIONS } else { ROWS };
    let cache = |rows: &r::Arr| -> Vec<f64> {
        let n = hkv * d;
        (0..cap * n)
            .map(|e| idx.iter().rposition(|&i| i as usize == e / n).map_or(0.0, |r| rows.data[r * n + e % n]))
            .collect()
    };
    let mut out = vec![q.data.clone()];
    if l.read_q {
        out.push(q.data.chunks(d).map(|c| c.iter().sum()).collect());
    }
    if l.read_old {
        out.push(vec![0.0; cap]);
    }
    out.extend([cache(&k), cache(&v)]);
    out
}

/// A layer's queries, keys and values (the queries roped, the keys roped into their cache, the values written
/// into theirs): on a GPU one dispatch, `rope+kv_writes`, where the plan had three (the CPU backend keeps them
/// apart); the unfused plan's values bit for bit and the f64 reference's on every backend. Q, K and V one
/// projection's columns or three inputs, positions as the rows or not (a row written twice: the last wins),
/// frequency factors, f16 and f32 caches, a K norm between the queries' rope and the writes, a read of the old
/// keys in between. Reads of the queries and of the old keys in between keep them apart (no place suits all
/// three), as does a ninth storage binding (past WebGPU's guaranteed 8).
#[test]
fn queries_keys_and_values_are_one_dispatch() {
    use webtensor::DType::F16;
    let rope = Rope {
        freq_scale: 0.25,
        ext_factor: 1.0,
        attn_factor: 1.25,
        corr_dims: [0.6, 1.6],
        ..Rope::new(6, RopeMode::Neox, 1e4)
    };
    let base = Layer {
        one_projection: true,
        idx_is_pos: true,
        factors: false,
        cache: F16,
        k_norm: false,
        read_old: false,
        read_q: false,
    };
    let cases = [
        (base, true),
        (Layer { cache: F32, factors: true, ..base }, true),
        (Layer { idx_is_pos: false, k_norm: true, ..base }, true),
        (Layer { one_projection: false, factors: true, ..base }, true),
        (Layer { read_old: true, ..base }, true),
        (Layer { read_old: true, read_q: true, ..base }, false),
        (Layer { one_projection: false, idx_is_pos: false, factors: true, ..base }, false),
    ];
    for device in common::devices() {
        let dev = &device.capabilities().name;
        let gpu = device.capabilities().backend != webtensor::BackendKind::Cpu;
        for (layer, fuses) in cases {
            let LayerGraph { g, inputs: values, outs, caches } = qkv_layer(device, layer, &rope);
            let inputs: Vec<(webtensor::Tensor, &webtensor::HostTensor)> =
                values.iter().map(|(t, v)| (*t, v)).collect();
            let run = |no_fusion| {
                caches.iter().for_each(|c| c.zero().unwrap());
                let options = webtensor::CompileOptions { poison: true, no_fusion, ..Default::default() };
                let mut plan = device.compile_with(&g, &outs, &options).unwrap();
                let got: Vec<Vec<f32>> = plan.run(&inputs).unwrap().iter().map(|o| o.data.to_f32()).collect();
                (got, plan.stats().kernels)
            };
            let ((fused, kernels), (unfused, _)) = (run(false), run(true));
            let one = kernels.iter().filter(|k| *k == "rope+kv_writes").count();
            assert_eq!(one, usize::from(gpu && fuses), "{layer:?} on {dev}: {kernels:?}");
            if one == 1 {
                assert!(
                    !kernels.iter().any(|k| k == "rope" || k.contains("set_rows") && k != "rope+kv_writes"),
                    "{kernels:?}"
                );
            }
            let bits =
                |v: &[Vec<f32>]| v.iter().map(|o| o.iter().map(|x| x.to_bits()).collect()).collect::<Vec<Vec<u32>>>();
            assert_eq!(bits(&fused), bits(&unfused), "{layer:?} on {dev}: fused vs unfused");
            let tol = if layer.cache == F16 { 2e-3 } else { 1e-5 };
            for (o, (got, want)) in fused.iter().zip(qkv_layer_reference(layer, &rope, &values)).enumerate() {
                for (i, (&g, w)) in got.iter().zip(want).enumerate() {
                    assert!(
                        (g as f64 - w).abs() <= tol * w.abs().max(1.0),
                        "{layer:?} on {dev}: output {o}[{i}] {g} vs {w}"
                    );
                }
            }
        }
    }
}
