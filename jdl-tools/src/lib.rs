//! The ClassAd / gLite JDL language: parse, evaluate, match, rank.
//!
//! ```
//! use cder_jdl::{ClassAd, CompiledRequest, Value};
//! let request = ClassAd::parse(r#"[ Requirements = GPGPUVendor == "Nvidia" && GPGPUMainMemorySize >= 512; Rank = GPGPUMainMemorySize ]"#).unwrap();
//! let offer = ClassAd::parse(r#"[ GPGPUVendor = "NVIDIA"; GPGPUMainMemorySize = 1024 ]"#).unwrap();
//! let req = CompiledRequest::new(&request);
//! assert!(req.matches(&offer));
//! assert_eq!(req.rank(&offer), 1024.0);
//! assert!(matches!(cder_jdl::eval_str("1 + 2.5").unwrap(), Value::Real(r) if r == 3.5));
//! ```
//!
//! The semantics are HTCondor's (see `docs/classad.md` for the subset and the
//! known differences). Requests are compiled once ([`CompiledRequest`]):
//! attribute names are resolved and constant sub-expressions folded, so
//! matching against many offers re-parses nothing.

pub mod ast;
pub mod bdii;
pub mod cmd;
pub mod eval;
pub mod functions;
pub mod jdl;
pub mod lexer;
pub mod listmatch;
pub mod lrms;
pub mod matchmaking;
pub mod parser;
pub mod submit;
pub mod value;

pub use ast::{ClassAd, Expr, Pos, Sym};
pub use eval::{eval_attr, eval_expr, eval_expr_matching, Quirks};
pub use matchmaking::{matches, rank, symmetric_match, CompiledRequest};
pub use parser::{parse_classad, parse_classad_recovering, parse_classads, parse_expr};
pub use value::Value;

/// A syntax error, with the line and column where it was found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{pos}: {message}")]
pub struct ParseError {
    /// Where.
    pub pos: Pos,
    /// What was expected (and found).
    pub message: String,
}

/// Parses and evaluates an expression with no ad in scope.
pub fn eval_str(src: &str) -> Result<Value, ParseError> {
    Ok(eval_expr(&parse_expr(src)?, None, None))
}
