//! Phase 1 of two-phase submission: BDII entries (published by any site of
//! the grid, so untrusted) become ClassAd Resource Offers. The input is
//! plain LDIF-like text — blocks of `dn: …` and `attr: value` lines, one
//! block per entry — sorted into the snapshot by objectClass as the BDII
//! query sorts them. Malformed CDER data must make its carrier skipped
//! with a warning; nothing may panic, and every offer must name its CE.
#![no_main]

use cder_jdl::bdii::offers::build_offers;
use cder_jdl::bdii::query::{Entry, Fetched};
use libfuzzer_sys::fuzz_target;

fn entries(text: &str) -> Vec<Entry> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut lines = block.lines().filter(|l| !l.is_empty());
            let dn = lines.next()?.strip_prefix("dn:")?.trim();
            let pairs: Vec<(&str, &str)> =
                lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim(), v.trim())).collect();
            Some(Entry::from_pairs(dn, pairs))
        })
        .take(256)
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut fetched = Fetched::default();
    let mut policies = Vec::new();
    for e in entries(text) {
        if e.is_a("GLUE2Extension") {
            fetched.extensions.push(e);
        } else if e.is_a("GLUE2ComputingManager") {
            fetched.managers.push(e);
        } else if e.is_a("GLUE2ComputingEndpoint") {
            fetched.endpoints.push(e);
        } else if e.is_a("GLUE2MappingPolicy") {
            policies.push(e);
        } else if e.is_a("GlueSubCluster") {
            fetched.subclusters.push(e);
        } else if e.is_a("GlueCE") {
            fetched.glue13_ces.push(e);
        } else if e.is_a("GLUE2ComputingShare") {
            fetched.shares.push(e.clone());
            fetched.carriers.push(e);
        } else {
            fetched.carriers.push(e);
        }
    }
    let prefixes = vec!["GPGPU".to_string(), "FPGA".to_string()];
    for offers in [build_offers(&fetched, &prefixes, None), {
        fetched.policies = Some(policies);
        build_offers(&fetched, &prefixes, Some("atlas"))
    }] {
        for offer in &offers.offers {
            assert!(!offer.ce_id.is_empty(), "an offer without a CE: {:?}", offer.ad.to_string());
        }
    }
});
