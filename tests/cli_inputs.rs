//! The CLI given what a careless user or a hostile file gives it: sampler flags out of range, output paths that
//! are links, devices or read-only files, names with terminal escapes, a directory or a device as the model, an
//! error in the middle of a chat. One `error:` line and a non-zero exit, or the right thing done; never a panic.
#![cfg(all(feature = "cli", not(target_arch = "wasm32")))]

mod common;

use common::cli::{assert_error_last, assert_one_error, assert_success, scratch, text, webtensor};
use common::tiny_gguf::{Meta, TinyLlama};
use std::path::Path;

fn tiny(dir: &Path, t: &TinyLlama) -> String {
    let p = dir.join("tiny.gguf");
    std::fs::write(&p, t.bytes()).unwrap();
    p.display().to_string()
}

#[test]
fn sampler_flags_out_of_range_name_the_flag() {
    let dir = scratch("sampler-flags");
    let model = tiny(&dir, &TinyLlama::new());
    let base = ["generate", "--model", &model, "--prompt", "hello", "-n", "2", "--backend", "cpu"];
    for (flag, value, needle) in [
        ("--temperature", "nan", "--temperature is NaN"),
        ("--temperature", "-1", "--temperature is -1"),
        ("--temperature", "inf", "--temperature is inf"),
        ("--top-p", "0", "--top-p is 0"),
        ("--top-p", "1.5", "--top-p is 1.5"),
        ("--min-p", "-0.1", "--min-p is -0.1"),
        ("--repeat-penalty", "0", "--repeat-penalty is 0"),
        ("--repeat-penalty", "NaN", "--repeat-penalty is NaN"),
        ("--stop", "", "--stop"),
    ] {
        let mut args = base.to_vec();
        args.extend([flag, value]);
        assert_one_error(&webtensor(&dir, &args), 1, &[needle]);
    }
    // in range: generates
    let mut args = base.to_vec();
    args.extend(["--temperature", "0.7", "--top-p", "0.9", "--min-p", "0", "--repeat-penalty", "1.1"]);
    assert_success(&webtensor(&dir, &args));
}

#[test]
fn output_files_are_written_as_what_they_are() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("outputs");
    let a = dir.join("a.npy").display().to_string();
    webtensor::io::write_npy(&a, &webtensor::HostTensor::f32(&[2, 2], vec![1., 2., 3., 4.]).unwrap()).unwrap();
    let run = |out: &str| webtensor(&dir, &["matmul", &a, &a, "-o", out, "--backend", "cpu"]);
    // a symbolic link is written through, and stays a link
    let target = dir.join("target.npy");
    std::fs::write(&target, b"old").unwrap();
    let link = dir.join("link.npy");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert_success(&run(link.to_str().unwrap()));
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link was replaced");
    assert_eq!(webtensor::io::read_npy(target.to_str().unwrap()).unwrap().data.to_f32(), [7., 10., 15., 22.]);
    // an existing file keeps its permissions
    let kept = dir.join("kept.npy");
    std::fs::write(&kept, b"old").unwrap();
    std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o640)).unwrap();
    assert_success(&run(kept.to_str().unwrap()));
    assert_eq!(std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777, 0o640);
    // a device is written as a device: /dev/null stays a device, /dev/full reports the full disk
    assert_success(&run("/dev/null"));
    assert!(!std::fs::metadata("/dev/null").unwrap().is_file());
    if Path::new("/dev/full").exists() {
        assert_one_error(&run("/dev/full"), 1, &["/dev/full", "No space left"]);
        assert!(!std::fs::metadata("/dev/full").unwrap().is_file(), "/dev/full was replaced by a file");
    }
    // a FIFO is written into, not replaced
    let fifo = dir.join("pipe.npy");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap().len())
    };
    assert_success(&run(fifo.to_str().unwrap()));
    assert!(reader.join().unwrap() > 0);
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo_like());
    // a dangling link and a directory are errors
    let dangling = dir.join("dangling.npy");
    std::os::unix::fs::symlink(dir.join("nowhere/x.npy"), &dangling).unwrap();
    assert_one_error(&run(dangling.to_str().unwrap()), 1, &["dangling.npy"]);
    assert_one_error(&run(dir.to_str().unwrap()), 1, &["directory"]);
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}

