//! Built-in functions, with HTCondor's behaviour on undefined, error and
//! mistyped arguments.

use std::sync::Arc;

pub use crate::ast::Func;
use crate::ast::{BinOp, Call, Value};
use crate::literal::real_to_string;
use crate::ops::{binary, str_icmp, truth, Truth};

/// Builds the regex for `regexp` options: i (ignore case), m (multi-line),
/// s (dot matches newline), x (extended); other letters are ignored, as in HTCondor.
/// Patterns match bytes, not characters, as HTCondor's PCRE (no UTF mode) does.
pub fn build_regex(pattern: &str, options: &str) -> Option<regex::bytes::Regex> {
    let mut b = regex::bytes::RegexBuilder::new(pattern);
    b.unicode(false);
    for c in options.chars() {
        match c {
            'i' => {
                b.case_insensitive(true);
            }
            'm' => {
                b.multi_line(true);
            }
            's' => {
                b.dot_matches_new_line(true);
            }
            'x' => {
                b.ignore_whitespace(true);
            }
            _ => {}
        }
    }
    b.size_limit(1 << 20).build().ok()
}

/// Compiles a constant pattern once, at parse time.
pub fn precompile_regex(call: &mut Call) {
    if !matches!(call.func, Func::Regexp | Func::RegexpMember) || call.args.len() < 2 || call.args.len() > 3 {
        return;
    }
    let pat = match &call.args[0] {
        crate::ast::Expr::Lit(Value::Str(s)) => s.clone(),
        _ => return,
    };
    let opts: Arc<str> = match call.args.get(2) {
        None => Arc::from(""),
        Some(crate::ast::Expr::Lit(Value::Str(s))) => s.clone(),
        Some(_) => return,
    };
    call.regex = build_regex(&pat, &opts).map(Arc::new);
}

fn b(x: bool) -> Value {
    Value::Bool(x)
}

/// Applies a function to evaluated arguments.
pub(crate) fn apply(c: &Call, a: &[Value]) -> Value {
    use Func::*;
    match c.func {
        IsUndefined => b(matches!(a[0], Value::Undefined)),
        IsError => b(matches!(a[0], Value::Error)),
        IsString => b(matches!(a[0], Value::Str(_))),
        IsInteger => b(matches!(a[0], Value::Int(_))),
        IsReal => b(matches!(a[0], Value::Real(_))),
        IsBoolean => b(matches!(a[0], Value::Bool(_))),
        IsList => b(matches!(a[0], Value::List(_))),
        IsClassAd => b(matches!(a[0], Value::Ad(_))),
        Member | IdenticalMember => member(c.func == IdenticalMember, &a[0], &a[1]),
        Regexp => regexp(c, a),
        RegexpMember => regexp_member(c, a),
        StringListMember | StringListIMember => string_list_member(c.func == StringListIMember, a),
        StringListSize | StringListSum | StringListAvg | StringListMin | StringListMax => string_list_num(c.func, a),
        Int => to_int(&a[0], false),
        Real => to_real(&a[0]),
        String => to_string(&a[0]).map_or_else(|e| e, |s| Value::Str(s.into())),
        Bool => to_bool(&a[0]),
        Floor | Ceiling | Round => rounding(c.func, &a[0]),
        Pow => pow(&a[0], &a[1]),
        Strcat => {
            let mut out = std::string::String::new();
            for v in a {
                match to_string(v) {
                    Ok(s) => out.push_str(&s),
                    Err(e) => return e,
                }
            }
            Value::Str(out.into())
        }
        Substr => substr(a),
        ToUpper | ToLower => match &a[0] {
            Value::Undefined => Value::Undefined,
            Value::Error => Value::Error,
            v => match to_string(v) {
                Ok(s) => {
                    Value::Str(if c.func == ToUpper { s.to_ascii_uppercase() } else { s.to_ascii_lowercase() }.into())
                }
                Err(e) => e,
            },
        },
        Size => match &a[0] {
            Value::Str(s) => Value::Int(s.len() as i64),
            Value::List(l) => Value::Int(l.len() as i64),
            Value::Ad(n) => Value::Int(n.ad.len() as i64),
            Value::Undefined => Value::Undefined,
            _ => Value::Error,
        },
        Strcmp | Stricmp => match (&a[0], &a[1]) {
            (Value::Undefined, _) | (_, Value::Undefined) => Value::Undefined,
            (Value::Error, _) | (_, Value::Error) => Value::Error,
            (x, y) => match (to_string(x), to_string(y)) {
                (Ok(x), Ok(y)) => {
                    let o = if c.func == Strcmp { x.cmp(&y) } else { str_icmp(&x, &y) };
                    Value::Int(o as i64)
                }
                _ => Value::Error,
            },
        },
        Sum | Avg | Min | Max => list_num(c.func, &a[0]),
        AnyCompare | AllCompare => compare_list(c.func == AllCompare, a),
        Time => Value::Int(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0),
        ),
        IfThenElse => match truth(&a[0]) {
            Truth::True => a[1].clone(),
            Truth::False => a[2].clone(),
            Truth::Undefined => Value::Undefined,
            Truth::Error => Value::Error,
        },
        Unknown => Value::Error,
    }
}

