//! What every reader and writer of `io` shares: its errors, and replacing a file whole.

use crate::error::Error;

pub(crate) fn io_err(path: &str, e: impl std::fmt::Display) -> Error {
    Error::Io { path: path.into(), message: e.to_string() }
}

pub(crate) fn fmt_err(path: &str, msg: impl Into<String>) -> Error {
    Error::Format { path: path.into(), message: msg.into() }
}

/// Writes `bytes` to `path` as a user expects of an output file:
///
/// - a regular file (new or existing) is replaced whole through a temporary file beside it (same directory, so the
///   rename does not cross file systems), synced and then renamed over it: a reader sees the old file or the new
///   one, never a part, a write that fails halfway (a full disk) leaves the old file and no temporary behind, and an
///   existing file keeps its permissions;
/// - a symbolic link is written through: its target is replaced as above and the link stays a link (a dangling
///   link is an error);
/// - anything else that exists — a device such as `/dev/stdout` or `/dev/null`, a FIFO — is opened and written as
///   it is, never replaced by a regular file; a directory is an error.
///
/// Every write error is reported (`/dev/full` gives "No space left on device").
pub(crate) fn write_atomic(path: &str, bytes: &[u8]) -> crate::error::Result<()> {
    use std::io::Write;
    let given = std::path::Path::new(path);
    let target = match std::fs::symlink_metadata(given) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(given)
            .map_err(|e| io_err(path, format!("a symbolic link whose target cannot be resolved ({e})")))?,
        _ => given.to_path_buf(),
    };
    let existing = std::fs::metadata(&target).ok();
    if let Some(m) = &existing {
        if m.is_dir() {
            return Err(io_err(path, "is a directory, not a file to write"));
        }
        if !m.is_file() {
            // a device, FIFO or socket: written as such
            let write = || -> std::io::Result<()> {
                let mut f = std::fs::OpenOptions::new().write(true).open(&target)?;
                f.write_all(bytes)?;
                f.flush()
            };
            return write().map_err(|e| io_err(path, e));
        }
    }
    let name = target.file_name().ok_or_else(|| io_err(path, "not a file name"))?;
    let tmp = target.with_file_name(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        if let Some(m) = &existing {
            f.set_permissions(m.permissions())?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &target)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_err(path, e)
    })
}

/// The whole file at `path`, memory-mapped read-only (nothing is copied into the heap).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn map_file(path: &str) -> crate::error::Result<crate::resident::Bytes> {
    let regular = |meta: std::fs::Metadata| {
        if meta.is_file() {
            return Ok(());
        }
        let what = if meta.is_dir() { "a directory" } else { "not a regular file (a device, FIFO or socket)" };
        Err(io_err(path, format!("{what}; expected a regular file")))
    };
    // checked before opening too: opening a FIFO waits for a writer
    regular(std::fs::metadata(path).map_err(|e| io_err(path, e))?)?;
    let file = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
    regular(file.metadata().map_err(|e| io_err(path, e))?)?;
    // SAFETY: the map is read-only and private to this process; a file truncated while mapped would fault, as
    // with any memory-mapped reader (llama.cpp's included), which callers accept by opening model files.
    let map =
        unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io_err(path, format!("cannot map it into memory: {e}")))?;
    Ok(crate::resident::Bytes::from_file_map(map))
}
