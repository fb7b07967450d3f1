//! `cargo bench --bench matmul`: criterion benchmarks of matmul and mat-vec on every available backend — the
//! CPU backend, and the GPU adapter `Device::best_gpu()` picks (software ones included).
//!
//! - `matmul_f32/<backend>/<N>`: `[N, N] @ [N, N]`, f32, N in 256, 512, 1024, 2048, 4096.
//! - `matvec/<backend>/<w dtype>/<K>`: `[1, K] f32 @ [K, K]` with f16 or f32 weights, K in 4096 and 8192.
//!
//! Each iteration is one `Plan::run` of a compiled plan: upload of the inputs, dispatch, readback of the output
//! (what a caller pays; `webtensor bench matmul` also reports the kernel time alone). Throughput is given as
//! criterion "elements": 1 elem = 1 FLOP, so `Gelem/s` reads as GFLOP/s (2·M·N·K per matmul); mat-vec also
//! reports bytes of weights per second (GiB/s).
//!
//! Software adapters (device type `Cpu`, e.g. lavapipe) skip matmul above N = 1024 and mat-vec above K = 4096,
//! because 4096³ takes minutes per iteration there; `WEBTENSOR_BENCH_FULL=1` runs everything. Filter as usual:
//! `cargo bench --bench matmul -- matmul_f32/cpu`. The whole default run takes a few minutes on a 2-core machine.

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
    use std::time::Duration;
    use webtensor::{DType, Data, Device, Graph, HostTensor, Plan, Tensor};

    const MATMUL_SIZES: [usize; 5] = [256, 512, 1024, 2048, 4096];
    const MATVEC_SIZES: [usize; 2] = [4096, 8192];
    /// Largest sizes on software adapters unless WEBTENSOR_BENCH_FULL=1.
    const SOFTWARE_MAX_N: usize = 1024;
    const SOFTWARE_MAX_K: usize = 4096;

    /// Deterministic values in [-1, 1) (splitmix64), scaled.
    fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                (((z >> 40) as f32) * (2.0 / (1u64 << 24) as f32) - 1.0) * scale
            })
            .collect()
    }

    fn tensor(shape: &[usize], seed: u64, dtype: DType) -> HostTensor {
        let v = values(shape.iter().product(), seed, 1.0);
        let data = match dtype {
            DType::F16 => Data::F16(v.into_iter().map(half::f16::from_f32).collect()),
            _ => Data::F32(v),
        };
        HostTensor::new(shape, data).expect("shape matches")
    }

    /// A compiled `a @ b` and its inputs.
    struct Case {
        plan: Plan,
        a: (Tensor, HostTensor),
        b: (Tensor, HostTensor),
    }

    impl Case {
        fn new(device: &Device, a: HostTensor, b: HostTensor) -> webtensor::Result<Case> {
            let mut g = Graph::new();
            let ta = g.input("a", a.dtype(), &a.shape)?;
            let tb = g.input("b", b.dtype(), &b.shape)?;
            let c = g.matmul(ta, tb)?;
            Ok(Case { plan: device.compile(&g, &[c])?, a: (ta, a), b: (tb, b) })
        }

        fn run(&mut self) -> Vec<HostTensor> {
            self.plan.run(&[(self.a.0, &self.a.1), (self.b.0, &self.b.1)]).expect("plan runs")
        }
    }

    /// The backends to measure: `(name, device, software)`.
    fn backends() -> Vec<(String, Device, bool)> {
        let mut out = vec![("cpu".to_string(), Device::cpu(), false)];
        match Device::best_gpu() {
            Ok(d) => {
                let c = d.capabilities();
                eprintln!("webtensor bench: GPU {} [{}, {}]", c.name, c.backend, c.device_type);
                out.push((c.backend.name().to_string(), d.clone(), c.device_type == webtensor::DeviceType::Cpu));
            }
            Err(e) => eprintln!("webtensor bench: no GPU ({e}); benchmarking the CPU backend only"),
        }
        out
    }

    fn full() -> bool {
        std::env::var("WEBTENSOR_BENCH_FULL").is_ok_and(|v| v == "1")
    }

    /// Sampling for one iteration of `flops` at a rough `gflops`: flat sampling and a longer measurement for
    /// slow iterations, so that 10 samples fit without criterion's linear ramp (55 iterations).
    fn tune(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, secs_per_iter: f64) {
        if secs_per_iter > 0.05 {
            group.sampling_mode(SamplingMode::Flat);
            group.measurement_time(Duration::from_secs_f64((secs_per_iter * 20.0).max(3.0)));
        } else {
            group.sampling_mode(SamplingMode::Auto);
            group.measurement_time(Duration::from_secs(3));
        }
    }

    pub fn matmul(c: &mut Criterion) {
        for (name, device, software) in backends() {
            let sizes: Vec<usize> =
                MATMUL_SIZES.iter().copied().filter(|&n| full() || !software || n <= SOFTWARE_MAX_N).collect();
            if sizes.len() < MATMUL_SIZES.len() {
                eprintln!(
                    "webtensor bench: matmul_f32/{name}: {} is a software adapter; skipping N > {SOFTWARE_MAX_N} \
                     (WEBTENSOR_BENCH_FULL=1 runs them)",
                    device.capabilities().name
                );
            }
            let mut group = c.benchmark_group(format!("matmul_f32/{name}"));
            group.sample_size(10).warm_up_time(Duration::from_secs(1));
            for n in sizes {
                let a = tensor(&[n, n], 1, DType::F32);
                let b = tensor(&[n, n], 2, DType::F32);
                let mut case = Case::new(&device, a, b).expect("matmul compiles");
                // one untimed run: pipelines, tuning and first-touch pages, and an estimate for sampling
                let t0 = std::time::Instant::now();
                case.run();
                tune(&mut group, t0.elapsed().as_secs_f64());
                group.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
                group.bench_function(BenchmarkId::from_parameter(n), |bench| bench.iter(|| case.run()));
            }
            group.finish();
        }
    }

    pub fn matvec(c: &mut Criterion) {
        for (name, device, software) in backends() {
            let sizes: Vec<usize> =
                MATVEC_SIZES.iter().copied().filter(|&k| full() || !software || k <= SOFTWARE_MAX_K).collect();
            if sizes.len() < MATVEC_SIZES.len() {
                eprintln!("webtensor bench: matvec/{name}: software adapter; skipping K > {SOFTWARE_MAX_K}");
            }
            let mut group = c.benchmark_group(format!("matvec/{name}"));
            group.sample_size(10).warm_up_time(Duration::from_secs(1));
            for k in sizes {
                for wdtype in [DType::F16, DType::F32] {
                    let w_bytes = (k * k * wdtype.size_bytes()) as u64;
                    if w_bytes > device.capabilities().max_storage_binding_bytes {
                        eprintln!("webtensor bench: matvec/{name}: {k}x{k} {wdtype} weights exceed the binding limit");
                        continue;
                    }
                    let x = tensor(&[1, k], 3, DType::F32);
                    let w = tensor(&[k, k], 4, wdtype);
                    let mut case = Case::new(&device, x, w).expect("mat-vec compiles");
                    let t0 = std::time::Instant::now();
                    case.run();
                    tune(&mut group, t0.elapsed().as_secs_f64());
                    group.throughput(Throughput::ElementsAndBytes { elements: 2 * (k * k) as u64, bytes: w_bytes });
                    let id = format!("{}w/{k}", if wdtype == DType::F16 { "f16" } else { "f32" });
                    group.bench_function(BenchmarkId::from_parameter(id), |bench| bench.iter(|| case.run()));
                }
            }
            group.finish();
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
criterion::criterion_group!(benches, native::matmul, native::matvec);
#[cfg(not(target_arch = "wasm32"))]
criterion::criterion_main!(benches);

#[cfg(target_arch = "wasm32")]
fn main() {}
