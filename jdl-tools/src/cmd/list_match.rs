//! `cder-jdl list-match`: phase 1, like `glite-wms-job-list-match`.

use crate::cmd::{explain_text, phase1, printable, Failure, Phase1, Phase1Args};

/// Arguments of `list-match`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The phase-1 options shared with the other command (BDII, VO, rank, timeouts).
    #[command(flatten)]
    pub phase1: Phase1Args,
    /// Print JSON: {"bdii", "matches": [{"ce", "rank", "queue", "share", "execution_environment",
    /// "schema"}], "warnings", …}; with --explain also "excluded" (each CE left out and why).
    #[arg(long)]
    pub json: bool,
    /// For each CE left out, say which Requirements clause was false or undefined, and which
    /// shares are not open to the job's VO.
    #[arg(long)]
    pub explain: bool,
    /// The job description (`-` for standard input).
    #[arg(value_name = "JOB.jdl")]
    pub job: String,
}

/// The JSON report of phase 1; `"excluded"` only when `explain` (the
/// explanations cost more than the match itself, so they are made only when asked for).
pub fn to_json(p: &Phase1, explain: bool) -> serde_json::Value {
    let mut report = summary_json(p, explain);
    let matches: Vec<serde_json::Value> = p
        .result
        .matches
        .iter()
        .map(|m| {
            let o = &p.offers.offers[m.offer];
            serde_json::json!({
                "ce": m.ce_id,
                "rank": if m.rank.is_finite() { serde_json::json!(m.rank) } else { serde_json::Value::Null },
                "queue": o.queue,
                "share": o.share_id,
                "execution_environment": o.ee_id,
                "schema": o.schema,
            })
        })
        .collect();
    report["matches"] = serde_json::Value::Array(matches);
    report
}

/// Everything of [`to_json`] but the matches (`"matches"` null).
fn summary_json(p: &Phase1, explain: bool) -> serde_json::Value {
    let mut report = serde_json::json!({
        "bdii": p.url,
        "matches": null,
        "offers": p.offer_count,
        "queries": p.queries,
        "warnings": p.offers.warnings,
        "closed_to_vo": p.offers.closed_to_vo.iter().map(|c| serde_json::json!({"share": c.share_id, "queue": c.queue, "vo": c.vo})).collect::<Vec<_>>(),
        "index": p.index.as_ref().map(|i| i.json()),
        "refused_claims": p.offers.refused_claims.iter().map(|c| serde_json::json!({"ce": c.ce_id, "share": c.share, "reason": c.reason})).collect::<Vec<_>>(),
    });
    if explain {
        let excluded: Vec<serde_json::Value> =
            p.result.excluded.iter().map(|e| serde_json::json!({"ce": e.ce_id, "reasons": e.reasons})).collect();
        report["excluded"] = serde_json::Value::Array(excluded);
    }
    report
}

/// [`to_json`] written out (one line, as `to_json(p).to_string()` writes it):
/// the matches, 10^3–10^4 of them, straight to the text, not through a
/// `Value` each (a map of six keys: the most of what `--json` cost).
pub fn write_json(p: &Phase1, explain: bool, out: &mut Vec<u8>) -> serde_json::Result<()> {
    let summary = summary_json(p, explain);
    out.push(b'{');
    for (i, (key, value)) in summary.as_object().into_iter().flatten().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, key)?;
        out.push(b':');
        if key != "matches" {
            serde_json::to_writer(&mut *out, value)?;
            continue;
        }
        out.push(b'[');
        for (k, m) in p.result.matches.iter().enumerate() {
            let o = &p.offers.offers[m.offer];
            out.extend_from_slice(if k == 0 { b"{\"ce\":" } else { b",{\"ce\":" });
            serde_json::to_writer(&mut *out, &m.ce_id)?;
            out.extend_from_slice(b",\"execution_environment\":");
            serde_json::to_writer(&mut *out, &o.ee_id)?;
            out.extend_from_slice(b",\"queue\":");
            serde_json::to_writer(&mut *out, &o.queue)?;
            out.extend_from_slice(b",\"rank\":");
            serde_json::to_writer(&mut *out, &Some(m.rank).filter(|r| r.is_finite()))?;
            out.extend_from_slice(b",\"schema\":");
            serde_json::to_writer(&mut *out, o.schema)?;
            out.extend_from_slice(b",\"share\":");
            serde_json::to_writer(&mut *out, &o.share_id)?;
            out.push(b'}');
        }
        out.push(b']');
    }
    out.push(b'}');
    Ok(())
}

