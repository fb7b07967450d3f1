//! The reports of `webtensor bench matmul`: a markdown table per workload kind (units in every cell, ratios of
//! webtensor to each peer measured in the same run), the same figures as JSON with the machine, the devices and
//! the peers' versions, and an SVG plot of matmul GFLOP/s against N (plotters, SVG backend only).

use super::work::{short, Entry, Measured, Timing, Work};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use webtensor::{DType, Device};

const METHOD: &str = "Medians of the samples, taken after a warm-up, the libraries interleaved sample by sample. \
webtensor: the headline figure is the marginal time of one op, (Plan::run of a plan chaining 1+Q ops - Plan::run \
of a one-op plan) / Q, in which uploads and readback cancel; \"run\" is Plan::run of the one-op plan (upload + \
dispatch + readback). numpy: np.matmul(a, b, out=c); torch: torch.matmul(a, b, out=c) between \
torch.cuda.synchronize() calls. A sample of the one-op plan, numpy or torch is the mean of back-to-back calls \
filling >= 20 ms. \
1 GFLOP = 1e9 floating-point operations, 2*M*N*K per matmul. Mat-vec: GB/s of weights (bytes of W / time). \
Copy: (read + write bytes) / time of webtensor's Graph::contiguous kernel or torch's dst.copy_(src).";

/// Line colours of the plot (matplotlib's tab10, which stays readable on white).
const COLORS: [plotters::style::RGBColor; 10] = {
    use plotters::style::RGBColor as C;
    [
        C(0x1f, 0x77, 0xb4),
        C(0xd6, 0x27, 0x28),
        C(0x2c, 0xa0, 0x2c),
        C(0xff, 0x7f, 0x0e),
        C(0x94, 0x67, 0xbd),
        C(0x8c, 0x56, 0x4b),
        C(0xe3, 0x77, 0xc2),
        C(0x7f, 0x7f, 0x7f),
        C(0xbc, 0xbd, 0x22),
        C(0x17, 0xbe, 0xcf),
    ]
};

pub struct Doc<'a> {
    measured: &'a [Measured],
    devices: &'a [Device],
    hello: &'a Value,
    /// Samples per figure (`--repeats`).
    repeats: u32,
    wall: Duration,
    /// The highest 1-minute load average seen between workloads.
    load: Option<f64>,
}

/// Table a workload belongs to.
fn table_of(w: &Work) -> (u8, String) {
    match w {
        Work::MatMul { dtype: DType::F32, .. } => (0, "matmul f32 (N×N · N×N)".into()),
        Work::MatMul { dtype, .. } => (1, format!("matmul {} (N×N · N×N, f32 accumulation)", short(*dtype))),
        Work::QuantMatMul { m: 1, .. } => {
            (4, "mat-vec, block-quantized weights (x f32 [1, K] · t(W [N, K]), K = N)".into())
        }
        Work::QuantMatMul { m, .. } => (
            2,
            format!("prefill matmul, block-quantized weights (x f32 [{m}, K] · t(W [N, K]), K = N; peers: W in f16)"),
        ),
        Work::MatVec { .. } => (3, "mat-vec, f16 weights (x f32 [1, K], K = N)".into()),
        Work::Copy { .. } => (5, "device copy bandwidth (read + write)".into()),
    }
}

/// The figure of `s` seconds for `w`, with its unit.
fn figure(w: &Work, s: f64) -> String {
    match w {
        Work::Copy { .. } => format!("{:.1} GB/s", w.bytes() / s / 1e9),
        _ if w.is_matvec() => format!("{:.1} GB/s, {:.1} GFLOP/s", w.bytes() / s / 1e9, w.flops() / s / 1e9),
        _ => format!("{:.1} GFLOP/s", w.flops() / s / 1e9),
    }
}

/// The samples' range in the figure's first unit, slowest to fastest: `[lo–hi]`.
fn spread(w: &Work, t: &Timing) -> String {
    let per_s = |s: f64| {
        if w.is_matvec() || matches!(w, Work::Copy { .. }) {
            w.bytes() / s / 1e9
        } else {
            w.flops() / s / 1e9
        }
    };
    format!("[{:.1}–{:.1}]", per_s(t.range.1), per_s(t.range.0))
}

