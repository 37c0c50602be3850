//! Per-VO ComputingShares from a real SLURM cluster (tests/src/cluster.rs:
//! three workers w1-w3 of two GPUs each). The partition `gpu-atlas`
//! (w1-w3) admits only the group `nogroup` (atlas's pool accounts here),
//! `gpu-cms` (w3) only `root` (cms's); `cder-glue-provider` on the head,
//! run as `nobody` (to whom SLURM hides gpu-cms unless asked `--all`), reads
//! `scontrol show partition`,
//! `show node` and `show job`, and publishes one share per VO with its own
//! free, used and per-job figures and a MappingPolicy `VO:<vo>`. The LDIF
//! goes into slapd with the CE's endpoint, and phase 1
//! (`cder-jdl list-match --vo`) offers each VO only its own share: a job
//! wanting 3 free GPUs matches for atlas and not for cms, and `--explain`
//! names the atlas share as closed to cms.
//!
//! The cluster has no slurmdbd (the harness runs `accounting_storage/none`),
//! so neither QOS limits (`GrpTRES`, `MaxTRESPerJob`) nor `AllowAccounts`
//! (slurmctld refuses every job: "account not known") work here: the VOs
//! are told apart by `AllowGroups`, and the shares differ by their
//! partitions' nodes and the VOs' jobs. The QOS arithmetic
//! is tested on recorded `scontrol show assoc_mgr flags=qos` output
//! (glue-provider/src/shares/slurm.rs).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cder_glue_provider::ldif;
use cder_tests::cluster::{require_cluster, Cluster, ClusterConfig};
use cder_tests::glue::{other_info, provider, slurm_ce_config};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::slurm::{serial, SlurmClient};
use cder_tests::twophase::cder_jdl;

const SERVICE: &str = "ce.example.org_ComputingElement";

/// The CE's own endpoint, as CREAM's provider publishes it: phase 1 names
/// each queue `ce.example.org:8443/cream-slurm-<queue>` from its URL.
fn endpoint_ldif() -> String {
    format!(
        "dn: GLUE2EndpointID=ce.example.org_org.glite.ce.CREAM,GLUE2ServiceID={SERVICE},GLUE2GroupID=resource,o=glue\n\
         objectClass: GLUE2Endpoint\nobjectClass: GLUE2ComputingEndpoint\nGLUE2EndpointID: ce.example.org_org.glite.ce.CREAM\n\
         GLUE2EndpointURL: https://ce.example.org:8443/ce-cream/services\nGLUE2EndpointInterfaceName: org.glite.ce.CREAM\n\
         GLUE2EndpointQualityLevel: production\nGLUE2EndpointHealthState: ok\nGLUE2EndpointServingState: production\n\
         GLUE2EndpointImplementationName: CREAM\nGLUE2EndpointServiceForeignKey: {SERVICE}\n\
         GLUE2ComputingEndpointComputingServiceForeignKey: {SERVICE}\n\n"
    )
}

