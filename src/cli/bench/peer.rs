//! The peers' side of `webtensor bench`: one long-lived `python3 -c <scripts/peer_matmul.py> --serve` process
//! (the script is embedded in the binary), spoken to in JSON lines. A missing Python, numpy or torch is "absent",
//! never an error.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The helper script, run with `python -c`.
const SCRIPT: &str = include_str!("../../../scripts/peer_matmul.py");

/// OpenBLAS variables that slow current numpy when set for another BLAS build; removed from the helper's
/// environment only (webtensor's own process keeps them).
pub const OPENBLAS_VARS: [&str; 2] = ["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"];

pub struct Peers {
    child: Option<(Child, ChildStdin, BufReader<ChildStdout>)>,
    /// The helper's `hello` reply (versions, BLAS, CUDA device), or `{"absent": why}`.
    pub hello: Value,
}

impl Peers {
    /// Starts the helper as `python -c SCRIPT --serve` (no temporary file). When it cannot start, every peer
    /// is absent and `hello` says why.
    pub fn start(python: &str) -> Peers {
        let absent = |why: String| Peers { child: None, hello: json!({ "absent": why }) };
        let mut cmd = Command::new(python);
        cmd.arg("-c").arg(SCRIPT).arg("--serve").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        for v in OPENBLAS_VARS {
            cmd.env_remove(v);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return absent(format!("cannot run {python}: {e}")),
        };
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            return absent("no pipes to the peer helper".into());
        };
        let mut peers = Peers { child: Some((child, stdin, BufReader::new(stdout))), hello: Value::Null };
        peers.hello = peers.ask(&json!({ "op": "hello" }));
        peers
    }

    /// No helper: every peer is absent (`--vs none`).
    pub fn none() -> Peers {
        Peers { child: None, hello: json!({ "absent": "no peers asked for (--vs none)" }) }
    }

    /// Sends one request and waits for its reply; a dead helper answers `{"absent": ...}`.
    fn ask(&mut self, req: &Value) -> Value {
        let Some((_, stdin, stdout)) = self.child.as_mut() else {
            let why = self.hello.get("absent").cloned().unwrap_or_else(|| json!("the peer helper is not running"));
            return json!({ "absent": why });
        };
        let mut line = String::new();
        let ok = writeln!(stdin, "{req}").and_then(|()| stdin.flush()).is_ok()
            && stdout.read_line(&mut line).map(|n| n > 0).unwrap_or(false);
        if !ok {
            self.stop();
            return json!({ "absent": "the peer helper exited" });
        }
        serde_json::from_str(&line).unwrap_or_else(|e| json!({ "error": format!("bad reply {line:?}: {e}") }))
    }

    /// Prepares (allocates, warms up) a peer case; `Err(why)` when the peer is absent or failed.
    pub fn prepare(&mut self, id: &str, lib: &str, spec: &Value) -> Result<(), String> {
        let mut req = spec.clone();
        req["op"] = json!("prepare");
        req["id"] = json!(id);
        req["lib"] = json!(lib);
        let r = self.ask(&req);
        match (r.get("ok"), r.get("absent"), r.get("error")) {
            (Some(_), ..) => Ok(()),
            (_, Some(why), _) => Err(format!("absent: {}", why.as_str().unwrap_or("?"))),
            (.., Some(e)) => Err(format!("failed: {}", e.as_str().unwrap_or("?"))),
            _ => Err(format!("failed: unexpected reply {r}")),
        }
    }

    /// Seconds per operation of a prepared case (one sample).
    pub fn time(&mut self, id: &str) -> Result<f64, String> {
        let r = self.ask(&json!({ "op": "time", "id": id }));
        r.get("s").and_then(Value::as_f64).ok_or_else(|| format!("failed: {r}"))
    }

    pub fn free(&mut self, id: &str) {
        self.ask(&json!({ "op": "free", "id": id }));
    }

    fn stop(&mut self) {
        if let Some((mut child, stdin, _)) = self.child.take() {
            drop(stdin); // EOF: the helper's loop ends
            if !matches!(child.try_wait(), Ok(Some(_))) {
                std::thread::sleep(std::time::Duration::from_millis(200));
                if !matches!(child.try_wait(), Ok(Some(_))) {
                    let _ = child.kill();
                }
            }
            let _ = child.wait();
        }
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        self.stop();
    }
}