fn member(identical: bool, x: &Value, list: &Value) -> Value {
    let l = match list {
        Value::List(l) => l,
        Value::Undefined => return Value::Undefined,
        _ => return Value::Error,
    };
    match x {
        Value::Undefined | Value::Error if identical => {}
        Value::Undefined => return Value::Undefined,
        Value::Error | Value::List(_) | Value::Ad(_) => return Value::Error,
        _ => {}
    }
    for e in l.iter() {
        let hit =
            if identical { x.identical(e) == Some(true) } else { matches!(binary(BinOp::Eq, x, e), Value::Bool(true)) };
        if hit {
            return b(true);
        }
    }
    b(false)
}

fn regex_for(c: &Call, pat: &str, opts: &str) -> Option<Arc<regex::bytes::Regex>> {
    match &c.regex {
        Some(r) => Some(r.clone()),
        None => build_regex(pat, opts).map(Arc::new),
    }
}

fn regex_args(a: &[Value]) -> Result<(&str, &str), Value> {
    let opts: &str = match a.get(2) {
        None => "",
        Some(Value::Str(s)) => s,
        Some(Value::Undefined) => return Err(Value::Undefined),
        Some(_) => return Err(Value::Error),
    };
    match &a[0] {
        Value::Str(p) => Ok((p, opts)),
        Value::Undefined => Err(Value::Undefined),
        _ => Err(Value::Error),
    }
}

fn regexp(c: &Call, a: &[Value]) -> Value {
    let (pat, opts) = match regex_args(a) {
        Ok(x) => x,
        Err(e) => {
            if matches!(e, Value::Undefined) && !matches!(a[1], Value::Undefined | Value::Str(_)) {
                return Value::Error;
            }
            return e;
        }
    };
    let target = match &a[1] {
        Value::Str(s) => s,
        Value::Undefined => return Value::Undefined,
        _ => return Value::Error,
    };
    match regex_for(c, pat, opts) {
        Some(re) => b(re.is_match(target.as_bytes())),
        None => Value::Error,
    }
}

fn regexp_member(c: &Call, a: &[Value]) -> Value {
    let (pat, opts) = match regex_args(a) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let l = match &a[1] {
        Value::List(l) => l,
        Value::Undefined => return Value::Undefined,
        _ => return Value::Error,
    };
    let Some(re) = regex_for(c, pat, opts) else {
        return Value::Error;
    };
    let mut undefined = false;
    for e in l.iter() {
        match e {
            Value::Str(s) => {
                if re.is_match(s.as_bytes()) {
                    return b(true);
                }
            }
            Value::Undefined => undefined = true,
            _ => return Value::Error,
        }
    }
    if undefined {
        Value::Undefined
    } else {
        b(false)
    }
}

/// Splits a string list on any of the delimiter characters; items are
/// trimmed of white space and empty ones dropped (HTCondor's StringList).
fn split_list<'a>(s: &'a str, delims: &'a str) -> impl Iterator<Item = &'a str> {
    s.split(move |c: char| delims.contains(c)).map(|t| t.trim()).filter(|t| !t.is_empty())
}

