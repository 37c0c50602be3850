//! Recursive-descent parser for ClassAd expressions and ads.
//!
//! Accepted ad forms: `[ a = 1; b = 2 ]` (old-style ClassAd / gLite JDL), the
//! same without the brackets, and one `Name = expr` per line as
//! `condor_status -l` prints it. Nesting and tree height are bounded, so
//! hostile input gets an error instead of a stack overflow.

use std::sync::Arc;

use crate::ast::{BinOp, Call, ClassAd, Expr, Func, Scope, Sym, UnOp, Value};
use crate::functions::precompile_regex;
use crate::lexer::{tokenize, ParseError, Pos, Tok, Token};
use crate::limits::{stack_addr, MAX_STACK_BYTES};

/// Deepest nesting of parentheses, lists, ads and calls.
pub const MAX_NESTING: u32 = 200;
/// Tallest expression tree (long operator chains count too).
pub const MAX_HEIGHT: u32 = 1000;

/// Parses one expression.
pub fn parse_expr(src: &str) -> Result<Expr, ParseError> {
    let mut p = Parser::new(src)?;
    let (e, _) = p.expr()?;
    p.expect_eof()?;
    Ok(e)
}

/// Parses one ad: `[ ... ]`, or attribute definitions separated by `;` or
/// newlines (the bracket-less JDL form and `condor_status -l` output).
///
/// ```
/// use cder_classad::{eval_attr, parse_classad, Value};
/// let jdl = parse_classad("Executable = \"/bin/hostname\";\nGPGPUPerNode = 1 + 1;").unwrap();
/// assert!(matches!(eval_attr(&jdl, "GPGPUPerNode", None), Value::Int(2)));
/// // Names are case-insensitive, as in HTCondor.
/// assert!(matches!(eval_attr(&jdl, "gpgpupernode", None), Value::Int(2)));
///
/// // A syntax error says where.
/// let e = parse_classad("[ A = 1;\n  B = ]").unwrap_err();
/// assert_eq!(e.pos.line, 2);
/// ```
pub fn parse_classad(src: &str) -> Result<ClassAd, ParseError> {
    let mut p = Parser::new(src)?;
    let ad = if p.is_punct("[") {
        let (e, _) = p.ad_literal()?;
        p.eat_punct(";");
        p.expect_eof()?;
        match e {
            Expr::Ad(ad) => ad,
            _ => unreachable_ad(),
        }
    } else {
        let ad = p.attr_lines(false)?;
        p.expect_eof()?;
        ad
    };
    Ok(ad)
}

/// Parses several ads: a sequence of `[ ... ]`, or `condor_status -l` blocks
/// separated by blank lines.
pub fn parse_classads(src: &str) -> Result<Vec<ClassAd>, ParseError> {
    let mut p = Parser::new(src)?;
    let mut out = Vec::new();
    loop {
        while p.eat_punct(";") || p.eat_punct(",") {}
        if p.at_eof() {
            return Ok(out);
        }
        if p.is_punct("[") {
            let (e, _) = p.ad_literal()?;
            if let Expr::Ad(ad) = e {
                out.push(ad);
            }
        } else {
            out.push(p.attr_lines(true)?);
        }
    }
}

