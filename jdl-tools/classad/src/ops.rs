//! Operators on values: how a value reads as a condition, unary and binary
//! operators with HTCondor's promotion rules, and string comparison.

use std::cmp::Ordering;

use crate::ast::{BinOp, UnOp, Value};

/// How a value reads as a condition.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Truth {
    /// `true`, or a non-zero number.
    True,
    /// `false`, or zero.
    False,
    /// `undefined`: the condition cannot be decided.
    Undefined,
    /// Anything else: a type error.
    Error,
}

/// Booleans and numbers are conditions (non-zero is true); anything else is an error.
pub fn truth(v: &Value) -> Truth {
    match v {
        Value::Bool(true) => Truth::True,
        Value::Bool(false) => Truth::False,
        Value::Int(i) => {
            if *i != 0 {
                Truth::True
            } else {
                Truth::False
            }
        }
        Value::Real(r) => {
            if *r != 0.0 {
                Truth::True
            } else {
                Truth::False
            }
        }
        Value::Undefined => Truth::Undefined,
        _ => Truth::Error,
    }
}

/// A unary operator applied to a value, with HTCondor's semantics.
#[inline(never)]
pub fn unary(op: UnOp, v: &Value) -> Value {
    match (op, v) {
        (_, Value::Error) => Value::Error,
        (_, Value::Undefined) => Value::Undefined,
        (UnOp::Not, v) => match truth(v) {
            Truth::True => Value::Bool(false),
            Truth::False => Value::Bool(true),
            _ => Value::Error,
        },
        (UnOp::Neg, Value::Int(i)) => Value::Int(i.wrapping_neg()),
        (UnOp::Neg, Value::Real(r)) => Value::Real(-r),
        (UnOp::Plus, Value::Int(_) | Value::Real(_)) => v.clone(),
        (UnOp::BitNot, Value::Int(i)) => Value::Int(!i),
        _ => Value::Error,
    }
}

/// A number for arithmetic: booleans count as integers.
enum Num {
    I(i64),
    R(f64),
}

fn num(v: &Value) -> Option<Num> {
    match v {
        Value::Int(i) => Some(Num::I(*i)),
        Value::Real(r) => Some(Num::R(*r)),
        Value::Bool(b) => Some(Num::I(*b as i64)),
        _ => None,
    }
}

fn as_f(n: &Num) -> f64 {
    match n {
        Num::I(i) => *i as f64,
        Num::R(r) => *r,
    }
}

/// Case-insensitive string order, as HTCondor's strcasecmp.
pub fn str_icmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    for (x, y) in a.iter().zip(b.iter()) {
        let (x, y) = (x.to_ascii_lowercase(), y.to_ascii_lowercase());
        if x != y {
            return x.cmp(&y);
        }
    }
    a.len().cmp(&b.len())
}

/// A binary operation other than `&&` / `||` (which short-circuit).
pub fn binary(op: BinOp, l: &Value, r: &Value) -> Value {
    binary_q(op, l, r, false)
}

/// [`binary`], optionally with HTCondor's real-division quirk.
#[inline(never)]
pub fn binary_q(op: BinOp, l: &Value, r: &Value, quirks: bool) -> Value {
    use BinOp::*;
    match op {
        Is | Isnt => {
            return match l.identical(r) {
                Some(b) => Value::Bool(b == (op == Is)),
                None => Value::Error,
            }
        }
        And | Or => {
            // Only reached through constant folding of already-evaluated operands.
            let (lt, rt) = (truth(l), truth(r));
            return match op {
                And => match (lt, rt) {
                    (Truth::False, _) => Value::Bool(false),
                    (Truth::Error, _) | (_, Truth::Error) => Value::Error,
                    (_, Truth::False) => Value::Bool(false),
                    (Truth::True, Truth::True) => Value::Bool(true),
                    _ => Value::Undefined,
                },
                _ => match (lt, rt) {
                    (Truth::True, _) => Value::Bool(true),
                    (Truth::Error, _) | (_, Truth::Error) => Value::Error,
                    (_, Truth::True) => Value::Bool(true),
                    (Truth::False, Truth::False) => Value::Bool(false),
                    _ => Value::Undefined,
                },
            };
        }
        _ => {}
    }
    if matches!(l, Value::Error) || matches!(r, Value::Error) {
        return Value::Error;
    }
    if matches!(l, Value::Undefined) || matches!(r, Value::Undefined) {
        return Value::Undefined;
    }
    match op {
        Eq | Ne | Lt | Le | Gt | Ge => {
            let ord = match (l, r) {
                (Value::Str(a), Value::Str(b)) => str_icmp(a, b),
                _ => match (num(l), num(r)) {
                    (Some(Num::I(a)), Some(Num::I(b))) => a.cmp(&b),
                    (Some(a), Some(b)) => match as_f(&a).partial_cmp(&as_f(&b)) {
                        Some(o) => o,
                        // NaN: every comparison but != is false.
                        None => return Value::Bool(op == Ne),
                    },
                    _ => return Value::Error,
                },
            };
            Value::Bool(match op {
                Eq => ord == Ordering::Equal,
                Ne => ord != Ordering::Equal,
                Lt => ord == Ordering::Less,
                Le => ord != Ordering::Greater,
                Gt => ord == Ordering::Greater,
                _ => ord != Ordering::Less,
            })
        }
        BitAnd | BitOr | BitXor => match (l, r) {
            (Value::Int(a), Value::Int(b)) => Value::Int(match op {
                BitAnd => a & b,
                BitOr => a | b,
                _ => a ^ b,
            }),
            _ => Value::Error,
        },
        Shl | Shr | UShr => match (l, r) {
            (Value::Int(a), Value::Int(b)) => {
                let s = (*b & 63) as u32;
                Value::Int(match op {
                    Shl => a.wrapping_shl(s),
                    Shr => a.wrapping_shr(s),
                    _ => {
                        if quirks && *a < 0 && s == 0 {
                            // HTCondor masks with ~(-1 << (64 - s)), which is 0 when s is 0.
                            0
                        } else {
                            ((*a as u64) >> s) as i64
                        }
                    }
                })
            }
            _ => Value::Error,
        },
        Add | Sub | Mul | Div | Mod => {
            let (Some(a), Some(b)) = (num(l), num(r)) else {
                return Value::Error;
            };
            match (a, b) {
                (Num::I(a), Num::I(b)) => match op {
                    Add => Value::Int(a.wrapping_add(b)),
                    Sub => Value::Int(a.wrapping_sub(b)),
                    Mul => Value::Int(a.wrapping_mul(b)),
                    Div => {
                        if b == 0 {
                            Value::Error
                        } else if a == i64::MIN && b == -1 {
                            // HTCondor saturates the one overflowing quotient.
                            Value::Int(i64::MAX)
                        } else {
                            Value::Int(a / b)
                        }
                    }
                    _ => {
                        if b == 0 {
                            Value::Error
                        } else {
                            Value::Int(a.wrapping_rem(b))
                        }
                    }
                },
                (a, b) => {
                    let (a, b) = (as_f(&a), as_f(&b));
                    match op {
                        Add => Value::Real(a + b),
                        Sub => Value::Real(a - b),
                        Mul => Value::Real(a * b),
                        Div => {
                            // HTCondor (quirk): only a +inf quotient is an error; -inf and NaN pass.
                            if b == 0.0 && !(quirks && a / b != f64::INFINITY) {
                                Value::Error
                            } else {
                                Value::Real(a / b)
                            }
                        }
                        // HTCondor has no real remainder.
                        _ => Value::Error,
                    }
                }
            }
        }
        _ => Value::Error,
    }
}
