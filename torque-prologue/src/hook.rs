//! pbs_mom's hook contract: which script is running, what its arguments
//! mean, and what its exit status tells pbs_mom.
//!
//! pbs_mom runs the scripts in `mom_priv/` with an empty environment,
//! stdin on `/dev/null` and the arguments below (TORQUE Administrator
//! Guide, appendix G, "Script environment"):
//!
//! | | prologue, prologue.user, prologue.parallel | epilogue, epilogue.user, epilogue.precancel, epilogue.parallel |
//! |---|---|---|
//! | 1 | job id | job id |
//! | 2 | job execution user | job execution user |
//! | 3 | job execution group | job execution group |
//! | 4 | job name | job name |
//! | 5 | requested resource limits | session id |
//! | 6 | queue | requested resource limits |
//! | 7 | account | resources used |
//! | 8 | (newer versions: more) | queue |
//! | 9 | | account |
//! | 10 | | job exit code |
//!
//! Newer TORQUE versions append arguments (the script's location, …); they
//! are kept in [`JobArgs::extra`] and otherwise ignored.
//!
//! A prologue's exit status is a decision ("Prologue error processing"):
//! 0 runs the job, 1 aborts it, anything greater requeues it. The codes
//! pbs_mom itself produces (-4 timeout, -3 wait failed, -2 input file,
//! -1 permission error) also requeue. cder uses 1 for a request that can
//! never be met on this node and 2 for devices that are only busy, or a
//! cderd that cannot be asked right now. Epilogues always exit 0: a failed
//! release is logged and left to `cderctl reconcile`, so that the node is
//! never taken out of service over it.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use cder_model::{JobKey, Lrms};
use cder_protocol::{AllocRequest, Client, ClientError, ErrorCode};

use crate::limits::{requested_devices, Role};
use crate::mom::{assigned_gpus, PbsHome};
use crate::settings::{Confine, TorqueSettings};
use crate::sys::{user_by_name, UserError};

/// pbs_mom's meaning of a prologue's exit status.
pub mod exit {
    /// The job runs.
    pub const RUN: u8 = 0;
    /// The job is aborted (a request that can never be met here).
    pub const ABORT: u8 = 1;
    /// The job is requeued (any status above 1): devices busy, cderd away.
    pub const REQUEUE: u8 = 2;
}

/// Which of pbs_mom's scripts this process is, from its file name in
/// `mom_priv/`. One binary is installed under every name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    /// `prologue`: mother superior, root, before the job. Allocates.
    Prologue,
    /// `prologue.parallel`: each sister, root. Allocates on that node.
    PrologueParallel,
    /// `prologue.user`: mother superior, as the job's user. Reports the
    /// job's devices into its output.
    PrologueUser,
    /// `epilogue`: mother superior, root, after the job. Releases.
    Epilogue,
    /// `epilogue.parallel`: each sister, root. Releases on that node.
    EpilogueParallel,
    /// `epilogue.precancel`: mother superior, when a cancel arrives. Releases.
    EpiloguePrecancel,
    /// `epilogue.user`: mother superior, as the job's user. Reports the
    /// device-seconds the job used into its output.
    EpilogueUser,
}

/// Every file name the hook binary answers to, with its kind.
pub const HOOK_NAMES: &[(&str, HookKind)] = &[
    ("prologue", HookKind::Prologue),
    ("prologue.parallel", HookKind::PrologueParallel),
    ("prologue.user", HookKind::PrologueUser),
    ("epilogue", HookKind::Epilogue),
    ("epilogue.parallel", HookKind::EpilogueParallel),
    ("epilogue.precancel", HookKind::EpiloguePrecancel),
    ("epilogue.user", HookKind::EpilogueUser),
];

impl HookKind {
    /// The kind named by `argv[0]`'s file name (`/var/spool/torque/mom_priv/prologue`).
    pub fn from_program_name(argv0: &str) -> Option<HookKind> {
        let base = Path::new(argv0).file_name()?.to_str()?;
        HOOK_NAMES.iter().find(|(n, _)| *n == base).map(|(_, k)| *k)
    }

