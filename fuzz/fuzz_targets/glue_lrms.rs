//! What the batch system prints, as the GLUE provider reads it: SLURM's
//! `scontrol -d show node -o` and TORQUE's `pbsnodes -x`, counted for a
//! fixed group of four nodes (wn01-wn04). Node names, states and GRES come
//! from the LRMS, which any node admin (and, through node features and
//! comments, sometimes a user) can shape: a count that does not add up
//! must be refused with an error, never wrap or panic, and what is
//! published must keep total = free + used + offline.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use cder_glue_provider::site::{node_groups, NodeGroup};
use cder_glue_provider::sources::{parse_gres, parse_pbsnodes, parse_scontrol, GroupCounts, SlurmCounts, TorqueCounts};
use cder_glue_provider::ProviderConfig;
use libfuzzer_sys::fuzz_target;

const CONFIG: &str = r#"[site]
computing_service_id = "svc"
computing_manager_id = "mgr"
ce_unique_id = "ce:8443/cream-slurm-gpgpu"

[counts]
source = "slurm"

[[group]]
id = "g"
nodes = ["wn[01-04]"]
platform = "amd64"
main_memory_mib = 1024

[[group.device]]
model = "Tesla K20m"
count = 2
memory_mib = 4800
"#;

fn groups() -> &'static [NodeGroup] {
    static GROUPS: OnceLock<Vec<NodeGroup>> = OnceLock::new();
    GROUPS.get_or_init(|| node_groups(&ProviderConfig::parse(CONFIG, "t.toml".as_ref()).unwrap()).unwrap())
}

fn consistent(counts: &[GroupCounts]) {
    for g in counts {
        for (key, c) in &g.devices {
            assert_eq!(
                u64::from(c.free) + u64::from(c.used) + u64::from(c.offline),
                u64::from(c.total),
                "{key}: {c:?}"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let timeout = Duration::from_secs(1);
    let slurm = SlurmCounts {
        scontrol: PathBuf::from("scontrol"),
        gres: [("gpgpu".to_string(), "gpu".to_string())].into(),
        timeout,
    };
    let torque = TorqueCounts { pbsnodes: PathBuf::from("pbsnodes"), timeout };
    if let Ok(counts) = slurm.counts_from_output(groups(), data) {
        consistent(&counts);
    }
    if let Ok(counts) = torque.counts_from_output(groups(), data) {
        consistent(&counts);
    }
    let _ = parse_scontrol(data);
    let _ = parse_pbsnodes(data);
    // The per-VO share listings: partitions, jobs, QOS limits, TORQUE queues and jobs.
    let _ = cder_glue_provider::sources::scontrol::parse_partitions(data);
    let _ = cder_glue_provider::sources::scontrol::parse_jobs(data, "|");
    let _ = cder_glue_provider::sources::scontrol::parse_assoc_mgr_qos(data);
    let _ = cder_glue_provider::sources::pbsnodes::parse_queues(data);
    let _ = cder_glue_provider::sources::pbsnodes::parse_qstat_jobs(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_gres(text);
    }
});
