//! A Python peer spoken to in JSON lines (one request, one reply), shared by `bench generate` and `bench
//! embed`: the script is embedded in the binary and run with `python -c`; a script that cannot import its
//! library answers `{"absent": why}`, which is not an error. Also the statistics both benches print.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

pub struct Helper {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The script's first reply (versions).
    pub hello: Value,
}

impl Helper {
    /// Starts `python -c script`; `Err(why)` when it cannot run or reports its library absent.
    pub fn start(python: &str, script: &str) -> Result<Helper, String> {
        if python == "none" {
            return Err("--python none".into());
        }
        let mut child = Command::new(python)
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot run {python}: {e}"))?;
        let (stdin, stdout) = (child.stdin.take().ok_or("no stdin")?, child.stdout.take().ok_or("no stdout")?);
        let mut h = Helper { child, stdin, stdout: BufReader::new(stdout), hello: Value::Null };
        h.hello = h.read()?;
        if let Some(why) = h.hello.get("absent") {
            return Err(why.as_str().unwrap_or("absent").to_string());
        }
        Ok(h)
    }

    fn read(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(self.ended());
        }
        serde_json::from_str(&line).map_err(|e| format!("peer reply {line:?}: {e}"))
    }

    /// Why the peer stopped answering: its exit status or the signal that ended it (its own error, if it printed
    /// one, is on stderr above).
    fn ended(&mut self) -> String {
        let status = match self.child.wait() {
            Ok(s) => s,
            Err(e) => return format!("the peer process ended without a reply ({e})"),
        };
        #[cfg(unix)]
        if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&status) {
            let name = match sig {
                4 => " (SIGILL: an instruction this CPU lacks: was it built for another CPU?)",
                6 => " (SIGABRT)",
                9 => " (SIGKILL: out of memory?)",
                11 => " (SIGSEGV)",
                _ => "",
            };
            return format!("the peer process was killed by signal {sig}{name} before replying");
        }
        match status.code() {
            Some(c) => format!("the peer process exited with status {c} before replying (its error is above)"),
            None => "the peer process ended without a reply".into(),
        }
    }

    /// Sends `req` and returns the reply, or its `error`.
    pub fn ask(&mut self, req: Value) -> Result<Value, String> {
        writeln!(self.stdin, "{req}").and_then(|()| self.stdin.flush()).map_err(|e| e.to_string())?;
        let r = self.read()?;
        match r.get("error") {
            Some(e) => Err(e.to_string()),
            None => Ok(r),
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `median (min-max)` of samples, one decimal; `—` for none.
pub fn summary(samples: &[f64]) -> String {
    if samples.is_empty() {
        return "—".into();
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    format!("{:.1} ({:.1}-{:.1})", median(&s), s[0], s[s.len() - 1])
}

/// The median (NaN for none): the middle sample, or the mean of the middle two of an even count.
pub fn median(samples: &[f64]) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => s[n / 2],
        _ => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The 1-minute load average, where the system reports it.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::{median, summary};

    /// An even count's median is the mean of the middle two (two rounds: their mean, not the larger), in the
    /// summary the tables print as in the ratios.
    #[test]
    fn medians_of_even_counts_are_the_mean_of_the_middle_two() {
        assert_eq!(median(&[798.2, 790.9]), 794.55);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(summary(&[798.2, 790.9]), "794.5 (790.9-798.2)");
        assert_eq!(summary(&[]), "—");
    }
}
