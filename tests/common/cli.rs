//! Running the `webtensor` binary as a user runs it, for the CLI tests.
#![cfg(all(feature = "cli", not(target_arch = "wasm32")))]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh scratch directory for one test.
pub fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Mesa's GL probe prints a line about XDG_RUNTIME_DIR when it is unset; give it a private one.
pub fn xdg_runtime_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg");
    std::fs::create_dir_all(&dir).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    dir
}

/// Runs the binary with `args` in `dir`. RUST_BACKTRACE=1 makes any panic show itself; RUST_LOG is cleared
/// so that the default level (warn) applies.
pub fn webtensor(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_webtensor"));
    cmd.args(args).current_dir(dir).env_remove("RUST_LOG").env("RUST_BACKTRACE", "1");
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        cmd.env("XDG_RUNTIME_DIR", xdg_runtime_dir());
    }
    cmd.output().expect("cannot start the webtensor binary")
}

/// `webtensor ARGS` started in `dir` with its stdin, stdout and stderr piped (an interactive command: chat).
pub fn spawn(dir: &Path, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_webtensor"))
        .args(args)
        .current_dir(dir)
        .env("XDG_RUNTIME_DIR", xdg_runtime_dir())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot start the webtensor binary")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The command failed with `code`, and stderr is exactly one line, `error: ...`, containing each of `needles`.
#[track_caller]
pub fn assert_one_error(out: &Output, code: i32, needles: &[&str]) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "exit status; stderr: {stderr}");
    assert!(!stderr.contains("panicked") && !stderr.to_lowercase().contains("backtrace"), "panic: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "stderr must be one line, got: {stderr:?}");
    assert!(lines[0].starts_with("error: "), "stderr must start with 'error: ', got {:?}", lines[0]);
    for n in needles {
        assert!(lines[0].contains(n), "error line {:?} should mention {n:?}", lines[0]);
    }
    lines[0].to_string()
}

#[track_caller]
pub fn assert_success(out: &Output) -> String {
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    stdout
}

/// The command failed with `code`, its stderr's last line is `error: ...` containing each of `needles`, and no
/// other line is an error or a panic (progress lines such as `loading ...` may come before).
#[track_caller]
pub fn assert_error_last(out: &Output, code: i32, needles: &[&str]) -> String {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "exit status; stderr: {stderr}");
    assert!(!stderr.contains("panicked") && !stderr.to_lowercase().contains("backtrace"), "panic: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.iter().filter(|l| l.contains("error")).count(), 1, "one error line: {stderr:?}");
    let last = lines.last().expect("a line");
    assert!(last.starts_with("error: "), "the last line must be the error, got {stderr:?}");
    for n in needles {
        assert!(last.contains(n), "error line {last:?} should mention {n:?}");
    }
    last.to_string()
}
