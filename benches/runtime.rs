//! `cargo bench --bench runtime`: the host overhead of running a plan shaped like a 30-layer decode step — 300
//! small dispatches over resident weights and a state — on the CPU backend and every GPU backend present (lavapipe
//! on Vulkan and llvmpipe on GL here), in microseconds of host time per dispatch (uploads, encoding and submit;
//! the CPU backend's whole run), medians of 50 runs after 5 warm-up runs. Goal: at most 3 µs per dispatch.
//! `WEBTENSOR_BENCH_BACKENDS=cpu,vulkan,gl` chooses the backends.

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    use webtensor::{BackendKind, DType, Device, Fetch, Graph, HostTensor, Value};
    let kinds: Vec<BackendKind> = std::env::var("WEBTENSOR_BENCH_BACKENDS")
        .unwrap_or_else(|_| "cpu,vulkan,gl".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    println!("| backend | adapter | dispatches | host µs per run | host µs per dispatch | whole run µs per dispatch |");
    println!("|---|---|---|---|---|---|");
    for kind in kinds {
        let Ok(device) = Device::with_backend(kind) else {
            println!("| {kind} | absent | | | | |");
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
        let mut host = Vec::new();
        let mut whole = Vec::new();
        for i in 0..55 {
            let t = std::time::Instant::now();
            plan.run_with(&[(x, Value::F32(&xv)), (pos, Value::I32(&[i % 32]))], &[Fetch::All]).unwrap();
            if i >= 5 {
                whole.push(t.elapsed().as_secs_f64() * 1e6);
                host.push(plan.last_host_us());
            }
        }
        host.sort_by(f64::total_cmp);
        whole.sort_by(f64::total_cmp);
        let (h, w) = (host[host.len() / 2], whole[whole.len() / 2]);
        let d = dispatches as f64;
        println!("| {kind} | {} | {dispatches} | {h:.0} | {:.2} | {:.2} |", device.capabilities().name, h / d, w / d);
    }
}

#[cfg(target_arch = "wasm32")]
fn main() {}
