//! How a command fails: [`CliError`], reported as one `error: ...` line on stderr.

use super::util;
use std::fmt;

/// Why a command failed. Displayed as one line after `error: `.
#[derive(Debug)]
pub enum CliError {
    /// From the library: file, shape, dtype, device errors.
    Lib(webtensor::Error),
    /// From the CLI itself: a failed check, an argument the library would not explain well.
    Msg(String),
}

impl CliError {
    /// The error naming the file `path` (the model a command loaded), where its text does not already: a prompt
    /// too long, logits or embeddings that are not finite, a KV cache that cannot be allocated.
    pub(crate) fn naming(self, path: &str) -> CliError {
        let m = self.to_string();
        if m.contains(path) {
            self
        } else {
            CliError::Msg(format!("{path}: {m}"))
        }
    }
}

impl From<webtensor::Error> for CliError {
    fn from(e: webtensor::Error) -> CliError {
        CliError::Lib(e)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Lib(e) => write!(f, "{e}"),
            CliError::Msg(m) => f.write_str(m),
        }
    }
}

/// Collapses a message onto one line (a library or clap message could carry newlines).
pub(crate) fn one_line(msg: &str) -> String {
    msg.split('\n').map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Prints `error: msg` on one line of its own, with anything a file could have put in it escaped.
pub(crate) fn report(msg: &str) {
    let msg = util::escape_control(&one_line(msg));
    let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
    if util::MID_LINE.swap(false, std::sync::atomic::Ordering::Relaxed) {
        eprintln!();
    }
    eprintln!("error: {msg}");
}
