//! Random well-typed ClassAd expressions, from a seeded PRNG (SplitMix64), so
//! a failing seed reproduces. Scoped batches also reference attributes of an
//! ad in scope (MY) and of a target ad, with `my.`, `other.`, `target.` and
//! unqualified names, cycles and missing attributes included.

use std::cell::Cell;

thread_local! {
    /// Which attribute names leaves may use: 0 none, 1 MY and TARGET (eval), 2 matchmaking.
    static SCOPED: Cell<u8> = const { Cell::new(0) };
}

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Ty {
    Int,
    Real,
    Bool,
    Str,
    List,
}

const STRS: &[&str] = &[
    "\"\"",
    "\"a\"",
    "\"A\"",
    "\"abc\"",
    "\"ABC\"",
    "\"Nvidia\"",
    "\"NVIDIA\"",
    "\"nvidia-kepler\"",
    "\"a,b c\"",
    "\"1,2,3\"",
    "\"2.5,1\"",
    "\"x\\ty\"",
    "\"q\\\"q\"",
    "\"12\"",
    "\"3.5\"",
    "\"true\"",
    "\"gpgpu\"",
    "\"ce-gpgpu\"",
];
const PATTERNS: &[&str] =
    &["\"a\"", "\"^a\"", "\"c$\"", "\"a.c\"", "\"[0-9]+\"", "\"^[a-z]*$\"", "\"gpgpu$\"", "\"b|c\"", "\"A\""];
const OPTS: &[&str] = &["\"i\"", "\"\"", "\"m\"", "\"s\"", "\"is\""];

/// Generates an expression of type `ty`, at most `depth` levels deep.
pub fn expr(r: &mut Rng, ty: Ty, depth: u32) -> String {
    // Undefined and error sneak in everywhere, for the three-valued cases.
    if depth > 0 && r.chance(6) {
        return r.pick(&["undefined", "error", "x", "1/0", "\"s\" + 1", "[a=1].b", "{1}[3]", "int(\"z\")"]).to_string();
    }
    if depth == 0 || r.chance(20) {
        return leaf(r, ty);
    }
    let d = depth - 1;
    match ty {
        Ty::Int => int_expr(r, d),
        Ty::Real => real_expr(r, d),
        Ty::Bool => bool_expr(r, d),
        Ty::Str => str_expr(r, d),
        Ty::List => list_expr(r, d),
    }
}

fn attr_leaf(r: &mut Rng, ty: Ty, mode: u8) -> String {
    let names: &[&str] = match (mode, ty) {
        (1, Ty::Int) => &["i1", "my.i1", "d1", "other.ti", "target.ti", "other.back", "c1", "zz", "other.zz"],
        (1, Ty::Real) => &["r1", "MY.r1", "other.tr"],
        (1, Ty::Bool) => &["b1", "other.tb", "TARGET.tb"],
        (1, Ty::Str) => &["s1", "other.ts", "my.s1", "nested.s"],
        (1, Ty::List) => &["l1", "other.tl"],
        // Matchmaking: unqualified names only for the request's own attributes (or none at all),
        // so that cder's unqualified-name fallback and classad2's ClassAd.matches agree.
        (_, Ty::Int) => &["MinMem", "other.Mem", "other.Cores", "TARGET.Mem", "zz", "other.zz"],
        (_, Ty::Real) => &["Weight", "other.Clock"],
        (_, Ty::Bool) => &["WantEcc", "other.Ecc"],
        (_, Ty::Str) => &["Vendor", "other.Vendor", "other.Model"],
        (_, Ty::List) => &["Tags", "other.Tags"],
    };
    r.pick(names).to_string()
}

