//! Runtime faults: device loss, out-of-memory, shader validation errors and readbacks that
//! cannot complete surface as `Error`s from compile or run, never as a panic or a hang; after a device loss a
//! new device can be made and used.
//!
//! Which faults are real: the device loss is real (`wgpu::Device::destroy` through `Device::destroy_for_tests`),
//! the shader validation errors are real (invalid WGSL built on the path compile builds its kernels on), the
//! limits are the adapter's own, and the out-of-memory error is real: a child process of this test binary runs
//! under an address-space limit (`ulimit -v`), so the driver's allocation fails without the machine's memory
//! ever being used. The readback bound is exercised in a child process with `WEBTENSOR_READBACK_TIMEOUT_MS=1`.

mod common;

use common::reference::{nmse, u};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use webtensor::gpu::MatmulChoice;
use webtensor::{BackendKind, CompileOptions, DType, Data, Device, Error, Graph, HostTensor, Tensor};

/// A fault must be reported within this time.
const FAST: Duration = Duration::from_secs(10);

/// Matmul pinned to the default tiled kernel, so that no test waits for the per-device tuning.
fn opts() -> CompileOptions {
    CompileOptions { matmul: Some(MatmulChoice::Tiled(webtensor::gpu::DEFAULT_CONFIG)), ..Default::default() }
}

/// The backend of the test GPU, or None (and SKIPPED printed) without one.
fn gpu_kind(test: &str) -> Option<BackendKind> {
    match common::gpu() {
        Some(d) => Some(d.capabilities().backend),
        None => {
            println!("{test}: SKIPPED: no GPU adapter");
            None
        }
    }
}

fn host(shape: &[usize], seed: u64) -> HostTensor {
    let n = shape.iter().product();
    HostTensor::new(shape, Data::from_f64(DType::F32, &(0..n).map(|i| u(i, seed)).collect::<Vec<_>>()).unwrap())
        .unwrap()
}

/// relu(a @ b) for [n, n] inputs: the graph, its inputs and output, and input values.
fn matmul_graph(n: usize) -> (Graph, [Tensor; 2], Tensor, [HostTensor; 2]) {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, &[n, n]).unwrap();
    let b = g.input("b", DType::F32, &[n, n]).unwrap();
    let c = g.matmul(a, b).unwrap();
    let r = g.relu(c).unwrap();
    (g, [a, b], r, [host(&[n, n], 1), host(&[n, n], 2)])
}

/// Compiles and runs relu(a @ b) on `device` and checks it against the CPU backend.
fn check_matmul(device: &Device, n: usize) {
    let (g, [a, b], r, [av, bv]) = matmul_graph(n);
    let feed = [(a, &av), (b, &bv)];
    let want = Device::cpu().compile(&g, &[r]).unwrap().run(&feed).unwrap().remove(0).data.to_f64();
    let got = device.compile_with(&g, &[r], &opts()).unwrap().run(&feed).unwrap().remove(0).data.to_f64();
    let e = nmse(&got, &want);
    assert!(e <= 1e-7, "{n}x{n} matmul on {device:?}: NMSE {e:.3e}");
}

/// Asserts that `r` is an `Error::Gpu` saying the device was lost, returned within [`FAST`] of `start`.
fn assert_lost<T>(what: &str, start: Instant, r: webtensor::Result<T>) {
    let elapsed = start.elapsed();
    let e = match r {
        Ok(_) => panic!("{what} succeeded on a destroyed device"),
        Err(e) => e,
    };
    println!("{what}: {e} ({elapsed:?})");
    assert!(matches!(e, Error::Gpu { .. }), "{what}: expected Error::Gpu, got {e:?}");
    assert!(e.to_string().contains("device was lost"), "{what}: the message does not say the device was lost: {e}");
    assert!(elapsed < FAST, "{what} took {elapsed:?}");
}

