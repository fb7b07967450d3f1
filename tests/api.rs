//! The public API's contracts: errors name the op and the shapes at build time, runs validate their inputs,
//! and a compiled plan reruns without creating GPU objects.

mod common;

use webtensor::{CompileOptions, DType, Data, Device, Error, Graph, HostTensor};

fn msg(r: webtensor::Result<webtensor::Tensor>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn build_errors_name_the_op_and_shapes() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[3, 4]).unwrap();
    let b = g.input("b", DType::F32, &[5, 6]).unwrap();
    let i = g.input("i", DType::I32, &[2]).unwrap();
    let m = msg(g.matmul(a, b));
    assert!(m.contains("matmul") && m.contains("[3, 4]") && m.contains("[5, 6]"), "{m}");
    let m = msg(g.add(a, b));
    assert!(m.contains("add") && m.contains("[3, 4]") && m.contains("[5, 6]"), "{m}");
    let m = msg(g.transpose(a, 0, 2));
    assert!(m.contains("transpose") && m.contains("[3, 4]"), "{m}");
    let m = msg(g.exp(i));
    assert!(m.contains("exp") && m.contains("int32"), "{m}");
    let m = msg(g.get_rows(a, a));
    assert!(m.contains("get_rows") && m.contains("i32"), "{m}");
    let m = msg(g.concat(&[a, b], 0));
    assert!(m.contains("concat"), "{m}");
    let m = msg(g.reshape(a, &[5]));
    assert!(m.contains("reshape") && m.contains("[3, 4]"), "{m}");
    let m = msg(g.slice(a, 1, 3, 9));
    assert!(m.contains("slice"), "{m}");
    let m = msg(g.permute(a, &[0, 0]));
    assert!(m.contains("permute"), "{m}");
    let m = msg(g.input("x", DType::F32, &[1, 2, 3, 4, 5]));
    assert!(m.contains("rank"), "{m}");
    let m = msg(g.input("a", DType::F32, &[1]));
    assert!(m.contains("declared twice"), "{m}");
    let m = msg(g.add(a, i));
    assert!(m.contains("dtype mismatch"), "{m}");
    let m = msg(g.div(i, i));
    assert!(m.contains("div"), "{m}");
    let m = msg(g.softmax_ext(a, Some(b), 1.0));
    assert!(m.contains("softmax"), "{m}");
    let mut other = Graph::new();
    let x = other.input("x", DType::F32, &[3, 4]).unwrap();
    assert!(matches!(g.add(a, x), Err(Error::ForeignTensor { .. })));
}

#[test]
fn run_validates_inputs() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[2, 2]).unwrap();
    let b = g.input("b", DType::F32, &[2, 2]).unwrap();
    let c = g.add(a, b).unwrap();
    for device in common::devices() {
        let mut plan = device.compile(&g, &[c]).unwrap();
        let ok = HostTensor::f32(&[2, 2], vec![1.0; 4]).unwrap();
        let wrong_shape = HostTensor::f32(&[4], vec![1.0; 4]).unwrap();
        let wrong_dtype = HostTensor::new(&[2, 2], webtensor::Data::I32(vec![1; 4])).unwrap();
        let e = plan.run(&[(a, &ok)]).unwrap_err().to_string();
        assert!(e.contains("'b'") && e.contains("missing"), "{e}");
        let e = plan.run(&[(a, &ok), (b, &wrong_shape)]).unwrap_err().to_string();
        assert!(e.contains("[2, 2]") && e.contains("[4]"), "{e}");
        let e = plan.run(&[(a, &ok), (b, &wrong_dtype)]).unwrap_err().to_string();
        assert!(e.contains("int32"), "{e}");
        let e = plan.run(&[(a, &ok), (a, &ok), (b, &ok)]).unwrap_err().to_string();
        assert!(e.contains("twice"), "{e}");
        assert!(HostTensor::f32(&[3], vec![1.0; 2]).is_err());
        let out = plan.run(&[(a, &ok), (b, &ok)]).unwrap();
        assert_eq!(out[0].data.to_f32(), vec![2.0; 4]);
    }
}

