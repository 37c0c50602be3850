//! The candidate cut: the Requirements' top-level clauses that compare an
//! offer attribute with a constant select candidates through the snapshot's
//! sorted columns, before any ClassAd is evaluated.
//!
//! A conjunction is true only when every conjunct is, so an offer on which
//! one top-level clause cannot be true (false, undefined or an error) can
//! never match. Each compiled clause gives a superset of the offers on which
//! it is true; what it cannot decide exactly (large integers, booleans next
//! to numbers, string case) it keeps. Clauses under `||` or `!`, over
//! expressions, or over attributes a job adds to the stored ads are left to
//! the full evaluation, which runs on the survivors only.

use cder_classad::ast::{BinOp, Expr, Func, Scope, UnOp};
use cder_classad::value::Value;

use super::snapshot::Column;
use super::{IndexError, OfferIndex, ACCESS_RULE, RTE};
use crate::listmatch::Request;

/// A comparison the columns answer.
#[derive(Clone, Debug, PartialEq)]
enum Cond {
    /// `attr OP number` (booleans as 0 and 1, as ClassAd comparisons take them).
    Num(BinOp, f64),
    /// `attr OP "string"`, ASCII case ignored (`=?=` too: a superset of its case-exact answer).
    Str(BinOp, Vec<u8>),
    /// `member("string", attr)`.
    Member(Vec<u8>),
    /// `attr` alone: a non-zero number or `true`.
    Truthy,
}

/// One compiled clause.
#[derive(Clone, Debug, PartialEq)]
pub struct Clause {
    /// The offer attribute.
    pub attr: String,
    cond: Cond,
    /// The clause as written.
    pub text: String,
}

/// The compiled clauses of a request.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Clauses the columns decide.
    pub clauses: Vec<Clause>,
    /// Clauses left to the full evaluation.
    pub uncompiled: usize,
}

/// The constant an expression stands for in the job: a literal, a negated
/// number, or the job's own attribute defined as one.
fn constant(e: &Expr, request: &Request, depth: usize) -> Option<Value> {
    match e {
        Expr::Lit(v) => Some(v.clone()),
        Expr::Unary(UnOp::Neg, x) => match constant(x, request, depth)? {
            Value::Int(i) => Some(Value::Int(i.checked_neg()?)),
            Value::Real(r) => Some(Value::Real(-r)),
            _ => None,
        },
        Expr::Attr { scope: Scope::My | Scope::Plain, name, .. } if depth < 4 => {
            constant(request.job.lookup(name)?, request, depth + 1)
        }
        _ => None,
    }
}

/// The offer attribute an expression names: `TARGET.X`, or `X` when the job has no `X`.
fn offer_attr<'e>(e: &'e Expr, request: &Request) -> Option<&'e str> {
    match e {
        Expr::Attr { scope: Scope::Target, name, .. } => Some(name),
        Expr::Attr { scope: Scope::Plain, name, .. } if request.job.lookup(name).is_none() => Some(name),
        _ => None,
    }
}

fn flip(op: BinOp) -> BinOp {
    match op {
        BinOp::Lt => BinOp::Gt,
        BinOp::Le => BinOp::Ge,
        BinOp::Gt => BinOp::Lt,
        BinOp::Ge => BinOp::Le,
        op => op,
    }
}

fn compile(e: &Expr, request: &Request) -> Option<(String, Cond)> {
    match e {
        Expr::Binary(op, b) => {
            let op = *op;
            if !matches!(op, BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Is) {
                return None;
            }
            let (attr, value, op) = match (offer_attr(&b.0, request), offer_attr(&b.1, request)) {
                (Some(a), None) => (a, constant(&b.1, request, 0)?, op),
                (None, Some(a)) => (a, constant(&b.0, request, 0)?, flip(op)),
                _ => return None,
            };
            let cond = match value {
                Value::Int(i) => Cond::Num(op, i as f64),
                Value::Real(r) if r.is_finite() => Cond::Num(op, r),
                Value::Bool(x) => Cond::Num(op, x as u8 as f64),
                Value::Str(s) => Cond::Str(op, s.as_bytes().to_ascii_lowercase()),
                _ => return None,
            };
            // `!=` of numbers: exact only below 2^53; left to the evaluation.
            if matches!(cond, Cond::Num(BinOp::Ne, _)) {
                return None;
            }
            Some((attr.to_string(), cond))
        }
        Expr::Call(c) if c.func == Func::Member && c.args.len() == 2 => {
            let attr = offer_attr(&c.args[1], request)?;
            match constant(&c.args[0], request, 0)? {
                Value::Str(s) => Some((attr.to_string(), Cond::Member(s.as_bytes().to_ascii_lowercase()))),
                _ => None,
            }
        }
        e => offer_attr(e, request).map(|a| (a.to_string(), Cond::Truthy)),
    }
}

