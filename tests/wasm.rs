//! Library tests in a real browser: compiled to wasm32 and run in headless Chromium by wasm-bindgen-test
//! (`scripts/test-wasm.sh`). Chromium must be started with `--enable-unsafe-webgpu`: the WebGPU tests assert
//! that an adapter exists (SwiftShader in CI) and fail otherwise, they are never skipped.
//!
//! Covers asynchronous readback (the main thread stays responsive: the main thread stays responsive, 50 consecutive
//! readbacks, a readback while another compute is in flight), the seed example on WebGPU and on the wasm CPU
//! backend, a few ops against values computed here (the CPU backend's f32 matmul kernel among them), every block
//! type and the mixture-of-experts ops (`wasm/blocks.rs`), the linear-attention ops (`wasm/recurrent.rs`), and the JS
//! bindings (`webtensor::wasm`).
#![cfg(target_arch = "wasm32")]

use js_sys::{Array, Float32Array, Int32Array, Object, Reflect, Uint16Array};
use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;
use std::task::Poll;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;
use webtensor::wasm::{WebDevice, WebGraph};
use webtensor::{BackendKind, CompileOptions, DType, Device, Graph, HostTensor};

wasm_bindgen_test_configure!(run_in_browser);

#[path = "wasm/blocks.rs"]
mod blocks;
#[path = "wasm/recurrent.rs"]
mod recurrent;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout_closure(f: &Closure<dyn FnMut()>, ms: i32) -> i32;
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout_fn(f: &js_sys::Function, ms: i32) -> i32;
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn now() -> f64;
}

/// The browser's WebGPU device; fails the test when there is none (CI must expose SwiftShader).
async fn gpu() -> Device {
    let d = Device::with_backend_async(BackendKind::WebGpu)
        .await
        .expect("no WebGPU adapter: run Chromium with --enable-unsafe-webgpu");
    assert_eq!(d.capabilities().backend, webtensor::BackendKind::WebGpu);
    d
}

async fn devices() -> Vec<Device> {
    vec![gpu().await, Device::cpu()]
}

/// Resolves after `ms` milliseconds (a macrotask: the event loop runs in between).
async fn sleep(ms: i32) {
    let p = js_sys::Promise::new(&mut |resolve, _| {
        set_timeout_fn(&resolve, ms);
    });
    JsFuture::from(p).await.unwrap();
}

/// Polls both futures until both are done (a minimal `join`, so the test needs no extra crate).
async fn join2<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let (mut a, mut b) = (Box::pin(a), Box::pin(b));
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(|cx| {
        if ra.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        if ra.is_some() && rb.is_some() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    (ra.unwrap(), rb.unwrap())
}

fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((g as f64 - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: got {g}, want {w}");
    }
}

// ---- seed example (ggml examples/simple) -----------------------------------------------------------

const SEED: [f32; 12] = [60., 55., 50., 110., 90., 54., 54., 126., 42., 29., 28., 64.];

async fn seed_on(device: &Device) -> Vec<f32> {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[4, 2]).unwrap();
    let b = g.input("b", DType::F32, &[3, 2]).unwrap();
    let at = g.t(a).unwrap();
    let c = g.matmul(b, at).unwrap();
    let mut plan = device.compile_async(&g, &[c], &CompileOptions::default()).await.unwrap();
    let av = HostTensor::f32(&[4, 2], vec![2., 8., 5., 1., 4., 2., 8., 6.]).unwrap();
    let bv = HostTensor::f32(&[3, 2], vec![10., 5., 9., 9., 5., 4.]).unwrap();
    let out = plan.run_async(&[(a, &av), (b, &bv)]).await.unwrap();
    assert_eq!(out[0].shape, [3, 4]);
    out[0].data.to_f32()
}

#[wasm_bindgen_test]
async fn seed_example_webgpu() {
    assert_eq!(seed_on(&gpu().await).await, SEED);
}

#[wasm_bindgen_test]
async fn seed_example_cpu() {
    assert_eq!(seed_on(&Device::cpu()).await, SEED);
}

// ---- ops against values computed here -------------------------------------------------------------

