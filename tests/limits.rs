//! Device limits (tensors larger than one binding, odd byte offsets): tensors larger than one storage binding are processed in
//! chunks, exactly; where that is impossible the error names the limit and the size; odd byte sizes and
//! offsets round-trip. The large cases use the GPU's real binding limit (128 MiB on lavapipe).

mod common;

use webtensor::{DType, Data, Error, Graph, HostTensor};

fn big_enough(device: &webtensor::Device, bytes: u64) -> bool {
    let limit = device.capabilities().max_storage_binding_bytes;
    if bytes <= limit {
        println!("SKIPPED: {} has a {limit} B binding limit, the tensor is only {bytes} B", device.capabilities().name);
        return false;
    }
    true
}

fn value(i: usize) -> f32 {
    ((i % 1024) as f32 - 512.0) / 64.0
}

#[test]
fn elementwise_over_a_tensor_larger_than_one_binding() {
    let Some(device) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    let n = 37_500_000; // 150 MB of f32, over lavapipe's 128 MiB binding
    if !big_enough(device, n as u64 * 4) {
        return;
    }
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[n]).unwrap();
    let one = g.input("one", DType::F32, &[1]).unwrap();
    let y = g.scale(x, 2.0).unwrap();
    let y = g.add(y, one).unwrap();
    let mut plan = device.compile(&g, &[y]).unwrap();
    assert!(plan.stats().dispatches > 1, "split into chunks: {:?}", plan.stats());
    let xv = HostTensor::f32(&[n], (0..n).map(value).collect()).unwrap();
    let out = plan.run(&[(x, &xv), (one, &HostTensor::f32(&[1], vec![1.0]).unwrap())]).unwrap();
    let got = out[0].data.to_f32();
    // every element, which includes both neighbours of every chunk boundary
    let bad = (0..n).find(|&i| got[i] != 2.0 * value(i) + 1.0);
    assert_eq!(bad, None, "first wrong element of y = 2x + 1");
}

#[test]
fn softmax_and_sum_over_rows_of_a_tensor_larger_than_one_binding() {
    let Some(device) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    let (rows, cols) = (7500, 5000); // 150 MB
    if !big_enough(device, (rows * cols) as u64 * 4) {
        return;
    }
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[rows, cols]).unwrap();
    let s = g.softmax(x).unwrap();
    let t = g.sum(x).unwrap();
    let mut plan = device.compile(&g, &[s, t]).unwrap();
    let xv = HostTensor::f32(&[rows, cols], (0..rows * cols).map(|i| value(i * 7) / 4.0).collect()).unwrap();
    let out = plan.run(&[(x, &xv)]).unwrap();
    let (sm, sum) = (out[0].data.to_f32(), out[1].data.to_f32());
    let xs = xv.data.to_f32();
    for r in 0..rows {
        let row = &xs[r * cols..(r + 1) * cols];
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let z: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        let total: f64 = row.iter().map(|&v| v as f64).sum();
        assert!((sum[r] as f64 - total).abs() <= 1e-5 * (1.0 + total.abs()), "sum of row {r}: {} vs {total}", sum[r]);
        for c in [0, 1, cols / 2, cols - 2, cols - 1] {
            let want = (row[c] as f64 - max).exp() / z;
            let got = sm[r * cols + c] as f64;
            assert!((got - want).abs() <= 1e-5 * want + 1e-9, "softmax [{r}, {c}]: {got} vs {want}");
        }
    }
}