#[test]
fn device_loss_fails_compile_and_run_quickly() {
    capture_logs();
    let Some(kind) = gpu_kind("device_loss_fails_compile_and_run_quickly") else { return };
    let device = Device::with_backend(kind).unwrap();
    let (g, [a, b], r, [av, bv]) = matmul_graph(64);
    let feed = [(a, &av), (b, &bv)];
    let mut ran = device.compile_with(&g, &[r], &opts()).unwrap();
    ran.run(&feed).unwrap();
    let mut never_ran = device.compile_with(&g, &[r], &opts()).unwrap();

    device.destroy_for_tests();

    assert_lost("compile after the loss", Instant::now(), device.compile_with(&g, &[r], &opts()));
    // a graph with kernels the device has not built yet
    let mut g2 = Graph::new();
    let x = g2.input("x", DType::F32, &[1000]).unwrap();
    let y = g2.exp(x).unwrap();
    let s = g2.sum(y).unwrap();
    assert_lost("compile of new kernels after the loss", Instant::now(), device.compile(&g2, &[s]));
    for i in 0..3 {
        assert_lost(&format!("run {i} of a plan that ran before the loss"), Instant::now(), ran.run(&feed));
        assert_lost(&format!("run {i} of a plan that never ran"), Instant::now(), never_ran.run(&feed));
    }
    // bad inputs are still reported as such
    assert!(matches!(ran.run(&[(a, &av)]), Err(Error::BadInput { .. })));
    drop(ran);
    drop(never_ran);
    // destroying twice is harmless
    device.destroy_for_tests();
    assert_lost("compile after a second destroy", Instant::now(), device.compile_with(&g, &[r], &opts()));
    assert_no_uncaptured_errors();
}

/// A loss while the GPU works on a run (another thread destroys the device): the run fails with the device-lost
/// error, or succeeds where the GPU finished first; every later run fails; nothing panics or hangs.
#[test]
fn device_loss_during_a_run() {
    capture_logs();
    let Some(kind) = gpu_kind("device_loss_during_a_run") else { return };
    let device = Device::with_backend(kind).unwrap();
    // a 512^3 matmul: a few hundred ms on lavapipe (the run ends when the GPU has finished its work)
    let (g, [a, b], r, [av, bv]) = matmul_graph(512);
    let mut plan = device.compile_with(&g, &[r], &opts()).unwrap();
    let feed = [(a, &av), (b, &bv)];
    let destroyer = {
        let device = device.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            device.destroy_for_tests();
        })
    };
    let start = Instant::now();
    match plan.run(&feed) {
        Ok(_) => println!("the run finished before the loss ({:?}): the loss hit no run", start.elapsed()),
        Err(e) => assert_lost("the run during the loss", start, Err::<(), _>(e)),
    }
    destroyer.join().unwrap();
    assert_lost("the run after the loss", Instant::now(), plan.run(&feed));
    assert_lost("compile after the loss", Instant::now(), device.compile_with(&g, &[r], &opts()));
    assert_no_uncaptured_errors();
}

#[test]
fn a_new_device_works_after_a_loss() {
    capture_logs();
    let Some(kind) = gpu_kind("a_new_device_works_after_a_loss") else { return };
    let lost = Device::with_backend(kind).unwrap();
    check_matmul(&lost, 64);
    let (g, [a, b], r, [av, bv]) = matmul_graph(64);
    let mut plan = lost.compile_with(&g, &[r], &opts()).unwrap();
    lost.destroy_for_tests();
    assert_lost("run after the loss", Instant::now(), plan.run(&[(a, &av), (b, &bv)]));

    let fresh = Device::with_backend(kind).unwrap();
    check_matmul(&fresh, 64);
    // the dead device and its plan stay dead, and dropping them is harmless
    assert_lost("run of the old plan", Instant::now(), plan.run(&[(a, &av), (b, &bv)]));
    drop(plan);
    drop(lost);
    check_matmul(&fresh, 64);
    assert_no_uncaptured_errors();
}

