//! What every reader and writer of `io` shares: its errors, and replacing a file whole.

use crate::Error;

pub(crate) fn io_err(path: &str, e: impl std::fmt::Display) -> Error {
    Error::Io { path: path.into(), message: e.to_string() }
}

pub(crate) fn fmt_err(path: &str, msg: impl Into<String>) -> Error {
    Error::Format { path: path.into(), message: msg.into() }
}

/// Writes `bytes` to `path` through a temporary file beside it (same directory, so the rename does not cross
/// file systems), synced and then renamed over `path`: a reader sees the old file or the new one, never a part,
/// and a write that fails halfway leaves the old file (or none) and no temporary behind.
pub(crate) fn write_atomic(path: &str, bytes: &[u8]) -> crate::Result<()> {
    use std::io::Write;
    let target = std::path::Path::new(path);
    let name = target.file_name().ok_or_else(|| io_err(path, "not a file name"))?;
    let tmp = target.with_file_name(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, target)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_err(path, e)
    })
}

/// The whole file at `path`, memory-mapped read-only (nothing is copied into the heap).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn map_file(path: &str) -> crate::Result<crate::Bytes> {
    let file = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
    // SAFETY: the map is read-only and private to this process; a file truncated while mapped would fault, as
    // with any memory-mapped reader (llama.cpp's included), which callers accept by opening model files.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io_err(path, e))?;
    let len = map.len();
    crate::Bytes::from_owner(std::sync::Arc::new(map), 0..len)
}
