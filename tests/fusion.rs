//! Fusion, in-place execution and memory: fused plans give the reference's values in fewer
//! dispatches, and the planned memory of a transformer block stays within 1.1x of the most memory its tensors
//! ever need at once.

mod common;

use common::reference::{self as r, Arr};
use common::{inp, run_suite, Case};
use webtensor::DType::F32;
use webtensor::{CompileOptions, Graph, Result, Tensor};

fn silu(a: &Arr) -> Arr {
    a.map(r::silu)
}
fn add(a: &Arr, b: &Arr) -> Arr {
    r::binary(a, b, |x, y| x + y)
}
fn mul(a: &Arr, b: &Arr) -> Arr {
    r::binary(a, b, |x, y| x * y)
}
fn t(a: &Arr) -> Arr {
    a.transpose(a.shape.len() - 2, a.shape.len() - 1)
}

/// `silu(x @ W1ᵀ + b1) * (x @ W3ᵀ + b3)`: a gated feed-forward block.
fn ffn(g: &mut Graph, x: Tensor, w1: Tensor, b1: Tensor, w3: Tensor, b3: Tensor) -> Result<Tensor> {
    let w1t = g.t(w1)?;
    let h1 = g.matmul(x, w1t)?;
    let h1 = g.add(h1, b1)?;
    let h1 = g.silu(h1)?;
    let w3t = g.t(w3)?;
    let h3 = g.matmul(x, w3t)?;
    let h3 = g.add(h3, b3)?;
    g.mul(h1, h3)
}

fn ffn_ref(x: &[Arr]) -> Arr {
    mul(&silu(&add(&r::matmul(&x[0], &t(&x[1])), &x[2])), &add(&r::matmul(&x[0], &t(&x[3])), &x[4]))
}

fn cases() -> Vec<Case> {
    vec![
        Case::new(
            "chain-with-broadcasts",
            vec![inp(F32, &[7, 33], 1), inp(F32, &[33], 2), inp(F32, &[7, 1], 3)],
            |g, x| {
                let a = g.mul(x[0], x[1])?;
                let a = g.add(a, x[2])?;
                let a = g.silu(a)?;
                let a = g.scale(a, 0.5)?;
                g.sub(a, x[0])
            },
            |x| {
                let a = add(&mul(&x[0], &x[1]), &x[2]);
                r::binary(&silu(&a).map(|v| v * 0.5), &x[0], |p, q| p - q)
            },
        ),
        Case::new(
            "matmul+bias+relu+residual",
            vec![inp(F32, &[65, 36], 1), inp(F32, &[20, 36], 2), inp(F32, &[20], 3), inp(F32, &[65, 20], 4)],
            |g, x| {
                let wt = g.t(x[1])?;
                let y = g.matmul(x[0], wt)?;
                let y = g.add(y, x[2])?;
                let y = g.relu(y)?;
                g.add(y, x[3])
            },
            |x| add(&add(&r::matmul(&x[0], &t(&x[1])), &x[2]).map(r::relu), &x[3]),
        ),
        Case::new(
            "matvec+bias+gelu (decode)",
            vec![inp(F32, &[1, 128], 1), inp(F32, &[96, 128], 2), inp(F32, &[96], 3)],
            |g, x| {
                let wt = g.t(x[1])?;
                let y = g.matmul(x[0], wt)?;
                let y = g.add(y, x[2])?;
                g.gelu(y)
            },
            |x| add(&r::matmul(&x[0], &t(&x[1])), &x[2]).map(r::gelu_tanh),
        ),
    ]
    .into_iter()
    .chain(more_cases())
    .collect()
}