    /// The file name in `mom_priv/`.
    pub fn file_name(self) -> &'static str {
        HOOK_NAMES.iter().find(|(_, k)| *k == self).map(|(n, _)| *n).unwrap_or("prologue")
    }

    /// Prologue argument layout (else epilogue layout).
    pub fn is_prologue(self) -> bool {
        matches!(self, HookKind::Prologue | HookKind::PrologueParallel | HookKind::PrologueUser)
    }

    /// Whether pbs_mom runs it as root (else as the job's user).
    pub fn runs_as_root(self) -> bool {
        !matches!(self, HookKind::PrologueUser | HookKind::EpilogueUser)
    }

    /// Mother superior or sister.
    pub fn role(self) -> Role {
        match self {
            HookKind::PrologueParallel | HookKind::EpilogueParallel => Role::Sister,
            _ => Role::MotherSuperior,
        }
    }

    /// The tag of its log lines: `cder-prologue`, `cder-epilogue.parallel` …
    pub fn tag(self) -> String {
        format!("cder-{}", self.file_name())
    }
}

/// The arguments pbs_mom passed, by meaning.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobArgs {
    /// The job id, as pbs_mom passes it (argument 1, never empty).
    pub job_id: String,
    /// The job execution user (argument 2).
    pub user: Option<String>,
    /// The job execution group (argument 3).
    pub group: Option<String>,
    /// The job name (argument 4).
    pub job_name: Option<String>,
    /// Epilogues only.
    pub session_id: Option<String>,
    /// The requested resource limits (`nodes=…,gres=…`), where the device
    /// request is read from.
    pub limits: Option<String>,
    /// Epilogues only.
    pub resources_used: Option<String>,
    /// The job's queue.
    pub queue: Option<String>,
    /// The job's account string (often empty).
    pub account: Option<String>,
    /// Epilogues only.
    pub exit_code: Option<String>,
    /// What newer pbs_mom versions add.
    pub extra: Vec<String>,
}

/// The arguments do not fit pbs_mom's layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl JobArgs {
    /// Reads `args` (without argv\[0\]) in `kind`'s layout. Only the job id
    /// is required; a prologue also needs the user.
    pub fn parse(kind: HookKind, args: &[String]) -> Result<JobArgs, UsageError> {
        let at = |i: usize| args.get(i).cloned();
        let job_id = at(0)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| UsageError(format!("{}: missing the job id (argument 1)", kind.file_name())))?;
        let mut a = JobArgs { job_id, user: at(1), group: at(2), job_name: at(3), ..JobArgs::default() };
        if kind.is_prologue() {
            a.limits = at(4);
            a.queue = at(5);
            a.account = at(6);
            a.extra = args.iter().skip(7).cloned().collect();
            if a.user.as_deref().unwrap_or("").is_empty() && kind != HookKind::PrologueUser {
                return Err(UsageError(format!("{}: missing the job's user (argument 2)", kind.file_name())));
            }
        } else {
            a.session_id = at(4);
            a.limits = at(5);
            a.resources_used = at(6);
            a.queue = at(7);
            a.account = at(8);
            a.exit_code = at(9);
            a.extra = args.iter().skip(10).cloned().collect();
        }
        Ok(a)
    }

    /// `torque:<job id>`.
    pub fn job_key(&self) -> Result<JobKey, UsageError> {
        JobKey::new(Lrms::Torque, &self.job_id).map_err(|e| UsageError(e.to_string()))
    }
}

/// What a prologue decided, with the reason pbs_mom's logs and the job's
/// error file should show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrologueOutcome {
    /// Run the job (exit status 0).
    Run(String),
    /// Abort the job (exit status 1): a request that can never be satisfied.
    Abort(String),
    /// Requeue the job (exit status above 1): worth another try later.
    Requeue(String),
}

