//! `cderctl reconcile --from slurm` run on each node of a real cluster
//! (tests/src/cluster.rs): a two-node job is killed mid-run by a crash of
//! slurmd and slurmstepd on its hosts, so no epilog gives its devices back;
//! the controller marks the hosts down and ends the job. Reconcile on each
//! worker, asking slurmctld over the test network as a node does, frees
//! exactly the dead job's devices on the hosts it ran on and keeps a live
//! job on the third.

use std::time::Duration;

use cder_testkit::wait_for;
use cder_tests::cluster::{require_cluster, Cluster, ClusterConfig};
use cder_tests::slurm::{serial, SlurmClient};
use cder_tests::vgpgpu::binary;

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn reconcile_on_each_node_frees_a_job_killed_mid_run() {
    if !require_cluster() {
        return;
    }
    let _g = serial();
    let mut cluster = Cluster::start(&ClusterConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    let cderctl = binary("cderctl", "cderctl").unwrap().display().to_string();
    let dead = cluster
        .sbatch(
            &["-N", "2", "-w", "w1,w2", "--gpgpu-per-node=2", "--no-requeue"],
            "#!/bin/sh\nsrun -N2 --ntasks-per-node=1 sleep 300\n",
        )
        .unwrap();
    let live = cluster.sbatch(&["-w", "w3", "--gpgpu-per-node=1"], "#!/bin/sh\nsleep 300\n").unwrap();
    for id in [dead, live] {
        cluster.wait_running(id, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    }
    wait_for("the ledgers", Duration::from_secs(30), || {
        ["w1", "w2"].iter().all(|w| cluster.worker(w).ledger(dead).is_ok_and(|l| l.len() == 2))
            && cluster.worker("w3").ledger(live).is_ok_and(|l| l.len() == 1)
    });

    // (The step on the second host is what makes SLURM run the job's
    // prolog there, where cderd records its devices.)
    // Reconcile while the job lives frees nothing anywhere.
    for w in ["w1", "w2", "w3"] {
        let out = cluster
            .on_worker(w, &cderctl, &["reconcile", "--from", "slurm", "--socket", "/run/cder/cderd.sock"])
            .unwrap();
        assert!(out.status.success(), "{w}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "0 job(s) released\n", "{w}");
    }

    // The job's hosts lose slurmd and the job's steps at once: no epilog.
    for w in ["w1", "w2"] {
        let i = cluster.worker_index(w);
        cluster.workers[i].crash(&["slurmd", "slurmstepd"]);
    }
    cluster.scontrol(&["update", "nodename=w1,w2", "state=down", "reason=crashed"]).unwrap();
    let gone = cluster.wait_job(dead, JOB_TIMEOUT).unwrap();
    assert_ne!(gone.state, "COMPLETED", "{gone:?}");
    // Its devices are still held on both hosts: nobody released them.
    for w in ["w1", "w2"] {
        assert_eq!(cluster.worker(w).ledger(dead).unwrap().len(), 2, "{w}");
    }

    for w in ["w1", "w2", "w3"] {
        let out = cluster
            .on_worker(w, &cderctl, &["reconcile", "--from", "slurm", "--socket", "/run/cder/cderd.sock"])
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{w}: {}", String::from_utf8_lossy(&out.stderr));
        if w == "w3" {
            assert_eq!(stdout, "0 job(s) released\n", "{w}");
        } else {
            assert_eq!(stdout, format!("released slurm:{dead}\n1 job(s) released\n"), "{w}");
        }
        let status = cluster.worker(w).cderd_status().unwrap();
        let held = status.counts["gpgpu"].allocated;
        assert_eq!(held, if w == "w3" { 1 } else { 0 }, "{w}: {status:?}");
    }
    assert_eq!(cluster.worker("w3").ledger(live).unwrap().len(), 1);
    // A second pass is a no-op.
    let out = cluster
        .on_worker("w1", &cderctl, &["reconcile", "--from", "slurm", "--socket", "/run/cder/cderd.sock"])
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0 job(s) released\n");
}