/// How far the slowest sample is from the fastest, as a factor.
fn spread_factor(t: &Timing) -> f64 {
    if t.range.0 > 0.0 {
        t.range.1 / t.range.0
    } else {
        1.0
    }
}

/// A figure whose samples spread more than this (slowest / fastest) is flagged as unreliable.
pub const NOISY: f64 = 2.0;

/// The 1-minute load average (`/proc/loadavg`; `None` elsewhere).
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// The warnings a run's figures call for: samples spread over [`NOISY`]×, or a machine busier than its threads.
pub fn noise_warnings(measured: &[Measured], load: Option<f64>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(l) = load.filter(|&l| l > nproc() as f64) {
        out.push(format!(
            "the load average reached {l:.1} with {} CPU threads: other work shared the machine, figures are unreliable",
            nproc()
        ));
    }
    for m in measured {
        for e in &m.entries {
            let Ok(t) = &e.outcome else { continue };
            let f = spread_factor(t);
            if f > NOISY {
                let row = row_name(&m.work);
                out.push(format!(
                    "{} at {row}: samples spread {f:.1}× (slowest / fastest): that figure is unreliable",
                    e.label
                ));
            }
        }
    }
    out
}

fn row_name(w: &Work) -> String {
    match *w {
        Work::MatMul { n, .. } => n.to_string(),
        Work::MatVec { k, transposed: false } => format!("{k}, W [K, N]"),
        Work::MatVec { k, transposed: true } => format!("{k}, x · t(W), W [N, K]"),
        Work::QuantMatMul { k, dtype, .. } => format!("{}, {k}", short(dtype)),
        Work::Copy { bytes } => format!("{} MiB", bytes >> 20),
    }
}

/// The first word of a reason (`absent`, `skipped`, `n/a`, `failed`), for a table cell.
fn status(why: &str) -> &str {
    why.split(':').next().unwrap_or(why)
}

/// Pairs compared: webtensor's CPU-bound entries only with CPU peers; a GPU device with every peer.
fn compared(ours: &Entry, peer: &Entry) -> bool {
    ours.ours && !peer.ours && (peer.on_cpu || !ours.on_cpu)
}

fn ratio(ours: &Entry, peer: &Entry) -> Option<(f64, Option<f64>)> {
    let (Ok(o), Ok(p)) = (&ours.outcome, &peer.outcome) else { return None };
    Some((p.s / o.s, o.run_s.map(|r| p.s / r)))
}

/// `YYYY-MM-DD HH:MM UTC` (days to civil date after Howard Hinnant).
fn utc_now() -> (u64, String) {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let z = (secs / 86400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (secs, format!("{y:04}-{m:02}-{d:02} {:02}:{:02} UTC", secs % 86400 / 3600, secs % 3600 / 60))
}

fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info.lines().find_map(|l| l.strip_prefix("model name")?.split(':').nth(1)).map(str::trim);
    model.unwrap_or(std::env::consts::ARCH).to_string()
}

fn nproc() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