#[wasm_bindgen_test]
async fn softmax_rms_norm_add_broadcast() {
    let (rows, cols) = (3usize, 37usize);
    let x: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919) % 23) as f32 * 0.37 - 4.0).collect();
    let bias: Vec<f32> = (0..cols).map(|j| j as f32 * 0.25 - 3.0).collect();
    let eps = 1e-6f32;

    let mut softmax = Vec::new();
    let mut rms = Vec::new();
    for r in x.chunks(cols) {
        let m = r.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let s: f64 = r.iter().map(|&v| (v as f64 - m).exp()).sum();
        softmax.extend(r.iter().map(|&v| (v as f64 - m).exp() / s));
        let ms = r.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / cols as f64;
        rms.extend(r.iter().map(|&v| v as f64 / (ms + eps as f64).sqrt()));
    }
    let added: Vec<f64> = x.iter().enumerate().map(|(i, &v)| v as f64 + bias[i % cols] as f64).collect();

    for device in devices().await {
        let name = device.capabilities().backend.name().to_string();
        let mut g = Graph::new();
        let tx = g.input("x", DType::F32, &[rows, cols]).unwrap();
        let tb = g.input("bias", DType::F32, &[cols]).unwrap();
        let s = g.softmax(tx).unwrap();
        let n = g.rms_norm(tx, eps).unwrap();
        let a = g.add(tx, tb).unwrap();
        let mut plan = device.compile_async(&g, &[s, n, a], &CompileOptions::default()).await.unwrap();
        let xv = HostTensor::f32(&[rows, cols], x.clone()).unwrap();
        let bv = HostTensor::f32(&[cols], bias.clone()).unwrap();
        let out = plan.run_async(&[(tx, &xv), (tb, &bv)]).await.unwrap();
        assert_close(&out[0].data.to_f32(), &softmax, 1e-5, &format!("softmax on {name}"));
        assert_close(&out[1].data.to_f32(), &rms, 1e-5, &format!("rms_norm on {name}"));
        assert_close(&out[2].data.to_f32(), &added, 1e-6, &format!("add broadcast on {name}"));
    }
}

// ---- readback is truly asynchronous ---------------------------------------------------------------

/// A plan computing `x · I` for x [m, k] and the identity I [k, k]: an exact result of m·k floats that takes
/// real GPU work.
async fn identity_matmul(device: &Device, m: usize, k: usize) -> (Graph, webtensor::Plan, Vec<webtensor::Tensor>) {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[m, k]).unwrap();
    let id = g.input("id", DType::F32, &[k, k]).unwrap();
    let c = g.matmul(x, id).unwrap();
    let plan = device.compile_async(&g, &[c], &CompileOptions::default()).await.unwrap();
    (g, plan, vec![x, id])
}

fn identity(k: usize) -> HostTensor {
    HostTensor::f32(&[k, k], (0..k * k).map(|i| if i / k == i % k { 1.0 } else { 0.0 }).collect()).unwrap()
}

#[wasm_bindgen_test]
async fn readback_1mib_keeps_main_thread_responsive() {
    let (m, k) = (1024, 256); // 1024·256 f32 = 1 MiB out; a few hundred ms of SwiftShader work
    let device = gpu().await;
    let (_g, mut plan, t) = identity_matmul(&device, m, k).await;
    let xs: Vec<f32> = (0..m * k).map(|i| (i % 4093) as f32 - 2000.0).collect();
    let xv = HostTensor::f32(&[m, k], xs.clone()).unwrap();
    let idv = identity(k);
    // Warm up once (first run may compile lazily in the browser).
    plan.run_async(&[(t[0], &xv), (t[1], &idv)]).await.unwrap();

    let fired_at = Rc::new(Cell::new(f64::NAN));
    let f = fired_at.clone();
    let cb = Closure::<dyn FnMut()>::new(move || f.set(now()));
    let t0 = now();
    set_timeout_closure(&cb, 0);
    let out = plan.run_async(&[(t[0], &xv), (t[1], &idv)]).await.unwrap();
    let resolved_at = now();
    // If the readback resolved very quickly, give the timer its chance (it must still fire within 100 ms).
    while fired_at.get().is_nan() && now() - t0 < 200.0 {
        sleep(5).await;
    }
    let fired = fired_at.get() - t0;
    web_sys::console::log_1(
        &format!("1 MiB readback: resolved after {:.1} ms, setTimeout(0) ran after {fired:.1} ms", resolved_at - t0)
            .into(),
    );
    assert!(fired <= 100.0, "setTimeout(0) ran after {fired} ms (main thread blocked?)");
    // On SwiftShader the readback takes far longer than a timer tick: the timer must have run while it was
    // pending, i.e. the readback yielded to the event loop instead of blocking it.
    if resolved_at - t0 > 100.0 {
        assert!(fired_at.get() < resolved_at, "the timer only ran after the readback resolved");
    }
    assert!(resolved_at - t0 < 2000.0, "readback took {} ms", resolved_at - t0);
    assert_eq!(out[0].data.as_bytes().len(), 1 << 20);
    assert_eq!(out[0].data.to_f32(), xs);
}

