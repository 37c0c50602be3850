//! The job starter (`$job_starter` in `mom_priv/config`) and `cder-env`:
//! fetch a job's allocation from cderd and turn it into its environment,
//! and (the job starter) have cderd confine this process, and so the job
//! it execs, to the job's device cgroup ([`fetch`]).
//!
//! pbs_mom execs the job starter, as the job's user and with the job's
//! environment, instead of the job's shell. TORQUE's
//! `mom_jobstarter_execute_job` (src/resmom/start_exec.c) shifts the shell's
//! argument vector up by one and puts the shell's path in front, so the
//! starter sees
//!
//! ```text
//! argv[0] = the job starter     argv[1] = /bin/bash
//! argv[2] = -bash  (the shell's own argv[0]; "-" marks a login shell)
//! argv[3..] = the rest (PRE_EXEC, -c command for interactive jobs)
//! ```
//!
//! with the job script arriving on stdin. The starter must exec argv\[1\]
//! with argv\[2\] as its argv\[0\]. Run by hand (`cder-job-starter prog
//! args…`), where argv\[2\] is not the shell's name, it execs `prog args…`.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::time::Duration;

use cder_model::{Config, JobEnvironment, JobKey, Lrms};
use cder_protocol::{Client, Confined, ErrorCode};

use crate::settings::Confine;

/// What to exec: the program, the argv\[0\] it gets, and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exec {
    /// The path to exec.
    pub program: OsString,
    /// What the program sees as argv\[0\] (a login shell's `-bash`).
    pub arg0: OsString,
    /// The arguments after argv\[0\].
    pub args: Vec<OsString>,
}

/// The command the starter was asked to run, from its own argv (with
/// argv\[0\]). `None` when there is nothing to run.
pub fn command_from_argv(argv: &[OsString]) -> Option<Exec> {
    let program = argv.get(1)?.clone();
    let base = Path::new(&program).file_name().map(OsStr::to_os_string).unwrap_or_default();
    let mut login = OsString::from("-");
    login.push(&base);
    match argv.get(2) {
        // pbs_mom's layout: the shell's own argv[0] follows its path.
        Some(a) if !base.is_empty() && (*a == base || *a == login) => {
            Some(Exec { program, arg0: a.clone(), args: argv[3..].to_vec() })
        }
        _ => Some(Exec { arg0: program.clone(), program, args: argv[2..].to_vec() }),
    }
}

/// The environment a process was started with, from its
/// `/proc/self/environ` text (NUL-separated `NAME=value` entries). The
/// loader's secure-execution mode takes `LD_LIBRARY_PATH`, `TMPDIR` and the
/// like out of the live environment only; the job is owed them all.
pub fn environment_as_started(proc_environ: &[u8]) -> Vec<(OsString, OsString)> {
    use std::os::unix::ffi::OsStrExt;
    proc_environ
        .split(|&b| b == 0)
        .filter_map(|entry| {
            // As getenv(3) reads it: the name ends at the first '=', and is not empty.
            let at = entry.iter().position(|&b| b == b'=').filter(|&at| at > 0)?;
            Some((OsStr::from_bytes(&entry[..at]).to_os_string(), OsStr::from_bytes(&entry[at + 1..]).to_os_string()))
        })
        .collect()
}

/// A job's environment and, when the job gets no devices for a reason the
/// user should know, that reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The variables to set (empty when the job gets no devices).
    pub env: JobEnvironment,
    /// The job key, when `PBS_JOBID` named one.
    pub job: Option<JobKey>,
    /// Why the job gets no devices, for its error file.
    pub note: Option<String>,
    /// True when cderd answered (with devices or "no allocation").
    pub answered: bool,
    /// The device cgroups this process was moved into (`confine`), when it
    /// was: the job then sees its devices numbered from 0, and `env` says so.
    pub confined: Option<Confined>,
    /// Why the job must not run (`confine = "required"` and the job could
    /// not be confined to its devices).
    pub refusal: Option<String>,
}

impl Fetched {
    fn new(env: JobEnvironment, job: Option<JobKey>, note: Option<String>, answered: bool) -> Fetched {
        Fetched { env, job, note, answered, confined: None, refusal: None }
    }
}

/// The types used when `cder.toml` cannot be read: NVIDIA's variables, so
/// that a broken config still yields an empty list, never "all devices".
pub fn fallback_config() -> Config {
    Config::parse(
        "[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
        Path::new("(built-in fallback)"),
    )
    .unwrap_or_default()
}

/// This process's cgroup membership (`/proc/self/cgroup`), empty if unreadable.
pub fn read_own_cgroups() -> String {
    std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default()
}

