//! The evaluator: HTCondor's ClassAd semantics.
//!
//! Evaluation never loops and never overflows the stack: attributes under
//! evaluation are tracked (a reference back to one is a cycle and evaluates to
//! `error`), and the evaluation depth is bounded.

use std::sync::Arc;

use crate::ast::{BinOp, Call, ClassAd, Expr, Func, Scope, ScopeNode, Sym, Value};
use crate::functions::{apply, f2i, to_int};
use crate::limits::{stack_addr, MAX_STACK_BYTES};
use crate::ops::{binary_q, unary};
pub use crate::ops::{truth, Truth};

/// Deepest chain of nested evaluations (attribute references included).
pub const MAX_EVAL_DEPTH: u32 = 10_000;
/// Most expression nodes one evaluation may visit: ads whose attributes refer
/// to each other twice over (`a0 = a1 + a1; a1 = a2 + a2; ...`) would
/// otherwise take exponential time. Past it, the result is `error`.
pub const MAX_EVAL_STEPS: u64 = 20_000_000;

/// Where an expression is being evaluated.
#[derive(Clone, Copy)]
pub(crate) struct Frame<'a> {
    /// The innermost ad (unqualified names look here first).
    pub ad: Option<&'a ClassAd>,
    /// Enclosing ads.
    pub parent: Option<&'a Arc<ScopeNode>>,
    /// `MY`.
    pub my: Option<&'a ClassAd>,
    /// `TARGET` / `OTHER`.
    pub target: Option<&'a ClassAd>,
}

impl<'a> Frame<'a> {
    /// Evaluation inside `ad`, with an optional target.
    pub fn root(ad: Option<&'a ClassAd>, target: Option<&'a ClassAd>) -> Frame<'a> {
        Frame { ad, parent: None, my: ad, target }
    }
}

const INLINE: usize = 16;

/// Per-evaluation state: depth and the attributes being evaluated.
pub(crate) struct Ctx {
    depth: u32,
    stack_base: usize,
    steps: u64,
    /// Unqualified names not found in MY are looked up in TARGET (matchmaking).
    pub fallback: bool,
    /// Reproduce HTCondor's known deviations (see [`Quirks`]); tests only.
    pub quirks: bool,
    stack: [(usize, Sym); INLINE],
    len: usize,
    spill: Vec<(usize, Sym)>,
}

impl Ctx {
    pub fn new(fallback: bool) -> Ctx {
        Ctx {
            depth: 0,
            stack_base: stack_addr(),
            steps: 0,
            fallback,
            quirks: false,
            stack: [(0, Sym(0)); INLINE],
            len: 0,
            spill: Vec::new(),
        }
    }

    fn push(&mut self, key: (usize, Sym)) -> bool {
        if self.stack[..self.len].contains(&key) || self.spill.contains(&key) {
            return false;
        }
        if self.len < INLINE {
            self.stack[self.len] = key;
            self.len += 1;
        } else {
            self.spill.push(key);
        }
        true
    }

    fn pop(&mut self) {
        if self.spill.pop().is_none() {
            self.len -= 1;
        }
    }

    /// Evaluates an expression in a frame.
    pub fn eval(&mut self, e: &Expr, f: Frame<'_>) -> Value {
        if let Expr::Lit(v) = e {
            return v.clone();
        }
        self.depth += 1;
        self.steps += 1;
        let v = if self.depth > MAX_EVAL_DEPTH
            || self.steps > MAX_EVAL_STEPS
            || self.stack_base.abs_diff(stack_addr()) > MAX_STACK_BYTES
        {
            Value::Error
        } else {
            self.eval_inner(e, f)
        };
        self.depth -= 1;
        v
    }

