//! The full Curie log (312,826 jobs) replayed on Curie's 5,544 nodes with
//! EASY backfilling: wall time, CPU time and events per second, beside the
//! reference measured in the same run, reading the log alone (gunzip and
//! parse). `cargo bench -p cder-sim --bench curie`; BENCHMARKS.md has the
//! figures. Needs ../shared/traces (or $CDER_TRACES); without it, says so
//! and exits 0.

use std::path::Path;
use std::time::Instant;

use cder_sim::batch::replay;
use cder_sim::cluster::Cluster;
use cder_sim::policy::Policy;
use cder_sim::read::swf::{read, SwfOptions};
use cder_sim::read::OnBadLine;
use cder_sim::seeds::mendonca::traces_dir;
use cder_sim::service::Recorded;

/// CPU time of this process so far, seconds (getrusage through /proc).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields 14 and 15 (utime, stime) in clock ticks, after the command's ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn main() {
    let trace = traces_dir().join("pwa/CEA-Curie-2011-2.1-cln.swf.gz");
    if !trace.exists() {
        println!("curie: {} is not here: nothing measured", trace.display());
        return;
    }
    let cluster = Cluster::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/sim/curie.toml")).unwrap();
    let (wall, cpu) = (Instant::now(), cpu_seconds());
    let mut w = read(&trace, &SwfOptions::default(), OnBadLine::Refuse).unwrap();
    w.rebase();
    let (read_wall, read_cpu) = (wall.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    let defaults = Policy::from_scheduler(&cluster.scheduler, "easy").unwrap();
    for item in ["easy", "easy+estimates=runtime"] {
        let p = Policy::parse(item, &defaults).unwrap();
        let (wall, cpu) = (Instant::now(), cpu_seconds());
        let o = replay(&cluster, &w.jobs, &p, &Recorded, 1, &mut |_, _| {}).unwrap();
        let (replay_wall, replay_cpu) = (wall.elapsed().as_secs_f64(), cpu_seconds() - cpu);
        let s = o.summary(cluster.gpus());
        println!(
            "{item}: {} jobs, {} events: replay {replay_wall:.2} s wall / {replay_cpu:.2} s CPU \
             ({:.0} events/s of CPU); reading the log alone {read_wall:.2} s wall / {read_cpu:.2} s CPU; \
             replay / read (CPU) {:.1}; makespan {:.0} s, mean wait {:.0} s",
            w.jobs.len(),
            o.events,
            o.events as f64 / replay_cpu.max(1e-9),
            replay_cpu / read_cpu.max(1e-9),
            s.makespan_s,
            s.mean_wait_s
        );
    }
}