fn leaf(r: &mut Rng, ty: Ty) -> String {
    let mode = SCOPED.with(|c| c.get());
    if mode > 0 && r.chance(40) {
        return attr_leaf(r, ty, mode);
    }
    match ty {
        Ty::Int => {
            let v: i64 = match r.below(10) {
                0 => 0,
                1 => -(r.below(50) as i64),
                2 => 2147483647,
                3 => (r.below(1 << 40)) as i64,
                _ => r.below(20) as i64,
            };
            v.to_string()
        }
        Ty::Real => r
            .pick(&["0.5", "2.5", "1.0", "0.0", "-2.25", "1e3", "3.75e-2", "100.125", "1.5E2", ".5", "-0.5", "7.0"])
            .to_string(),
        Ty::Bool => r.pick(&["true", "false", "TRUE", "False"]).to_string(),
        Ty::Str => r.pick(STRS).to_string(),
        Ty::List => r
            .pick(&["{}", "{1,2,3}", "{1,2.5}", "{\"a\",\"B\"}", "{true,1}", "{undefined,2}", "{0.5,-1,3}"])
            .to_string(),
    }
}

fn any(r: &mut Rng) -> Ty {
    [Ty::Int, Ty::Real, Ty::Bool, Ty::Str, Ty::List][r.below(5) as usize]
}

fn num(r: &mut Rng) -> Ty {
    if r.chance(60) {
        Ty::Int
    } else {
        Ty::Real
    }
}

fn int_expr(r: &mut Rng, d: u32) -> String {
    match r.below(26) {
        0..=4 => {
            let op = r.pick(&["+", "-", "*", "/", "%"]);
            format!("({} {op} {})", expr(r, Ty::Int, d), expr(r, Ty::Int, d))
        }
        5 => format!("-{}", expr(r, Ty::Int, d)),
        6 => format!("int({})", {
            let t = r.pick_ty(&[Ty::Real, Ty::Int, Ty::Bool, Ty::Str]);
            expr(r, t, d)
        }),
        7 => format!("{}({})", r.pick(&["floor", "ceiling", "round"]), expr(r, Ty::Real, d)),
        8 => format!("size({})", {
            let t = r.pick_ty(&[Ty::Str, Ty::List]);
            expr(r, t, d)
        }),
        9 => format!("stringListSize({})", expr(r, Ty::Str, d)),
        10 => format!("sum({})", int_list(r, d)),
        11 => format!("{}({})", r.pick(&["min", "max"]), int_list(r, d)),
        12 => format!("ifThenElse({}, {}, {})", expr(r, Ty::Bool, d), expr(r, Ty::Int, d), expr(r, Ty::Int, d)),
        13 => format!("({} ? {} : {})", expr(r, Ty::Bool, d), expr(r, Ty::Int, d), expr(r, Ty::Int, d)),
        14 => format!("{}[{}]", int_list(r, d), r.below(4)),
        15 => format!("pow({}, {})", expr(r, Ty::Int, d), r.below(5)),
        16 => {
            let op = r.pick(&["&", "|", "^"]);
            format!("({} {op} {})", expr(r, Ty::Int, d), expr(r, Ty::Int, d))
        }
        17 => format!("({} {} {})", expr(r, Ty::Int, d), r.pick(&["<<", ">>", ">>>"]), r.below(8)),
        18 => format!("[a = {}; b = a {} {}].b", expr(r, Ty::Int, d), r.pick(&["+", "*", "-"]), expr(r, Ty::Int, d)),
        19 => format!("{}({}, {})", r.pick(&["strcmp", "stricmp"]), expr(r, Ty::Str, d), expr(r, Ty::Str, d)),
        20 => format!("stringListSum(\"{}\")", r.pick(&["1,2,3", "4 5", "", "7"])),
        21 => format!("~{}", expr(r, Ty::Int, d)),
        22 => format!("{}[{}]", int_list(r, d), r.below(6) as i64 - 1),
        23 => format!("size({{[a = {}], [a = {}], [b = 1]}}.a)", expr(r, Ty::Int, d), expr(r, Ty::Str, d)),
        24 => format!("sum({{[a = {}], [a = {}]}}.a)", expr(r, Ty::Int, d), expr(r, Ty::Int, d)),
        _ => format!("[p = {}; q = [r = parent.p * 2; s = p + 1]].q.{}", expr(r, Ty::Int, d), r.pick(&["r", "s"])),
    }
}