#[wasm_bindgen_test]
async fn fifty_consecutive_readbacks() {
    let n = 4096;
    let device = gpu().await;
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[n]).unwrap();
    let y = g.scale(x, 2.0).unwrap();
    let mut plan = device.compile_async(&g, &[y], &CompileOptions::default()).await.unwrap();
    for it in 0..50 {
        let xs: Vec<f32> = (0..n).map(|i| (i + 1000 * it) as f32).collect();
        let t0 = now();
        let out = plan.run_async(&[(x, &HostTensor::f32(&[n], xs.clone()).unwrap())]).await.unwrap();
        let dt = now() - t0;
        assert!(dt < 2000.0, "readback {it} took {dt} ms");
        let want: Vec<f32> = xs.iter().map(|v| v * 2.0).collect();
        assert_eq!(out[0].data.to_f32(), want, "readback {it}");
    }
}

#[wasm_bindgen_test]
async fn readback_while_another_compute_is_in_flight() {
    let device = gpu().await;
    let (m, k) = (256, 1024);
    let (_g1, mut big, t) = identity_matmul(&device, m, k).await;
    let xs: Vec<f32> = (0..m * k).map(|i| (i % 1000) as f32).collect();
    let xv = HostTensor::f32(&[m, k], xs.clone()).unwrap();
    let idv = identity(k);

    let mut g2 = Graph::new();
    let a = g2.input("a", DType::F32, &[1000]).unwrap();
    let a2 = g2.input("a2", DType::F32, &[1000]).unwrap();
    let b = g2.add(a, a2).unwrap();
    let mut small = device.compile_async(&g2, &[b], &CompileOptions::default()).await.unwrap();
    let av = HostTensor::f32(&[1000], (0..1000).map(|i| i as f32).collect()).unwrap();

    // The big run is polled first: it submits its dispatches and waits; the small one then submits and reads
    // back while the big compute is still in flight.
    let small_done_at = Rc::new(Cell::new(0.0));
    let sd = small_done_at.clone();
    let (r1, r2) = join2(big.run_async(&[(t[0], &xv), (t[1], &idv)]), async {
        let r = small.run_async(&[(a, &av), (a2, &av)]).await;
        sd.set(now());
        r
    })
    .await;
    assert_eq!(r1.unwrap()[0].data.to_f32(), xs);
    assert_eq!(r2.unwrap()[0].data.to_f32(), (0..1000).map(|i| 2.0 * i as f32).collect::<Vec<_>>());
    assert!(small_done_at.get() > 0.0);
}

// ---- the JS bindings ------------------------------------------------------------------------------

fn message(e: JsValue) -> String {
    Reflect::get(&e, &"message".into()).unwrap().as_string().unwrap_or_default()
}

#[wasm_bindgen_test]
async fn bindings_matmul_on_both_backends() {
    // [2, 3] · [3, 2]
    let a = Float32Array::from(&[1f32, 2., 3., 4., 5., 6.][..]);
    let b = Float32Array::from(&[7f32, 8., 9., 10., 11., 12.][..]);
    for backend in ["webgpu", "cpu"] {
        let c = webtensor::wasm::matmul(a.clone(), b.clone(), 2, 3, 2, Some(backend.into())).await.unwrap();
        assert_eq!(c.to_vec(), [58., 64., 139., 154.], "{backend}");
    }
    let e = webtensor::wasm::matmul(a, b, 2, 2, 2, Some("cpu".into())).await.unwrap_err();
    let msg = message(e.into());
    assert!(msg.contains("input 'a'") && msg.contains("6 values") && msg.contains("m = 2, k = 2"), "{msg}");
    assert!(!msg.contains("HostTensor"), "no internal name: {msg}");
}

#[wasm_bindgen_test]
async fn bindings_graph_and_plan() {
    let dev = WebDevice::create(Some("webgpu".into())).await.unwrap();
    assert_eq!(dev.backend(), "webgpu");
    assert!(!dev.is_cpu());
    assert!(dev.info().max_storage_binding_bytes >= (128 << 20) as f64);

    let mut g = WebGraph::new();
    let a = g.input("a", vec![4, 2], None).unwrap();
    let b = g.input("b", vec![3, 2], None).unwrap();
    let at = g.t(&a).unwrap();
    let c = g.matmul(&b, &at).unwrap();
    let r = g.relu(&c).unwrap();
    let plan = dev.compile(&g, Array::of2(&JsValue::from(c), &JsValue::from(r)), JsValue::UNDEFINED).await.unwrap();
    assert_eq!(plan.input_names(), ["a", "b"]);

    let inputs = Object::new();
    Reflect::set(&inputs, &"a".into(), &Float32Array::from(&[2f32, 8., 5., 1., 4., 2., 8., 6.][..])).unwrap();
    Reflect::set(&inputs, &"b".into(), &Float32Array::from(&[10f32, 5., 9., 9., 5., 4.][..])).unwrap();
    let out = plan.run(inputs.into()).await.unwrap();
    assert_eq!(out[0].to_vec(), SEED);
    assert_eq!(out[1].to_vec(), SEED);

    // Errors carry the library's message.
    let bad = Object::new();
    Reflect::set(&bad, &"a".into(), &Float32Array::new_with_length(3)).unwrap();
    let e = plan.run(bad.into()).await.unwrap_err();
    let msg = message(e.into());
    assert!(msg.contains("input 'a'"), "{msg}");
    let e = g.matmul(&a, &b).unwrap_err();
    let msg = message(e.into());
    assert!(msg.contains("matmul: incompatible shapes [4, 2] and [3, 2]"), "{msg}");

    // Positional inputs, in the order of inputNames.
    let av = Float32Array::from(&[2f32, 8., 5., 1., 4., 2., 8., 6.][..]);
    let bv = Float32Array::from(&[10f32, 5., 9., 9., 5., 4.][..]);
    let out = plan.run(Array::of2(&av, &bv).into()).await.unwrap();
    assert_eq!(out[0].to_vec(), SEED);
    let e = plan.run(Array::of1(&av).into()).await.unwrap_err();
    let msg = message(e.into());
    assert!(msg.contains("expected 2 input arrays"), "{msg}");

    // One plan runs once at a time; the second call is rejected with a clear message, the first completes.
    let (r1, r2) = join2(plan.run(Array::of2(&av, &bv).into()), plan.run(Array::of2(&av, &bv).into())).await;
    assert_eq!(r1.unwrap()[0].to_vec(), SEED);
    let msg = message(r2.unwrap_err().into());
    assert!(msg.contains("already running"), "{msg}");
}

