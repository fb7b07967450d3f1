//! The model runtime on every backend: resident weights bound at compile time and shared by plans, states that
//! persist across runs and plans, run-time integer inputs as borrowed slices, partial readback, the device's
//! memory accounting, and the errors of this API.

mod common;

use webtensor::DType::{F16, F32, I32};
use webtensor::{CompileOptions, Device, Error, Fetch, Graph, HostTensor, Value};

fn ramp(shape: &[usize], scale: f32) -> HostTensor {
    let n: usize = shape.iter().product();
    HostTensor::f32(shape, (0..n).map(|i| ((i % 17) as f32 - 8.0) * scale).collect()).unwrap()
}

/// y = x @ wᵀ with a resident w: two plans share the weight; dropping one leaves the other working; the device
/// counts the weight's bytes once.
#[test]
fn resident_weights_are_shared_and_counted_once() {
    // devices of their own: other tests upload to the shared ones meanwhile
    for kind in common::devices().iter().map(|d| d.capabilities().backend) {
        let device = &Device::with_backend(kind).unwrap();
        let before = device.resident_bytes();
        let w = device.upload("w", ramp(&[5, 8], 0.25)).unwrap();
        assert_eq!(device.resident_bytes() - before, 5 * 8 * 4, "{device:?}");
        let build = |m: usize| {
            let mut g = Graph::new();
            let x = g.input("x", F32, &[m, 8]).unwrap();
            let wt = g.resident(&w).unwrap();
            let wt = g.t(wt).unwrap();
            let y = g.matmul(x, wt).unwrap();
            (g, x, y)
        };
        let (g1, x1, y1) = build(1);
        let (g3, x3, y3) = build(3);
        let mut p1 = device.compile(&g1, &[y1]).unwrap();
        let mut p3 = device.compile(&g3, &[y3]).unwrap();
        assert_eq!(device.resident_bytes() - before, 5 * 8 * 4, "shared, not copied per plan: {device:?}");
        let xv = ramp(&[3, 8], 0.5);
        let want: Vec<f32> = (0..3)
            .flat_map(|i| {
                let xv = &xv;
                (0..5).map(move |j| {
                    (0..8).map(|k| xv.data.to_f32()[i * 8 + k] * ((((j * 8 + k) % 17) as f32 - 8.0) * 0.25)).sum()
                })
            })
            .collect();
        let got3 = p3.run(&[(x3, &xv)]).unwrap()[0].data.to_f32();
        assert_eq!(got3, want, "{device:?}");
        drop(p3);
        drop(g3);
        let x1v = HostTensor::f32(&[1, 8], xv.data.to_f32()[..8].to_vec()).unwrap();
        assert_eq!(p1.run(&[(x1, &x1v)]).unwrap()[0].data.to_f32(), want[..5], "after the other plan was dropped");
        assert!(p1.stats().memory_bytes < 4096, "the plan's own memory excludes the weight: {:?}", p1.stats());
        drop((p1, g1, w));
        assert_eq!(device.resident_bytes(), before, "freed with the last plan and handle: {device:?}");
    }
}

/// A state carried across three runs: each run appends its token's row at its position (an i32 slice, not a
/// host tensor) and reads back the sum of the rows written so far.
#[test]
fn a_state_carries_across_runs() {
    for device in common::devices() {
        let cache = device.state("cache", F32, &[4, 3]).unwrap();
        let mut g = Graph::new();
        let pos = g.input("pos", I32, &[1]).unwrap();
        let row = g.input("row", F32, &[1, 3]).unwrap();
        let c = g.state(&cache).unwrap();
        let c = g.set_rows(c, pos, row).unwrap();
        let ct = g.t(c).unwrap();
        let s = g.sum(ct).unwrap(); // [3, 1]: column sums of the cache
        let mut plan = device.compile(&g, &[s]).unwrap();
        let mut want = [0.0f32; 3];
        for step in 0..3i32 {
            let r = [step as f32 + 1.0, 10.0, -0.5];
            (0..3).for_each(|j| want[j] += r[j]);
            let out = plan.run_with(&[(pos, Value::I32(&[step])), (row, Value::F32(&r))], &[]).unwrap();
            assert_eq!(out[0].as_ref().unwrap().data.to_f32(), want, "{device:?} step {step}");
        }
        let saved = cache.read().unwrap();
        assert_eq!(saved.data.to_f32()[..9], [1.0, 10.0, -0.5, 2.0, 10.0, -0.5, 3.0, 10.0, -0.5]);
        assert_eq!(saved.data.to_f32()[9..], [0.0; 3], "row 3 never written: zeroed at creation");
        cache.zero().unwrap();
        assert_eq!(cache.read().unwrap().data.to_f32(), vec![0.0; 12]);
    }
}