fn int_list(r: &mut Rng, d: u32) -> String {
    let n = r.below(4);
    let items: Vec<String> = (0..n).map(|_| expr(r, Ty::Int, d)).collect();
    format!("{{{}}}", items.join(", "))
}

fn real_expr(r: &mut Rng, d: u32) -> String {
    match r.below(12) {
        0..=4 => {
            let op = r.pick(&["+", "-", "*", "/"]);
            let (a, b) = if r.chance(50) { (Ty::Real, num(r)) } else { (num(r), Ty::Real) };
            format!("({} {op} {})", expr(r, a, d), expr(r, b, d))
        }
        5 => format!("real({})", {
            let t = r.pick_ty(&[Ty::Int, Ty::Real, Ty::Bool, Ty::Str]);
            expr(r, t, d)
        }),
        6 => format!("-{}", expr(r, Ty::Real, d)),
        7 => format!("pow({}, {})", expr(r, Ty::Real, d), r.below(4)),
        8 => format!("avg({})", int_list(r, d)),
        9 => {
            let n = r.below(3) + 1;
            let items: Vec<String> = (0..n).map(|_| expr(r, Ty::Real, d)).collect();
            format!("{}({{{}}})", r.pick(&["sum", "min", "max", "avg"]), items.join(", "))
        }
        10 => format!("ifThenElse({}, {}, {})", expr(r, Ty::Bool, d), expr(r, Ty::Real, d), expr(r, Ty::Real, d)),
        _ => format!("{{{}, 1}}[0]", expr(r, Ty::Real, d)),
    }
}

fn bool_expr(r: &mut Rng, d: u32) -> String {
    match r.below(22) {
        0..=3 => {
            let op = r.pick(&["&&", "||"]);
            format!("({} {op} {})", expr(r, Ty::Bool, d), expr(r, Ty::Bool, d))
        }
        4 => format!("!{}", expr(r, Ty::Bool, d)),
        5..=7 => {
            let t = num(r);
            let u = num(r);
            let op = r.pick(&["==", "!=", "<", "<=", ">", ">="]);
            format!("({} {op} {})", expr(r, t, d), expr(r, u, d))
        }
        8 => {
            let op = r.pick(&["==", "!=", "<", "<=", ">", ">="]);
            format!("({} {op} {})", expr(r, Ty::Str, d), expr(r, Ty::Str, d))
        }
        9 => {
            let t = any(r);
            let t = if t == Ty::List { Ty::Int } else { t };
            let u = if r.chance(70) { t } else { num(r) };
            let op = r.pick(&["=?=", "=!=", "is", "isnt"]);
            format!("({} {op} {})", expr(r, t, d), expr(r, u, d))
        }
        10 => {
            let f = r.pick(&["member", "identicalMember"]);
            if r.chance(50) {
                format!("{f}({}, {})", expr(r, Ty::Int, d), int_list(r, d))
            } else {
                let n = r.below(3);
                let items: Vec<String> = (0..n).map(|_| expr(r, Ty::Str, d)).collect();
                format!("{f}({}, {{{}}})", expr(r, Ty::Str, d), items.join(", "))
            }
        }
        11 => {
            if r.chance(50) {
                format!("regexp({}, {})", r.pick(PATTERNS), expr(r, Ty::Str, d))
            } else {
                format!("regexp({}, {}, {})", r.pick(PATTERNS), expr(r, Ty::Str, d), r.pick(OPTS))
            }
        }
        12 => {
            let n = r.below(3);
            let items: Vec<String> = (0..n).map(|_| expr(r, Ty::Str, d)).collect();
            format!("regexpMember({}, {{{}}})", r.pick(PATTERNS), items.join(", "))
        }
        13 => format!(
            "{}({}, {})",
            r.pick(&["stringListMember", "stringListIMember"]),
            expr(r, Ty::Str, d),
            r.pick(&["\"a,b,c\"", "\"A B\"", "\"x\"", "\"\"", "\"nvidia,amd\""])
        ),
        14 => format!(
            "{}({}, {}, {})",
            r.pick(&["anyCompare", "allCompare"]),
            r.pick(&["\"<\"", "\"<=\"", "\"==\"", "\"!=\"", "\">\"", "\">=\"", "\"is\"", "\"isnt\""]),
            int_list(r, d),
            expr(r, Ty::Int, d)
        ),
        15 => format!(
            "{}({})",
            r.pick(&["isUndefined", "isError", "isString", "isInteger", "isReal", "isBoolean", "isList", "isClassAd"]),
            {
                let t = any(r);
                expr(r, t, d)
            }
        ),
        16 => format!("bool({})", {
            let t = r.pick_ty(&[Ty::Int, Ty::Real, Ty::Str, Ty::Bool]);
            expr(r, t, d)
        }),
        17 => format!("({} ? {} : {})", expr(r, Ty::Bool, d), expr(r, Ty::Bool, d), expr(r, Ty::Bool, d)),
        18 => format!("[a = {}; b = !a].b", expr(r, Ty::Bool, d)),
        19 => format!("({} && {} || {})", expr(r, Ty::Bool, d), expr(r, Ty::Bool, d), expr(r, Ty::Bool, d)),
        20 => format!(
            "member({}, {{[a = {}], [a = {}]}}.a)",
            expr(r, Ty::Int, d),
            expr(r, Ty::Int, d),
            expr(r, Ty::Int, d)
        ),
        _ => {
            let op = r.pick(&["is", "isnt", "==", "!=", "=?=", "=!="]);
            format!("({} {op} {})", expr(r, Ty::Str, d), expr(r, Ty::Str, d))
        }
    }
}

