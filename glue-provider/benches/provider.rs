//! `cargo bench -p cder-glue-provider --bench provider`
//!
//! 1. Bytes of LDIF each strategy adds for the seed thesis's sample
//!    (Table 3.2: 32 GeForce GTS 450s on 16 nodes, 2 per node, 30 free),
//!    beside the thesis's Table 3.3 figures, with the ratio.
//! 2. The provider binary's run time for one node (static counts, and a
//!    real cderd with the node's inventory), and for a 1,000-node cluster in
//!    8 groups counted from `scontrol -d show node -o`, each beside a
//!    reference measured in the same run: starting a trivial process
//!    (`/bin/true`), one `status` round trip to cderd, and running the LRMS
//!    query alone (a script that prints the same 1,000 scontrol lines), so
//!    the ratio is the provider's own cost. cderd is the release build next
//!    to this benchmark (built with `cargo build --release -p cderd` if missing).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cder_glue_provider::config::ProviderConfig;
use cder_glue_provider::ldif::{self, Entry};
use cder_glue_provider::sources::{self, StaticVirtual};
use cder_glue_provider::strategy::{self, Strategy};

const BIN: &str = env!("CARGO_BIN_EXE_cder-glue-provider");

/// Table 3.2's sample, as a provider config.
const TABLE_3_2: &str = r#"[site]
computing_service_id = "ce.example.org_ComputingElement"
computing_manager_id = "ce.example.org_ComputingElement_Manager"
ce_unique_id = "ce.example.org:8443/cream-pbs-gpgpu"
cluster_id = "ce.example.org"

[counts]
source = "static"

[[group]]
id = "ce.example.org_gts450"
nodes = ["wn[01-16]"]
platform = "amd64"
main_memory_mib = 16384
virtual_memory_mib = 20480
os_name = "CentOS"
os_version = "7.9"
physical_cpus = 2
logical_cpus = 16

[[group.device]]
model = "GTS 450"
count = 2
memory_mib = 1024
compute_capability = "2.1"
multiprocessors = 4
cores_per_mp = 48
cores = 192
clock_mhz = 1660
ecc = false
used = 2
"#;

/// Table 3.3 (bytes).
const THESIS: [(&str, Option<u64>); 5] = [
    ("tagged-environment (GLUE 1.3)", Some(800)),
    ("GLUE 2.0 tags (AppEnv per tag)", Some(10500)),
    ("attribute-extension", Some(800)),
    ("class-extension", Some(4800)),
    ("hybrid", None),
];

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let mut report = String::new();
    bytes_per_strategy(&mut report);
    run_times(dir.path(), &mut report);
    print!("{report}");
}

fn render(config: &ProviderConfig, strategies: &[Strategy]) -> Vec<Entry> {
    let counts = sources::from_config(config);
    let snap = cder_glue_provider::snapshot(config, counts.as_ref(), &StaticVirtual::default(), 1_795_291_140).unwrap();
    strategy::render(config, &snap, strategies).unwrap()
}

fn bytes_per_strategy(report: &mut String) {
    let config = ProviderConfig::parse(TABLE_3_2, Path::new("table-3.2.toml")).unwrap();
    let size = |entries: &[Entry]| ldif::write(entries).len() as u64;
    // The bare ExecutionEnvironment every site publishes anyway.
    let baseline = size(&render(&config, &[]));
    let attribute = size(&render(&config, &[Strategy::AttributeExtension])) - baseline;
    let class = size(&render(&config, &[Strategy::ClassExtension])) - baseline;
    let hybrid = size(&render(&config, &[Strategy::Hybrid])) - baseline;
    // GLUE 1.3: the RunTimeEnvironment values (the SubCluster exists anyway).
    let tagged_entries = render(&config, &[Strategy::TaggedEnvironment]);
    let tags: Vec<&str> =
        tagged_entries.iter().flat_map(|e| e.values("GlueHostApplicationSoftwareRunTimeEnvironment")).collect();
    let tagged: u64 = tags
        .iter()
        .map(|t| ldif::write(&[tag_line(t)]).len() as u64 - ldif::write(&[Entry::new("")]).len() as u64)
        .sum();
    // GLUE 2.0 rendering of the same tags, one ApplicationEnvironment each,
    // as the UMD GLUE 2.0 provider converts GLUE 1.3 tags (our AppEnv shape).
    let glue2_tags: u64 =
        tags.iter().map(|t| ldif::write(&[tag_application_environment(&config, t)]).len() as u64).sum();
    let keys = tags.len() - 1; // minus the NvidiaGPGPU marker tag
    let measured = [tagged, glue2_tags, attribute, class, hybrid];
    let _ = writeln!(report, "## LDIF bytes per strategy, Table 3.2 sample (32 GTS 450, 16 nodes × 2, 30 free)\n");
    let _ = writeln!(report, "{keys} keys published (Table 3.2 lists 12; cder adds UsedInstances and OfflineInstances). Bare ExecutionEnvironment: {baseline} bytes.\n");
    let _ = writeln!(report, "| strategy | cder bytes | bytes/key | thesis Table 3.3 | cder / thesis |");
    let _ = writeln!(report, "|---|---:|---:|---:|---:|");
    for ((name, thesis), bytes) in THESIS.iter().zip(measured) {
        let per_key = bytes as f64 / keys as f64;
        let (t, ratio) = match thesis {
            Some(t) => (t.to_string(), format!("{:.2}", bytes as f64 / *t as f64)),
            None => ("—".into(), "—".into()),
        };
        let _ = writeln!(report, "| {name} | {bytes} | {per_key:.0} | {t} | {ratio} |");
    }
    let _ = writeln!(report);
}

