//! Small helpers shared by the subcommands: stdout that survives a closed pipe, a deterministic generator,
//! byte formatting, timing and error metrics.

use std::io::Write;
use std::time::{Duration, Instant};

/// Writes `text` to stdout. A closed pipe (`webtensor info | head -3`) ends the program quietly with
/// success instead of panicking like `println!`.
/// Whether the terminal's current line was left open (text written to stdout without a newline, or the chat's
/// `> ` prompt on stderr): an error then starts on a line of its own.
pub static MID_LINE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `s` with the characters that would act on a terminal written as escapes (`\u{1b}`): control characters
/// (newlines included) and Unicode's bidirectional overrides. For text that comes from a file (keys, tensor
/// names) before it is printed.
pub fn escape_control(s: &str) -> String {
    let acts = |c: char| c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
    if !s.chars().any(acts) {
        return s.to_string();
    }
    s.chars().map(|c| if acts(c) { c.escape_default().to_string() } else { c.to_string() }).collect()
}

pub fn emit(text: &str) {
    if !text.is_empty() {
        MID_LINE.store(!text.ends_with('\n'), std::sync::atomic::Ordering::Relaxed);
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        log::warn!("cannot write to stdout: {e}");
    }
}

/// `println!` through [`emit`].
macro_rules! outln {
    () => { $crate::cli::util::emit("\n") };
    ($($arg:tt)*) => { $crate::cli::util::emit(&format!("{}\n", format_args!($($arg)*))) };
}
pub(crate) use outln;

/// splitmix64 (Steele, Lea, Flood 2014): a tiny, well-mixed deterministic generator.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1): 24 random bits, exactly representable in f32.
    pub fn next_f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32) * (2.0 / (1u64 << 24) as f32) - 1.0
    }

    /// `n` values from [`SplitMix64::next_f32`].
    pub fn vec_f32(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next_f32()).collect()
    }
}

/// `1.5 MiB (1572864 bytes)`, `32 KiB (32768 bytes)`; below 1 KiB just `256 bytes`.
pub fn bytes(n: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    if n >= MIB {
        format!("{:.1} MiB ({n} bytes)", n as f64 / MIB as f64)
    } else if n >= KIB {
        format!("{:.1} KiB ({n} bytes)", n as f64 / KIB as f64)
    } else {
        format!("{n} bytes")
    }
}

/// Milliseconds of a duration, for printing.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs `f` and returns its value and how long it took.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t0 = Instant::now();
    let v = f();
    (v, t0.elapsed())
}

/// Median of the samples (the mean of the two middle ones for an even count). `samples` must not be empty.
pub fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    let n = samples.len();
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2
    }
}

/// `max |got - want| / max |want|`: the largest error relative to the largest reference value (0 when both
/// are all zero; infinite on a length mismatch or a NaN).
pub fn max_rel_error(got: &[f32], want: &[f32]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let mut err = 0f64;
    let mut scale = 0f64;
    for (&g, &w) in got.iter().zip(want) {
        let d = (g as f64 - w as f64).abs();
        if d.is_nan() {
            return f64::INFINITY;
        }
        err = err.max(d);
        scale = scale.max((w as f64).abs());
    }
    if err == 0.0 {
        0.0
    } else {
        err / scale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_range_and_determinism() {
        let mut a = SplitMix64::new(7);
        let v = a.vec_f32(10_000);
        assert!(v.iter().all(|&x| (-1.0..1.0).contains(&x)));
        assert_eq!(v, SplitMix64::new(7).vec_f32(10_000));
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.05, "mean {mean}");
    }

    #[test]
    fn median_and_errors() {
        let mut s = [3, 1, 2].map(Duration::from_millis);
        assert_eq!(median(&mut s), Duration::from_millis(2));
        let mut s = [4, 1, 2, 3].map(Duration::from_millis);
        assert_eq!(median(&mut s), Duration::from_micros(2500));
        assert_eq!(max_rel_error(&[1.0, 2.0], &[1.0, 4.0]), 0.5);
        assert!(max_rel_error(&[f32::NAN], &[1.0]).is_infinite());
        assert_eq!(bytes(3 << 20), "3.0 MiB (3145728 bytes)");
        assert_eq!(bytes(32768), "32.0 KiB (32768 bytes)");
        assert_eq!(bytes(32), "32 bytes");
    }
}