/// The gated feed-forward, a batched attention score, and the memory cases.
fn more_cases() -> Vec<Case> {
    vec![
        Case::new(
            "ffn",
            vec![
                inp(F32, &[33, 64], 1),
                inp(F32, &[48, 64], 2),
                inp(F32, &[48], 3),
                inp(F32, &[48, 64], 4),
                inp(F32, &[48], 5),
            ],
            |g, x| ffn(g, x[0], x[1], x[2], x[3], x[4]),
            ffn_ref,
        ),
        Case::new(
            "batched-matmul+scale+mask-softmax",
            vec![inp(F32, &[4, 16, 8], 1), inp(F32, &[4, 16, 8], 2), inp(F32, &[16, 16], 3)],
            |g, x| {
                let kt = g.t(x[1])?;
                let s = g.matmul(x[0], kt)?;
                let s = g.scale(s, 0.35)?;
                g.softmax_ext(s, Some(x[2]), 1.0)
            },
            |x| r::softmax(&r::matmul(&x[0], &t(&x[1])).map(|v| v * 0.35), Some(&x[2]), 1.0),
        ),
        Case::new(
            "x@x+x (epilogue operand shares A's memory)",
            vec![inp(F32, &[32, 32], 1)],
            |g, x| {
                let y = g.matmul(x[0], x[0])?;
                g.add(y, x[0])
            },
            |x| add(&r::matmul(&x[0], &x[0]), &x[0]),
        ),
        Case::new(
            "intermediate used twice stays materialized",
            vec![inp(F32, &[5, 9], 1)],
            |g, x| {
                let e = g.exp(x[0])?;
                let s = g.sum(e)?;
                g.div(e, s)
            },
            |x| {
                let e = x[0].map(f64::exp);
                r::binary(&e, &r::sum_last(&e), |a, b| a / b)
            },
        ),
    ]
}

#[test]
fn fused_plans_match_the_reference() {
    let mut all = cases();
    all.extend(cases().into_iter().map(Case::unfused));
    run_suite("fusion", &all);
}

#[test]
fn dispatch_counts() {
    let Some(device) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    let mut g = Graph::new();
    let x = g.input("x", F32, &[64, 64]).unwrap();
    let w1 = g.input("w1", F32, &[128, 64]).unwrap();
    let b1 = g.input("b1", F32, &[128]).unwrap();
    let w3 = g.input("w3", F32, &[128, 64]).unwrap();
    let b3 = g.input("b3", F32, &[128]).unwrap();
    let y = ffn(&mut g, x, w1, b1, w3, b3).unwrap();
    let fused = device.compile(&g, &[y]).unwrap().stats();
    assert!(fused.dispatches <= 3, "FFN in {} dispatches: {:?}", fused.dispatches, fused.kernels);
    assert_eq!(fused.dispatches, 2, "{:?}", fused.kernels);
    assert!(
        fused.kernels[1].contains("+epilogue"),
        "the gating runs in the second matmul's store: {:?}",
        fused.kernels
    );
    let unfused = device.compile_with(&g, &[y], &CompileOptions { no_fusion: true, ..Default::default() }).unwrap();
    assert_eq!(unfused.stats().dispatches, 6, "2 matmuls, 2 adds, silu, mul");
    // one fewer intermediate [64, 128] f32 (32 KiB) is all the fused plan keeps besides inputs and output
    let inputs = (64 * 64 + 2 * 128 * 64 + 2 * 128) * 4;
    assert_eq!(fused.peak_live_bytes, (inputs + 2 * 64 * 128 * 4) as u64, "{fused:?}");
    assert!(fused.memory_bytes < unfused.stats().memory_bytes);
    assert_eq!(fused.pipelines, 2);
}