#[test]
fn get_rows_from_a_table_larger_than_one_binding() {
    let Some(device) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    let (v, d) = (70_000usize, 512usize); // 143 MB
    if !big_enough(device, (v * d) as u64 * 4) {
        return;
    }
    let mut g = Graph::new();
    let table = g.input("table", DType::F32, &[v, d]).unwrap();
    let idx = g.input("idx", DType::I32, &[12]).unwrap();
    let rows = g.get_rows(table, idx).unwrap();
    let mut plan = device.compile(&g, &[rows]).unwrap();
    let tv = HostTensor::f32(&[v, d], (0..v * d).map(|i| (i % 100_003) as f32).collect()).unwrap();
    // rows on both sides of every window boundary a 128 MiB binding can produce, and the ends
    let per = (device.capabilities().max_storage_binding_bytes as usize - 512) / (d * 4);
    let picks: Vec<i32> = vec![
        0,
        1,
        per as i32 - 1,
        per as i32,
        per as i32 + 1,
        2 * per as i32 - 1,
        2 * per as i32,
        69_998,
        69_999,
        5,
        40_000,
        3,
    ];
    let iv = HostTensor::new(&[12], Data::I32(picks.iter().map(|&p| p.min(v as i32 - 1)).collect())).unwrap();
    let out = plan.run(&[(table, &tv), (idx, &iv)]).unwrap();
    let got = out[0].data.to_f32();
    let t = tv.data.to_f32();
    for (k, &row) in iv.data.to_f32().iter().enumerate() {
        let row = row as usize;
        assert_eq!(&got[k * d..(k + 1) * d], &t[row * d..(row + 1) * d], "output row {k} (table row {row})");
    }
}

/// `x @ t(w)` with a weight W [N, K] larger than one binding (a vocabulary projection): chunks of output
/// columns, on the mat-vec kernel (one row), the tiled kernel and the generic one, each with a fused epilogue.
#[test]
fn matmul_with_a_weight_larger_than_one_binding() {
    let Some(device) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    let (n, k) = (70_000usize, 512usize); // 143 MB
    if !big_enough(device, (n * k) as u64 * 4) {
        return;
    }
    let wv = HostTensor::f32(&[n, k], (0..n * k).map(|i| value(i * 13) / 8.0).collect()).unwrap();
    let bias = HostTensor::f32(&[n], (0..n).map(|i| (i % 7) as f32).collect()).unwrap();
    let w = wv.data.to_f32();
    for (m, choice) in [
        (1usize, None),
        // a few rows unpinned: on software adapters not one serial mat-vec a row (B exceeds a binding)
        (5, None),
        (8, Some(webtensor::gpu::MatmulChoice::Tiled(webtensor::gpu::TILE_CONFIGS[0]))),
        (3, Some(webtensor::gpu::MatmulChoice::Generic)),
    ] {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[m, k]).unwrap();
        let wt = g.input("w", DType::F32, &[n, k]).unwrap();
        let b = g.input("b", DType::F32, &[n]).unwrap();
        let t = g.t(wt).unwrap();
        let y = g.matmul(x, t).unwrap();
        let y = g.add(y, b).unwrap();
        let options = webtensor::CompileOptions { matmul: choice, ..Default::default() };
        let mut plan = device.compile_with(&g, &[y], &options).unwrap();
        let st = plan.stats();
        assert!(st.dispatches > 1, "split into column chunks: {st:?}");
        let xv = HostTensor::f32(&[m, k], (0..m * k).map(|i| value(i * 5) / 16.0).collect()).unwrap();
        let out = plan.run(&[(x, &xv), (wt, &wv), (b, &bias)]).unwrap();
        let got = out[0].data.to_f32();
        let xs = xv.data.to_f32();
        let per = (device.capabilities().max_storage_binding_bytes as usize - 512) / (k * 4) / 64 * 64;
        for r in 0..m {
            for c in
                [0, 1, per - 1, per, per + 1, 2 * per - 1, 2 * per, n / 2, n - 2, n - 1].into_iter().filter(|&c| c < n)
            {
                let want: f64 =
                    (0..k).map(|j| xs[r * k + j] as f64 * w[c * k + j] as f64).sum::<f64>() + (c % 7) as f64;
                let g = got[r * n + c] as f64;
                assert!(
                    (g - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "m={m} {:?} [{r}, {c}]: {g} vs {want}",
                    st.kernels
                );
            }
        }
    }
}