/// The runtime in JS: a weight uploaded from raw bytes, an f16 state written by `setRows` at run-time int32
/// indices and read by a second plan, `runWith`'s skipped, partial and int32 outputs, f16 inputs as half bits,
/// and the errors naming the tensor; on WebGPU and on the wasm CPU backend.
#[wasm_bindgen_test]
async fn bindings_resident_state_and_partial_readback() {
    for backend in ["webgpu", "cpu"] {
        let dev = WebDevice::create(Some(backend.into())).await.unwrap();
        let wv = Float32Array::from(&[2f32, 8., 5., 1., 4., 2., 8., 6.][..]);
        let w = dev.upload("w", "float32", vec![4, 2], wv.buffer().into()).unwrap();
        let cache = dev.state("cache", "f16", vec![4, 4]).unwrap();
        assert_eq!(dev.resident_bytes(), 32.0 + 32.0, "{backend}");
        let e = dev.upload("w2", "float32", vec![4, 3], wv.clone().into()).err().unwrap();
        let msg = message(e.into());
        assert!(msg.contains("w2"), "{backend}: {msg}");

        let mut g = WebGraph::new();
        let x = g.input("x", vec![3, 2], None).unwrap();
        let idx = g.input("idx", vec![3], Some("int32".into())).unwrap();
        let h = g.input("h", vec![2], Some("float16".into())).unwrap();
        let wt = g.resident(&w).unwrap();
        let wtt = g.t(&wt).unwrap();
        let y = g.matmul(&x, &wtt).unwrap(); // [3, 4]
        let st = g.state(&cache).unwrap();
        let written = g.set_rows(&st, &idx, &y).unwrap();
        let am = g.argmax(&y).unwrap();
        let hf = g.cast(&h, "float32").unwrap();
        let outs = Array::of4(&written.into(), &y.into(), &am.into(), &hf.into());
        // compile options: the generic matmul kernel pinned, every non-input tensor NaN-filled before each run
        let options = Object::new();
        Reflect::set(&options, &"matmul".into(), &"generic".into()).unwrap();
        Reflect::set(&options, &"poison".into(), &true.into()).unwrap();
        let plan = dev.compile(&g, outs, options.into()).await.unwrap();
        assert_eq!(plan.input_dtypes(), ["float32", "int32", "float16"]);

        let inputs = Object::new();
        Reflect::set(&inputs, &"x".into(), &Float32Array::from(&[1f32, 0., 0., 1., 1., 1.][..])).unwrap();
        Reflect::set(&inputs, &"idx".into(), &Int32Array::from(&[3, 0, 2][..])).unwrap();
        let halves = [half::f16::from_f32(1.5).to_bits(), half::f16::from_f32(-2.25).to_bits()];
        Reflect::set(&inputs, &"h".into(), &Uint16Array::from(&halves[..])).unwrap();
        let fetch = Array::of4(&"skip".into(), &Array::of2(&2.into(), &3.into()), &"all".into(), &"all".into());
        let out = plan.run_with(inputs.clone().into(), fetch.into()).await.unwrap();
        assert!(out.get(0).is_null(), "{backend}: a skipped output is null");
        let row2: Float32Array = out.get(1).dyn_into().unwrap();
        assert_eq!(row2.to_vec(), [10., 6., 6., 14.], "{backend}");
        let am: Int32Array = out.get(2).dyn_into().expect("argmax comes back as an Int32Array");
        assert_eq!(am.to_vec(), [3, 0, 3], "{backend}");
        let hv: Float32Array = out.get(3).dyn_into().unwrap();
        assert_eq!(hv.to_vec(), [1.5, -2.25], "{backend}");

        // the state kept the rows, in f16; a second plan reads them
        let kept: Float32Array = cache.read().await.unwrap().dyn_into().unwrap();
        let want = [8f32, 1., 2., 6., 0., 0., 0., 0., 10., 6., 6., 14., 2., 5., 4., 8.];
        assert_eq!(kept.to_vec(), want, "{backend}");
        let mut g2 = WebGraph::new();
        let s2 = g2.state(&cache).unwrap();
        let rows = g2.slice(&s2, 0, 2, 4).unwrap();
        let rows = g2.cast(&rows, "float32").unwrap();
        let sums = g2.sum(&rows).unwrap();
        let plan2 = dev.compile(&g2, Array::of1(&sums.into()), JsValue::UNDEFINED).await.unwrap();
        let out2 = plan2.run(Object::new().into()).await.unwrap();
        assert_eq!(out2[0].to_vec(), [36., 19.], "{backend}");
        assert_eq!(dev.resident_bytes(), 64.0, "{backend}: a resident counted once however many plans use it");

        // errors name the input and what it must be
        Reflect::set(&inputs, &"idx".into(), &Float32Array::from(&[3f32, 0., 2.][..])).unwrap();
        let e = plan.run_with(inputs.into(), JsValue::UNDEFINED).await.unwrap_err();
        let msg = message(e.into());
        assert!(msg.contains("idx") && msg.contains("Int32Array"), "{backend}: {msg}");
        let e = dev.state("q", "q4_0", vec![4, 32]).err().unwrap();
        assert!(message(e.into()).contains("state"), "{backend}");
        cache.zero().unwrap();
        let zeroed: Float32Array = cache.read().await.unwrap().dyn_into().unwrap();
        assert!(zeroed.to_vec().iter().all(|&v| v == 0.0), "{backend}");
    }
}

