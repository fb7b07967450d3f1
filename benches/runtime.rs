//! `cargo bench --bench runtime`: the host overhead of running a plan shaped like a 30-layer decode step — 300
//! small dispatches over resident weights and a state — on the CPU backend and every GPU backend present (lavapipe
//! on Vulkan and llvmpipe on GL here), in microseconds of host time per dispatch until the work is submitted
//! (uploads and submit, the encoding too where the run's dispatches were not encoded ahead; the CPU backend's
//! whole run), with the encoding a GPU plan does after the submit for its next run beside it, medians of 50 runs
//! after 5 warm-up runs. Goal: at most 1 µs per dispatch on the path to the GPU.
//!
//! Then the growing sequence: a decode step (rope, a write of the new key and value into f16 KV-cache states,
//! attention with a run-time KV length L, nine query heads over three K/V heads of 64) at L = 64 in a plan whose
//! cache holds 8192 positions, against a plan made for exactly 64: its cost must follow L, not the capacity
//! (goal: at most 1.2×). Then the same step at L = 16, 256 and 2048 in one plan (capacity 4096): how its cost
//! grows with L (goal on a GPU: L = 2048 at most 1.5× L = 16). `WEBTENSOR_BENCH_BACKENDS=cpu,vulkan,gl` chooses
//! the backends.

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    use webtensor::BackendKind;
    let kinds: Vec<BackendKind> = std::env::var("WEBTENSOR_BENCH_BACKENDS")
        .unwrap_or_else(|_| "cpu,vulkan,gl".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    host_overhead(&kinds);
    growing_sequence(&kinds);
}

/// A decode step over a KV cache of `capacity` positions at KV length `len` (a run-time length; with `capacity ==
/// len`, a plan made for exactly that length, with no run-time length): its plan and a closure running it once.
#[cfg(not(target_arch = "wasm32"))]
fn decode_step(device: &webtensor::Device, capacity: usize, len: usize) -> impl FnMut() {
    use webtensor::{Attention, DType, Fetch, Graph, Rope, RopeMode, Value};
    let (h, hkv, d) = (9usize, 3usize, 64usize);
    let kc = device.state("k", DType::F16, &[capacity, hkv * d]).unwrap();
    let vc = device.state("v", DType::F16, &[capacity, hkv * d]).unwrap();
    let mut g = Graph::new();
    let q_in = g.input("q", DType::F32, &[1, h, d]).unwrap();
    let k = g.input("k", DType::F32, &[1, hkv * d]).unwrap();
    let v = g.input("v", DType::F32, &[1, hkv * d]).unwrap();
    let pos = g.input("pos", DType::I32, &[1]).unwrap();
    let kv_len = g.input("kv_len", DType::I32, &[1]).unwrap();
    let rope = Rope::new(d, RopeMode::Normal, 1e5);
    let q = g.rope(q_in, pos, &rope).unwrap();
    let (ks, vs) = (g.state(&kc).unwrap(), g.state(&vc).unwrap());
    let ks = g.set_rows(ks, pos, k).unwrap();
    let vs = g.set_rows(vs, pos, v).unwrap();
    let view = |g: &mut Graph, c| {
        let c = g.reshape(c, &[capacity, hkv, d]).unwrap();
        g.permute(c, &[1, 0, 2]).unwrap()
    };
    let (kv, vv) = (view(&mut g, ks), view(&mut g, vs));
    let qh = g.permute(q, &[1, 0, 2]).unwrap();
    let dynamic = capacity != len;
    let a = Attention { scale: 0.125, causal: true, mask: None, kv_len: dynamic.then_some(kv_len), sinks: None };
    let o = g.attention(qh, kv, vv, &a).unwrap();
    let mut plan = device.compile(&g, &[o]).unwrap();
    let (qv, kv_) = (vec![0.1f32; h * d], vec![0.2f32; hkv * d]);
    let (p, l) = ([len as i32 - 1], [len as i32]);
    move || {
        let ins = [
            (q_in, Value::F32(&qv)),
            (k, Value::F32(&kv_)),
            (v, Value::F32(&kv_)),
            (pos, Value::I32(&p)),
            (kv_len, Value::I32(&l)),
        ];
        plan.run_with(if dynamic { &ins[..] } else { &ins[..4] }, &[Fetch::All]).unwrap();
    }
}