#[test]
fn rerunning_a_plan_creates_no_gpu_objects_and_gives_the_same_result() {
    let Some(shared) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    // a device of its own: wgpu counts objects per device, and other tests run in parallel
    let device = &Device::with_backend(shared.capabilities().backend).unwrap();
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[33, 65]).unwrap();
    let w = g.input("w", DType::F32, &[17, 65]).unwrap();
    let wt = g.t(w).unwrap();
    let y = g.matmul(x, wt).unwrap();
    let y = g.gelu(y).unwrap();
    let s = g.softmax(y).unwrap();
    let mut plan = device.compile_with(&g, &[s, y], &CompileOptions { poison: true, ..Default::default() }).unwrap();
    let xv = HostTensor::f32(&[33, 65], (0..33 * 65).map(|i| (i % 7) as f32 * 0.1).collect()).unwrap();
    let wv = HostTensor::f32(&[17, 65], (0..17 * 65).map(|i| (i % 5) as f32 * -0.1).collect()).unwrap();
    let first = plan.run(&[(x, &xv), (w, &wv)]).unwrap();
    let before = device.resource_counts().expect("wgpu counts resources");
    for _ in 0..5 {
        let again = plan.run(&[(x, &xv), (w, &wv)]).unwrap();
        assert_eq!(again, first);
    }
    let after = device.resource_counts().unwrap();
    assert_eq!(before, after, "[buffers, bind groups, pipelines] changed across runs");
    let st = plan.stats();
    assert_eq!(st.dispatches, 2, "gelu is fused into the matmul: {:?}", st.kernels);
    assert_eq!(st.pipelines, 2);
    // a second plan with the same kernels reuses the cached pipelines
    let _plan2 = device.compile(&g, &[s, y]).unwrap();
    assert_eq!(device.resource_counts().unwrap()[2], after[2], "pipelines are cached by key");
}

/// A run reads the caller's input tensors (the CPU backend borrows them, without a copy) and nothing ever writes
/// into an input: an elementwise chain that may run in place starts at an input that is read again after it,
/// is an output itself and through a view, f16 and aliased inputs included. Runs with other values in between
/// must not see stale ones.
#[test]
fn inputs_are_read_in_place_and_never_written() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[4, 8]).unwrap();
    let w = g.input("w", DType::F32, &[4, 8]).unwrap();
    let h = g.input("h", DType::F16, &[4, 8]).unwrap();
    let r = g.relu(x).unwrap(); // in place over x would be wrong: x is the caller's
    let e = g.neg(r).unwrap(); // may run in place over r
    let y = g.add(e, x).unwrap(); // min(x, 0), reads x after the chain
    let hf = g.cast(h, DType::F32).unwrap();
    let z = g.mul(y, hf).unwrap();
    let s = g.add(w, x).unwrap(); // w and x are given the same tensor
    let xt = g.t(x).unwrap(); // an output that is a view of an input
    let value = |seed: f32| {
        let v: Vec<f32> = (0..32).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.125 * seed).collect();
        HostTensor::f32(&[4, 8], v).unwrap()
    };
    let hv = HostTensor::new(&[4, 8], webtensor::Data::from_f64(DType::F16, &[0.5, 1.0, 2.0, -1.0].repeat(8)).unwrap())
        .unwrap();
    let expect = |xv: &HostTensor| {
        let xs = xv.data.to_f32();
        let ys: Vec<f32> = xs.iter().map(|&v| v.min(0.0)).collect();
        let zs: Vec<f32> = ys.iter().zip(hv.data.to_f32()).map(|(y, h)| y * h).collect();
        let ss: Vec<f32> = xs.iter().map(|v| v + v).collect();
        let ts: Vec<f32> = (0..32).map(|i| xs[(i % 4) * 8 + i / 4]).collect();
        [ys, zs, ss, xs.clone(), ts]
    };
    let (xa, xb) = (value(1.0), value(-3.0));
    let (xa_before, hv_before) = (xa.clone(), hv.clone());
    for device in common::devices() {
        for options in [
            CompileOptions::default(),
            CompileOptions { no_fusion: true, ..Default::default() },
            CompileOptions { poison: true, ..Default::default() },
        ] {
            let mut plan = device.compile_with(&g, &[y, z, s, x, xt], &options).unwrap();
            for xv in [&xa, &xb, &xa] {
                let out = plan.run(&[(x, xv), (w, xv), (h, &hv)]).unwrap();
                let got: Vec<Vec<f32>> = out.iter().map(|t| t.data.to_f32()).collect();
                assert_eq!(got, expect(xv), "{device:?} {options:?}");
            }
            assert_eq!((&xa, &hv), (&xa_before, &hv_before), "the caller's inputs are untouched");
            if device.is_cpu() {
                // the plan's arena holds the steps' tensors only, never the inputs: fused, just the three outputs
                // (relu and neg fused into y, the cast into z); unfused, at most the six steps' tensors
                let st = plan.stats();
                let tensor = 32 * 4;
                let most = if options.no_fusion { 6 * tensor } else { 3 * tensor };
                assert!(st.memory_bytes >= 3 * tensor && st.memory_bytes <= most, "no memory for inputs: {st:?}");
            }
        }
    }
}

