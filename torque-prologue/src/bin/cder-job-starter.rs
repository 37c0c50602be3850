//! `cder-job-starter`: pbs_mom's `$job_starter`. Fetches the job's devices
//! from cderd and execs the job with them visible, and only them.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::time::Duration;

use cder_model::Config;
use cder_torque::settings::TorqueSettings;
use cder_torque::starter::{command_from_argv, fallback_config, fetch};

// argv is the job's command line as pbs_mom passes it, so it is read by hand, not by clap.
pub(crate) const HELP: &str = "\
cder-job-starter — run a TORQUE job with its own devices visible

USAGE:
    cder-job-starter SHELL SHELL-ARGV0 [ARGS...]   (as pbs_mom calls it)
    cder-job-starter PROGRAM [ARGS...]             (by hand, inside a job)

Set in $PBS_HOME/mom_priv/config:

    $job_starter /usr/libexec/cder/cder-job-starter

pbs_mom then runs it as the job's user, with the job's environment, in
place of the job's shell, passing the shell's path and argument vector.
It asks cderd for the allocation of torque:$PBS_JOBID (cderd checks that
the caller's uid is the job's), has cderd put it into the job's device
cgroup (op confine: the job can open its own devices and no others), sets
CUDA_VISIBLE_DEVICES and the other visible-device variables (relative
indices 0..n-1 inside the cgroup), and execs the shell. A job without
devices, a job of another user, or a node where cderd cannot be reached
gets the empty list (never \"all devices\"), with the reason on stderr
where there is one. When a job holding devices cannot be confined, it is
not started (torque.toml confine = \"required\", the default) or runs with
the variables only (\"best_effort\").

It never runs a job as root: pbs_mom runs the job starter as root only
when mom_priv/config sets $job_starter_run_privileged, and then it refuses.

ENVIRONMENT:
    PBS_JOBID     the job (set by pbs_mom)
    CDER_CONFIG   cder.toml to read instead of /etc/cder/cder.toml
    VirtualGPGPUPerNode
                  (set by the submit filter for vGPGPU jobs) also fetch the
                  job's backends from the [registry] and set RCUDA_DEVICE_*
                  or VCL_NODEFILE (docs/vgpgpu.md)

EXIT STATUS:
    that of the job; 127 when the job's program cannot be executed,
    2 when there is no program to run, 1 when it refuses to start the job
    (run as root, or not confined with confine = \"required\").";

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    match argv.get(1).and_then(|a| a.to_str()) {
        Some("--help" | "-h") => {
            println!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Some("--version") => {
            println!("cder-job-starter {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    if cder_torque::sys::current_uid() == 0 || cder_torque::sys::effective_uid() == 0 {
        // Only $job_starter_run_privileged makes pbs_mom run the starter as
        // root; a job must never get root by it (issue 14).
        eprintln!(
            "cder-job-starter: refusing to run a job as root (uid 0): remove $job_starter_run_privileged from mom_priv/config, so that pbs_mom runs the job starter as the job's user"
        );
        return ExitCode::from(1);
    }
    let Some(exec) = command_from_argv(&argv) else {
        eprintln!("cder-job-starter: no program to run (see --help)");
        return ExitCode::from(2);
    };
    let config = Config::load(None).unwrap_or_else(|e| {
        eprintln!("cder-job-starter: {e}; no devices are visible");
        let mut fallback = fallback_config();
        fallback.node.socket = "/nonexistent".into();
        fallback
    });
    // An unreadable torque.toml keeps the defaults, which fail closed.
    let settings = TorqueSettings::load(&TorqueSettings::resolve_path()).unwrap_or_else(|e| {
        eprintln!("cder-job-starter: {e}; using the default settings");
        TorqueSettings::default()
    });
    let job_id = std::env::var("PBS_JOBID").ok();
    let fetched = fetch(&config, job_id.as_deref(), Duration::from_secs(settings.cderd_timeout_s), settings.confine);
    if let Some(note) = &fetched.note {
        eprintln!("cder-job-starter: {note}");
    }
    if let Some(refusal) = &fetched.refusal {
        eprintln!("cder-job-starter: {refusal}");
        return ExitCode::from(1);
    }
    // vGPGPU jobs (the submit filter recorded VirtualGPGPUPerNode): the
    // rCUDA / VCL variables of the backends cder-torque-monitor requested.
    let mut vgpgpu = cder_model::JobEnvironment::default();
    if let (Some(job), Some(_)) = (&fetched.job, std::env::var_os(cder_torque::vgpgpu::PER_NODE_KEY)) {
        match cder_torque::vgpgpu::job_environment(&config, job) {
            Ok(Some(env)) => vgpgpu = env,
            Ok(None) => eprintln!("cder-job-starter: {job} holds no vGPGPU backends"),
            Err(e) => eprintln!("cder-job-starter: {job}: {e}; no vGPGPUs"),
        }
    }
    let error = Command::new(&exec.program).arg0(&exec.arg0).args(&exec.args).envs(&fetched.env.0).envs(&vgpgpu.0).exec();
    eprintln!("cder-job-starter: cannot execute {}: {error}", exec.program.to_string_lossy());
    ExitCode::from(127)
}
