//! `cder-job-starter`: pbs_mom's `$job_starter`. Fetches the job's devices
//! from cderd and execs the job with them visible, and only them.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Duration;

use cder_model::config::DEFAULT_CONFIG_PATH;
use cder_model::Config;
use cder_torque::settings::{TorqueSettings, DEFAULT_SETTINGS_PATH};
use cder_torque::starter::{command_from_argv, environment_as_started, fallback_config, fetch};

// argv is the job's command line as pbs_mom passes it, so it is read by hand, not by clap.
pub(crate) const HELP: &str = "\
cder-job-starter — run a TORQUE job with its own devices visible

USAGE:
    cder-job-starter [OPTIONS] SHELL SHELL-ARGV0 [ARGS...]   (as pbs_mom calls it)
    cder-job-starter [OPTIONS] PROGRAM [ARGS...]             (by hand, inside a job)

OPTIONS (read only when the real uid is 0: root's; for anyone else the
first argument is the program, as pbs_mom passes the job's shell):
    --config FILE          cder.toml [default: /etc/cder/cder.toml]
    --torque-config FILE   torque.toml [default: /etc/cder/torque.toml]
    --                     end of options
    --help, --version      also for anyone, as the one argument

Set in $PBS_HOME/mom_priv/config:

    $job_starter /usr/libexec/cder/cder-job-starter

with the starter installed root:cder-starter, mode 2755: set-group-ID, so
that the loader ignores the job's LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT …
(the group is dropped first thing; the job gets its whole environment).
Where the files are elsewhere, link them into /etc/cder; never name a
wrapper script in $job_starter (its /bin/sh loads the job's LD_PRELOAD).

pbs_mom then runs it as the job's user, with the job's environment, in
place of the job's shell, passing the shell's path and argument vector.
It asks cderd for the allocation of torque:$PBS_JOBID (cderd checks that
the caller's uid is the job's), has cderd put it into the job's device
cgroup (op confine: the job can open its own devices and no others), sets
CUDA_VISIBLE_DEVICES and the other visible-device variables (relative
indices 0..n-1 inside the cgroup), and execs the shell. A job without
devices is confined away from every device. A job that cannot be confined
because cderd cannot be reached, has no record of it, or says it is another
user's, is not started (exit 1, the reason on stderr) unless torque.toml
sets confine = \"off\". When cderd knows the job but cannot confine it,
it is not started (confine = \"required\", the default) or runs with the
variables only (\"optional\").

The job never chooses the configuration: CDER_CONFIG and
CDER_TORQUE_CONFIG are ignored here (the job sets its own variables with
qsub -v), and so is an option-like job shell (qsub -S --torque-config:
pbs_mom passes the shell the job named, checked by qsub only).

It never runs a job as root: pbs_mom runs the job starter as root only
when mom_priv/config sets $job_starter_run_privileged, and then it refuses.

ENVIRONMENT:
    PBS_JOBID     the job (set by pbs_mom)
    VirtualGPGPUPerNode
                  (set by the submit filter for vGPGPU jobs) also fetch the
                  job's backends from the [registry] and set RCUDA_DEVICE_*
                  or VCL_NODEFILE (docs/vgpgpu.md)

EXIT STATUS:
    that of the job; 127 when the job's program cannot be executed,
    2 when there is no program to run or an option is wrong, 1 when it
    refuses to start the job (run as root, not confined, or its installed
    group cannot be dropped).";

/// The options root may put before the command, and the rest of argv
/// (argv\[0\] first, as [`command_from_argv`] expects).
struct Options {
    config: PathBuf,
    torque_config: PathBuf,
    argv: Vec<OsString>,
}

/// The fixed paths, and argv as it came: how anyone but root is run.
fn no_options(argv: Vec<OsString>) -> Options {
    Options { config: DEFAULT_CONFIG_PATH.into(), torque_config: DEFAULT_SETTINGS_PATH.into(), argv }
}

fn parse_options(argv: Vec<OsString>) -> Result<Options, String> {
    let mut options = no_options(Vec::new());
    let mut args = argv.into_iter();
    options.argv.extend(args.next());
    while let Some(arg) = args.next() {
        // pbs_mom's first argument is the job's shell, an absolute path: an
        // argument that is not an option ends them.
        let target = match arg.to_str() {
            Some("--") => break,
            Some("--config") => &mut options.config,
            Some("--torque-config") => &mut options.torque_config,
            Some(a) if a.starts_with("--") => return Err(format!("unknown option {a} (see --help)")),
            _ => {
                options.argv.push(arg);
                break;
            }
        };
        let value =
            args.next().filter(|v| !v.is_empty()).ok_or_else(|| format!("{} needs a file", arg.to_string_lossy()))?;
        *target = PathBuf::from(value);
    }
    options.argv.extend(args);
    Ok(options)
}

fn main() -> ExitCode {
    // Installed set-group-ID only so that the loader ignores the job's
    // LD_PRELOAD and the like: the group itself goes before anything else.
    if let Err(e) = cder_torque::sys::drop_borrowed_group() {
        eprintln!("cder-job-starter: {e}; not starting the job");
        return ExitCode::from(1);
    }
    let argv: Vec<OsString> = std::env::args_os().collect();
    // argv[1] is the job's shell as pbs_mom passes it, whatever the job named
    // (qsub checks that it is absolute, pbs_server does not): only root's
    // command line has options. pbs_mom always passes the shell's argv[0]
    // too, so a lone --help is never a job's.
    let by_root = cder_torque::sys::current_uid() == 0;
    let first = if by_root || argv.len() == 2 { argv.get(1).and_then(|a| a.to_str()) } else { None };
    match first {
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
    let parsed = if by_root { parse_options(argv) } else { Ok(no_options(argv)) };
    let options = match parsed {
        Ok(o) => o,
        Err(e) => {
            eprintln!("cder-job-starter: {e}");
            return ExitCode::from(2);
        }
    };
    if cder_torque::sys::current_uid() == 0 || cder_torque::sys::effective_uid() == 0 {
        // Only $job_starter_run_privileged makes pbs_mom run the starter as
        // root; a job must never get root by it.
        eprintln!(
            "cder-job-starter: refusing to run a job as root (uid 0): remove $job_starter_run_privileged from mom_priv/config, so that pbs_mom runs the job starter as the job's user"
        );
        return ExitCode::from(1);
    }
    let Some(exec) = command_from_argv(&options.argv) else {
        eprintln!("cder-job-starter: no program to run (see --help)");
        return ExitCode::from(2);
    };
    // Fixed paths, or root's options: never $CDER_CONFIG, which the job sets.
    let config = Config::load(Some(&options.config)).unwrap_or_else(|e| {
        eprintln!("cder-job-starter: {e}; no devices are visible");
        let mut fallback = fallback_config();
        fallback.node.socket = "/nonexistent".into();
        fallback
    });
    // An unreadable torque.toml keeps the defaults, which fail closed.
    let settings = TorqueSettings::load(&options.torque_config).unwrap_or_else(|e| {
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
    if let (Some(job), Some(_)) = (&fetched.job, std::env::var_os(cder_request::keys::VIRTUAL_GPGPU_PER_NODE)) {
        match cder_torque::vgpgpu::job_environment(&config, job) {
            Ok(Some(env)) => vgpgpu = env,
            Ok(None) => eprintln!("cder-job-starter: {job} holds no vGPGPU backends"),
            Err(e) => eprintln!("cder-job-starter: {job}: {e}; no vGPGPUs"),
        }
    }
    let mut command = Command::new(&exec.program);
    if cder_torque::sys::secure_execution() {
        // The loader dropped LD_LIBRARY_PATH, TMPDIR … from this process's
        // environment; the job, confined and running with no borrowed group,
        // gets the environment pbs_mom gave it back. /proc/self/environ is
        // root's until this process is dumpable again, which only now, confined
        // and about to exec the job (exec makes it so anyway), it may be.
        match cder_torque::sys::make_dumpable().and_then(|()| std::fs::read("/proc/self/environ")) {
            Ok(environ) => {
                command.env_clear().envs(environment_as_started(&environ));
            }
            Err(e) => eprintln!("cder-job-starter: /proc/self/environ: {e}; the job runs without LD_LIBRARY_PATH, TMPDIR and the other variables the loader drops for a set-group-ID program"),
        }
    }
    let error = command.arg0(&exec.arg0).args(&exec.args).envs(&fetched.env.0).envs(&vgpgpu.0).exec();
    eprintln!("cder-job-starter: cannot execute {}: {error}", exec.program.to_string_lossy());
    ExitCode::from(127)
}