/// Parses an ad like [`parse_classad`], but carries on after a syntax error
/// (skipping to the next `;` or line that starts a definition), so that every
/// error is reported. Returns what could be parsed and the errors found.
pub fn parse_classad_recovering(src: &str) -> (ClassAd, Vec<ParseError>) {
    let mut p = match Parser::new(src) {
        Ok(p) => p,
        Err(e) => return (ClassAd::new(), vec![e]),
    };
    let mut ad = ClassAd::new();
    let mut errs = Vec::new();
    let bracketed = p.eat_punct("[");
    loop {
        while p.eat_punct(";") {}
        if p.at_eof() {
            if bracketed {
                errs.push(ParseError {
                    pos: p.pos(),
                    message: "expected ']' to close the ad, found end of input".into(),
                });
            }
            break;
        }
        if bracketed && p.eat_punct("]") {
            p.eat_punct(";");
            if !p.at_eof() {
                errs.push(ParseError {
                    pos: p.pos(),
                    message: format!("expected end of input after the ad, found {}", p.tok().tok.describe()),
                });
            }
            break;
        }
        let start = p.i;
        let r = (|| {
            let (name, pos) = p.attr_name()?;
            p.expect_punct("=", "'=' after the attribute name")?;
            let (e, _) = p.expr()?;
            Ok::<_, ParseError>((name, pos, e))
        })();
        p.nesting = 0;
        match r {
            Ok((name, pos, e)) => {
                ad.insert_at(&name, e, pos);
                let prev_end = p.toks[p.i.saturating_sub(1)].end_line;
                let next_ok = p.is_punct(";")
                    || p.at_eof()
                    || (bracketed && p.is_punct("]"))
                    || (!bracketed && p.pos().line > prev_end);
                if !next_ok {
                    errs.push(ParseError {
                        pos: p.pos(),
                        message: format!(
                            "expected {}, found {}",
                            if bracketed { "';' or ']'" } else { "';' or a line break" },
                            p.tok().tok.describe()
                        ),
                    });
                    p.synchronize(start, bracketed);
                }
            }
            Err(e) => {
                errs.push(e);
                p.synchronize(start, bracketed);
            }
        }
    }
    (ad, errs)
}

fn unreachable_ad() -> ClassAd {
    // ad_literal always returns Expr::Ad; an empty ad keeps this total.
    ClassAd::new()
}

struct Parser {
    toks: Vec<Token>,
    i: usize,
    nesting: u32,
    stack_base: usize,
}

fn is_keyword(s: &str) -> bool {
    ["true", "false", "undefined", "error", "is", "isnt"].iter().any(|k| k.eq_ignore_ascii_case(s))
}

impl ClassAd {
    /// Parses an ad in any accepted form (see [`crate::parser::parse_classad`]).
    pub fn parse(src: &str) -> Result<ClassAd, ParseError> {
        parse_classad(src)
    }
}

impl Parser {
    fn new(src: &str) -> Result<Parser, ParseError> {
        Ok(Parser { toks: tokenize(src)?, i: 0, nesting: 0, stack_base: stack_addr() })
    }

    fn tok(&self) -> &Token {
        &self.toks[self.i.min(self.toks.len() - 1)]
    }

    fn pos(&self) -> Pos {
        self.tok().pos
    }

    fn advance(&mut self) {
        if self.i < self.toks.len() - 1 {
            self.i += 1;
        }
    }

    /// Takes the current token's text (it is consumed: only its position
    /// is looked at again) and advances.
    fn take_text(&mut self) -> String {
        let i = self.i.min(self.toks.len() - 1);
        let s = match &mut self.toks[i].tok {
            Tok::Ident(s) | Tok::QuotedIdent(s) | Tok::Str(s) => std::mem::take(s),
            _ => String::new(),
        };
        self.advance();
        s
    }

    fn at_eof(&self) -> bool {
        self.tok().tok == Tok::Eof
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(&self.tok().tok, Tok::Punct(q) if *q == p)
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        if self.is_punct(p) {
            self.advance();
            true
        } else {
            false
        }
    }

    fn err<T>(&self, expected: &str) -> Result<T, ParseError> {
        Err(ParseError {
            pos: self.pos(),
            message: format!("expected {expected}, found {}", self.tok().tok.describe()),
        })
    }

    fn expect_punct(&mut self, p: &str, what: &str) -> Result<(), ParseError> {
        if self.eat_punct(p) {
            Ok(())
        } else {
            self.err(what)
        }
    }

    fn expect_eof(&self) -> Result<(), ParseError> {
        if self.at_eof() {
            Ok(())
        } else {
            self.err("an operator or end of input")
        }
    }