impl<'a> Doc<'a> {
    pub fn new(
        measured: &'a [Measured],
        devices: &'a [Device],
        hello: &'a Value,
        repeats: u32,
        wall: Duration,
        load: Option<f64>,
    ) -> Doc<'a> {
        Doc { measured, devices, hello, repeats, wall, load }
    }

    /// Tables in order, each with its rows.
    fn tables(&self) -> Vec<(String, Vec<&'a Measured>)> {
        let mut keys: Vec<(u8, String)> = self.measured.iter().map(|m| table_of(&m.work)).collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .map(|(k, title)| (title, self.measured.iter().filter(|m| table_of(&m.work).0 == k).collect()))
            .collect()
    }

    fn peers_line(&self) -> String {
        let h = self.hello;
        let s = |k: &str| h.get(k).and_then(Value::as_str);
        if let Some(why) = s("absent") {
            return format!("peers: none ({why})");
        }
        let numpy = match s("numpy") {
            Some(v) => {
                let ob = h.get("openblas").filter(|o| o.is_object());
                let core = ob.and_then(|o| o.get("corename")).and_then(Value::as_str).unwrap_or("?");
                let threads = ob.and_then(|o| o.get("threads")).map(|t| t.to_string()).unwrap_or("?".into());
                let extra = if ob.is_some() { format!(", core {core}, {threads} threads") } else { String::new() };
                format!("numpy {v} (BLAS: {}{extra})", s("blas").unwrap_or("unknown"))
            }
            None => format!("numpy absent ({})", s("numpy_absent").unwrap_or("?")),
        };
        let torch = match (s("torch"), s("cuda_device")) {
            (Some(v), Some(d)) => format!("torch {v} on {d} (TF32 set through {})", s("tf32_api").unwrap_or("?")),
            _ => format!("torch absent ({})", s("torch_absent").unwrap_or("?")),
        };
        format!("peers: {numpy}; {torch}")
    }

    pub fn markdown(&self) -> String {
        let (_, date) = utc_now();
        let mut md = format!("## webtensor bench matmul, {date}\n\n");
        md += &format!("- machine: {}, {} CPU threads\n", cpu_model(), nproc());
        for d in self.devices {
            let c = d.capabilities();
            md += &format!(
                "- webtensor {}: {} [{}, {}], driver {}\n",
                c.backend, c.name, c.backend, c.device_type, c.driver
            );
        }
        md += &format!("- {}\n", self.peers_line());
        let settings: Vec<String> = settings().iter().map(|(k, v)| format!("{k}={v}")).collect();
        if !settings.is_empty() {
            md += &format!("- settings: {}\n", settings.join(", "));
        }
        md += &format!(
            "- {} samples per figure (median, [slowest–fastest] beside it); whole run {:.0} s; load average {}\n",
            self.repeats,
            self.wall.as_secs_f64(),
            self.load.map_or("unknown".into(), |l| format!("at most {l:.1}"))
        );
        for w in noise_warnings(self.measured, self.load) {
            md += &format!("- ⚠ {w}\n");
        }
        md += "\n";
        let copies: Vec<&Entry> = self
            .measured
            .iter()
            .filter(|m| matches!(m.work, Work::Copy { .. }))
            .flat_map(|m| m.entries.iter().filter(|e| e.outcome.is_ok()))
            .collect();
        let copy_work = self.measured.iter().find(|m| matches!(m.work, Work::Copy { .. })).map(|m| m.work);
        for (title, rows) in self.tables() {
            md += &self.table_markdown(&title, &rows, &copies, copy_work);
        }
        md += &format!("Method: {METHOD}\n");
        md
    }

    /// One table of the markdown report: a row per size, a column per figure and ratio, notes below.
    fn table_markdown(&self, title: &str, rows: &[&Measured], copies: &[&Entry], copy_work: Option<Work>) -> String {
        let (labels, notes) = labels_and_notes(rows);
        let first = match rows[0].work {
            Work::MatMul { .. } => "N",
            Work::MatVec { .. } => "K = N",
            Work::QuantMatMul { .. } => "weights, K = N",
            Work::Copy { .. } => "size",
        };
        let mut head = vec![first.to_string()];
        for l in &labels {
            head.push(l.label.clone());
            if l.ours {
                head.push(format!("{}, run", l.label));
            }
        }
        let gpu_kernels: Vec<&str> =
            labels.iter().filter(|l| l.ours && l.label != "webtensor cpu").map(|l| l.label.as_str()).collect();
        head.extend(gpu_kernels.iter().map(|l| format!("{l} kernel")));
        // ratios measured while other work loaded the machine are left out of the report, not only flagged
        let trusted = self.ratios_trusted();
        let pairs: Vec<(&Entry, &Entry)> = labels
            .iter()
            .flat_map(|&o| labels.iter().map(move |&p| (o, p)))
            .filter(|(o, p)| trusted && compared(o, p))
            .collect();
        head.extend(pairs.iter().map(|(o, p)| format!("{} / {}", o.label, p.label)));
        let vs_copy: Vec<(&str, &Entry)> = if title.starts_with("mat-vec") {
            gpu_kernels.iter().flat_map(|&o| copies.iter().map(move |&c| (o, c))).collect()
        } else {
            vec![]
        };
        head.extend(vs_copy.iter().map(|(o, c)| format!("{o} / copy by {}", c.label)));
        let mut md = format!("### {title}\n\n| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
        let columns =
            Columns { labels: &labels, gpu_kernels: &gpu_kernels, pairs: &pairs, vs_copy: &vs_copy, copy_work };
        for m in rows {
            md += &format!("| {} |\n", columns.cells(m).join(" | "));
        }
        md += "\n";
        for n in notes {
            md += &format!("- {n}\n");
        }
        if !trusted {
            md += "- ratios left out: the load average was above the machine's CPU threads during the run\n";
        }
        md + "\n"
    }

    /// Whether the run's ratios can be reported: the load average stayed within the CPU threads.
    fn ratios_trusted(&self) -> bool {
        self.load.is_none_or(|l| l <= nproc() as f64)
    }

    pub fn json(&self) -> Value {
        let (secs, date) = utc_now();
        let entry = |w: &Work, e: &Entry| -> Value {
            let mut v = json!({"label": e.label, "ours": e.ours, "on_cpu": e.on_cpu});
            match &e.outcome {
                Ok(t) => {
                    v["ms"] = json!(t.s * 1e3);
                    if t.bounded {
                        v["ms_is_upper_bound"] = json!(true);
                    }
                    v["ms_range"] = json!([t.range.0 * 1e3, t.range.1 * 1e3]);
                    if w.flops() > 0.0 {
                        v["gflops"] = json!(w.flops() / t.s / 1e9);
                    }
                    if w.bytes() > 0.0 {
                        v["gbps"] = json!(w.bytes() / t.s / 1e9);
                    }
                    if let Some(r) = t.run_s {
                        v["run_ms"] = json!(r * 1e3);
                        v["run_gflops"] = json!(w.flops() / r / 1e9);
                        v["run_gbps"] = json!(w.bytes() / r / 1e9);
                        v["chain_q"] = json!(t.chain);
                        v["kernels"] = json!(t.kernels);
                        v["run_upload_bytes"] = json!(t.transfer.upload_bytes);
                        v["run_readback_bytes"] = json!(t.transfer.readback_bytes);
                        v["run_host_copy_bytes"] = json!(t.transfer.host_copy_bytes);
                    }
                }
                Err(why) => v["status"] = json!(why),
            }
            v
        };
        let results: Vec<Value> = self
            .measured
            .iter()
            .map(|m| {
                let w = &m.work;
                let (kind, dims) = match *w {
                    Work::MatMul { n, dtype } => ("matmul", json!({"m": n, "k": n, "n": n, "dtype": short(dtype)})),
                    Work::MatVec { k, transposed } => ("matvec", json!({"m": 1, "k": k, "n": k, "a_dtype": "f32", "w_dtype": "f16", "w_stored": if transposed { "[N, K], read as t(W)" } else { "[K, N]" }})),
                    Work::QuantMatMul { m, k, dtype } => (
                        if m == 1 { "matvec" } else { "matmul" },
                        json!({"m": m, "k": k, "n": k, "a_dtype": "f32", "w_dtype": short(dtype), "w_stored": "[N, K], read as t(W)", "w_bytes": w.bytes()}),
                    ),
                    Work::Copy { bytes } => ("copy", json!({"bytes": bytes, "dtype": "f32"})),
                };
                let ratios: Vec<Value> = m
                    .entries
                    .iter()
                    .flat_map(|o| m.entries.iter().map(move |p| (o, p)))
                    .filter(|(o, p)| o.ours && !p.ours && self.ratios_trusted())
                    .filter_map(|(o, p)| ratio(o, p).map(|(k, r)| json!({"ours": o.label, "peer": p.label, "ratio": k, "ratio_run": r})))
                    .collect();
                json!({"workload": w.title(), "kind": kind, "shape": dims, "flops": w.flops(), "bytes": w.bytes(),
                       "entries": m.entries.iter().map(|e| entry(w, e)).collect::<Vec<_>>(), "ratios": ratios})
            })
            .collect();
        let removed: serde_json::Map<String, Value> =
            super::peer::OPENBLAS_VARS.iter().map(|v| (v.to_string(), json!(std::env::var(v).ok()))).collect();
        json!({
            "tool": "webtensor bench matmul",
            "version": env!("CARGO_PKG_VERSION"),
            "argv": std::env::args().collect::<Vec<_>>(),
            "unix_time": secs,
            "date": date,
            "wall_seconds": self.wall.as_secs_f64(),
            "machine": {"nproc": nproc(), "cpu_model": cpu_model(), "os": std::env::consts::OS, "arch": std::env::consts::ARCH},
            "devices": self.devices.iter().map(|d| {
                let c = d.capabilities();
                json!({"label": format!("webtensor {}", c.backend), "name": c.name, "backend": c.backend.name(), "device_type": c.device_type.name(), "driver": c.driver})
            }).collect::<Vec<_>>(),
            "peers": self.hello,
            "settings": settings().into_iter().collect::<serde_json::Map<String, serde_json::Value>>(),
            "env_removed_for_peers": removed,
            "repeats": self.repeats,
            "method": METHOD,
            "results": results,
        })
    }

    /// Each plotted line: its name and points.
    fn series(&self) -> Vec<Series> {
        let mut series: Vec<Series> = Vec::new();
        for m in self.measured {
            let Work::MatMul { n, dtype } = m.work else { continue };
            for e in &m.entries {
                let Ok(t) = &e.outcome else { continue };
                let name = if e.label.starts_with("torch") {
                    e.label.clone()
                } else {
                    format!("{} {}", e.label, short(dtype))
                };
                let f = m.work.flops() / 1e9;
                let point = (n as f64, f / t.s, f / t.range.1, f / t.range.0);
                match series.iter_mut().find(|(s, _)| *s == name) {
                    Some((_, pts)) => pts.push(point),
                    None => series.push((name, vec![point])),
                }
            }
        }
        series
    }

    /// Draws matmul GFLOP/s against N (log axes), one line per library and dtype, each point with its value
    /// and a bar from the slowest sample to the fastest. `Ok(false)` when there is nothing to draw.
    pub fn plot(&self, path: &Path) -> Result<bool, String> {
        use plotters::prelude::*;
        let series = self.series();
        let pts = || series.iter().flat_map(|(_, p)| p.iter().copied());
        let (Some(x0), Some(x1)) = (pts().map(|p| p.0).reduce(f64::min), pts().map(|p| p.0).reduce(f64::max)) else {
            return Ok(false);
        };
        let y0 = pts().map(|p| p.2.min(p.1)).fold(f64::INFINITY, f64::min);
        let y1 = pts().map(|p| p.3.max(p.1)).fold(0.0, f64::max);
        let mut sizes: Vec<f64> = pts().map(|p| p.0).collect();
        sizes.sort_by(f64::total_cmp);
        sizes.dedup();
        let err = |e: &dyn std::fmt::Display| e.to_string();
        let mut svg = String::new();
        let root = SVGBackend::with_string(&mut svg, (960, 600)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let (lo, hi) = (y0 / 2.0, y1 * 2.0);
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "matmul throughput, GFLOP/s (higher is better; bars: slowest to fastest sample)",
                ("sans-serif", 20),
            )
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(80)
            .build_cartesian_2d(
                (x0 / 1.3..x1 * 1.3).log_scale().with_key_points(sizes),
                (lo..hi).log_scale().with_key_points(decade_ticks(lo, hi)),
            )
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("N (N×N · N×N)")
            .y_desc("GFLOP/s")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y}"))
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (name, p)) in series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let line: Vec<(f64, f64)> = p.iter().map(|q| (q.0, q.1)).collect();
            chart
                .draw_series(LineSeries::new(line, color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            chart.draw_series(p.iter().map(|&q| Circle::new((q.0, q.1), 4, color.filled()))).map_err(|e| err(&e))?;
            let bars = p.iter().map(|&q| ErrorBar::new_vertical(q.0, q.2, q.1, q.3, color.stroke_width(1), 8));
            chart.draw_series(bars).map_err(|e| err(&e))?;
            let font = ("sans-serif", 12).into_font().color(&color);
            let labels = p.iter().map(|&q| Text::new(three_digits(q.1), (q.0, q.1), font.clone()));
            chart.draw_series(labels).map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
        drop(chart);
        drop(root);
        webtensor::io::write_file(&path.display().to_string(), svg.as_bytes()).map_err(|e| err(&e))?;
        Ok(true)
    }
}