/// `a @ b` with an A [M, K] larger than one binding: chunks of output rows; with a large output too, and a fused
/// bias, on the tiled and the generic kernel.
#[test]
fn matmul_with_an_a_larger_than_one_binding() {
    let Some(device) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    let (m, k) = (70_000usize, 512usize); // 143 MB
    if !big_enough(device, (m * k) as u64 * 4) {
        return;
    }
    let av = HostTensor::f32(&[m, k], (0..m * k).map(|i| value(i * 11) / 8.0).collect()).unwrap();
    let a = av.data.to_f32();
    let per = (device.capabilities().max_storage_binding_bytes as usize - 512) / (k * 4) / 128 * 128;
    for (n, choice) in [
        (16usize, Some(webtensor::gpu::MatmulChoice::Tiled(webtensor::gpu::TILE_CONFIGS[0]))),
        (512, Some(webtensor::gpu::MatmulChoice::Tiled(webtensor::gpu::TILE_CONFIGS[0]))),
        (20, Some(webtensor::gpu::MatmulChoice::Generic)),
    ] {
        let mut g = Graph::new();
        let x = g.input("a", DType::F32, &[m, k]).unwrap();
        let w = g.input("b", DType::F32, &[k, n]).unwrap();
        let bias = g.input("bias", DType::F32, &[n]).unwrap();
        let y = g.matmul(x, w).unwrap();
        let y = g.add(y, bias).unwrap();
        let options = webtensor::CompileOptions { matmul: choice, ..Default::default() };
        let mut plan = device.compile_with(&g, &[y], &options).unwrap();
        assert!(plan.stats().dispatches > 1, "split into row chunks: {:?}", plan.stats());
        let bv = HostTensor::f32(&[k, n], (0..k * n).map(|i| value(i * 3) / 16.0).collect()).unwrap();
        let biasv = HostTensor::f32(&[n], (0..n).map(|i| i as f32).collect()).unwrap();
        let out = plan.run(&[(x, &av), (w, &bv), (bias, &biasv)]).unwrap();
        let (got, b) = (out[0].data.to_f32(), bv.data.to_f32());
        for r in [0, 1, per - 1, per, per + 1, 2 * per, m / 2, m - 2, m - 1].into_iter().filter(|&r| r < m) {
            for c in [0, n / 2, n - 1] {
                let want: f64 = (0..k).map(|j| a[r * k + j] as f64 * b[j * n + c] as f64).sum::<f64>() + c as f64;
                let g = got[r * n + c] as f64;
                assert!((g - want).abs() <= 1e-4 * (1.0 + want.abs()), "n={n} [{r}, {c}]: {g} vs {want}");
            }
        }
    }
}