/// Runs the provider on the head; the LDIF and each share's
/// (total, free, used, per node) by VO.
fn publish(cluster: &Cluster, config: &Path) -> (String, Vec<(String, [u32; 4])>) {
    // As an unprivileged user, as the BDII runs it: not in gpu-cms's AllowGroups.
    let out = cluster
        .head
        .command("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(provider())
        .arg("--config")
        .arg(config)
        .env("SLURM_CONF", cluster.slurm_conf())
        .output()
        .unwrap();
    assert!(out.status.success(), "cder-glue-provider: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let shares = ldif::parse(&text)
        .unwrap()
        .iter()
        .filter(|e| e.values("objectClass").any(|c| c == "GLUE2ComputingShare"))
        .map(|e| {
            let info = other_info(e);
            let n = |k: &str| info.get(k).unwrap_or_else(|| panic!("no {k} on {}", e.dn)).parse().unwrap();
            (
                e.values("GLUE2ShareID").next().unwrap().to_string(),
                [n("GPGPUTotalInstances"), n("GPGPUFreeInstances"), n("GPGPUUsedInstances"), n("GPGPUPerNode")],
            )
        })
        .collect();
    (text, shares)
}

fn list_match(slapd: &Slapd, jdl: &Path, vo: &str) -> (bool, String) {
    let out = Command::new(cder_jdl())
        .args(["list-match", "--live", "--bdii", &slapd.url(), "--vo", vo, "--explain"])
        .arg(jdl)
        .output()
        .unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn each_vo_sees_its_own_share_and_phase_1_honours_it() {
    if !require_cluster() || !require_slapd() {
        return;
    }
    let _g = serial();
    let cluster = Cluster::start(&ClusterConfig {
        extra_slurm_conf: "PartitionName=gpu-atlas Nodes=w[1-3] AllowGroups=nogroup MaxTime=INFINITE State=UP\n\
                           PartitionName=gpu-cms Nodes=w3 AllowGroups=root MaxTime=INFINITE State=UP\n"
            .into(),
        ..ClusterConfig::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let config = cluster.dir().join("glue-provider.toml");
    std::fs::write(
        &config,
        slurm_ce_config("")
            + "\n[[group]]\nid = \"ce.example.org_workers\"\nnodes = [\"w[1-3]\"]\nplatform = \"amd64\"\nmain_memory_mib = 1000\n\
               virtual_memory_mib = 1000\nos_name = \"Debian\"\nos_version = \"12\"\n\n\
               [[group.device]]\nmodel = \"Tesla K20m\"\ncount = 2\nmemory_mib = 4800\n\n\
               [[vo]]\nname = \"atlas\"\ngroups = [\"nogroup\"]\nqueues = [\"gpu-atlas\"]\n\n\
               [[vo]]\nname = \"cms\"\ngroups = [\"root\"]\nqueues = [\"gpu-atlas\", \"gpu-cms\"]\n",
    )
    .unwrap();
    let atlas = format!("gpu-atlas_atlas_{SERVICE}");
    let cms = format!("gpu-cms_cms_{SERVICE}");

    // gpu-atlas does not admit cms: one share each.
    let (_, shares) = publish(&cluster, &config);
    assert_eq!(shares, [(atlas.clone(), [6, 6, 0, 2]), (cms.clone(), [2, 2, 0, 2])], "idle");

    // A cms job (root's, group root) takes one of w3's GPUs: both shares lose a free GPU (w3 is
    // in both partitions), only cms's shows it used.
    let job = cluster.sbatch(&["-p", "gpu-cms", "--gpgpu-per-node=1"], "#!/bin/sh\nsleep 300\n").unwrap();
    cluster.wait_running(job, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    let (text, shares) = publish(&cluster, &config);
    assert_eq!(
        shares,
        [(atlas.clone(), [6, 5, 0, 2]), (cms.clone(), [2, 1, 1, 2])],
        "cms job running\n{}",
        cluster.scontrol(&["-d", "show", "job", "-o"]).unwrap_or_default()
    );
    let policies: Vec<String> = ldif::parse(&text)
        .unwrap()
        .iter()
        .filter(|e| e.values("objectClass").any(|c| c == "GLUE2MappingPolicy"))
        .map(|e| {
            format!(
                "{} {}",
                e.values("GLUE2MappingPolicyShareForeignKey").next().unwrap(),
                e.values("GLUE2PolicyRule").next().unwrap()
            )
        })
        .collect();
    assert_eq!(policies, [format!("{atlas} VO:atlas"), format!("{cms} VO:cms")]);
    // EGI's profile on the shares, with slurmctld's own figures: w3's 1-CPU job in gpu-cms.
    if cder_tests::glue::require_glue_validator() {
        let v = cder_tests::glue::glue_validator(&text, &[]);
        assert_eq!((v.errors, v.warnings), (0, 0), "per-VO shares, EGI profile\n{}\n{text}", v.output);
        let entries = ldif::parse(&text).unwrap();
        let share = entries.iter().find(|e| e.dn.starts_with(&format!("GLUE2ShareID={cms},"))).unwrap();
        let get = |a: &str| share.values(a).next().unwrap_or_else(|| panic!("no {a}")).to_string();
        assert_eq!(
            (get("GLUE2ComputingShareRunningJobs"), get("GLUE2ComputingShareWaitingJobs")),
            ("1".into(), "0".into())
        );
        assert_eq!(get("GLUE2ComputingShareUsedSlots"), "1");
        // MaxTime=INFINITE: no MaxWallTime, GLUE's unlimited as the default.
        assert!(share.values("GLUE2ComputingShareMaxWallTime").next().is_none());
        assert_eq!(get("GLUE2ComputingShareDefaultWallTime"), "999999999");
    }

    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&format!("{text}\n{}", endpoint_ldif())).unwrap_or_else(|e| panic!("{e}"));
    let jdl = cluster.dir().join("three.jdl");
    std::fs::write(
        &jdl,
        "[\n  Executable = \"train.sh\";\n  Requirements = other.GPGPUFreeInstances >= 3 && GPGPUVendor == \"Nvidia\";\n]\n",
    )
    .unwrap();
    let (ok, out) = list_match(&slapd, &jdl, "atlas");
    assert!(ok && out.contains("ce.example.org:8443/cream-slurm-gpu-atlas"), "atlas:\n{out}");
    assert!(!out.contains("cream-slurm-gpu-cms"), "atlas must not be offered cms's share:\n{out}");
    let (ok, out) = list_match(&slapd, &jdl, "cms");
    assert!(!ok, "cms has 1 free GPU in its share, not 3:\n{out}");
    assert!(
        out.contains("ce.example.org:8443/cream-slurm-gpu-cms") && out.contains("GPGPUFreeInstances >= 3 is false"),
        "cms:\n{out}"
    );
    assert!(
        out.contains(&format!("share {atlas} (queue gpu-atlas)")) && out.contains("not open to VO cms"),
        "cms:\n{out}"
    );
    // The same from the local index (the default path), refreshed from this BDII into a dir of its own.
    let index_dir = cluster.dir().join("index");
    let out = Command::new(cder_jdl())
        .args(["list-match", "--bdii", &slapd.url(), "--vo", "cms", "--explain", "--index-dir"])
        .arg(&index_dir)
        .arg(&jdl)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "from the index, cms still has 1 free GPU:\n{text}");
    assert!(
        text.contains(&format!("share {atlas} (queue gpu-atlas)")) && text.contains("not open to VO cms"),
        "from the index:\n{text}"
    );
    // The JDL's own VirtualOrganisation does the same as --vo.
    std::fs::write(
        &jdl,
        "[\n  Executable = \"train.sh\";\n  VirtualOrganisation = \"cms\";\n  Requirements = other.GPGPUFreeInstances >= 1;\n]\n",
    )
    .unwrap();
    let out =
        Command::new(cder_jdl()).args(["list-match", "--live", "--bdii", &slapd.url()]).arg(&jdl).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("cream-slurm-gpu-cms") && !text.contains("gpu-atlas"), "{text}");
}
