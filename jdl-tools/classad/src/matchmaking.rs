//! Matchmaking: Requirements and Rank of a request against offers.
//!
//! Unqualified names in a request's Requirements and Rank are looked up in the
//! request first and then in the offer (HTCondor's matchmaking rule, and how
//! the seed thesis writes `GPGPUVendor == "Nvidia"`).

use crate::ast::{ClassAd, Expr, Scope, Sym};
use crate::eval::{Ctx, Frame};
use crate::functions::{apply, precompile_regex};
use crate::ops::{binary, truth, unary, Truth};
use crate::value::Value;

/// Most nodes that inlining the request's own attributes may add.
const INLINE_BUDGET: usize = 100_000;

/// A request compiled for matching against many offers: references to the
/// request's own attributes are inlined, references to the offer resolved to
/// `TARGET` lookups, and constant sub-expressions folded.
#[derive(Clone, Debug)]
pub struct CompiledRequest {
    ad: ClassAd,
    requirements: Option<Expr>,
    rank: Option<Expr>,
}

impl CompiledRequest {
    /// Compiles `request`'s Requirements and Rank.
    pub fn new(request: &ClassAd) -> CompiledRequest {
        let mut c = Compiler { ad: request, depth: 0, visiting: Vec::new(), budget: INLINE_BUDGET };
        let requirements = request.lookup("Requirements").map(|e| c.compile(e));
        let rank = request.lookup("Rank").map(|e| c.compile(e));
        CompiledRequest { ad: request.clone(), requirements, rank }
    }

    /// The compiled Requirements (for inspection and tests).
    pub fn requirements(&self) -> Option<&Expr> {
        self.requirements.as_ref()
    }

    /// The compiled Rank.
    pub fn rank_expr(&self) -> Option<&Expr> {
        self.rank.as_ref()
    }

    /// The request ad.
    pub fn ad(&self) -> &ClassAd {
        &self.ad
    }

    /// Evaluates the request's Requirements against `offer`.
    pub fn requirements_value(&self, offer: &ClassAd) -> Value {
        match &self.requirements {
            Some(e) => Ctx::new(true).eval(e, Frame::root(Some(&self.ad), Some(offer))),
            None => Value::Undefined,
        }
    }

    /// True when the request's Requirements are true against `offer`
    /// (a request without Requirements matches nothing, as in HTCondor).
    pub fn matches(&self, offer: &ClassAd) -> bool {
        truth(&self.requirements_value(offer)) == Truth::True
    }

    /// The request's Rank of `offer`: its numeric value (booleans as 0/1), or
    /// 0 when undefined or not a number.
    pub fn rank(&self, offer: &ClassAd) -> f64 {
        match &self.rank {
            Some(e) => {
                let v = Ctx::new(true).eval(e, Frame::root(Some(&self.ad), Some(offer)));
                v.as_number().filter(|r| !r.is_nan()).unwrap_or(0.0)
            }
            None => 0.0,
        }
    }

    /// The rank when the offer matches, else None.
    pub fn match_rank(&self, offer: &ClassAd) -> Option<f64> {
        if self.matches(offer) {
            Some(self.rank(offer))
        } else {
            None
        }
    }
}

/// One-way match: `request`'s Requirements against `offer`.
pub fn matches(request: &ClassAd, offer: &ClassAd) -> bool {
    CompiledRequest::new(request).matches(offer)
}

/// Both ads' Requirements hold against each other.
///
/// ```
/// use cder_classad::{parse_classad, symmetric_match};
/// let job = parse_classad(
///     r#"[ Owner = "alice"; GPGPUPerNode = 2; Requirements = TARGET.GPGPUFree >= MY.GPGPUPerNode ]"#,
/// )
/// .unwrap();
/// let open = parse_classad(r#"[ GPGPUFree = 4; Requirements = true ]"#).unwrap();
/// let picky = parse_classad(r#"[ GPGPUFree = 4; Requirements = TARGET.Owner == "bob" ]"#).unwrap();
/// assert!(symmetric_match(&job, &open));
/// // The job would take `picky`, but `picky` does not take the job.
/// assert!(cder_classad::matches(&job, &picky));
/// assert!(!symmetric_match(&job, &picky));
/// ```
pub fn symmetric_match(a: &ClassAd, b: &ClassAd) -> bool {
    matches(a, b) && matches(b, a)
}

