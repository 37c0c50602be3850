//! The qsub submit filter (`cder-torque-submit-filter`): it reads the
//! user's job script on stdin and the qsub command line. The input is the
//! command line (one argument per line), a NUL byte, then the script. The
//! filter must answer a filtered script or a rejection, never panic; a
//! script it passes must pass again unchanged (filtering is idempotent, so
//! qsub's re-reads and resubmissions see the same job).
#![no_main]

use cder_torque::filter::filter;
use cder_torque::settings::{Directive, TorqueSettings};
use libfuzzer_sys::fuzz_target;

fn env(name: &str) -> Option<String> {
    match name {
        "GPGPUPerNode" => Some("2".into()),
        "HOME" => Some("/home/user".into()),
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    let (args, script) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&[][..], data),
    };
    let Ok(args) = std::str::from_utf8(args) else { return };
    let argv: Vec<String> = args.lines().map(str::to_string).collect();
    for directive in [Directive::Native, Directive::Maui] {
        let settings = TorqueSettings { directive, ..TorqueSettings::default() };
        if let Ok(first) = filter(script, &argv, &env, &settings) {
            if let Some(n) = first.per_node {
                assert!(n <= settings.max_per_node, "{n} devices per node passed the filter, above max_per_node");
            }
        }
    }
});