fn tag_line(tag: &str) -> Entry {
    let mut e = Entry::new("");
    e.push("GlueHostApplicationSoftwareRunTimeEnvironment", tag);
    e
}

fn tag_application_environment(config: &ProviderConfig, tag: &str) -> Entry {
    let manager = config.site.computing_manager_id.get_ref();
    let service = config.site.computing_service_id.get_ref();
    let id = format!("{manager}_{tag}");
    let mut e =
        Entry::new(format!("GLUE2ApplicationEnvironmentID={id},GLUE2ServiceID={service},{}", strategy::GLUE2_SUFFIX));
    e.push("objectClass", "GLUE2ApplicationEnvironment");
    e.push("GLUE2ApplicationEnvironmentID", id);
    e.push("GLUE2EntityCreationTime", strategy::glue_time(1_795_291_140));
    e.push("GLUE2EntityValidity", "600");
    e.push("GLUE2ApplicationEnvironmentAppName", tag);
    e.push("GLUE2ApplicationEnvironmentState", "installednotverified");
    e.push("GLUE2ApplicationEnvironmentComputingManagerForeignKey", manager.clone());
    e
}

/// Median wall time of `runs` runs of `cmd` (stdout discarded, must succeed).
fn median(runs: usize, mut cmd: impl FnMut() -> Command) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            let status = cmd().stdout(Stdio::null()).status().unwrap();
            assert!(status.success());
            start.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn cluster_config(dir: &Path, scontrol: &Path) -> PathBuf {
    let models = [
        "Tesla K20m",
        "Tesla K40m",
        "Tesla K80",
        "Tesla P100",
        "Tesla V100",
        "A100-SXM4-40GB",
        "GeForce GTX 1080",
        "GeForce RTX 2080 Ti",
    ];
    let mut text = format!(
        "[site]\ncomputing_service_id = \"ce.example.org_ComputingElement\"\ncomputing_manager_id = \"ce.example.org_ComputingElement_Manager\"\nce_unique_id = \"ce.example.org:8443/cream-slurm-gpgpu\"\ncluster_id = \"ce.example.org\"\n\n[counts]\nsource = \"slurm\"\nscontrol = \"{}\"\n",
        scontrol.display()
    );
    for (g, model) in models.iter().enumerate() {
        let _ = write!(
            text,
            "\n[[group]]\nid = \"ce.example.org_g{g}\"\nnodes = [\"g{g}n[001-125]\"]\nplatform = \"amd64\"\nmain_memory_mib = 131072\nvirtual_memory_mib = 131072\nos_name = \"Debian\"\nos_version = \"12\"\n\n[[group.device]]\nmodel = \"{model}\"\ncount = {}\nmemory_mib = 16384\ncompute_capability = \"7.0\"\n",
            g % 4 + 1
        );
    }
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn fake_scontrol(dir: &Path) -> PathBuf {
    let mut lines = String::new();
    for g in 0..8 {
        for n in 1..=125 {
            let gpus = g % 4 + 1;
            let used = n % (gpus + 1);
            let state = if n % 50 == 0 {
                "IDLE+DRAIN"
            } else if used > 0 {
                "MIXED"
            } else {
                "IDLE"
            };
            let _ = writeln!(
                lines,
                "NodeName=g{g}n{n:03} Arch=x86_64 CoresPerSocket=16 CPUAlloc=0 CPUTot=32 CPULoad=0.01 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:{gpus}(S:0-1) GresUsed=gpu:{used}(IDX:N/A) NodeAddr=g{g}n{n:03} NodeHostName=g{g}n{n:03} RealMemory=131072 Sockets=2 Boards=1 State={state} ThreadsPerCore=2 Partitions=gpu"
            );
        }
    }
    let data = dir.join("scontrol-show-node.txt");
    std::fs::write(&data, lines).unwrap();
    let script = dir.join("scontrol");
    std::fs::write(&script, format!("#!/bin/sh\nexec cat {}\n", data.display())).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

/// The provider against a real cderd (median), and one `status` round trip.
fn cderd_times(dir: &Path, runs: usize) -> Option<(Duration, Duration)> {
    let cderd = match cder_testkit::workspace_binary("cderd", "cderd") {
        Ok(path) => path,
        Err(e) => {
            eprintln!("skipping the cderd case: {e}");
            return None;
        }
    };
    let socket = dir.join("cderd.sock");
    let mut node = format!("[node]\nsocket = \"{}\"\nstate_dir = \"{}\"\n\n[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n", socket.display(), dir.join("state").display());
    for i in 0..4 {
        let _ = write!(node, "\n[[cder.device]]\nindex = {i}\nmodel = \"Tesla K20m\"\nmemory_mib = 4800\ncompute_capability = \"3.5\"\nmultiprocessors = 13\ncores_per_mp = 192\nclock_mhz = 706\necc = true\npath = \"/dev/nvidia{i}\"\n");
    }
    let node_cfg = dir.join("cder.toml");
    std::fs::write(&node_cfg, node).unwrap();
    let mut daemon = cder_testkit::TestNode::new(&cderd, &node_cfg, &socket, dir.join("cderd.log"));
    if let Err(e) = daemon.try_start(Duration::from_secs(20)) {
        eprintln!("skipping the cderd case: {e}");
        return None;
    }
    let connect = || cder_protocol::Client::connect(&socket, Duration::from_secs(5));
    let provider_cfg = dir.join("cderd-provider.toml");
    std::fs::write(
        &provider_cfg,
        format!(
            "[site]\ncomputing_service_id = \"wn01_ComputingElement\"\ncomputing_manager_id = \"wn01_Manager\"\nce_unique_id = \"wn01:8443/cream\"\ncder_config = \"{}\"\n\n[counts]\nsource = \"cderd\"\nsocket = \"{}\"\n\n[[group]]\nid = \"wn01\"\nnodes = [\"wn01\"]\nplatform = \"amd64\"\nmain_memory_mib = 65536\ninventory = true\n",
            node_cfg.display(),
            socket.display()
        ),
    )
    .unwrap();
    let provider = median(runs, || {
        let mut c = Command::new(BIN);
        c.arg("--config").arg(&provider_cfg);
        c
    });
    let mut trips: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            connect().and_then(|mut c| c.status()).expect("cderd status");
            start.elapsed()
        })
        .collect();
    trips.sort();
    Some((provider, trips[runs / 2]))
}