fn delims(a: &[Value], i: usize) -> Result<&str, Value> {
    match a.get(i) {
        None | Some(Value::Undefined) => Ok(" ,"),
        Some(Value::Str(s)) => Ok(s),
        Some(_) => Err(Value::Error),
    }
}

fn string_list_member(ignore_case: bool, a: &[Value]) -> Value {
    let d = match delims(a, 2) {
        Ok(d) => d,
        Err(e) => return e,
    };
    match (&a[0], &a[1]) {
        (Value::Str(x), Value::Str(l)) => {
            b(split_list(l, d).any(|t| if ignore_case { t.eq_ignore_ascii_case(x) } else { t == &**x }))
        }
        // HTCondor answers false, not undefined, when either side is undefined.
        (Value::Undefined, Value::Str(_) | Value::Undefined) | (Value::Str(_), Value::Undefined) => b(false),
        _ => Value::Error,
    }
}

enum N {
    I(i64),
    R(f64),
}

fn parse_num(t: &str) -> Option<N> {
    let t = t.trim();
    if let Ok(i) = t.parse::<i64>() {
        return Some(N::I(i));
    }
    t.parse::<f64>().ok().filter(|_| t.bytes().all(|c| c.is_ascii_digit() || b"+-.eE".contains(&c))).map(N::R)
}

fn string_list_num(func: Func, a: &[Value]) -> Value {
    let d = match delims(a, 1) {
        Ok(d) => d,
        Err(e) => return e,
    };
    let s = match &a[0] {
        Value::Str(s) => s,
        _ => return Value::Error,
    };
    if func == Func::StringListSize {
        return Value::Int(split_list(s, d).count() as i64);
    }
    let mut nums = Vec::new();
    for t in split_list(s, d) {
        match parse_num(t) {
            Some(n) => nums.push(n),
            None => return Value::Error,
        }
    }
    let any_real = nums.iter().any(|n| matches!(n, N::R(_)));
    let f = |n: &N| match n {
        N::I(i) => *i as f64,
        N::R(r) => *r,
    };
    match func {
        Func::StringListSum | Func::StringListAvg => {
            if nums.is_empty() {
                return Value::Real(0.0);
            }
            if any_real {
                let s: f64 = nums.iter().map(f).sum();
                if func == Func::StringListAvg {
                    Value::Real(s / nums.len() as f64)
                } else {
                    Value::Real(s)
                }
            } else {
                let s = nums.iter().fold(0i64, |acc, n| acc.wrapping_add(if let N::I(i) = n { *i } else { 0 }));
                if func == Func::StringListAvg {
                    // HTCondor divides integers as integers here.
                    Value::Int(s / nums.len() as i64)
                } else {
                    Value::Int(s)
                }
            }
        }
        _ => {
            if nums.is_empty() {
                return Value::Undefined;
            }
            let want_min = func == Func::StringListMin;
            if any_real {
                let it = nums.iter().map(f);
                Value::Real(if want_min {
                    it.fold(f64::INFINITY, f64::min)
                } else {
                    it.fold(f64::NEG_INFINITY, f64::max)
                })
            } else {
                let it = nums.iter().map(|n| if let N::I(i) = n { *i } else { 0 });
                Value::Int(if want_min { it.min().unwrap_or(0) } else { it.max().unwrap_or(0) })
            }
        }
    }
}