/// On GL, wgpu-hal panics ("Could not lock adapter context") when a thread waits more than 6 s for the GL
/// context, which a long run holds while the (software) GPU works. Dropping a plan releases GL buffers, which
/// takes the context: the drop must wait on the device's serial lock, as compile and run do, and not on the
/// context while another thread's long run holds it. Here a plan is dropped while a chain of matmuls that
/// takes several seconds on llvmpipe runs on another thread.
#[test]
fn gl_plan_dropped_while_another_thread_runs() {
    let Some(device) = common::gpu().filter(|d| d.capabilities().backend == webtensor::BackendKind::Gl) else {
        println!("SKIPPED: not a GL device");
        return;
    };
    let (n, chain) = (1024, 24);
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[n, n]).unwrap();
    let w = g.input("w", DType::F32, &[n, n]).unwrap();
    let mut y = x;
    for _ in 0..chain {
        y = g.matmul(y, w).unwrap();
    }
    let xv = HostTensor::f32(&[n, n], vec![1.0; n * n]).unwrap();
    let wv = HostTensor::f32(&[n, n], vec![1.0 / n as f32; n * n]).unwrap();
    let mut small_g = Graph::new();
    let a = small_g.input("a", DType::F32, &[256]).unwrap();
    let b = small_g.exp(a).unwrap();
    let mut small = device.compile(&small_g, &[b]).unwrap();
    small.run(&[(a, &HostTensor::f32(&[256], vec![0.0; 256]).unwrap())]).unwrap();
    let started = std::time::Instant::now();
    let out = std::thread::scope(|s| {
        // plans stay on the thread that made them; the device is shared
        let (tx, rx) = std::sync::mpsc::channel();
        let run = s.spawn(move || {
            let mut plan = device.compile(&g, &[y])?;
            tx.send(()).expect("the test waits");
            let t = std::time::Instant::now();
            let out = plan.run(&[(x, &xv), (w, &wv)]);
            println!("the long run took {:.1} s", t.elapsed().as_secs_f64());
            out
        });
        rx.recv().expect("compiled");
        std::thread::sleep(std::time::Duration::from_millis(300));
        drop(small); // waits for the run on the serial lock; must not panic
        run.join().expect("the long run does not panic")
    });
    println!("long GL run and concurrent drop: {:.1} s", started.elapsed().as_secs_f64());
    let out = out.unwrap();
    assert!(out[0].data.to_f32().iter().all(|&v| (v - 1.0).abs() < 1e-3), "the chain keeps ones");
}

#[test]
fn dead_nodes_are_not_run_and_memory_is_reused() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[1024]).unwrap();
    let _unused = g.exp(x).unwrap();
    let mut y = x;
    for _ in 0..8 {
        y = g.tanh(y).unwrap();
    }
    for device in common::devices() {
        let unfused = CompileOptions { no_fusion: true, ..Default::default() };
        let st = device.compile_with(&g, &[y], &unfused).unwrap().stats();
        assert_eq!(st.dispatches, 8, "the unused exp is removed");
        if !device.is_cpu() {
            // input + 2 ping-pong buffers for the chain (the output is one of them), not 9 tensors
            assert!(st.memory_bytes <= 3 * 4096, "{st:?}");
            let fused = device.compile(&g, &[y]).unwrap().stats();
            assert_eq!(fused.dispatches, 1, "the chain of tanh is one kernel: {fused:?}");
            assert_eq!(fused.memory_bytes, 2 * 4096, "input and output only: {fused:?}");
        }
    }
}

