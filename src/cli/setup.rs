//! The process's setup before a command runs: the panic hook, the log filter, Mesa's runtime folder.

use super::error::report;

/// Reports a panic as one line and no backtrace. Reaching it is a bug in webtensor.
pub(crate) fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        report(&format!("internal error (a bug in webtensor; please report it): {msg}{at}"));
    }));
}

/// What is logged unless RUST_LOG says otherwise: warnings, webtensor's progress lines; not wgpu's and naga's own
/// messages, which adapter probing produces on every machine without that driver (EGL's "failed to load
/// driver") and which webtensor reports as errors of its own where they matter (`RUST_LOG=wgpu_hal=warn` shows
/// them).
pub(crate) const DEFAULT_LOG: &str = "warn,webtensor::progress=info,wgpu_hal=off,wgpu_core=off,naga=off";

/// Mesa's Vulkan and EGL drivers print "error: XDG_RUNTIME_DIR is invalid or not set in the environment" when it
/// is missing (a container, a CI job, `su`): harmless, but it reads as webtensor failing. Without a usable one
/// the CLI points it at a 0700 folder of its own in the temporary directory, before any driver loads (and leaves
/// it unset where that folder exists but is not this user's private one).
#[cfg(all(unix, not(target_os = "macos")))]
pub(crate) fn ensure_runtime_dir() {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else { return };
    let private = |p: &std::path::Path| {
        std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.permissions().mode() & 0o077 == 0)
    };
    if std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| std::path::Path::new(&d).is_dir()) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("webtensor-runtime-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    if private(&dir) {
        // the process has one thread here: nothing reads the environment while it changes
        std::env::set_var("XDG_RUNTIME_DIR", &dir);
    }
}
