//! Tokens of the ClassAd / JDL language.

use std::fmt;

/// A position in the source: 1-based line and column (in characters).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub col: u32,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// A syntax error, with the line and column where it was found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{pos}: {message}")]
pub struct ParseError {
    /// Where.
    pub pos: Pos,
    /// What was expected (and found).
    pub message: String,
}

/// A token kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// An attribute or function name (also `'quoted names'`).
    Ident(String),
    /// A keyword-like identifier that was quoted, so never a keyword.
    QuotedIdent(String),
    /// An integer literal.
    Int(i64),
    /// A real literal.
    Real(f64),
    /// A string literal, escapes resolved.
    Str(String),
    /// Punctuation or an operator.
    Punct(&'static str),
    /// End of input.
    Eof,
}

impl Tok {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) | Tok::QuotedIdent(s) => {
                let s: String = s.chars().take(40).collect();
                format!("name '{s}'")
            }
            Tok::Int(i) => format!("integer {i}"),
            Tok::Real(r) => format!("real {r}"),
            Tok::Str(_) => "a string".into(),
            Tok::Punct(p) => format!("'{p}'"),
            Tok::Eof => "end of input".into(),
        }
    }
}

/// A token and where it starts.
#[derive(Clone, Debug)]
pub struct Token {
    /// What it is.
    pub tok: Tok,
    /// Where it starts.
    pub pos: Pos,
    /// The line it ends on.
    pub end_line: u32,
}

/// Operators, longest first so that the first prefix match is the right one.
const PUNCT: &[&str] = &[
    ">>>", "=?=", "=!=", "==", "!=", "<=", ">=", "<<", ">>", "&&", "||", "(", ")", "[", "]", "{", "}", ";", ",", ".",
    "?", ":", "=", "<", ">", "+", "-", "*", "/", "%", "!", "~", "&", "|", "^",
];

/// Splits source text into tokens.
pub fn tokenize(src: &str) -> Result<Vec<Token>, ParseError> {
    let mut lx = Lexer { s: src.as_bytes(), src, i: 0, line: 1, col: 1 };
    let mut out = Vec::new();
    loop {
        let t = lx.next()?;
        let eof = t.tok == Tok::Eof;
        out.push(t);
        if eof {
            return Ok(out);
        }
    }
}

struct Lexer<'a> {
    s: &'a [u8],
    src: &'a str,
    i: usize,
    line: u32,
    col: u32,
}