/// `request`'s Rank of `offer` (0 when undefined or not a number).
pub fn rank(request: &ClassAd, offer: &ClassAd) -> f64 {
    CompiledRequest::new(request).rank(offer)
}

struct Compiler<'a> {
    ad: &'a ClassAd,
    depth: u32,
    visiting: Vec<Sym>,
    budget: usize,
}

fn lit(e: &Expr) -> Option<&Value> {
    match e {
        Expr::Lit(v) => Some(v),
        _ => None,
    }
}

impl Compiler<'_> {
    fn own_attr(&mut self, sym: Sym, e: &Expr) -> Option<Expr> {
        let a = self.ad.get_sym(sym)?;
        if self.visiting.contains(&sym) {
            // A cycle through the request's own attributes.
            return Some(Expr::Lit(Value::Error));
        }
        if self.budget == 0 || self.depth > 64 {
            // Too much to inline: leave the reference to the evaluator, which has its own bounds.
            return Some(e.clone());
        }
        self.budget -= 1;
        self.visiting.push(sym);
        self.depth += 1;
        let c = self.compile(&a.expr);
        self.depth -= 1;
        self.visiting.pop();
        Some(c)
    }

    fn compile(&mut self, e: &Expr) -> Expr {
        match e {
            Expr::Lit(_) | Expr::Ad(_) => e.clone(),
            Expr::Attr { scope, sym, name } => match scope {
                Scope::Plain => self.own_attr(*sym, e).unwrap_or_else(|| Expr::Attr {
                    scope: Scope::Target,
                    sym: *sym,
                    name: name.clone(),
                }),
                Scope::My => self.own_attr(*sym, e).unwrap_or(Expr::Lit(Value::Undefined)),
                Scope::Target => e.clone(),
                Scope::Parent => Expr::Lit(Value::Undefined),
            },
            Expr::Select(b, sym, name) => Expr::Select(Box::new(self.compile(b)), *sym, name.clone()),
            Expr::Index(b) => {
                let (x, i) = (self.compile(&b.0), self.compile(&b.1));
                if let (Some(Value::List(_) | Value::Undefined | Value::Error), Some(_)) = (lit(&x), lit(&i)) {
                    return Expr::Lit(eval_const(&Expr::Index(Box::new((x, i)))));
                }
                Expr::Index(Box::new((x, i)))
            }
            Expr::Unary(op, x) => {
                let x = self.compile(x);
                match lit(&x) {
                    Some(v) => Expr::Lit(unary(*op, v)),
                    None => Expr::Unary(*op, Box::new(x)),
                }
            }
            Expr::Binary(op, b) => {
                let l = self.compile(&b.0);
                let r = self.compile(&b.1);
                if let (Some(lv), Some(rv)) = (lit(&l), lit(&r)) {
                    return Expr::Lit(binary(*op, lv, rv));
                }
                // Short-circuits decided by a constant left side.
                if let Some(lv) = lit(&l) {
                    let t = truth(lv);
                    match op {
                        crate::ast::BinOp::And if t == Truth::False => return Expr::Lit(Value::Bool(false)),
                        crate::ast::BinOp::And | crate::ast::BinOp::Or if t == Truth::Error => {
                            return Expr::Lit(Value::Error)
                        }
                        crate::ast::BinOp::Or if t == Truth::True => return Expr::Lit(Value::Bool(true)),
                        _ => {}
                    }
                }
                Expr::Binary(*op, Box::new((l, r)))
            }
            Expr::Cond(b) => {
                let c = self.compile(&b.0);
                if let Some(cv) = lit(&c) {
                    return match truth(cv) {
                        Truth::True => self.compile(&b.1),
                        Truth::False => self.compile(&b.2),
                        Truth::Undefined => Expr::Lit(Value::Undefined),
                        Truth::Error => Expr::Lit(Value::Error),
                    };
                }
                Expr::Cond(Box::new((c, self.compile(&b.1), self.compile(&b.2))))
            }
            Expr::Call(call) => {
                let mut c = (**call).clone();
                c.args = call.args.iter().map(|a| self.compile(a)).collect();
                if c.regex.is_none() {
                    precompile_regex(&mut c);
                }
                let (lo, hi) = c.func.arity();
                if c.func.is_pure()
                    && c.args.len() >= lo
                    && c.args.len() <= hi
                    && c.args.iter().all(|a| lit(a).is_some())
                {
                    let vals: Vec<Value> = c.args.iter().filter_map(|a| lit(a).cloned()).collect();
                    return Expr::Lit(apply(&c, &vals));
                }
                Expr::Call(Box::new(c))
            }
            Expr::List(items) => {
                let items: Vec<Expr> = items.iter().map(|a| self.compile(a)).collect();
                if items.iter().all(|a| lit(a).is_some()) {
                    let vals: Vec<Value> = items.iter().filter_map(|a| lit(a).cloned()).collect();
                    return Expr::Lit(Value::List(vals.into()));
                }
                Expr::List(items)
            }
        }
    }
}