impl FifoLike for std::fs::FileType {
    fn is_fifo_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_fifo(self)
    }
}

#[test]
fn names_from_files_are_escaped_before_a_terminal_sees_them() {
    let dir = scratch("escapes");
    let mut t = TinyLlama::new().set("evil.key\u{1b}[2J\nx", Meta::Str("v\u{7}\n\u{202e}".into()));
    t.tensors.push(("bad\u{1b}]0;title\u{7}name".into(), t.tensors[1].1.clone()));
    let model = tiny(&dir, &t);
    let out = assert_success(&webtensor(&dir, &["inspect", &model]));
    assert!(!out.chars().any(|c| c == '\u{1b}' || c == '\u{7}' || c == '\u{202e}'), "{out:?}");
    assert!(out.contains("evil.key\\u{1b}[2J\\nx"), "{out}");
    assert!(out.contains("bad\\u{1b}]0;title\\u{7}name"), "{out}");
}

#[test]
fn paths_that_are_not_model_files_are_one_error() {
    let dir = scratch("not-models");
    let d = dir.display().to_string();
    assert_one_error(&webtensor(&dir, &["generate", "--model", &d, "--prompt", "x"]), 1, &["a directory", "expected"]);
    assert_one_error(&webtensor(&dir, &["inspect", "/dev/zero.gguf"]), 1, &["/dev/zero.gguf"]);
    assert_one_error(
        &webtensor(&dir, &["generate", "--model", "/dev/zero", "--prompt", "x"]),
        1,
        &["/dev/zero", "not a regular file"],
    );
    assert_one_error(&webtensor(&dir, &["matmul", "/dev/zero", "/dev/zero", "-o", "x.npy"]), 1, &["/dev/zero"]);
    // a FIFO with no writer: opening it would wait forever, so it is refused before it is opened
    let fifo = dir.join("pipe.gguf");
    let _ = std::fs::remove_file(&fifo);
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let f = fifo.display().to_string();
    for args in [vec!["generate", "--model", &f, "--prompt", "x"], vec!["inspect", &f], vec!["chat", "--model", &f]] {
        assert_one_error(&webtensor(&dir, &args), 1, &["pipe.gguf", "not a regular file"]);
    }
    let m = dir.join("model.gguf");
    std::fs::write(&m, b"").unwrap();
    // an empty .gguf file is read as a BERT GGUF file, and refused as one; another file is not a directory
    let out = webtensor(&dir, &["embed", "--model", m.to_str().unwrap(), "hi", "--backend", "cpu"]);
    assert_error_last(&out, 1, &["model.gguf", "magic"]);
    let m = dir.join("model.bin");
    std::fs::write(&m, b"").unwrap();
    let out = webtensor(&dir, &["embed", "--model", m.to_str().unwrap(), "hi", "--backend", "cpu"]);
    assert_error_last(&out, 1, &["model.bin", "not a directory"]);
    assert_one_error(
        &webtensor(&dir, &["embed", "--model", &d, "--file", "/dev/zero"]),
        1,
        &["/dev/zero", "not a regular file"],
    );
}

#[test]
fn an_error_in_a_chat_turn_is_on_its_own_line_and_the_chat_goes_on() {
    let dir = scratch("chat-error");
    // a template that raises on the second turn
    let t = TinyLlama::new().set(
        "tokenizer.chat_template",
        Meta::Str(
            "{% if messages|length > 1 %}{{ raise_exception('only one message') }}{% endif %}{{ messages[0].content }}"
                .into(),
        ),
    );
    let model = tiny(&dir, &t);
    let chat = |input: &[u8]| chat_with(&dir, &["--model", &model, "-n", "2", "--backend", "cpu"], input);
    let out = chat(b"hello\nagain\n/reset\nhello\n");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(errors[0].starts_with("error: ") && errors[0].contains("only one message"), "{stderr}");
    assert!(errors[0].contains(&model), "the turn's error names the model file: {stderr}");
    // the exit status is the last turn's
    let out = chat(b"hello\nagain\n");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).ends_with("error: the conversation's last turn failed\n"), "{}", text(&out.stderr));
    assert!(stderr.contains("(conversation reset)"), "the chat went on: {stderr}");
    assert_eq!(stderr.matches("stopped:").count(), 2, "two answers: {stderr}");
}

