//! `cder-torque-hook`: every pbs_mom hook of cder, chosen by the name it is
//! installed under in `mom_priv/` (prologue, epilogue, prologue.parallel,
//! epilogue.parallel, epilogue.precancel, prologue.user, epilogue.user).

use std::process::ExitCode;
use std::time::Duration;

use cder_model::Config;
use cder_protocol::Client;
use cder_torque::hook::{self, exit, Cderd, HookKind, JobArgs, Mom, PrologueOutcome, Released, HOOK_NAMES};
use cder_torque::limits::requested_devices;
use cder_torque::log::{log, note, Severity};
use cder_torque::mom::PbsHome;
use cder_torque::settings::TorqueSettings;
use cder_torque::starter;

// argv is pbs_mom's (the hook contract), so it is read by hand, not by clap.
pub(crate) const HELP: &str = "\
cder-torque-hook — cder's pbs_mom prologue and epilogue

USAGE (by pbs_mom, never by hand):
    mom_priv/prologue  JOBID USER GROUP JOBNAME LIMITS QUEUE ACCOUNT [...]
    mom_priv/epilogue  JOBID USER GROUP JOBNAME SESSION LIMITS USED QUEUE ACCOUNT EXITCODE [...]

One binary, installed under each of these names in $PBS_HOME/mom_priv/:
a link to /usr/libexec/cder/cder-torque-hook (the cder-torque package), or
a copy (install-mom-hooks.sh; root:root, mode 0500, the .user hooks 0505):

    prologue, prologue.parallel   allocate the job's devices from cderd
    epilogue, epilogue.parallel,  release them (idempotent)
    epilogue.precancel
    prologue.user                 print the job's devices into its output
    epilogue.user                 print the device-seconds it used

Where TORQUE assigned GPUs (exec_gpus; $PBS_HOME/aux/JOBIDgpu or the job
file), the prologue has cderd record exactly those. Otherwise it reads the
count from the resource limits in the form the site's scheduler counts
(torque.toml directive): \"native\" nodes=...:gpus=N; \"maui\" gres=gpus:N or
other=cder:gpgpu:N (written by cder-torque-submit-filter from the MAUI GRES),
and asks cderd to allocate for torque:JOBID with the user's uid.