/// `runInto`: every output written into the typed array given for it (NaN-filled before the run) and the same
/// arrays resolved, `null` leaving an output unread, float16 outputs converted into a `Float32Array`, int32 ones
/// into an `Int32Array`; wrong counts, types and lengths rejected before the run, naming the output and its shape;
/// on WebGPU and on the wasm CPU backend.
#[wasm_bindgen_test]
async fn bindings_run_into_given_arrays() {
    for backend in ["webgpu", "cpu"] {
        let dev = WebDevice::create(Some(backend.into())).await.unwrap();
        let mut g = WebGraph::new();
        let x = g.input("x", vec![2, 3], None).unwrap();
        let w = g.input("w", vec![3, 2], None).unwrap();
        let y = g.matmul(&x, &w).unwrap(); // [2, 2]
        let am = g.argmax(&y).unwrap();
        let yh = g.cast(&y, "float16").unwrap();
        let outs = Array::of3(&y.into(), &am.into(), &yh.into());
        let plan = dev.compile(&g, outs, JsValue::UNDEFINED).await.unwrap();
        let inputs = Array::of2(
            &Float32Array::from(&[1f32, 2., 3., 4., 5., 6.][..]),
            &Float32Array::from(&[7f32, 8., 9., 10., 11., -12.][..]),
        );
        let nan = || Float32Array::from(&[f32::NAN; 4][..]);
        let (yv, amv, yhv) = (nan(), Int32Array::from(&[-7, -7][..]), nan());
        let given = Array::of3(&yv, &amv, &yhv);
        let got = plan.run_into(inputs.clone().into(), given.clone().into()).await.unwrap();
        assert!(got.get(0) == JsValue::from(&yv) && got.get(2) == JsValue::from(&yhv), "{backend}: the arrays given");
        assert_eq!(yv.to_vec(), [58., -8., 139., 10.], "{backend}");
        assert_eq!(amv.to_vec(), [0, 0], "{backend}");
        assert_eq!(yhv.to_vec(), [58., -8., 139., 10.], "{backend}: float16 output");

        // null leaves an output on the device: the array given for another is still written
        let only = nan();
        let got = plan.run_into(inputs.clone().into(), Array::of3(&JsValue::NULL, &only, &JsValue::NULL).into()).await;
        assert!(got.as_ref().is_err(), "{backend}: an Int32Array is required for the argmax, not a Float32Array");
        let only = Int32Array::from(&[-7, -7][..]);
        let got = plan.run_into(inputs.clone().into(), Array::of3(&JsValue::NULL, &only, &JsValue::NULL).into()).await;
        let got = got.unwrap();
        assert!(got.get(0).is_null() && got.get(2).is_null(), "{backend}");
        assert_eq!(only.to_vec(), [0, 0], "{backend}");

        // errors, before anything runs: not an array, count, length, type
        for not_array in [JsValue::UNDEFINED, JsValue::NULL, nan().into()] {
            let e = plan.run_into(inputs.clone().into(), not_array).await.unwrap_err();
            let msg = message(e.into());
            assert!(msg.contains("runInto: outputs must be an array"), "{backend}: {msg}");
        }
        let e = plan.run_into(inputs.clone().into(), Array::of1(&nan()).into()).await.unwrap_err();
        let msg = message(e.into());
        assert!(msg.contains("1 output arrays given for 3 outputs"), "{backend}: {msg}");
        let short = Float32Array::from(&[f32::NAN; 3][..]);
        let e = plan.run_into(inputs.clone().into(), Array::of3(&short, &amv, &yhv).into()).await.unwrap_err();
        let msg = message(e.into());
        assert!(msg.contains("outputs[0] has 3 elements, output 0 [2, 2] holds 4"), "{backend}: {msg}");
        assert!(short.to_vec().iter().all(|v| v.is_nan()), "{backend}: nothing written on an error");
        let e = plan
            .run_into(inputs.into(), Array::of3(&yv, &amv, &Uint16Array::new_with_length(4)).into())
            .await
            .unwrap_err();
        let msg = message(e.into());
        assert!(msg.contains("outputs[2] must be a Float32Array or null (output 2 [2, 2])"), "{backend}: {msg}");
    }
}

