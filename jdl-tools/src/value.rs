//! ClassAd values: the result of evaluating an expression.

use std::fmt;
use std::sync::Arc;

use crate::ast::ClassAd;
use crate::eval::ScopeNode;

/// A ClassAd value. Cheap to clone: strings, lists and ads are reference counted.
#[derive(Clone, Debug)]
pub enum Value {
    /// The value of an attribute that does not exist (or of an operation on one).
    Undefined,
    /// The value of a type error, a division by zero, a failed conversion, ...
    Error,
    /// `true` / `false`.
    Bool(bool),
    /// A 64-bit integer; arithmetic wraps like HTCondor's.
    Int(i64),
    /// A double.
    Real(f64),
    /// A string.
    Str(Arc<str>),
    /// A list of values.
    List(Arc<[Value]>),
    /// A nested ClassAd, together with the scope it was written in (for
    /// references from inside it to enclosing attributes).
    Ad(Arc<ScopeNode>),
}

impl Value {
    /// A string value.
    pub fn str(s: &str) -> Value {
        Value::Str(Arc::from(s))
    }

    /// The type name used by `cder-jdl eval --json`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Undefined => "undefined",
            Value::Error => "error",
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Real(_) => "real",
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Ad(_) => "classad",
        }
    }

    /// The ad of a classad value.
    pub fn as_ad(&self) -> Option<&ClassAd> {
        match self {
            Value::Ad(n) => Some(&n.ad),
            _ => None,
        }
    }

    /// A numeric view (booleans count as 0/1), for Rank.
    pub fn as_number(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Real(r) => Some(*r),
            Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
            _ => None,
        }
    }

    /// `is` / `=?=`: same type and same value (strings case-sensitively).
    /// `None` when both sides are lists, or both ads, which HTCondor treats as an error.
    pub fn identical(&self, other: &Value) -> Option<bool> {
        Some(match (self, other) {
            (Value::List(_), Value::List(_)) | (Value::Ad(_), Value::Ad(_)) => return None,
            (Value::List(_) | Value::Ad(_), _) | (_, Value::List(_) | Value::Ad(_)) => false,
            (Value::Undefined, Value::Undefined) | (Value::Error, Value::Error) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Real(a), Value::Real(b)) => a == b,
            (Value::Str(a), Value::Str(b)) => a == b,
            _ => false,
        })
    }

    /// A JSON rendering: `{"type": T, "value": V}`.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let v = match self {
            Value::Undefined | Value::Error => serde_json::Value::Null,
            Value::Bool(b) => json!(b),
            Value::Int(i) => json!(i),
            Value::Real(r) => {
                if r.is_finite() {
                    json!(r)
                } else {
                    // JSON has no infinities; say them as strings.
                    json!(format_real(*r))
                }
            }
            Value::Str(s) => json!(&**s),
            Value::List(l) => serde_json::Value::Array(l.iter().map(|v| v.to_json()).collect()),
            Value::Ad(n) => {
                let mut m = serde_json::Map::new();
                for a in n.ad.attributes() {
                    m.insert(a.name.to_string(), n.eval_attr(a.sym).to_json());
                }
                serde_json::Value::Object(m)
            }
        };
        json!({"type": self.type_name(), "value": v})
    }
}

thread_local! {
    /// Set while printing for `string()` / `strcat()`, which show reals as HTCondor unparses them.
    static HTCONDOR_REALS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A list or ad as HTCondor's `string()` shows it: ClassAd syntax with reals
/// as `%.15E` (`{ 1.500000000000000E+00,"a" }`).
pub fn unparse_htcondor(v: &Value) -> String {
    HTCONDOR_REALS.with(|c| c.set(true));
    let s = v.to_string();
    HTCONDOR_REALS.with(|c| c.set(false));
    s
}

/// A real in printed ClassAd syntax: shortest exact form, or HTCondor's
/// `%.15E` inside [`unparse_htcondor`].
pub(crate) fn display_real(r: f64) -> String {
    if HTCONDOR_REALS.with(|c| c.get()) {
        real_to_string(r)
    } else {
        format_real(r)
    }
}

/// Formats a real so that it reads back as a real (`1.0`, `1e+20`, `0.1`).
pub fn format_real(r: f64) -> String {
    if r.is_nan() {
        return "real(\"NaN\")".into();
    }
    if r.is_infinite() {
        return if r > 0.0 { "real(\"INF\")".into() } else { "real(\"-INF\")".into() };
    }
    let s = format!("{r:?}");
    if s.contains(['.', 'e', 'E']) {
        s
    } else {
        format!("{s}.0")
    }
}

/// HTCondor's `string(real)`: C's `%.15E` (`1.500000000000000E+00`), zero as `0.0`.
pub fn real_to_string(r: f64) -> String {
    if r == 0.0 {
        return if r.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    if !r.is_finite() {
        return format_real(r);
    }
    let s = format!("{r:.15E}");
    // Rust writes `1.5E0`; C writes `1.5E+00`.
    match s.split_once('E') {
        Some((m, e)) => {
            let (sign, digits) = match e.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', e),
            };
            format!("{m}E{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// Writes a string literal with ClassAd escapes.
pub fn quote_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('"');
}

impl fmt::Display for Value {
    /// ClassAd syntax, as the `eval` command prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Undefined => f.write_str("undefined"),
            Value::Error => f.write_str("error"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Real(r) => f.write_str(&display_real(*r)),
            Value::Str(s) => {
                let mut o = String::new();
                quote_str(s, &mut o);
                f.write_str(&o)
            }
            Value::List(l) => {
                f.write_str("{ ")?;
                for (i, v) in l.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str(" }")
            }
            Value::Ad(n) => write!(f, "{}", n.ad),
        }
    }
}
