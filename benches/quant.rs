//! `cargo bench --bench quant`: mat-vec over block-quantized weights in GB/s of weight bytes read, per type,
//! beside f16 and f32 weights of the same byte size and the machine's memory-read bandwidth measured in the same
//! run (a multithreaded sum over a 256 MiB buffer); then the prefill matmul (M = 512) in GFLOP/s.
//!
//! The weight is resident (uploaded once), so a run is x's upload, the mat-vec and y's readback; medians of
//! interleaved rounds. On the CPU the weights are ~100 MB (the target: Q4_1 and Q8_0 at ≥ 80% of the read
//! bandwidth); on a GPU backend present (lavapipe, GL here: `WEBTENSOR_BENCH_BACKENDS=cpu,vulkan`) ~16 MB, as
//! those run on the CPU too; `WEBTENSOR_BENCH_WEIGHT_MB` sets another size (a few MB: the kernels' speed from the
//! cache, without memory's). 1 GB = 10⁹ bytes; 1 GFLOP = 10⁹ floating-point operations (2·M·N·K).

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    use webtensor::BackendKind;
    let kinds: Vec<BackendKind> = std::env::var("WEBTENSOR_BENCH_BACKENDS")
        .unwrap_or_else(|_| "cpu".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    println!("load average: {}", std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim());
    let read = read_bandwidth_gbs();
    println!("memory read bandwidth (sum over 256 MiB, {} threads): {read:.1} GB/s\n", rayon::current_num_threads());
    for &kind in &kinds {
        let Ok(device) = webtensor::Device::with_backend(kind) else { continue };
        let mb: Option<f64> = std::env::var("WEBTENSOR_BENCH_WEIGHT_MB").ok().and_then(|v| v.parse().ok());
        let bytes = mb.map_or(if kind == BackendKind::Cpu { 100e6 } else { 16e6 }, |mb| mb * 1e6);
        mat_vec(&device, bytes, read);
        prefill(&device);
    }
}

#[cfg(target_arch = "wasm32")]
fn main() {}

/// GB/s of a multithreaded sum over 256 MiB of f32 (median of 15 passes after 3).
#[cfg(not(target_arch = "wasm32"))]
fn read_bandwidth_gbs() -> f64 {
    use rayon::prelude::*;
    let buf = vec![1.0f32; 64 << 20];
    let mut times: Vec<f64> = (0..18)
        .map(|_| {
            let t = std::time::Instant::now();
            let s: f32 = buf
                .par_chunks(1 << 16)
                .map(|c| {
                    // 16 independent sums: vectorized, bound by memory
                    let mut acc = [0f32; 16];
                    c.chunks_exact(16).for_each(|v| (0..16).for_each(|j| acc[j] += v[j]));
                    acc.iter().sum::<f32>()
                })
                .sum();
            std::hint::black_box(s);
            t.elapsed().as_secs_f64()
        })
        .skip(3)
        .collect();
    times.sort_by(f64::total_cmp);
    (buf.len() * 4) as f64 / times[times.len() / 2] / 1e9
}

/// Random blocks of `dtype` (`rows` × `k`) with small, finite f16 scales: every byte pattern is a valid block.
#[cfg(not(target_arch = "wasm32"))]
fn random_weight(dtype: webtensor::DType, rows: usize, k: usize) -> Vec<u8> {
    let (bs, bb) = (dtype.block_size(), dtype.block_bytes());
    let mut s = 0x9E3779B97F4A7C15u64;
    let mut out: Vec<u8> = (0..rows * k / bs * bb)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect();
    let scale = half::f16::from_f32(0.002).to_le_bytes();
    for blk in out.chunks_exact_mut(bb) {
        for &o in dtype.scale_offsets() {
            blk[o..o + 2].copy_from_slice(&scale);
        }
        match dtype {
            // an E8M0 exponent of 2^-9 (0xFF would be no number)
            webtensor::DType::MXFP4 => blk[0] = 118,
            // the f16 scale 0.002 (0x1819) spread over the top nibbles of the four sub-scale words
            webtensor::DType::IQ1_M => {
                for (k, nibble) in [0x9u8, 0x1, 0x8, 0x1].into_iter().enumerate() {
                    blk[49 + 2 * k] = (blk[49 + 2 * k] & 0x0f) | (nibble << 4);
                }
            }
            _ => {}
        }
    }
    out
}

