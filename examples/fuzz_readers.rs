//! Fuzzes the file readers (`.npy`, `.safetensors`, GGUF), the tokenizer rebuilt from GGUF metadata and the
//! chat-template renderer on stable Rust: a mutation loop over a committed corpus
//! (`fuzz/corpus/<reader>/`), every input run under `catch_unwind`, timed, and under an allocation cap.
//!
//! ```text
//! cargo run --release --example fuzz_readers -- all --inputs 1000000
//! cargo run --release --example fuzz_readers -- gguf --seconds 60
//! ```
//!
//! A failure is a panic, an input that takes over 1 s (a hang), live heap memory over the cap (1 GiB by default),
//! or one allocation larger than 64× the input plus 1 MiB (a count from the file sizing memory). Each failing input
//! is written to `fuzz/crashes/` and the run exits with status 1. Inputs whose outcome is new (success, or an
//! error message not seen before, digits aside) join the corpus for the rest of the run; `--save-corpus` writes
//! up to 32 of them per reader into the corpus folder.

use clap::Parser;
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};
use webtensor::{gguf::GgufFile, io, Bytes};

/// The system allocator, counting live bytes, the peak, and the largest single request.
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);
/// The message of the last panic, for the report.
static LAST_PANIC: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

fn note(size: usize) {
    let live = LIVE.fetch_add(size, Relaxed) + size;
    PEAK.fetch_max(live, Relaxed);
    LARGEST.fetch_max(size, Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size());
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note(l.size());
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_sub(l.size(), Relaxed);
        note(new);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[derive(Parser)]
#[command(about = "Fuzz webtensor's .npy, .safetensors and GGUF readers")]
struct Args {
    /// npy, safetensors, gguf, tokenizer, template or all.
    #[arg(default_value = "all")]
    reader: String,
    /// Inputs per reader.
    #[arg(long, default_value_t = 1_000_000)]
    inputs: u64,
    /// Stop a reader after this many seconds even if fewer inputs ran.
    #[arg(long)]
    seconds: Option<f64>,
    /// Live heap memory cap, MiB.
    #[arg(long, default_value_t = 1024)]
    cap_mib: usize,
    /// Seed of the mutation generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write new corpus entries (up to 32 per reader) into fuzz/corpus/<reader>/.
    #[arg(long)]
    save_corpus: bool,
}

/// Runs one reader over `b`: `Ok(())` or its error message.
fn read(reader: &str, b: &[u8]) -> Result<(), String> {
    let e = |e: webtensor::Error| e.to_string();
    match reader {
        "npy" => io::read_npy_bytes("fuzz.npy", b).map(drop).map_err(e),
        "safetensors" => {
            let f = io::SafetensorsFile::from_bytes("fuzz.safetensors", Bytes::from_vec(b.to_vec())).map_err(e)?;
            f.tensors().iter().try_for_each(|t| f.host_tensor(&t.name).map(drop)).map_err(e)
        }
        "tokenizer" => {
            let f = GgufFile::from_bytes("fuzz.gguf", Bytes::from_vec(b.to_vec())).map_err(e)?;
            let t = webtensor::models::Tokenizer::from_gguf(&f).map_err(e)?;
            let ids = t.encode("Hello wörld 12345 <|end|> \u{1F600}  tabs\t").map_err(e)?;
            t.decode(&ids, false).map(drop).map_err(e)
        }
        "template" => {
            let source = String::from_utf8_lossy(b);
            let t = webtensor::models::ChatTemplate::new(&source).map_err(e)?;
            let m = |r: &str, c: &str| webtensor::models::Message::new(r, c);
            let conversation = [m("system", "Be brief."), m("user", "Hi"), m("assistant", "Hello!"), m("user", "2+2?")];
            t.render(&conversation, true, "<s>", "</s>").map(drop).map_err(e)
        }
        _ => {
            let f = GgufFile::from_bytes("fuzz.gguf", Bytes::from_vec(b.to_vec())).map_err(e)?;
            f.tensors.iter().try_for_each(|t| f.host_tensor(t).map(drop)).map_err(e)
        }
    }
}

/// The largest single allocation an input may cause: 64× its size plus 1 MiB for the readers (no count from a file
/// sizes memory); a template may build up to the renderer's text budget (16 MiB) on top.
fn allocation_cap(reader: &str, input: usize) -> usize {
    64 * input + (1 << 20) + if reader == "template" { 20 << 20 } else { 0 }
}

/// xorshift64: the mutation generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: [u64; 12] =
    [0, 1, 2, 7, 31, 32, 255, 0x7fff_ffff, 0xffff_ffff, 1 << 32, 0x7fff_ffff_ffff_ffff, u64::MAX];
const TOKENS: [&[u8]; 14] =
    [b"{", b"}", b"[", b"]", b",", b":", b"\"", b"'", b"-1", b"1e999", b"0", b"(", b")", b"\xe9"];

/// One to four mutations of a corpus entry (`other` for splicing).
fn mutate(rng: &mut Rng, base: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(9) {
            0 if at < v.len() => v[at] ^= 1 << rng.below(8),
            1 if at < v.len() => v[at] = rng.next() as u8,
            2 => {
                let width = [1, 2, 4, 8][rng.below(4)];
                let val = INTERESTING[rng.below(INTERESTING.len())].to_le_bytes();
                if at + width <= v.len() {
                    v[at..at + width].copy_from_slice(&val[..width]);
                }
            }
            3 => v.truncate(at),
            4 => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at.min(end)..end);
            }
            5 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                v.splice(at..at, t.iter().copied());
            }
            6 if !other.is_empty() => {
                let from = rng.below(other.len());
                let len = rng.below(other.len() - from + 1).min(64);
                v.splice(at..at, other[from..from + len].iter().copied());
            }
            7 if !v.is_empty() => {
                let from = rng.below(v.len());
                let chunk: Vec<u8> = v[from..(from + 1 + rng.below(32)).min(v.len())].to_vec();
                v.splice(at..at, chunk);
            }
            _ => v.insert(at, rng.next() as u8),
        }
    }
    v
}

