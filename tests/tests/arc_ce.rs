//! GPU jobs end to end on a real NorduGrid ARC CE (tests/src/arc.rs): a grid
//! user's JDL with `GPGPUPerNode = 2` goes `cder-jdl list-match` against
//! ARC's own LDAP infosys (where `cder-glue-provider --arc-plugin`, a BDII
//! plugin, added the GPU keys to ARC's ExecutionEnvironment) → `cder-jdl
//! submit --via arc` → the real `arcsub` → A-REX (REST) → stage 0 runs
//! deploy/arc/ENV/GPGPU → `sbatch --gres=gpu:2` → slurmctld/slurmd with
//! both cder plugins and cderd → the job sees exactly 2 devices → `arcstat`
//! says Finished → `arcget` returns its output.
//!
//! Real components only (A-REX, arched, ARC's slapd/bdii-update, slurmctld,
//! slurmd, cderd, arcsub/arcstat/arcget); the GPUs are fake character
//! devices (tests/src/slurm.rs), as everywhere without NVIDIA hardware.
//! Waits are bounded; A-REX is set to poll every 2 s, but its REST status
//! and the infosys follow its infoprovider, which runs once a minute.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cder_tests::arc::{cder_plugin, provider_config, require_arc, ArcCe, ArcOptions, ARC_EE};
use cder_tests::bdii::require_bdii;
use cder_tests::slurm::{require_slurm, serial, SlurmCluster, SlurmConfig};
use cder_tests::twophase::{cder_jdl, index_env, provider};

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn secs(t: Instant, t0: Instant) -> f64 {
    t.duration_since(t0).as_secs_f64()
}

// Polls `f` every `every` until it gives `Some`, at most `timeout`.
use cder_testkit::wait_for_value as poll;

