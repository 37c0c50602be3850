//! Cluster counts from the real LRMS: a real slurmctld/slurmd (node1: 4
//! GPUs, the cder plugins and cderd, from the SLURM harness) runs a job
//! holding one GPU; node2, a second group with another model, is configured
//! but has no slurmd (not responding). The provider reads `scontrol -d show
//! node -o` (Gres / GresUsed / State) and publishes two ExecutionEnvironments:
//! node1 4 total, 1 used, 3 free; node2 2 total, 2 offline. After `scontrol
//! update state=drain` node1's idle GPUs are offline too. The output loads
//! into slapd, and EGI's glue-validator finds neither error nor warning in it.

use std::time::Duration;

use cder_glue_provider::ldif;
use cder_request::gres::{self, Detail, ScontrolLine};
use cder_tests::glue::{
    assert_reads_back, glue_validator, other_info, publish, require_glue_validator, slurm_ce_config,
};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::slurm::{release, require_slurm, serial, workspace_root, SlurmCluster, SlurmConfig};

/// What the live scontrol printed, read with the one grammar the provider
/// and the plugins share (`cder_request::gres`): node1's `Gres=gpu:4` and
/// its `GresUsed=` holding the running job's one GPU, the job's
/// `GRES=gpu:1(IDX:n)` naming one of the node's GPUs (the same one where
/// `GresUsed=` names it) and its `TresPerNode=gres:gpu:1`. `CDER_GRES_CAPTURE=<dir>`
/// keeps the texts (the grammar's fixtures come from such a run).
fn the_grammar_reads_what_scontrol_printed(cluster: &SlurmCluster, job: u32) {
    let nodes = cluster.scontrol(&["-d", "show", "node", "-o"]).unwrap_or_else(|e| panic!("{e}"));
    let job_text = cluster.scontrol(&["show", "job", "-d", &job.to_string()]).unwrap_or_else(|e| panic!("{e}"));
    let job_line = cluster.scontrol(&["-o", "show", "job", "-d", &job.to_string()]).unwrap_or_else(|e| panic!("{e}"));
    if let Some(dir) = std::env::var_os("CDER_GRES_CAPTURE") {
        let dir = std::path::Path::new(&dir);
        std::fs::write(dir.join("show_node_d_o.txt"), &nodes).unwrap();
        std::fs::write(dir.join("show_job_d.txt"), &job_text).unwrap();
        std::fs::write(dir.join("show_job_d_o.txt"), &job_line).unwrap();
    }
    let node1 = nodes
        .lines()
        .map(ScontrolLine::parse)
        .find(|l| l.get("NodeName") == Some("node1"))
        .unwrap_or_else(|| panic!("no node1 in\n{nodes}"));
    let list = |key: &str| {
        let v = node1.get(key).unwrap_or_else(|| panic!("node1 has no {key}=\n{nodes}"));
        gres::parse_list(v).unwrap_or_else(|e| panic!("{key}={v}: {e}\n{nodes}"))
    };
    let total: u64 = list("Gres").iter().filter(|i| i.name == "gpu").map(|i| i.count).sum();
    assert_eq!(total, 4, "{nodes}");
    // 22.05 prints `GresUsed=gpu:1` here (no IDX without a topology);
    // where it names indices, they are the job's.
    let used = list("GresUsed");
    assert_eq!(used.iter().filter(|i| i.name == "gpu").map(|i| i.count).sum::<u64>(), 1, "{nodes}");
    let held: Vec<u32> = used
        .iter()
        .flat_map(|i| match &i.detail {
            Some(Detail::Indices(idx)) => idx.clone(),
            _ => Vec::new(),
        })
        .collect();
    for text in [&job_text, &job_line] {
        let details: Vec<&str> = text.lines().filter_map(|l| ScontrolLine::parse(l).get("GRES")).collect();
        assert_eq!(details.len(), 1, "{text}");
        let items = gres::parse_list(details[0]).unwrap_or_else(|e| panic!("GRES={}: {e}\n{text}", details[0]));
        assert_eq!(items.len(), 1, "{text}");
        assert_eq!((items[0].name.as_str(), items[0].count), ("gpu", 1), "{text}");
        let Some(Detail::Indices(idx)) = &items[0].detail else { panic!("GRES={}: no IDX list\n{text}", details[0]) };
        assert!(idx.len() == 1 && idx[0] < 4, "GRES={}: one of node1's 4 GPUs\n{text}", details[0]);
        assert!(held.is_empty() || &held == idx, "the node's used IDX is the job's\n{text}\n{nodes}");
        let tres = ScontrolLine::parse(text.lines().find(|l| l.contains("TresPerNode=")).unwrap_or_default());
        let per_node = tres.get("TresPerNode").unwrap_or_else(|| panic!("no TresPerNode=\n{text}"));
        let entries = gres::tres_entries(per_node);
        assert_eq!(entries.len(), 1, "TresPerNode={per_node}");
        assert_eq!(entries[0].item.as_ref().map(|i| i.count), Ok(1), "TresPerNode={per_node}");
    }
}