/// Random blocks of a 32-element block type (`bytes` per block, an f16 scale at 0 and, for Q4_1, a min at 2).
fn random_blocks(rows: usize, k: usize, bytes: usize, has_min: bool, seed: u32) -> Vec<u8> {
    let mut state = seed.wrapping_mul(2654435761).wrapping_add(1);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    let mut out = Vec::with_capacity(rows * k / 32 * bytes);
    for _ in 0..rows * k / 32 {
        let mut blk: Vec<u8> = (0..bytes).map(|_| next() as u8).collect();
        let scale = half::f16::from_f32((next() % 1000) as f32 / 1000.0 * 0.02 + 0.001).to_le_bytes();
        blk[..2].copy_from_slice(&scale);
        if has_min {
            blk[2..4].copy_from_slice(&half::f16::from_f32(-((next() % 100) as f32) / 1000.0).to_le_bytes());
        }
        out.extend(blk);
    }
    out
}

/// The WebGPU device has a name: wgpu's (the adapter info's description) is empty in Chromium, so the browser's
/// vendor / architecture stand in ("google / swiftshader" in CI).
#[wasm_bindgen_test]
async fn webgpu_adapter_has_a_name() {
    let name = gpu().await.capabilities().name.clone();
    assert!(!name.trim().is_empty(), "the WebGPU adapter's name is empty");
}

/// The wasm CPU backend's f32 matmul (its own simd128 kernel from 16 rows, `gemm`'s below) at the edges of its
/// blocking (4×8 tiles, 64 rows, 512 columns, 256 K steps), with row-major and transposed (`t()` view) operands,
/// a batch and a fused bias, outputs NaN-filled before the run, against f64 sums computed here.
#[wasm_bindgen_test]
async fn cpu_f32_matmul_matches_f64_sums() {
    let dev = Device::cpu();
    let options = CompileOptions { poison: true, ..CompileOptions::default() };
    let val = |i: usize, seed: usize| (((i * 37 + seed * 11) % 97) as f32 - 48.0) / 31.0;
    for (m, k, n) in [(15, 9, 7), (16, 5, 9), (17, 257, 33), (65, 300, 513), (128, 64, 8)] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let batch = if m == 17 { 2 } else { 1 };
            let (a_shape, b_shape) = (if ta { [batch, k, m] } else { [batch, m, k] }, if tb { [n, k] } else { [k, n] });
            let av: Vec<f32> = (0..batch * m * k).map(|i| val(i, 1)).collect();
            let bv: Vec<f32> = (0..k * n).map(|i| val(i, 2)).collect();
            let biasv: Vec<f32> = (0..n).map(|i| val(i, 3)).collect();
            let mut g = Graph::new();
            let a = g.input("a", DType::F32, &a_shape).unwrap();
            let b = g.input("b", DType::F32, &b_shape).unwrap();
            let bias = g.input("bias", DType::F32, &[n]).unwrap();
            let at = if ta { g.transpose(a, 1, 2).unwrap() } else { a };
            let bt = if tb { g.t(b).unwrap() } else { b };
            let c = g.matmul(at, bt).unwrap();
            let y = g.add(c, bias).unwrap();
            let mut plan = dev.compile_async(&g, &[y], &options).await.unwrap();
            let (ah, bh) =
                (HostTensor::f32(&a_shape, av.clone()).unwrap(), HostTensor::f32(&b_shape, bv.clone()).unwrap());
            let biash = HostTensor::f32(&[n], biasv.clone()).unwrap();
            let got = plan.run_async(&[(a, &ah), (b, &bh), (bias, &biash)]).await.unwrap()[0].data.to_f32();
            let a_at = |z: usize, i: usize, p: usize| av[z * m * k + if ta { p * m + i } else { i * k + p }] as f64;
            let b_at = |p: usize, j: usize| bv[if tb { j * k + p } else { p * n + j }] as f64;
            for z in 0..batch {
                for i in 0..m {
                    for j in 0..n {
                        let want: f64 = (0..k).map(|p| a_at(z, i, p) * b_at(p, j)).sum::<f64>() + biasv[j] as f64;
                        let v = got[(z * m + i) * n + j] as f64;
                        assert!(
                            (v - want).abs() <= 1e-5 * (k as f64).sqrt() * want.abs().max(1.0),
                            "{m}x{k}x{n} ta={ta} tb={tb}: c[{z}, {i}, {j}] = {v}, want {want}"
                        );
                    }
                }
            }
        }
    }
}