    /// Evaluates the attribute `sym` of `ad` in `f` (whose innermost ad is `ad`).
    fn eval_attr_in(&mut self, ad: &ClassAd, sym: Sym, f: Frame<'_>) -> Option<Value> {
        let a = ad.get_sym(sym)?;
        if let Expr::Lit(v) = &a.expr {
            return Some(v.clone());
        }
        let key = (ad.id(), sym);
        if !self.push(key) {
            // A reference back to an attribute under evaluation: a cycle.
            return Some(if self.quirks { Value::Undefined } else { Value::Error });
        }
        let v = self.eval(&a.expr, f);
        self.pop();
        Some(v)
    }

    fn lookup_plain(&mut self, sym: Sym, f: Frame<'_>) -> Value {
        if let Some(ad) = f.ad {
            if let Some(v) = self.eval_attr_in(ad, sym, f) {
                return v;
            }
        }
        let mut node = f.parent;
        while let Some(n) = node {
            let nf = Frame { ad: Some(&n.ad), parent: n.parent.as_ref(), my: f.my, target: f.target };
            if let Some(v) = self.eval_attr_in(&n.ad, sym, nf) {
                return v;
            }
            node = n.parent.as_ref();
        }
        if self.fallback && f.target.is_some() {
            return self.lookup_target(sym, f);
        }
        Value::Undefined
    }

    /// `TARGET.x`: x is evaluated in the target ad, whose own TARGET is MY.
    fn lookup_target(&mut self, sym: Sym, f: Frame<'_>) -> Value {
        match f.target {
            Some(t) => {
                let tf = Frame { ad: Some(t), parent: None, my: Some(t), target: f.my };
                self.eval_attr_in(t, sym, tf).unwrap_or(Value::Undefined)
            }
            None => Value::Undefined,
        }
    }

    /// Looks `sym` up inside a nested ad value (no search of enclosing ads).
    pub fn select(&mut self, v: &Value, sym: Sym, f: Frame<'_>) -> Value {
        match v {
            Value::Ad(n) => {
                let nf = Frame { ad: Some(&n.ad), parent: n.parent.as_ref(), my: f.my, target: f.target };
                self.eval_attr_in(&n.ad, sym, nf).unwrap_or(Value::Undefined)
            }
            Value::List(l) => Value::List(l.iter().map(|x| self.select(x, sym, f)).collect::<Vec<_>>().into()),
            Value::Undefined => Value::Undefined,
            _ => Value::Error,
        }
    }

    /// A binary operation other than `&&` / `||`. Constants and constant
    /// attributes are used in place (no reference-count traffic).
    fn eval_binary(&mut self, op: BinOp, a: &Expr, b: &Expr, f: Frame<'_>) -> Value {
        let (lv, rv);
        let l = match peek(a, f) {
            Some(v) => v,
            None => {
                lv = self.eval(a, f);
                &lv
            }
        };
        let r = match peek(b, f) {
            Some(v) => v,
            None => {
                rv = self.eval(b, f);
                &rv
            }
        };
        binary_q(op, l, r, self.quirks)
    }

