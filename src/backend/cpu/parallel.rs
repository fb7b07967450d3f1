//! Work split over the CPU's threads: rayon's pool natively, the calling thread on wasm32.

/// Calls `f(t, chunk)` for the `t`-th chunk of `chunk` elements of `out` (the last may be shorter), on the
/// CPU's threads natively.
pub(crate) fn for_chunks<T: Send>(out: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    let chunk = chunk.max(1);
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        if out.len() > chunk {
            return out.par_chunks_mut(chunk).enumerate().for_each(|(t, c)| f(t, c));
        }
    }
    out.chunks_mut(chunk).enumerate().for_each(|(t, c)| f(t, c));
}

/// Calls `f` on consecutive ranges covering `0..total`, on the CPU's threads natively when `total` exceeds
/// `grain` (about four ranges a thread, none under `grain` long).
pub(crate) fn for_ranges(total: usize, grain: usize, f: impl Fn(std::ops::Range<usize>) + Sync + Send) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        let grain = grain.max(1);
        if total > grain {
            let tasks = total.div_ceil(grain).min(4 * threads());
            let len = total.div_ceil(tasks);
            return (0..tasks).into_par_iter().for_each(|t| f(t * len..((t + 1) * len).min(total)));
        }
    }
    let _ = grain;
    f(0..total)
}

/// Rows per task for `n` rows of `row_bytes` bytes each: about four tasks a thread, none under 16 KiB of work.
pub(crate) fn rows_per_task(n: usize, row_bytes: usize) -> usize {
    let tasks = 4 * threads();
    let min_rows = (16 * 1024 / row_bytes.max(1)).max(1);
    n.div_ceil(tasks).max(min_rows)
}

/// Threads the work is split over.
pub(crate) fn threads() -> usize {
    #[cfg(not(target_arch = "wasm32"))]
    return rayon::current_num_threads();
    #[cfg(target_arch = "wasm32")]
    1
}