impl PrologueOutcome {
    /// pbs_mom's exit status for this decision.
    pub fn exit_code(&self) -> u8 {
        match self {
            PrologueOutcome::Run(_) => exit::RUN,
            PrologueOutcome::Abort(_) => exit::ABORT,
            PrologueOutcome::Requeue(_) => exit::REQUEUE,
        }
    }

    /// The reason, without the decision.
    pub fn message(&self) -> &str {
        match self {
            PrologueOutcome::Run(m) | PrologueOutcome::Abort(m) | PrologueOutcome::Requeue(m) => m,
        }
    }
}

impl fmt::Display for PrologueOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            PrologueOutcome::Run(_) => "run",
            PrologueOutcome::Abort(_) => "abort",
            PrologueOutcome::Requeue(_) => "requeue",
        };
        write!(f, "{what}: {}", self.message())
    }
}

/// How to reach cderd.
#[derive(Debug, Clone)]
pub struct Cderd<'a> {
    /// cderd's Unix socket.
    pub socket: &'a Path,
    /// Bound on every read and write of one call.
    pub timeout: Duration,
}

impl Cderd<'_> {
    fn connect(&self) -> Result<Client, ClientError> {
        Client::connect(self.socket, self.timeout)
    }
}

/// What pbs_mom has on disk for the job on this node: where to look for
/// TORQUE's own GPU assignment.
#[derive(Debug, Clone)]
pub struct Mom {
    /// `$PBS_HOME`, when known.
    pub home: Option<PbsHome>,
    /// This host's name, to pick its entries out of `exec_gpus`.
    pub hostname: String,
}