/// C's strtod on a prefix: leading blanks, sign, digits, fraction, exponent,
/// `inf`/`nan`. None when no number starts the string.
fn strtod_prefix(s: &str) -> Option<(f64, &str)> {
    let t = s.trim_start();
    let bytes = t.as_bytes();
    let mut i = 0;
    if i < bytes.len() && (bytes[i] == b'+' || bytes[i] == b'-') {
        i += 1;
    }
    let lower = t[i..].to_ascii_lowercase();
    for word in ["infinity", "inf", "nan"] {
        if lower.starts_with(word) {
            let v: f64 = if word == "nan" { f64::NAN } else { f64::INFINITY };
            let v = if bytes.first() == Some(&b'-') { -v } else { v };
            return Some((v, &t[i + word.len()..]));
        }
    }
    if lower.starts_with("0x") {
        let hs = i + 2;
        let mut j = hs;
        while j < bytes.len() && bytes[j].is_ascii_hexdigit() {
            j += 1;
        }
        if j > hs {
            let v = u64::from_str_radix(&t[hs..j], 16).map(|u| u as f64).unwrap_or(f64::INFINITY);
            let v = if bytes.first() == Some(&b'-') { -v } else { v };
            return Some((v, &t[j..]));
        }
    }
    let ds = i;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        i += 1;
    }
    let mut nd = i - ds;
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        let fs = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        nd += i - fs;
    }
    if nd == 0 {
        return None;
    }
    if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        let mut j = i + 1;
        if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
            j += 1;
        }
        let es = j;
        while j < bytes.len() && bytes[j].is_ascii_digit() {
            j += 1;
        }
        if j > es {
            i = j;
        }
    }
    t[..i].parse::<f64>().ok().map(|v| (v, &t[i..]))
}

/// A double to an integer as C does on x86: out of range (and NaN) gives i64::MIN.
pub(crate) fn f2i(r: f64) -> i64 {
    // 2^63 as a double; i64::MIN is exactly -2^63.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if r.is_nan() || !(-LIMIT..LIMIT).contains(&r) {
        i64::MIN
    } else {
        r as i64
    }
}

pub(crate) fn to_int(v: &Value, quirks: bool) -> Value {
    if let (true, Value::Str(s)) = (quirks, v) {
        // HTCondor converts through a double, losing precision beyond 2^53.
        return strtod_prefix(s).map_or(Value::Error, |(r, _)| Value::Int(f2i(r)));
    }
    match v {
        Value::Int(_) => v.clone(),
        Value::Real(r) => Value::Int(f2i(*r)),
        Value::Bool(x) => Value::Int(*x as i64),
        Value::Str(s) => {
            let t = s.trim_start();
            let digits_end = {
                let b = t.as_bytes();
                let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
                let st = i;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                if i > st {
                    Some(i)
                } else {
                    None
                }
            };
            match digits_end {
                Some(e) if !matches!(t.as_bytes().get(e), Some(b'.' | b'e' | b'E' | b'x' | b'X')) => {
                    match t[..e].parse::<i64>() {
                        Ok(i) => Value::Int(i),
                        Err(_) => strtod_prefix(t).map_or(Value::Error, |(r, _)| Value::Int(f2i(r))),
                    }
                }
                _ => match strtod_prefix(t) {
                    Some((r, _)) => Value::Int(f2i(r)),
                    None => Value::Error,
                },
            }
        }
        Value::Undefined => Value::Undefined,
        _ => Value::Error,
    }
}

fn to_real(v: &Value) -> Value {
    match v {
        Value::Int(i) => Value::Real(*i as f64),
        Value::Real(_) => v.clone(),
        Value::Bool(x) => Value::Real(*x as i64 as f64),
        Value::Str(s) => strtod_prefix(s).map_or(Value::Error, |(r, _)| Value::Real(r)),
        Value::Undefined => Value::Undefined,
        _ => Value::Error,
    }
}

/// `string(v)` as text, or the value to return (undefined / error).
pub(crate) fn to_string(v: &Value) -> Result<std::string::String, Value> {
    match v {
        Value::Str(s) => Ok(s.to_string()),
        Value::Int(i) => Ok(i.to_string()),
        Value::Real(r) => Ok(real_to_string(*r)),
        Value::Bool(x) => Ok(if *x { "true".into() } else { "false".into() }),
        Value::List(_) | Value::Ad(_) => Ok(crate::value::unparse_htcondor(v)),
        Value::Undefined => Err(Value::Undefined),
        Value::Error => Err(Value::Error),
    }
}

