//! Bounded property test over random and mutated request lines: the parser
//! never panics, and whatever it accepts re-encodes to the same request.
//! (cargo fuzz needs nightly; this runs on stable, in CI, in bounded time.
//! `PROPTEST_CASES` raises the case count for a longer local run.)

use crate::Request;
use proptest::prelude::*;

const SEEDS: &[&str] = &[
    r#"{"v":1,"op":"ping"}"#,
    r#"{"v":1,"op":"status"}"#,
    r#"{"v":1,"op":"alloc","job":"slurm:4242","uid":1000,"count":2,"type":"gpgpu","min_memory_mib":4096}"#,
    r#"{"v":1,"op":"alloc","job":"torque:17.ce","uid":0,"count":1,"model":"K20","devices":[3]}"#,
    r#"{"v":1,"op":"release","job":"slurm:4242"}"#,
    r#"{"v":1,"op":"env","job":"local:x-1"}"#,
    r#"{"v":1,"op":"drain","device":"gpgpu:3","reason":"Xid 79"}"#,
    r#"{"v":1,"op":"resume","device":"GPU-aaaa"}"#,
    r#"{"v":1,"op":"reconcile","live_jobs":["slurm:4243"],"lrms":"slurm"}"#,
    r#"{"v":1,"op":"accounting","since":0,"until":10}"#,
];

/// Mutations that keep a line near the grammar, where parser bugs live.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Delete(usize, usize),
    Insert(usize, String),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let token = prop_oneof![
        Just("\"".to_string()),
        Just(",".to_string()),
        Just("-1".to_string()),
        Just("null".to_string()),
        Just("\"count\":".to_string()),
        Just("\"v\":1,".to_string()),
        Just("{\"x\":[".to_string()),
        Just("1e400".to_string()),
        Just("\\u0000".to_string()),
        Just("'; DROP TABLE jobs; --".to_string()),
        "[ -~]{0,8}",
    ];
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), 0usize..8).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<usize>(), token).prop_map(|(i, t)| Mutation::Insert(i, t)),
        (any::<usize>(), 0usize..16).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
    ]
}

fn apply(line: &str, mutations: &[Mutation]) -> Vec<u8> {
    let mut bytes = line.as_bytes().to_vec();
    for m in mutations {
        let len = bytes.len().max(1);
        match m {
            Mutation::Flip(i, b) => {
                if !bytes.is_empty() {
                    bytes[i % len] = *b;
                }
            }
            Mutation::Delete(i, n) => {
                let start = (i % len).min(bytes.len());
                let end = (start + n).min(bytes.len());
                bytes.drain(start..end);
            }
            Mutation::Insert(i, t) => {
                let at = (i % len).min(bytes.len());
                bytes.splice(at..at, t.bytes());
            }
            Mutation::Duplicate(i, n) => {
                let start = (i % len).min(bytes.len());
                let end = (start + n).min(bytes.len());
                let piece = bytes[start..end].to_vec();
                bytes.splice(end..end, piece);
            }
        }
    }
    bytes
}

fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(request) = Request::from_line(bytes) {
        let again = Request::from_line(request.to_line().as_bytes());
        prop_assert_eq!(
            again.as_ref().ok(),
            Some(&request),
            "accepted {:?} but its re-encoding differs",
            String::from_utf8_lossy(bytes)
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        check(&bytes)?;
    }

    #[test]
    fn mutated_requests_are_parsed_or_refused(seed in 0..SEEDS.len(), mutations in proptest::collection::vec(mutation(), 1..4)) {
        let bytes = apply(SEEDS[seed], &mutations);
        check(&bytes)?;
    }
}

#[test]
fn every_seed_is_valid() {
    for seed in SEEDS {
        assert!(Request::from_line(seed.as_bytes()).is_ok(), "{seed}");
    }
}
