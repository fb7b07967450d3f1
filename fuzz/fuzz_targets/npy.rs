//! The .npy reader: any bytes give an array or an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = webtensor::io::read_npy_bytes("fuzz.npy", data);
});
