//! The .npy, .safetensors and GGUF readers against hostile and unusual files: no count read from a file sizes an
//! allocation before it is checked against the file's length (a counting allocator sees every allocation), a
//! duplicate is refused, one unreadable tensor leaves the others readable, headers decode as numpy's versions
//! say, and the .npy writer writes what `numpy.save` writes (numpy itself is the reference, where installed).
//! `examples/fuzz_readers.rs` runs the readers over millions of mutated files.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use webtensor::io::{npy_bytes, read_npy_bytes, SafetensorsFile};
use webtensor::{Bytes, Data, Error, HostTensor};

/// The system allocator, recording the largest single request of the current thread.
struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|m| m.set(m.get().max(l.size())));
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let _ = LARGEST.try_with(|m| m.set(m.get().max(new)));
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f`, returning its result and the largest single allocation it made (bytes).
fn largest_alloc<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|m| m.set(0));
    let r = f();
    (r, LARGEST.with(|m| m.get()))
}

fn format_error<T: std::fmt::Debug>(r: webtensor::Result<T>) -> String {
    match r {
        Err(e @ Error::Format { .. }) => e.to_string(),
        other => panic!("expected a format error, got {other:?}"),
    }
}

/// A .npy prelude and header: version `v`, header text `h` (padded as numpy pads it when `pad`).
fn npy_with_header(v: u8, h: &[u8], data: &[u8]) -> Vec<u8> {
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[v, 0]);
    if v == 1 {
        out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(h.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(h);
    out.extend_from_slice(data);
    out
}

#[test]
fn npy_counts_are_checked_before_they_size_anything() {
    // a 14-byte file whose header length says 4 GiB
    let mut f = b"\x93NUMPY\x02\x00".to_vec();
    f.extend_from_slice(&u32::MAX.to_le_bytes());
    f.extend_from_slice(b"{'");
    let (r, big) = largest_alloc(|| read_npy_bytes("huge.npy", &f));
    let msg = format_error(r);
    assert!(msg.contains("header length") && msg.contains("byte 8"), "{msg}");
    assert!(big < 1 << 16, "allocated {big} bytes for a 14-byte file");
    // a header within numpy's cap but past the end of the file
    let mut f = b"\x93NUMPY\x01\x00".to_vec();
    f.extend_from_slice(&9000u16.to_le_bytes());
    let msg = format_error(read_npy_bytes("short.npy", &f));
    assert!(msg.contains("9000"), "{msg}");
    // a shape of 2^31 elements over 16 bytes of data
    let h = b"{'descr': '<f4', 'fortran_order': False, 'shape': (65536, 32768), }\n";
    let f = npy_with_header(1, h, &[0; 16]);
    let (r, big) = largest_alloc(|| read_npy_bytes("shape.npy", &f));
    let msg = format_error(r);
    assert!(msg.contains("truncated") && msg.contains("16"), "{msg}");
    assert!(big < 1 << 16, "allocated {big} bytes for a {}-byte file", f.len());
    // version 1.0 headers are latin-1: a non-ASCII byte is a field name here, not bad UTF-8
    let h = b"{'descr': [('\xe9', '<f4')], 'fortran_order': False, 'shape': (1,), }\n";
    let msg = format_error(read_npy_bytes("latin1.npy", &npy_with_header(1, h, &[0; 4])));
    assert!(!msg.contains("UTF") && msg.contains("dtype"), "{msg}");
    // ... and 3.0 headers are UTF-8
    let msg = format_error(read_npy_bytes("v3.npy", &npy_with_header(3, h, &[0; 4])));
    assert!(msg.contains("UTF-8"), "{msg}");
}

fn tensors_for_writing() -> Vec<HostTensor> {
    vec![
        HostTensor::new(&[], Data::F32(vec![2.5])).unwrap(),
        HostTensor::new(&[3], Data::F32(vec![1.0, -2.0, 3.5])).unwrap(),
        HostTensor::new(&[2, 3], Data::I32(vec![1, 2, 3, -4, 5, 6])).unwrap(),
        HostTensor::new(&[0, 4], Data::F32(vec![])).unwrap(),
        HostTensor::new(&[1, 0, 5], Data::F16(vec![])).unwrap(),
        HostTensor::new(&[123456789, 0], Data::I32(vec![])).unwrap(),
        HostTensor::new(&[2, 1, 1, 2], Data::F16([1.0, 2.0, 0.5, -1.0].map(half::f16::from_f32).to_vec())).unwrap(),
    ]
}

#[test]
fn npy_round_trips_scalars_and_empty_arrays() {
    for t in tensors_for_writing() {
        let back = read_npy_bytes("t.npy", &npy_bytes(&t)).unwrap();
        assert_eq!(back, t);
    }
}

/// numpy, when python3 has it: writes each tensor with numpy.save, the bytes must be ours; and reads ours back.
#[test]
fn npy_writer_writes_what_numpy_writes() {
    let ok =
        std::process::Command::new("python3").args(["-c", "import numpy"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: python3 with numpy is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("webtensor-npy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, t) in tensors_for_writing().iter().enumerate() {
        let ours = dir.join(format!("ours{i}.npy"));
        webtensor::io::write_npy(ours.to_str().unwrap(), t).unwrap();
        let theirs = dir.join(format!("theirs{i}.npy"));
        let script = "import numpy as np, sys; a = np.load(sys.argv[1]); np.save(sys.argv[2], a); print(a.shape)";
        let out = std::process::Command::new("python3")
            .args(["-c", script, ours.to_str().unwrap(), theirs.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "numpy could not read ours: {}", String::from_utf8_lossy(&out.stderr));
        let (a, b) = (std::fs::read(&ours).unwrap(), std::fs::read(&theirs).unwrap());
        assert_eq!(String::from_utf8_lossy(&a[..a.len().min(128)]), String::from_utf8_lossy(&b[..b.len().min(128)]));
        assert_eq!(a, b, "shape {:?}", t.shape);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A safetensors file from a JSON header and data.
fn safetensors_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn st(bytes: Vec<u8>) -> webtensor::Result<SafetensorsFile> {
    SafetensorsFile::from_bytes("t.safetensors", Bytes::from_vec(bytes))
}

#[test]
fn safetensors_is_strict_about_the_header_and_lax_about_other_tensors() {
    let data: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    // a duplicate name
    let h = r#"{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}"#;
    let msg = format_error(st(safetensors_file(h, &data)));
    assert!(msg.contains("'a' twice"), "{msg}");
    // a tensor of a dtype this reader does not know: the others still read, it fails naming its dtype
    let h = r#"{"__metadata__": {"format": "pt"}, "odd": {"dtype": "F8_E9M9", "shape": [4], "data_offsets": [0, 4]}, "x": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}"#;
    let f = st(safetensors_file(h, &data)).unwrap();
    assert_eq!(f.metadata().collect::<Vec<_>>(), [("format", "pt")]);
    assert_eq!(f.host_tensor("x").unwrap(), HostTensor::f32(&[2], vec![2.0, 3.0]).unwrap());
    let msg = format_error(f.host_tensor("odd"));
    assert!(msg.contains("F8_E9M9"), "{msg}");
    // 0-d and empty tensors
    let h = r#"{"s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}, "e": {"dtype": "F16", "shape": [0, 3], "data_offsets": [4, 4]}}"#;
    let f = st(safetensors_file(h, &data[..4])).unwrap();
    assert_eq!(f.host_tensor("s").unwrap(), HostTensor::f32(&[], vec![1.0]).unwrap());
    assert_eq!(f.host_tensor("e").unwrap(), HostTensor::new(&[0, 3], Data::F16(vec![])).unwrap());
    // ranges: past the data, overlapping, or not the size the shape says
    for (h, needle) in [
        (r#"{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}"#, "outside"),
        (
            r#"{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}"#,
            "overlap",
        ),
        (r#"{"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}"#, "needs 12 bytes"),
        (
            r#"{"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 8]}}"#,
            "needs more than",
        ),
        (r#"{"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}"#, "shape"),
        (r#"{"a": 3}"#, "not a JSON object"),
        (r#"[1, 2]"#, "does not parse"),
    ] {
        let msg = format_error(st(safetensors_file(h, &data)));
        assert!(msg.contains(needle), "{h}: {msg}");
    }
    // a header length of 2^64 - 1 over 8 bytes: refused before anything is allocated for it
    let (r, big) = largest_alloc(|| st(u64::MAX.to_le_bytes().to_vec()));
    let msg = format_error(r);
    assert!(msg.contains("header length"), "{msg}");
    assert!(big < 1 << 16, "allocated {big} bytes");
}
