//! The ClassAd language: parse, evaluate, match, rank.
//!
//! ```
//! use cder_classad::{ClassAd, CompiledRequest, Value};
//! let request = ClassAd::parse(
//!     r#"[ Requirements = GPGPUVendor == "Nvidia" && GPGPUMainMemorySize >= 512; Rank = GPGPUMainMemorySize ]"#,
//! )
//! .unwrap();
//! let offer = ClassAd::parse(r#"[ GPGPUVendor = "NVIDIA"; GPGPUMainMemorySize = 1024 ]"#).unwrap();
//! let req = CompiledRequest::new(&request);
//! assert!(req.matches(&offer));
//! assert_eq!(req.rank(&offer), 1024.0);
//! assert!(matches!(cder_classad::eval_str("1 + 2.5").unwrap(), Value::Real(r) if r == 3.5));
//! ```
//!
//! The semantics are HTCondor's (see `docs/classad.md` for the subset and the
//! known differences). Requests are compiled once ([`CompiledRequest`]):
//! attribute names are resolved and constant sub-expressions folded, so
//! matching against many offers re-parses nothing.
//!
//! The modules form a one-way pipeline, each using only those above it:
//! `literal`, `limits` → `lexer` → `ast` → `value` → `ops` → `functions` →
//! `parser` → `eval` → `matchmaking`. This crate knows nothing of JDL, GLUE or LDAP; `cder-jdl`
//! builds those on top of it.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod ast;
pub mod eval;
pub mod functions;
pub mod lexer;
pub mod limits;
pub mod literal;
pub mod matchmaking;
pub mod ops;
pub mod parser;
pub mod value;

pub use ast::{ClassAd, Expr, Sym};
pub use eval::{eval_attr, eval_expr, eval_expr_matching, Quirks};
pub use lexer::{ParseError, Pos};
pub use matchmaking::{matches, rank, symmetric_match, CompiledRequest};
pub use parser::{parse_classad, parse_classad_recovering, parse_classads, parse_expr};
pub use value::Value;

/// Parses and evaluates an expression with no ad in scope.
pub fn eval_str(src: &str) -> Result<Value, ParseError> {
    Ok(eval_expr(&parse_expr(src)?, None, None))
}