impl Lexer<'_> {
    fn pos(&self) -> Pos {
        Pos { line: self.line, col: self.col }
    }

    fn peek(&self, k: usize) -> u8 {
        *self.s.get(self.i + k).unwrap_or(&0)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.src[self.i..].chars().next()?;
        self.i += c.len_utf8();
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn err(&self, pos: Pos, msg: impl Into<String>) -> ParseError {
        ParseError { pos, message: msg.into() }
    }

    fn skip_space(&mut self) -> Result<(), ParseError> {
        loop {
            match self.peek(0) {
                b' ' | b'\t' | b'\n' | b'\r' | 0x0c => {
                    self.bump();
                }
                b'#' => self.skip_line(),
                b'/' if self.peek(1) == b'/' => self.skip_line(),
                b'/' if self.peek(1) == b'*' => {
                    let start = self.pos();
                    self.bump();
                    self.bump();
                    loop {
                        if self.i >= self.s.len() {
                            return Err(self.err(start, "unterminated comment: expected '*/'"));
                        }
                        if self.peek(0) == b'*' && self.peek(1) == b'/' {
                            self.bump();
                            self.bump();
                            break;
                        }
                        self.bump();
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn skip_line(&mut self) {
        while self.i < self.s.len() && self.peek(0) != b'\n' {
            self.bump();
        }
    }

    fn next(&mut self) -> Result<Token, ParseError> {
        self.skip_space()?;
        let pos = self.pos();
        let c = self.peek(0);
        if self.i >= self.s.len() {
            return Ok(Token { tok: Tok::Eof, pos, end_line: pos.line });
        }
        let tok = if c.is_ascii_alphabetic() || c == b'_' {
            let st = self.i;
            while self.peek(0).is_ascii_alphanumeric() || self.peek(0) == b'_' {
                self.bump();
            }
            Tok::Ident(self.src[st..self.i].to_string())
        } else if c.is_ascii_digit() || (c == b'.' && self.peek(1).is_ascii_digit()) {
            self.number(pos)?
        } else if c == b'"' {
            self.bump();
            Tok::Str(self.quoted(b'"', pos)?)
        } else if c == b'\'' {
            self.bump();
            let name = self.quoted(b'\'', pos)?;
            if name.is_empty() {
                return Err(self.err(pos, "empty quoted attribute name"));
            }
            Tok::QuotedIdent(name)
        } else {
            let rest = &self.s[self.i..];
            match PUNCT.iter().find(|p| rest.starts_with(p.as_bytes())) {
                Some(p) => {
                    for _ in 0..p.len() {
                        self.bump();
                    }
                    Tok::Punct(p)
                }
                None => {
                    let ch = self.src[self.i..].chars().next().unwrap_or('?');
                    return Err(
                        self.err(pos, format!("unexpected character {ch:?}: expected an expression or operator"))
                    );
                }
            }
        };
        Ok(Token { tok, pos, end_line: self.line })
    }

    fn number(&mut self, pos: Pos) -> Result<Tok, ParseError> {
        let st = self.i;
        while self.peek(0).is_ascii_digit() {
            self.bump();
        }
        let mut real = false;
        if self.peek(0) == b'.' {
            if !self.peek(1).is_ascii_digit() {
                return Err(self.err(self.pos(), "expected a digit after the decimal point"));
            }
            real = true;
            self.bump();
            while self.peek(0).is_ascii_digit() {
                self.bump();
            }
        }
        if matches!(self.peek(0), b'e' | b'E') {
            real = true;
            self.bump();
            if matches!(self.peek(0), b'+' | b'-') {
                self.bump();
            }
            if !self.peek(0).is_ascii_digit() {
                return Err(self.err(self.pos(), "expected digits in the exponent"));
            }
            while self.peek(0).is_ascii_digit() {
                self.bump();
            }
        }
        if self.peek(0).is_ascii_alphabetic() || self.peek(0) == b'_' {
            return Err(self.err(self.pos(), "expected an operator after a number"));
        }
        let text = &self.src[st..self.i];
        if real {
            text.parse::<f64>().map(Tok::Real).map_err(|_| self.err(pos, "malformed real number"))
        } else {
            // Too-large literals wrap like HTCondor's; only the magnitude of i64::MIN needs it in practice.
            let v = text.parse::<u64>().map(|u| u as i64).or_else(|_| text.parse::<f64>().map(|r| r as i64));
            v.map(Tok::Int).map_err(|_| self.err(pos, "malformed integer"))
        }
    }

    /// Reads up to the closing quote, resolving escapes.
    fn quoted(&mut self, q: u8, start: Pos) -> Result<String, ParseError> {
        let mut out = String::new();
        loop {
            if self.i >= self.s.len() {
                return Err(self.err(
                    start,
                    format!(
                        "unterminated {}: expected a closing {}",
                        if q == b'"' { "string" } else { "quoted name" },
                        q as char
                    ),
                ));
            }
            let c = self.bump().unwrap_or('\0');
            if c as u32 == q as u32 {
                return Ok(out);
            }
            if c != '\\' {
                out.push(c);
                continue;
            }
            let epos = self.pos();
            let Some(e) = self.bump() else {
                return Err(self.err(epos, "unterminated escape sequence at end of input"));
            };
            match e {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'a' => out.push('\u{7}'),
                'v' => out.push('\u{b}'),
                '0'..='7' => {
                    // Up to three octal digits (the first at most 3), as HTCondor reads them.
                    let mut v = e as u32 - '0' as u32;
                    let max = if e <= '3' { 2 } else { 1 };
                    for _ in 0..max {
                        let d = self.peek(0);
                        if (b'0'..=b'7').contains(&d) {
                            v = v * 8 + (d - b'0') as u32;
                            self.bump();
                        } else {
                            break;
                        }
                    }
                    if v == 0 {
                        return Err(self.err(epos, "bad escape: a string may not contain \\0"));
                    }
                    out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
                }
                // Any other escaped character stands for itself (\" \\ \' and, as in HTCondor, the rest).
                other => out.push(other),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        tokenize(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn numbers_strings_and_operators() {
        assert_eq!(
            toks(r#"12 1.5 .5 1e3 2E-2 "a\"b\n" 'x y' >>> =?= <="#),
            vec![
                Tok::Int(12),
                Tok::Real(1.5),
                Tok::Real(0.5),
                Tok::Real(1000.0),
                Tok::Real(0.02),
                Tok::Str("a\"b\n".into()),
                Tok::QuotedIdent("x y".into()),
                Tok::Punct(">>>"),
                Tok::Punct("=?="),
                Tok::Punct("<="),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn comments_are_skipped_and_positions_counted() {
        let t = tokenize("# one\n// two\n/* three\n */ x").unwrap();
        assert_eq!(t[0].tok, Tok::Ident("x".into()));
        assert_eq!((t[0].pos.line, t[0].pos.col), (4, 5));
    }

    #[test]
    fn malformed_numbers_and_strings_are_errors() {
        assert!(tokenize("5.").unwrap_err().message.contains("digit after the decimal point"));
        assert!(tokenize("1e").unwrap_err().message.contains("exponent"));
        assert!(tokenize("12abc").unwrap_err().message.contains("operator after a number"));
        let e = tokenize("x = \"abc").unwrap_err();
        assert_eq!((e.pos.line, e.pos.col), (1, 5));
        assert_eq!(toks(r#""\101\q""#)[0], Tok::Str("Aq".into()));
    }
}
