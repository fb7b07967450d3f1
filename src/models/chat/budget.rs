//! The bounds of one chat-template render, shared by the sandbox's operators and the Python-style string methods
//! and filters: a byte budget that every string a template builds or emits is charged to, so a template (or a
//! value it is given) cannot make a prompt of unbounded size; a work budget that operations whose cost grows with
//! their operands (`in`, `==`, filters, methods) are charged to, so a loop of them cannot run for minutes; and a
//! bound on how deep values nest (printing, comparing and dropping a value walk it recursively).

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind, State};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of strings a render may build and emit in all (a prompt is at most a model's context, tens of KiB).
pub(crate) const BUDGET_BYTES: usize = 16 << 20;
/// Units of work (an item, or 16 bytes of a string, that an operation reads) a render may spend in all: about
/// 0.1-0.3 s; a real template spends its conversation's size a few times.
pub(crate) const WORK_UNITS: usize = 8 << 20;
/// How deep lists and maps may nest.
pub(crate) const MAX_DEPTH: usize = 64;

/// How long a render may run, natively: a bound in time behind the work and byte budgets, for work inside
/// minijinja that nothing charges; checked at every charge.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) const RENDER_TIME: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(not(target_arch = "wasm32"))]
thread_local! {
    /// When the render on this thread must have ended.
    static DEADLINE: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
}

/// Starts the clock of a render on this thread (see [`RENDER_TIME`]; on wasm, where there is no clock, nothing).
pub(crate) fn start_clock() {
    #[cfg(not(target_arch = "wasm32"))]
    DEADLINE.with(|d| d.set(Some(std::time::Instant::now() + RENDER_TIME)));
}

/// An error once the render on this thread has run past its deadline.
fn in_time() -> Result<(), Error> {
    #[cfg(not(target_arch = "wasm32"))]
    if DEADLINE.with(|d| d.get()).is_some_and(|t| std::time::Instant::now() > t) {
        return Err(invalid(format!("the template ran for more than {} s", RENDER_TIME.as_secs())));
    }
    Ok(())
}

/// A counter of one render, shared by its macro calls.
#[derive(Debug, Default)]
struct Counter(AtomicUsize);

impl minijinja::value::Object for Counter {}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, message)
}

/// Adds `n` to the render's counter `name`; the total after.
fn count(state: &State, name: &str, n: usize) -> usize {
    state.get_or_set_temp_object(name, Counter::default).0.fetch_add(n, Ordering::Relaxed).saturating_add(n)
}

/// Bytes of the byte budget not yet used.
fn bytes_left(state: &State) -> usize {
    BUDGET_BYTES.saturating_sub(count(state, "webtensor.budget", 0))
}

/// Charges `bytes` to the render's budget.
pub(crate) fn charge(state: &State, bytes: usize) -> Result<(), Error> {
    in_time()?;
    if count(state, "webtensor.budget", bytes) > BUDGET_BYTES {
        return Err(invalid(format!(
            "the template built more than {BUDGET_BYTES} bytes of text (webtensor's bound for a prompt)"
        )));
    }
    Ok(())
}

/// Charges `units` of work.
pub(crate) fn work(state: &State, units: usize) -> Result<(), Error> {
    in_time()?;
    if count(state, "webtensor.work", units) > WORK_UNITS {
        return Err(invalid(format!("the template did more than {WORK_UNITS} units of work on its values")));
    }
    Ok(())
}

/// The bytes `v` prints as, counted without building the text, up to `cap` (beyond it: `cap + 1`); the items
/// visited are charged as work (once, at the end: a counter update per item would cost more than the visit). An
/// error for values nested deeper than [`MAX_DEPTH`] or a walk beyond the work left.
pub(crate) fn walk(state: &State, v: &Value, cap: usize) -> Result<usize, Error> {
    let left = WORK_UNITS.saturating_sub(count(state, "webtensor.work", 0));
    let mut w = Walk { cap, work_left: left, work: 0, total: 0 };
    w.visit(v, 0)?;
    work(state, w.work)?;
    Ok(w.total.min(cap.saturating_add(1)))
}

/// A walk over a value: its printed size so far and the work it took.
struct Walk {
    cap: usize,
    work_left: usize,
    work: usize,
    total: usize,
}

impl Walk {
    fn spend(&mut self, units: usize) -> Result<(), Error> {
        self.work = self.work.saturating_add(units);
        if self.work > self.work_left {
            return Err(invalid(format!("the template did more than {WORK_UNITS} units of work on its values")));
        }
        Ok(())
    }

    fn visit(&mut self, v: &Value, depth: usize) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return Err(invalid(format!("the template's values nest more than {MAX_DEPTH} deep")));
        }
        match v.kind() {
            ValueKind::String => {
                let n = v.as_str().map_or(0, str::len);
                self.spend(n / 16 + 1)?;
                self.total = self.total.saturating_add(n + 2);
            }
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
                self.total = self.total.saturating_add(2);
                let is_map = v.kind() == ValueKind::Map;
                for item in v.try_iter()? {
                    if self.total > self.cap {
                        return Ok(());
                    }
                    self.spend(1)?;
                    self.total = self.total.saturating_add(2);
                    if is_map {
                        self.visit(&v.get_item(&item).unwrap_or_default(), depth + 1)?;
                    }
                    self.visit(&item, depth + 1)?;
                }
            }
            _ => {
                self.spend(1)?;
                self.total = self.total.saturating_add(24);
            }
        }
        Ok(())
    }
}

/// Checks that `values` can be printed within what is left of the byte budget (without charging it: the
/// operation that prints them charges its result) and charges walking them as work.
pub(crate) fn fits(state: &State, values: &[Value]) -> Result<(), Error> {
    let left = bytes_left(state);
    let mut size = 0usize;
    for v in values {
        size = size.saturating_add(walk(state, v, left)?);
        if size > left {
            return Err(invalid(format!(
                "a value of the template would print as more than the {left} bytes left of its budget"
            )));
        }
    }
    Ok(())
}

/// Charges a value's size when it is a string (or a sequence: 16 bytes an item), after checking how deep it
/// nests.
pub(crate) fn charge_value(state: &State, v: &Value) -> Result<(), Error> {
    match v.kind() {
        ValueKind::String => charge(state, v.as_str().map_or(0, str::len)),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
            charge(state, v.len().unwrap_or(0).saturating_mul(16))?;
            walk(state, v, usize::MAX / 2).map(drop)
        }
        _ => Ok(()),
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use crate::models::chat::budget::{in_time, start_clock, DEADLINE};

    #[test]
    fn a_render_past_its_deadline_stops() {
        let past = std::time::Instant::now().checked_sub(std::time::Duration::from_millis(1));
        DEADLINE.with(|d| d.set(past));
        assert!(in_time().unwrap_err().to_string().contains("ran for more than 5 s"));
        start_clock();
        assert!(in_time().is_ok());
    }
}