/// Two plans share one weight and one state: the first (prefill) writes rows 0..n, the second (decode) reads them
/// and appends row n; an f16 cache written from f32 rows.
#[test]
fn two_plans_share_a_weight_and_a_state() {
    for device in common::devices() {
        let w = device.upload("w", ramp(&[4, 4], 0.125)).unwrap();
        let cache = device.state("kv", F16, &[8, 4]).unwrap();
        // prefill: rows 0..3 of the cache = x @ w
        let mut g1 = Graph::new();
        let x = g1.input("x", F32, &[3, 4]).unwrap();
        let idx = g1.input("idx", I32, &[3]).unwrap();
        let (wt, c) = (g1.resident(&w).unwrap(), g1.state(&cache).unwrap());
        let y = g1.matmul(x, wt).unwrap();
        let done = g1.set_rows(c, idx, y).unwrap();
        let mut prefill = device.compile(&g1, &[done]).unwrap();
        // decode: row n = (sum of rows 0..n) @ w, and the whole cache back
        let mut g2 = Graph::new();
        let n_in = g2.input("n", I32, &[1]).unwrap();
        let (wt2, c2) = (g2.resident(&w).unwrap(), g2.state(&cache).unwrap());
        let rows = g2.slice(c2, 0, 0, 3).unwrap();
        let rt = g2.t(rows).unwrap();
        let total = g2.sum(rt).unwrap(); // [4, 1]
        let total = g2.t(total).unwrap(); // [1, 4]
        let next = g2.matmul(total, wt2).unwrap();
        let written = g2.set_rows(c2, n_in, next).unwrap();
        let mut decode = device.compile(&g2, &[written]).unwrap();
        let xv = ramp(&[3, 4], 0.25);
        prefill.run_with(&[(x, Value::Host(&xv)), (idx, Value::I32(&[0, 1, 2]))], &[Fetch::Skip]).unwrap();
        let out = decode.run_with(&[(n_in, Value::I32(&[3]))], &[]).unwrap().remove(0).unwrap();
        let (wv, x32) = (ramp(&[4, 4], 0.125).data.to_f32(), xv.data.to_f32());
        let f16 = |v: f32| half::f16::from_f32(v).to_f32();
        let mut want = vec![0.0f32; 32];
        for i in 0..3 {
            for j in 0..4 {
                want[i * 4 + j] = f16((0..4).map(|k| x32[i * 4 + k] * wv[k * 4 + j]).sum());
            }
        }
        let sums: Vec<f32> = (0..4).map(|k| (0..3).map(|i| want[i * 4 + k]).sum()).collect();
        for j in 0..4 {
            want[12 + j] = f16((0..4).map(|k| sums[k] * wv[k * 4 + j]).sum());
        }
        let got = out.data.to_f32();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-3 * w.abs().max(1.0), "{device:?} element {i}: {g} vs {w}");
        }
    }
}