/// The text report: the matching CEs, best rank first.
pub fn to_text(p: &Phase1, explain: bool) -> String {
    let mut s = String::new();
    let width = p.result.matches.iter().map(|m| printable(&m.ce_id).len()).max().unwrap_or(0).max(40);
    if p.result.matches.is_empty() {
        s.push_str("No CE matches the job requirements.\n");
    } else {
        s.push_str("The following CE(s) matching your job requirements have been found:\n\n");
        s.push_str(&format!("   {:<width$}  *Rank*\n", "*CEId*"));
        for m in &p.result.matches {
            s.push_str(&format!(" - {:<width$}  {}\n", printable(&m.ce_id), cder_classad::value::format_real(m.rank)));
        }
    }
    if explain
        && (!p.result.excluded.is_empty() || !p.offers.refused_claims.is_empty() || !p.offers.closed_to_vo.is_empty())
    {
        s.push_str("\nLeft out:\n");
        s.push_str(&explain_text(p));
    }
    s
}

/// Runs `list-match`.
pub fn run(args: &Args) -> Result<(), Failure> {
    let p = phase1(&args.phase1, &args.job, args.explain)?;
    p.report_source();
    if args.json {
        let mut text = Vec::new();
        write_json(&p, args.explain, &mut text).map_err(|e| Failure::runtime(format!("--json: {e}")))?;
        text.push(b'\n');
        std::io::Write::write_all(&mut std::io::stdout().lock(), &text)
            .map_err(|e| Failure::runtime(format!("standard output: {e}")))?;
    } else {
        print!("{}", to_text(&p, args.explain));
    }
    let none = p.result.matches.is_empty();
    p.exit();
    if none {
        return Err(Failure::runtime(format!(
            "{}: no CE matches the job requirements{}",
            args.job,
            if args.explain { "" } else { " (--explain says why)" }
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bdii::offers::{ClosedShare, Offer, Offers, RefusedClaim};
    use crate::listmatch::{Excluded, Match, MatchResult, Request};
    use cder_classad::ClassAd;

    /// The report written out is, byte for byte, the `Value`'s text (quotes,
    /// newlines, no rank, no EE, no queue), and carries the explanations
    /// only when asked for.
    #[test]
    fn written_json_is_the_reports_text_and_explains_only_when_asked() {
        let job = ClassAd::parse("[ Requirements = true ]").unwrap();
        let request = Request::new(&job, None).unwrap();
        let offer = |ce: &str, queue: Option<&str>, ee: Option<&str>| Offer {
            ce_id: ce.into(),
            queue: queue.map(Into::into),
            share_id: Some("s".into()),
            ee_id: ee.map(Into::into),
            schema: "GLUE2",
            ad: ClassAd::new(),
            traits: None,
        };
        let offers = Offers {
            offers: vec![offer("a:1/q", Some("q\"1"), Some("ee")), offer("b\n", None, None)],
            warnings: vec!["dn: skipped".into()],
            refused_claims: vec![RefusedClaim { ce_id: "c".into(), share: "S".into(), reason: "why".into() }],
            closed_to_vo: vec![ClosedShare { share_id: "x".into(), queue: None, dn: "X".into(), vo: "atlas".into() }],
        };
        let matches = vec![
            Match { ce_id: "a:1/q".into(), rank: 2.5, offer: 0 },
            Match { ce_id: "b\n".into(), rank: f64::NAN, offer: 1 },
        ];
        let excluded = vec![Excluded { ce_id: "d".into(), reasons: vec!["GPGPUPerNode >= 2 is false".into()] }];
        let p = Phase1 {
            job,
            request,
            offers,
            offer_count: 3,
            result: MatchResult { matches, excluded },
            url: "ldap://bdii.example.org:2170".into(),
            queries: 4,
            index: None,
            _retained: None,
        };
        for explain in [false, true] {
            let mut out = Vec::new();
            write_json(&p, explain, &mut out).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), to_json(&p, explain).to_string(), "explain {explain}");
            assert_eq!(to_json(&p, explain).get("excluded").is_some(), explain);
        }
        assert_eq!(to_json(&p, false)["matches"][1]["rank"], serde_json::Value::Null);
    }
}