    fn eval_inner(&mut self, e: &Expr, f: Frame<'_>) -> Value {
        match e {
            Expr::Lit(v) => v.clone(),
            Expr::Attr { scope, sym, .. } => match scope {
                Scope::Plain => self.lookup_plain(*sym, f),
                Scope::My => match f.my {
                    Some(my) => {
                        let mf = Frame { ad: Some(my), parent: None, my: Some(my), target: f.target };
                        self.eval_attr_in(my, *sym, mf).unwrap_or(Value::Undefined)
                    }
                    None => Value::Undefined,
                },
                Scope::Target => self.lookup_target(*sym, f),
                Scope::Parent => match f.parent {
                    Some(n) => {
                        let nf = Frame { ad: Some(&n.ad), parent: n.parent.as_ref(), my: f.my, target: f.target };
                        self.eval_attr_in(&n.ad, *sym, nf).unwrap_or(Value::Undefined)
                    }
                    None => Value::Undefined,
                },
            },
            Expr::Select(base, sym, _) => {
                let b = self.eval(base, f);
                self.select(&b, *sym, f)
            }
            Expr::Index(b) => {
                let base = self.eval(&b.0, f);
                let idx = self.eval(&b.1, f);
                index(&base, &idx, self, f)
            }
            Expr::Unary(op, x) => {
                let v = self.eval(x, f);
                unary(*op, &v)
            }
            Expr::Binary(op, b) => match op {
                BinOp::And => {
                    let l = self.eval(&b.0, f);
                    let lt = match truth(&l) {
                        Truth::False => return Value::Bool(false),
                        Truth::Error => return Value::Error,
                        t => t,
                    };
                    let r = self.eval(&b.1, f);
                    match truth(&r) {
                        Truth::False => Value::Bool(false),
                        Truth::Error => Value::Error,
                        Truth::True if lt == Truth::True => Value::Bool(true),
                        _ => Value::Undefined,
                    }
                }
                BinOp::Or => {
                    let l = self.eval(&b.0, f);
                    let lt = match truth(&l) {
                        Truth::True => return Value::Bool(true),
                        Truth::Error => return Value::Error,
                        t => t,
                    };
                    let r = self.eval(&b.1, f);
                    match truth(&r) {
                        Truth::True => Value::Bool(true),
                        Truth::Error => Value::Error,
                        Truth::False if lt == Truth::False => Value::Bool(false),
                        _ => Value::Undefined,
                    }
                }
                _ => self.eval_binary(*op, &b.0, &b.1, f),
            },
            Expr::Cond(b) => {
                let c = self.eval(&b.0, f);
                match truth(&c) {
                    Truth::True => self.eval(&b.1, f),
                    Truth::False => self.eval(&b.2, f),
                    Truth::Undefined => Value::Undefined,
                    Truth::Error => Value::Error,
                }
            }
            Expr::Call(c) => call(self, c, f),
            Expr::List(items) => Value::List(items.iter().map(|x| self.eval(x, f)).collect::<Vec<_>>().into()),
            Expr::Ad(ad) => {
                // The nested ad remembers where it was written, for references to enclosing attributes.
                let parent = match f.ad {
                    Some(cur) => Some(Arc::new(ScopeNode { ad: cur.clone(), parent: f.parent.cloned() })),
                    None => f.parent.cloned(),
                };
                Value::Ad(Arc::new(ScopeNode { ad: ad.clone(), parent }))
            }
        }
    }
}

/// The value of `e` by reference when no evaluation is needed: a constant, or
/// an attribute of the target (or of the current ad) defined as a constant.
#[inline]
fn peek<'x>(e: &'x Expr, f: Frame<'x>) -> Option<&'x Value> {
    match e {
        Expr::Lit(v) => Some(v),
        Expr::Attr { scope: Scope::Target, sym, .. } => match &f.target?.get_sym(*sym)?.expr {
            Expr::Lit(v) => Some(v),
            _ => None,
        },
        Expr::Attr { scope: Scope::Plain, sym, .. } => match &f.ad?.get_sym(*sym)?.expr {
            Expr::Lit(v) => Some(v),
            _ => None,
        },
        _ => None,
    }
}

#[inline(never)]
fn index(base: &Value, idx: &Value, ctx: &mut Ctx, f: Frame<'_>) -> Value {
    match (base, idx) {
        (Value::Error, _) | (_, Value::Error) => Value::Error,
        (Value::Undefined, _) | (_, Value::Undefined) => Value::Undefined,
        (Value::List(l), Value::Int(i)) => {
            if *i < 0 || *i as u64 >= l.len() as u64 {
                Value::Error
            } else {
                l[*i as usize].clone()
            }
        }
        (Value::Ad(_), Value::Str(s)) => ctx.select(base, Sym::of(s), f),
        _ => Value::Error,
    }
}

/// HTCondor behaviours that cder deliberately does not share, reproduced on
/// request so that differential tests can tell a documented disagreement from
/// a bug. See docs/classad.md, "Known disagreements".
#[derive(Copy, Clone, Debug, Default)]
pub struct Quirks;

