//! Where the dynamic numbers come from: cderd's `status` on a single node,
//! the LRMS for a cluster (SLURM `scontrol -d show node -o`, TORQUE
//! `pbsnodes -x`), or values written in the config; and the vGPGPU counts
//! behind [`VirtualGpgpuSource`].
//!
//! One module per source: [`cderd`], [`scontrol`] (SLURM), [`pbsnodes`]
//! (TORQUE), [`configured`], and [`vgpgpu`] (config or registry); the
//! nodes' CPUs, slots and memory come with the counts ([`host`]: this
//! node's own, for cderd); they share
//! [`counts`] (the vocabulary), a private group walk and [`command`] (the
//! deadline). For per-VO shares, [`scontrol`] and [`pbsnodes`] (with
//! TORQUE's `qstat`) read the LRMS's queues, nodes and jobs into [`Facts`],
//! which [`crate::shares`] turns into shares. This module only picks the
//! source the config names.

pub mod cderd;
pub mod command;
pub mod configured;
pub mod counts;
pub mod host;
pub mod pbsnodes;
pub mod scontrol;
pub mod vgpgpu;
pub(crate) mod walk;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::{CountSourceKind, ProviderConfig};
use crate::error::ProviderError;
use crate::site::NodeGroup;

/// What the renderer needs besides the config: every group with its
/// counts, the virtual environments, and when they were read. It lives with
/// the sources (which fill it) so that the renderers all import it one way.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The node groups with what the count source read for each.
    pub groups: Vec<(NodeGroup, GroupCounts)>,
    /// The vGPGPU environments.
    pub virtual_environments: Vec<VirtualEnvironment>,
    /// The per-VO ComputingShares (empty without `[[vo]]`).
    pub shares: Vec<VoShare>,
    /// `GLUE2EntityCreationTime`, unix seconds.
    pub created: u64,
}

pub use cderd::CderdCounts;
pub use command::run_command;
pub use configured::{static_total, ConfiguredCounts};
pub use counts::{
    CountSource, Counts, Facts, GroupCounts, HostFacts, NodeFacts, ShareDevices, SharePolicy, VoShare, UNLIMITED_TIME,
};
pub use pbsnodes::{parse_pbsnodes, TorqueCounts, TorqueNode};
pub use scontrol::{gres_count, parse_gres, parse_scontrol, Gres, SlurmCounts, SlurmNode};
pub use vgpgpu::{virtual_from_config, RegistryVirtual, StaticVirtual, VirtualEnvironment, VirtualGpgpuSource};

/// The count source the config names.
pub fn from_config(config: &ProviderConfig) -> Box<dyn CountSource> {
    let timeout = Duration::from_secs((*config.counts.timeout_s.get_ref()).max(1));
    match config.counts.source.get_ref() {
        CountSourceKind::Cderd => Box::new(CderdCounts {
            socket: config.counts.socket.clone().unwrap_or_else(|| cder_model::DEFAULT_SOCKET.into()),
            timeout,
        }),
        CountSourceKind::Slurm => {
            Box::new(SlurmCounts { scontrol: config.counts.scontrol.clone(), gres: gres_map(config), timeout })
        }
        CountSourceKind::Torque => Box::new(TorqueCounts { pbsnodes: config.counts.pbsnodes.clone(), timeout }),
        CountSourceKind::Static => Box::new(ConfiguredCounts),
    }
}

/// What the per-VO shares are made of, read from the batch system the
/// counts come from; `None` without `[[vo]]` (the config check refuses
/// `[[vo]]` with the other sources).
pub fn share_facts(config: &ProviderConfig, groups: &[NodeGroup]) -> Result<Option<Facts>, ProviderError> {
    if config.vos.is_empty() {
        return Ok(None);
    }
    match config.counts.source.get_ref() {
        CountSourceKind::Slurm => scontrol::share_facts(config, groups).map(Some),
        CountSourceKind::Torque => pbsnodes::share_facts(config, groups).map(Some),
        CountSourceKind::Cderd | CountSourceKind::Static => Ok(None),
    }
}

fn gres_map(config: &ProviderConfig) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for group in &config.groups {
        for dev in &group.devices {
            map.insert(dev.cder_type.clone(), config.counts.gres_name(&dev.cder_type));
        }
    }
    for (k, v) in &config.counts.gres {
        map.insert(k.clone(), v.clone());
    }
    map
}

#[cfg(test)]
mod tests {
    use super::walk::node_counts;
    use super::*;
    use std::path::Path;