/// The prologue (and prologue.parallel): allocate the job's devices on
/// this node and decide run / abort / requeue.
///
/// The batch system is the authority: where TORQUE assigned GPUs
/// (`exec_gpus`), the job gets exactly those (cderd records them, and
/// refuses if its ledger has one held by another job); otherwise cderd
/// chooses as many as the form the site's scheduler counts asks for, and
/// forms the scheduler does not count are ignored.
pub fn prologue(
    kind: HookKind,
    args: &JobArgs,
    settings: &TorqueSettings,
    cderd: &Cderd<'_>,
    mom: &Mom,
) -> PrologueOutcome {
    let job = match args.job_key() {
        Ok(j) => j,
        Err(e) => return PrologueOutcome::Abort(e.0),
    };
    let requested = match requested_devices(args.limits.as_deref().unwrap_or(""), kind.role(), settings) {
        Ok(r) => r,
        Err(e) => return PrologueOutcome::Abort(format!("{job}: {e}")),
    };
    let mut notes = Vec::new();
    if !requested.ignored.is_empty() {
        notes.push(format!(
            "ignored {} (directive = \"{}\": the scheduler does not count devices asked for that way)",
            requested.ignored.join(", "),
            settings.directive
        ));
    }
    let assigned = match &mom.home {
        Some(home) => match assigned_gpus(home, &args.job_id, &mom.hostname) {
            Ok(a) => a,
            // TORQUE's files exist but cannot be read: retry once the node is fixed.
            Err(e) => return PrologueOutcome::Requeue(format!("{job}: reading TORQUE's GPU assignment: {e}")),
        },
        None => None,
    };
    // exec_gpus exists but names only other hosts: TORQUE counted no GPU
    // here, whatever the node spec asks for (a sister of gpus=1+ppn=1).
    let (assigned, requested_count) = match assigned {
        Some(a) if a.devices.is_empty() => {
            let asked = requested
                .count
                .map(|n| format!("; the limits ask for {n}, which TORQUE did not count on this host"))
                .unwrap_or_default();
            notes.push(format!("TORQUE assigned GPUs only on other hosts ({}), none here{asked}", a.source.display()));
            (None, None)
        }
        other => (other, requested.count),
    };
    let (count, devices) = match (&assigned, requested_count) {
        (Some(a), asked) => {
            let n = a.devices.len() as u32;
            if asked.is_some_and(|c| c != n) {
                notes.push(format!(
                    "TORQUE assigned {n} GPUs here ({}), the limits ask for {}; TORQUE's assignment is used",
                    a.source.display(),
                    asked.unwrap_or(0)
                ));
            }
            (n, Some(a.devices.clone()))
        }
        (None, Some(n)) => (n, None),
        (None, None) => {
            let mut m = format!("{job} asks for no {} devices", settings.cder_type);
            if settings.confine != Confine::Off {
                // The job starter refuses a job cderd has no record of:
                // requeue now rather than let the job fail at its start.
                match record_without_devices(&job, args.user.as_deref().unwrap_or(""), settings, cderd) {
                    Ok(recorded) => {
                        m.push_str("; ");
                        m.push_str(&recorded);
                    }
                    Err(outcome) => return outcome,
                }
            }
            for n in &notes {
                m.push_str("; ");
                m.push_str(n);
            }
            return PrologueOutcome::Run(m);
        }
    };
    let user = args.user.as_deref().unwrap_or("");
    let uid = match user_by_name(user) {
        Ok(ids) => ids.uid,
        Err(e @ UserError::NotFound(_)) => return PrologueOutcome::Abort(format!("{job}: {e}")),
        Err(e @ UserError::Lookup { .. }) => return PrologueOutcome::Requeue(format!("{job}: {e}")),
    };
    let mut client = match cderd.connect() {
        Ok(c) => c,
        Err(e) => return PrologueOutcome::Requeue(format!("{job}: {e}")),
    };
    let mut request = AllocRequest::new(job.clone(), uid, count);
    request.cder_type = settings.cder_type.clone();
    request.devices = devices.clone();
    let result = match alloc_afresh(&mut client, &request) {
        Ok(r) => r,
        Err(e) => return PrologueOutcome::Requeue(format!("{job}: releasing a stale allocation: {e}")),
    };
    match result {
        Ok(a) => {
            let list: Vec<String> = a.devices.iter().map(|d| format!("{}:{}", d.cder_type, d.index)).collect();
            let how = if devices.is_some() { "as TORQUE assigned" } else { "chosen by cderd" };
            let mut m = format!("{job} (uid {uid}) holds {} ({how})", list.join(","));
            for n in &notes {
                m.push_str("; ");
                m.push_str(n);
            }
            PrologueOutcome::Run(m)
        }
        Err(e) if devices.is_some() && e.code() == Some(ErrorCode::Conflict) => PrologueOutcome::Requeue(format!(
            "{job}: TORQUE assigned {} GPUs {:?}, but cderd's ledger has one of them held by another job ({e}): the batch system and the ledger disagree; requeued until they agree (check `cderctl status` and pbs_mom's jobs)",
            settings.cder_type,
            devices.unwrap_or_default()
        )),
        Err(e) => {
            let total = if e.code() == Some(ErrorCode::Insufficient) { node_total(&mut client, &settings.cder_type) } else { None };
            classify_alloc_failure(&job, &settings.cder_type, count, &e, total)
        }
    }
}

/// `alloc`; when the job holds a different allocation from an earlier run
/// on this node (requeued, then altered), that one is released first: the
/// job is not running now. The outer error is a failed release.
fn alloc_afresh(
    client: &mut Client,
    request: &AllocRequest,
) -> Result<Result<cder_protocol::Allocation, ClientError>, ClientError> {
    let result = client.alloc(request);
    if matches!(&result, Err(e) if e.code() == Some(ErrorCode::Conflict)) {
        client.release(&request.job)?;
        return Ok(client.alloc(request));
    }
    Ok(result)
}