impl Quirks {
    /// Evaluates like [`eval_expr`], but with HTCondor's behaviour where cder
    /// deliberately differs: a reference cycle is `undefined` (cder: `error`);
    /// a real division by zero whose IEEE quotient is `-inf` or `NaN` gives that
    /// (cder: `error`, as for every division by zero);
    /// integer `pow` is `(long long)(pow(b, e) + 0.5)`, so `pow(-2, 3)` is -7
    /// and odd powers above 2^52 come out one too high (cder: the exact power); `int(string)` goes through a double,
    /// losing precision beyond 2^53 (cder: exact for integer text); a logical
    /// right shift (`>>>`) of a negative number by 0 is 0 (cder: the number).
    pub fn eval_expr(e: &Expr, ad: Option<&ClassAd>, target: Option<&ClassAd>) -> Value {
        let mut ctx = Ctx::new(false);
        ctx.quirks = true;
        ctx.eval(e, Frame::root(ad, target))
    }
}

/// Evaluates attribute `name` of `ad` (with an optional target), without the
/// matchmaking fallback.
pub fn eval_attr(ad: &ClassAd, name: &str, target: Option<&ClassAd>) -> Value {
    let mut ctx = Ctx::new(false);
    let f = Frame::root(Some(ad), target);
    ctx.eval_attr_in(ad, Sym::of(name), f).unwrap_or(Value::Undefined)
}

/// Evaluates an expression in the scope of `ad` (if any), with an optional target.
/// Unqualified names are looked up in `ad` and its enclosing ads only.
pub fn eval_expr(e: &Expr, ad: Option<&ClassAd>, target: Option<&ClassAd>) -> Value {
    let mut ctx = Ctx::new(false);
    ctx.eval(e, Frame::root(ad, target))
}

/// As [`eval_expr`], but unqualified names not found in `ad` are then looked
/// up in `target` (HTCondor's matchmaking rule).
pub fn eval_expr_matching(e: &Expr, ad: &ClassAd, target: &ClassAd) -> Value {
    let mut ctx = Ctx::new(true);
    ctx.eval(e, Frame::root(Some(ad), Some(target)))
}

impl ScopeNode {
    /// Evaluates one attribute of the nested ad, in the scope it was written in.
    pub fn eval_attr(&self, sym: Sym) -> Value {
        let mut ctx = Ctx::new(false);
        let f = Frame { ad: Some(&self.ad), parent: self.parent.as_ref(), my: Some(&self.ad), target: None };
        ctx.eval_attr_in(&self.ad, sym, f).unwrap_or(Value::Undefined)
    }
}

impl ClassAd {
    /// Evaluates one attribute of this ad, with no target.
    pub fn eval_attr(&self, name: &str) -> Value {
        crate::eval::eval_attr(self, name, None)
    }
}

