//! Rendering a chat template from a model file, which nobody reviewed, within fixed bounds: every string the
//! template builds or emits is charged to a budget of [`super::budget::BUDGET_BYTES`] per render, instructions to minijinja's fuel,
//! recursion to a depth, so a template that loops forever, doubles a string or floods the output stops with an
//! error in well under a second and a bounded memory.
//!
//! How: the template is parsed first and its constant expressions measured before minijinja's compiler folds
//! them (`consts.rs`); then it is compiled with minijinja's own compiler, and the instructions that make strings
//! out of strings (`~`, `+`, `*`), `in`, the comparisons, list and map literals, subscripts, slices and
//! `loop.changed` become calls of functions that charge what they read and build before doing it. Every filter
//! (also those `map` applies), the tests that read values (also those `select` applies), `dict()` and Python's
//! string, list and dict methods (minijinja-contrib's pycompat) are installed behind the same charges
//! (`guards.rs`, `pyfns.rs`), and emitted values go through a formatter that charges them (escaped, under
//! `{% autoescape %}`). Literal text is written without a call, so its total is bounded by the fuel times the
//! longest literal: the fuel is lowered for templates with long literals. A value is measured before anything
//! prints it (shared references make a small value print huge), and values nested over 64 deep are refused.

use minijinja::machinery::{tokenize, CompiledTemplate, Instruction, TemplateConfig, Token, WhitespaceConfig};
use minijinja::value::{ObjectRepr, Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

use super::budget::{charge, charge_value, fits, walk};
use super::guards;
use std::sync::Arc;

/// Instructions a render may execute (real templates take thousands for a conversation).
const FUEL: u64 = 2_000_000;
/// Bytes that literal text may add to the output in all (see the module docs).
const LITERAL_BYTES: u64 = 64 << 20;
/// Nesting of macro calls and recursive loops.
const RECURSION: usize = 64;
/// Largest template source accepted, in bytes.
pub(crate) const MAX_SOURCE: usize = 1 << 20;
/// Tokens one tag (`{{ .. }}` or `{% .. %}`) may hold. minijinja's parser bounds the nesting of brackets and
/// statements, but a chain of operators, filters or attribute lookups (`not not ..`, `a ~ a ~ ..`, `x|lower|..`)
/// parses into a tree as deep as the chain is long, which the code generator and the tree's drop walk
/// recursively: 50,000 links overflowed the stack. A tag's tree is no deeper than its tokens; the real templates
/// have at most 40 in a tag (tests/data/chat_templates).
const MAX_TAG_TOKENS: usize = 512;
/// `elif` tags a template may have (real ones have a few).
const MAX_ELIFS: usize = 256;

/// The filters a template may use: minijinja's builtins that Hugging Face's renderer, Jinja2, has too, each
/// installed behind its charges (`guards.rs`).
const FILTERS: &[&str] = &[
    "abs",
    "attr",
    "batch",
    "bool",
    "capitalize",
    "center",
    "count",
    "d",
    "default",
    "dictsort",
    "e",
    "escape",
    "first",
    "float",
    "format",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "split",
    "string",
    "sum",
    "title",
    "tojson",
    "trim",
    "unique",
    "upper",
    "wordwrap",
    "lines",
    "chain",
    "zip",
];

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg)
}

/// Items a constant of the compiled template may have (minijinja folds `[1, 2] * 2**61` into one, lazily).
const MAX_CONST_ITEMS: usize = 1 << 16;

/// `a ~ b`: both formatted as strings.
fn concat(state: &State, a: Value, b: Value) -> Result<Value, Error> {
    fits(state, &[a.clone(), b.clone()])?;
    let (a, b) = (a.to_string(), b.to_string());
    charge(state, a.len() + b.len())?;
    Ok(Value::from(a + &b))
}

/// `a + b`, as minijinja computes it (numbers, strings, sequences), with strings and sequences charged.
fn add(state: &State, a: Value, b: Value) -> Result<Value, Error> {
    match (a.kind(), b.kind()) {
        (ValueKind::String, ValueKind::String) => concat(state, a, b),
        (ValueKind::Seq, ValueKind::Seq) | (ValueKind::Iterable, ValueKind::Iterable) => {
            let items: Vec<Value> = a.try_iter()?.chain(b.try_iter()?).collect();
            charge(state, items.len() * 16)?;
            Ok(Value::from(items))
        }
        (ValueKind::Number, ValueKind::Number) => arithmetic(a, b, i64::checked_add, |x, y| x + y, "+"),
        _ => Err(invalid(format!("unsupported operand types for +: {} and {}", a.kind(), b.kind()))),
    }
}