/// Records a job that asked for no devices with none (`count = 0`), so
/// that the job starter can confine it away from every device cderd
/// manages (a job of the same user could otherwise open a GPU job's
/// devices). Best effort: the job runs whatever happens; the result is
/// returned for the log.
fn record_without_devices(
    job: &JobKey,
    user: &str,
    settings: &TorqueSettings,
    cderd: &Cderd<'_>,
) -> Result<String, PrologueOutcome> {
    let not = |why: String| {
        format!("{job} asks for no devices but cannot be recorded ({why}): the job starter would refuse it")
    };
    let uid = match user_by_name(user) {
        Ok(ids) => ids.uid,
        Err(e @ UserError::NotFound(_)) => return Err(PrologueOutcome::Abort(not(e.to_string()))),
        Err(e @ UserError::Lookup { .. }) => return Err(PrologueOutcome::Requeue(not(e.to_string()))),
    };
    let mut client = cderd.connect().map_err(|e| PrologueOutcome::Requeue(not(e.to_string())))?;
    let mut request = AllocRequest::new(job.clone(), uid, 0);
    request.cder_type = settings.cder_type.clone();
    match alloc_afresh(&mut client, &request) {
        Ok(Ok(_)) => Ok("recorded with no devices, for the job starter to confine".to_string()),
        Ok(Err(e)) | Err(e) => Err(PrologueOutcome::Requeue(not(e.to_string()))),
    }
}

/// How many devices of `cder_type` this node has in any state, if cderd says.
fn node_total(client: &mut Client, cder_type: &str) -> Option<u32> {
    client.status().ok().map(|s| s.counts.get(cder_type).map_or(0, |c| c.total))
}

/// The decision for a failed `alloc`. `total` is the node's device count of
/// the type (all states), when known: a request above it can never be met.
pub fn classify_alloc_failure(
    job: &JobKey,
    cder_type: &str,
    count: u32,
    error: &ClientError,
    total: Option<u32>,
) -> PrologueOutcome {
    match error.code() {
        Some(ErrorCode::Insufficient) => match total {
            Some(t) if count > t => PrologueOutcome::Abort(format!(
                "{job} asks for {count} {cder_type} devices per node; this node has {t} in all, so the job can never run here"
            )),
            _ => PrologueOutcome::Requeue(format!("{job}: {count} {cder_type} devices are not free now ({error}); requeued")),
        },
        Some(ErrorCode::BadRequest | ErrorCode::UnknownDevice) => {
            PrologueOutcome::Abort(format!("{job}: cderd cannot ever grant this request: {error}"))
        }
        // Permission (a hook not running as root or an operator), internal
        // errors, an unreachable daemon: nothing wrong with the job; keep
        // it queued while the node is fixed.
        _ => PrologueOutcome::Requeue(format!("{job}: {error}")),
    }
}

/// What an epilogue did. It always exits 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// cderd released this many devices (0 when the job held none).
    Done(JobKey, u32),
    /// The release did not happen; `cderctl reconcile` will free the devices.
    Failed(String),
}