#[test]
fn matmul_kernel_choice() {
    let Some(device) = common::gpu() else {
        println!("SKIPPED: no GPU adapter");
        return;
    };
    let kernel = |m: usize, k: usize, n: usize, transpose_w: bool, choice: Option<webtensor::gpu::MatmulChoice>| {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[m, k]).unwrap();
        let w = if transpose_w {
            let w = g.input("w", DType::F32, &[n, k]).unwrap();
            g.t(w).unwrap()
        } else {
            g.input("w", DType::F32, &[k, n]).unwrap()
        };
        let y = g.matmul(x, w).unwrap();
        let plan = device.compile_with(&g, &[y], &CompileOptions { matmul: choice, ..Default::default() }).unwrap();
        plan.stats().kernels[0].clone()
    };
    let tiled = Some(webtensor::gpu::MatmulChoice::Tiled(webtensor::gpu::TILE_CONFIGS[0]));
    assert!(kernel(1, 1024, 129, true, None).starts_with("matvec"));
    assert!(kernel(1, 1024, 128, false, None).starts_with("matvec"));
    assert_eq!(kernel(256, 256, 256, false, tiled), "matmul_tiled 128x128x8");
    assert_eq!(kernel(256, 256, 256, true, tiled), "matmul_tiled 128x128x8");
    assert_eq!(kernel(255, 255, 255, false, tiled), "matmul", "K not a multiple of 4: generic kernel");
    assert_eq!(kernel(256, 256, 256, false, Some(webtensor::gpu::MatmulChoice::Generic)), "matmul");
}

#[test]
fn seed_example_exact() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[4, 2]).unwrap();
    let b = g.input("b", DType::F32, &[3, 2]).unwrap();
    let at = g.t(a).unwrap();
    let c = g.matmul(b, at).unwrap();
    let av = HostTensor::f32(&[4, 2], vec![2., 8., 5., 1., 4., 2., 8., 6.]).unwrap();
    let bv = HostTensor::f32(&[3, 2], vec![10., 5., 9., 9., 5., 4.]).unwrap();
    for device in common::devices() {
        let out = device.compile(&g, &[c]).unwrap().run(&[(a, &av), (b, &bv)]).unwrap();
        assert_eq!(out[0].shape, vec![3, 4]);
        assert_eq!(out[0].data.to_f32(), vec![60., 55., 50., 110., 90., 54., 54., 126., 42., 29., 28., 64.]);
    }
}

#[test]
fn backend_override_parses() {
    assert_eq!("gl".parse::<webtensor::BackendKind>().unwrap(), webtensor::BackendKind::Gl);
    assert_eq!("CPU".parse::<webtensor::BackendKind>().unwrap(), webtensor::BackendKind::Cpu);
    assert!("cuda".parse::<webtensor::BackendKind>().is_err());
    use webtensor::BackendKind::*;
    for kind in [Auto, Cpu, Vulkan, Gl, Metal, Dx12, WebGpu] {
        assert_eq!(kind.name().parse::<webtensor::BackendKind>().unwrap(), kind, "name() round-trips");
        assert_eq!(kind.to_string(), kind.name());
    }
    assert!(Device::with_backend(webtensor::BackendKind::Cpu).unwrap().is_cpu());
}

