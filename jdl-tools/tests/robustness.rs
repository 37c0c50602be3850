//! Bad input: truncated files, unbalanced brackets, bad escapes, huge names,
//! deep nesting, evaluation blow-ups. Each gets a clear error or a bounded
//! result, never a panic or a stack overflow. Also the parser fuzz property
//! test: random bytes and mutations of valid inputs (cargo-fuzz would need a
//! nightly toolchain and cargo-fuzz; this runs on stable, bounded).

use crate::common;

use cder_classad::{eval_expr, eval_str, parse_classad, parse_classads, parse_expr, ClassAd, Value};
use cder_jdl::jdl::check;
use common::gen::{self, Rng};

fn thesis_files() -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/thesis");
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap()).collect();
    v.sort();
    v
}

#[test]
fn every_truncation_of_a_jdl_is_an_error_or_an_ad() {
    for src in thesis_files() {
        for cut in 0..src.len() {
            if !src.is_char_boundary(cut) {
                continue;
            }
            let _ = parse_classad(&src[..cut]);
            let _ = check(&src[..cut]);
        }
    }
    let e = parse_classad("[ a = 1;\n b = (2 + ").unwrap_err();
    assert_eq!((e.pos.line, e.pos.col), (2, 11), "{e}");
    assert!(e.message.contains("expected an expression"), "{e}");
}

#[test]
fn unbalanced_brackets_say_what_was_expected_and_where() {
    let cases = [
        ("[ a = 1;", "1:9", "attribute name"),
        ("[ a = (1 + 2 ]", "1:14", "')'"),
        ("{1, 2", "1:6", "',' or '}'"),
        ("(1))", "1:4", "operator or end of input"),
        ("[ a = 1 ]]", "1:10", "end of input"),
        ("f(1, 2", "1:7", "',' or ')'"),
        ("[a = {1, 2]", "1:11", "',' or '}'"),
    ];
    for (src, pos, what) in cases {
        let e = parse_expr(src).err().or_else(|| parse_classad(src).err()).unwrap_or_else(|| panic!("{src} parsed"));
        assert_eq!(e.pos.to_string(), pos, "{src}: {e}");
        assert!(e.message.contains(what), "{src}: {e}");
    }
}