/// The epilogue (and epilogue.parallel, epilogue.precancel): release the
/// job's devices on this node. Idempotent.
pub fn epilogue(args: &JobArgs, cderd: &Cderd<'_>) -> Released {
    let job = match args.job_key() {
        Ok(j) => j,
        Err(e) => return Released::Failed(e.0),
    };
    let result = cderd.connect().and_then(|mut c| c.release(&job));
    match result {
        Ok(r) => Released::Done(job, r.released),
        Err(e) => Released::Failed(format!(
            "{job}: release failed: {e}; its devices stay allocated until `cderctl reconcile` frees them"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cder_protocol::ErrorReply;

    fn no_mom() -> Mom {
        Mom { home: None, hostname: "wn01".into() }
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn kinds_from_argv0() {
        assert_eq!(HookKind::from_program_name("/var/spool/torque/mom_priv/prologue"), Some(HookKind::Prologue));
        assert_eq!(HookKind::from_program_name("epilogue.precancel"), Some(HookKind::EpiloguePrecancel));
        assert_eq!(HookKind::from_program_name("./prologue.parallel"), Some(HookKind::PrologueParallel));
        assert_eq!(HookKind::from_program_name("cder-torque-hook"), None);
        for (name, kind) in HOOK_NAMES {
            assert_eq!(kind.file_name(), *name);
            assert_eq!(HookKind::from_program_name(name), Some(*kind));
        }
        assert!(!HookKind::PrologueUser.runs_as_root());
        assert_eq!(HookKind::EpilogueParallel.role(), Role::Sister);
    }

    #[test]
    fn prologue_layout_with_extra_arguments() {
        let a = JobArgs::parse(
            HookKind::Prologue,
            &s(&[
                "17.ce.example.org",
                "alice",
                "users",
                "job.sh",
                "nodes=1:ppn=2:gpus=2",
                "batch",
                "",
                "/var/spool/torque/mom_priv/jobs/17.SC",
            ]),
        )
        .unwrap();
        assert_eq!(a.user.as_deref(), Some("alice"));
        assert_eq!(a.limits.as_deref(), Some("nodes=1:ppn=2:gpus=2"));
        assert_eq!(a.queue.as_deref(), Some("batch"));
        assert_eq!(a.account.as_deref(), Some(""));
        assert_eq!(a.extra, s(&["/var/spool/torque/mom_priv/jobs/17.SC"]));
        assert_eq!(a.job_key().unwrap().to_string(), "torque:17.ce.example.org");
    }

    #[test]
    fn epilogue_layout() {
        let a = JobArgs::parse(
            HookKind::Epilogue,
            &s(&[
                "13724.node01",
                "user1",
                "user1",
                "script.sh",
                "28244",
                "neednodes=node01,nodes=1,walltime=00:01:00",
                "cput=00:00:00,mem=0kb",
                "batch",
                "",
                "0",
                "x",
            ]),
        )
        .unwrap();
        assert_eq!(a.session_id.as_deref(), Some("28244"));
        assert_eq!(a.limits.as_deref(), Some("neednodes=node01,nodes=1,walltime=00:01:00"));
        assert_eq!(a.resources_used.as_deref(), Some("cput=00:00:00,mem=0kb"));
        assert_eq!(a.exit_code.as_deref(), Some("0"));
        assert_eq!(a.extra, s(&["x"]));
        // Only the job id is needed to release.
        assert!(JobArgs::parse(HookKind::Epilogue, &s(&["5.ce"])).is_ok());
        assert!(JobArgs::parse(HookKind::Epilogue, &[]).is_err());
        assert!(JobArgs::parse(HookKind::Prologue, &s(&["5.ce"])).is_err());
    }

    #[test]
    fn job_ids_that_are_not_keys_abort() {
        let a = JobArgs {
            job_id: "17;rm -rf /".into(),
            user: Some("root".into()),
            limits: Some("nodes=1:gpus=1".into()),
            ..JobArgs::default()
        };
        let cderd = Cderd { socket: Path::new("/nonexistent.sock"), timeout: Duration::from_secs(1) };
        let o = prologue(HookKind::Prologue, &a, &TorqueSettings::default(), &cderd, &no_mom());
        assert_eq!(o.exit_code(), exit::ABORT, "{o}");
    }

    #[test]
    fn exit_policy() {
        let job: JobKey = "torque:1.ce".parse().unwrap();
        let server = |code| ClientError::Server(ErrorReply::new(code, "x"));
        let insufficient = server(ErrorCode::Insufficient);
        assert_eq!(classify_alloc_failure(&job, "gpgpu", 2, &insufficient, Some(4)).exit_code(), exit::REQUEUE);
        assert_eq!(classify_alloc_failure(&job, "gpgpu", 5, &insufficient, Some(4)).exit_code(), exit::ABORT);
        assert_eq!(classify_alloc_failure(&job, "gpgpu", 5, &insufficient, None).exit_code(), exit::REQUEUE);
        assert_eq!(
            classify_alloc_failure(&job, "gpgpu", 1, &server(ErrorCode::BadRequest), None).exit_code(),
            exit::ABORT
        );
        assert_eq!(
            classify_alloc_failure(&job, "gpgpu", 1, &server(ErrorCode::UnknownDevice), None).exit_code(),
            exit::ABORT
        );
        assert_eq!(
            classify_alloc_failure(&job, "gpgpu", 1, &server(ErrorCode::PermissionDenied), None).exit_code(),
            exit::REQUEUE
        );
        assert_eq!(
            classify_alloc_failure(&job, "gpgpu", 1, &server(ErrorCode::Internal), None).exit_code(),
            exit::REQUEUE
        );
        assert_eq!(
            classify_alloc_failure(&job, "gpgpu", 1, &ClientError::Timeout(Duration::from_secs(1)), None).exit_code(),
            exit::REQUEUE
        );
    }

    #[test]
    fn no_request_runs_without_cderd() {
        let a = JobArgs {
            job_id: "3.ce".into(),
            user: Some("no-such-user-cder".into()),
            limits: Some("nodes=1:ppn=4,walltime=1:00:00".into()),
            ..JobArgs::default()
        };
        let cderd = Cderd { socket: Path::new("/nonexistent.sock"), timeout: Duration::from_secs(1) };
        let off = TorqueSettings { confine: Confine::Off, ..TorqueSettings::default() };
        assert_eq!(prologue(HookKind::Prologue, &a, &off, &cderd, &no_mom()).exit_code(), exit::RUN);
        // Where the job starter confines, a job it could not confine is
        // requeued now instead of refused at its start.
        let mut root = a.clone();
        root.user = Some("root".into());
        let o = prologue(HookKind::Prologue, &root, &TorqueSettings::default(), &cderd, &no_mom());
        assert_eq!(o.exit_code(), exit::REQUEUE, "{o}");
        assert!(o.message().contains("cannot be recorded") && o.message().contains("/nonexistent.sock"), "{o}");
        assert_eq!(
            prologue(HookKind::Prologue, &a, &TorqueSettings::default(), &cderd, &no_mom()).exit_code(),
            exit::ABORT
        );
        // A request with cderd away requeues; an unknown user aborts first.
        let mut b = a.clone();
        b.limits = Some("nodes=1:ppn=4:gpus=1".into());
        assert_eq!(
            prologue(HookKind::Prologue, &b, &TorqueSettings::default(), &cderd, &no_mom()).exit_code(),
            exit::ABORT
        );
        b.user = Some("root".into());
        let o = prologue(HookKind::Prologue, &b, &TorqueSettings::default(), &cderd, &no_mom());
        assert_eq!(o.exit_code(), exit::REQUEUE, "{o}");
        assert!(o.message().contains("/nonexistent.sock"), "{o}");
        // A contradictory request aborts.
        let maui = TorqueSettings { directive: crate::settings::Directive::Maui, ..TorqueSettings::default() };
        b.limits = Some("nodes=1,other=cder:gpgpu:1,gres=gpus:2".into());
        assert_eq!(prologue(HookKind::Prologue, &b, &maui, &cderd, &no_mom()).exit_code(), exit::ABORT);
        // A form the scheduler does not count runs the job without devices.
        b.limits = Some("nodes=1,other=cder:gpgpu:4".into());
        let o = prologue(HookKind::Prologue, &b, &off, &cderd, &no_mom());
        assert_eq!(o.exit_code(), exit::RUN, "{o}");
        assert!(o.message().contains("ignored other=cder:gpgpu:4"), "{o}");
    }

    #[test]
    fn epilogue_without_cderd_reports_failure() {
        let a = JobArgs { job_id: "3.ce".into(), ..JobArgs::default() };
        let cderd = Cderd { socket: Path::new("/nonexistent.sock"), timeout: Duration::from_secs(1) };
        match epilogue(&a, &cderd) {
            Released::Failed(m) => assert!(m.contains("cderctl reconcile") && m.contains("torque:3.ce"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