    /// Skips past the definition that failed: to the next `;` outside
    /// brackets, a `]` closing the ad, or a line that starts `Name =`.
    fn synchronize(&mut self, start: usize, bracketed: bool) {
        let mut depth: i64 = 0;
        let start_line = self.toks[start.min(self.toks.len() - 1)].pos.line;
        if self.i == start {
            self.advance();
        }
        while !self.at_eof() {
            let t = &self.tok().tok;
            match t {
                Tok::Punct("(" | "[" | "{") => depth += 1,
                Tok::Punct(")" | "}") => depth -= 1,
                Tok::Punct("]") => {
                    if depth <= 0 && bracketed {
                        return;
                    }
                    depth -= 1;
                }
                Tok::Punct(";") if depth <= 0 => {
                    self.advance();
                    return;
                }
                Tok::Ident(_) | Tok::QuotedIdent(_) => {
                    let next_is_eq = matches!(self.toks.get(self.i + 1).map(|t| &t.tok), Some(Tok::Punct("=")));
                    let first_on_line = self.toks[self.i - 1].end_line < self.tok().pos.line;
                    if next_is_eq && first_on_line && self.tok().pos.line > start_line {
                        return;
                    }
                }
                _ => {}
            }
            self.advance();
        }
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING || self.stack_base.abs_diff(stack_addr()) > MAX_STACK_BYTES {
            return Err(ParseError { pos: self.pos(), message: format!("nesting deeper than {MAX_NESTING} levels") });
        }
        Ok(())
    }

    fn height(&self, h: u32) -> Result<u32, ParseError> {
        if h > MAX_HEIGHT {
            return Err(ParseError { pos: self.pos(), message: format!("expression deeper than {MAX_HEIGHT} levels") });
        }
        Ok(h)
    }

    /// `Name = expr` definitions separated by `;` or line breaks. With
    /// `stop_at_blank`, a blank line ends the ad.
    fn attr_lines(&mut self, stop_at_blank: bool) -> Result<ClassAd, ParseError> {
        let mut ad = ClassAd::new();
        loop {
            while self.eat_punct(";") {}
            if self.at_eof() || self.is_punct("[") {
                return Ok(ad);
            }
            let (name, pos) = self.attr_name()?;
            self.expect_punct("=", "'=' after the attribute name")?;
            let (e, _) = self.expr()?;
            ad.insert_at(&name, e, pos);
            let prev_end = self.toks[self.i.saturating_sub(1)].end_line;
            if self.eat_punct(";") {
                continue;
            }
            if self.at_eof() {
                return Ok(ad);
            }
            let next_line = self.pos().line;
            if next_line <= prev_end {
                return self.err("';' or a line break between attributes");
            }
            if stop_at_blank && next_line > prev_end + 1 {
                return Ok(ad);
            }
        }
    }

    fn attr_name(&mut self) -> Result<(String, Pos), ParseError> {
        let pos = self.pos();
        match &self.tok().tok {
            Tok::Ident(s) if !is_keyword(s) => Ok((self.take_text(), pos)),
            Tok::QuotedIdent(_) => Ok((self.take_text(), pos)),
            Tok::Ident(k) => Err(ParseError {
                pos,
                message: format!(
                    "expected an attribute name, found the reserved word '{k}' (quote it as '{k}' to use it as a name)"
                ),
            }),
            _ => self.err("an attribute name"),
        }
    }

    fn ad_literal(&mut self) -> Result<(Expr, u32), ParseError> {
        self.enter()?;
        self.expect_punct("[", "'['")?;
        let mut ad = ClassAd::new();
        let mut h = 1;
        loop {
            if self.eat_punct("]") {
                break;
            }
            let (name, pos) = self.attr_name()?;
            self.expect_punct("=", "'=' after the attribute name")?;
            let (e, eh) = self.expr()?;
            h = h.max(eh + 1);
            ad.insert_at(&name, e, pos);
            if self.eat_punct(";") {
                // HTCondor accepts empty definitions after one (`a = 1;; b = 2`).
                while self.eat_punct(";") {}
                continue;
            }
            if self.eat_punct("]") {
                break;
            }
            return self.err("';' or ']'");
        }
        self.nesting -= 1;
        Ok((Expr::Ad(ad), h))
    }