/// `a * b`: numbers, or a string or sequence repeated (charged).
fn mul(state: &State, a: Value, b: Value) -> Result<Value, Error> {
    let repeat = |v: &Value, n: &Value| -> Result<Value, Error> {
        let n = n
            .as_usize()
            .ok_or_else(|| invalid("a string or list can only be repeated an integer number of times".into()))?;
        if let Some(s) = v.as_str() {
            charge(state, s.len().saturating_mul(n))?;
            return Ok(Value::from(s.repeat(n)));
        }
        let items: Vec<Value> = v.try_iter()?.collect();
        charge(state, items.len().saturating_mul(n).saturating_mul(16))?;
        Ok(Value::from(items.iter().cycle().take(items.len() * n).cloned().collect::<Vec<_>>()))
    };
    match (a.kind(), b.kind()) {
        (ValueKind::Number, ValueKind::Number) => arithmetic(a, b, i64::checked_mul, |x, y| x * y, "*"),
        (ValueKind::String | ValueKind::Seq, ValueKind::Number) => repeat(&a, &b),
        (ValueKind::Number, ValueKind::String | ValueKind::Seq) => repeat(&b, &a),
        _ => Err(invalid(format!("unsupported operand types for *: {} and {}", a.kind(), b.kind()))),
    }
}

/// Integer arithmetic when both are integers (an overflow is an error, as in minijinja), else f64.
fn arithmetic(
    a: Value,
    b: Value,
    int: fn(i64, i64) -> Option<i64>,
    float: fn(f64, f64) -> f64,
    op: &str,
) -> Result<Value, Error> {
    let is_int = |v: &Value| v.is_integer();
    if is_int(&a) && is_int(&b) {
        let (x, y) = (i64::try_from(a.clone()), i64::try_from(b.clone()));
        if let (Ok(x), Ok(y)) = (x, y) {
            return int(x, y).map(Value::from).ok_or_else(|| invalid(format!("integer overflow in {x} {op} {y}")));
        }
    }
    let (x, y) = (f64::try_from(a)?, f64::try_from(b)?);
    Ok(Value::from(float(x, y)))
}

/// `needle in container`, as minijinja's VM computes it, its cost charged as work first.
fn contains(state: &State, needle: Value, container: Value) -> Result<Value, Error> {
    walk(state, &container, usize::MAX / 2)?;
    // hashed or compared: as deep and as costly as it is
    walk(state, &needle, usize::MAX / 2)?;
    if container.is_undefined() {
        return Ok(Value::from(false));
    }
    let found = if let Some(s) = container.as_str() {
        match needle.as_str() {
            Some(n) => s.contains(n),
            None => {
                fits(state, std::slice::from_ref(&needle))?;
                s.contains(&needle.to_string())
            }
        }
    } else if let Some(obj) = container.as_object() {
        match obj.repr() {
            ObjectRepr::Map => obj.get_value(&needle).is_some(),
            ObjectRepr::Seq | ObjectRepr::Iterable => obj.try_iter().into_iter().flatten().any(|v| v == needle),
            _ => false,
        }
    } else {
        return Err(invalid("cannot perform a containment check on this value".into()));
    };
    Ok(Value::from(found))
}

/// A comparison (`==`, `!=`, `<`, `<=`, `>`, `>=`) of two values, as minijinja's VM computes it, its cost (the
/// values' sizes) charged as work first.
fn compare(state: &State, a: Value, b: Value, op: fn(&Value, &Value) -> bool) -> Result<Value, Error> {
    walk(state, &a, usize::MAX / 2)?;
    walk(state, &b, usize::MAX / 2)?;
    Ok(Value::from(op(&a, &b)))
}

/// A list literal `[a, b, ..]`, its items checked for nesting depth.
fn list(state: &State, items: Rest<Value>) -> Result<Value, Error> {
    let items = items.0;
    let list = Value::from(items);
    walk(state, &list, usize::MAX / 2)?;
    Ok(list)
}