/// The quantized mat-vec of the wasm CPU backend (the simd128 kernels, with activations rounded to 8 bits) and
/// of WebGPU, against the weight dequantized by `cast` and multiplied here in f64: Q4_0, Q4_1, Q8_0.
#[wasm_bindgen_test]
async fn quantized_matvec_matches_the_dequantized_weight() {
    let (n, k) = (24usize, 256usize);
    for backend in [BackendKind::Cpu, BackendKind::WebGpu] {
        let dev = Device::with_backend_async(backend).await.unwrap();
        for (dtype, bytes, has_min) in [(DType::Q4_0, 18, false), (DType::Q4_1, 20, true), (DType::Q8_0, 34, false)] {
            let wb = random_blocks(n, k, bytes, has_min, n as u32 + bytes as u32);
            let w = dev.upload_bytes("w", dtype, &[n, k], webtensor::Bytes::from_vec(wb)).unwrap();
            let xs: Vec<f32> = (0..k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect();
            let mut g = Graph::new();
            let x = g.input("x", DType::F32, &[1, k]).unwrap();
            let wt = g.resident(&w).unwrap();
            let t = g.t(wt).unwrap();
            let y = g.matmul(x, t).unwrap();
            let wf = g.cast(wt, DType::F32).unwrap();
            let mut plan = dev.compile_async(&g, &[y, wf], &CompileOptions::default()).await.unwrap();
            let xv = HostTensor::f32(&[1, k], xs.clone()).unwrap();
            let out = plan.run_async(&[(x, &xv)]).await.unwrap();
            let (got, dense) = (out[0].data.to_f32(), out[1].data.to_f32());
            for r in 0..n {
                let row = &dense[r * k..(r + 1) * k];
                let want: f64 = row.iter().zip(&xs).map(|(&a, &b)| a as f64 * b as f64).sum();
                let scale: f64 = row.iter().zip(&xs).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                let err = (got[r] as f64 - want).abs();
                assert!(
                    err <= 0.01 * scale + 1e-6,
                    "{backend:?} {dtype}: row {r}: {} vs {want} (scale {scale})",
                    got[r]
                );
            }
        }
    }
}

#[wasm_bindgen_test]
async fn bindings_device_choice() {
    let auto = WebDevice::create(None).await.unwrap();
    assert_eq!(auto.backend(), "webgpu", "auto must pick WebGPU when the browser has it");
    let cpu = WebDevice::create(Some("cpu".into())).await.unwrap();
    assert!(cpu.is_cpu());
    assert_eq!(cpu.info().backend, "cpu");
    let e = WebDevice::create(Some("vulkan".into())).await.err().unwrap();
    let msg = message(e.into());
    assert!(msg.contains("not available in the browser"), "{msg}");
    let e = WebDevice::create(Some("tpu".into())).await.err().unwrap();
    let msg = message(e.into());
    assert!(msg.contains("unknown backend 'tpu'"), "{msg}");
}

/// WebGPU rejects two bindings that overlap in one dispatch when one is writable, and wgpu's native backends do
/// not check it: operands that share memory (`x + x`, `matmul(x, t(x))`, in-place) must be bound once.
#[wasm_bindgen_test]
async fn same_operand_twice_webgpu() {
    let device = gpu().await;
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[8]).unwrap();
    let b = g.add(a, a).unwrap();
    let mut plan = device.compile_async(&g, &[b], &CompileOptions::default()).await.unwrap();
    let av = HostTensor::f32(&[8], (0..8).map(|i| i as f32).collect()).unwrap();
    let out = plan.run_async(&[(a, &av)]).await.unwrap();
    assert_eq!(out[0].data.to_f32(), (0..8).map(|i| 2.0 * i as f32).collect::<Vec<_>>());

    // matmul(x, t(x)), concat(t, t), softmax(x, mask = x), and an in-place chain, against the CPU backend
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[8, 8]).unwrap();
    let xt = g.t(x).unwrap();
    let m = g.matmul(x, xt).unwrap();
    let c = g.concat(&[x, x], 0).unwrap();
    let s = g.softmax_ext(x, Some(x), 0.5).unwrap();
    let e = g.exp(m).unwrap();
    let e = g.tanh(e).unwrap();
    let e = g.softmax(e).unwrap();
    let xv = HostTensor::f32(&[8, 8], (0..64).map(|i| (i % 7) as f32 * 0.25 - 0.5).collect()).unwrap();
    let mut gpu_plan = device.compile_async(&g, &[m, c, s, e], &CompileOptions::default()).await.unwrap();
    let got = gpu_plan.run_async(&[(x, &xv)]).await.unwrap();
    let mut cpu_plan = Device::cpu().compile_async(&g, &[m, c, s, e], &CompileOptions::default()).await.unwrap();
    let want = cpu_plan.run_async(&[(x, &xv)]).await.unwrap();
    for (gt, wt) in got.iter().zip(&want) {
        for (p, q) in gt.data.to_f32().iter().zip(wt.data.to_f32()) {
            assert!((p - q).abs() <= 1e-5 * (1.0 + q.abs()), "{p} vs {q}");
        }
    }
}