/// Sizes in bytes of every tensor of `g`'s schedule as built, and the largest sum of those live at one point:
/// a tensor is live from the op that makes it to its last reader; inputs and outputs for the whole run; views
/// own no memory.
fn max_live_bytes(g: &Graph, nodes: &[(Tensor, Vec<Tensor>, bool)], outputs: &[Tensor]) -> u64 {
    let size = |t: Tensor| (g.shape(t).unwrap().iter().product::<usize>() * 4) as u64;
    let mut last = std::collections::HashMap::new();
    for (i, (_, srcs, _)) in nodes.iter().enumerate() {
        for s in srcs {
            last.insert(*s, i);
        }
    }
    let pinned = |t: Tensor| g.input_name(t).is_some() || outputs.contains(&t);
    let mut best = 0;
    for i in 0..nodes.len() {
        let live: u64 = nodes
            .iter()
            .enumerate()
            .filter(|&(j, (t, _, owns))| {
                *owns && (pinned(*t) || (j <= i && last.get(t).is_some_and(|&l| l >= i)) || j == i)
            })
            .map(|(_, (t, _, _))| size(*t))
            .sum();
        best = best.max(live);
    }
    best
}

#[test]
fn transformer_block_memory_within_1_1x_of_live_tensors() {
    let Some(device) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    let (s, d, h, hd, f) = (64usize, 128usize, 4usize, 32usize, 256usize);
    let mut g = Graph::new();
    // (tensor, operands, owns memory) in schedule order, recorded as the graph is built
    let mut rec: Vec<(Tensor, Vec<Tensor>, bool)> = Vec::new();
    macro_rules! op {
        ($e:expr, [$($src:expr),*], $owns:expr) => {{
            let t = $e.unwrap();
            rec.push((t, vec![$($src),*], $owns));
            t
        }};
    }
    let x = op!(g.input("x", F32, &[s, d]), [], true);
    let w = |g: &mut Graph, rec: &mut Vec<_>, name: &str, shape: &[usize]| {
        let t = g.input(name, F32, shape).unwrap();
        rec.push((t, vec![], true));
        t
    };
    let (wq, wk, wv, wo) = (
        w(&mut g, &mut rec, "wq", &[d, d]),
        w(&mut g, &mut rec, "wk", &[d, d]),
        w(&mut g, &mut rec, "wv", &[d, d]),
        w(&mut g, &mut rec, "wo", &[d, d]),
    );
    let (w1, w3, w2) =
        (w(&mut g, &mut rec, "w1", &[f, d]), w(&mut g, &mut rec, "w3", &[f, d]), w(&mut g, &mut rec, "w2", &[d, f]));
    let (g1, g2, mask) =
        (w(&mut g, &mut rec, "g1", &[d]), w(&mut g, &mut rec, "g2", &[d]), w(&mut g, &mut rec, "mask", &[s, s]));
    let n1 = op!(g.rms_norm(x, 1e-6), [x], true);
    let h1 = op!(g.mul(n1, g1), [n1, g1], true);
    let proj = |g: &mut Graph, rec: &mut Vec<(Tensor, Vec<Tensor>, bool)>, a: Tensor, wt: Tensor| {
        let v = g.t(wt).unwrap();
        rec.push((v, vec![wt], false));
        let y = g.matmul(a, v).unwrap();
        rec.push((y, vec![a, v, wt], true));
        y
    };
    let q = proj(&mut g, &mut rec, h1, wq);
    let k = proj(&mut g, &mut rec, h1, wk);
    let v = proj(&mut g, &mut rec, h1, wv);
    let heads = |g: &mut Graph, rec: &mut Vec<(Tensor, Vec<Tensor>, bool)>, t: Tensor| {
        let r = g.reshape(t, &[s, h, hd]).unwrap();
        let p = g.permute(r, &[1, 0, 2]).unwrap();
        rec.push((p, vec![t], false));
        p
    };
    let (qh, kh, vh) = (heads(&mut g, &mut rec, q), heads(&mut g, &mut rec, k), heads(&mut g, &mut rec, v));
    let kt = op!(g.t(kh), [kh], false);
    let sc = op!(g.matmul(qh, kt), [qh, kt, q, k], true);
    let att = op!(g.softmax_ext(sc, Some(mask), 1.0 / (hd as f32).sqrt()), [sc, mask], true);
    let o = op!(g.matmul(att, vh), [att, vh, v], true);
    let op_ = op!(g.permute(o, &[1, 0, 2]), [o], false);
    let oc = op!(g.reshape(op_, &[s, d]), [op_, o], true); // a copy: the permuted view is not contiguous
    let a = proj(&mut g, &mut rec, oc, wo);
    let x2 = op!(g.add(x, a), [x, a], true);
    let n2 = op!(g.rms_norm(x2, 1e-6), [x2], true);
    let h2 = op!(g.mul(n2, g2), [n2, g2], true);
    let u1 = proj(&mut g, &mut rec, h2, w1);
    let u1 = op!(g.silu(u1), [u1], true);
    let u3 = proj(&mut g, &mut rec, h2, w3);
    let gate = op!(g.mul(u1, u3), [u1, u3], true);
    let down = proj(&mut g, &mut rec, gate, w2);
    let y = op!(g.add(x2, down), [x2, down], true);
    let bound = max_live_bytes(&g, &rec, &[y]);
    for (label, options) in
        [("fused", CompileOptions::default()), ("unfused", CompileOptions { no_fusion: true, ..Default::default() })]
    {
        let st = device.compile_with(&g, &[y], &options).unwrap().stats();
        println!("{label}: planned {} B, largest live sum {bound} B, {} dispatches", st.memory_bytes, st.dispatches);
        assert!(
            st.memory_bytes as f64 <= 1.1 * bound as f64,
            "{label}: planned {} B > 1.1 x {bound} B ({st:?})",
            st.memory_bytes
        );
    }
}