/// One decode plan over a cache of 2048 positions run at KV lengths that grow and shrink: each run attends to
/// exactly its L keys (the GPU dispatches only the key splits L reaches; stale partial results of a longer
/// earlier run must never leak into a shorter one). A GPU plan encodes its next run's dispatches after each run
/// from the second on, for the splits of that run's L: a run at another L (1 after 1, then 1500) encodes its
/// own, one at the same L (300 thrice) uses them.
#[test]
fn one_plan_serves_every_kv_length() {
    use webtensor::Attention;
    let (h, s, d) = (2usize, 2048usize, 16usize);
    let k = ramp(&[1, s, d], 0.03);
    let v = ramp(&[1, s, d], 0.11);
    for device in common::devices() {
        let (kr, vr) = (device.upload("k", k.clone()).unwrap(), device.upload("v", v.clone()).unwrap());
        let mut g = Graph::new();
        let q = g.input("q", F32, &[h, 1, d]).unwrap();
        let (kc, vc) = (g.resident(&kr).unwrap(), g.resident(&vr).unwrap());
        let l_in = g.input("kv_len", I32, &[1]).unwrap();
        let a = Attention { scale: 0.25, causal: true, mask: None, kv_len: Some(l_in), sinks: None };
        let o = g.attention(q, kc, vc, &a).unwrap();
        // poisoned (every unwritten element NaN) and not (a longer run's partial results stay in the scratch)
        for poison in [true, false] {
            let mut plan = device.compile_with(&g, &[o], &CompileOptions { poison, ..Default::default() }).unwrap();
            if device.capabilities().backend != webtensor::BackendKind::Cpu {
                let kernels = plan.stats().kernels;
                assert!(kernels.iter().any(|k| k.ends_with("split")), "{device:?}: the keys are split: {kernels:?}");
            }
            let qv: Vec<f32> = (0..h * d).map(|i| (i as f32 * 0.37).sin()).collect();
            for l in [2000usize, 300, 300, 300, 1, 1, 1500, 1500, 257, 2048] {
                let out = plan.run_with(&[(q, Value::F32(&qv)), (l_in, Value::I32(&[l as i32]))], &[]).unwrap();
                let got = out[0].as_ref().unwrap().data.to_f32();
                let (kd, vd) = (k.data.to_f32(), v.data.to_f32());
                for hi in 0..h {
                    let scores: Vec<f64> = (0..l)
                        .map(|si| (0..d).map(|j| qv[hi * d + j] as f64 * kd[si * d + j] as f64).sum::<f64>() * 0.25)
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
                    let total: f64 = w.iter().sum();
                    for j in 0..d {
                        let want = (0..l).map(|si| w[si] * vd[si * d + j] as f64).sum::<f64>() / total;
                        let g = got[hi * d + j] as f64;
                        assert!((g - want).abs() < 1e-4, "{device:?} L = {l} head {hi} dim {j}: {g} vs {want}");
                    }
                }
            }
            let gpu = device.capabilities().backend != webtensor::BackendKind::Cpu;
            assert_eq!(plan.last_encode_ahead_us() > 0.0, gpu, "{device:?}: the next run encoded ahead");
        }
    }
}

/// Partial readback: one row of a [T, V] output, an argmax of 4 bytes, and an output skipped.
#[test]
fn outputs_are_read_back_as_fetched() {
    for device in common::devices() {
        let mut g = Graph::new();
        let x = g.input("x", F32, &[5, 7]).unwrap();
        let y = g.scale(x, 2.0).unwrap();
        let am = g.argmax(y).unwrap();
        let mut plan = device.compile(&g, &[y, am]).unwrap();
        let xv = ramp(&[5, 7], 0.3);
        let full = plan.run(&[(x, &xv)]).unwrap();
        let out = plan.run_with(&[(x, Value::Host(&xv))], &[Fetch::Rows(4..5), Fetch::All]).unwrap();
        let last = out[0].as_ref().unwrap();
        assert_eq!(last.shape, vec![1, 7]);
        assert_eq!(last.data.to_f32(), full[0].data.to_f32()[28..]);
        assert_eq!(out[1].as_ref().unwrap(), &full[1]);
        let out = plan.run_with(&[(x, Value::Host(&xv))], &[Fetch::Skip, Fetch::Rows(2..4)]).unwrap();
        assert!(out[0].is_none());
        assert_eq!(out[1].as_ref().unwrap().data.to_f32(), full[1].data.to_f32()[2..4]);
        let e = plan.run_with(&[(x, Value::Host(&xv))], &[Fetch::Rows(3..9), Fetch::All]).unwrap_err();
        assert!(matches!(e, Error::InvalidAxis { .. }), "{e}");
        let e = plan.run_with(&[(x, Value::Host(&xv))], &[Fetch::All]).unwrap_err();
        assert!(e.to_string().contains("1 fetches given for 2 outputs"), "{e}");
    }
}