/// On wasm32 `usize` is 32 bits: byte sizes are computed in u64, so a tensor of 4 GiB or more is rejected with
/// `LimitExceeded` rather than overflowing.
#[wasm_bindgen_test]
async fn huge_tensor_is_rejected_not_overflowed() {
    for device in devices().await {
        let mut g = Graph::new();
        let x = g.input("x", DType::F32, &[32768, 65536]).unwrap(); // 2³¹ elements, 8 GiB
        let y = g.scale(x, 2.0).unwrap();
        let r = device.compile_async(&g, &[y], &CompileOptions::default()).await;
        assert!(r.is_err(), "compiling an 8 GiB tensor succeeded on {}", device.capabilities().backend);
    }
}

/// f16 tensors on the browser's adapter, which lacks shader-f16: stored packed in u32 words and unpacked in the
/// shader (adapters without shader-f16), odd element counts and offsets included; fused chains and a matmul epilogue too.
#[wasm_bindgen_test]
async fn f16_packed_and_fused_ops_match_the_cpu() {
    let device = gpu().await;
    assert!(!device.capabilities().shader_f16, "SwiftShader is expected to lack shader-f16");
    let mut g = Graph::new();
    let x = g.input("x", DType::F16, &[7, 33]).unwrap();
    let w = g.input("w", DType::F16, &[13, 33]).unwrap();
    let b = g.input("b", DType::F32, &[13]).unwrap();
    let wt = g.t(w).unwrap();
    let y = g.matmul(x, wt).unwrap(); // f16 x f16 -> f16
    let y = g.cast(y, DType::F32).unwrap();
    let y = g.add(y, b).unwrap();
    let y = g.silu(y).unwrap(); // fused chain
    let s = g.softmax(x).unwrap(); // f16 rows
    let n = g.rms_norm(x, 1e-6).unwrap();
    let tail = g.slice(x, 1, 3, 30).unwrap(); // odd offset view of packed words
    let e = g.exp(tail).unwrap();
    let values = |n: usize, k: u32| -> Vec<half::f16> {
        (0..n as u32).map(|i| half::f16::from_f32(((i * 37 + k) % 101) as f32 / 50.0 - 1.0)).collect()
    };
    let xv = HostTensor::new(&[7, 33], webtensor::Data::F16(values(7 * 33, 1))).unwrap();
    let wv = HostTensor::new(&[13, 33], webtensor::Data::F16(values(13 * 33, 2))).unwrap();
    let bv = HostTensor::f32(&[13], (0..13).map(|i| i as f32 * 0.1).collect()).unwrap();
    let feed = [(x, &xv), (w, &wv), (b, &bv)];
    let outs = [y, s, n, e];
    let got =
        device.compile_async(&g, &outs, &CompileOptions::default()).await.unwrap().run_async(&feed).await.unwrap();
    let want = Device::cpu()
        .compile_async(&g, &outs, &CompileOptions::default())
        .await
        .unwrap()
        .run_async(&feed)
        .await
        .unwrap();
    for (gt, wt) in got.iter().zip(&want) {
        assert_eq!(gt.shape, wt.shape);
        let want64: Vec<f64> = wt.data.to_f64();
        assert_close(&gt.data.to_f32(), &want64, 2e-3, "f16 on WebGPU vs CPU");
    }
}