// ---- fusion keeps dtype semantics ---------------------------------------------------------------------------

/// One fused form: a graph, its inputs' values, and the kernel name its fused plan must use.
struct Form {
    name: &'static str,
    graph: Graph,
    inputs: Vec<(Tensor, webtensor::HostTensor)>,
    out: Tensor,
    kernel: &'static str,
}

fn f16_values(shape: &[usize], f: impl Fn(usize) -> f32) -> webtensor::HostTensor {
    let n: usize = shape.iter().product();
    let v = (0..n).map(|i| half::f16::from_f32(f(i))).collect();
    webtensor::HostTensor::new(shape, webtensor::Data::F16(v)).unwrap()
}

/// Graphs whose f16 intermediates overflow (or round) where the graph keeps them: each fused form of the GPU
/// (elementwise chain, matmul and mat-vec epilogues, the cooperative-matrix epilogue) over values for which
/// every op is exact, so that fused, unfused and CPU must agree bit for bit.
fn forms() -> Vec<Form> {
    let mut v = Vec::new();
    // sqr then scale in f16: 300² = 90000 overflows f16 before the scale brings it back into range
    let mut g = Graph::new();
    let x = g.input("x", webtensor::DType::F16, &[4, 33]).unwrap();
    let y = g.sqr(x).unwrap();
    let y = g.scale(y, 0.5).unwrap();
    let out = g.cast(y, F32).unwrap();
    let xv = f16_values(&[4, 33], |i| [300.0, 10.0, -256.0, 2049.0][i % 4]);
    v.push(Form { name: "f16 sqr, scale, cast", graph: g, inputs: vec![(x, xv)], out, kernel: "elementwise" });
    // f32 values through an f16 intermediate and back, fused: every rounding case of f16 (ties to even at every
    // exponent, subnormals, underflow to zero, the overflow boundary at 65520), bit for bit as the CPU's half
    let special =
        [65504.0, 65519.996, 65520.0, -65520.0, 70000.0, 2f32.powi(-25), 3.0 * 2f32.powi(-26), 2f32.powi(-24)];
    let special = special.into_iter().chain([2f32.powi(-14), 1.000_488_3, 1.000_244_1, -2049.0, 2051.0, 0.0, -0.0]);
    let mut xs: Vec<f32> = special.collect();
    let mut state = 0x2545_f491_u32;
    while xs.len() < 8192 {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        // exponents 2^-28 .. 2^17, any fraction and sign: the whole range f16 rounds into
        let exp = 99 + (state >> 8) % 46;
        xs.push(f32::from_bits((state & 0x8000_0000) | (exp << 23) | (state.rotate_left(11) & 0x007f_ffff)));
    }
    let mut g = Graph::new();
    let x = g.input("x", F32, &[8192]).unwrap();
    let h = g.cast(x, webtensor::DType::F16).unwrap();
    let h = g.scale(h, 1.0).unwrap();
    let out = g.cast(h, F32).unwrap();
    let xv = webtensor::HostTensor::f32(&[8192], xs).unwrap();
    v.push(Form {
        name: "f32 through f16, every rounding",
        graph: g,
        inputs: vec![(x, xv)],
        out,
        kernel: "elementwise",
    });
    // f16 matmuls whose sums pass 65504 (and round: 2049·k is not an f16 for some k), then bias and a cast to f32
    for (name, m, kernel) in [("f16 matmul + bias, cast", 40, "matmul"), ("f16 mat-vec + bias, cast", 1, "matvec")] {
        let (k, n) = (64, 32);
        let mut g = Graph::new();
        let a = g.input("a", webtensor::DType::F16, &[m, k]).unwrap();
        let w = g.input("w", webtensor::DType::F16, &[n, k]).unwrap();
        let b = g.input("b", webtensor::DType::F16, &[n]).unwrap();
        let wt = g.t(w).unwrap();
        let c = g.matmul(a, wt).unwrap();
        let c = g.add(c, b).unwrap();
        let out = g.cast(c, F32).unwrap();
        let av = f16_values(&[m, k], |i| if i % 2 == 0 { 64.0 } else { 8.0 });
        let wv = f16_values(&[n, k], |i| [32.0, 2.0, 1.0, 0.5][(i / k) % 4]);
        let bv = f16_values(&[n], |j| [-40.0, 1.0, 0.0, 3.0][j % 4]);
        v.push(Form { name, graph: g, inputs: vec![(a, av), (w, wv), (b, bv)], out, kernel });
    }
    // an f16 rms_norm (rows of ±a: exactly ±1 after rounding to f16) through its weight, two scales and a
    // residual, all in f16: 65504·2 overflows before the second scale would bring it back
    let mut g = Graph::new();
    let x = g.input("x", webtensor::DType::F16, &[4, 33]).unwrap();
    let w = g.input("w", webtensor::DType::F16, &[33]).unwrap();
    let h = g.input("h", webtensor::DType::F16, &[4, 33]).unwrap();
    let y = g.rms_norm(x, 0.0).unwrap();
    let y = g.mul(y, w).unwrap();
    let y = g.scale(y, 2.0).unwrap();
    let y = g.scale(y, 0.25).unwrap();
    let y = g.add(y, h).unwrap();
    let out = g.cast(y, F32).unwrap();
    let xv = f16_values(&[4, 33], |i| [2.0, 0.5, 8.0, 4.0][i / 33] * if i % 3 == 0 { -1.0 } else { 1.0 });
    let wv = f16_values(&[33], |j| [65504.0, 2.0, -3.0, 0.5][j % 4]);
    let hv = f16_values(&[4, 33], |i| [1.0, -0.25, 0.0, 8.0][i % 4]);
    let inputs = vec![(x, xv), (w, wv), (h, hv)];
    v.push(Form {
        name: "f16 rms_norm · w, scales, residual",
        graph: g,
        inputs,
        out,
        kernel: "rows rms_norm+epilogue",
    });
    v
}