fn counts(text: &str, id: &str) -> ([String; 4], Vec<String>) {
    let entries = ldif::parse(text).unwrap();
    let ee = entries
        .iter()
        .find(|e| e.values("GLUE2ResourceID").any(|i| i == id))
        .unwrap_or_else(|| panic!("no EE {id} in {text}"));
    let info = other_info(ee);
    let gpus = ["GPGPUTotalInstances", "GPGPUFreeInstances", "GPGPUUsedInstances", "GPGPUOfflineInstances"]
        .map(|k| info[k].clone());
    let nodes = [
        "GLUE2ExecutionEnvironmentTotalInstances",
        "GLUE2ExecutionEnvironmentUsedInstances",
        "GLUE2ExecutionEnvironmentUnavailableInstances",
    ]
    .iter()
    .map(|a| ee.values(a).next().unwrap_or_default().to_string())
    .collect();
    (gpus, nodes)
}

/// The provider's config for node1 (4 GPUs) and node2 (2 GPUs), with
/// `counts_extra` in `[counts]`.
fn two_groups_config(counts_extra: &str) -> String {
    slurm_ce_config(counts_extra).replace("[service]", "cluster_id = \"ce.example.org\"\n\n[service]")
        + "\n[[group]]\nid = \"ce.example.org_node1\"\nnodes = [\"node1\"]\nplatform = \"amd64\"\nmain_memory_mib = 1000\n\
         virtual_memory_mib = 1000\nos_name = \"Debian\"\nos_version = \"12\"\n\n\
         [[group.device]]\nmodel = \"Tesla K20m\"\ncount = 4\nmemory_mib = 4800\n\n\
         [[group]]\nid = \"ce.example.org_node2\"\nnodes = [\"node2\"]\nplatform = \"amd64\"\nmain_memory_mib = 1000\n\
         virtual_memory_mib = 1000\nos_name = \"Debian\"\nos_version = \"12\"\n\n\
         [[group.device]]\nmodel = \"GeForce GTX 680\"\ncount = 2\nmemory_mib = 2048\n"
}