    fn expr(&mut self) -> Result<(Expr, u32), ParseError> {
        self.enter()?;
        let (c, ch) = self.binary(1)?;
        let r = if self.eat_punct("?") {
            let (a, ah) = self.expr()?;
            self.expect_punct(":", "':' in a conditional expression")?;
            let (b, bh) = self.expr()?;
            let h = self.height(1 + ch.max(ah).max(bh))?;
            (Expr::Cond(Box::new((c, a, b))), h)
        } else {
            (c, ch)
        };
        self.nesting -= 1;
        Ok(r)
    }

    fn binop(&self) -> Option<BinOp> {
        use BinOp::*;
        Some(match &self.tok().tok {
            Tok::Punct(p) => match *p {
                "||" => Or,
                "&&" => And,
                "|" => BitOr,
                "^" => BitXor,
                "&" => BitAnd,
                "==" => Eq,
                "!=" => Ne,
                "=?=" => Is,
                "=!=" => Isnt,
                "<" => Lt,
                "<=" => Le,
                ">" => Gt,
                ">=" => Ge,
                "<<" => Shl,
                ">>" => Shr,
                ">>>" => UShr,
                "+" => Add,
                "-" => Sub,
                "*" => Mul,
                "/" => Div,
                "%" => Mod,
                _ => return None,
            },
            Tok::Ident(s) if s.eq_ignore_ascii_case("is") => Is,
            Tok::Ident(s) if s.eq_ignore_ascii_case("isnt") => Isnt,
            _ => return None,
        })
    }

    /// Precedence climbing: all binary operators are left-associative.
    fn binary(&mut self, min: u8) -> Result<(Expr, u32), ParseError> {
        let (mut lhs, mut lh) = self.unary()?;
        while let Some(op) = self.binop() {
            let p = op.precedence();
            if p < min {
                break;
            }
            self.advance();
            let (rhs, rh) = self.binary(p + 1)?;
            lh = self.height(1 + lh.max(rh))?;
            lhs = Expr::Binary(op, Box::new((lhs, rhs)));
        }
        Ok((lhs, lh))
    }

    fn unary(&mut self) -> Result<(Expr, u32), ParseError> {
        let op = match &self.tok().tok {
            Tok::Punct("-") => UnOp::Neg,
            Tok::Punct("+") => UnOp::Plus,
            Tok::Punct("!") => UnOp::Not,
            Tok::Punct("~") => UnOp::BitNot,
            _ => return self.postfix(),
        };
        self.advance();
        self.enter()?;
        let (e, h) = self.unary()?;
        self.nesting -= 1;
        // Negative literals are folded so that -9223372036854775808 is a literal.
        let e = match (op, e) {
            (UnOp::Neg, Expr::Lit(Value::Int(i))) => Expr::Lit(Value::Int(i.wrapping_neg())),
            (UnOp::Neg, Expr::Lit(Value::Real(r))) => Expr::Lit(Value::Real(-r)),
            (op, e) => Expr::Unary(op, Box::new(e)),
        };
        Ok((e, self.height(h + 1)?))
    }

    fn postfix(&mut self) -> Result<(Expr, u32), ParseError> {
        let (mut e, mut h) = self.primary()?;
        loop {
            if self.eat_punct(".") {
                let (name, _) = self.attr_name()?;
                let (sym, name) = Sym::intern(&name);
                e = Expr::Select(Box::new(e), sym, name);
                h = self.height(h + 1)?;
            } else if self.is_punct("[") {
                self.advance();
                let (i, ih) = self.expr()?;
                self.expect_punct("]", "']' after the list index")?;
                e = Expr::Index(Box::new((e, i)));
                h = self.height(1 + h.max(ih))?;
            } else {
                return Ok((e, h));
            }
        }
    }