#[test]
fn what_cannot_be_split_is_an_error_naming_the_limit() {
    let Some(device) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    let (n, k) = (70_000usize, 512usize);
    if !big_enough(device, (n * k) as u64 * 4) {
        return;
    }
    // a weight stored [K, N]: every column chunk would need nearly all of it
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[1, k]).unwrap();
    let w = g.input("w", DType::F32, &[k, n]).unwrap();
    let y = g.matmul(x, w).unwrap();
    let e = device.compile(&g, &[y]).err().expect("a matmul operand over the binding limit is refused");
    assert!(matches!(e, Error::LimitExceeded { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("max_storage_buffer_binding_size") && msg.contains(&format!("{}", n * k * 4)), "{msg}");
}

/// Odd byte offsets: f16 tensors of odd lengths, read back through views at odd element offsets, and uploaded into an odd
/// offset next to neighbours: bytes identical to the CPU backend's.
#[test]
fn odd_byte_sizes_and_offsets_round_trip() {
    let n = 1003;
    let vals: Vec<half::f16> = (0..n).map(|i| half::f16::from_f32(i as f32 * 0.5 - 100.0)).collect();
    for device in common::devices() {
        for off in 0..4 {
            for len in [1usize, 2, 3, 999] {
                let mut g = Graph::new();
                let x = g.input("x", DType::F16, &[n]).unwrap();
                let view = g.slice(x, 0, off, off + len).unwrap();
                let copy = g.contiguous(view).unwrap();
                let xv = HostTensor::new(&[n], Data::F16(vals.clone())).unwrap();
                let out = device.compile(&g, &[view, copy]).unwrap().run(&[(x, &xv)]).unwrap();
                let want = Data::F16(vals[off..off + len].to_vec());
                assert_eq!(out[0].data, want, "view {off}..+{len} on {}", device.capabilities().name);
                assert_eq!(out[1].data, want, "copy {off}..+{len} on {}", device.capabilities().name);
            }
        }
        // an odd-length f16 input between neighbours: a concat must keep each part's bytes
        let mut g = Graph::new();
        let a = g.input("a", DType::F16, &[3]).unwrap();
        let b = g.input("b", DType::F16, &[5]).unwrap();
        let c = g.concat(&[a, b], 0).unwrap();
        let av = HostTensor::new(&[3], Data::F16(vals[..3].to_vec())).unwrap();
        let bv = HostTensor::new(&[5], Data::F16(vals[10..15].to_vec())).unwrap();
        let out = device.compile(&g, &[c]).unwrap().run(&[(a, &av), (b, &bv)]).unwrap();
        let want: Vec<half::f16> = vals[..3].iter().chain(&vals[10..15]).copied().collect();
        assert_eq!(out[0].data, Data::F16(want), "{}", device.capabilities().name);
    }
}

/// More batches than one dispatch's z may count (65535): the matmul and the mat-vec kernels (with a fused
/// epilogue) are dispatched in groups of batches, each batch exact against an f64 reference on every device.
#[test]
fn matmul_and_mat_vec_over_more_batches_than_one_dispatch_counts() {
    for &(batch, m) in &[([2usize, 35_003usize], 1usize), ([1, 70_001], 3)] {
        let (k, n) = (8, 4);
        let nb = batch[0] * batch[1];
        let mut g = Graph::new();
        let a = g.input("a", DType::F32, &[batch[0], batch[1], m, k]).unwrap();
        let b = g.input("b", DType::F32, &[batch[0], batch[1], k, n]).unwrap();
        let bias = g.input("bias", DType::F32, &[n]).unwrap();
        let c = g.matmul(a, b).unwrap();
        let c = g.add(c, bias).unwrap();
        let c = g.relu(c).unwrap();
        // small integers: every sum exact in f32
        let av: Vec<f32> = (0..nb * m * k).map(|i| (i % 7) as f32 - 3.0).collect();
        let bv: Vec<f32> = (0..nb * k * n).map(|i| (i % 5) as f32 - 2.0).collect();
        let biasv = vec![1.0, -1.0, 2.0, 0.0];
        let mut want = vec![0f64; nb * m * n];
        for z in 0..nb {
            for i in 0..m {
                for j in 0..n {
                    let s: f64 = (0..k).map(|l| av[(z * m + i) * k + l] as f64 * bv[(z * k + l) * n + j] as f64).sum();
                    want[(z * m + i) * n + j] = (s + biasv[j] as f64).max(0.0);
                }
            }
        }
        let inputs = [
            HostTensor::f32(&[batch[0], batch[1], m, k], av).unwrap(),
            HostTensor::f32(&[batch[0], batch[1], k, n], bv).unwrap(),
            HostTensor::f32(&[n], biasv).unwrap(),
        ];
        for device in common::devices() {
            let mut plan = device.compile(&g, &[c]).unwrap();
            let out = plan.run(&[(a, &inputs[0]), (b, &inputs[1]), (bias, &inputs[2])]).unwrap();
            let got = out[0].data.to_f64();
            let bad = (0..want.len()).find(|&i| got[i] != want[i]);
            assert_eq!(
                bad,
                None,
                "{batch:?} batches of M = {m} on {}: first wrong element",
                device.capabilities().name
            );
        }
    }
}

/// A limit's error says its unit: a count of workgroups is not called bytes (attention over 70,000 heads is
/// more workgroups along one dimension than the adapter allows).
#[test]
fn limit_errors_name_their_unit() {
    let Some(device) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    let mut g = Graph::new();
    let q = g.input("q", DType::F32, &[70_000, 1, 4]).unwrap();
    let k = g.input("k", DType::F32, &[70_000, 1, 4]).unwrap();
    let a = webtensor::Attention { scale: 0.5, causal: false, mask: None, kv_len: None, sinks: None };
    let o = g.attention(q, k, k, &a).unwrap();
    match device.compile(&g, &[o]) {
        Err(e @ Error::LimitExceeded { unit: "workgroups", .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("70000 workgroups exceeds") && !msg.contains("bytes"), "{msg}");
        }
        Err(e) => panic!("expected a workgroup limit, got {e}"),
        Ok(_) => println!("SKIPPED: {} dispatches 70,000 workgroups along one dimension", device.capabilities().name),
    }
}

/// A Q8_0 weight larger than one storage binding (131072 × 1024, 143 MB, over lavapipe's 128 MiB), as a
/// vocabulary projection `x @ t(w)` and as a get_rows table: split by output columns (and table rows) over
/// binding windows, every value against an f64 decoding of the blocks.
#[test]
fn quantized_weight_larger_than_one_binding() {
    let Some(device) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    let (n, k) = (131_072usize, 1024usize);
    let blocks = k / 32;
    let bytes_total = n * blocks * 34;
    if !big_enough(device, bytes_total as u64) {
        return;
    }
    // block (r, j): scale d = (1 + (r + j) % 7) / 128 as f16, quants (r·31 + j·7 + i) % 255 − 127
    let mut bytes = vec![0u8; bytes_total];
    for r in 0..n {
        for j in 0..blocks {
            let b = &mut bytes[(r * blocks + j) * 34..][..34];
            b[..2].copy_from_slice(&half::f16::from_f32((1 + (r + j) % 7) as f32 / 128.0).to_le_bytes());
            for i in 0..32 {
                b[2 + i] = (((r * 31 + j * 7 + i) % 255) as i32 - 127) as i8 as u8;
            }
        }
    }
    let weight = |r: usize, c: usize| {
        let (j, i) = (c / 32, c % 32);
        let d = (1 + (r + j) % 7) as f64 / 128.0;
        d * (((r * 31 + j * 7 + i) % 255) as f64 - 127.0)
    };
    let xv: Vec<f32> = (0..k).map(|i| ((i % 9) as f32 - 4.0) / 8.0).collect();
    let w = device.upload("w", HostTensor::new(&[n, k], Data::Raw { dtype: DType::Q8_0, bytes }).unwrap()).unwrap();
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[1, k]).unwrap();
    let idx = g.input("idx", DType::I32, &[4]).unwrap();
    let wr = g.resident(&w).unwrap();
    let wt = g.t(wr).unwrap();
    let y = g.matmul(x, wt).unwrap();
    let rows = g.get_rows(wr, idx).unwrap();
    let mut plan = device.compile(&g, &[y, rows]).unwrap();
    assert!(plan.stats().dispatches > 2, "split into windows: {:?}", plan.stats());
    let picks = [0i32, 65_535, 98_304, n as i32 - 1];
    let out = plan
        .run(&[
            (x, &HostTensor::f32(&[1, k], xv.clone()).unwrap()),
            (idx, &HostTensor::new(&[4], Data::I32(picks.to_vec())).unwrap()),
        ])
        .unwrap();
    let got = out[0].data.to_f64();
    // f32 accumulation: within 1e-5 of the sum of the terms' magnitudes
    let bad = (0..n).find(|&r| {
        let terms = (0..k).map(|c| xv[c] as f64 * weight(r, c));
        let (want, mag) = terms.fold((0.0, 0.0), |(s, m), t| (s + t, m + t.abs()));
        let err = (got[r] - want).abs();
        err.is_nan() || err > 1e-5 * mag + 1e-6
    });
    assert_eq!(bad, None, "first wrong output column of x @ t(w)");
    let rows_got = out[1].data.to_f64();
    for (p, &r) in picks.iter().enumerate() {
        let bad = (0..k).find(|&c| rows_got[p * k + c] != weight(r as usize, c));
        assert_eq!(bad, None, "get_rows row {r}: first wrong value");
    }
}
