//! Inputs the fuzz targets (fuzz/, docs/fuzzing.md) found or were written
//! for, through the provider's public API: each must be refused with an
//! error that names the key or node, not panic, wrap or exhaust memory.

use std::path::Path;
use std::time::Duration;

use cder_glue_provider::site::node_groups;
use cder_glue_provider::sources::{SlurmCounts, TorqueCounts};
use cder_glue_provider::ProviderConfig;

const CONFIG: &str = r#"[site]
computing_service_id = "svc"
computing_manager_id = "mgr"
ce_unique_id = "ce:8443/cream-slurm-gpgpu"

[counts]
source = "SOURCE"

[[group]]
id = "g"
nodes = ["NODES"]
platform = "amd64"
main_memory_mib = 1024

[[group.device]]
model = "Tesla K20m"
count = COUNT
memory_mib = 4800
"#;

fn config(source: &str, nodes: &str, count: &str) -> String {
    CONFIG.replace("SOURCE", source).replace("NODES", nodes).replace("COUNT", count)
}

fn parse(text: &str) -> Result<ProviderConfig, cder_model::ConfigError> {
    ProviderConfig::parse(text, Path::new("glue-provider.toml"))
}

/// glue_config: a 21-byte host list naming 10^10 hosts (nested ranges
/// multiply) ran the provider out of memory; it is now refused.
#[test]
fn nested_host_ranges_are_bounded() {
    let e = parse(&config("slurm", "r[0-99999]n[0-99999]", "2")).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("group.nodes"), "{e}");
    assert_eq!(e.line, Some(11), "{e}");
    assert!(e.message.contains("names more than 100000 hosts"), "{e}");
    let lists = (0..3).map(|i| format!("h{i}x[0-49999]")).collect::<Vec<_>>().join("\", \"");
    let e = parse(&config("slurm", &lists, "2")).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("group.nodes"), "{e}");
}

/// Static counts: count × nodes past u32 wrapped in release builds.
#[test]
fn static_totals_past_u32_are_refused() {
    let e = parse(&config("static", "wn[01-16]", "4294967295")).unwrap_err();
    assert_eq!((e.key.as_deref(), e.line), (Some("group.device.count"), Some(16)), "{e}");
    assert!(e.message.contains("out of range"), "{e}");
}

/// glue_lrms: GRES items and per-node counts that add up past u32.
#[test]
fn lrms_sums_past_u32_are_refused() {
    let groups = node_groups(&parse(&config("slurm", "wn[01-02]", "2")).unwrap()).unwrap();
    let slurm = SlurmCounts {
        scontrol: "scontrol".into(),
        gres: [("gpgpu".to_string(), "gpu".to_string())].into(),
        timeout: Duration::from_secs(1),
    };
    let one_node = b"NodeName=wn01 Gres=gpu:x:4294967295,gpu:y:1 GresUsed=gpu:0 State=IDLE\nNodeName=wn02 Gres=gpu:2 GresUsed=gpu:0 State=IDLE\n";
    let e = slurm.counts_from_output(&groups, one_node).unwrap_err();
    assert!(e.to_string().contains("node wn01: the gpu items of Gres= add up past"), "{e}");
    let two_nodes = b"NodeName=wn01 Gres=gpu:4294967295 GresUsed=gpu:4294967295 State=ALLOCATED\nNodeName=wn02 Gres=gpu:1 GresUsed=gpu:1 State=ALLOCATED\n";
    let e = slurm.counts_from_output(&groups, two_nodes).unwrap_err();
    assert!(e.to_string().contains("more total gpgpu devices than a count holds (at node \"wn02\")"), "{e}");

    let groups = node_groups(&parse(&config("torque", "wn[01-02]", "2")).unwrap()).unwrap();
    let torque = TorqueCounts { pbsnodes: "pbsnodes".into(), timeout: Duration::from_secs(1) };
    let xml = b"<Data><Node><name>wn01</name><state>free</state><gpus>4294967295</gpus></Node><Node><name>wn02</name><state>down</state><gpus>1</gpus></Node></Data>";
    let e = torque.counts_from_output(&groups, xml).unwrap_err();
    assert!(e.to_string().contains("more total gpgpu devices than a count holds"), "{e}");
    assert_eq!(e.exit_code(), 1);
}
