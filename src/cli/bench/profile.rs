//! `bench generate --profile` and `bench embed --profile`: where a run's GPU time goes, by kernel, from timestamp
//! queries written around every dispatch ([`webtensor::Plan::set_profiling`]): the prompt's prefill and a decode
//! step at each `--decode-at` KV length; each batch plan of the embedder.

use super::helper::median;
use crate::cli::error::CliError;
use webtensor::models::bert::SentenceEmbedder;
use webtensor::models::LanguageModel;
use webtensor::KernelTime;

/// Decode steps profiled at each KV length; each dispatch's time is its median over them.
pub(super) const PROFILE_STEPS: usize = 8;

/// Kernels named in a line; where more are left than one, they are summed as "others".
const SHOWN: usize = 8;

/// The profile lines: the prefill of `prompt` (one run; its largest chunk's plan), then a decode step at each KV
/// length in `lengths` (`tokens` holds at least the longest length plus [`PROFILE_STEPS`] tokens); one line
/// saying why where the device cannot profile.
pub(super) fn profile_lines(
    model: &mut LanguageModel,
    prompt: &[u32],
    lengths: &[usize],
    tokens: &[u32],
) -> Result<String, CliError> {
    // every plan is compiled by the warm-up and the timed runs before
    if let Err(e) = model.set_profiling(true) {
        return Ok(format!("webtensor's GPU time by kernel: not measured ({e})\n"));
    }
    eprintln!("profiling the prefill and decode steps at KV lengths {lengths:?} ...");
    model.reset();
    model.logits(prompt)?;
    let chunk = model.plan_stats().into_iter().map(|(t, _)| t).filter(|&t| t <= prompt.len()).max().unwrap_or(1);
    let mut out = String::new();
    if let Some(p) = model.step_profile(chunk) {
        let what = if chunk == prompt.len() {
            format!("prefill of {chunk} tokens (one run)")
        } else {
            format!("{chunk}-token chunk of a {}-token prefill (that chunk's plan, its last run)", prompt.len())
        };
        out += &profile_line(&what, &[p]);
    }
    for &l in lengths {
        model.reset();
        if l > 0 {
            model.logits(&tokens[..l])?;
        }
        let mut runs: Vec<Vec<KernelTime>> = Vec::with_capacity(PROFILE_STEPS);
        for &tok in &tokens[l..l + PROFILE_STEPS] {
            model.step(tok)?;
            runs.extend(model.step_profile(1));
        }
        out += &profile_line(&format!("decode step at L = {l} (median of {} steps)", runs.len()), &runs);
    }
    model.set_profiling(false)?;
    Ok(out)
}

/// One line from the profiled runs of one plan: each dispatch's median time over the runs, summed by kernel.
pub(super) fn profile_line(what: &str, runs: &[Vec<KernelTime>]) -> String {
    let Some(first) = runs.first() else { return format!("webtensor's {what} on the GPU by kernel: no profile\n") };
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
    // the rest summed as "others" where that is more than one kernel
    let shown = if by_kernel.len() > SHOWN + 1 { SHOWN } else { by_kernel.len() };
    let mut cells: Vec<String> = by_kernel.iter().take(shown).map(|(k, n, us)| cell(k, *n, *us)).collect();
    if by_kernel.len() > shown {
        let rest = &by_kernel[shown..];
        cells.push(cell("others", rest.iter().map(|e| e.1).sum(), rest.iter().map(|e| e.2).sum()));
    }
    format!(
        "webtensor's {what} on the GPU by kernel (timestamp queries around each dispatch): {:.3} ms in {} \
         dispatches: {}\n",
        total / 1e3,
        first.len(),
        cells.join(", ")
    )
}

/// The lines of `bench embed --profile`: the sentences embedded once at batch 1 and once at 32 with profiling on,
/// a line per batch plan (its last run); one line saying why where the device cannot profile.
pub(super) fn embed_profile_lines(e: &mut SentenceEmbedder, texts: &[&str]) -> Result<String, CliError> {
    if let Err(err) = e.set_profiling(true) {
        return Ok(format!("webtensor's GPU time by kernel: not measured ({err})\n"));
    }
    eprintln!("profiling each batch plan ...");
    e.embed_batched(texts, 1)?;
    e.embed_batched(texts, 32)?;
    let lines = e.plan_profiles().into_iter().map(|((b, t), p)| {
        profile_line(&format!("batch of {b} x {t} tokens (its last run)"), std::slice::from_ref(&p))
    });
    let lines = lines.collect();
    e.set_profiling(false)?;
    Ok(lines)
}