    fn primary(&mut self) -> Result<(Expr, u32), ParseError> {
        let pos = self.pos();
        let tok = match &self.tok().tok {
            Tok::Str(_) => Tok::Str(self.take_text()),
            Tok::Ident(_) => Tok::Ident(self.take_text()),
            Tok::QuotedIdent(_) => Tok::QuotedIdent(self.take_text()),
            t => t.clone(),
        };
        match tok {
            Tok::Int(i) => {
                self.advance();
                Ok((Expr::Lit(Value::Int(i)), 1))
            }
            Tok::Real(r) => {
                self.advance();
                Ok((Expr::Lit(Value::Real(r)), 1))
            }
            Tok::Str(s) => Ok((Expr::Lit(Value::str(&s)), 1)),
            Tok::Punct("(") => {
                self.advance();
                let r = self.expr()?;
                self.expect_punct(")", "')'")?;
                Ok(r)
            }
            Tok::Punct("{") => {
                self.advance();
                self.enter()?;
                let mut items = Vec::new();
                let mut h = 1;
                if !self.eat_punct("}") {
                    loop {
                        let (e, eh) = self.expr()?;
                        h = h.max(eh + 1);
                        items.push(e);
                        if self.eat_punct(",") {
                            continue;
                        }
                        self.expect_punct("}", "',' or '}' in a list")?;
                        break;
                    }
                }
                self.nesting -= 1;
                // A list of constants is itself a constant, so evaluating it never allocates.
                if items.iter().all(|e| matches!(e, Expr::Lit(_))) {
                    let vals: Vec<Value> =
                        items.into_iter().filter_map(|e| if let Expr::Lit(v) = e { Some(v) } else { None }).collect();
                    return Ok((Expr::Lit(Value::List(vals.into())), h));
                }
                Ok((Expr::List(items), h))
            }
            Tok::Punct("[") => self.ad_literal(),
            Tok::QuotedIdent(name) => {
                let (sym, name) = Sym::intern(&name);
                Ok((Expr::Attr { scope: Scope::Plain, sym, name }, 1))
            }
            Tok::Ident(name) => {
                let lower = name.to_ascii_lowercase();
                match lower.as_str() {
                    "true" => return Ok((Expr::Lit(Value::Bool(true)), 1)),
                    "false" => return Ok((Expr::Lit(Value::Bool(false)), 1)),
                    "undefined" => return Ok((Expr::Lit(Value::Undefined), 1)),
                    "error" => return Ok((Expr::Lit(Value::Error), 1)),
                    "is" | "isnt" => {
                        return Err(ParseError {
                            pos,
                            message: format!("expected an expression, found keyword '{name}'"),
                        })
                    }
                    _ => {}
                }
                if self.is_punct("(") {
                    return self.call(name, pos);
                }
                let scope = match lower.as_str() {
                    "my" => Scope::My,
                    "other" | "target" => Scope::Target,
                    "parent" => Scope::Parent,
                    _ => Scope::Plain,
                };
                if scope != Scope::Plain && self.is_punct(".") {
                    self.advance();
                    let (attr, _) = self.attr_name()?;
                    let (sym, attr) = Sym::intern(&attr);
                    return Ok((Expr::Attr { scope, sym, name: attr }, 1));
                }
                let (sym, name) = Sym::intern(&name);
                Ok((Expr::Attr { scope: Scope::Plain, sym, name }, 1))
            }
            _ => self.err("an expression"),
        }
    }