/// Median milliseconds of a run of each step, measured in interleaved rounds (after 10 warm-up rounds) so that a
/// change of the machine's load or clock affects every step alike.
#[cfg(not(target_arch = "wasm32"))]
fn interleaved_ms(steps: &mut [Box<dyn FnMut() + '_>], rounds: usize) -> Vec<f64> {
    let mut times = vec![Vec::new(); steps.len()];
    for round in 0..rounds + 10 {
        for (step, t) in steps.iter_mut().zip(&mut times) {
            let start = std::time::Instant::now();
            step();
            if round >= 10 {
                t.push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    times
        .into_iter()
        .map(|mut t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        })
        .collect()
}

#[cfg(not(target_arch = "wasm32"))]
fn growing_sequence(kinds: &[webtensor::BackendKind]) {
    use webtensor::Device;
    println!();
    println!("| backend | step at L = 64, capacity 64 (ms) | step at L = 64, capacity 8192 (ms) | ratio | step at L = 4096, capacity 8192 (ms) |");
    println!("|---|---|---|---|---|");
    for &kind in kinds {
        let Ok(device) = Device::with_backend(kind) else { continue };
        let mut steps: Vec<Box<dyn FnMut()>> =
            vec![Box::new(decode_step(&device, 64, 64)), Box::new(decode_step(&device, 8192, 64))];
        let t = interleaved_ms(&mut steps, 100);
        let long = interleaved_ms(&mut [Box::new(decode_step(&device, 8192, 4096))], 10)[0];
        println!("| {kind} | {:.3} | {:.3} | {:.2}× | {long:.3} |", t[0], t[1], t[1] / t[0]);
    }
    // issue 34's cost growth: a step at L = 2048 against one at L = 16 (goal on a GPU: at most 1.5×, the KV
    // length split over workgroups)
    println!();
    println!("| backend | step at L = 16 (ms) | L = 256 (ms) | L = 2048 (ms) | L = 2048 / L = 16 |");
    println!("|---|---|---|---|---|");
    for &kind in kinds {
        let Ok(device) = Device::with_backend(kind) else { continue };
        let mut steps: Vec<Box<dyn FnMut()>> = [16, 256, 2048]
            .into_iter()
            .map(|len| Box::new(decode_step(&device, 4096, len)) as Box<dyn FnMut()>)
            .collect();
        let t = interleaved_ms(&mut steps, 30);
        println!("| {kind} | {:.3} | {:.3} | {:.3} | {:.2}× |", t[0], t[1], t[2], t[2] / t[0]);
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn host_overhead(kinds: &[webtensor::BackendKind]) {
    use webtensor::{DType, Device, Fetch, Graph, HostTensor, Value};
    println!(
        "| backend | adapter | dispatches | host µs per run | host µs per dispatch | encoded ahead µs per dispatch | whole run µs per dispatch |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &kind in kinds {
        let Ok(device) = Device::with_backend(kind) else {
            println!("| {kind} | absent | | | | | |");
            continue;
        };
        let width = 64;
        let w = device.upload("w", HostTensor::f32(&[width, width], vec![0.01; width * width]).unwrap()).unwrap();
        let cache = device.state("cache", DType::F32, &[32, width]).unwrap();
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[1, width]).unwrap();
        let pos = g.input("pos", DType::I32, &[1]).unwrap();
        let (wt, c) = (g.resident(&w).unwrap(), g.state(&cache).unwrap());
        let mut h = x;
        for _ in 0..30 {
            // ten dispatches a layer: norm, three matmuls, softmax, reductions, a write to the state
            let n = g.rms_norm(h, 1e-5).unwrap();
            let a = g.matmul(n, wt).unwrap();
            let a = g.softmax(a).unwrap();
            let b = g.matmul(a, wt).unwrap();
            let b = g.layer_norm(b, 1e-5).unwrap();
            let s = g.max(b).unwrap();
            let b = g.sub(b, s).unwrap();
            let c2 = g.set_rows(c, pos, b).unwrap();
            let r = g.slice(c2, 0, 0, 1).unwrap();
            let m = g.matmul(r, wt).unwrap();
            h = g.add(h, m).unwrap();
        }
        let mut plan = device.compile(&g, &[h]).unwrap();
        let dispatches = plan.stats().dispatches;
        let xv = vec![0.5f32; width];
        let (mut host, mut ahead, mut whole) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..55 {
            let t = std::time::Instant::now();
            plan.run_with(&[(x, Value::F32(&xv)), (pos, Value::I32(&[i % 32]))], &[Fetch::All]).unwrap();
            if i >= 5 {
                whole.push(t.elapsed().as_secs_f64() * 1e6);
                host.push(plan.last_host_us());
                ahead.push(plan.last_encode_ahead_us());
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (h, a, w) = (median(&mut host), median(&mut ahead), median(&mut whole));
        let d = dispatches as f64;
        let name = &device.capabilities().name;
        println!("| {kind} | {name} | {dispatches} | {h:.0} | {:.2} | {:.2} | {:.2} |", h / d, a / d, w / d);
    }
}

#[cfg(target_arch = "wasm32")]
fn main() {}