/// A map literal `{k: v, ..}` (its keys and values in turn), its values checked for nesting depth.
fn map(state: &State, kv: Rest<Value>) -> Result<Value, Error> {
    // the keys are hashed as the map is built
    for key in kv.0.iter().step_by(2) {
        walk(state, key, usize::MAX / 2)?;
    }
    let map: Value = kv.0.chunks_exact(2).map(|p| (p[0].clone(), p[1].clone())).collect();
    walk(state, &map, usize::MAX / 2)?;
    Ok(map)
}

/// The compiled template with its string-building instructions and filter applications routed through the
/// charged functions; `Err` for a template that does not parse or uses a filter webtensor does not offer.
pub(crate) fn compile(source: &str) -> Result<CompiledTemplate<'_>, Error> {
    if source.len() > MAX_SOURCE {
        return Err(invalid(format!("the template has {} bytes (at most {MAX_SOURCE})", source.len())));
    }
    let config = TemplateConfig {
        syntax_config: Default::default(),
        // as transformers renders chat templates (jinja2.Environment(trim_blocks=True, lstrip_blocks=True))
        ws_config: WhitespaceConfig { keep_trailing_newline: false, lstrip_blocks: true, trim_blocks: true },
        default_auto_escape: Arc::new(|_: &str| minijinja::AutoEscape::None),
    };
    let longest = longest_tag(source, &config)?;
    if longest > MAX_TAG_TOKENS {
        return Err(invalid(format!("a tag of the template has {longest} tokens (at most {MAX_TAG_TOKENS})")));
    }
    super::consts::check(source, &config)?;
    let mut t = CompiledTemplate::new("chat_template", source, &config)?;
    let n = t.instructions.len() as u32;
    for i in 0..n {
        let Some(instr) = t.instructions.get_mut(i) else { continue };
        let replacement = match instr {
            Instruction::StringConcat => Instruction::CallFunction("__webtensor_concat", Some(2)),
            Instruction::Add => Instruction::CallFunction("__webtensor_add", Some(2)),
            Instruction::Mul => Instruction::CallFunction("__webtensor_mul", Some(2)),
            Instruction::In => Instruction::CallFunction("__webtensor_in", Some(2)),
            Instruction::Eq => Instruction::CallFunction("__webtensor_eq", Some(2)),
            Instruction::Ne => Instruction::CallFunction("__webtensor_ne", Some(2)),
            Instruction::Lt => Instruction::CallFunction("__webtensor_lt", Some(2)),
            Instruction::Lte => Instruction::CallFunction("__webtensor_lte", Some(2)),
            Instruction::Gt => Instruction::CallFunction("__webtensor_gt", Some(2)),
            Instruction::Gte => Instruction::CallFunction("__webtensor_gte", Some(2)),
            Instruction::BuildList(Some(n)) if *n <= u16::MAX as usize => {
                Instruction::CallFunction("__webtensor_list", Some(*n as u16))
            }
            Instruction::BuildMap(n) if 2 * *n <= u16::MAX as usize => {
                Instruction::CallFunction("__webtensor_map", Some(2 * *n as u16))
            }
            Instruction::LoadConst(v) => {
                let items = if v.as_str().is_some() { 0 } else { v.len().unwrap_or(0) };
                if items > MAX_CONST_ITEMS {
                    return Err(invalid(format!("a constant of the template has {items} items")));
                }
                continue;
            }
            Instruction::ApplyFilter(name, _, _) => {
                if !FILTERS.contains(name) {
                    return Err(invalid(format!("filter '{name}' is not available in chat templates")));
                }
                continue;
            }
            // a chained comparison's inner ones (`a == b == c`), and arguments spread from a list or map (`f(*l)`,
            // `f(**m)`): copies and comparisons of any size inside one instruction, which nothing charges; real
            // chat templates have neither
            Instruction::CompareAndPreserve(_) => {
                return Err(invalid("chained comparisons (a < b < c) are not available in chat templates".into()));
            }
            Instruction::UnpackLists(_) | Instruction::MergeKwargs(_) => {
                return Err(invalid("argument unpacking (*args, **kwargs) is not available in chat templates".into()));
            }
            Instruction::GetItem => Instruction::CallFunction("__webtensor_getitem", Some(2)),
            Instruction::Slice => Instruction::CallFunction("__webtensor_slice", Some(4)),
            Instruction::CallMethod("changed", n) => Instruction::CallFunction("__webtensor_loop_changed", *n),
            _ => continue,
        };
        *instr = replacement;
    }
    if !t.blocks.is_empty() {
        return Err(invalid("template blocks ({% block %}) are not used by chat templates".into()));
    }
    expand(&mut t);
    Ok(t)
}