#[test]
fn bad_strings_and_escapes_are_errors_with_positions() {
    let e = parse_expr("\"abc").unwrap_err();
    assert_eq!(e.pos.to_string(), "1:1");
    assert!(e.message.contains("unterminated string"), "{e}");
    let e = parse_expr("\"abc\\").unwrap_err();
    assert!(e.message.contains("unterminated"), "{e}");
    let e = parse_expr("\"a\\0b\"").unwrap_err();
    assert!(e.message.contains("bad escape"), "{e}");
    let e = parse_expr("/* never closed").unwrap_err();
    assert!(e.message.contains("unterminated comment"), "{e}");
    let e = parse_expr("1 @ 2").unwrap_err();
    assert_eq!(e.pos.to_string(), "1:3");
    // Unknown escapes stand for the character itself, as in HTCondor.
    assert!(matches!(eval_str(r#""\q""#).unwrap(), Value::Str(s) if &*s == "q"));
}

#[test]
fn a_one_megabyte_attribute_name_is_handled() {
    let name = "N".repeat(1 << 20);
    let ad = parse_classad(&format!("[ {name} = 42; b = {name} + 1 ]")).unwrap();
    assert!(matches!(ad.eval_attr("b"), Value::Int(43)));
    let e = parse_expr(&format!("{name} +")).unwrap_err();
    assert_eq!(e.pos.line, 1);
    let big_string = format!("\"{}\"", "s".repeat(1 << 20));
    assert!(matches!(eval_str(&format!("size({big_string})")).unwrap(), Value::Int(n) if n == 1 << 20));
}

fn deep(open: &str, mid: &str, close: &str, n: usize) -> String {
    let mut s = String::with_capacity(n * (open.len() + close.len()) + mid.len());
    for _ in 0..n {
        s.push_str(open);
    }
    s.push_str(mid);
    for _ in 0..n {
        s.push_str(close);
    }
    s
}

#[test]
fn ten_thousand_levels_of_nesting_are_a_clear_error() {
    let cases = [
        deep("(", "1", ")", 10_000),
        deep("{", "1", "}", 10_000),
        deep("[a=", "1", "]", 10_000),
        deep("!", "true", "", 10_000),
        deep("-", "1", "", 10_000),
        deep("f(", "1", ")", 10_000),
        deep("1 ? 2 : ", "3", "", 10_000),
        deep("", "1", "+1", 100_000),
        deep("", "x", ".y", 100_000),
        deep("", "x", "[0]", 100_000),
    ];
    for src in &cases {
        let e = parse_expr(src).unwrap_err();
        assert!(e.message.contains("deeper than") || e.message.contains("nesting"), "{}...: {e}", &src[..20]);
    }
    // Within the limits, deep is fine (the stack budget allows fewer levels in debug builds).
    assert!(matches!(eval_str(&deep("(", "1", ")", 50)).unwrap(), Value::Int(1)));
    assert!(matches!(eval_str(&deep("", "1", "+1", 200)).unwrap(), Value::Int(201)));
}

#[test]
fn long_reference_chains_and_cycles_evaluate_to_error() {
    // a0 = a1; a1 = a2; ... 10,000 long: deeper than the evaluator allows.
    let mut src = String::from("[");
    for i in 0..10_000 {
        src.push_str(&format!("a{i} = a{};", i + 1));
    }
    src.push_str("a10000 = 7 ]");
    let ad = parse_classad(&src).unwrap();
    assert!(matches!(ad.eval_attr("a0"), Value::Error));
    assert!(matches!(ad.eval_attr("a9990"), Value::Int(7)));
    // Cycles.
    let ad = parse_classad("[ a = a; b = c + 1; c = b * 2; d = b ]").unwrap();
    for n in ["a", "b", "c", "d"] {
        assert!(matches!(ad.eval_attr(n), Value::Error), "{n}");
    }
    // A doubling chain would take 2^60 steps; the step budget cuts it off.
    let mut src = String::from("[");
    for i in 0..60 {
        src.push_str(&format!("a{i} = a{} + a{};", i + 1, i + 1));
    }
    src.push_str("a60 = 1 ]");
    let ad = parse_classad(&src).unwrap();
    assert!(matches!(ad.eval_attr("a0"), Value::Error));
    assert!(matches!(ad.eval_attr("a50"), Value::Int(1024)));
}

fn mutate(r: &mut Rng, s: &str) -> String {
    let mut b = s.as_bytes().to_vec();
    for _ in 0..1 + r.below(4) {
        let at = if b.is_empty() { 0 } else { r.below(b.len() as u64 + 1) as usize };
        match r.below(6) {
            0 if !b.is_empty() => {
                let i = at.min(b.len() - 1);
                b[i] = r.next() as u8;
            }
            1 => {
                let tok = [
                    &b"("[..],
                    b")",
                    b"[",
                    b"]",
                    b"{",
                    b"}",
                    b"\"",
                    b"'",
                    b"\\",
                    b";",
                    b"/*",
                    b"//",
                    b"#",
                    b"\n",
                    b"=",
                    b".",
                    b"1e",
                    b"&&",
                ];
                let t = tok[r.below(tok.len() as u64) as usize];
                b.splice(at..at, t.iter().copied());
            }
            2 => b.truncate(at),
            3 if at < b.len() => {
                let end = (at + r.below(8) as usize).min(b.len());
                b.drain(at..end);
            }
            4 => {
                let end = (at + r.below(16) as usize).min(b.len());
                let piece = b[at..end].to_vec();
                b.splice(at..at, piece);
            }
            _ => {
                let alphabet = b"abc =;,[]{}()\"\\' \n+-*/<>!?:";
                b.insert(at.min(b.len()), alphabet[r.below(alphabet.len() as u64) as usize])
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn exercise(src: &str) {
    if let Ok(e) = parse_expr(src) {
        let _ = eval_expr(&e, None, None);
        // Whatever parses unparses to text that parses again.
        let text = e.to_string();
        parse_expr(&text).unwrap_or_else(|err| panic!("{src:?} unparsed as {text:?}, which fails: {err}"));
    }
    if let Ok(ad) = parse_classad(src) {
        for a in ad.attributes() {
            let _ = ad.eval_attr(&a.name);
        }
        let _ = cder_classad::CompiledRequest::new(&ad).match_rank(&ad);
    }
    let _ = parse_classads(src);
    let _ = check(src);
}

/// Inputs per run: CDER_FUZZ_CASES (default 30,000), seed CDER_FUZZ_SEED.
#[test]
fn parser_fuzz_random_bytes_and_mutations_never_panic() {
    let cases: usize = std::env::var("CDER_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(30_000);
    let seed: u64 = std::env::var("CDER_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(7)
    });
    eprintln!("fuzz seed: CDER_FUZZ_SEED={seed}");
    let mut r = Rng::new(seed);
    let mut seeds: Vec<String> = thesis_files();
    seeds.extend(include_str!("data/corpus.txt").lines().skip(1).step_by(7).map(String::from));
    seeds.extend(gen::batch(seed ^ 0xABCD, 500, 4));
    for i in 0..cases {
        let src = if i % 5 == 0 {
            let n = r.below(120) as usize;
            let bytes: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            let base = &seeds[r.below(seeds.len() as u64) as usize];
            mutate(&mut r, base)
        };
        exercise(&src);
    }
}

#[test]
fn unparsed_expressions_evaluate_the_same() {
    let mut exprs: Vec<String> = include_str!("data/corpus.txt").lines().skip(1).map(String::from).collect();
    exprs.extend(gen::batch(99, 3000, 5));
    for src in exprs {
        let Ok(e) = parse_expr(&src) else { continue };
        let text = e.to_string();
        let again = parse_expr(&text).unwrap_or_else(|err| panic!("{src} unparsed as {text}: {err}"));
        let (a, b) =
            (common::to_ref_json(&eval_expr(&e, None, None)), common::to_ref_json(&eval_expr(&again, None, None)));
        assert!(common::same(&a, &b), "{src}\n  unparsed: {text}\n  {a} vs {b}");
    }
    let ad = ClassAd::parse("[ a = 1; 'b c' = a + 1; 'error' = 'b c' * 2; e = [] ]").unwrap();
    let again = ClassAd::parse(&ad.to_string()).unwrap();
    assert!(matches!(again.eval_attr("b c"), Value::Int(2)));
    assert!(matches!(again.eval_attr("error"), Value::Int(4)));
    assert_eq!(again.to_string(), "[ a = 1; 'b c' = a + 1; 'error' = 'b c' * 2; e = [  ] ]");
}