/// Calls a function. `ifThenElse` evaluates only the branch it takes.
/// Never inlined: its argument buffer would otherwise enlarge every
/// evaluator frame, and so the stack used per nesting level.
#[inline(never)]
pub(crate) fn call(ctx: &mut Ctx, c: &Call, f: Frame<'_>) -> Value {
    let (lo, hi) = c.func.arity();
    if c.func == Func::Unknown || c.args.len() < lo || c.args.len() > hi {
        return Value::Error;
    }
    if c.func == Func::IfThenElse {
        let cond = ctx.eval(&c.args[0], f);
        return match truth(&cond) {
            Truth::True => ctx.eval(&c.args[1], f),
            Truth::False => ctx.eval(&c.args[2], f),
            Truth::Undefined => Value::Undefined,
            Truth::Error => Value::Error,
        };
    }
    let mut buf: [Value; 3] = [Value::Undefined, Value::Undefined, Value::Undefined];
    let owned: Vec<Value>;
    let args: &[Value] = if c.args.len() <= 3 {
        for (i, a) in c.args.iter().enumerate() {
            buf[i] = ctx.eval(a, f);
        }
        &buf[..c.args.len()]
    } else {
        owned = c.args.iter().map(|a| ctx.eval(a, f)).collect();
        &owned
    };
    if ctx.quirks && c.func == Func::Int {
        return to_int(&args[0], true);
    }
    let v = apply(c, args);
    if ctx.quirks && c.func == Func::Pow {
        // HTCondor: (long long)(pow(b, e) + 0.5), so pow(-2, 3) is -7 and odd
        // powers above 2^52 come out one too high.
        if let (Value::Int(b), Value::Int(e), Value::Int(_)) = (&args[0], &args[1], &v) {
            return Value::Int(f2i((*b as f64).powf(*e as f64) + 0.5));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::{parse_classad, parse_expr};

    fn ev(src: &str, ad: Option<&ClassAd>, target: Option<&ClassAd>) -> Value {
        eval_expr(&parse_expr(src).unwrap(), ad, target)
    }

    #[test]
    fn my_target_and_parent_scopes() {
        let me = parse_classad("[ x = 1; y = other.x + x; inner = [ x = 10; z = parent.x + x ] ]").unwrap();
        let other = parse_classad("[ x = 100; back = other.x ]").unwrap();
        assert!(matches!(ev("y", Some(&me), Some(&other)), Value::Int(101)));
        assert!(matches!(ev("my.x + target.x", Some(&me), Some(&other)), Value::Int(101)));
        // In the target, OTHER is the ad being evaluated.
        assert!(matches!(ev("other.back", Some(&me), Some(&other)), Value::Int(1)));
        assert!(matches!(ev("inner.z", Some(&me), None), Value::Int(11)));
        // No fallback to the target outside matchmaking.
        let bare = parse_classad("[ r = missing ]").unwrap();
        let t = parse_classad("[ missing = 5 ]").unwrap();
        assert!(matches!(eval_attr(&bare, "r", Some(&t)), Value::Undefined));
        let r = bare.lookup("r").unwrap();
        assert!(matches!(eval_expr_matching(r, &bare, &t), Value::Int(5)));
    }

    #[test]
    fn nested_ads_see_enclosing_attributes() {
        assert!(matches!(ev("[a = 1; b = [c = a + 1]].b.c", None, None), Value::Int(2)));
        assert!(matches!(ev("[a = 1; b = {a, a + 1}].b[1]", None, None), Value::Int(2)));
        assert!(matches!(ev("[a = 1][\"A\"]", None, None), Value::Int(1)));
    }

    #[test]
    fn cycles_are_errors_and_quirks_mode_gives_undefined() {
        let ad = parse_classad("[ a = b; b = a; c = a + 1 ]").unwrap();
        assert!(matches!(ad.eval_attr("c"), Value::Error));
        let e = parse_expr("[a = a].a").unwrap();
        assert!(matches!(Quirks::eval_expr(&e, None, None), Value::Undefined));
    }

    #[test]
    fn three_valued_truth_tables() {
        let cases = [
            ("undefined && false", "false"),
            ("false && error", "false"),
            ("error && false", "error"),
            ("true && undefined", "undefined"),
            ("undefined || true", "true"),
            ("error || true", "error"),
            ("false || undefined", "undefined"),
            ("!undefined", "undefined"),
            ("undefined ? 1 : 2", "undefined"),
            ("\"a\" && true", "error"),
            ("0.5 && 2", "true"),
        ];
        for (src, want) in cases {
            assert_eq!(ev(src, None, None).to_string(), want, "{src}");
        }
    }

    #[test]
    fn arithmetic_promotion_and_division_by_zero() {
        assert!(matches!(ev("7 / 2", None, None), Value::Int(3)));
        assert!(matches!(ev("7 / 2.0", None, None), Value::Real(r) if r == 3.5));
        assert!(matches!(ev("true + 1", None, None), Value::Int(2)));
        for z in ["1 / 0", "1 % 0", "-1 / 0.0", "0.0 / 0", "7.5 % 2"] {
            assert!(matches!(ev(z, None, None), Value::Error), "{z}");
        }
        assert!(matches!(ev("9223372036854775807 + 1", None, None), Value::Int(i64::MIN)));
    }
}