fn eval_const(e: &Expr) -> Value {
    Ctx::new(false).eval(e, Frame::root(None, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::parse_classad;

    #[test]
    fn compiling_inlines_own_attributes_and_folds_constants() {
        let req = parse_classad(
            "[ MinMem = 256 * 2; Vendor = toLower(\"NVIDIA\"); \
               Requirements = GPGPUVendor == Vendor && GPGPUMainMemorySize >= MinMem && regexp(\"^K\", GPGPUModel) ]",
        )
        .unwrap();
        let c = CompiledRequest::new(&req);
        assert_eq!(
            c.requirements().unwrap().to_string(),
            "TARGET.GPGPUVendor == \"nvidia\" && TARGET.GPGPUMainMemorySize >= 512 && regexp(\"^K\",TARGET.GPGPUModel)"
        );
        let yes =
            parse_classad("[ GPGPUVendor = \"Nvidia\"; GPGPUMainMemorySize = 512; GPGPUModel = \"K80\" ]").unwrap();
        let no =
            parse_classad("[ GPGPUVendor = \"Nvidia\"; GPGPUMainMemorySize = 512; GPGPUModel = \"P100\" ]").unwrap();
        assert!(c.matches(&yes));
        assert!(!c.matches(&no));
    }

    #[test]
    fn rank_is_numeric_or_zero() {
        let offer = parse_classad("[ Mem = 2048; Name = \"x\"; Requirements = true ]").unwrap();
        for (rank, want) in [("Mem / 1024", 2.0), ("Name", 0.0), ("Missing", 0.0), ("true", 1.0), ("0.0 / 0", 0.0)] {
            let req = parse_classad(&format!("[ Requirements = true; Rank = {rank} ]")).unwrap();
            assert_eq!(rank_of(&req, &offer), want, "{rank}");
        }
    }

    fn rank_of(req: &ClassAd, offer: &ClassAd) -> f64 {
        rank(req, offer)
    }

    #[test]
    fn requests_without_requirements_and_symmetric_matching() {
        let offer = parse_classad("[ Cpus = 4; Requirements = other.Owner == \"alice\" ]").unwrap();
        let alice = parse_classad("[ Owner = \"alice\"; Requirements = Cpus >= 2 ]").unwrap();
        let bob = parse_classad("[ Owner = \"bob\"; Requirements = Cpus >= 2 ]").unwrap();
        let none = parse_classad("[ Owner = \"alice\" ]").unwrap();
        assert!(symmetric_match(&alice, &offer));
        assert!(matches(&bob, &offer));
        assert!(!symmetric_match(&bob, &offer));
        assert!(!matches(&none, &offer));
    }

    #[test]
    fn compiled_requests_and_ads_can_be_shared_across_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<CompiledRequest>();
        shared::<ClassAd>();
        shared::<Value>();
    }

    #[test]
    fn self_referencing_requests_compile_to_error() {
        let req = parse_classad("[ A = B; B = A; Requirements = A ]").unwrap();
        let c = CompiledRequest::new(&req);
        assert!(matches!(c.requirements(), Some(Expr::Lit(Value::Error))));
        assert!(!c.matches(&ClassAd::new()));
    }
}