#[test]
fn a_gpgpu_job_goes_through_arc_to_slurm_and_sees_two_devices() {
    if !require_slurm() || !require_bdii() || !require_arc(true) {
        return;
    }
    let _serial = serial();
    // Licences so that a vGPGPU job is accepted (no registry runs here: it
    // is only submitted, to see what SLURM counts).
    let config = SlurmConfig { extra_slurm_conf: "Licenses=vgpgpu:8\n".into(), ..SlurmConfig::default() };
    let cluster = SlurmCluster::start(&config).unwrap_or_else(|e| panic!("{e}"));
    let work = tempfile::tempdir().unwrap();
    let w = work.path();

    // cder's provider as a BDII plugin of ARC's infosys: counts from cderd.
    let toml = w.join("glue-provider.toml");
    std::fs::write(&toml, provider_config(&cluster.cderd_socket())).unwrap();
    let plugin = cder_plugin(&provider(), &toml);
    let check =
        Command::new(provider()).args(["--config", &toml.display().to_string(), "--arc-plugin"]).output().unwrap();
    assert!(check.status.success(), "the plugin itself fails: {}", text(&check));

    let t_start = Instant::now();
    let ce = ArcCe::start(&ArcOptions {
        slurm_conf: cluster.slurm_conf().to_path_buf(),
        rtes: vec!["ENV/GPGPU".into(), "ENV/VGPGPU".into()],
        infosys: true,
        bdii_plugins: vec![plugin],
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let t_ce = Instant::now();
    let ldap = ce.ldap_url().unwrap();

    std::fs::write(w.join("probe.sh"), "#!/bin/sh\necho \"CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\"\necho \"SLURM_JOB_ID=$SLURM_JOB_ID\"\nsleep 20\n").unwrap();
    let jdl = w.join("job.jdl");
    std::fs::write(
        &jdl,
        "[ Executable = \"probe.sh\"; StdOutput = \"out.txt\"; StdError = \"err.txt\"; OutputSandbox = { \"out.txt\", \"err.txt\" };\n  \
         GPGPUPerNode = 2; Requirements = GPGPUModel == \"Tesla K20m\" && GPGPUFreeInstances >= 2 ]\n",
    )
    .unwrap();

    // Discovery: ARC's infosys publishes its GLUE 2.0 tree once its
    // infoprovider has run; the plugin's keys ride on ARC's own EE.
    let list_match = || {
        Command::new(cder_jdl())
            .envs(index_env(work.path()))
            .args(["list-match", "--bdii", &ldap])
            .arg(&jdl)
            .output()
            .unwrap()
    };
    let found = poll(Duration::from_secs(150), Duration::from_secs(3), || {
        let out = list_match();
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    });
    let t_found = Instant::now();
    let found =
        found.unwrap_or_else(|| panic!("list-match never found the ARC CE: {}\n{}", text(&list_match()), ce.logs()));
    assert!(found.contains(&ce.rest_url), "list-match must name the CE by its REST endpoint {}:\n{found}", ce.rest_url);
    let ee = Command::new("ldapsearch")
        .args([
            "-x",
            "-LLL",
            "-o",
            "ldif-wrap=no",
            "-H",
            &ldap,
            "-b",
            "o=glue",
            &format!("(GLUE2ResourceID={ARC_EE})"),
            "GLUE2EntityOtherInfo",
            "GLUE2ExecutionEnvironmentPlatform",
        ])
        .output()
        .unwrap();
    let ee = String::from_utf8_lossy(&ee.stdout).into_owned();
    assert!(ee.contains("GLUE2EntityOtherInfo: GPGPUFreeInstances=4"), "the keys must be on ARC's own EE:\n{ee}");
    assert!(ee.contains("GLUE2ExecutionEnvironmentPlatform: amd64"), "ARC's own attributes stay:\n{ee}");
    assert!(
        ee.contains("GLUE2GroupID=ExecutionEnvironments,GLUE2ManagerID=urn:ogf:ComputingManager:localhost:slurm"),
        "{ee}"
    );

    // Phase 1 alone, for the breakdown.
    let t_lm = Instant::now();
    assert!(list_match().status.success());
    let list_match_s = secs(Instant::now(), t_lm);

    // Phase 2 through the real arcsub.
    let t_submit = Instant::now();
    let out = ce.client(cder_jdl()).args(["submit", "--bdii", &ldap, "--via", "arc"]).arg(&jdl).output().unwrap();
    let t_submitted = Instant::now();
    assert!(out.status.success(), "cder-jdl submit --via arc: {}\n{}", text(&out), ce.logs());
    let job_id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(job_id.starts_with(&format!("{}/rest/1.0/jobs/", ce.rest_url)), "not an ARC REST job ID: {job_id:?}");
    let arex_id = ArcCe::local_id(&job_id).to_string();

    // A-REX runs stage 0 (ENV/GPGPU) and sbatch; SLURM counts gres gpu:2.
    let slurm_id = poll(Duration::from_secs(60), Duration::from_millis(200), || ce.slurm_id(&arex_id))
        .unwrap_or_else(|| panic!("A-REX never passed the job to SLURM:\n{}\n{}", ce.job_errors(&arex_id), ce.logs()));
    let t_sbatch = Instant::now();
    let running = cluster
        .wait_running(slurm_id, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}\n{}", ce.job_errors(&arex_id)));
    let t_running = Instant::now();
    assert_eq!(running.fields.get("TresPerNode").map(String::as_str), Some("gres:gpu:2"), "{:?}", running.fields);
    assert_eq!(
        running.fields.get("UserId").map(|u| u.split('(').next().unwrap_or_default()),
        Some("nobody"),
        "A-REX maps the grid user"
    );
    // RUNNING comes before the job's step has started (and SPANK has told cderd).
    let held = poll(Duration::from_secs(15), Duration::from_millis(200), || {
        cluster.ledger(slurm_id).ok().filter(|h| h.len() == 2)
    });
    assert!(held.is_some(), "cderd's ledger for slurm:{slurm_id}: {:?}", cluster.ledger(slurm_id));
    // While it runs, ARC's infosys shows 2 of the 4 GPUs free (cderd's
    // counts, through the plugin, on the next infoprovider/bdii cycle), and
    // phase 1 reads them: a job wanting 3 free finds no CE.
    let ldap_free = || {
        let out = Command::new("ldapsearch")
            .args([
                "-x",
                "-LLL",
                "-H",
                &ldap,
                "-b",
                "o=glue",
                &format!("(GLUE2ResourceID={ARC_EE})"),
                "GLUE2EntityOtherInfo",
            ])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("GLUE2EntityOtherInfo: GPGPUFreeInstances=").map(str::to_string))
    };
    let free_now = poll(Duration::from_secs(18), Duration::from_millis(500), || ldap_free().filter(|f| f == "2"));
    assert_eq!(
        free_now.as_deref(),
        Some("2"),
        "ARC's infosys while the job holds 2 of 4 GPUs (last seen {:?})",
        ldap_free()
    );
    let greedy = w.join("greedy.jdl");
    std::fs::write(
        &greedy,
        "[ Executable = \"/bin/true\"; GPGPUPerNode = 1; Requirements = GPGPUFreeInstances >= 3 ]\n",
    )
    .unwrap();
    let lm = Command::new(cder_jdl())
        .envs(index_env(work.path()))
        .args(["list-match", "--bdii", &ldap])
        .arg(&greedy)
        .output()
        .unwrap();
    assert_eq!(lm.status.code(), Some(1), "no CE has 3 free now: {}", text(&lm));
    let errors = ce.job_errors(&arex_id);
    assert!(
        errors.contains("#SBATCH  --gres=gpu:2") || errors.contains("#SBATCH --gres=gpu:2"),
        "batch script:\n{errors}"
    );
    let done = cluster.wait_job(slurm_id, Duration::from_secs(60)).unwrap();
    let t_done = Instant::now();
    assert_eq!(done.state, "COMPLETED", "{:?}", done.fields);

    // ARC's view: Finished, then the output back with arcget.
    let finished = poll(Duration::from_secs(150), Duration::from_secs(2), || {
        let out = ce.client("arcstat").arg(&job_id).output().ok()?;
        let t = text(&out);
        if t.contains("State: Failed") {
            panic!("ARC says the job failed:\n{t}\n{}", ce.job_errors(&arex_id));
        }
        t.contains("State: Finished").then_some(())
    });
    let t_finished = Instant::now();
    assert!(finished.is_some(), "arcstat never said Finished:\n{}\n{}", ce.job_errors(&arex_id), ce.logs());
    let dl = w.join("download");
    std::fs::create_dir_all(&dl).unwrap();
    let got = ce.client("arcget").arg("-D").arg(&dl).arg(&job_id).output().unwrap();
    let t_got = Instant::now();
    assert!(got.status.success(), "arcget: {}", text(&got));
    let out_txt = std::fs::read_to_string(dl.join(&arex_id).join("out.txt"))
        .unwrap_or_else(|e| panic!("{e}: arcget gave {:?}", ls(&dl)));
    let cvd = out_txt
        .lines()
        .find_map(|l| l.strip_prefix("CUDA_VISIBLE_DEVICES="))
        .unwrap_or_else(|| panic!("no CUDA_VISIBLE_DEVICES:\n{out_txt}"));
    let devices: Vec<&str> = cvd.split(',').filter(|s| !s.is_empty()).collect();
    assert_eq!(devices.len(), 2, "the job must see exactly 2 devices: {cvd:?}");
    assert_ne!(devices[0], devices[1]);
    assert!(out_txt.contains(&format!("SLURM_JOB_ID={slurm_id}")), "{out_txt}");

    // A count cder-jdl would never write, sent with arcsub directly: A-REX
    // fails the job at stage 0 with ENV/GPGPU's reason, SLURM never sees
    // it, and A-REX goes on serving.
    std::fs::write(
        w.join("bad.xrsl"),
        "&(executable=\"/bin/true\")(runtimeenvironment=\"ENV/GPGPU\" \"0\")(jobname=\"bad\")\n",
    )
    .unwrap();
    let out = ce.client("arcsub").args(["-T", "arcrest", "-C", &ce.rest_url]).arg(w.join("bad.xrsl")).output().unwrap();
    let bad_id = cder_jdl::submit::arc_job_id(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|| panic!("arcsub: {}", text(&out)));
    let bad_arex = ArcCe::local_id(&bad_id).to_string();
    let reason = poll(Duration::from_secs(60), Duration::from_millis(500), || {
        let e = ce.job_errors(&bad_arex);
        e.contains("stage 0 execution failed").then_some(e)
    })
    .unwrap_or_else(|| panic!("A-REX did not fail the bad job:\n{}", ce.job_errors(&bad_arex)));
    assert!(reason.contains("cder: RTE ENV/GPGPU: argument 0: the count must be at least 1"), "{reason}");
    assert_eq!(ce.slurm_id(&bad_arex), None, "a refused job must not reach SLURM");
    // ...and the grid user sees it Failed (A-REX still answering).
    let failed = poll(Duration::from_secs(60), Duration::from_secs(1), || {
        let out = ce.client("arcstat").arg(&bad_id).output().ok()?;
        text(&out).contains("State: Failed").then_some(())
    });
    assert!(
        failed.is_some(),
        "arcstat never said Failed: {}",
        text(&ce.client("arcstat").arg(&bad_id).output().unwrap())
    );

    // ENV/VGPGPU through the real A-REX and sbatch: job_submit_cder.so
    // counts 3 VCL backends on the job's one node as the vgpgpu licence.
    std::fs::write(
        w.join("vgpgpu.xrsl"),
        "&(executable=\"/bin/true\")(runtimeenvironment=\"ENV/VGPGPU\" \"3\" \"VCL\")(jobname=\"v\")\n",
    )
    .unwrap();
    let out =
        ce.client("arcsub").args(["-T", "arcrest", "-C", &ce.rest_url]).arg(w.join("vgpgpu.xrsl")).output().unwrap();
    let v_id = cder_jdl::submit::arc_job_id(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|| panic!("arcsub: {}", text(&out)));
    let v_arex = ArcCe::local_id(&v_id).to_string();
    let v_slurm = poll(Duration::from_secs(60), Duration::from_millis(200), || ce.slurm_id(&v_arex))
        .unwrap_or_else(|| panic!("A-REX never passed the vGPGPU job to SLURM:\n{}", ce.job_errors(&v_arex)));
    let v_errors = ce.job_errors(&v_arex);
    assert!(v_errors.contains("--vgpgpu-per-node=3 --vgpgpu-method=VCL"), "batch script:\n{v_errors}");
    let v = cluster.job(v_slurm).unwrap();
    assert_eq!(v.fields.get("Licenses").map(String::as_str), Some("vgpgpu:3"), "{:?}", v.fields);
    let _ = cluster.run("scancel", &[&v_slurm.to_string()]);

    // The reference, same cluster, same run: the job straight to sbatch.
    let t_direct = Instant::now();
    let direct = cluster.sbatch(&["--gres=gpu:2"], "#!/bin/sh\nsleep 1\n").unwrap();
    cluster.wait_running(direct, Duration::from_secs(60)).unwrap();
    let direct_s = secs(Instant::now(), t_direct);

    // Where the time goes, printed for the record; never asserted.
    let state_times: Vec<&str> = errors.lines().filter(|l| l.contains("Job state change")).collect();
    eprintln!(
        "ARC timings (s): CE up {:.1}; infosys shows GPUs {:.1} after; list-match {:.2}; submit (list-match + arcsub) {:.2}; \
         A-REX pickup to sbatch {:.1}; sbatch to running {:.1}; SLURM job end to arcstat Finished {:.1}; arcget {:.2}; \
         submit to running {:.1}; sbatch straight to running {:.2} (ratio {:.0})\nA-REX:\n{}\nSLURM: SubmitTime={} StartTime={} EndTime={}",
        secs(t_ce, t_start),
        secs(t_found, t_ce),
        list_match_s,
        secs(t_submitted, t_submit),
        secs(t_sbatch, t_submitted),
        secs(t_running, t_sbatch),
        secs(t_finished, t_done),
        secs(t_got, t_finished),
        secs(t_running, t_submit),
        direct_s,
        secs(t_running, t_submit) / direct_s,
        state_times.join("\n"),
        done.fields.get("SubmitTime").map(String::as_str).unwrap_or("?"),
        done.fields.get("StartTime").map(String::as_str).unwrap_or("?"),
        done.fields.get("EndTime").map(String::as_str).unwrap_or("?"),
    );
}

fn ls(dir: &Path) -> Vec<String> {
    walk(dir).into_iter().map(|p| p.display().to_string()).collect()
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