fn to_bool(v: &Value) -> Value {
    match v {
        Value::Bool(_) => v.clone(),
        Value::Int(i) => b(*i != 0),
        Value::Real(r) => b(*r != 0.0),
        Value::Str(s) => {
            if s.eq_ignore_ascii_case("true") {
                b(true)
            } else if s.eq_ignore_ascii_case("false") {
                b(false)
            } else {
                Value::Undefined
            }
        }
        Value::Undefined => Value::Undefined,
        _ => Value::Error,
    }
}

fn rounding(func: Func, v: &Value) -> Value {
    let r = match v {
        Value::Int(_) => return v.clone(),
        Value::Bool(x) => return Value::Int(*x as i64),
        Value::Real(r) => *r,
        Value::Str(_) => match to_real(v) {
            Value::Real(r) => r,
            other => return other,
        },
        // HTCondor answers error, not undefined, here.
        _ => return Value::Error,
    };
    Value::Int(f2i(match func {
        Func::Floor => r.floor(),
        Func::Ceiling => r.ceil(),
        // C's rint: halves go to the even neighbour.
        _ => r.round_ties_even(),
    }))
}

fn pow(x: &Value, y: &Value) -> Value {
    let n = |v: &Value| match v {
        Value::Int(i) => Some(Err(*i)),
        Value::Bool(x) => Some(Err(*x as i64)),
        Value::Real(r) => Some(Ok(*r)),
        Value::Str(_) => match to_real(v) {
            Value::Real(r) => Some(Ok(r)),
            _ => None,
        },
        _ => None,
    };
    match (n(x), n(y)) {
        (Some(Err(a)), Some(Err(e))) if e >= 0 => {
            // Exact integer power; an overflowing one is i64::MIN, as HTCondor's is.
            let exact = u32::try_from(e).ok().and_then(|e| a.checked_pow(e));
            Value::Int(exact.unwrap_or(i64::MIN))
        }
        (Some(a), Some(e)) => {
            let f = |v: Result<f64, i64>| match v {
                Ok(r) => r,
                Err(i) => i as f64,
            };
            Value::Real(f(a).powf(f(e)))
        }
        // HTCondor answers error even for undefined arguments.
        _ => Value::Error,
    }
}

fn substr(a: &[Value]) -> Value {
    let s = match &a[0] {
        Value::Str(s) => s,
        Value::Undefined => return Value::Undefined,
        _ => return Value::Error,
    };
    let off = match &a[1] {
        Value::Int(i) => *i,
        Value::Undefined => return Value::Undefined,
        _ => return Value::Error,
    };
    let len = s.len() as i64;
    let mut start = if off < 0 { len + off } else { off };
    start = start.clamp(0, len);
    let end = match a.get(2) {
        None => len,
        Some(Value::Int(l)) => {
            if *l < 0 {
                len + l
            } else {
                start.saturating_add(*l)
            }
        }
        Some(Value::Undefined) => return Value::Undefined,
        Some(_) => return Value::Error,
    };
    let end = end.clamp(start, len);
    match s.get(start as usize..end as usize) {
        Some(t) => Value::str(t),
        None => Value::str(&std::string::String::from_utf8_lossy(&s.as_bytes()[start as usize..end as usize])),
    }
}

fn list_num(func: Func, v: &Value) -> Value {
    let l = match v {
        Value::List(l) => l,
        Value::Undefined => return Value::Undefined,
        _ => return Value::Error,
    };
    let mut any_real = false;
    let mut total = Value::Int(0);
    let mut n = 0usize;
    let mut best: Option<Value> = None;
    for e in l.iter() {
        let x = match e {
            Value::Undefined => continue,
            Value::Int(i) => Value::Int(*i),
            Value::Bool(t) => Value::Int(*t as i64),
            Value::Real(r) => {
                any_real = true;
                Value::Real(*r)
            }
            _ => return Value::Error,
        };
        n += 1;
        // The running sum starts at the first value and uses ClassAd `+`:
        // integers wrap until a real joins (and -0.0 alone stays -0.0).
        total = if n == 1 { x.clone() } else { binary(BinOp::Add, &total, &x) };
        best = Some(match best {
            None => x,
            Some(bv) => {
                let better = match func {
                    Func::Min => matches!(binary(BinOp::Lt, &x, &bv), Value::Bool(true)),
                    _ => matches!(binary(BinOp::Gt, &x, &bv), Value::Bool(true)),
                };
                if better {
                    x
                } else {
                    bv
                }
            }
        });
    }
    let real = |v: Value| match v {
        Value::Int(i) if any_real => Value::Real(i as f64),
        v => v,
    };
    match func {
        Func::Sum => total,
        Func::Avg => {
            if n == 0 {
                Value::Int(0)
            } else {
                Value::Real(total.as_number().unwrap_or(0.0) / n as f64)
            }
        }
        _ => best.map_or(Value::Undefined, real),
    }
}