/// Rerunning plans with resident and state tensors creates no buffers, bind groups or pipelines.
#[test]
fn rerunning_runtime_plans_creates_no_gpu_objects() {
    let Some(shared) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    let device = &Device::with_backend(shared.capabilities().backend).unwrap();
    let w = device.upload("w", ramp(&[16, 16], 0.1)).unwrap();
    let cache = device.state("cache", F32, &[8, 16]).unwrap();
    let mut g = Graph::new();
    let x = g.input("x", F32, &[1, 16]).unwrap();
    let p = g.input("p", I32, &[1]).unwrap();
    let (wt, c) = (g.resident(&w).unwrap(), g.state(&cache).unwrap());
    let y = g.matmul(x, wt).unwrap();
    let c = g.set_rows(c, p, y).unwrap();
    let s = g.softmax(c).unwrap();
    let mut plan = device.compile_with(&g, &[s], &CompileOptions { poison: true, ..Default::default() }).unwrap();
    let xv = ramp(&[1, 16], 0.2);
    plan.run_with(&[(x, Value::Host(&xv)), (p, Value::I32(&[0]))], &[]).unwrap();
    let before = device.resource_counts().unwrap();
    for step in 1..8 {
        plan.run_with(&[(x, Value::Host(&xv)), (p, Value::I32(&[step]))], &[Fetch::Rows(0..1)]).unwrap();
    }
    assert_eq!(device.resource_counts().unwrap(), before, "[buffers, bind groups, pipelines] changed across runs");
}

/// Errors of the runtime API name the tensor; nothing panics.
#[test]
fn runtime_errors_name_the_tensor() {
    let cpu = Device::cpu();
    let other = Device::cpu();
    let w = cpu.upload("weights.0", ramp(&[2, 2], 1.0)).unwrap();
    let s = cpu.state("kv.3", F32, &[4, 2]).unwrap();
    let mut g = Graph::new();
    let wt = g.resident(&w).unwrap();
    let st = g.state(&s).unwrap();
    let y = g.add(wt, wt).unwrap();
    let e = other.compile(&g, &[y]).err().unwrap();
    assert!(e.to_string().contains("weights.0") && e.to_string().contains("another device"), "{e}");
    let e = other.compile(&g, &[st]).err().unwrap();
    assert!(e.to_string().contains("kv.3"), "{e}");
    // a destination that is not a state
    let mut g = Graph::new();
    let x = g.input("x", F32, &[4, 2]).unwrap();
    let i = g.input("i", I32, &[1]).unwrap();
    let r = g.input("r", F32, &[1, 2]).unwrap();
    assert!(matches!(g.set_rows(x, i, r), Err(Error::InvalidArgument { op: "set_rows", .. })));
    let wt = g.resident(&w).unwrap();
    assert!(g.set_rows(wt, i, r).is_err(), "a resident weight is read-only");
    let st = g.state(&s).unwrap();
    let bad = g.input("bad", F32, &[1, 3]).unwrap();
    assert!(matches!(g.set_rows(st, i, bad), Err(Error::ShapeMismatch { .. })));
    let fidx = g.input("fi", F32, &[1]).unwrap();
    assert!(matches!(g.set_rows(st, fidx, r), Err(Error::UnsupportedDType { .. })));
    // wrong bytes for an upload, wrong values for a state
    let e = cpu.upload_bytes("emb", F32, &[3, 3], webtensor::Bytes::from_vec(vec![0; 35])).unwrap_err();
    assert!(e.to_string().contains("emb") && e.to_string().contains("35 bytes"), "{e}");
    let e = s.write(&ramp(&[2, 2], 1.0)).unwrap_err();
    assert!(e.to_string().contains("kv.3"), "{e}");
    // an index out of range: an error naming it on the CPU; on a GPU, nothing written outside the state
    let w2 = g.set_rows(st, i, r).unwrap();
    for device in common::devices() {
        let s = device.state("kv", F32, &[4, 2]).unwrap();
        let mut g = Graph::new();
        let i = g.input("i", I32, &[1]).unwrap();
        let r = g.input("r", F32, &[1, 2]).unwrap();
        let st = g.state(&s).unwrap();
        let w = g.set_rows(st, i, r).unwrap();
        let mut plan = device.compile(&g, &[w]).unwrap();
        let rv = [7.0f32, 8.0];
        let res = plan.run_with(&[(i, Value::I32(&[4])), (r, Value::F32(&rv))], &[]);
        if device.is_cpu() {
            let e = res.unwrap_err();
            assert!(e.to_string().contains("index 4") && e.to_string().contains("0..4"), "{e}");
        } else {
            assert_eq!(res.unwrap()[0].as_ref().unwrap().data.to_f32(), vec![0.0; 8], "{device:?}: row skipped");
        }
        let res = plan.run_with(&[(i, Value::I32(&[-1])), (r, Value::F32(&rv))], &[]);
        assert!(device.is_cpu() == res.is_err(), "{device:?}");
    }
    let _ = w2;
}