fn str_expr(r: &mut Rng, d: u32) -> String {
    match r.below(11) {
        0 | 1 => {
            let n = r.below(3) + 1;
            let items: Vec<String> = (0..n)
                .map(|_| {
                    let t = if r.chance(70) { Ty::Str } else { r.pick_ty(&[Ty::Int, Ty::Real, Ty::Bool]) };
                    expr(r, t, d)
                })
                .collect();
            format!("strcat({})", items.join(", "))
        }
        2 => {
            let off = r.below(9) as i64 - 3;
            if r.chance(50) {
                format!("substr({}, {off})", expr(r, Ty::Str, d))
            } else {
                format!("substr({}, {off}, {})", expr(r, Ty::Str, d), r.below(7) as i64 - 2)
            }
        }
        3 => format!("{}({})", r.pick(&["toUpper", "toLower"]), expr(r, Ty::Str, d)),
        4 => format!("string({})", {
            let t = r.pick_ty(&[Ty::Int, Ty::Real, Ty::Bool, Ty::Str]);
            expr(r, t, d)
        }),
        5 => format!("ifThenElse({}, {}, {})", expr(r, Ty::Bool, d), expr(r, Ty::Str, d), expr(r, Ty::Str, d)),
        6 => format!("({} ? {} : {})", expr(r, Ty::Bool, d), expr(r, Ty::Str, d), expr(r, Ty::Str, d)),
        7 => format!("[s = {}; t = toUpper(s)].t", expr(r, Ty::Str, d)),
        8 => leaf(r, Ty::Str),
        // string() of a list prints it; literal elements only (HTCondor prints unevaluated elements).
        9 => {
            let n = r.below(4);
            let items: Vec<String> = (0..n)
                .map(|_| {
                    let t = any(r);
                    literal(r, t)
                })
                .collect();
            format!("string({{{}}})", items.join(", "))
        }
        _ => format!("[s = {}; n = [t = strcat(parent.s, \"x\")]].n.t", expr(r, Ty::Str, d)),
    }
}

fn list_expr(r: &mut Rng, d: u32) -> String {
    let n = r.below(4);
    let t = if r.chance(50) { Ty::Int } else { any(r) };
    let items: Vec<String> = (0..n).map(|_| expr(r, if t == Ty::List { Ty::Int } else { t }, d)).collect();
    format!("{{{}}}", items.join(", "))
}