/// What an instruction becomes, where it is rewritten into several: a loop's start (`PushLoop`) is preceded by
/// a call of `__webtensor_iter`, since minijinja counts a string's characters there, inside that one instruction,
/// and a loop that breaks at once can start anew in every iteration of an outer one (8 MB counted 100,000 times);
/// a namespace assignment (`SetAttr`) becomes a call of `__webtensor_setattr` (`namespace.rs`) with the name as
/// a constant, its result discarded.
fn expansion<'s>(instr: &Instruction<'s>) -> Option<Vec<Instruction<'s>>> {
    match instr {
        Instruction::PushLoop(_) => Some(vec![Instruction::CallFunction("__webtensor_iter", Some(1)), instr.clone()]),
        Instruction::SetAttr(name) => Some(vec![
            Instruction::LoadConst(Value::from(*name)),
            Instruction::CallFunction("__webtensor_setattr", Some(3)),
            Instruction::DiscardTop,
        ]),
        _ => None,
    }
}

/// Rewrites the instructions that [`expansion`] expands, with every jump moved to match (a jump to an expanded
/// instruction lands on the first of its replacements). Recursive loops, which jump to a loop's start by
/// themselves, past its charge, are refused in `consts.rs`.
fn expand(t: &mut CompiledTemplate<'_>) {
    let old = &t.instructions;
    let n = old.len() as u32;
    let sizes: Vec<u32> = (0..n).map(|i| old.get(i).and_then(expansion).map_or(1, |v| v.len() as u32)).collect();
    if sizes.iter().all(|&s| s == 1) {
        return;
    }
    // where old instruction i lands; one past the end for a jump there
    let mut at = Vec::with_capacity(n as usize + 1);
    let mut next = 0u32;
    for &size in &sizes {
        at.push(next);
        next += size;
    }
    at.push(next);
    let moved = |target: &u32| at.get(*target as usize).copied().unwrap_or(next);
    let mut new = minijinja::machinery::Instructions::new(old.name(), old.source());
    for i in 0..n {
        let Some(instr) = old.get(i) else { continue };
        let line = old.get_line(i).unwrap_or(0).min(u16::MAX as usize) as u16;
        let replaced = match instr {
            Instruction::Jump(x) => vec![Instruction::Jump(moved(x))],
            Instruction::JumpIfFalse(x) => vec![Instruction::JumpIfFalse(moved(x))],
            Instruction::JumpIfFalseOrPop(x) => vec![Instruction::JumpIfFalseOrPop(moved(x))],
            Instruction::JumpIfTrueOrPop(x) => vec![Instruction::JumpIfTrueOrPop(moved(x))],
            Instruction::Iterate(x) => vec![Instruction::Iterate(moved(x))],
            Instruction::BuildMacro(name, x, flags) => vec![Instruction::BuildMacro(name, moved(x), *flags)],
            other => expansion(other).unwrap_or_else(|| vec![other.clone()]),
        };
        for r in replaced {
            new.add_with_line(r, line);
        }
    }
    t.instructions = new;
}

/// The most tokens in one tag of `source`, counted by minijinja's lexer (which does not recurse).
fn longest_tag(source: &str, config: &TemplateConfig) -> Result<usize, Error> {
    let (mut current, mut longest, mut elifs) = (0usize, 0usize, 0usize);
    for token in tokenize(source, false, config.syntax_config.clone(), config.ws_config) {
        match token?.0 {
            // the parser recurses once per elif of a chain, outside its nesting bound
            Token::Ident("elif") if current == 0 => {
                elifs += 1;
                if elifs > MAX_ELIFS {
                    return Err(invalid(format!("the template has more than {MAX_ELIFS} elif tags")));
                }
                current += 1;
                longest = longest.max(current);
            }
            Token::VariableStart | Token::BlockStart => current = 0,
            Token::VariableEnd | Token::BlockEnd | Token::TemplateData(_) => {}
            _ => {
                current += 1;
                longest = longest.max(current);
            }
        }
    }
    Ok(longest)
}

