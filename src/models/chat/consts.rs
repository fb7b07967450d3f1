//! What minijinja's compiler would fold, measured before it folds it. The compiler evaluates an expression of
//! constants (`'x' * 100000000`, `[1] * 2**61 == [1] * 2**61`) while compiling, outside any budget, and
//! evaluates a constant operand again for each operator above it; so a template is parsed first and every
//! constant expression's size computed without building it. A constant of more than [`MAX_FOLD_BYTES`] bytes or
//! [`MAX_FOLD_ITEMS`] items is refused, and so are foldings costing more than [`MAX_FOLD_TOTAL`] bytes in all.

use minijinja::machinery::ast::{BinOpKind, CallArg, Expr, Stmt, UnaryOpKind};
use minijinja::machinery::{parse, TemplateConfig};
use minijinja::value::ValueKind;
use minijinja::{Error, ErrorKind};

/// Bytes one folded constant may print as.
const MAX_FOLD_BYTES: f64 = (1 << 20) as f64;
/// Items one folded list may have.
const MAX_FOLD_ITEMS: f64 = (1 << 16) as f64;
/// Bytes all folding may cost (each constant counted once per operator that evaluates it).
const MAX_FOLD_TOTAL: f64 = (32 << 20) as f64;

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg)
}

/// The size of a constant, as an upper bound: `num` the magnitude of a number (or of a bool, 1), `items` and
/// `bytes` what a string or list holds and prints as.
#[derive(Clone, Copy)]
struct Size {
    num: Option<f64>,
    items: f64,
    bytes: f64,
}

impl Size {
    fn number(x: f64) -> Size {
        Size { num: Some(x.abs()), items: 0.0, bytes: 24.0 }
    }
    fn text(bytes: f64) -> Size {
        Size { num: None, items: 0.0, bytes }
    }
}

/// Checks the constant expressions of `source` (see the module docs).
pub(crate) fn check(source: &str, config: &TemplateConfig) -> Result<(), Error> {
    let ast = parse(source, "chat_template", config.syntax_config.clone(), config.ws_config)?;
    let mut folds = Folds { total: 0.0 };
    folds.stmt(&ast)
}

struct Folds {
    total: f64,
}

