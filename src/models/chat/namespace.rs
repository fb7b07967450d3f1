//! `namespace()` and `{% set ns.attr = value %}` as Jinja has them, with one rule that minijinja's own lack: a
//! namespace holds no namespace, directly or in a list or map. So namespaces make no cycle (`ns.a = ns`: every
//! render's values leaked, and a hash of it recursed until the stack overflowed) and no shared graph
//! (`namespace(a=x, b=x)` sixty deep: hashed 2^60 times); real templates keep strings, numbers and lists in them.
//! sandbox.rs routes every `SetAttr` instruction to [`set_attr`].

use super::budget::{walk, MAX_DEPTH};
use minijinja::value::{Enumerator, Object, ObjectRepr, Value, ValueKind};
use minijinja::{Error, ErrorKind, State};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A namespace: a map whose attributes `{% set %}` may assign.
#[derive(Debug, Default)]
pub(crate) struct Namespace {
    data: Mutex<BTreeMap<Arc<str>, Value>>,
}

impl Object for Namespace {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.data.lock().ok()?.get(key.as_str()?).cloned()
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        match self.data.lock() {
            Ok(data) => Enumerator::Values(data.keys().cloned().map(Value::from).collect()),
            Err(_) => Enumerator::Empty,
        }
    }
}

impl Namespace {
    fn set(&self, key: &str, value: Value) {
        if let Ok(mut data) = self.data.lock() {
            data.insert(key.into(), value);
        }
    }
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// An error when `v` is or holds a namespace; its walk charged as work first (and refused past the nesting bound).
fn check(state: &State, v: &Value) -> Result<(), Error> {
    walk(state, v, usize::MAX / 2)?;
    if holds_namespace(v, 0) {
        return Err(invalid("a namespace cannot hold a namespace in chat templates"));
    }
    Ok(())
}

/// Whether `v` is or holds a namespace (within the nesting bound that [`walk`] checked).
fn holds_namespace(v: &Value, depth: usize) -> bool {
    if v.downcast_object_ref::<Namespace>().is_some() {
        return true;
    }
    if depth > MAX_DEPTH || !matches!(v.kind(), ValueKind::Seq | ValueKind::Map) {
        return false;
    }
    let is_map = v.kind() == ValueKind::Map;
    v.try_iter().into_iter().flatten().any(|item| {
        (is_map && holds_namespace(&v.get_item(&item).unwrap_or_default(), depth + 1))
            || holds_namespace(&item, depth + 1)
    })
}

/// `namespace(a=1, ..)` or `namespace({'a': 1})`.
pub(crate) fn namespace(state: &State, defaults: Option<Value>) -> Result<Value, Error> {
    let ns = Namespace::default();
    if let Some(defaults) = defaults {
        let pairs =
            defaults.as_object().filter(|o| matches!(o.repr(), ObjectRepr::Map)).and_then(|o| o.try_iter_pairs());
        let Some(pairs) = pairs else {
            return Err(invalid(format!("namespace() takes a map or keyword arguments, not {}", defaults.kind())));
        };
        check(state, &defaults)?;
        for (key, value) in pairs {
            if let Some(key) = key.as_str() {
                ns.set(key, value);
            }
        }
    }
    Ok(Value::from_object(ns))
}

/// `{% set ns.name = value %}` (the instruction's operands in the VM's order), `value` checked first.
pub(crate) fn set_attr(state: &State, value: Value, ns: Value, name: Value) -> Result<Value, Error> {
    let Some(target) = ns.downcast_object_ref::<Namespace>() else {
        return Err(invalid(format!("can only assign to namespaces, not {}", ns.kind())));
    };
    check(state, &value)?;
    target.set(name.as_str().unwrap_or_default(), value);
    Ok(Value::UNDEFINED)
}