/// Runs `f` on `device` with fusion on and off; returns both results' bits and the fused plan's kernels.
fn fused_and_unfused(
    device: &webtensor::Device,
    f: &Form,
    matmul: Option<webtensor::gpu::MatmulChoice>,
) -> (Vec<u32>, Vec<u32>, Vec<String>) {
    let inputs: Vec<(Tensor, &webtensor::HostTensor)> = f.inputs.iter().map(|(t, v)| (*t, v)).collect();
    let run = |no_fusion| {
        let options = CompileOptions { poison: true, no_fusion, matmul, ..Default::default() };
        let mut plan = device.compile_with(&f.graph, &[f.out], &options).unwrap();
        let out = plan.run(&inputs).unwrap();
        (out[0].data.to_f32().iter().map(|v| v.to_bits()).collect::<Vec<u32>>(), plan.stats())
    };
    let ((fused, stats), (unfused, unfused_stats)) = (run(false), run(true));
    assert!(
        stats.dispatches < unfused_stats.dispatches || device.is_cpu(),
        "{}: fused on {}",
        f.name,
        device.capabilities().name
    );
    (fused, unfused, stats.kernels)
}

#[test]
fn fusion_keeps_every_intermediate_in_its_dtype() {
    let cpu = webtensor::Device::cpu();
    for f in forms() {
        let (want, cpu_unfused, _) = fused_and_unfused(&cpu, &f, None);
        assert_eq!(want, cpu_unfused, "{}: CPU fused vs unfused", f.name);
        assert!(want.iter().any(|&b| f32::from_bits(b).is_infinite()), "{}: some value overflows f16", f.name);
        for device in common::devices().iter().filter(|d| !d.is_cpu()) {
            let (fused, unfused, kernels) = fused_and_unfused(device, &f, None);
            let dev = &device.capabilities().name;
            assert!(kernels.iter().any(|k| k.starts_with(f.kernel)), "{}: {kernels:?} on {dev}", f.name);
            assert_eq!(fused, unfused, "{}: fused vs unfused on {dev}", f.name);
            assert_eq!(fused, want, "{}: {dev} vs the CPU backend", f.name);
        }
    }
    // the cooperative-matrix epilogue (emulated where the adapter has no cooperative matrices; f16 operands need
    // SHADER_F16, which GL lacks)
    let Some(gpu) = common::gpu().filter(|g| g.capabilities().shader_f16) else {
        println!("SKIPPED: the cooperative-matrix epilogue needs a GPU with SHADER_F16");
        return;
    };
    let coop = webtensor::testing::device_with_emulated_coop(gpu.capabilities().backend).unwrap();
    let choice = webtensor::gpu::MatmulChoice::Coop(webtensor::gpu::COOP_CONFIGS[0]);
    let f = forms().into_iter().find(|f| f.kernel == "matmul").unwrap();
    let (want, _, _) = fused_and_unfused(&cpu, &f, None);
    let (fused, unfused, kernels) = fused_and_unfused(&coop, &f, Some(choice));
    assert!(kernels.iter().any(|k| k.starts_with("matmul_coop")), "{kernels:?}");
    assert_eq!(fused, unfused, "coop epilogue: fused vs unfused");
    assert_eq!(fused, want, "coop epilogue vs the CPU backend");
}

