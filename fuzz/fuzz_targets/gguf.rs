//! The GGUF reader: any bytes give a file or an error, never a panic; every tensor of a file that parses reads.
#![no_main]
use libfuzzer_sys::fuzz_target;
use webtensor::{gguf::GgufFile, Bytes};

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = GgufFile::from_bytes("fuzz.gguf", Bytes::from_vec(data.to_vec())) {
        for t in &f.tensors {
            let _ = f.host_tensor(t);
        }
    }
});