/// A plotted line: its name and points (N, GFLOP/s, the slowest sample's, the fastest sample's).
type Series = (String, Vec<(f64, f64, f64, f64)>);

/// `v` to about three significant digits: 1234, 123, 12.3, 1.23.
fn three_digits(v: f64) -> String {
    match v {
        v if v >= 100.0 => format!("{v:.0}"),
        v if v >= 10.0 => format!("{v:.1}"),
        v => format!("{v:.2}"),
    }
}

/// Y-axis ticks for a log axis over `lo..hi`: every power of ten inside it, with 2× and 5× between them when the
/// axis spans fewer than three decades.
fn decade_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let steps: &[f64] = if b - a < 3 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    (a..=b).flat_map(|e| steps.iter().map(move |&m| m * 10f64.powi(e))).filter(|&v| v >= lo && v <= hi).collect()
}

/// The kernels of a webtensor timing, and what one run of its one-op plan moved and copied on the host.
/// The columns of a table: every label with at least one figure, in order of first appearance, and the notes of
/// what failed or was skipped.
fn labels_and_notes<'m>(rows: &[&'m Measured]) -> (Vec<&'m Entry>, Vec<String>) {
    let mut labels: Vec<&Entry> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for e in rows.iter().flat_map(|m| &m.entries) {
        let shown = rows.iter().flat_map(|m| &m.entries).any(|x| x.label == e.label && x.outcome.is_ok());
        if shown && !labels.iter().any(|l| l.label == e.label) {
            labels.push(e);
        }
        if let Err(why) = &e.outcome {
            let note = format!("{}: {why}", e.label);
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
    }
    (labels, notes)
}

/// A table's columns after the first: each library's figure (and ours' run figure), our GPU kernels, the
/// ratios, and mat-vec against copy bandwidth.
struct Columns<'a> {
    labels: &'a [&'a Entry],
    gpu_kernels: &'a [&'a str],
    pairs: &'a [(&'a Entry, &'a Entry)],
    vs_copy: &'a [(&'a str, &'a Entry)],
    copy_work: Option<Work>,
}

