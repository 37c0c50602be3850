//! ClassAd evaluation and matchmaking: a job's Requirements and Rank
//! evaluated against an offer, both written by outsiders (the user; a
//! site's BDII data). The input is a request ad, a line `---`, and an
//! offer ad; or, without the separator, one expression evaluated alone.
//! Evaluation is total: every expression gives a value (maybe `error`),
//! never a panic, a hang or unbounded recursion.
#![no_main]

use cder_classad::{eval_expr, parse_classad, parse_expr, symmetric_match, CompiledRequest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let Some((request, offer)) = src.split_once("\n---\n") else {
        if let Ok(expr) = parse_expr(src) {
            let _ = eval_expr(&expr, None, None);
        }
        return;
    };
    let (Ok(request), Ok(offer)) = (parse_classad(request), parse_classad(offer)) else { return };
    let compiled = CompiledRequest::new(&request);
    let matched = compiled.matches(&offer);
    let ranked = compiled.match_rank(&offer);
    assert_eq!(matched, ranked.is_some(), "match_rank disagrees with matches");
    let _ = compiled.rank(&offer);
    let _ = symmetric_match(&request, &offer);
    for (name, _) in offer.iter() {
        let _ = cder_classad::eval_attr(&offer, name, Some(&request));
    }
});
