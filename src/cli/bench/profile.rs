//! `bench generate --profile`: a decode step's GPU time by kernel at each `--decode-at` KV length, from timestamp
//! queries written around every dispatch ([`webtensor::Plan::set_profiling`]).

use super::super::CliError;
use super::helper::median;
use webtensor::models::Llama;

/// Decode steps profiled at each KV length; each dispatch's time is its median over them.
pub(super) const PROFILE_STEPS: usize = 8;

/// Kernels named in a line; the rest are summed as "others".
const SHOWN: usize = 8;

/// One line per KV length in `lengths`: `webtensor's decode step on the GPU at L = 2048 (...): 1.93 ms in 184
/// dispatches: matvec subgroups 41.0% (120 dispatches, 0.79 ms), ...`; one line saying why where the device
/// cannot profile. `tokens` holds at least the longest length plus [`PROFILE_STEPS`] + 1 tokens.
pub(super) fn decode_profile_lines(model: &mut Llama, lengths: &[usize], tokens: &[u32]) -> Result<String, CliError> {
    let mut out = String::new();
    for &l in lengths {
        model.reset();
        if l > 0 {
            model.logits(&tokens[..l])?;
        }
        model.step(tokens[l])?;
        if let Err(e) = model.set_decode_profiling(true) {
            return Ok(format!("webtensor's decode step on the GPU by kernel: not measured ({e})\n"));
        }
        let mut runs: Vec<Vec<webtensor::KernelTime>> = Vec::with_capacity(PROFILE_STEPS);
        for &tok in &tokens[l + 1..l + 1 + PROFILE_STEPS] {
            model.step(tok)?;
            runs.extend(model.decode_profile());
        }
        model.set_decode_profiling(false)?;
        out += &profile_line(l, &runs);
    }
    Ok(out)
}

/// The line of one KV length from its profiled steps' dispatches (each dispatch's median time over the steps).
fn profile_line(l: usize, runs: &[Vec<webtensor::KernelTime>]) -> String {
    let Some(first) = runs.first() else { return format!("L = {l}: no profile\n") };
    let mut by_kernel: Vec<(String, usize, f64)> = Vec::new();
    for (j, k) in first.iter().enumerate() {
        let us = median(&runs.iter().filter_map(|r| r.get(j).map(|k| k.gpu_us)).collect::<Vec<_>>());
        match by_kernel.iter_mut().find(|(name, _, _)| *name == k.kernel) {
            Some(e) => {
                e.1 += 1;
                e.2 += us;
            }
            None => by_kernel.push((k.kernel.clone(), 1, us)),
        }
    }
    by_kernel.sort_by(|a, b| b.2.total_cmp(&a.2));
    let total: f64 = by_kernel.iter().map(|e| e.2).sum();
    let cell = |name: &str, n: usize, us: f64| {
        let share = 100.0 * us / total.max(f64::MIN_POSITIVE);
        format!("{name} {share:.1}% ({n} dispatch{}, {:.3} ms)", if n == 1 { "" } else { "es" }, us / 1e3)
    };
    let mut cells: Vec<String> = by_kernel.iter().take(SHOWN).map(|(k, n, us)| cell(k, *n, *us)).collect();
    if by_kernel.len() > SHOWN {
        let rest = &by_kernel[SHOWN..];
        cells.push(cell("others", rest.iter().map(|e| e.1).sum(), rest.iter().map(|e| e.2).sum()));
    }
    format!(
        "webtensor's decode step on the GPU by kernel at L = {l} (timestamp queries around each dispatch, median of \
         {} steps): {:.3} ms in {} dispatches: {}\n",
        runs.len(),
        total / 1e3,
        first.len(),
        cells.join(", ")
    )
}
