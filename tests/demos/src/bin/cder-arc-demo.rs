//! Demo: a grid job through a real NorduGrid ARC CE onto SLURM's GPUs.
//!
//! Starts a one-node SLURM cluster (real slurmctld/slurmd, four fake GPUs,
//! cderd, both cder plugins) and an ARC CE in front of it (A-REX with its
//! REST interface and the SLURM backend, ARC's LDAP infosys with
//! `cder-glue-provider --arc-plugin` as a BDII plugin, a test CA), all on
//! 127.0.0.1 in temp dirs (tests/src/arc.rs). Then, as a grid user would:
//!
//! 1. `ldapsearch` ARC's infosys: cder's GPU keys on ARC's own EE;
//! 2. `cder-jdl list-match` against it: the CE, named by its REST URL;
//! 3. `cder-jdl submit --via arc --dry-run`: the xRSL with ENV/GPGPU;
//! 4. `cder-jdl submit --via arc`: the real arcsub; A-REX runs the RTE and
//!    sbatch (`--gres=gpu:2`);
//! 5. `arcstat` until Finished, `arcget`: the job's output, two GPUs.
//!
//! ```text
//! deploy/demo-arc.sh        # or: cargo run -p cder-tests --bin cder-arc-demo
//! ```

use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use cder_tests::arc::{cder_plugin, provider_config, require_arc, ArcCe, ArcOptions, ARC_EE};
use cder_tests::bdii::require_bdii;
use cder_tests::slurm::{require_slurm, SlurmCluster, SlurmConfig};
use cder_tests::twophase::{cder_jdl, provider};

fn main() -> ExitCode {
    if !require_slurm() || !require_bdii() || !require_arc(true) {
        return ExitCode::from(1);
    }
    match demo() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cder-arc-demo: {e}");
            ExitCode::from(1)
        }
    }
}

