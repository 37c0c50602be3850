//! JDL validation, as `cder-jdl check` runs it.
//!
//! Problems found: syntax errors; a Requirements expression that cannot be
//! boolean-valued; `GPGPUPerNode` / `VirtualGPGPUPerNode` that is not a
//! positive integer up to `cder_request::MAX_COUNT`; an unknown `VirtualGPGPUMethod` (alias
//! `VirtualGPGPUType`); HTCondor's GPU vocabulary, as the CE reads it
//! (`RequestGPUs` a count like `GPGPUPerNode` and equal to it when both are
//! given, `gpus_minimum_capability` as `major.minor`, `gpus_minimum_memory`
//! in MiB); calls to unknown functions (a warning: they evaluate to `error`).

use std::fmt;

use cder_classad::ast::{BinOp, ClassAd, Expr, Pos, Scope, UnOp};
use cder_classad::functions::Func;
use cder_classad::value::Value;
use cder_request::{keys, CountError, VgpgpuMethod, MAX_COUNT};

/// The virtual-GPGPU methods cder knows (remote CUDA and the Virtual OpenCL
/// Layer), as [`cder_request::VgpgpuMethod::ALL`] names them.
pub const VIRTUAL_GPGPU_METHODS: &[&str] = &["rCUDA", "VCL"];

/// How bad a problem is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The JDL is unusable as written.
    Error,
    /// Allowed, but probably not what was meant.
    Warning,
}

/// One problem, where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Where.
    pub pos: Pos,
    /// How bad.
    pub severity: Severity,
    /// What.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{}: {sev}: {}", self.pos, self.message)
    }
}

/// Checks a JDL text; returns every problem found, in source order.
pub fn check(src: &str) -> Vec<Diagnostic> {
    let (ad, errs) = cder_classad::parser::parse_classad_recovering(src);
    let mut out: Vec<Diagnostic> =
        errs.into_iter().map(|e| Diagnostic { pos: e.pos, severity: Severity::Error, message: e.message }).collect();
    out.extend(check_ad(&ad));
    out.sort_by_key(|d| (d.pos.line, d.pos.col));
    out
}

/// Checks a parsed JDL ad.
pub fn check_ad(ad: &ClassAd) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for a in ad.attributes() {
        unknown_functions(&a.expr, &mut out);
    }
    if let Some(a) = ad.attribute(keys::REQUIREMENTS) {
        if let Some(t) = static_type(&a.expr, ad, 0) {
            if t != Ty::Bool {
                out.push(Diagnostic {
                    pos: a.pos,
                    severity: Severity::Error,
                    message: format!("Requirements must be boolean-valued, but it is {}", t.name()),
                });
            }
        }
    }
    for key in [keys::GPGPU_PER_NODE, keys::VIRTUAL_GPGPU_PER_NODE, keys::htcondor::REQUEST_GPUS] {
        if let Some(a) = ad.attribute(key) {
            let v = ad.eval_attr(key);
            let problem = match v {
                Value::Int(n) => match cder_request::check_count(n) {
                    Ok(_) => None,
                    Err(CountError::TooLarge) => Some(format!("must be at most {MAX_COUNT}, but it is {n}")),
                    Err(_) => Some(format!("must be a positive integer, but it is {}", describe(&v))),
                },
                ref other => Some(format!("must be a positive integer, but it is {}", describe(other))),
            };
            if let Some(why) = problem {
                out.push(Diagnostic { pos: a.pos, severity: Severity::Error, message: format!("{} {why}", a.name) });
            }
        }
    }
    if let (Some(a), Value::Int(g), Value::Int(r)) = (
        ad.attribute(keys::htcondor::REQUEST_GPUS),
        ad.eval_attr(keys::GPGPU_PER_NODE),
        ad.eval_attr(keys::htcondor::REQUEST_GPUS),
    ) {
        if g != r {
            out.push(Diagnostic {
                pos: a.pos,
                severity: Severity::Error,
                message: format!("{} {r} contradicts {} {g}", a.name, keys::GPGPU_PER_NODE),
            });
        }
    }
    for key in [keys::htcondor::GPUS_MINIMUM_CAPABILITY, keys::htcondor::GPUS_MINIMUM_MEMORY] {
        if let Some(a) = ad.attribute(key) {
            let text = match ad.eval_attr(key) {
                Value::Str(s) => s.to_string(),
                Value::Int(i) => i.to_string(),
                Value::Real(r) => r.to_string(),
                other => describe(&other),
            };
            let problem = if key == keys::htcondor::GPUS_MINIMUM_MEMORY {
                cder_request::parse_gpu_memory(&text).err().map(|e| e.to_string())
            } else {
                cder_request::parse_capability(&text).err().map(|e| e.to_string())
            };
            if let Some(why) = problem {
                out.push(Diagnostic { pos: a.pos, severity: Severity::Error, message: format!("{}: {why}", a.name) });
            }
        }
    }
    for key in [keys::VIRTUAL_GPGPU_METHOD, keys::VIRTUAL_GPGPU_TYPE] {
        if let Some(a) = ad.attribute(key) {
            match ad.eval_attr(key) {
                Value::Str(s) if s.parse::<VgpgpuMethod>().is_ok() => {}
                other => out.push(Diagnostic {
                    pos: a.pos,
                    severity: Severity::Error,
                    message: format!(
                        "unknown {} {}: known methods are {}",
                        a.name,
                        describe(&other),
                        VIRTUAL_GPGPU_METHODS.join(", ")
                    ),
                }),
            }
        }
    }
    out
}