    /// The lists both the GLUE provider and cder-slurm check
    /// (`allocator/request/testdata/gres_totals.txt`): the provider reads
    /// from scontrol the totals the plugin reads from slurm.conf. `gpu:4K`
    /// was an error here and 4096 there; now SLURM's 4096 to both.
    #[test]
    fn the_shared_gres_lists_read_as_the_plugin_reads_them() {
        let fixture = include_str!("../../../allocator/request/testdata/gres_totals.txt");
        let mut checked = 0;
        for line in fixture.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let (list, totals) = line.split_once('\t').unwrap();
            let g = parse_gres(list).unwrap_or_else(|e| panic!("{list}: {e}"));
            for total in totals.split(' ') {
                let (key, want) = total.split_once('=').unwrap();
                let (name, gres_type) = match key.split_once(':') {
                    None => (key, None),
                    Some((n, t)) => (n, Some(t)),
                };
                assert_eq!(gres_count(&g, name, gres_type), Some(want.parse().unwrap()), "{list}: {key}");
                checked += 1;
            }
        }
        assert!(checked >= 10, "{checked}");
        assert_eq!(gres_count(&parse_gres("gpu:4K").unwrap(), "gpu", None), Some(4096));
        // Past a u32 is no node's count: refused, not wrapped.
        assert!(parse_gres("gpu:4G").unwrap_err().contains("past"));
    }

    #[test]
    fn gres_lists_parse() {
        let g = parse_gres("gpu:tesla:2(S:0-1)").unwrap();
        assert_eq!(g, vec![Gres { name: "gpu".into(), gres_type: Some("tesla".into()), count: 2 }]);
        let g = parse_gres("gpu:tesla:1(IDX:0,2),gpu:k80:3,fpga:1").unwrap();
        assert_eq!(
            (gres_count(&g, "gpu", None), gres_count(&g, "gpu", Some("k80")), gres_count(&g, "fpga", None)),
            (Some(4), Some(3), Some(1))
        );
        assert_eq!(gres_count(&parse_gres("gpu").unwrap(), "gpu", None), Some(1));
        assert_eq!(gres_count(&parse_gres("gpu:a100").unwrap(), "gpu", Some("a100")), Some(1));
        assert!(parse_gres("(null)").unwrap().is_empty());
        assert!(parse_gres(":2").is_err());
        assert!(parse_gres("gpu:a:b:c").is_err());
    }

    #[test]
    fn scontrol_lines_parse_and_classify() {
        let out = b"NodeName=wn01 Arch=x86_64 CoresPerSocket=1 Gres=gpu:2 GresUsed=gpu:1(IDX:0) State=MIXED ThreadsPerCore=1\n\
NodeName=wn02 Gres=gpu:2(S:0) GresUsed=gpu:0(IDX:N/A) State=IDLE+DRAIN Reason=Xid 79 [root@2026-01-01]\n\
NodeName=wn03 Gres=gpu:2 State=IDLE* OS=Linux 6.1 #1 SMP\n";
        let nodes = parse_scontrol(out).unwrap();
        assert_eq!(nodes.len(), 3);
        assert!(nodes[0].busy() && !nodes[0].unavailable());
        assert_eq!(gres_count(nodes[0].gres_used.as_ref().unwrap(), "gpu", None), Some(1));
        assert!(nodes[2].gres_used.is_none());
        assert!(nodes[1].unavailable());
        assert!(nodes[2].not_responding && nodes[2].unavailable());
        assert!(parse_scontrol(b"Arch=x86_64 State=IDLE\n").is_err());
        let e = parse_scontrol(b"NodeName=wn01 Gres=gpu:\xff:2 State=IDLE\n").unwrap_err();
        assert!(e.to_string().contains("not valid UTF-8"), "{e}");
    }

    fn four_nodes(source: &str) -> Vec<NodeGroup> {
        let text = crate::config::tests::SAMPLE
            .replace("source = \"static\"", &format!("source = \"{source}\""))
            .replace("wn[01-16]", "wn[01-04]")
            .replace("used = 2\n", "");
        crate::site::node_groups(&ProviderConfig::parse(&text, Path::new("t.toml")).unwrap()).unwrap()
    }

    #[test]
    fn lrms_counts_past_u32_are_refused() {
        let slurm = SlurmCounts {
            scontrol: "scontrol".into(),
            gres: [("gpgpu".to_string(), "gpu".to_string())].into(),
            timeout: Duration::from_secs(1),
        };
        let groups = four_nodes("slurm");
        let line = |n: u32, gres: &str| format!("NodeName=wn0{n} Gres={gres} GresUsed=gpu:0 State=IDLE\n");
        let ok: String = (1..=4).map(|n| line(n, "gpu:2")).collect();
        let counts = slurm.counts_from_output(&groups, ok.as_bytes()).unwrap();
        assert_eq!(counts[0].devices["gpgpu"], Counts { total: 8, free: 8, used: 0, offline: 0 });
        // One node whose GRES items add up past u32.
        let one = ok.replace("wn01 Gres=gpu:2", "wn01 Gres=gpu:a:4294967295,gpu:b:1");
        let e = slurm.counts_from_output(&groups, one.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("node wn01: the gpu items of Gres= add up past 4294967295"), "{e}");
        assert_eq!(e.exit_code(), 1);
        // Each node fits, the group's sum does not.
        let many: String = (1..=4).map(|n| line(n, "gpu:2147483648")).collect();
        let e = slurm.counts_from_output(&groups, many.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("more total gpgpu devices than a count holds (at node \"wn02\")"), "{e}");

        let torque = TorqueCounts { pbsnodes: "pbsnodes".into(), timeout: Duration::from_secs(1) };
        let groups = four_nodes("torque");
        let xml = |gpus: &str| {
            format!(
                "<Data>{}</Data>",
                (1..=4)
                    .map(|n| format!("<Node><name>wn0{n}</name><state>free</state><gpus>{gpus}</gpus></Node>"))
                    .collect::<String>()
            )
        };
        assert_eq!(torque.counts_from_output(&groups, xml("2").as_bytes()).unwrap()[0].devices["gpgpu"].total, 8);
        let e = torque.counts_from_output(&groups, xml("4294967295").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("more total gpgpu devices than a count holds"), "{e}");
        assert!(torque
            .counts_from_output(&groups, xml("4294967296").as_bytes())
            .unwrap_err()
            .to_string()
            .contains("is not a count"));
    }

    #[test]
    fn node_counts_keep_used_and_offline_apart() {
        assert_eq!(node_counts(4, 1, false), Counts { total: 4, free: 3, used: 1, offline: 0 });
        assert_eq!(node_counts(4, 1, true), Counts { total: 4, free: 0, used: 1, offline: 3 });
        // A listing that claims more used than installed keeps the sum exact.
        assert_eq!(node_counts(2, 5, false), Counts { total: 2, free: 0, used: 2, offline: 0 });
    }

    #[test]
    fn pbsnodes_xml_parses() {
        let xml = b"<Data><Node><name>wn01</name><state>free</state><np>8</np><gpus>2</gpus><jobs>0/1.srv</jobs>\
<gpu_status>gpu[1]=gpu_id=0000:04:00.0;gpu_state=Exclusive;gpu_mode=Exclusive_Thread,gpu[0]=gpu_id=0000:03:00.0;gpu_state=Unallocated</gpu_status></Node>\
<Node><name>wn02</name><state>down,offline</state><gpus>2</gpus></Node>\
<Node><name>wn04</name><state>free</state><gpus>2</gpus><gpu_status>gpu[1]=gpu_mode=Prohibited;gpu_state=Unallocated,gpu[0]=gpu_mode=Default;gpu_state=Unallocated</gpu_status></Node>\
<Node><name>wn03</name><state>job-exclusive</state><gpus>4</gpus><jobs>0-7/2.srv</jobs></Node></Data>";
        let nodes = parse_pbsnodes(xml).unwrap();
        assert_eq!(nodes[0].gpus_used(), 1);
        assert!(nodes[0].has_jobs && !nodes[0].unavailable());
        assert!(nodes[1].unavailable());
        assert_eq!(nodes[3].gpus_used(), 4);
        assert_eq!((nodes[2].gpus_used(), nodes[2].gpus_prohibited), (0, 1));
        assert_eq!(nodes[0].gpus_prohibited, 0);
        assert!(parse_pbsnodes(b"pbsnodes: cannot connect to server").is_err());
        assert!(parse_pbsnodes(b"<Data><Node><name>x</name><gpus>two</gpus></Node></Data>").is_err());
    }

    #[test]
    fn commands_fail_clearly() {
        let e = run_command(Path::new("/nonexistent/scontrol"), &["show"], Duration::from_secs(5)).unwrap_err();
        assert!(e.to_string().contains("cannot run /nonexistent/scontrol show"), "{e}");
        let e = run_command(
            Path::new("sh"),
            &["-c", "echo 'slurm_load_node error: Unable to contact slurm controller' >&2; exit 1"],
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert!(e.to_string().contains("Unable to contact slurm controller"), "{e}");
        let out = run_command(Path::new("sh"), &["-c", "echo hello"], Duration::from_secs(5)).unwrap();
        assert_eq!(out, b"hello\n");
    }
}