/// A SLURM client aimed at the test cluster, as the provider would run it
/// on a CE: the release's own (in its root), as a client speaks only its
/// release's protocol and two older ones.
fn client_wrapper(cluster: &SlurmCluster, dir: &std::path::Path, program: &str) -> std::path::PathBuf {
    let path = dir.join(program);
    let exec = match release().ok().and_then(|r| r.root.as_ref()) {
        Some(root) => format!(
            "'{}' '{}' / /usr/bin/{program}",
            workspace_root().join("deploy/slurm/in-root.sh").display(),
            root.display()
        ),
        None => program.to_string(),
    };
    std::fs::write(&path, format!("#!/bin/sh\nSLURM_CONF={} exec {exec} \"$@\"\n", cluster.slurm_conf().display()))
        .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

#[test]
fn slurm_gres_counts_are_published() {
    let _one_cluster = serial();
    if !require_slurm() || !require_slapd() {
        return;
    }
    // node2's slurmd port is one nothing listens on: at the shared SlurmdPort,
    // node1's slurmd (bound to every loopback address) would answer
    // slurmctld's pings for 127.0.0.2 and node2 would turn IDLE.
    let two_nodes = SlurmConfig {
        extra_slurm_conf: "NodeName=node2 NodeAddr=127.0.0.2 NodeHostname=node2 Port=1 CPUs=4 RealMemory=1000 Gres=gpu:2 State=UNKNOWN".into(),
        ..SlurmConfig::default()
    };
    let cluster = SlurmCluster::start(&two_nodes).unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let scontrol = client_wrapper(&cluster, dir.path(), "scontrol");
    let config = dir.path().join("glue-provider.toml");
    std::fs::write(&config, two_groups_config(&format!("scontrol = \"{}\"", scontrol.display()))).unwrap();

    let idle = publish(&config, &[]);
    assert_eq!(counts(&idle, "ce.example.org_node1").0, ["4", "4", "0", "0"].map(String::from), "{}", cluster.logs());
    // node2 never registered (no slurmd): its GPUs are offline, the node unavailable.
    let (gpus, nodes) = counts(&idle, "ce.example.org_node2");
    assert_eq!(gpus, ["2", "0", "0", "2"].map(String::from), "{idle}");
    assert_eq!(nodes, ["1", "0", "1"]);

    let job = cluster
        .sbatch(&["--gpgpu-per-node=1"], "#!/bin/sh\nsleep 120\n")
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    cluster.wait_running(job, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    let busy = publish(&config, &["attribute-extension", "class-extension"]);
    let (gpus, nodes) = counts(&busy, "ce.example.org_node1");
    assert_eq!(
        gpus,
        ["4", "3", "1", "0"].map(String::from),
        "{busy}\n{}",
        cluster.scontrol(&["-d", "show", "node", "-o"]).unwrap_or_default()
    );
    assert_eq!(nodes, ["1", "1", "0"]);
    the_grammar_reads_what_scontrol_printed(&cluster, job);

    // EGI's glue-validator on what the real SLURM gave: no error, no warning; the Manager's
    // CPUs are scontrol's own CPUTot= and Sockets= summed over both nodes.
    if require_glue_validator() {
        let verdict = glue_validator(&busy, &[]);
        assert_eq!((verdict.errors, verdict.warnings), (0, 0), "{}\n{busy}", verdict.output);
        let listing = cluster.scontrol(&["show", "node", "-o"]).unwrap_or_else(|e| panic!("{e}"));
        let sum = |key: &str| -> u32 {
            listing.split_whitespace().filter_map(|t| t.strip_prefix(key)?.strip_prefix('=')?.parse::<u32>().ok()).sum()
        };
        let entries = ldif::parse(&busy).unwrap();
        let manager = entries.iter().find(|e| e.dn.starts_with("GLUE2ManagerID=")).expect("the Manager");
        let published = |a: &str| manager.values(a).next().unwrap_or_default().parse::<u32>().unwrap_or(0);
        assert_eq!(published("GLUE2ComputingManagerTotalLogicalCPUs"), sum("CPUTot"), "{listing}");
        assert_eq!(published("GLUE2ComputingManagerTotalPhysicalCPUs"), sum("Sockets"), "{listing}");
        assert_eq!(published("GLUE2ComputingManagerTotalSlots"), sum("CPUTot"), "{listing}");
        // GLUE 1.3: the glue1 tests, the SubClusters' CPUs from the same listing.
        let glue13 = publish(&config, &["tagged-environment"]);
        let verdict = glue_validator(&glue13, &["-g", "glue1", "-s", "general"]);
        assert_eq!((verdict.errors, verdict.warnings), (0, 0), "{}\n{glue13}", verdict.output);
        let logical: u32 = ldif::parse(&glue13)
            .unwrap()
            .iter()
            .flat_map(|e| e.values("GlueSubClusterLogicalCPUs"))
            .map(|v| v.parse::<u32>().unwrap())
            .sum();
        assert_eq!(logical, sum("CPUTot"), "{listing}");
    }

    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&busy).unwrap_or_else(|e| panic!("{e}"));
    assert_reads_back(&slapd, &busy);

    // Draining the node: the running job keeps its GPU, the idle ones go offline.
    cluster
        .scontrol(&["update", "nodename=node1", "state=drain", "reason=glue-provider test"])
        .unwrap_or_else(|e| panic!("{e}"));
    let drained = publish(&config, &[]);
    let (gpus, nodes) = counts(&drained, "ce.example.org_node1");
    assert_eq!(gpus, ["4", "0", "1", "3"].map(String::from), "{drained}");
    assert_eq!(nodes, ["1", "0", "1"]);
    cluster.cancel_all();
}

/// Per-VO shares on a real SLURM while users name their jobs to look like
/// the facts the provider reads (`scontrol show job -o` prints the name
/// before them): one running and several held jobs of atlas (the group
/// `nogroup`) in `debug`, named to spell a bad count, another partition,
/// root's group, a running state, `|`, quotes, a line break, a long name.
/// The provider still publishes, with no warning, and each job counts where
/// it is: atlas 1 running (1 GPU) and every held job waiting in `debug`;
/// cms nothing, in `debug` or in its own `gpu-cms`.
#[test]
fn slurm_job_names_are_never_facts() {
    let _one_cluster = serial();
    if !require_slurm() {
        return;
    }
    let cfg = SlurmConfig {
        extra_slurm_conf: "NodeName=node2 NodeAddr=127.0.0.2 NodeHostname=node2 Port=1 CPUs=4 RealMemory=1000 Gres=gpu:2 State=UNKNOWN\n\
                           PartitionName=gpu-cms Nodes=node2 AllowGroups=root State=UP"
            .into(),
        ..SlurmConfig::default()
    };
    let cluster = SlurmCluster::start(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let scontrol = client_wrapper(&cluster, dir.path(), "scontrol");
    let squeue = client_wrapper(&cluster, dir.path(), "squeue");
    let config = dir.path().join("glue-provider.toml");
    std::fs::write(
        &config,
        two_groups_config(&format!("scontrol = \"{}\"\nsqueue = \"{}\"", scontrol.display(), squeue.display()))
            + "\n[[vo]]\nname = \"atlas\"\ngroups = [\"nogroup\"]\n\n[[vo]]\nname = \"cms\"\ngroups = [\"root\"]\n",
    )
    .unwrap();

    let forged = "x Partition=gpu-cms GroupId=root(0) JobState=RUNNING JOB_GRES=gpu:4 NumCPUs=4";
    let running = cluster
        .sbatch_as_user(&["--gpgpu-per-node=1", &format!("--job-name={forged}")], "#!/bin/sh\nsleep 300\n")
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    cluster.wait_running(running, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    let long = format!("l{}", "JobState=RUNNING ".repeat(12));
    let names = [
        "y NumCPUs=many".to_string(),
        forged.to_string(),
        "p JobState=RUNNING".to_string(),
        "q|RUNNING|gpu-cms|\"'=;Account=cms".to_string(),
        "n\nJobId=99 JobState=RUNNING Partition=gpu-cms GroupId=root(0) UserId=root(0)".to_string(),
        "JobID=1 State=RUNNING Partition=gpu-cms Account=cms QOS=normal UserName=root GroupName=root NumCPUs=x TimeLimit=x tres-alloc=gres/gpu=9".to_string(),
        long,
    ];
    let mut held = Vec::new();
    for name in &names {
        match cluster
            .sbatch_as_user(&["--hold", "--gpgpu-per-node=1", &format!("--job-name={name}")], "#!/bin/sh\nsleep 1\n")
        {
            Ok(id) => held.push(id),
            // SLURM may refuse a name (a line break); what it takes is what is tested.
            Err(e) => eprintln!("sbatch refused the name {name:?}: {e}"),
        }
    }
    assert!(held.len() >= 5, "SLURM took too few of the names: {held:?}");

    let out = cder_tests::glue::run_provider(&config, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cder-glue-provider failed: {stderr}");
    assert!(stderr.trim().is_empty(), "no job was unreadable: {stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    let entries = ldif::parse(&text).unwrap();
    let share = |id: &str| {
        let e = entries
            .iter()
            .find(|e| e.values("GLUE2ShareID").any(|i| i == id))
            .unwrap_or_else(|| panic!("no share {id} in\n{text}"));
        let value = |a: &str| e.values(a).next().unwrap_or_else(|| panic!("{id}: no {a}")).to_string();
        [
            value("GLUE2ComputingShareRunningJobs"),
            value("GLUE2ComputingShareWaitingJobs"),
            other_info(e)["GPGPUUsedInstances"].clone(),
        ]
    };
    let squeue_text = || {
        let out = cluster.command("squeue").args(["--all", "-o", "%i %T %P %u %g %j"]).output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
    };
    let held_n = held.len().to_string();
    assert_eq!(
        share("debug_atlas_ce.example.org_ComputingElement"),
        ["1".to_string(), held_n, "1".to_string()],
        "{text}\n{}",
        squeue_text()
    );
    assert_eq!(
        share("debug_cms_ce.example.org_ComputingElement"),
        ["0", "0", "0"].map(String::from),
        "{}",
        squeue_text()
    );
    assert_eq!(
        share("gpu-cms_cms_ce.example.org_ComputingElement"),
        ["0", "0", "0"].map(String::from),
        "{}",
        squeue_text()
    );
    cluster.cancel_all();
}
