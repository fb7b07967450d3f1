//! The tokenizer rebuilt from a GGUF file's metadata: a tokenizer or an error; one that builds encodes and
//! decodes a fixed text without a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use webtensor::{gguf::GgufFile, models::Tokenizer, Bytes};

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes("fuzz.gguf", Bytes::from_vec(data.to_vec())) else { return };
    let Ok(t) = Tokenizer::from_gguf(&f) else { return };
    if let Ok(ids) = t.encode("Hello wörld 12345 <|end|> \u{1F600}  tabs\t") {
        let _ = t.decode(&ids, false);
    }
});