fn describe(v: &Value) -> String {
    match v {
        Value::Undefined => "undefined".into(),
        Value::Error => "an error".into(),
        v => format!("{v} ({})", v.type_name()),
    }
}

fn unknown_functions(e: &Expr, out: &mut Vec<Diagnostic>) {
    match e {
        Expr::Call(c) => {
            if c.func == Func::Unknown {
                out.push(Diagnostic {
                    pos: c.pos,
                    severity: Severity::Warning,
                    message: format!("unknown function '{}' (the call evaluates to error)", c.name),
                });
            } else {
                let (lo, hi) = c.func.arity();
                if c.args.len() < lo || c.args.len() > hi {
                    out.push(Diagnostic {
                        pos: c.pos,
                        severity: Severity::Warning,
                        message: format!(
                            "{} takes {}, not {} (the call evaluates to error)",
                            c.name,
                            arity_text(lo, hi),
                            c.args.len()
                        ),
                    });
                }
            }
            c.args.iter().for_each(|a| unknown_functions(a, out));
        }
        Expr::Select(b, _, _) | Expr::Unary(_, b) => unknown_functions(b, out),
        Expr::Index(b) | Expr::Binary(_, b) => {
            unknown_functions(&b.0, out);
            unknown_functions(&b.1, out);
        }
        Expr::Cond(b) => {
            unknown_functions(&b.0, out);
            unknown_functions(&b.1, out);
            unknown_functions(&b.2, out);
        }
        Expr::List(l) => l.iter().for_each(|a| unknown_functions(a, out)),
        Expr::Ad(ad) => ad.attributes().iter().for_each(|a| unknown_functions(&a.expr, out)),
        Expr::Lit(_) | Expr::Attr { .. } => {}
    }
}

fn arity_text(lo: usize, hi: usize) -> String {
    if lo == hi {
        format!("{lo} argument{}", if lo == 1 { "" } else { "s" })
    } else {
        format!("{lo} to {hi} arguments")
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Ty {
    Bool,
    Number,
    Str,
    List,
    Ad,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Bool => "boolean",
            Ty::Number => "a number",
            Ty::Str => "a string",
            Ty::List => "a list",
            Ty::Ad => "a classad",
        }
    }
}

