//! Shared by the differential tests: the HTCondor classad2 reference runner,
//! value comparison, and the random expression generator.
//!
//! cder-jdl's robustness tests include this module too (`#[path]`), for the
//! generator and the value comparison.
#![allow(dead_code)]

pub mod gen;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cder_classad::{parse_expr, Quirks, Value};
use serde_json::{json, Value as Json};

/// `jdl-tools/tests`, where the classad2 reference script (`classad_ref.py`)
/// and the corpus and allow-list (`data/`) live, from either crate that
/// compiles this module: cder-classad is `jdl-tools/classad`, cder-jdl is
/// `jdl-tools`.
pub fn jdl_tests_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let jdl_tools = if env!("CARGO_PKG_NAME") == "cder-classad" {
        manifest.parent().expect("jdl-tools/classad has a parent")
    } else {
        manifest
    };
    jdl_tools.join("tests")
}

/// The Python that has HTCondor's bindings: $CDER_CLASSAD_PYTHON or the venv's.
/// None (with a printed reason) when it is missing, unless CI=true, where a
/// missing reference fails the test.
pub fn python() -> Option<PathBuf> {
    let p = std::env::var("CDER_CLASSAD_PYTHON").unwrap_or_else(|_| "/opt/cder-venv/bin/python".into());
    let ok = Command::new(&p)
        .args(["-c", "import htcondor2, classad2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        return Some(PathBuf::from(p));
    }
    cder_testkit::missing(&format!(
        "HTCondor classad2 is not importable with {p} (set CDER_CLASSAD_PYTHON or run deploy/install-deps.sh)"
    ));
    None
}

/// Evaluates every expression with classad2 in one Python process.
pub fn reference(py: &PathBuf, exprs: &[String]) -> Vec<Json> {
    let cases: Vec<Json> = exprs.iter().map(|e| json!(e)).collect();
    reference_cases(py, &cases)
}

/// Runs every case (see jdl-tools/tests/classad_ref.py for the shapes) in one Python process.
pub fn reference_cases(py: &PathBuf, cases: &[Json]) -> Vec<Json> {
    let script = jdl_tests_dir().join("classad_ref.py");
    let exprs = cases;
    let mut input = String::new();
    for e in cases {
        input.push_str(&serde_json::to_string(e).unwrap());
        input.push('\n');
    }
    let mut child = Command::new(py)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the classad2 reference");
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        stdin.write_all(input.as_bytes()).expect("write to the reference");
    });
    let out = child.wait_with_output().expect("run the reference");
    writer.join().unwrap();
    assert!(out.status.success(), "classad2 reference failed: {:?}", out.status);
    let lines: Vec<Json> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("reference JSON"))
        .collect();
    assert_eq!(lines.len(), exprs.len(), "the reference answered a different number of lines");
    lines
}

/// Our value in the reference's JSON shape (non-finite reals as strings).
pub fn to_ref_json(v: &Value) -> Json {
    match v {
        Value::Real(r) if !r.is_finite() => {
            let s = if r.is_nan() {
                "nan"
            } else if *r > 0.0 {
                "inf"
            } else {
                "-inf"
            };
            json!({"type": "real", "value": s})
        }
        Value::List(l) => json!({"type": "list", "value": l.iter().map(to_ref_json).collect::<Vec<_>>()}),
        Value::Ad(n) => {
            let mut m = serde_json::Map::new();
            for a in n.ad.attributes() {
                m.insert(a.name.to_string(), to_ref_json(&n.eval_attr(a.sym)));
            }
            json!({"type": "classad", "value": m})
        }
        v => v.to_json(),
    }
}

/// Same value: same type and value, reals to 1e-12 relative.
pub fn same(a: &Json, b: &Json) -> bool {
    if a["type"] != b["type"] {
        return false;
    }
    match a["type"].as_str() {
        Some("real") => match (a["value"].as_f64(), b["value"].as_f64()) {
            (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
            _ => a["value"] == b["value"],
        },
        Some("list") => {
            let (x, y) = (a["value"].as_array().unwrap(), b["value"].as_array().unwrap());
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        Some("classad") => {
            let (x, y) = (a["value"].as_object().unwrap(), b["value"].as_object().unwrap());
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a["value"] == b["value"],
    }
}

/// Outcome of comparing a batch.
#[derive(Default, Debug)]
pub struct Report {
    pub total: usize,
    pub agree: usize,
    /// Differences explained by a documented quirk (docs/classad.md).
    pub quirk: usize,
    /// Differences listed by expression in jdl-tools/tests/data/allowlist.txt.
    pub listed: usize,
    pub failures: Vec<String>,
    /// Matchmaking only: pairs where the request matched the offer.
    pub matched: usize,
}

fn allowlist() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(jdl_tests_dir().join("data/allowlist.txt")).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (e, why) = l.split_once('\t').expect("allowlist lines are EXPR<TAB>REASON");
            assert!(!why.trim().is_empty(), "allow-list entry without a reason: {e}");
            (e.to_string(), why.to_string())
        })
        .collect()
}

/// Evaluates each expression ourselves (plainly and with HTCondor's quirks)
/// and with classad2, and compares.
pub fn compare_all(py: &PathBuf, exprs: &[String]) -> Report {
    let refs = reference(py, exprs);
    let allowed = allowlist();
    let mut rep = Report { total: exprs.len(), ..Default::default() };
    for (e, r) in exprs.iter().zip(refs) {
        let (plain, quirky) = match parse_expr(e) {
            Ok(x) => {
                (to_ref_json(&cder_classad::eval_expr(&x, None, None)), to_ref_json(&Quirks::eval_expr(&x, None, None)))
            }
            Err(_) => (json!({"type": "parse_error", "value": null}), json!({"type": "parse_error", "value": null})),
        };
        if same(&plain, &r) {
            rep.agree += 1;
        } else if same(&quirky, &r) {
            rep.quirk += 1;
        } else if allowed.iter().any(|(a, _)| a == e) {
            rep.listed += 1;
        } else {
            rep.failures.push(format!("{e}\n    cder:     {plain}\n    classad2: {r}"));
        }
    }
    rep
}