/// An f32 weight multiplied as `t(w)` by many rows: the CPU backend keeps a transposed copy (made once, shared
/// by plans, counted in `resident_bytes`, freed with the weight), read at the view's first row, from bytes at an
/// odd address (a memory map's tensor may start anywhere); the product is exact on every device.
#[test]
fn many_rows_against_a_transposed_weight() {
    let (rows, k, m) = (7usize, 40usize, 13usize);
    let wv = ramp(&[rows, k], 0.125);
    let mut raw = vec![0u8; 1];
    raw.extend(wv.data.to_f32().iter().flat_map(|v| v.to_le_bytes()));
    let xv = ramp(&[m, k], 0.5);
    for kind in common::devices().iter().map(|d| d.capabilities().backend) {
        let device = &Device::with_backend(kind).unwrap();
        let before = device.resident_bytes();
        let bytes = webtensor::Bytes::from_owner(std::sync::Arc::new(raw.clone()), 1..raw.len()).unwrap();
        let w = device.upload_bytes("w", F32, &[rows, k], bytes).unwrap();
        let plans: Vec<_> = [(0usize, rows), (2, 5)]
            .iter()
            .map(|&(r0, r1)| {
                let mut g = Graph::new();
                let x = g.input("x", F32, &[m, k]).unwrap();
                let wr = g.resident(&w).unwrap();
                let wr = g.slice(wr, 0, r0, r1).unwrap();
                let wt = g.t(wr).unwrap();
                let y = g.matmul(x, wt).unwrap();
                (device.compile(&g, &[y]).unwrap(), x, r0, r1)
            })
            .collect();
        let copy = if kind == webtensor::BackendKind::Cpu { rows * k * 4 } else { 0 };
        assert_eq!(device.resident_bytes() - before, (rows * k * 4 + copy) as u64, "one copy for both plans: {kind}");
        for (mut plan, x, r0, r1) in plans {
            let got = plan.run(&[(x, &xv)]).unwrap()[0].data.to_f32();
            let (xs, ws) = (xv.data.to_f32(), wv.data.to_f32());
            for i in 0..m {
                for j in r0..r1 {
                    let want: f32 = (0..k).map(|c| xs[i * k + c] * ws[j * k + c]).sum();
                    let g = got[i * (r1 - r0) + j - r0];
                    assert!(
                        (g - want).abs() <= 1e-4 * want.abs().max(1.0),
                        "{kind} rows {r0}..{r1} [{i}, {j}]: {g} vs {want}"
                    );
                }
            }
        }
        drop(w);
        assert_eq!(device.resident_bytes(), before, "the copy is freed with the weight: {kind}");
    }
}

/// A run's transfers: the inputs go up and the fetched outputs come back, each byte copied once on the host
/// (into the plan's mapped staging memory, out of the mapped readback memory), on every GPU device; runs that
/// fetch nothing leave the staging busy for the next run, which then takes the queue's path, with the same
/// answers. Inputs of a length that is no multiple of 4 bytes (3 f16) are padded.
#[test]
fn runs_copy_each_byte_once_and_change_inputs_every_run() {
    for device in common::devices().iter().filter(|d| !d.is_cpu()) {
        let mut g = Graph::new();
        let x = g.input("x", F32, &[64, 32]).unwrap();
        let h = g.input("h", F16, &[3]).unwrap();
        let hs = g.cast(h, F32).unwrap();
        let s = g.sum(x).unwrap();
        let hsum = g.sum(hs).unwrap();
        let hsum = g.reshape(hsum, &[1, 1]).unwrap();
        let y = g.add(s, hsum).unwrap();
        let mut plan = device.compile(&g, &[y]).unwrap();
        let up = 64 * 32 * 4 + 3 * 2;
        for run in 0..6u32 {
            let xv = ramp(&[64, 32], 0.5 + run as f32);
            let hv = HostTensor::new(&[3], webtensor::Data::F16(vec![half::f16::from_f32(run as f32); 3])).unwrap();
            let want: Vec<f32> =
                xv.data.to_f32().chunks(32).map(|r| r.iter().sum::<f32>() + 3.0 * run as f32).collect();
            let inputs = [(x, Value::Host(&xv)), (h, Value::Host(&hv))];
            // runs 2 and 3 fetch nothing: nothing waits for the GPU before the next run
            let fetch = if run == 2 || run == 3 { Fetch::Skip } else { Fetch::All };
            let out = plan.run_with(&inputs, &[fetch]).unwrap();
            let t = plan.stats().transfer;
            assert_eq!(t.upload_bytes, up, "{device:?}");
            match &out[0] {
                Some(o) => {
                    assert_eq!(o.data.to_f32(), want, "run {run} on {device:?}");
                    assert_eq!(t.readback_bytes, 64 * 4, "{device:?}");
                }
                None => assert_eq!(t.readback_bytes, 0, "{device:?}"),
            }
            // each byte copied once; the queue's path (after a run that fetched nothing the staging may still be
            // the GPU's) pads the 6-byte f16 input in one more copy of 8 bytes
            let once = t.upload_bytes + t.readback_bytes;
            assert!(
                t.host_copy_bytes == once || (run >= 3 && t.host_copy_bytes == once + 8),
                "run {run}: {t:?} on {device:?}"
            );
        }
    }
}

