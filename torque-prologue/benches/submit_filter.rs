//! The submit filter's cost on a large script, against a reference read of
//! the same bytes, measured in the same run: the filter's time must grow
//! linearly with the script, as the read's does.
//!
//! The script: `#!/bin/bash`, a Latin-1 comment, then LINES directive lines
//! `#PBS -l nodes=1:ppn=1` (every one rewritten to `…:gpus=2`), the request
//! `#PBS -v GPGPUPerNode=2`, and a command. The reference is a plain scan
//! of the same bytes that counts its lines and copies it (what `cat` does).
//! Printed: both times, their ratio, and the filter's time per line at
//! LINES and LINES/2 (equal per-line times mean linear growth).
//!
//!     cargo bench -p cder-torque --bench submit_filter
//!     LINES=100000 ROUNDS=5 cargo bench -p cder-torque --bench submit_filter

use std::hint::black_box;
use std::time::{Duration, Instant};

use cder_torque::filter::filter;
use cder_torque::settings::TorqueSettings;

fn script(lines: usize) -> Vec<u8> {
    let mut s = b"#!/bin/bash\n# r\xe9sum\xe9: Latin-1 comment\n".to_vec();
    for _ in 0..lines {
        s.extend_from_slice(b"#PBS -l nodes=1:ppn=1\n");
    }
    s.extend_from_slice(b"#PBS -v GPGPUPerNode=2\n./run\n");
    s
}

/// What reading the script costs at least: one pass over its bytes.
fn reference(bytes: &[u8]) -> (usize, Vec<u8>) {
    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    (lines, bytes.to_vec())
}

fn best_of(rounds: usize, mut f: impl FnMut()) -> Duration {
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let lines: usize = std::env::var("LINES").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let settings = TorqueSettings::default();
    let env = |_: &str| None;
    let mut per_line = Vec::new();
    for n in [lines / 2, lines] {
        let bytes = script(n);
        let out = filter(&bytes, &[], &env, &settings).expect("the bench script is valid");
        assert_eq!(out.per_node, Some(2));
        let rewritten = out.script.windows(6).filter(|w| w == b"gpus=2").count();
        assert_eq!(rewritten, n, "every nodes= line gains gpus=2");
        let filter_t = best_of(rounds, || {
            black_box(filter(black_box(&bytes), &[], &env, &settings).unwrap());
        });
        let reference_t = best_of(rounds, || {
            black_box(reference(black_box(&bytes)));
        });
        println!(
            "submit_filter: {n} directive lines ({} bytes): filter {:9.3} ms, reference scan {:7.3} ms, ratio {:6.1}",
            bytes.len(),
            filter_t.as_secs_f64() * 1e3,
            reference_t.as_secs_f64() * 1e3,
            filter_t.as_secs_f64() / reference_t.as_secs_f64()
        );
        per_line.push(filter_t.as_secs_f64() / n.max(1) as f64);
    }
    println!(
        "  filter time per line: {:.3} µs at {} lines, {:.3} µs at {} lines (growth ratio {:.2}; 1.0 is linear, 2.0 quadratic)",
        per_line[0] * 1e6,
        lines / 2,
        per_line[1] * 1e6,
        lines,
        per_line[1] / per_line[0]
    );
}
