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
    let mut report = serde_json::json!({
        "bdii": p.url,
        "matches": matches,
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
        println!("{}", to_json(&p, args.explain));
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