/// The type an expression always has (None when it depends on the offer or
/// cannot be told; undefined and error are no type here).
fn static_type(e: &Expr, ad: &ClassAd, depth: u32) -> Option<Ty> {
    if depth > 64 {
        return None;
    }
    match e {
        Expr::Lit(v) => match v {
            Value::Bool(_) => Some(Ty::Bool),
            Value::Int(_) | Value::Real(_) => Some(Ty::Number),
            Value::Str(_) => Some(Ty::Str),
            Value::List(_) => Some(Ty::List),
            Value::Ad(_) => Some(Ty::Ad),
            Value::Undefined | Value::Error => None,
        },
        Expr::Attr { scope: Scope::Plain | Scope::My, sym, .. } => {
            ad.get_sym(*sym).and_then(|a| static_type(&a.expr, ad, depth + 1))
        }
        Expr::Attr { .. } | Expr::Select(..) | Expr::Index(..) => None,
        Expr::Unary(UnOp::Not, _) => Some(Ty::Bool),
        Expr::Unary(_, x) => static_type(x, ad, depth + 1).filter(|t| *t == Ty::Number),
        Expr::Binary(op, _) => Some(match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Mod | BinOp::Shl | BinOp::Shr | BinOp::UShr => {
                Ty::Number
            }
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor => return None,
            _ => Ty::Bool,
        }),
        Expr::Cond(b) => {
            let (x, y) = (static_type(&b.1, ad, depth + 1)?, static_type(&b.2, ad, depth + 1)?);
            (x == y).then_some(x)
        }
        Expr::Call(c) => {
            use Func::*;
            match c.func {
                Member | IdenticalMember | Regexp | RegexpMember | StringListMember | StringListIMember
                | IsUndefined | IsError | IsString | IsInteger | IsReal | IsBoolean | IsList | IsClassAd
                | AnyCompare | AllCompare => Some(Ty::Bool),
                Int | Real | Floor | Ceiling | Round | Pow | Size | Sum | Avg | Min | Max | StringListSize
                | StringListSum | StringListAvg | StringListMin | StringListMax | Time | Strcmp | Stricmp => {
                    Some(Ty::Number)
                }
                String | Strcat | Substr | ToUpper | ToLower => Some(Ty::Str),
                Bool => Some(Ty::Bool),
                IfThenElse => {
                    let (x, y) =
                        (static_type(c.args.get(1)?, ad, depth + 1)?, static_type(c.args.get(2)?, ad, depth + 1)?);
                    (x == y).then_some(x)
                }
                Unknown => None,
            }
        }
        Expr::List(_) => Some(Ty::List),
        Expr::Ad(_) => Some(Ty::Ad),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(src: &str) -> Vec<String> {
        check(src).iter().map(|d| d.to_string()).collect()
    }

    #[test]
    fn a_clean_gpgpu_jdl_has_no_problems() {
        let src = "[ Executable = \"x\"; GPGPUPerNode = 2; VirtualGPGPUPerNode = 1; VirtualGPGPUMethod = \"rcuda\";\n\
                   Requirements = other.GPGPUFreeInstances >= GPGPUPerNode ]";
        assert_eq!(msgs(src), Vec::<String>::new());
    }

    #[test]
    fn every_problem_is_reported_with_its_position() {
        let src =
            "[\n Requirements = \"yes\";\n GPGPUPerNode = -1;\n VirtualGPGPUType = \"VMware\";\n Rank = nope(1)\n]";
        assert_eq!(
            msgs(src),
            vec![
                "2:2: error: Requirements must be boolean-valued, but it is a string",
                "3:2: error: GPGPUPerNode must be a positive integer, but it is -1 (integer)",
                "4:2: error: unknown VirtualGPGPUType \"VMware\" (string): known methods are rCUDA, VCL",
                "5:9: warning: unknown function 'nope' (the call evaluates to error)",
            ]
        );
    }

    #[test]
    fn requirements_types_are_inferred_through_own_attributes() {
        assert_eq!(msgs("[ N = 3; Requirements = N ]").len(), 1);
        assert_eq!(msgs("[ N = 3; Requirements = N > 2 ]").len(), 0);
        assert_eq!(msgs("[ Requirements = other.Flag ]").len(), 0);
        assert_eq!(msgs("[ Requirements = ifThenElse(x, true, 1) ]").len(), 0);
        assert_eq!(msgs("[ Requirements = {true} ]").len(), 1);
    }

    #[test]
    fn gpgpu_counts_may_be_expressions() {
        assert_eq!(msgs("[ N = 2; GPGPUPerNode = N * 2 ]").len(), 0);
        assert_eq!(msgs("[ GPGPUPerNode = 1.5 ]").len(), 1);
        assert_eq!(
            msgs("[ RequestGPUs = 2; GPGPUPerNode = 2; gpus_minimum_capability = 7.5; gpus_minimum_memory = 16000 ]")
                .len(),
            0
        );
        assert_eq!(msgs("[ RequestGPUs = 0 ]").len(), 1);
        assert_eq!(msgs("[ RequestGPUs = 2; GPGPUPerNode = 3 ]").len(), 1);
        assert_eq!(msgs("[ gpus_minimum_capability = \"seven\" ]").len(), 1);
        assert_eq!(msgs("[ gpus_minimum_memory = -1 ]").len(), 1);
        assert_eq!(msgs("[ GPGPUPerNode = other.x ]").len(), 1);
    }
}