impl Folds {
    fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), Error> {
        stmts.iter().try_for_each(|s| self.stmt(s))
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), Error> {
        match s {
            Stmt::Template(t) => self.stmts(&t.children),
            Stmt::EmitExpr(e) => self.expr(&e.expr, 0).map(drop),
            Stmt::ForLoop(l) => {
                // a recursive loop's `loop(..)` jumps back to the loop's start, past the charge sandbox.rs puts
                // before it; chat templates do not recurse
                if l.recursive {
                    return Err(invalid("recursive loops are not available in chat templates".into()));
                }
                self.exprs([&l.target, &l.iter])?;
                if let Some(f) = &l.filter_expr {
                    self.expr(f, 0)?;
                }
                self.stmts(&l.body)?;
                self.stmts(&l.else_body)
            }
            Stmt::IfCond(c) => {
                self.expr(&c.expr, 0)?;
                self.stmts(&c.true_body)?;
                self.stmts(&c.false_body)
            }
            Stmt::WithBlock(w) => {
                for (a, b) in &w.assignments {
                    self.exprs([a, b])?;
                }
                self.stmts(&w.body)
            }
            Stmt::Set(x) => self.exprs([&x.target, &x.expr]),
            Stmt::SetBlock(x) => {
                self.expr(&x.target, 0)?;
                if let Some(f) = &x.filter {
                    self.expr(f, 0)?;
                }
                self.stmts(&x.body)
            }
            Stmt::AutoEscape(a) => {
                self.expr(&a.enabled, 0)?;
                self.stmts(&a.body)
            }
            Stmt::FilterBlock(b) => {
                self.expr(&b.filter, 0)?;
                self.stmts(&b.body)
            }
            Stmt::Block(b) => self.stmts(&b.body),
            // a chat template has no other templates to load (and minijinja's error for a missing one prints the
            // names it tried, a list of any size, outside every charge)
            Stmt::Import(_) | Stmt::FromImport(_) | Stmt::Extends(_) | Stmt::Include(_) => {
                Err(invalid("include, import and extends are not available in chat templates".into()))
            }
            Stmt::Macro(m) => {
                for e in m.args.iter().chain(&m.defaults) {
                    self.expr(e, 0)?;
                }
                self.stmts(&m.body)
            }
            Stmt::CallBlock(c) => {
                self.call_args(&c.call.args)?;
                self.expr(&c.call.expr, 0)?;
                self.stmts(&c.macro_decl.body)
            }
            Stmt::Do(d) => {
                self.call_args(&d.call.args)?;
                self.expr(&d.call.expr, 0).map(drop)
            }
            Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => Ok(()),
        }
    }

    fn exprs<'a, 'b: 'a>(&mut self, exprs: impl IntoIterator<Item = &'a Expr<'b>>) -> Result<(), Error> {
        exprs.into_iter().try_for_each(|e| self.expr(e, 0).map(drop))
    }

    fn call_args(&mut self, args: &[CallArg]) -> Result<(), Error> {
        for a in args {
            let (CallArg::Pos(e) | CallArg::Kwarg(_, e) | CallArg::PosSplat(e) | CallArg::KwargSplat(e)) = a;
            self.expr(e, 0)?;
        }
        Ok(())
    }

    /// The size of `e` when it is constant (what the compiler would fold), its folding charged `above + 1`
    /// times: once for each folding operator above it, whose evaluation evaluates it again.
    fn expr(&mut self, e: &Expr, above: usize) -> Result<Option<Size>, Error> {
        let size = match e {
            Expr::Const(c) => {
                let v = &c.value;
                match v.kind() {
                    ValueKind::String => Some(Size::text(v.as_str().map_or(0, str::len) as f64)),
                    ValueKind::Number => Some(Size::number(f64::try_from(v.clone()).unwrap_or(f64::INFINITY))),
                    ValueKind::Bool => Some(Size::number(1.0)),
                    _ => Some(Size::text(24.0)),
                }
            }
            Expr::List(l) => self.items(l.items.iter(), above)?,
            Expr::Map(m) => self.items(m.keys.iter().chain(&m.values), above)?,
            Expr::UnaryOp(u) => {
                let x = self.expr(&u.expr, above + 1)?;
                match u.op {
                    UnaryOpKind::Not => x.map(|_| Size::number(1.0)),
                    UnaryOpKind::Neg => x.filter(|x| x.num.is_some()),
                }
            }
            Expr::BinOp(b) => {
                let (l, r) = (self.expr(&b.left, above + 1)?, self.expr(&b.right, above + 1)?);
                match (l, r) {
                    (Some(l), Some(r)) => Some(binop(b.op, l, r)),
                    _ => None,
                }
            }
            Expr::Compare(c) => {
                let mut all = self.expr(&c.expr, above + 1)?.is_some();
                for op in &c.ops {
                    all &= self.expr(&op.expr, above + 1)?.is_some();
                }
                all.then(|| Size::number(1.0))
            }
            _ => {
                self.children(e)?;
                None
            }
        };
        // an infinite count times an empty string is NaN: counted as infinite
        let size = size.map(|s| Size { num: s.num.map(finite), items: finite(s.items), bytes: finite(s.bytes) });
        if let Some(s) = size {
            if s.bytes > MAX_FOLD_BYTES || s.items > MAX_FOLD_ITEMS {
                return Err(invalid(format!(
                    "a constant expression of the template would fold into {:.0} bytes or {:.0} items while \
                     compiling (at most {MAX_FOLD_BYTES} bytes, {MAX_FOLD_ITEMS} items)",
                    s.bytes, s.items
                )));
            }
            self.total += s.bytes * (above + 1) as f64;
            if self.total > MAX_FOLD_TOTAL {
                return Err(invalid(format!(
                    "the template's constant expressions would cost more than {MAX_FOLD_TOTAL} bytes to fold"
                )));
            }
        }
        Ok(size)
    }

    /// A list or map literal: constant when all its items are.
    fn items<'a, 'b: 'a>(
        &mut self,
        items: impl Iterator<Item = &'a Expr<'b>>,
        above: usize,
    ) -> Result<Option<Size>, Error> {
        let mut all = Some(Size { num: None, items: 0.0, bytes: 2.0 });
        for item in items {
            let s = self.expr(item, above + 1)?;
            all = match (all, s) {
                (Some(a), Some(s)) => Some(Size { num: None, items: a.items + 1.0, bytes: a.bytes + s.bytes + 2.0 }),
                _ => None,
            };
        }
        Ok(all)
    }

    /// The sub-expressions of an expression the compiler does not fold itself (it folds them one by one).
    fn children(&mut self, e: &Expr) -> Result<(), Error> {
        match e {
            Expr::Slice(s) => {
                self.expr(&s.expr, 0)?;
                for x in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.expr(x, 0)?;
                }
            }
            Expr::IfExpr(i) => {
                self.exprs([&i.test_expr, &i.true_expr])?;
                if let Some(x) = &i.false_expr {
                    self.expr(x, 0)?;
                }
            }
            Expr::Filter(x) => {
                if let Some(x) = &x.expr {
                    self.expr(x, 0)?;
                }
                self.call_args(&x.args)?;
            }
            Expr::Test(x) => {
                self.expr(&x.expr, 0)?;
                self.call_args(&x.args)?;
            }
            Expr::GetAttr(x) => self.expr(&x.expr, 0).map(drop)?,
            Expr::GetItem(x) => self.exprs([&x.expr, &x.subscript_expr])?,
            Expr::Call(x) => {
                self.expr(&x.expr, 0)?;
                self.call_args(&x.args)?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// `x`, NaN as infinity (so a bound compared with it holds).
fn finite(x: f64) -> f64 {
    if x.is_nan() {
        f64::INFINITY
    } else {
        x
    }
}

/// An upper bound of the size of `l op r` for constants (when minijinja would fail to compute it, it does not
/// fold it; the bound is then only larger than needed).
fn binop(op: BinOpKind, l: Size, r: Size) -> Size {
    let repeat = |s: Size, n: f64| Size { num: None, items: s.items * n, bytes: s.bytes * n };
    match op {
        BinOpKind::Mul => match (l.num, r.num) {
            (Some(a), Some(b)) => Size::number(a * b),
            (None, Some(n)) => repeat(l, n),
            (Some(n), None) => repeat(r, n),
            (None, None) => Size::text(l.bytes + r.bytes),
        },
        BinOpKind::Pow => Size::number(l.num.unwrap_or(0.0).powf(r.num.unwrap_or(0.0))),
        BinOpKind::Add | BinOpKind::Sub => match (l.num, r.num) {
            (Some(a), Some(b)) => Size::number(a + b),
            _ => Size { num: None, items: l.items + r.items, bytes: l.bytes + r.bytes },
        },
        BinOpKind::Div | BinOpKind::FloorDiv => match (l.num, r.num) {
            (Some(a), Some(b)) if b >= 1.0 => Size::number(a),
            (Some(_), Some(_)) => Size::number(f64::INFINITY),
            _ => Size::number(1.0),
        },
        BinOpKind::Rem => Size::number(l.num.unwrap_or(0.0)),
        BinOpKind::Concat => Size::text(l.bytes + r.bytes),
        BinOpKind::ScAnd | BinOpKind::ScOr => Size {
            num: l.num.zip(r.num).map(|(a, b)| a.max(b)).or(l.num).or(r.num),
            items: l.items.max(r.items),
            bytes: l.bytes.max(r.bytes),
        },
        _ => Size::number(1.0),
    }
}