impl Rng {
    pub fn pick_ty(&mut self, xs: &[Ty]) -> Ty {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// `n` expressions of random types.
pub fn batch(seed: u64, n: usize, depth: u32) -> Vec<String> {
    let mut r = Rng::new(seed);
    (0..n)
        .map(|_| {
            let ty = any(&mut r);
            let dep = 1 + r.below(depth as u64) as u32;
            expr(&mut r, ty, dep)
        })
        .collect()
}

fn literal(r: &mut Rng, ty: Ty) -> String {
    let old = SCOPED.with(|c| c.replace(0));
    let v = leaf(r, ty);
    SCOPED.with(|c| c.set(old));
    v
}

/// `n` cases of (expression, MY ad, TARGET ad) with random attribute values.
pub fn scoped_batch(seed: u64, n: usize, depth: u32) -> Vec<(String, String, String)> {
    let mut r = Rng::new(seed);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let my = format!(
            "[ i1 = {}; r1 = {}; s1 = {}; b1 = {}; l1 = {}; d1 = i1 * 2 + 1; c1 = c1 + 1; nested = [ s = s1 ] ]",
            literal(&mut r, Ty::Int),
            literal(&mut r, Ty::Real),
            literal(&mut r, Ty::Str),
            literal(&mut r, Ty::Bool),
            literal(&mut r, Ty::List)
        );
        let target = format!(
            "[ ti = {}; tr = {}; ts = {}; tb = {}; tl = {}; back = other.i1 ]",
            literal(&mut r, Ty::Int),
            literal(&mut r, Ty::Real),
            literal(&mut r, Ty::Str),
            literal(&mut r, Ty::Bool),
            literal(&mut r, Ty::List)
        );
        SCOPED.with(|c| c.set(1));
        let ty = any(&mut r);
        let dep = 1 + r.below(depth as u64) as u32;
        let e = expr(&mut r, ty, dep);
        SCOPED.with(|c| c.set(0));
        out.push((e, my, target));
    }
    out
}

/// `n` (request, offer) pairs for matchmaking, explicit `other.` for the offer's attributes.
pub fn match_batch(seed: u64, n: usize, depth: u32) -> Vec<(String, String)> {
    let mut r = Rng::new(seed);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        SCOPED.with(|c| c.set(2));
        let d = 1 + r.below(depth as u64) as u32;
        let req_cond = expr(&mut r, Ty::Bool, d);
        let rank_ty = if r.chance(50) { Ty::Int } else { Ty::Real };
        let d = 1 + r.below(3) as u32;
        let rank = expr(&mut r, rank_ty, d);
        SCOPED.with(|c| c.set(0));
        let request = format!(
            "[ MinMem = {}; Weight = {}; WantEcc = {}; Vendor = {}; Tags = {}; Requirements = {req_cond}; Rank = {rank} ]",
            [256, 512, 1024, 2048][r.below(4) as usize],
            literal(&mut r, Ty::Real),
            literal(&mut r, Ty::Bool),
            r.pick(&["\"Nvidia\"", "\"AMD\"", "\"nvidia\""]),
            r.pick(&["{\"CUDA\"}", "{}", "{\"CUDA\", \"NVIDIA-KEPLER\"}"]),
        );
        let offer = format!(
            "[ Mem = {}; Cores = {}; Clock = {}; Ecc = {}; Vendor = {}; Model = {}; Tags = {}; Requirements = {} ]",
            [128, 512, 1024, 4096][r.below(4) as usize],
            r.below(4000),
            literal(&mut r, Ty::Real),
            literal(&mut r, Ty::Bool),
            r.pick(&["\"Nvidia\"", "\"AMD\"", "\"NVIDIA\"", "\"Intel\""]),
            r.pick(&["\"K80\"", "\"GTS 450\"", "\"MI50\""]),
            r.pick(&["{\"CUDA\"}", "{\"NVIDIA-KEPLER\", \"CUDA\"}", "{}"]),
            r.pick(&["true", "other.MinMem <= Mem", "other.Vendor == Vendor", "false", "other.zz"]),
        );
        out.push((request, offer));
    }
    out
}