/// A KV-cache write of a rope, as a language model's attention block builds it (`rope(k, pos)` reshaped to
/// `[T, H·D]`, `set_rows(cache, idx, ·)`): on every backend the rope is computed by the write (one dispatch
/// fewer, kernel `rope+set_rows`), the cache holds what the unfused plan writes bit for bit (a rope of f16
/// rounded to f16 before an f32 cache), and both match the f64 reference. Rows not written keep their zeros;
/// with repeated indices the last row wins; the positions serve as the indices (one binding) or not; with and
/// without frequency factors.
#[test]
fn rope_is_fused_into_the_kv_cache_write() {
    use webtensor::DType::{F16, I32};
    let (t, h, d, cap) = (3usize, 2usize, 8usize, 5usize);
    // YaRN's ramp over the middle pair and a cos/sin scale, so that the fused kernel carries every parameter
    let rope = webtensor::Rope {
        freq_scale: 0.25,
        ext_factor: 1.0,
        attn_factor: 1.25,
        corr_dims: [0.6, 1.6],
        ..webtensor::Rope::new(6, webtensor::RopeMode::Neox, 10000.0)
    };
    let xv: Vec<f32> = (0..t * h * d).map(|i| ((i * 37 % 23) as f32 - 11.0) / 8.0).collect();
    let positions = [2i32, 0, 2];
    for device in common::devices() {
        let cases = [
            (F32, F32, true, false),
            (F32, F16, false, false),
            (F16, F32, true, false),
            (F32, F16, true, true),
            (F32, F32, false, true),
        ];
        for (rope_dtype, cache_dtype, same_idx, with_factors) in cases {
            let case = format!(
                "rope {rope_dtype:?}, cache {cache_dtype:?}, indices = positions: {same_idx}, factors: {with_factors}"
            );
            let cache = device.state("cache", cache_dtype, &[cap, h * d]).unwrap();
            let mut g = Graph::new();
            let x = g.input("x", rope_dtype, &[t, h, d]).unwrap();
            let pos = g.input("pos", I32, &[t]).unwrap();
            let idx = if same_idx { pos } else { g.input("idx", I32, &[t]).unwrap() };
            let factors = with_factors.then(|| g.input("factors", F32, &[3]).unwrap());
            let k = g.rope_ext(x, pos, factors, &rope).unwrap();
            let k = g.reshape(k, &[t, h * d]).unwrap();
            let c = g.state(&cache).unwrap();
            let c = g.set_rows(c, idx, k).unwrap();
            let out = g.cast(c, F32).unwrap();
            let xh = match rope_dtype {
                F16 => f16_values(&[t, h, d], |i| xv[i]),
                _ => webtensor::HostTensor::f32(&[t, h, d], xv.clone()).unwrap(),
            };
            let ih = webtensor::HostTensor::new(&[t], webtensor::Data::I32(positions.to_vec())).unwrap();
            let mut inputs = vec![(x, &xh), (pos, &ih)];
            if !same_idx {
                inputs.push((idx, &ih));
            }
            let fv = [1.0f32, 2.5, 8.0];
            let fh = webtensor::HostTensor::f32(&[3], fv.to_vec()).unwrap();
            if let Some(f) = factors {
                inputs.push((f, &fh));
            }
            let run = |no_fusion| {
                cache.zero().unwrap();
                let options = CompileOptions { poison: true, no_fusion, ..Default::default() };
                let mut plan = device.compile_with(&g, &[out], &options).unwrap();
                let got = plan.run(&inputs).unwrap()[0].data.to_f32();
                (got, plan.stats())
            };
            let ((fused, st), (unfused, unfused_st)) = (run(false), run(true));
            let dev = &device.capabilities().name;
            assert!(st.kernels.iter().any(|k| k == "rope+set_rows"), "{case} on {dev}: {:?}", st.kernels);
            assert_eq!(st.dispatches + 1, unfused_st.dispatches, "{case} on {dev}");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
            assert_eq!(bits(&fused), bits(&unfused), "{case} on {dev}: fused vs unfused");
            let xr = Arr::new(&[t, h, d], xh.data.to_f32().iter().map(|&v| v as f64).collect());
            let fr = Arr::new(&[3], fv.iter().map(|&v| v as f64).collect());
            let want = r::rope_ext(
                &xr,
                &Arr::new(&[t], positions.iter().map(|&p| p as f64).collect()),
                with_factors.then_some(&fr),
                &rope,
            );
            let tol = if rope_dtype == F16 || cache_dtype == F16 { 2e-3 } else { 1e-5 };
            check_cache_rows(&fused, &want, &positions, (cap, h * d), tol, &format!("{case} on {dev}"));
        }
    }
}