/// Collects webtensor's log records (debug and up), to see the failing WGSL logged.
struct Capture;
static LOGS: Mutex<Vec<String>> = Mutex::new(Vec::new());
impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Debug && m.target().starts_with("webtensor")
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            LOGS.lock().unwrap().push(format!("{} {}", r.level(), r.args()));
        }
    }
    fn flush(&self) {}
}
static CAPTURE: Capture = Capture;

/// Starts collecting webtensor's log records into [`LOGS`] (once per process).
fn capture_logs() {
    if log::set_logger(&CAPTURE).is_ok() {
        log::set_max_level(log::LevelFilter::Debug);
    }
}

/// Asserts that wgpu reported no error outside an error scope (webtensor logs those as "uncaptured").
fn assert_no_uncaptured_errors() {
    let logs = LOGS.lock().unwrap();
    let uncaptured: Vec<&String> = logs.iter().filter(|l| l.contains("uncaptured")).collect();
    assert!(uncaptured.is_empty(), "wgpu errors outside any error scope:\n{uncaptured:#?}");
}

#[test]
fn invalid_wgsl_is_an_error_and_is_logged() {
    let Some(device) = common::gpu() else {
        println!("invalid_wgsl_is_an_error_and_is_logged: SKIPPED: no GPU adapter");
        return;
    };
    capture_logs();
    let cases: [(&str, &str, &[&str]); 4] = [
        (
            "an undefined identifier",
            "@compute @workgroup_size(64) fn main() { let x = undefined_thing_17 + 1u; }",
            &["undefined_thing_17"],
        ),
        ("a syntax error", "@compute @workgroup_size(64) fn main() { let x: u32 = ; }", &["expected"]),
        (
            "a type error",
            "@group(0) @binding(0) var<storage, read_write> out_buf: array<u32>;\n\
             @compute @workgroup_size(64) fn main() { out_buf[0] = 1.5f; }",
            &["f32", "u32"],
        ),
        ("no entry point named main", "@compute @workgroup_size(64) fn not_main() {}", &["main"]),
    ];
    for (what, wgsl, names) in cases {
        let start = Instant::now();
        let e = pollster::block_on(device.build_wgsl_for_tests(wgsl)).expect_err(what);
        println!("{what}: {e}");
        assert!(matches!(e, Error::Gpu { .. }), "{what}: expected Error::Gpu, got {e:?}");
        let m = e.to_string();
        for n in names {
            assert!(m.contains(n), "{what}: the message does not name `{n}`: {m}");
        }
        assert!(start.elapsed() < FAST, "{what} took {:?}", start.elapsed());
        let logged = LOGS.lock().unwrap().iter().any(|l| l.starts_with("DEBUG") && l.contains(wgsl));
        assert!(logged, "{what}: the failing WGSL was not logged at debug level");
    }
    // valid WGSL builds, and the device still compiles and runs plans after the errors
    pollster::block_on(device.build_wgsl_for_tests(
        "@group(0) @binding(0) var<storage, read_write> out_buf: array<u32>;\n\
         @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) { out_buf[i.x] = i.x; }",
    ))
    .unwrap();
    check_matmul(device, 64);
    assert!(matches!(
        pollster::block_on(Device::cpu().build_wgsl_for_tests("fn main() {}")),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn sizes_over_the_device_limits_are_errors() {
    let Some(device) = common::gpu() else {
        println!("sizes_over_the_device_limits_are_errors: SKIPPED: no GPU adapter");
        return;
    };
    let caps = device.capabilities().clone();
    println!(
        "max_buffer_size = {}, max_storage_buffer_binding_size = {}",
        caps.max_buffer_bytes, caps.max_storage_binding_bytes
    );
    // one tensor over max_buffer_size: no buffer can hold it (only the graph is built: no memory is used)
    let n = (caps.max_buffer_bytes / 4 + 1) as usize;
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, &[n]).unwrap();
    let y = g.relu(x).unwrap();
    let e = device.compile(&g, &[y]).err().expect("a tensor over max_buffer_size compiled");
    println!("{e}");
    assert!(matches!(e, Error::LimitExceeded { .. }), "expected LimitExceeded, got {e:?}");
    assert!(e.to_string().contains(&(n as u64 * 4).to_string()), "the error does not give the size: {e}");

    // outputs that together exceed max_buffer_size: the readback buffer would be too large
    let each = caps.max_storage_binding_bytes.min(caps.max_buffer_bytes).min(256 << 20) / 4 * 4;
    let count = (caps.max_buffer_bytes / each + 1) as usize;
    if count > 64 {
        println!("outputs over max_buffer_size: SKIPPED ({count} outputs would be needed)");
        return;
    }
    let mut g = Graph::new();
    let outs: Vec<Tensor> = (0..count)
        .map(|i| {
            let x = g.input(&format!("x{i}"), DType::F32, &[each as usize / 4]).unwrap();
            g.scale(x, 2.0).unwrap()
        })
        .collect();
    let e = device.compile(&g, &outs).err().expect("outputs over max_buffer_size compiled");
    println!("{e}");
    assert!(matches!(e, Error::LimitExceeded { limit_name: "max_buffer_size", .. }), "got {e:?}");
}

// ---- faults in a child process ------------------------------------------------------------------------------

const CHILD_ENV: &str = "WEBTENSOR_FAULTS_CHILD";

/// The value of `key` in /proc/self/status, in KiB.
#[cfg(target_os = "linux")]
fn proc_status_kib(key: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs the ignored test `name` of this binary in a child process, with `env` set and the shell command
/// `limit` (e.g. `ulimit -v 4000000`) applied first. Returns the child's output; fails if the child fails.
#[cfg(target_os = "linux")]
fn run_child(name: &str, kind: BackendKind, limit: &str, env: &[(&str, &str)]) -> String {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(format!("{limit} && exec \"$0\" \"$@\""))
        .arg(exe)
        .args(["--exact", name, "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{kind:?}"))
        .env_remove("REQUIRE_GPU");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the child test");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("---- child {name}:\n{text}---- end of child");
    assert!(out.status.success(), "the child test {name} failed ({})", out.status);
    text
}

/// The device of a child test: the backend the parent asked for. None when not run as a child.
fn child_device() -> Option<Device> {
    let kind = std::env::var(CHILD_ENV).ok()?;
    let kind: BackendKind = kind.to_ascii_lowercase().parse().unwrap();
    Some(Device::with_backend(kind).unwrap())
}

#[test]
#[cfg(target_os = "linux")]
fn out_of_memory_is_an_error() {
    let Some(kind) = gpu_kind("out_of_memory_is_an_error") else { return };
    if kind == BackendKind::Gl {
        // wgpu-hal's GL backend does not check glBufferStorage for GL_OUT_OF_MEMORY: no error to surface
        println!("out_of_memory_is_an_error: SKIPPED on GL (wgpu does not report GL allocation failures)");
        return;
    }
    // the child may use as much address space as this process does now, plus 1 GiB
    let limit_kib = proc_status_kib("VmSize:").expect("VmSize in /proc/self/status") + (1 << 20);
    let text = run_child(
        "oom_child",
        kind,
        &format!("ulimit -v {limit_kib}"),
        &[("WEBTENSOR_FAULTS_LIMIT_KIB", &limit_kib.to_string())],
    );
    assert!(text.contains("OOM-CHILD ok"), "the child did not finish");
}

/// Run by `out_of_memory_is_an_error` under an address-space limit: a plan that needs more memory than the
/// limit allows fails to compile with an out-of-memory error, and the device works afterwards.
#[test]
#[ignore = "run in a child process by out_of_memory_is_an_error"]
fn oom_child() {
    let Some(device) = child_device() else { return };
    capture_logs();
    let limit: u64 = std::env::var("WEBTENSOR_FAULTS_LIMIT_KIB").unwrap().parse().unwrap();
    check_matmul(&device, 64);
    let caps = device.capabilities();
    // More than the device can hold: a software adapter's memory is the process's, which the address-space limit
    // bounds, so 2 GiB more than the limit; a hardware GPU's memory is its own (an H200 has 141 GB), so 4 TiB
    // more, beyond any GPU's memory and this machine's. Inputs as large as one binding allows (at most 2 GiB).
    let software = caps.device_type == webtensor::DeviceType::Cpu;
    let beyond: u64 = if software { 2 << 30 } else { 4 << 40 };
    let each = caps.max_storage_binding_bytes.min(caps.max_buffer_bytes).min(2 << 30) / 4 * 4;
    let count = ((limit << 10) + beyond).div_ceil(each) as usize;
    let mut g = Graph::new();
    let xs: Vec<Tensor> =
        (0..count).map(|i| g.input(&format!("x{i}"), DType::F32, &[each as usize / 4]).unwrap()).collect();
    let mut sum = xs[0];
    for &x in &xs[1..] {
        sum = g.add(sum, x).unwrap();
    }
    println!("compiling {count} inputs of {each} bytes under a limit of {limit} KiB");
    let start = Instant::now();
    let e = device
        .compile_with(&g, &[sum], &CompileOptions { no_fusion: true, ..Default::default() })
        .err()
        .expect("a plan larger than the address space compiled");
    println!("{e} ({:?})", start.elapsed());
    assert!(matches!(e, Error::Gpu { .. }), "expected Error::Gpu, got {e:?}");
    assert!(e.to_string().contains("out of memory"), "the error does not say out of memory: {e}");
    // the failed allocation was released and the device is still usable
    check_matmul(&device, 64);
    assert_no_uncaptured_errors();
    println!("OOM-CHILD ok");
}

#[test]
#[cfg(target_os = "linux")]
fn readback_wait_is_bounded() {
    let Some(kind) = gpu_kind("readback_wait_is_bounded") else { return };
    let text = run_child("timeout_child", kind, "true", &[(webtensor::gpu::READBACK_TIMEOUT_ENV, "1")]);
    assert!(text.contains("TIMEOUT-CHILD ok"), "the child did not finish");
}

/// Run by `readback_wait_is_bounded` with a readback bound of 1 ms: a plan that takes longer fails with an
/// error that names the bound, within seconds; so does its next run (the timed-out map was undone: a map still
/// pending would make the next run fail at once with a map error instead).
#[test]
#[ignore = "run in a child process by readback_wait_is_bounded"]
fn timeout_child() {
    let Some(device) = child_device() else { return };
    capture_logs();
    // a 1024^3 matmul: 2 GFLOP, far more than 1 ms of work on lavapipe
    let (g, [a, b], r, [av, bv]) = matmul_graph(1024);
    let mut plan = device.compile_with(&g, &[r], &opts()).unwrap();
    for i in 0..2 {
        let start = Instant::now();
        match plan.run(&[(a, &av), (b, &bv)]) {
            Ok(_) => println!("run {i}: the GPU finished within 1 ms: the bound was not exercised"),
            Err(e) => {
                println!("run {i}: {e} ({:?})", start.elapsed());
                assert!(matches!(e, Error::Gpu { .. }), "expected Error::Gpu, got {e:?}");
                let m = e.to_string();
                assert!(m.contains(webtensor::gpu::READBACK_TIMEOUT_ENV), "the error does not name the bound: {m}");
                assert!(start.elapsed() < FAST, "the run took {:?}", start.elapsed());
            }
        }
    }
    assert_no_uncaptured_errors();
    println!("TIMEOUT-CHILD ok");
}