/// The outcome's kind, as a cheap stand-in for coverage (a new one keeps the input): success, or the error's
/// first words with digits and quoted names dropped.
fn signature(r: &Result<(), String>) -> String {
    let Err(m) = r else { return "ok".into() };
    let mut out = String::new();
    let mut quoted = false;
    for c in m.chars() {
        match c {
            '\'' => quoted = !quoted,
            c if quoted || c.is_ascii_digit() => {}
            c => out.push(c),
        }
    }
    out.chars().take(48).collect()
}

fn load_corpus(dir: &Path) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    files.sort();
    files.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// Writes a failing input into fuzz/crashes/ and says so.
fn crash(root: &Path, reader: &str, n: u64, input: &[u8], why: &str) -> bool {
    let dir = root.join("fuzz/crashes");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{reader}-{n}.bin"));
    let _ = std::fs::write(&path, input);
    eprintln!("{reader}: input {n} ({} bytes) {why}; saved as {}", input.len(), path.display());
    false
}

/// Fuzzes one reader; false on any failure.
fn fuzz(root: &Path, reader: &str, args: &Args) -> bool {
    let dir = root.join("fuzz/corpus").join(reader);
    let mut corpus = load_corpus(&dir);
    if corpus.is_empty() {
        eprintln!("{reader}: no corpus in {}", dir.display());
        return false;
    }
    let seeds = corpus.len();
    let mut seen: HashSet<String> = corpus.iter().map(|c| signature(&read(reader, c))).collect();
    let mut rng = Rng(args.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let (start, mut slowest, mut n) = (Instant::now(), Duration::ZERO, 0u64);
    let mut largest_seen = (0usize, 0usize);
    let deadline = args.seconds.map(Duration::from_secs_f64);
    let cap = args.cap_mib << 20;
    PEAK.store(0, Relaxed);
    while n < args.inputs && deadline.is_none_or(|d| start.elapsed() < d) {
        n += 1;
        let (a, b) = (rng.below(corpus.len()), rng.below(corpus.len()));
        let input = mutate(&mut rng, &corpus[a], &corpus[b]);
        let base = LIVE.load(Relaxed);
        LARGEST.store(0, Relaxed);
        PEAK.store(base, Relaxed);
        let t = Instant::now();
        let r = std::panic::catch_unwind(|| read(reader, &input));
        let took = t.elapsed();
        slowest = slowest.max(took);
        let Ok(r) = r else {
            let msg = LAST_PANIC.lock().map(|m| m.clone()).unwrap_or_default();
            return crash(root, reader, n, &input, &format!("panicked: {msg}"));
        };
        if took > Duration::from_secs(1) {
            return crash(root, reader, n, &input, &format!("took {took:?} (a hang: over 1 s)"));
        }
        let (peak, largest) = (PEAK.load(Relaxed) - base, LARGEST.load(Relaxed));
        if peak > cap {
            return crash(root, reader, n, &input, &format!("used {peak} bytes of heap, over the cap of {cap}"));
        }
        if largest > allocation_cap(reader, input.len()) {
            return crash(root, reader, n, &input, &format!("made a {largest}-byte allocation"));
        }
        if largest > largest_seen.0 {
            largest_seen = (largest, input.len());
        }
        if seen.insert(signature(&r)) && input.len() <= 1 << 16 && corpus.len() < 4096 {
            corpus.push(input);
        }
    }
    let s = start.elapsed().as_secs_f64();
    eprintln!(
        "{reader}: {n} inputs in {s:.1} s ({:.0}/s): 0 panics, 0 hangs (slowest {:.2} ms), largest allocation \
         {} bytes (for a {}-byte input); corpus {seeds} seeds + {} new outcomes",
        n as f64 / s,
        slowest.as_secs_f64() * 1e3,
        largest_seen.0,
        largest_seen.1,
        corpus.len() - seeds
    );
    if args.save_corpus {
        for (i, c) in corpus[seeds..].iter().take(32).enumerate() {
            let _ = std::fs::write(dir.join(format!("found-{}-{i:02}", args.seed)), c);
        }
    }
    true
}

fn main() {
    let args = Args::parse();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readers: Vec<&str> = match args.reader.as_str() {
        "all" => vec!["npy", "safetensors", "gguf", "tokenizer", "template"],
        r @ ("npy" | "safetensors" | "gguf" | "tokenizer" | "template") => vec![r],
        other => {
            eprintln!("error: unknown reader '{other}' (npy, safetensors, gguf, tokenizer, template or all)");
            std::process::exit(2);
        }
    };
    // the readers' errors are values: a panic is a failure reported above, not a message for each input
    std::panic::set_hook(Box::new(|info| {
        if let Ok(mut m) = LAST_PANIC.lock() {
            *m = info.to_string();
        }
    }));
    let ok = readers.iter().map(|r| fuzz(root, r, &args)).fold(true, |a, b| a & b);
    std::process::exit(if ok { 0 } else { 1 });
}