/// Fails the test with the first disagreements.
pub fn assert_report(label: &str, rep: &Report) {
    eprintln!(
        "{label}: {} expressions, {} agree, {} documented quirks, {} allow-listed, {} disagreements",
        rep.total,
        rep.agree,
        rep.quirk,
        rep.listed,
        rep.failures.len()
    );
    if !rep.failures.is_empty() {
        let file = std::env::temp_dir()
            .join(format!("cder-jdl-diff-{}.txt", label.split(|c: char| !c.is_alphanumeric()).next().unwrap_or("x")));
        let _ = std::fs::write(&file, rep.failures.join("\n"));
        eprintln!("all disagreements: {}", file.display());
        let shown: Vec<&String> = rep.failures.iter().take(40).collect();
        panic!(
            "{label}: {} disagreements with HTCondor classad2 (first {}):\n{}",
            rep.failures.len(),
            shown.len(),
            shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
        );
    }
}

/// Expressions evaluated in an ad against a target, by both sides.
pub fn compare_scoped(py: &PathBuf, cases: &[(String, String, String)]) -> Report {
    let input: Vec<Json> = cases.iter().map(|(e, m, t)| json!({"expr": e, "my": m, "target": t})).collect();
    let refs = reference_cases(py, &input);
    let mut rep = Report { total: cases.len(), ..Default::default() };
    for ((e, m, t), r) in cases.iter().zip(refs) {
        let my = cder_classad::parse_classad(m).expect("generated MY ad");
        let target = cder_classad::parse_classad(t).expect("generated TARGET ad");
        let (plain, quirky) = match parse_expr(e) {
            Ok(x) => (
                to_ref_json(&cder_classad::eval_expr(&x, Some(&my), Some(&target))),
                to_ref_json(&Quirks::eval_expr(&x, Some(&my), Some(&target))),
            ),
            Err(_) => (json!({"type": "parse_error", "value": null}), json!({"type": "parse_error", "value": null})),
        };
        if same(&plain, &r) {
            rep.agree += 1;
        } else if same(&quirky, &r) {
            rep.quirk += 1;
        } else {
            rep.failures.push(format!("{e}\n    MY = {m}\n    TARGET = {t}\n    cder:     {plain}\n    classad2: {r}"));
        }
    }
    rep
}

/// Matchmaking by both sides: one-way match, symmetric match and the Rank value.
pub fn compare_matches(py: &PathBuf, pairs: &[(String, String)]) -> Report {
    let input: Vec<Json> = pairs.iter().map(|(q, o)| json!({"request": q, "offer": o})).collect();
    let refs = reference_cases(py, &input);
    let mut rep = Report { total: pairs.len(), ..Default::default() };
    for ((q, o), r) in pairs.iter().zip(refs) {
        let request = cder_classad::parse_classad(q).expect("generated request");
        let offer = cder_classad::parse_classad(o).expect("generated offer");
        let compiled = cder_classad::CompiledRequest::new(&request);
        let rank_expr = request.lookup("Rank").unwrap();
        let ours = json!({
            "matches": compiled.matches(&offer),
            "symmetric": cder_classad::symmetric_match(&request, &offer),
            "rank": to_ref_json(&cder_classad::eval_expr(rank_expr, Some(&request), Some(&offer))),
        });
        let quirky_rank = to_ref_json(&Quirks::eval_expr(rank_expr, Some(&request), Some(&offer)));
        let quirky_match = |a: &cder_classad::ClassAd, b: &cder_classad::ClassAd| {
            a.lookup("Requirements").is_some_and(|e| match Quirks::eval_expr(e, Some(a), Some(b)) {
                Value::Bool(t) => t,
                Value::Int(i) => i != 0,
                Value::Real(x) => x != 0.0,
                _ => false,
            })
        };
        let quirky = json!({
            "matches": quirky_match(&request, &offer),
            "symmetric": quirky_match(&request, &offer) && quirky_match(&offer, &request),
        });
        // The compiled rank is the Rank value as a number, or 0.
        let want_rank = match (&ours["rank"]["value"], ours["rank"]["type"].as_str()) {
            (v, Some("integer" | "real")) if v.is_number() => v.as_f64().unwrap(),
            (v, Some("real")) if v == "inf" => f64::INFINITY,
            (v, Some("real")) if v == "-inf" => f64::NEG_INFINITY,
            (v, Some("boolean")) => f64::from(u8::from(v.as_bool().unwrap())),
            _ => 0.0,
        };
        assert_eq!(compiled.rank(&offer), want_rank, "compiled rank of {q} against {o}");
        let r = &r["value"];
        rep.matched += usize::from(r["matches"] == json!(true));
        let same_match = ours["matches"] == r["matches"] && ours["symmetric"] == r["symmetric"];
        if same_match && same(&ours["rank"], &r["rank"]) {
            rep.agree += 1;
        } else if quirky["matches"] == r["matches"]
            && quirky["symmetric"] == r["symmetric"]
            && (same(&ours["rank"], &r["rank"]) || same(&quirky_rank, &r["rank"]))
        {
            rep.quirk += 1;
        } else {
            rep.failures.push(format!("request {q}\n    offer {o}\n    cder:     {ours}\n    classad2: {r}"));
        }
    }
    rep
}