fn show(title: &str, cmd: &mut Command) -> Result<String, String> {
    println!("\n== {title}");
    let out =
        cmd.stdin(Stdio::null()).output().map_err(|e| format!("{title}: cannot run {:?}: {e}", cmd.get_program()))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        return Err(format!("{title}: exit status {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Retries `f` every 2 s for at most `timeout`.
fn until<T>(timeout: Duration, f: impl FnMut() -> Option<T>) -> Option<T> {
    cder_testkit::wait_for_value(timeout, Duration::from_secs(2), f)
}

fn demo() -> Result<(), String> {
    println!("== starting slurmctld, slurmd (4 fake GPUs) and cderd on 127.0.0.1 ...");
    let cluster = SlurmCluster::start(&SlurmConfig::default())?;
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let w = work.path();
    let toml = w.join("glue-provider.toml");
    std::fs::write(&toml, provider_config(&cluster.cderd_socket())).map_err(|e| e.to_string())?;
    println!(
        "== making a test CA and certificates, starting A-REX (REST), ARC's LDAP infosys with cder's BDII plugin ..."
    );
    let ce = ArcCe::start(&ArcOptions {
        slurm_conf: cluster.slurm_conf().to_path_buf(),
        rtes: vec!["ENV/GPGPU".into()],
        infosys: true,
        bdii_plugins: vec![cder_plugin(&provider(), &toml)],
    })?;
    let ldap = ce.ldap_url().ok_or("no infosys")?;
    println!("   CE {} (grid user {})", ce.rest_url, ce.user_dn);

    std::fs::write(
        w.join("probe.sh"),
        "#!/bin/sh\necho \"SLURM job $SLURM_JOB_ID sees CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\"\n",
    )
    .map_err(|e| e.to_string())?;
    let jdl = w.join("job.jdl");
    std::fs::write(
        &jdl,
        "[ Executable = \"probe.sh\"; StdOutput = \"out.txt\"; OutputSandbox = { \"out.txt\" };\n  GPGPUPerNode = 2; Requirements = GPGPUModel == \"Tesla K20m\" && GPGPUFreeInstances >= 2 ]\n",
    )
    .map_err(|e| e.to_string())?;
    println!("\n== the grid user's job ({}):\n{}", jdl.display(), std::fs::read_to_string(&jdl).unwrap_or_default());

    println!("== waiting for ARC's infosys to publish the CE (A-REX's infoprovider, then bdii-update) ...");
    until(Duration::from_secs(150), || {
        // --max-age 0: each try checks the infosys's cycle (UpdateStats) first.
        let out = Command::new(cder_jdl())
            .args(["list-match", "--max-age", "0", "--bdii", &ldap])
            .arg(&jdl)
            .env("CDER_INDEX_DIR", w.join("index"))
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status.success().then_some(())
    })
    .ok_or_else(|| format!("ARC's infosys never showed the CE's GPUs\n{}", ce.logs()))?;
    show(
        &format!("ldapsearch {ldap}: ARC's own ExecutionEnvironment, with cder's keys added by the plugin"),
        Command::new("ldapsearch").args([
            "-x",
            "-LLL",
            "-o",
            "ldif-wrap=no",
            "-H",
            &ldap,
            "-b",
            "o=glue",
            &format!("(GLUE2ResourceID={ARC_EE})"),
            "GLUE2ResourceID",
            "GLUE2EntityOtherInfo",
        ]),
    )?;
    show(
        "cder-jdl list-match (phase 1) against ARC's LDAP port",
        Command::new(cder_jdl()).args(["list-match", "--bdii", &ldap]).arg(&jdl).env("CDER_INDEX_DIR", w.join("index")),
    )?;
    show(
        "cder-jdl submit --via arc --dry-run: the xRSL arcsub gets",
        Command::new(cder_jdl())
            .args(["submit", "--bdii", &ldap, "--via", "arc", "--dry-run"])
            .arg(&jdl)
            .env("CDER_INDEX_DIR", w.join("index")),
    )?;
    let out = show(
        "cder-jdl submit --via arc: the real arcsub",
        ce.client(cder_jdl()).args(["submit", "--bdii", &ldap, "--via", "arc"]).arg(&jdl),
    )?;
    let job_id = out.trim().to_string();
    let arex_id = ArcCe::local_id(&job_id).to_string();

    println!("\n== A-REX runs ENV/GPGPU at stage 0 and sbatch; the batch script's resource lines:");
    let slurm_id = until(Duration::from_secs(60), || ce.slurm_id(&arex_id))
        .ok_or_else(|| format!("A-REX never submitted the job\n{}", ce.job_errors(&arex_id)))?;
    for line in ce
        .job_errors(&arex_id)
        .lines()
        .filter(|l| l.starts_with("#SBATCH") && (l.contains("gres") || l.contains("-p ")))
    {
        println!("   {line}");
    }
    let done = cluster.wait_job(slurm_id, Duration::from_secs(60))?;
    println!(
        "   SLURM job {slurm_id}: {} TresPerNode={}",
        done.state,
        done.fields.get("TresPerNode").map(String::as_str).unwrap_or("?")
    );

    println!("\n== arcstat until ARC reports the job Finished ...");
    until(Duration::from_secs(150), || {
        let out = ce.client("arcstat").arg(&job_id).output().ok()?;
        String::from_utf8_lossy(&out.stdout).contains("State: Finished").then_some(())
    })
    .ok_or_else(|| format!("arcstat never said Finished\n{}", ce.job_errors(&arex_id)))?;
    let dl = w.join("download");
    std::fs::create_dir_all(&dl).map_err(|e| e.to_string())?;
    show("arcget: the job's output back to the grid user", ce.client("arcget").arg("-D").arg(&dl).arg(&job_id))?;
    let output = std::fs::read_to_string(dl.join(&arex_id).join("out.txt")).map_err(|e| format!("out.txt: {e}"))?;
    println!("\n== out.txt:\n{output}");
    Ok(())
}