/// Attributes whose values a job adds to the stored ads: their columns do not say.
fn added_per_job(attr: &str, request: &Request) -> bool {
    let l = attr.to_ascii_lowercase();
    l == ACCESS_RULE.to_ascii_lowercase()
        || l.starts_with("totalvgpgpu_")
        || l.starts_with("freevgpgpu_")
        || (request.method.is_some() && l == RTE.to_ascii_lowercase())
}

/// A set of offers.
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: u32) {
        if let Some(w) = self.0.get_mut(i as usize / 64) {
            *w |= 1 << (i % 64);
        }
    }
    fn has(&self, i: usize) -> bool {
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
}

impl Plan {
    /// Compiles `request`'s top-level clauses.
    pub fn new(request: &Request, _index: &OfferIndex) -> Plan {
        let mut plan = Plan::default();
        for c in &request.clauses {
            match compile(c, request).filter(|(attr, _)| !added_per_job(attr, request)) {
                Some((attr, cond)) => plan.clauses.push(Clause { attr, cond, text: c.to_string() }),
                None => plan.uncompiled += 1,
            }
        }
        plan
    }

    /// The offers of `visible` (in order) that every compiled clause may hold on.
    pub fn cut(&self, index: &OfferIndex, visible: &[usize]) -> Result<Vec<usize>, IndexError> {
        let mut sets = Vec::with_capacity(self.clauses.len());
        for c in &self.clauses {
            let mut bits = Bits::new(index.len());
            if let Some(col) = index.column(&c.attr)? {
                select(&col, &c.cond, &mut bits).ok_or_else(|| index.corrupt(format!("column {}", c.attr)))?;
            }
            sets.push(bits);
        }
        Ok(visible.iter().copied().filter(|&i| sets.iter().all(|s| s.has(i))).collect())
    }
}

/// The first sorted rank whose number does not satisfy `below` (numbers are sorted ascending).
fn partition(col: &Column<'_>, below: impl Fn(f64) -> bool) -> Option<usize> {
    let (mut lo, mut hi) = (0, col.nnums);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if below(col.num(mid)?) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

fn select(col: &Column<'_>, cond: &Cond, bits: &mut Bits) -> Option<()> {
    let nums = |bits: &mut Bits, from: usize, to: usize| -> Option<()> {
        for k in from..to {
            bits.set(col.num_offers.u32(k * 4)?);
        }
        Some(())
    };
    match cond {
        Cond::Num(op, x) => {
            let x = *x;
            // Integers past 2^53 round when read as f64, never across x: the bounds are inclusive.
            let lt = partition(col, |v| v < x)?;
            let le = partition(col, |v| v <= x)?;
            match op {
                BinOp::Eq | BinOp::Is => nums(bits, lt, le)?,
                BinOp::Lt | BinOp::Le => nums(bits, 0, le)?,
                BinOp::Gt | BinOp::Ge => nums(bits, lt, col.nnums)?,
                _ => return None,
            }
        }
        Cond::Truthy => {
            let lt = partition(col, |v| v < 0.0)?;
            let le = partition(col, |v| v <= 0.0)?;
            nums(bits, 0, lt)?;
            nums(bits, le, col.nnums)?;
        }
        Cond::Str(op, s) => {
            let p = &col.strs;
            let lo = p.lower_bound(s)?;
            let mut hi = lo;
            while hi < p.len() && p.key(hi)? == s.as_slice() {
                hi += 1;
            }
            let mark = |bits: &mut Bits, from: usize, to: usize| p.offers(from, to, |i| bits.set(i));
            match op {
                BinOp::Eq | BinOp::Is => mark(bits, lo, hi)?,
                BinOp::Ne => {
                    mark(bits, 0, lo)?;
                    mark(bits, hi, p.len())?;
                }
                BinOp::Lt => mark(bits, 0, lo)?,
                BinOp::Le => mark(bits, 0, hi)?,
                BinOp::Gt => mark(bits, hi, p.len())?,
                BinOp::Ge => mark(bits, lo, p.len())?,
                _ => return None,
            }
        }
        Cond::Member(s) => {
            let p = &col.elems;
            let lo = p.lower_bound(s)?;
            let mut hi = lo;
            while hi < p.len() && p.key(hi)? == s.as_slice() {
                hi += 1;
            }
            p.offers(lo, hi, |i| bits.set(i))?;
        }
    }
    Some(())
}