/// A profiled plan times each dispatch on the GPU (timestamp queries): one entry per dispatch, named as the plan's
/// kernels, finite and non-negative; a 384³ matmul takes longer than scaling four numbers, and each of 30 chained
/// matmuls (two submissions on a software adapter) takes some time; the values are the
/// unprofiled run's; a run with profiling off again has no profile. The CPU backend refuses with an error.
#[test]
fn profiled_runs_time_each_dispatch_on_the_gpu() {
    let mut g = Graph::new();
    let a = g.input("a", F32, &[384, 384]).unwrap();
    let x = g.input("x", F32, &[4]).unwrap();
    let big = g.matmul(a, a).unwrap();
    let small = g.scale(x, 2.0).unwrap();
    let inputs = [(a, ramp(&[384, 384], 1e-3)), (x, ramp(&[4], 1.0))];
    let refs: Vec<_> = inputs.iter().map(|(t, v)| (*t, v)).collect();
    let mut cpu_plan = Device::cpu().compile(&g, &[big, small]).unwrap();
    assert!(matches!(cpu_plan.set_profiling(true), Err(Error::Unsupported { .. })));
    assert!(cpu_plan.last_profile().is_none());
    let Some(device) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    let mut plan = device.compile(&g, &[big, small]).unwrap();
    let plain = plan.run(&refs).unwrap();
    assert!(plan.last_profile().is_none(), "no profile before a profiled run");
    if let Err(e) = plan.set_profiling(true) {
        // lavapipe has timestamp queries: where REQUIRE_GPU asks for it, a missing profile is a failure
        assert!(std::env::var("REQUIRE_GPU").is_err(), "{e}");
        println!("SKIPPED: {e}");
        return;
    }
    for _ in 0..3 {
        let out = plan.run(&refs).unwrap();
        assert_eq!(out[0].data.to_f32(), plain[0].data.to_f32(), "profiling changed a value");
        let profile = plan.last_profile().expect("a profile after a profiled run");
        let stats = plan.stats();
        assert_eq!(profile.len(), stats.dispatches, "{profile:?}");
        assert!(profile.iter().all(|k| k.gpu_us.is_finite() && k.gpu_us >= 0.0), "{profile:?}");
        assert!(profile.iter().all(|k| stats.kernels.contains(&k.kernel)), "{profile:?} vs {:?}", stats.kernels);
        let time = |prefix: &str| profile.iter().find(|k| k.kernel.starts_with(prefix)).expect(prefix).gpu_us;
        assert!(time("matmul") > time("elementwise"), "{profile:?}");
    }
    // 30 dispatches: on adapters that run on CPU cores, submitted in two pieces, each pass timed from its start
    let mut chain = Graph::new();
    let w = chain.input("w", F32, &[64, 64]).unwrap();
    let mut y = w;
    for _ in 0..30 {
        y = chain.matmul(y, w).unwrap();
    }
    let mut long = device.compile(&chain, &[y]).unwrap();
    long.set_profiling(true).unwrap();
    long.run(&[(w, &ramp(&[64, 64], 1e-2))]).unwrap();
    let profile = long.last_profile().unwrap();
    assert_eq!(profile.len(), 30, "{profile:?}");
    assert!(profile.iter().all(|k| k.gpu_us > 0.0), "every 64³ matmul takes time: {profile:?}");
    plan.set_profiling(false).unwrap();
    assert!(plan.last_profile().is_some(), "the last run's profile stays until the next run");
    plan.run(&refs).unwrap();
    assert!(plan.last_profile().is_none(), "an unprofiled run: no profile");
}