impl Columns<'_> {
    /// The cells of workload `m`'s row.
    fn cells(&self, m: &Measured) -> Vec<String> {
        let get = |label: &str| m.entries.iter().find(|e| e.label == label);
        let mut cells = vec![row_name(&m.work)];
        for l in self.labels {
            let e = get(&l.label);
            cells.push(match e.map(|e| &e.outcome) {
                Some(Ok(t)) => {
                    let flag = if spread_factor(t) > NOISY { " ⚠" } else { "" };
                    // a bound: the op alone measured slower than a whole run of it, so the run's figure is its floor
                    let bound = if t.bounded { "≥ " } else { "" };
                    format!("{bound}{} {}{flag}", figure(&m.work, t.s), spread(&m.work, t))
                }
                Some(Err(why)) => status(why).to_string(),
                None => "—".into(),
            });
            if l.ours {
                cells.push(match e.map(|e| &e.outcome) {
                    Some(Ok(t)) => t.run_s.map_or("—".into(), |r| figure(&m.work, r)),
                    Some(Err(why)) => status(why).to_string(),
                    None => "—".into(),
                });
            }
        }
        for l in self.gpu_kernels {
            cells.push(kernel_cell(get(l).and_then(|e| e.outcome.as_ref().ok())));
        }
        for (o, p) in self.pairs {
            cells.push(match get(&o.label).zip(get(&p.label)).and_then(|(o, p)| ratio(o, p)) {
                Some((k, Some(run))) => format!("{k:.2}× (run {run:.2}×)"),
                Some((k, None)) => format!("{k:.2}×"),
                None => "—".into(),
            });
        }
        for (o, c) in self.vs_copy {
            let (Some(Ok(t)), Ok(ct), Some(cw)) = (get(o).map(|e| &e.outcome), &c.outcome, self.copy_work) else {
                cells.push("—".into());
                continue;
            };
            cells.push(format!("{:.0}%", (m.work.bytes() / t.s) / (cw.bytes() / ct.s) * 100.0));
        }
        cells
    }
}

fn kernel_cell(t: Option<&Timing>) -> String {
    let Some(t) = t.filter(|t| !t.kernels.is_empty()) else { return "—".into() };
    let mut k = t.kernels.clone();
    k.dedup();
    let x = &t.transfer;
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let moved = mib(x.upload_bytes + x.readback_bytes);
    format!("{} (a run moves {moved:.1} MiB; host copies {:.1} MiB)", k.join(", "), mib(x.host_copy_bytes))
}

/// The webtensor environment variables that change which kernels run, where set.
fn settings() -> Vec<(String, serde_json::Value)> {
    [webtensor::gpu::MATMUL_ENV, webtensor::gpu::SHADER_CHECKS_ENV, webtensor::BACKEND_ENV]
        .iter()
        .filter_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()).map(|v| (k.to_string(), json!(v))))
        .collect()
}
