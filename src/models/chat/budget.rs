//! The byte budget of one chat-template render: every string a template builds or emits is charged to it, so a
//! template (or a value it is given) cannot make a prompt of unbounded size. Shared by the sandbox's operators
//! and the Python-style string methods and filters.

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind, State};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of strings a render may build and emit in all (a prompt is at most a model's context, tens of KiB).
pub(crate) const BUDGET_BYTES: usize = 16 << 20;

/// The budget of one render, shared by its macro calls.
#[derive(Debug, Default)]
struct Budget(AtomicUsize);

impl minijinja::value::Object for Budget {}

/// Charges `bytes` to the render's budget.
pub(crate) fn charge(state: &State, bytes: usize) -> Result<(), Error> {
    let budget = state.get_or_set_temp_object("webtensor.budget", Budget::default);
    let used = budget.0.fetch_add(bytes, Ordering::Relaxed).saturating_add(bytes);
    if used > BUDGET_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("the template built more than {BUDGET_BYTES} bytes of text (webtensor's bound for a prompt)"),
        ));
    }
    Ok(())
}

/// Charges a value's size when it is a string (or a sequence: 16 bytes an item).
pub(crate) fn charge_value(state: &State, v: &Value) -> Result<(), Error> {
    match v.kind() {
        ValueKind::String => charge(state, v.as_str().map_or(0, str::len)),
        ValueKind::Seq => charge(state, v.len().unwrap_or(0) * 16),
        _ => Ok(()),
    }
}
