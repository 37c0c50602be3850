//! The CE side from a JDL: `cder-jdl lrms-attrs --jdl`. BLAH's drop-ins,
//! invoked exactly as BLAH invokes them, are tests/tests/blah_dropins.rs.

use std::process::{Command, Output};

use cder_tests::twophase::cder_jdl;

fn lines(out: &Output) -> Vec<String> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn lrms_attrs_from_a_jdl_names_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let jdl = dir.path().join("job.jdl");
    std::fs::write(
        &jdl,
        "[\n  Executable = \"x\";\n  GPGPUPerNode = 2;\n  VirtualGPGPUPerNode = 1;\n  VirtualGPGPUType = \"VCL\";\n]\n",
    )
    .unwrap();
    let out = Command::new(cder_jdl())
        .args(["lrms-attrs", "--lrms", "pbs", "--pbs-gpus", "maui", "--jdl"])
        .arg(&jdl)
        .output()
        .unwrap();
    assert_eq!(
        lines(&out),
        [
            "#PBS -l nodes=1",
            "#PBS -W x=GRES:gpus@2",
            "#PBS -l other=cder:gpgpu:2",
            "#PBS -v VirtualGPGPUPerNode=1,VirtualGPGPUMethod=VCL",
            "export GPGPUPerNode=2",
            "export VirtualGPGPUPerNode=1",
            "export VirtualGPGPUMethod=VCL"
        ]
    );
    std::fs::write(&jdl, "[\n  Executable = \"x\";\n  GPGPUPerNode = -1;\n]\n").unwrap();
    let out = Command::new(cder_jdl()).args(["lrms-attrs", "--lrms", "slurm", "--jdl"]).arg(&jdl).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:3:3: GPGPUPerNode", jdl.display())), "{err}");
}

#[test]
fn lrms_attrs_caps_the_vgpgpu_total_and_reads_htcondor_keys() {
    let dir = tempfile::tempdir().unwrap();
    let jdl = dir.path().join("job.jdl");
    std::fs::write(&jdl, "[\n  Executable = \"x\";\n  VirtualGPGPUPerNode = 4096;\n  CPUNumber = 1048576;\n]\n")
        .unwrap();
    let out = Command::new(cder_jdl()).args(["lrms-attrs", "--lrms", "slurm", "--jdl"]).arg(&jdl).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("VirtualGPGPUPerNode"));
    std::fs::write(&jdl, "[\n  Executable = \"x\";\n  RequestGPUs = 2;\n  gpus_minimum_capability = 8.0;\n]\n")
        .unwrap();
    let out = Command::new(cder_jdl()).args(["lrms-attrs", "--lrms", "slurm", "--jdl"]).arg(&jdl).output().unwrap();
    assert_eq!(
        lines(&out),
        ["#SBATCH --gres=gpu:2", "export GPGPUPerNode=2", "export CDER_GPUS_MINIMUM_CAPABILITY=8.0"]
    );
}
