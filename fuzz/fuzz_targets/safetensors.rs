//! The safetensors reader: any bytes give a file or an error; every tensor of a file that parses reads.
#![no_main]
use libfuzzer_sys::fuzz_target;
use webtensor::{io::SafetensorsFile, Bytes};

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = SafetensorsFile::from_bytes("fuzz.safetensors", Bytes::from_vec(data.to_vec())) {
        for t in f.tensors() {
            let _ = f.host_tensor(&t.name);
        }
    }
});