    fn call(&mut self, name: String, pos: Pos) -> Result<(Expr, u32), ParseError> {
        self.expect_punct("(", "'('")?;
        self.enter()?;
        let mut args = Vec::new();
        let mut h = 1;
        if !self.eat_punct(")") {
            loop {
                let (e, eh) = self.expr()?;
                h = h.max(eh + 1);
                args.push(e);
                if self.eat_punct(",") {
                    continue;
                }
                self.expect_punct(")", "',' or ')' in the argument list")?;
                break;
            }
        }
        self.nesting -= 1;
        Ok((make_call(&name, args, pos), h))
    }
}

/// Builds a call node, compiling a constant regular expression once.
pub fn make_call(name: &str, args: Vec<Expr>, pos: Pos) -> Expr {
    let func = Func::from_name(name);
    let mut call = Call { func, name: Arc::from(name), args, regex: None, pos };
    precompile_regex(&mut call);
    Expr::Call(Box::new(call))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::eval_expr;

    #[test]
    fn bracketed_bracketless_and_line_forms_give_the_same_ad() {
        let a = parse_classad("[ A = 1; B = \"x\"; C = {1, 2} ]").unwrap();
        let b = parse_classad("A = 1; B = \"x\"; C = {1, 2};").unwrap();
        let c = parse_classad("A = 1\nB = \"x\"\nC = {\n 1,\n 2 }\n").unwrap();
        for ad in [&a, &b, &c] {
            assert_eq!(ad.len(), 3);
            assert!(matches!(ad.eval_attr("a"), Value::Int(1)));
            assert!(matches!(ad.eval_attr("c"), Value::List(ref l) if l.len() == 2));
        }
        assert!(parse_classad("A = 1 B = 2").unwrap_err().message.contains("';' or a line break"));
    }

    #[test]
    fn several_ads_in_both_forms() {
        let ads = parse_classads("[a=1][a=2];[a=3]").unwrap();
        assert_eq!(ads.len(), 3);
        let ads = parse_classads("a = 1\nb = 2\n\na = 3\n\n\na = 4\n").unwrap();
        assert_eq!(ads.len(), 3);
        assert_eq!(ads[0].len(), 2);
        assert!(matches!(ads[2].eval_attr("a"), Value::Int(4)));
    }

    #[test]
    fn precedence_and_associativity() {
        let v = |s: &str| eval_expr(&parse_expr(s).unwrap(), None, None);
        assert!(matches!(v("1 + 2 * 3"), Value::Int(7)));
        assert!(matches!(v("10 - 4 - 3"), Value::Int(3)));
        assert!(matches!(v("true || false && false"), Value::Bool(true)));
        assert!(matches!(v("1 < 2 == true"), Value::Bool(true)));
        assert!(matches!(v("false ? 1 : true ? 2 : 3"), Value::Int(2)));
        assert!(matches!(v("-2 * -3"), Value::Int(6)));
        assert!(matches!(v("{1,{2,3}}[1][0] + 1"), Value::Int(3)));
        assert!(matches!(v("\"a\" IS \"a\""), Value::Bool(true)));
    }

    #[test]
    fn scopes_and_quoted_names() {
        let s = parse_expr("MY.a + Other.b + target.c + parent.d + 'e f'").unwrap().to_string();
        assert_eq!(s, "MY.a + TARGET.b + TARGET.c + PARENT.d + 'e f'");
        assert!(parse_expr("my.").unwrap_err().message.contains("attribute name"));
        assert!(parse_expr("[ true = 1 ]").unwrap_err().message.contains("attribute name"));
    }

    #[test]
    fn errors_name_the_position_and_what_was_expected() {
        let e = parse_classad("[\n  a = 1;\n  b = 2\n  c = 3\n]").unwrap_err();
        assert_eq!(e.to_string(), "4:3: expected ';' or ']', found name 'c'");
        let (ad, errs) = parse_classad_recovering("[ a = ; b = 2; c = (1; d = 4 ]");
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(ad.lookup("b").is_some() && ad.lookup("d").is_some());
    }
}
