//! ClassAd values: the result of evaluating an expression.

use std::fmt;
use std::sync::Arc;

use crate::ast::ClassAd;
pub use crate::ast::{ScopeNode, Value};
use crate::literal::display_real;
pub use crate::literal::{format_real, quote_str, real_to_string};

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

/// A list or ad as HTCondor's `string()` shows it: ClassAd syntax with reals
/// as `%.15E` (`{ 1.500000000000000E+00,"a" }`).
pub fn unparse_htcondor(v: &Value) -> String {
    crate::literal::with_htcondor_reals(|| v.to_string())
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