/// A plan of `x [m, k] @ t(w)` with `w [n, k]` of `dtype` resident on `device`, and x's handle.
#[cfg(not(target_arch = "wasm32"))]
fn plan(
    device: &webtensor::Device,
    dtype: webtensor::DType,
    m: usize,
    n: usize,
    k: usize,
) -> (webtensor::Plan, webtensor::Tensor) {
    use webtensor::{Bytes, DType, Graph};
    let bytes = match dtype {
        DType::F32 => (0..n * k).flat_map(|i| (((i % 7) as f32 - 3.0) * 0.01).to_le_bytes()).collect(),
        DType::F16 => {
            (0..n * k).flat_map(|i| half::f16::from_f32(((i % 7) as f32 - 3.0) * 0.01).to_le_bytes()).collect()
        }
        _ => random_weight(dtype, n, k),
    };
    let w = device.upload_bytes("w", dtype, &[n, k], Bytes::from_vec(bytes)).unwrap();
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[m, k]).unwrap();
    let wr = g.resident(&w).unwrap();
    let wt = g.t(wr).unwrap();
    let y = g.matmul(x, wt).unwrap();
    (device.compile(&g, &[y]).unwrap(), x)
}

/// Median seconds of `run` over `rounds` runs after 3 warm-up runs.
#[cfg(not(target_arch = "wasm32"))]
fn median_s(rounds: usize, mut run: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..rounds + 3)
        .map(|_| {
            let s = std::time::Instant::now();
            run();
            s.elapsed().as_secs_f64()
        })
        .skip(3)
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

#[cfg(not(target_arch = "wasm32"))]
fn mat_vec(device: &webtensor::Device, target_bytes: f64, read_gbs: f64) {
    use webtensor::{DType::*, Value};
    let k = 4096usize;
    let caps = device.capabilities();
    println!("mat-vec [1, {k}] @ t(w [N, {k}]) on {} ({}), w ≈ {:.0} MB", caps.backend, caps.name, target_bytes / 1e6);
    println!("| weights | N | weight MB | ms | GB/s of weights | % of read bandwidth |");
    println!("|---|---|---|---|---|---|");
    let xv: Vec<f32> = (0..k).map(|i| (i as f32 * 0.1).sin()).collect();
    let iq = [IQ4_NL, IQ4_XS, MXFP4, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_M, IQ1_S, TQ2_0, TQ1_0];
    for dtype in
        [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K].into_iter().chain(iq).chain([BF16, F16, F32])
    {
        let row_bytes = k / dtype.block_size() * dtype.block_bytes();
        let n = ((target_bytes / row_bytes as f64) as usize).max(16) / 16 * 16;
        let (mut p, x) = plan(device, dtype, 1, n, k);
        let s = median_s(15, || {
            p.run_with(&[(x, Value::F32(&xv))], &[]).unwrap();
        });
        let bytes = (n * row_bytes) as f64;
        let gbs = bytes / s / 1e9;
        println!("| {dtype} | {n} | {:.1} | {:.2} | {gbs:.1} | {:.0}% |", bytes / 1e6, s * 1e3, 100.0 * gbs / read_gbs);
    }
    println!();
}

#[cfg(not(target_arch = "wasm32"))]
fn prefill(device: &webtensor::Device) {
    use webtensor::{DType::*, Value};
    let (m, n, k) = if device.is_cpu() { (512usize, 2048usize, 2048usize) } else { (128, 512, 512) };
    println!("prefill matmul [{m}, {k}] @ t(w [{n}, {k}]) on {}", device.capabilities().backend);
    println!("| weights | ms | GFLOP/s |");
    println!("|---|---|---|");
    let xv: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.01).cos()).collect();
    for dtype in [Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, IQ4_XS, MXFP4, IQ2_XXS, F16, F32] {
        let (mut p, x) = plan(device, dtype, m, n, k);
        let s = median_s(5, || {
            p.run_with(&[(x, Value::F32(&xv))], &[]).unwrap();
        });
        println!("| {dtype} | {:.2} | {:.1} |", s * 1e3, 2.0 * (m * n * k) as f64 / s / 1e9);
    }
    println!();
}