fn compare_list(all: bool, a: &[Value]) -> Value {
    let op = match &a[0] {
        Value::Str(s) => match s.to_ascii_lowercase().as_str() {
            "<" => BinOp::Lt,
            "<=" => BinOp::Le,
            "==" => BinOp::Eq,
            "!=" => BinOp::Ne,
            ">" => BinOp::Gt,
            ">=" => BinOp::Ge,
            "is" => BinOp::Is,
            "isnt" => BinOp::Isnt,
            _ => return Value::Error,
        },
        Value::Undefined => return Value::Undefined,
        _ => return Value::Error,
    };
    let l = match &a[1] {
        Value::List(l) => l,
        Value::Undefined => return Value::Undefined,
        _ => return Value::Error,
    };
    for e in l.iter() {
        match binary(op, e, &a[2]) {
            Value::Bool(t) => {
                if all && !t {
                    return b(false);
                }
                if !all && t {
                    return b(true);
                }
            }
            // HTCondor stops at the first undefined comparison and answers false.
            Value::Undefined => return b(false),
            _ => return Value::Error,
        }
    }
    b(all)
}

#[cfg(test)]
mod tests {
    use crate::eval_str;

    fn ev(s: &str) -> String {
        eval_str(s).unwrap().to_string()
    }

    #[test]
    fn string_lists() {
        assert_eq!(ev(r#"stringListMember("b", "a, b ,c")"#), "true");
        assert_eq!(ev(r#"stringListSize(" a ; b ;", ";")"#), "2");
        assert_eq!(ev(r#"stringListSum("1,2,3")"#), "6");
        assert_eq!(ev(r#"stringListMax("1,2.5")"#), "2.5");
        assert_eq!(ev(r#"stringListMin("")"#), "undefined");
        assert_eq!(ev(r#"stringListSum("1,x")"#), "error");
    }

    #[test]
    fn conversions_follow_htcondor() {
        assert_eq!(ev("string(1.5)"), "\"1.500000000000000E+00\"");
        assert_eq!(ev("int(\"12.7\")"), "12");
        assert_eq!(ev("int(-3.7)"), "-3");
        assert_eq!(ev("round(2.5)"), "2");
        assert_eq!(ev("bool(\"TRUE\")"), "true");
        assert_eq!(ev("real(\"1e3\")"), "1000.0");
        assert_eq!(ev("int(\"0x10\")"), "16");
    }

    #[test]
    fn regexp_options_and_runtime_patterns() {
        assert_eq!(ev(r#"regexp("A.C", "abc", "i")"#), "true");
        assert_eq!(ev(r#"regexp(strcat("^", "a"), "abc")"#), "true");
        assert_eq!(ev(r#"regexp("(", "abc")"#), "error");
        assert_eq!(ev(r#"regexpMember("^g", {"x", "gpu"})"#), "true");
    }

    #[test]
    fn list_aggregates() {
        assert_eq!(ev("sum({1, 2, 3.5})"), "6.5");
        assert_eq!(ev("avg({1, 2})"), "1.5");
        assert_eq!(ev("min({3, undefined, 2})"), "2");
        assert_eq!(ev("max({})"), "undefined");
        assert_eq!(ev(r#"anyCompare(">", {1, 5}, 4)"#), "true");
        assert_eq!(ev(r#"allCompare(">", {1, 5}, 0)"#), "true");
        assert_eq!(ev("size({1, 2})"), "2");
        assert_eq!(ev("wrongfn(1)"), "error");
        assert_eq!(ev("size(1, 2)"), "error");
    }
}