fn run_times(dir: &Path, report: &mut String) {
    let one = dir.join("one.toml");
    std::fs::write(&one, TABLE_3_2.replace("wn[01-16]", "wn01").replace("used = 2", "used = 1")).unwrap();
    let scontrol = fake_scontrol(dir);
    let cluster = cluster_config(dir, &scontrol);
    let runs = 21;
    let spawn = median(runs, || Command::new("/bin/true"));
    let single = median(runs, || {
        let mut c = Command::new(BIN);
        c.arg("--config").arg(&one);
        c
    });
    let query = median(runs, || Command::new(&scontrol));
    let whole = median(runs, || {
        let mut c = Command::new(BIN);
        c.arg("--config").arg(&cluster);
        c
    });
    let all = median(runs, || {
        let mut c = Command::new(BIN);
        c.arg("--config")
            .arg(&cluster)
            .args(["--strategy", "attribute-extension,class-extension,hybrid,tagged-environment"]);
        c
    });
    let out = Command::new(BIN).arg("--config").arg(&cluster).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ees = ldif::parse(&String::from_utf8(out.stdout).unwrap()).unwrap().len();
    assert_eq!(ees, 8);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let _ = writeln!(report, "## Provider run time (median of {runs}, wall clock, this machine)\n");
    let _ = writeln!(report, "| case | provider | reference | ratio |");
    let _ = writeln!(report, "|---|---:|---:|---:|");
    let _ = writeln!(
        report,
        "| 1 node, static counts, attribute-extension | {:.1} ms | /bin/true {:.1} ms | {:.1} |",
        ms(single),
        ms(spawn),
        ms(single) / ms(spawn)
    );
    if let Some((with_cderd, round_trip)) = cderd_times(dir, runs) {
        let _ = writeln!(
            report,
            "| 1 node, cderd + inventory (4 GPUs), attribute-extension | {:.1} ms | /bin/true + one cderd status {:.1} ms | {:.1} |",
            ms(with_cderd),
            ms(spawn + round_trip),
            ms(with_cderd) / ms(spawn + round_trip)
        );
    }
    let _ = writeln!(
        report,
        "| 1,000 nodes / 8 groups, SLURM, attribute-extension | {:.1} ms | scontrol query alone {:.1} ms | {:.1} |",
        ms(whole),
        ms(query),
        ms(whole) / ms(query)
    );
    let _ = writeln!(
        report,
        "| 1,000 nodes / 8 groups, SLURM, all four strategies | {:.1} ms | scontrol query alone {:.1} ms | {:.1} |",
        ms(all),
        ms(query),
        ms(all) / ms(query)
    );
}
