//! The readers on the real traces (../shared/traces): every Parallel
//! Workloads Archive log and every Alibaba list reads with malformed lines
//! refused, so none of them has one.

use cder_sim::read::swf::{read, SwfOptions};
use cder_sim::read::{alibaba, OnBadLine};
use cder_sim::seeds::mendonca::traces_dir;

fn here(relative: &str) -> Option<std::path::PathBuf> {
    let path = traces_dir().join(relative);
    cder_testkit::require(path.exists(), &format!("the workload trace {}", path.display())).then_some(path)
}

#[test]
fn every_swf_log_reads_without_a_malformed_line() {
    // The first 20,000 jobs of the large logs keep this test short; the
    // Curie benchmark reads all of Curie.
    for (log, limit) in [
        ("pwa/KTH-SP2-1996-2.1-cln.swf.gz", None),
        ("pwa/CEA-Curie-2011-2.1-cln-b1-clean2.swf.gz", None),
        ("pwa/CEA-Curie-2011-2.1-cln.swf.gz", Some(20_000)),
        ("pwa/METACENTRUM-2009-2.swf.gz", Some(20_000)),
        ("pwa/RICC-2010-2.swf.gz", Some(20_000)),
    ] {
        let Some(path) = here(log) else { return };
        let w = read(&path, &SwfOptions { limit, ..SwfOptions::default() }, OnBadLine::Refuse).unwrap();
        println!("{log}: {} jobs, {} dropped", w.jobs.len(), w.dropped);
        assert!(w.jobs.len() > 10_000, "{log}: {} jobs", w.jobs.len());
        assert!(w.skipped.is_empty());
    }
    // Curie's GPU partition (8, "hybrid"), read as nodes of 8 cores and 2 GPUs.
    let Some(path) = here("pwa/CEA-Curie-2011-2.1-cln.swf.gz") else { return };
    let options = SwfOptions {
        partition: Some(8),
        node_shape: Some(cder_sim::read::swf::NodeShape { cores: 8, gpus: 2 }),
        limit: Some(200),
    };
    let w = read(&path, &options, OnBadLine::Refuse).unwrap();
    assert!(!w.jobs.is_empty() && w.jobs.iter().all(|j| j.request.gpus == 2 && j.request.cores <= 8));
}

#[test]
fn every_alibaba_list_reads_without_a_malformed_line() {
    for list in ["default", "gpushare100", "gpushare40", "multigpu50"] {
        let Some(path) = here(&format!("alibaba-openb/openb_pod_list_{list}.csv.gz")) else { return };
        let w = alibaba::read(&path, OnBadLine::Refuse, None).unwrap();
        println!("{list}: {} tasks, {} dropped", w.jobs.len(), w.dropped);
        assert!(w.jobs.len() >= 8000 && w.skipped.is_empty(), "{list}: {} tasks", w.jobs.len());
    }
}