EXIT STATUS (pbs_mom's meaning):
    prologue   0  run the job
               1  abort the job: the request can never be met here (reason on stderr)
               2  requeue the job: devices busy, or cderd cannot be asked now
    epilogue   always 0; a failed release is logged (stderr, syslog) and left
               to `cderctl reconcile`, so the node never goes offline over it

FILES:
    /etc/cder/cder.toml    cderd's socket and the device types ($CDER_CONFIG if set)
    /etc/cder/torque.toml  [torque] settings ($CDER_TORQUE_CONFIG if set)

See docs/torque.md.";

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    let argv0 = argv.first().cloned().unwrap_or_default();
    match argv.get(1).map(String::as_str) {
        Some("--help" | "-h") => {
            println!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Some("--version" | "-V") => {
            println!("cder-torque-hook {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let Some(kind) = HookKind::from_program_name(&argv0) else {
        let names: Vec<&str> = HOOK_NAMES.iter().map(|(n, _)| *n).collect();
        eprintln!(
            "cder-torque-hook: run as {argv0:?}; install it into mom_priv/ as one of {} (see --help)",
            names.join(", ")
        );
        return ExitCode::from(2);
    };
    let tag = kind.tag();
    let args = match JobArgs::parse(kind, &argv[1..]) {
        Ok(a) => a,
        Err(e) => {
            log(&tag, Severity::Error, &e.0);
            // Retrying cannot fix a broken argument list: abort the job.
            return ExitCode::from(if kind == HookKind::Prologue || kind == HookKind::PrologueParallel {
                exit::ABORT
            } else {
                0
            });
        }
    };
    let settings = TorqueSettings::load(&TorqueSettings::resolve_path());
    // pbs_mom logs a hook's stderr: where the admin reads about torque.toml.
    if let Ok(s) = &settings {
        s.print_warnings("cder-torque-hook");
    }
    let config = Config::load(None);
    match kind {
        HookKind::Prologue | HookKind::PrologueParallel => {
            let outcome = match (&config, &settings) {
                (Ok(config), Ok(settings)) => {
                    let cderd =
                        Cderd { socket: &config.node.socket, timeout: Duration::from_secs(settings.cderd_timeout_s) };
                    let cwd = std::env::current_dir().ok();
                    let home = settings
                        .pbs_home
                        .clone()
                        .map(PbsHome)
                        .or_else(|| PbsHome::of_hook(std::path::Path::new(&argv0), cwd.as_deref()));
                    let mom = Mom { home, hostname: cder_torque::sys::hostname().unwrap_or_default() };
                    hook::prologue(kind, &args, settings, &cderd, &mom)
                }
                (config, settings) => {
                    let problem = match (config, settings) {
                        (Err(e), _) => e.to_string(),
                        (_, Err(e)) => e.to_string(),
                        _ => String::new(),
                    };
                    let defaults = TorqueSettings::default();
                    let s = settings.as_ref().unwrap_or(&defaults);
                    match requested_devices(args.limits.as_deref().unwrap_or(""), kind.role(), s) {
                        // The job starter cannot confine a job cderd never recorded.
                        Ok(r) if r.count.is_none() && s.confine == cder_torque::settings::Confine::Off => {
                            PrologueOutcome::Run(format!("torque:{} asks for no devices ({problem})", args.job_id))
                        }
                        _ => PrologueOutcome::Requeue(format!(
                            "torque:{}: cannot read the node's cder configuration: {problem}",
                            args.job_id
                        )),
                    }
                }
            };
            match &outcome {
                // A request form the scheduler does not count was ignored:
                // the user should read that in the job's error file.
                PrologueOutcome::Run(m) if m.contains("; ignored ") => log(&tag, Severity::Warning, m),
                PrologueOutcome::Run(m) => note(&tag, Severity::Info, m),
                PrologueOutcome::Abort(m) => log(&tag, Severity::Error, &format!("job aborted: {m}")),
                PrologueOutcome::Requeue(m) => log(&tag, Severity::Warning, &format!("job requeued: {m}")),
            }
            ExitCode::from(outcome.exit_code())
        }
        HookKind::Epilogue | HookKind::EpilogueParallel | HookKind::EpiloguePrecancel => {
            let timeout = settings.as_ref().map_or(20, |s| s.cderd_timeout_s);
            let released = match &config {
                Ok(config) => hook::epilogue(&args, &Cderd { socket: &config.node.socket, timeout: Duration::from_secs(timeout) }),
                Err(e) => Released::Failed(format!(
                    "torque:{}: cannot read the node's cder configuration ({e}); `cderctl reconcile` will free the job's devices",
                    args.job_id
                )),
            };
            match released {
                Released::Done(job, n) => note(&tag, Severity::Info, &format!("{job}: released {n} devices")),
                Released::Failed(m) => log(&tag, Severity::Error, &m),
            }
            // Never a non-zero status: see EXIT STATUS in --help.
            ExitCode::SUCCESS
        }
        HookKind::PrologueUser => {
            let config = config.unwrap_or_else(|_| starter::fallback_config());
            let fetched = starter::fetch(
                &config,
                Some(&args.job_id),
                Duration::from_secs(10),
                cder_torque::settings::Confine::Off,
            );
            if let Some(job) = &fetched.job {
                let vars: Vec<String> = fetched.env.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
                println!("cder: {job}: {}", vars.join(" "));
            }
            if let Some(n) = fetched.note {
                println!("cder: {n}");
            }
            ExitCode::SUCCESS
        }
        HookKind::EpilogueUser => {
            if let (Ok(config), Ok(job)) = (&config, args.job_key()) {
                let used = Client::connect(&config.node.socket, Duration::from_secs(10))
                    .and_then(|mut c| c.accounting(&Default::default()))
                    .map(|a| a.records.into_iter().filter(|r| r.job == job).collect::<Vec<_>>());
                match used {
                    Ok(records) if !records.is_empty() => {
                        let total: i64 = records.iter().map(|r| r.device_seconds).sum();
                        let devices: Vec<String> =
                            records.iter().map(|r| format!("{}:{}", r.cder_type, r.index)).collect();
                        println!("cder: {job} used {} for {total} device-seconds", devices.join(","));
                    }
                    Ok(_) => {}
                    Err(e) => println!("cder: {job}: no accounting: {e}"),
                }
            }
            ExitCode::SUCCESS
        }
    }
}