/// `webtensor chat ARGS` in `dir` with `input` on its stdin.
fn chat_with(dir: &std::path::Path, args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = common::cli::spawn(dir, &[&["chat"][..], args].concat());
    use std::io::Write;
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// Without `-n`, a chat answer runs to the model's end of turn or a full context (as llama-cli's conversation
/// mode and Ollama), never to a default cap; the device is described once.
#[test]
fn a_chat_answer_is_not_cut_off_by_default() {
    let dir = scratch("chat-uncapped");
    let model = tiny(&dir, &TinyLlama::new());
    let out = chat_with(&dir, &["--model", &model, "--ctx", "48", "--backend", "cpu"], b"hello\n");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let note = stderr.lines().find(|l| l.contains("stopped:")).unwrap_or_else(|| panic!("no stop note: {stderr}"));
    assert!(!note.contains("max tokens"), "{note}");
    assert!(note.contains("end of the answer") || note.contains("is full"), "{note}");
    assert_eq!(stderr.matches("CPU backend (").count(), 1, "the device described once: {stderr}");
}

#[test]
fn a_chat_template_that_does_not_compile_fails_chat_only() {
    let dir = scratch("bad-template");
    let model = tiny(&dir, &TinyLlama::new().set("tokenizer.chat_template", Meta::Str("{% if %}".into())));
    let out =
        webtensor(&dir, &["generate", "--model", &model, "--prompt", "hi", "--chat", "-n", "2", "--backend", "cpu"]);
    assert_error_last(&out, 1, &["chat template", "does not compile"]);
    assert_success(&webtensor(&dir, &["generate", "--model", &model, "--prompt", "hi", "-n", "2", "--backend", "cpu"]));
}

#[test]
fn a_context_beyond_memory_is_one_error_before_allocating() {
    let dir = scratch("huge-ctx");
    let model = tiny(&dir, &TinyLlama::new());
    let out = webtensor(
        &dir,
        &["generate", "--model", &model, "--prompt", "hi", "--ctx", "1000000000000", "--backend", "cpu"],
    );
    assert_error_last(&out, 1, &["KV cache", "GiB"]);
}

/// Any GGUF the `gguf` package (llama.cpp's own writer) writes for a llama model with random metadata
/// (`scripts/random_llama_gguf.py`: mostly valid, sometimes not) loads and generates, or fails with one clean error
/// line; never a panic, an abort or a hang.
#[test]
fn random_llama_files_from_gguf_py_run_or_fail_cleanly() {
    let dir = scratch("random-gguf");
    let script = common::repo_file("scripts/random_llama_gguf.py");
    let made =
        std::process::Command::new("python3").args([script.as_str(), dir.to_str().unwrap(), "40", "11"]).output();
    let Some(made) = made.ok().filter(|o| o.status.success()) else {
        assert!(std::env::var("REQUIRE_MODELS").as_deref() != Ok("1"), "the gguf Python package is missing");
        return println!("SKIPPED: pip install gguf");
    };
    println!("{}", text(&made.stdout).trim());
    let (mut ran, mut refused) = (0, 0);
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for f in files {
        let start = std::time::Instant::now();
        let out = webtensor(
            &dir,
            &["generate", "--model", f.to_str().unwrap(), "--prompt", "hello the", "-n", "3", "--backend", "cpu"],
        );
        assert!(start.elapsed() < std::time::Duration::from_secs(20), "{f:?} took {:?}", start.elapsed());
        if out.status.success() {
            ran += 1;
        } else {
            let line = assert_error_last(&out, 1, &[]);
            assert!(
                line.contains(f.file_name().unwrap().to_str().unwrap()) || line.contains("KV cache"),
                "{f:?}: the error names the file: {line}"
            );
            refused += 1;
        }
    }
    println!("{ran} files generated, {refused} refused with one error line");
    assert!(ran >= 5 && refused >= 5, "{ran} ran, {refused} refused: the sample should have both");
}