/// Whether a `/proc/<pid>/cgroup` text places the process in a device group
/// cderd made for `job` (named `<lrms>-<id>-<token>`, see cderd's cgroup module).
pub fn in_job_group(job: &JobKey, proc_cgroup: &str) -> bool {
    let prefix = format!("{}-{}-", job.lrms().as_str(), job.id());
    proc_cgroup
        .lines()
        .filter_map(|l| l.rsplit_once(':'))
        .any(|(_, path)| path.rsplit('/').next().is_some_and(|leaf| leaf.starts_with(&prefix)))
}

/// Asks cderd (`env`, checked against the caller's uid) for the devices of
/// TORQUE job `job_id`. Every outcome yields a complete environment: the
/// job's own devices, or the empty list for each configured type.
///
/// With `confine` other than [`Confine::Off`], a job cderd has a record of
/// (with devices, or with none) also has this process moved into its device
/// cgroup (cderd's `confine`, by the caller's pid), so that what it execs
/// can open only the job's own devices; the indices are then relative
/// (`0..n-1`), as the vendor runtime numbers what it can open. A job that
/// cannot be put into a group that fences it from cderd's devices (no job
/// id, cderd unreachable or without a record of the job, another user's
/// job) sets [`Fetched::refusal`]: only cderd can confine, so such a job is
/// never run. When cderd knows the job but cannot confine it,
/// `Required` refuses and `Optional` runs it with a note.
pub fn fetch(config: &Config, job_id: Option<&str>, timeout: Duration, confine: Confine) -> Fetched {
    let empty = JobEnvironment::empty(&config.cders);
    // Where the starter must confine, a job it cannot even ask about is refused.
    let refuse = |fetched: Fetched| -> Fetched {
        if confine == Confine::Off {
            return fetched;
        }
        let why = fetched.note.clone().unwrap_or_default();
        Fetched {
            note: None,
            refusal: Some(format!(
                "{why}; not starting the job, because only cderd can confine it away from this node's devices (torque.toml [torque] confine = \"{confine}\")"
            )),
            ..fetched
        }
    };
    let Some(id) = job_id.filter(|s| !s.is_empty()) else {
        return refuse(Fetched::new(
            empty,
            None,
            Some("PBS_JOBID is not set: not a TORQUE job, no devices".into()),
            false,
        ));
    };
    let job = match JobKey::new(Lrms::Torque, id) {
        Ok(j) => j,
        Err(e) => return refuse(Fetched::new(empty, None, Some(e.to_string()), false)),
    };
    let mut client = match Client::connect(&config.node.socket, timeout) {
        Ok(c) => c,
        Err(e) => {
            return refuse(Fetched::new(
                empty,
                Some(job.clone()),
                Some(format!("{job}: {e}; no devices are visible")),
                false,
            ))
        }
    };
    let allocation = match client.env(&job) {
        Ok(a) => a,
        Err(e) if e.code() == Some(ErrorCode::UnknownJob) => {
            let note = (confine != Confine::Off)
                .then(|| format!("{job}: cderd has no record of the job on this node (did the cder prologue run?)"));
            return refuse(Fetched::new(empty, Some(job), note, true));
        }
        Err(e) if e.code() == Some(ErrorCode::PermissionDenied) => {
            let note =
                format!("{job} is not a job of this user (uid {}); no devices are visible", crate::sys::current_uid());
            return refuse(Fetched::new(empty, Some(job), Some(note), true));
        }
        Err(e) => {
            return refuse(Fetched::new(
                empty,
                Some(job.clone()),
                Some(format!("{job}: {e}; no devices are visible")),
                false,
            ))
        }
    };
    // Start from the empty lists so a type missing from the reply is still
    // set (an unset variable means every device).
    let mut env = empty;
    // A job recorded with no devices is confined too: away from every
    // device cderd manages.
    if confine == Confine::Off {
        // Inside the job's device cgroup (the starter put the job there),
        // the CUDA runtime numbers the job's devices from 0.
        let numbering = if in_job_group(&job, &read_own_cgroups()) {
            allocation.relative_env(&config.cders)
        } else {
            allocation.env
        };
        env.0.extend(numbering.0);
        return Fetched::new(env, Some(job), None, true);
    }
    match client.confine(&job) {
        Ok(confined) => {
            env.0.extend(allocation.relative_env(&config.cders).0);
            Fetched { env, job: Some(job), note: None, answered: true, confined: Some(confined), refusal: None }
        }
        Err(e) => {
            env.0.extend(allocation.env.0);
            let why = format!("{job}: cannot confine the job to its devices: {e}");
            match confine {
                Confine::Required => Fetched {
                    refusal: Some(format!(
                        "{why}; not starting it, because every other job's devices would be open to it (torque.toml [torque] confine = \"required\"; \"optional\" runs it with the visible-device variables only)"
                    )),
                    ..Fetched::new(env, Some(job), None, true)
                },
                _ => Fetched::new(env, Some(job), Some(format!("{why}; running with the visible-device variables only (confine = \"optional\")")), true),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_group_is_recognised_only_for_its_own_job() {
        let job = JobKey::new(Lrms::Torque, "17.ce").unwrap();
        let v1 = "12:devices:/cder/torque-17.ce-abc123def456\n11:memory:/\n0::/\n";
        let v2 = "12:devices:/\n0::/cder/torque-17.ce-abc123def456\n";
        assert!(in_job_group(&job, v1));
        assert!(in_job_group(&job, v2));
        assert!(!in_job_group(&job, "12:devices:/cder/torque-170.ce-abc\n0::/\n"), "another job's group");
        assert!(!in_job_group(&job, "12:devices:/\n0::/user.slice\n"));
        assert!(!in_job_group(&job, ""));
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn environment_as_started_keeps_every_entry_in_order() {
        let env = environment_as_started(
            b"PBS_JOBID=17.ce\0LD_LIBRARY_PATH=/opt/x/lib\0EMPTY=\0A=b=c\0=nameless\0noequals\0TMPDIR=/tmp/17\0",
        );
        let env: Vec<(String, String)> =
            env.into_iter().map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap())).collect();
        let want = [
            ("PBS_JOBID", "17.ce"),
            ("LD_LIBRARY_PATH", "/opt/x/lib"),
            ("EMPTY", ""),
            ("A", "b=c"),
            ("TMPDIR", "/tmp/17"),
        ];
        assert_eq!(env, want.map(|(k, v)| (k.to_string(), v.to_string())));
        assert!(environment_as_started(b"").is_empty());
    }

    #[test]
    fn pbs_mom_layout() {
        let e = command_from_argv(&os(&["/usr/libexec/cder/cder-job-starter", "/bin/bash", "-bash"])).unwrap();
        assert_eq!(e, Exec { program: "/bin/bash".into(), arg0: "-bash".into(), args: vec![] });
        // Login sourcing bypassed ($source_login_batch false): plain name.
        let e = command_from_argv(&os(&["js", "/bin/sh", "sh", "-c", "hostname"])).unwrap();
        assert_eq!((e.arg0.to_str(), e.args.len()), (Some("sh"), 2));
    }

    #[test]
    fn by_hand_layout() {
        let e = command_from_argv(&os(&["cder-job-starter", "/usr/bin/env"])).unwrap();
        assert_eq!(e, Exec { program: "/usr/bin/env".into(), arg0: "/usr/bin/env".into(), args: vec![] });
        let e = command_from_argv(&os(&["js", "python3", "-c", "print(1)"])).unwrap();
        assert_eq!(e.args, os(&["-c", "print(1)"]));
        assert!(command_from_argv(&os(&["js"])).is_none());
    }

    #[test]
    fn no_job_or_no_daemon_gives_the_empty_list() {
        let mut config = fallback_config();
        config.node.socket = "/nonexistent/cderd.sock".into();
        let f = fetch(&config, None, Duration::from_secs(1), Confine::Off);
        assert_eq!(f.env.get("CUDA_VISIBLE_DEVICES"), Some(""));
        assert!(f.note.unwrap().contains("PBS_JOBID"));
        assert_eq!(f.refusal, None);
        let f = fetch(&config, Some("12.ce"), Duration::from_secs(1), Confine::Off);
        assert_eq!(f.env.get("CUDA_VISIBLE_DEVICES"), Some(""));
        assert!(!f.answered);
        assert!(f.note.unwrap().contains("/nonexistent/cderd.sock"));
        let f = fetch(&config, Some("12;x"), Duration::from_secs(1), Confine::Off);
        assert_eq!(f.env.get("CUDA_VISIBLE_DEVICES"), Some(""));
    }

    #[test]
    fn a_job_that_cannot_be_confined_is_refused_unless_confine_is_off() {
        let mut config = fallback_config();
        config.node.socket = "/nonexistent/cderd.sock".into();
        for confine in [Confine::Required, Confine::Optional] {
            let f = fetch(&config, Some("12.ce"), Duration::from_secs(1), confine);
            let refusal = f.refusal.expect("cderd unreachable: refused");
            assert!(
                refusal.contains("/nonexistent/cderd.sock") && refusal.contains(&format!("confine = \"{confine}\"")),
                "{refusal}"
            );
            let f = fetch(&config, None, Duration::from_secs(1), confine);
            assert!(f.refusal.unwrap().contains("PBS_JOBID is not set"));
            assert!(fetch(&config, Some("12;x"), Duration::from_secs(1), confine).refusal.is_some());
        }
    }
}
