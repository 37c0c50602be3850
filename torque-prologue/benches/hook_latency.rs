//! What cder adds to a TORQUE job's start and end: the wall time of a
//! prologue + epilogue pair that allocates and releases two devices from a
//! real cderd, run as pbs_mom runs hooks (tests/common/mod.rs), against the
//! reference of the same harness running an empty hook (`/bin/true`
//! installed as mom_priv/prologue.ref), measured in the same run.
//!
//!     cargo build --release -p cderd -p cderctl
//!     cargo bench -p cder-torque --bench hook_latency

#[path = "../tests/common/mod.rs"]
mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

use common::{epilogue_args, prologue_args, Node};

fn main() {
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(200);
    let Some(node) = Node::start("") else { return };
    let reference = node.mom_priv.join("prologue.ref");
    std::fs::copy("/bin/true", &reference).unwrap();
    std::fs::set_permissions(&reference, std::fs::Permissions::from_mode(0o500)).unwrap();
    let limits = "neednodes=1:ppn=2:gpus=2,nodes=1:ppn=2:gpus=2,walltime=01:00:00";

    // Warm up both paths once.
    assert_eq!(node.hook("prologue.ref", &prologue_args("0.bench", limits)).code, 0);
    assert_eq!(node.hook("prologue", &prologue_args("0.bench", limits)).code, 0);
    assert_eq!(node.hook("epilogue", &epilogue_args("0.bench")).code, 0);

    let start = Instant::now();
    for i in 0..rounds {
        let id = format!("{i}.bench");
        assert_eq!(node.hook("prologue.ref", &prologue_args(&id, limits)).code, 0);
        assert_eq!(node.hook("prologue.ref", &epilogue_args(&id)).code, 0);
    }
    let reference_s = start.elapsed().as_secs_f64();

    let start = Instant::now();
    for i in 0..rounds {
        let id = format!("{i}.bench");
        let p = node.hook("prologue", &prologue_args(&id, limits));
        assert_eq!(p.code, 0, "{p:?}");
        assert_eq!(node.hook("epilogue", &epilogue_args(&id)).code, 0);
    }
    let cder_s = start.elapsed().as_secs_f64();
    assert!(node.holders().is_empty(), "every allocation was released");

    let per = |s: f64| s * 1000.0 / rounds as f64;
    println!("hook_latency: {rounds} jobs, each a prologue (alloc 2 of 4 gpgpu) + epilogue (release)");
    println!("  reference (empty hooks, same harness): {:8.2} ms per job", per(reference_s));
    println!("  cder hooks against cderd:              {:8.2} ms per job", per(cder_s));
    println!("  ratio cder / reference:                {:8.2}", cder_s / reference_s);
    println!(
        "  added per job start + end:             {:8.2} ms (pbs_mom's $prologalarm: 300 s)",
        per(cder_s - reference_s)
    );
}