/// Every dtype a device lists runs there: f32, f16 and i32 as inputs cast to f32, the storage formats as resident
/// tables read by get_rows and as weights of a matmul. (GL lists f16, run packed without SHADER_F16.)
#[test]
fn every_listed_dtype_runs_on_its_device() {
    for device in common::devices() {
        let caps = device.capabilities();
        for &dt in &caps.dtypes {
            let mut g = Graph::new();
            let bs = dt.block_size().max(32);
            let out = if dt.is_storage_format() {
                let bytes = vec![0u8; dt.bytes_of(2 * bs).unwrap()];
                let w = device.upload("w", HostTensor::new(&[2, bs], Data::from_bytes(dt, &bytes)).unwrap()).unwrap();
                let (w, idx, x) = (
                    g.resident(&w).unwrap(),
                    g.input("i", DType::I32, &[1]).unwrap(),
                    g.input("x", DType::F32, &[1, bs]).unwrap(),
                );
                let rows = g.get_rows(w, idx).unwrap();
                let wt = g.t(w).unwrap();
                let y = g.matmul(x, wt).unwrap();
                let mut plan = device.compile(&g, &[rows, y]).unwrap_or_else(|e| panic!("{dt} on {}: {e}", caps.name));
                let xv = HostTensor::f32(&[1, bs], vec![1.0; bs]).unwrap();
                let iv = HostTensor::new(&[1], Data::I32(vec![1])).unwrap();
                plan.run(&[(idx, &iv), (x, &xv)]).unwrap_or_else(|e| panic!("{dt} on {}: {e}", caps.name))
            } else {
                let x = g.input("x", dt, &[3]).unwrap();
                let y = g.cast(x, DType::F32).unwrap();
                let mut plan = device.compile(&g, &[y]).unwrap_or_else(|e| panic!("{dt} on {}: {e}", caps.name));
                let xv = HostTensor::new(&[3], Data::from_f64(dt, &[1.0, -2.0, 3.0]).unwrap()).unwrap();
                plan.run(&[(x, &xv)]).unwrap_or_else(|e| panic!("{dt} on {}: {e}", caps.name))
            };
            let values: Vec<f32> = out.iter().flat_map(|t| t.data.to_f32()).collect();
            let want: Vec<f32> = if dt.is_storage_format() { vec![0.0; bs + 2] } else { vec![1.0, -2.0, 3.0] };
            assert_eq!(values, want, "{dt} on {}", caps.name);
        }
        assert!(caps.dtypes.contains(&DType::F16), "{} runs f16 (packed without SHADER_F16)", caps.name);
    }
}

/// A query's keys masked with −inf after its last visible one are not read (as ggml_flash_attn_ext skips masked
/// keys), so a batched row attends over its own length, not the longest row's: with NaN in those K and V rows its
/// output is the attention over its visible keys alone, bit for bit, on every backend.
#[test]
fn attention_does_not_read_the_keys_masked_past_a_rows_length() {
    use webtensor::Attention;
    let (h, hkv, s, d, visible) = (4usize, 2usize, 40usize, 64usize, 13usize);
    let val = |i: usize| ((i * 7919 % 1000) as f32 - 500.0) * 1e-3;
    let qv: Vec<f32> = (0..h * d).map(val).collect();
    let kv: Vec<f32> = (0..hkv * s * d).map(|i| if i / d % s < visible { val(i + 3) } else { f32::NAN }).collect();
    let vv: Vec<f32> = (0..hkv * s * d).map(|i| if i / d % s < visible { val(i + 5) } else { f32::NAN }).collect();
    let attend = |device: &Device, len: usize| {
        let mut g = Graph::new();
        let q = g.input("q", DType::F32, &[1, h, 1, d]).unwrap();
        let k = g.input("k", DType::F32, &[1, hkv, len, d]).unwrap();
        let v = g.input("v", DType::F32, &[1, hkv, len, d]).unwrap();
        let m = g.input("mask", DType::F32, &[1, 1, 1, len]).unwrap();
        let a = Attention { scale: 0.125, causal: false, mask: Some(m), kv_len: None, sinks: None };
        let o = g.attention(q, k, v, &a).unwrap();
        let mut plan = device.compile(&g, &[o]).unwrap();
        let rows = |x: &[f32]| -> Vec<f32> {
            x.chunks_exact(s * d).flat_map(|head| head[..len * d].iter().copied()).collect()
        };
        let mask: Vec<f32> = (0..len).map(|j| if j < visible { 0.0 } else { f32::NEG_INFINITY }).collect();
        let ins = [
            (q, HostTensor::f32(&[1, h, 1, d], qv.clone()).unwrap()),
            (k, HostTensor::f32(&[1, hkv, len, d], rows(&kv)).unwrap()),
            (v, HostTensor::f32(&[1, hkv, len, d], rows(&vv)).unwrap()),
            (m, HostTensor::f32(&[1, 1, 1, len], mask).unwrap()),
        ];
        let ins: Vec<_> = ins.iter().map(|(t, x)| (*t, x)).collect();
        plan.run(&ins).unwrap()[0].data.to_f32()
    };
    for device in common::devices() {
        let (tail, alone) = (attend(device, s), attend(device, visible));
        let name = &device.capabilities().name;
        assert!(alone.iter().all(|x| x.is_finite()), "{name}");
        let differ = tail.iter().zip(&alone).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert!(differ == 0, "{name}: {differ} of {} differ (first: {} against {})", alone.len(), tail[0], alone[0]);
    }
}