/// The cache after a rope's write: each row that of the last position written to it in `want` (the roped rows
/// `[T, width]`), zeros elsewhere, within `tol` relative.
fn check_cache_rows(got: &[f32], want: &Arr, positions: &[i32], (cap, width): (usize, usize), tol: f64, what: &str) {
    for row in 0..cap {
        let from = positions.iter().rposition(|&p| p as usize == row);
        for j in 0..width {
            let w = from.map_or(0.0, |r| want.data[r * width + j]);
            let g = got[row * width + j] as f64;
            assert!((g - w).abs() <= tol * w.abs().max(1.0), "{what}: [{row}, {j}] {g} vs {w}");
        }
    }
}

/// A transformer block's norms as llama.cpp fuses them (RMS_NORM + MUL, and BERT's layer norm with its weight and
/// bias): `h + rms_norm(x)·w` and `layer_norm(x)·w + b` run as one kernel (the row op with an epilogue) on every
/// backend, with the unfused plan's values bit for bit, and the reference's.
#[test]
fn norms_run_their_weight_bias_and_residual_in_their_store() {
    let (rows, n) = (5, 200);
    let val = |seed: u32, len: usize| -> Vec<f32> {
        (0..len as u32).map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 250.0 - 2.0).collect()
    };
    let (xv, wv, bv, hv) = (val(1, rows * n), val(2, n), val(3, n), val(4, rows * n));
    let mut g = Graph::new();
    let x = g.input("x", F32, &[rows, n]).unwrap();
    let w = g.input("w", F32, &[n]).unwrap();
    let b = g.input("b", F32, &[n]).unwrap();
    let h = g.input("h", F32, &[rows, n]).unwrap();
    let rms = g.rms_norm(x, 1e-5).unwrap();
    let rms = g.mul(rms, w).unwrap();
    let rms = g.add(h, rms).unwrap();
    let ln = g.layer_norm(x, 1e-5).unwrap();
    let ln = g.mul(ln, w).unwrap();
    let ln = g.add(ln, b).unwrap();
    let tensors = [(x, &xv), (w, &wv), (b, &bv), (h, &hv)];
    let values: Vec<(Tensor, webtensor::HostTensor)> = tensors
        .iter()
        .map(|&(t, v)| (t, webtensor::HostTensor::f32(g.shape(t).unwrap(), v.clone()).unwrap()))
        .collect();
    let inputs: Vec<(Tensor, &webtensor::HostTensor)> = values.iter().map(|(t, v)| (*t, v)).collect();
    // the f64 reference
    let want = |layer: bool| -> Vec<f64> {
        let mut out = Vec::new();
        for r in 0..rows {
            let row: Vec<f64> = xv[r * n..(r + 1) * n].iter().map(|&v| v as f64).collect();
            let mean = if layer { row.iter().sum::<f64>() / n as f64 } else { 0.0 };
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
            let inv = 1.0 / (var + 1e-5).sqrt();
            for (j, v) in row.iter().enumerate() {
                let y = (v - mean) * inv * wv[j] as f64;
                out.push(if layer { y + bv[j] as f64 } else { hv[r * n + j] as f64 + y });
            }
        }
        out
    };
    for device in common::devices() {
        let dev = device.capabilities().name.clone();
        let run = |no_fusion| {
            let options = CompileOptions { poison: true, no_fusion, ..Default::default() };
            let mut plan = device.compile_with(&g, &[rms, ln], &options).unwrap();
            let out = plan.run(&inputs).unwrap();
            (out.iter().map(|o| o.data.to_f32()).collect::<Vec<_>>(), plan.stats())
        };
        let ((fused, stats), (unfused, unfused_stats)) = (run(false), run(true));
        assert_eq!(stats.dispatches, 2, "{dev}: {:?}", stats.kernels);
        assert!(stats.kernels.iter().all(|k| k.ends_with("norm+epilogue")), "{dev}: {:?}", stats.kernels);
        assert_eq!(unfused_stats.dispatches, 6, "{dev}: {:?}", unfused_stats.kernels);
        for (i, layer) in [(0, false), (1, true)] {
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
            assert_eq!(bits(&fused[i]), bits(&unfused[i]), "{dev}: output {i}, fused vs unfused");
            for (j, (&got, want)) in fused[i].iter().zip(want(layer)).enumerate() {
                assert!(
                    (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "{dev}: output {i}[{j}] {got} vs {want}"
                );
            }
        }
    }
}
