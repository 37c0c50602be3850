//! gLite JDL and two-phase grid submission on top of the ClassAd engine
//! ([`cder_classad`]): JDL checks, the BDII query and offer builder, phase 1
//! (`list-match`), phase 2 (`submit`) and the CE-side translation (`lrms-attrs`).
//!
//! ```
//! use cder_jdl::{ClassAd, CompiledRequest};
//! let request = ClassAd::parse(r#"[ Requirements = GPGPUVendor == "Nvidia" ]"#).unwrap();
//! let offer = ClassAd::parse(r#"[ GPGPUVendor = "NVIDIA" ]"#).unwrap();
//! assert!(CompiledRequest::new(&request).matches(&offer));
//! ```
//!
//! The engine's modules are re-exported under their old paths so that
//! `cder_jdl::parser::parse_classad` and `cder_jdl::ClassAd` keep working.

#![deny(missing_docs)]

pub use cder_classad::{ast, eval, functions, lexer, matchmaking, parser, value};
pub use cder_classad::{
    eval_attr, eval_expr, eval_expr_matching, eval_str, matches, parse_classad, parse_classad_recovering,
    parse_classads, parse_expr, rank, symmetric_match, ClassAd, CompiledRequest, Expr, ParseError, Pos, Quirks,
    Sym, Value,
};

pub mod arc;
pub mod bdii;
pub mod cmd;
pub mod jdl;
pub mod listmatch;
pub mod resources;
pub mod submit;