/// The fuel for a template whose longest literal text has `longest` bytes (see the module docs).
pub(crate) fn fuel_for(t: &CompiledTemplate) -> u64 {
    let longest = (0..t.instructions.len() as u32)
        .filter_map(|i| match t.instructions.get(i) {
            Some(Instruction::EmitRaw(s)) => Some(s.len() as u64),
            _ => None,
        })
        .max()
        .unwrap_or(1)
        .max(64);
    FUEL.min(LITERAL_BYTES / longest)
}

/// The environment every chat template renders in: the charged operators and filters, Hugging Face's
/// functions (`raise_exception`, `strftime_now`), Python's methods, the formatter that charges output, the fuel,
/// the recursion bound. `today` is the date `strftime_now` reports (year, month, day; None: today, UTC).
pub(crate) fn environment(today: Option<(i64, u32, u32)>) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_recursion_limit(RECURSION);
    env.set_fuel(Some(FUEL));
    env.add_function("__webtensor_concat", concat);
    env.add_function("__webtensor_add", add);
    env.add_function("__webtensor_mul", mul);
    env.add_function("__webtensor_in", contains);
    env.add_function("__webtensor_eq", |st: &State, a, b| compare(st, a, b, |a, b| a == b));
    env.add_function("__webtensor_ne", |st: &State, a, b| compare(st, a, b, |a, b| a != b));
    env.add_function("__webtensor_lt", |st: &State, a, b| compare(st, a, b, |a, b| a < b));
    env.add_function("__webtensor_lte", |st: &State, a, b| compare(st, a, b, |a, b| a <= b));
    env.add_function("__webtensor_gt", |st: &State, a, b| compare(st, a, b, |a, b| a > b));
    env.add_function("__webtensor_gte", |st: &State, a, b| compare(st, a, b, |a, b| a >= b));
    env.add_function("__webtensor_list", list);
    env.add_function("__webtensor_map", map);
    env.add_function("__webtensor_getitem", guards::get_item);
    env.add_function("__webtensor_slice", guards::slice);
    env.add_function("__webtensor_loop_changed", guards::loop_changed);
    env.add_function("__webtensor_iter", guards::iterable);
    env.add_function("__webtensor_setattr", super::namespace::set_attr);
    env.add_function("namespace", super::namespace::namespace);
    let own_filters = super::pyfns::add_to(&mut env, today);
    guards::install_filters(&mut env, own_filters, FILTERS);
    guards::install_tests(&mut env);
    guards::install_dict(&mut env);
    // minijinja's debug() prints every value the template can see, unbounded; Jinja has no such global
    env.remove_global("debug");
    // minijinja's divisibleby panics on a zero divisor (i128 % 0)
    env.add_test("divisibleby", |v: &Value, d: &Value| -> Result<bool, Error> {
        if d.as_i64() == Some(0) || f64::try_from(d.clone()).is_ok_and(|x| x == 0.0) {
            return Err(invalid("divisibleby(0): division by zero".into()));
        }
        Ok(minijinja::tests::is_divisibleby(v, d))
    });
    env.set_unknown_method_callback(|state, value, method, args| {
        fits(state, std::slice::from_ref(value))?;
        fits(state, args)?;
        super::pyfns::check_method(state, value, method, args)?;
        let out = minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)?;
        charge_value(state, &out)?;
        Ok(out)
    });
    env.set_formatter(|out, state, value| {
        if value.as_str().is_none() {
            fits(state, std::slice::from_ref(value))?;
        }
        // `{% autoescape %}` escapes while writing: up to six bytes a byte
        let escaping = !matches!(state.auto_escape(), minijinja::AutoEscape::None) && !value.is_safe();
        let len = |s: &str| if escaping { guards::escaped_len(s) } else { s.len() };
        charge(state, value.as_str().map_or_else(|| len(&value.to_string()), len))?;
        minijinja::escape_formatter(out, state, value)
    });
    env
}
