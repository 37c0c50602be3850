//! The adversary campaign: what a hostile ordinary user of a GPU cluster
//! tries, one action at a time at seeded random moments, on the fault
//! campaign's node (a real one-node SLURM with both cder plugins, a real
//! cderd over the fake NVML, device files chowned to their job), while an
//! honest user's jobs and an operator's requests run beside it.
//! `cder-adversary` (tests/demos) runs it for as long as asked; the
//! `adversary_campaign` test of the `cluster` binary runs it for 60 s.
//! docs/testing.md, "The adversary campaign", has the tables.
//!
//! The hostile users are `nobody` (65534), whose jobs SLURM runs, and the
//! made-up uid 4242, which has no account and so only the node's own
//! doors: cderd's socket, device files, cgroups. Their programs are
//! shell and `hostile.py` (written into the cluster's jobs folder: the
//! socket floods, the descriptor passing). The honest user is `daemon`
//! (uid 1), an account every Debian system has: its jobs ask for one GPU
//! and start their work as an `srun` step.
//!
//! After each action the checker verifies, waiting (bounded) for the node
//! to settle as the fault campaign does:
//! - no process of a job could ever open a device the ledger did not give
//!   that job (each job appends every set it can open to `opens-<id>`;
//!   cderd's accounting says what it was given);
//! - every honest request (the operator's `status`, `alloc`, `env`,
//!   `release`, and the honest jobs' step starts) answered within
//!   [`HONEST_BOUND`], measured while the action was under way;
//! - every device is accounted to exactly its holders: cderd's ledger,
//!   SLURM's jobs and the processes holding each device file open agree,
//!   and the fault campaign's invariants hold (no lost allocation, no leak);
//! - no hostile request got what it asked: an operator request, another
//!   user's job or data, a cgroup write, an injected command, a stamp the
//!   prolog reads;
//! - no GPU is kept out of the pool without a holder found (measured
//!   before the campaign puts anything back);
//! - what the GLUE provider publishes is what SLURM runs, whatever a job
//!   is named.
//!
//! Each [`Check`] names the regression it must catch, and the mutation
//! (`CDER_MUTATION`, cder_model::mutation) that puts it back; the
//! `adversary_mutations` test of the `cluster` binary applies each and
//! sees the campaign report it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cder_model::JobKey;
use cder_protocol::{
    parse_reply, AccountingRequest, AllocRequest, Client, DeviceRequest, DrainRequest, EnvRequest, ErrorCode,
    JobRequest, ReconcileRequest, Request, UsageRequest,
};

use crate::campaign::{
    self, job_key, node_config, node_invariants, parse_names, percentile, reconcile_node, remove_groups, sample,
    squeue_states, terminal, write_probe, Rng, GPUS,
};
use crate::slurm::SlurmCluster;
use cder_testkit::hostile::StalledFuse;

/// A hostile action. Each runs as an unprivileged user and lasts a few
/// seconds while the honest workload goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// Connections to cderd that never send a byte, as many as cderd lets
    /// one uid hold, kept open while honest requests are timed (issue 44,
    /// item 13).
    SilentConnections,
    /// Connect-and-close from four threads as fast as they go, with junk:
    /// nothing, half a request, an oversized line, not JSON, a bare alloc.
    ConnectionFlood,
    /// `status`, `usage` and `accounting` as a hostile uid: none may name
    /// another user's job (item 10).
    Snoop,
    /// Operator requests (`alloc`, `release`, `drain`, `reconcile`) and
    /// `env`/`confine` of an honest job, as a hostile uid.
    ForgedRequests,
    /// SPANK options and environment: a step asking past its job's grant,
    /// negative, huge and shell-laden counts, `GPGPUPerNode` and the
    /// plugin's own job-control variable in a step's environment, cder's
    /// config and socket variables in the job's.
    SpankInjection,
    /// SLURM's other GPU request forms (`--gpus`, `--gpus-per-task`,
    /// `--gpus-per-socket`, `--gpus-per-node`, a step's `--gres`), and a
    /// held job whose owner edits `TresPerNode`, `ExcNodeList` and
    /// `NumNodes` before releasing it (item 5).
    RequestForms,
    /// job_submit's fields: shell in the job name and comment, odd
    /// `--gres` strings.
    SubmitFields,
    /// cder's stamp (`CDER_NODE_GRES`, what the prolog trusts for the
    /// job's GPUs and shares) forged into the job-control environment by
    /// a SPANK plugin in the submitter's `sbatch` (the forger of
    /// `slurm_trust`): the prolog must never read it.
    ForgedStamp,
    /// A process outside any job holding 10,000 POSIX byte-range locks on
    /// its own file and 2,000 dups of that descriptor (each `fdinfo` of it
    /// lists every lock), while a GPU job of its user ends: no release may
    /// cost what that process makes it cost.
    LockHeavy,
    /// A held job whose name spells facts (`JobState=RUNNING`,
    /// `NumCPUs=many`, another partition and group): the GLUE provider
    /// still publishes, and counts it as the waiting job it is.
    HostileJobName,
    /// A job leaves a `setsid` double-forked process holding its GPU open
    /// (with and without its environment) and ends.
    Escape,
    /// A job sends its GPU's descriptor over a Unix socket to a process of
    /// a hostile user outside any job (SCM_RIGHTS), and ends.
    FdPassing,
    /// A process outside any job (uid 4242, or `nobody` beside its own
    /// jobs) opens every device file.
    OpenOutsideJob,
    /// A job's process writes into cgroups: widening its own
    /// `devices.allow`, joining another job's group, making one under
    /// cderd's parent.
    CgroupWrites,
    /// A FUSE mount of the user's that never answers, a process of theirs
    /// holding a descriptor on it, and a GPU job of theirs that ends: the
    /// release's and every `alloc`'s held-open scan meet it (item 1).
    StalledMount,
    /// A job's process asleep uninterruptibly (a `stat` into the user's
    /// never-answering FUSE mount, then `SIGKILL`) when the job ends: its
    /// release must not wait for it (item 2).
    StuckProcess,
}

impl Action {
    /// Every action, in the order the table prints them.
    pub const ALL: [Action; 16] = [
        Action::SilentConnections,
        Action::ConnectionFlood,
        Action::Snoop,
        Action::ForgedRequests,
        Action::SpankInjection,
        Action::RequestForms,
        Action::SubmitFields,
        Action::ForgedStamp,
        Action::LockHeavy,
        Action::HostileJobName,
        Action::Escape,
        Action::FdPassing,
        Action::OpenOutsideJob,
        Action::CgroupWrites,
        Action::StalledMount,
        Action::StuckProcess,
    ];

    /// The name `--actions` takes.
    pub fn name(self) -> &'static str {
        match self {
            Action::SilentConnections => "silent-connections",
            Action::ConnectionFlood => "connection-flood",
            Action::Snoop => "snoop",
            Action::ForgedRequests => "forged-requests",
            Action::SpankInjection => "spank-injection",
            Action::RequestForms => "request-forms",
            Action::SubmitFields => "submit-fields",
            Action::ForgedStamp => "forged-stamp",
            Action::LockHeavy => "lock-heavy",
            Action::HostileJobName => "hostile-job-name",
            Action::Escape => "escape",
            Action::FdPassing => "fd-passing",
            Action::OpenOutsideJob => "open-outside-job",
            Action::CgroupWrites => "cgroup-writes",
            Action::StalledMount => "stalled-mount",
            Action::StuckProcess => "stuck-process",
        }
    }

    /// Parses a comma-separated list of action names; `all` is every action.
    pub fn parse_list(text: &str) -> Result<Vec<Action>, String> {
        parse_names(text, &Action::ALL, Action::name, "action")
    }
}

/// What the checker verifies. Each names the regression it must catch
/// ([`Check::regression`]) and the mutations that put one back
/// ([`Check::mutations`]; docs/testing.md has the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Check {
    /// A process of a job could open a device the ledger did not give
    /// that job (or two running jobs one device). Must catch: a job's
    /// device cgroup or device-file owner not applied, or one device
    /// given to two jobs.
    OpenedOutsideLedger,
    /// An honest request took longer than [`HONEST_BOUND`] (a step start
    /// [`STEP_START_BOUND`]), or failed: always a violation, whatever a
    /// hostile user held meanwhile. Must catch: a user's file system or
    /// process stalling cderd (`fuse-stat`, `fdinfo-scan`).
    SlowAnswer,
    /// cderd's ledger, SLURM and the device files' holders disagree: a
    /// device held open by a process its holder is not, a running job
    /// without a record, a device, group or process of an ended job, usage
    /// counted twice. Must catch: holders ignored at release
    /// (`ignore-holders`).
    Accounting,
    /// A hostile request got what it asked: an operator request, another
    /// user's job or data, a cgroup write, an injected command that ran, a
    /// forged stamp the prolog read. Must catch: job_submit keeping the
    /// submitter's stamp (`forged-stamp`).
    Granted,
    /// A GPU kept out of the pool with no holder found (no process holds
    /// its file, none of the job it names survives) past
    /// [`KEPT_OUT_GRACE`]; measured before the campaign puts anything
    /// back. Must catch: a release whose scan stalls or overruns
    /// (`fuse-stat`, `fdinfo-scan`).
    KeptOut,
    /// The GLUE provider published nothing, or counts SLURM does not
    /// have, while a job's name spelled facts. Must catch: the provider
    /// reading a job name as a fact (`provider-job-name`).
    Published,
}

impl Check {
    /// Every check, in the order the table prints them.
    pub const ALL: [Check; 6] = [
        Check::OpenedOutsideLedger,
        Check::SlowAnswer,
        Check::Accounting,
        Check::Granted,
        Check::KeptOut,
        Check::Published,
    ];

    /// The name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Check::OpenedOutsideLedger => "a job opened a device the ledger does not give it",
            Check::SlowAnswer => "an honest request answered late or not at all",
            Check::Accounting => "a device not accounted to exactly its holders",
            Check::Granted => "a hostile request granted",
            Check::KeptOut => "a GPU kept out of the pool with no holder found",
            Check::Published => "the provider's published counts are not SLURM's",
        }
    }

    /// The regression this check must catch.
    pub fn regression(self) -> &'static str {
        match self {
            Check::OpenedOutsideLedger => "a job's device cgroup or device-file owner not applied",
            Check::SlowAnswer => "cderd waiting on a user's file system or process",
            Check::Accounting => "a released device handed out while a process still holds it",
            Check::Granted => "a submitter's forged stamp reaching the prolog",
            Check::KeptOut => "a release that keeps a GPU out for a look that did not finish",
            Check::Published => "the provider reading a job name as a fact",
        }
    }

    /// The mutations (cder_model::mutation) that must trip this check,
    /// with the actions that show each.
    pub fn mutations(self) -> &'static [(&'static str, &'static [Action])] {
        match self {
            Check::OpenedOutsideLedger => &[],
            Check::SlowAnswer => &[("fuse-stat", &[Action::StalledMount])],
            Check::Accounting => &[
                ("ignore-holders", &[Action::FdPassing]),
                ("fuse-stat", &[Action::StalledMount]),
                ("fdinfo-scan", &[Action::LockHeavy]),
            ],
            Check::Granted => &[("forged-stamp", &[Action::ForgedStamp])],
            Check::KeptOut => &[("fuse-stat", &[Action::StalledMount]), ("fdinfo-scan", &[Action::LockHeavy])],
            Check::Published => &[("provider-job-name", &[Action::HostileJobName])],
        }
    }

    /// Where the fault campaign's invariants fall.
    fn of(check: campaign::Check) -> Check {
        match check {
            campaign::Check::SharedDevice => Check::OpenedOutsideLedger,
            campaign::Check::Recovery => Check::SlowAnswer,
            campaign::Check::LostAllocation | campaign::Check::Leak | campaign::Check::Accounting => Check::Accounting,
        }
    }
}

/// How long an honest request to cderd may take, under any hostile action.
pub const HONEST_BOUND: Duration = Duration::from_secs(1);

/// How long an honest job's `srun` step may take to start: srun's own
/// round trips through slurmctld and slurmd take up to about 1 s on a
/// loaded two-core machine with no hostile action at all (p50 0.07 s), so
/// the bound on what cderd adds is this one.
pub const STEP_START_BOUND: Duration = Duration::from_secs(3);

/// What the honest step start is called in the table.
pub const STEP_START: &str = "job step start (srun)";

/// The bound of an honest request kind.
fn bound(kind: &str) -> Duration {
    if kind == STEP_START {
        STEP_START_BOUND
    } else {
        HONEST_BOUND
    }
}

/// How long a GPU may stay kept out with no holder found before it is a
/// violation: cderd looks again on its own, and a release's scan may
/// outlast its wait on a loaded node.
pub const KEPT_OUT_GRACE: Duration = Duration::from_secs(10);

/// How long the checker waits for the node to settle after an action.
pub const SETTLE: Duration = Duration::from_secs(30);

/// The honest user's account, which every Debian system has.
pub const HONEST_USER: (&str, u32) = ("daemon", 1);
/// The hostile user whose jobs SLURM runs.
pub const HOSTILE_USER: (&str, u32) = ("nobody", 65534);
/// The hostile uid without an account.
pub const HOSTILE_UID: u32 = 4242;

/// How the campaign runs.
#[derive(Debug, Clone)]
pub struct AdversaryConfig {
    /// The seed of every random choice.
    pub seed: u64,
    /// How long to run; a run also lasts until each selected action ran once.
    pub duration: Duration,
    /// The actions to choose from.
    pub actions: Vec<Action>,
    /// Print each step as it happens (stderr).
    pub verbose: bool,
    /// `CDER_MUTATION` for cderd, slurmctld (job_submit) and the GLUE
    /// provider: a regression put back in a debug build, which the
    /// campaign must report (cder_model::mutation).
    pub mutation: Option<String>,
}

/// What a campaign found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The seed it ran with.
    pub seed: u64,
    /// How long it ran.
    pub elapsed: Duration,
    /// Times each action ran.
    pub actions: BTreeMap<Action, usize>,
    /// By check: one line per violation, naming the action and seed.
    pub violations: BTreeMap<Check, Vec<String>>,
    /// Honest request kind: the times measured.
    pub honest: BTreeMap<String, Vec<Duration>>,
    /// Jobs submitted: honest, hostile.
    pub jobs: (usize, usize),
    /// What the actions met on the way (refusals, connections held …),
    /// with how often.
    pub observed: BTreeMap<String, usize>,
}

impl Report {
    /// Violations over every check.
    pub fn violation_count(&self) -> usize {
        self.violations.values().map(Vec::len).sum()
    }

    /// The table: actions run, violations per check, honest answer times.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let s = |d: Duration| format!("{:.3} s", d.as_secs_f64());
        let _ = writeln!(t, "seed {} ({:#x}), {:.0} s", self.seed, self.seed, self.elapsed.as_secs_f64());
        let _ = writeln!(t, "\n| action | runs |\n|---|---:|");
        for (a, n) in &self.actions {
            let _ = writeln!(t, "| {} | {n} |", a.name());
        }
        let _ = writeln!(t, "\n| check | violations |\n|---|---:|");
        for c in Check::ALL {
            let _ = writeln!(t, "| {} | {} |", c.name(), self.violations.get(&c).map_or(0, Vec::len));
        }
        let _ = writeln!(t, "\n| honest request | bound | max | p99 | p50 | samples |\n|---|---:|---:|---:|---:|---:|");
        for (kind, v) in &self.honest {
            let _ = writeln!(
                t,
                "| {kind} | {} | {} | {} | {} | {} |",
                s(bound(kind)),
                s(percentile(v, 1.0)),
                s(percentile(v, 0.99)),
                s(percentile(v, 0.5)),
                v.len()
            );
        }
        for (what, n) in &self.observed {
            let _ = writeln!(t, "\nobserved ({n}x): {what}");
        }
        let _ = writeln!(t, "\njobs: {} honest, {} hostile", self.jobs.0, self.jobs.1);
        for (c, lines) in &self.violations {
            for l in lines {
                let _ = writeln!(t, "VIOLATION ({}): {l}", c.name());
            }
        }
        t
    }
}

/// Jobs pending or running at once, per user, at most.
const MAX_ACTIVE: usize = 2;

/// Who submitted a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Honest,
    Hostile,
}

/// An action under way: what it started, undone at its end.
#[derive(Default)]
struct Underway {
    /// Hostile programs outside any job, ended at the action's end.
    outsiders: Vec<(String, Child)>,
    /// The action's jobs, waited for (bounded) before its end.
    jobs: Vec<u32>,
    /// Files whose existence means an injected command ran.
    tripwires: Vec<PathBuf>,
    /// The hostile user's never-answering FUSE mount: unmounted (every
    /// sleeper in it woken) at the action's end, after its checks.
    fuse: Option<StalledFuse>,
    /// Jobs submitted with a forged stamp: their prolog must not read it.
    forged: Vec<u32>,
}

/// One campaign: the cluster, the jobs, the figures.
pub struct Adversary {
    cluster: Option<SlurmCluster>,
    config: AdversaryConfig,
    /// The workload's choices.
    rng: Rng,
    /// The actions' choices (kind, spacing, variant), a stream of their own.
    action_rng: Rng,
    cgroup_parent: String,
    jobs: BTreeMap<u32, Owner>,
    /// Jobs whose `opens-<id>` history was judged after they ended.
    judged: BTreeSet<u32>,
    /// Honest jobs whose step start was measured.
    started_steps: BTreeSet<u32>,
    report: Report,
    last_reconcile: Instant,
    started: Instant,
    /// The action under way or being checked, for the violation lines.
    current: String,
    /// Numbers the operator's own `local:` jobs.
    probes: u64,
}

fn say(verbose: bool, text: &str) {
    if verbose {
        eprintln!("cder-adversary: {text}");
    }
}

impl Adversary {
    /// Starts the node: SLURM with both plugins, cderd over the fake NVML
    /// enforcing device groups and device-file owners. Needs root.
    pub fn start(config: AdversaryConfig) -> Result<Adversary, String> {
        let cgroup_parent = format!("cder-adversary-{}", std::process::id());
        let mut slurm = node_config(&cgroup_parent)?;
        slurm.cderd_enforcement.push_str("\ndevice_files = true");
        let variable = cder_model::mutation::VARIABLE;
        if let Some(m) = &config.mutation {
            slurm.cderd_env.push((variable.into(), m.clone()));
            // slurmctld (job_submit_cder.so) inherits it as it starts.
            std::env::set_var(variable, m);
        }
        let started = SlurmCluster::start(&slurm);
        if config.mutation.is_some() {
            std::env::remove_var(variable);
        }
        let mut cluster = started?;
        cluster.start_cderd()?;
        write_probe(&cluster)?;
        let helper = cluster.jobs_dir().join("hostile.py");
        std::fs::write(&helper, include_str!("hostile.py")).map_err(|e| format!("{}: {e}", helper.display()))?;
        install_forger(&cluster)?;
        write_provider_config(&cluster)?;
        Ok(Adversary {
            rng: Rng::new(config.seed ^ 0xAD7E_0044),
            action_rng: Rng::new(config.seed),
            report: Report { seed: config.seed, ..Report::default() },
            config,
            cgroup_parent,
            jobs: BTreeMap::new(),
            judged: BTreeSet::new(),
            started_steps: BTreeSet::new(),
            last_reconcile: Instant::now(),
            started: Instant::now(),
            current: "start".into(),
            probes: 0,
            cluster: Some(cluster),
        })
    }

    fn c(&self) -> &SlurmCluster {
        self.cluster.as_ref().expect("the cluster runs until drop")
    }

    fn say(&self, text: &str) {
        say(self.config.verbose, &format!("[{:6.1}s] {text}", self.started.elapsed().as_secs_f64()));
    }

    fn observe(&mut self, what: String) {
        *self.report.observed.entry(what).or_default() += 1;
    }

    fn violation(&mut self, check: Check, what: &str) {
        let line = format!("{} (seed {}): {what}", self.current, self.config.seed);
        eprintln!("cder-adversary: VIOLATION ({}): {line}", check.name());
        self.report.violations.entry(check).or_default().push(line);
    }

    /// Runs the campaign and returns its report.
    pub fn run(mut self) -> Result<Report, String> {
        self.started = Instant::now();
        let mut bag: Vec<Action> = Vec::new();
        let mut next = Instant::now() + self.action_rng.millis(1000, 3000);
        let mut done: BTreeSet<Action> = BTreeSet::new();
        self.current = "the honest workload alone".into();
        loop {
            let all_done = self.config.actions.iter().all(|a| done.contains(a));
            if self.started.elapsed() >= self.config.duration && all_done {
                break;
            }
            if Instant::now() < next {
                self.tick();
                continue;
            }
            // A shuffled bag of every selected action: each comes once per
            // round, in a seeded order.
            if bag.is_empty() {
                bag = self.config.actions.clone();
                for i in (1..bag.len()).rev() {
                    let j = self.action_rng.below(i as u64 + 1) as usize;
                    bag.swap(i, j);
                }
            }
            let action = bag.pop().expect("refilled above");
            let n = self.report.actions.get(&action).copied().unwrap_or(0) + 1;
            self.current = format!("{} #{n} at {:.0} s", action.name(), self.started.elapsed().as_secs_f64());
            self.say(&format!("begin {}", self.current));
            let underway = self.begin(action)?;
            self.hold(underway).map_err(|e| format!("{}: {e}", self.current))?;
            *self.report.actions.entry(action).or_default() += 1;
            done.insert(action);
            self.check();
            self.sweep();
            next = Instant::now() + self.action_rng.millis(300, 2000);
        }
        self.current = "end of run".into();
        self.check();
        self.report.elapsed = self.started.elapsed();
        self.report.jobs = (
            self.jobs.values().filter(|o| **o == Owner::Honest).count(),
            self.jobs.values().filter(|o| **o == Owner::Hostile).count(),
        );
        Ok(std::mem::take(&mut self.report))
    }

    /// One step of the honest workload: perhaps a job, the operator's
    /// timed requests, the reconcile timer; then a pause.
    fn tick(&mut self) {
        let states = squeue_states(self.c()).unwrap_or_default();
        let active = self
            .jobs
            .iter()
            .filter(|(id, o)| **o == Owner::Honest && states.get(id).is_some_and(|s| !terminal(s)))
            .count();
        if active < MAX_ACTIVE && self.rng.below(3) > 0 {
            self.submit_honest();
        }
        self.operator_requests(&states);
        self.step_starts();
        if self.last_reconcile.elapsed() > Duration::from_secs(15) {
            self.last_reconcile = Instant::now();
            reconcile_node(self.c());
        }
        std::thread::sleep(self.rng.millis(150, 500));
    }

    /// An honest job: one GPU (as GRES or through cder's option), its work
    /// an `srun` step that records how long it took to start.
    fn submit_honest(&mut self) {
        let dir = self.c().jobs_dir();
        let seconds = 2 + self.rng.below(6);
        let gpus = if self.rng.below(2) == 0 { "--gres=gpu:1" } else { "--gpgpu-per-node=1" };
        let script = format!(
            "#!/bin/sh\nexport T0=$(date +%s%N)\n\
             exec srun -n1 sh -c 'echo $(( $(date +%s%N) - T0 )) > \"{dir}/start-$SLURM_JOB_ID\"; exec sh \"{dir}/probe.sh\" {seconds}'\n",
            dir = dir.display()
        );
        match self.c().sbatch_as(HONEST_USER.0, HONEST_USER.0, &[gpus], &script) {
            Ok(id) => {
                self.jobs.insert(id, Owner::Honest);
                self.say(&format!("honest sbatch {gpus} ({seconds} s) -> {id}"));
            }
            Err(e) => self.say(&format!("honest sbatch {gpus}: {}", e.trim())),
        }
    }

    /// Times one request of the operator's: a violation past the bound or
    /// on an error other than `allowed`.
    fn timed<T>(
        &mut self,
        kind: &str,
        allowed: Option<ErrorCode>,
        call: impl FnOnce(&mut Client) -> Result<T, cder_protocol::ClientError>,
    ) -> Option<T> {
        let since = Instant::now();
        let result = Client::connect(self.c().cderd_socket(), Duration::from_secs(10)).and_then(|mut c| call(&mut c));
        let took = since.elapsed();
        self.report.honest.entry(kind.to_string()).or_default().push(took);
        if took > HONEST_BOUND {
            self.violation(Check::SlowAnswer, &format!("the operator's {kind} took {:.2} s", took.as_secs_f64()));
        }
        match result {
            Ok(v) => Some(v),
            Err(e) if allowed.is_some() && e.code() == allowed => None,
            Err(e) => {
                self.violation(Check::SlowAnswer, &format!("the operator's {kind} failed: {e}"));
                None
            }
        }
    }

    /// The operator's requests, as root: `status`, an `alloc`/`env`/
    /// `release` of a job of its own, `env` of a running honest job.
    fn operator_requests(&mut self, states: &BTreeMap<u32, String>) {
        self.timed("status", None, |c| c.status());
        self.probes += 1;
        let job: JobKey = format!("local:adversary-{}", self.probes).parse().expect("a valid key");
        if self.timed("alloc", None, |c| c.alloc(&AllocRequest::new(job.clone(), HONEST_USER.1, 0))).is_some() {
            self.timed("env", None, |c| c.env(&job));
            self.timed("release", None, |c| c.release(&job));
        }
        let running: Vec<u32> = self
            .jobs
            .iter()
            .filter(|(id, o)| **o == Owner::Honest && states.get(id).is_some_and(|s| s == "RUNNING"))
            .map(|(id, _)| *id)
            .collect();
        if let Some(id) = running.get(self.rng.below(running.len() as u64) as usize) {
            let key = job_key(*id).expect("a valid key");
            // Over the bound is a violation whatever a hostile user held
            // meanwhile: an honest job is never made to wait for one. The
            // job may have ended since squeue answered.
            self.timed("env of a running job", Some(ErrorCode::UnknownJob), |c| c.env(&key));
        }
    }

    /// Reads the honest jobs' step start times.
    fn step_starts(&mut self) {
        let dir = self.c().jobs_dir();
        let honest: Vec<u32> = self
            .jobs
            .iter()
            .filter(|(id, o)| **o == Owner::Honest && !self.started_steps.contains(id))
            .map(|(id, _)| *id)
            .collect();
        for id in honest {
            let Ok(text) = std::fs::read_to_string(dir.join(format!("start-{id}"))) else { continue };
            let Ok(ns) = text.trim().parse::<u64>() else { continue };
            self.started_steps.insert(id);
            let took = Duration::from_nanos(ns);
            self.report.honest.entry(STEP_START.into()).or_default().push(took);
            if took > STEP_START_BOUND {
                self.violation(
                    Check::SlowAnswer,
                    &format!("honest job {id}'s step took {:.2} s to start", took.as_secs_f64()),
                );
            }
        }
    }

    /// The hostile helper run as `uid` (and its group), outside any job.
    fn hostile(&self, uid: u32, args: &[&str]) -> Command {
        let mut c = Command::new("setpriv");
        c.args([&format!("--reuid={uid}"), &format!("--regid={uid}"), "--clear-groups", "--", python3()])
            .arg(self.c().jobs_dir().join("hostile.py"))
            .args(args)
            .current_dir(self.c().jobs_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        c
    }

    /// Runs the hostile helper to its end; its stdout.
    fn hostile_output(&self, uid: u32, args: &[&str]) -> Result<String, String> {
        let out = self.hostile(uid, args).output().map_err(|e| format!("running hostile.py: {e}"))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Submits a hostile job as `nobody`: `script`'s body after the shebang.
    fn submit_hostile(&mut self, args: &[&str], body: &str, underway: &mut Underway) {
        let script = format!("#!/bin/sh\n{body}");
        // A minute at most, whatever the action's script waits for.
        let args: Vec<&str> = ["--time=1"].into_iter().chain(args.iter().copied()).collect();
        let args = args.as_slice();
        match self.c().sbatch_as(HOSTILE_USER.0, "nogroup", args, &script) {
            Ok(id) => {
                self.jobs.insert(id, Owner::Hostile);
                underway.jobs.push(id);
                self.say(&format!("hostile sbatch {} -> {id}", args.join(" ")));
            }
            Err(e) => {
                let why = e.lines().last().unwrap_or("").trim().to_string();
                self.say(&format!("hostile sbatch {}: {why}", args.join(" ")));
                self.observe(format!("sbatch {} refused", args.join(" ")));
            }
        }
    }

    /// A tripwire file: a command that creates it is an injection that ran.
    fn tripwire(&self, underway: &mut Underway) -> PathBuf {
        let path = self.c().jobs_dir().join(format!(
            "pwned-{}-{}",
            self.started.elapsed().as_millis(),
            underway.tripwires.len()
        ));
        underway.tripwires.push(path.clone());
        path
    }

    fn probe(&self) -> PathBuf {
        self.c().jobs_dir().join("probe.sh")
    }

    fn gpu_paths(&self) -> Vec<String> {
        (0..GPUS).map(|i| self.c().gpu_path(i).display().to_string()).collect()
    }

    /// A running honest job, if any, else a made-up one.
    fn honest_target(&self) -> JobKey {
        let states = squeue_states(self.c()).unwrap_or_default();
        let id = self
            .jobs
            .iter()
            .filter(|(id, o)| **o == Owner::Honest && states.get(id).is_some_and(|s| s == "RUNNING"))
            .map(|(id, _)| *id)
            .next_back()
            .unwrap_or(1);
        job_key(id).expect("a valid key")
    }

    /// Starts `action`.
    fn begin(&mut self, action: Action) -> Result<Underway, String> {
        let mut u = Underway::default();
        let socket = self.c().cderd_socket().display().to_string();
        let probe = self.probe().display().to_string();
        let uid = if self.action_rng.below(2) == 0 { HOSTILE_USER.1 } else { HOSTILE_UID };
        match action {
            Action::SilentConnections => {
                let child = self
                    .hostile(uid, &["silent", &socket, "40", "6"])
                    .spawn()
                    .map_err(|e| format!("starting hostile.py: {e}"))?;
                u.outsiders.push((format!("silent connections of uid {uid}"), child));
            }
            Action::ConnectionFlood => {
                let child = self
                    .hostile(uid, &["flood", &socket, "4"])
                    .spawn()
                    .map_err(|e| format!("starting hostile.py: {e}"))?;
                u.outsiders.push((format!("connection flood of uid {uid}"), child));
            }
            Action::Snoop => {
                let lines = [
                    Request::Status.to_line(),
                    Request::Usage(UsageRequest { recent: Some(100), ..UsageRequest::default() }).to_line(),
                    Request::Accounting(AccountingRequest::default()).to_line(),
                ];
                let mut args = vec!["ask", socket.as_str()];
                args.extend(lines.iter().map(|l| l.trim_end()));
                let out = self.hostile_output(uid, &args)?;
                let honest: Vec<String> = self
                    .jobs
                    .iter()
                    .filter(|(_, o)| **o == Owner::Honest)
                    .map(|(id, _)| format!("\"slurm:{id}\""))
                    .collect();
                for (request, reply) in ["status", "usage", "accounting"].iter().zip(out.lines()) {
                    let named: Vec<&str> =
                        honest.iter().filter(|k| reply.contains(k.as_str())).map(String::as_str).collect();
                    if !named.is_empty() {
                        self.violation(
                            Check::Granted,
                            &format!("uid {uid}'s {request} names the honest user's job(s) {}", named.join(", ")),
                        );
                    }
                }
            }
            Action::ForgedRequests => {
                let job = self.honest_target();
                let requests = [
                    ("release", Request::Release(JobRequest { job: job.clone() })),
                    ("env", Request::Env(EnvRequest::new(job.clone()))),
                    ("confine", Request::Confine(JobRequest { job: job.clone() })),
                    ("alloc", Request::Alloc(AllocRequest::new(job.clone(), uid, GPUS))),
                    ("drain", Request::Drain(DrainRequest { device: "gpgpu:0".into(), reason: "mine".into() })),
                    ("resume", Request::Resume(DeviceRequest { device: "gpgpu:0".into() })),
                    (
                        "reconcile",
                        Request::Reconcile(ReconcileRequest { live_jobs: Vec::new(), lrms: None, as_of: None }),
                    ),
                ];
                let lines: Vec<String> = requests.iter().map(|(_, r)| r.to_line()).collect();
                let mut args = vec!["ask", socket.as_str()];
                args.extend(lines.iter().map(|l| l.trim_end()));
                let out = self.hostile_output(uid, &args)?;
                for ((name, _), reply) in requests.iter().zip(out.lines()) {
                    match parse_reply(reply) {
                        Ok(Ok(_)) => self.violation(
                            Check::Granted,
                            &format!("uid {uid}'s {name} of {job} was granted: {}", truncate(reply)),
                        ),
                        Ok(Err(e)) => self.observe(format!("forged {name}: refused ({:?})", e.code)),
                        Err(_) => self.observe(format!("forged {name}: {}", truncate(reply))),
                    }
                }
            }
            Action::SpankInjection => {
                let pwned = self.tripwire(&mut u).display().to_string();
                let gpus = self.gpu_paths().join(" ");
                let forms: [(Vec<String>, &str, String); 10] = [
                    (vec!["--gpgpu-per-node=1".into()], "", "--gpgpu-per-node=4".into()),
                    (vec![], "", "--gpgpu-per-node=2".into()),
                    (vec!["--gpgpu-per-node=1".into()], "GPGPUPerNode=4", String::new()),
                    (
                        vec!["--gpgpu-per-node=1".into()],
                        "SPANK_CDER_GPGPU_PER_NODE=4 CDER_GPGPU_PER_NODE=4",
                        String::new(),
                    ),
                    (vec!["--gpgpu-per-node=-1".into()], "", String::new()),
                    (vec!["--gpgpu-per-node=99999999999".into()], "", String::new()),
                    (vec![format!("--gpgpu-per-node=1;touch {pwned}")], "", String::new()),
                    (vec!["--cder=gpgpu:1".into()], "", "--cder=gpgpu:4".into()),
                    (vec!["--gpgpu-per-node=1".into(), "--gpgpu-min-memory=-1".into()], "", String::new()),
                    (
                        vec![
                            "--gres=gpu:1".into(),
                            format!("--export=ALL,CDER_CONFIG={pwned},CDER_SOCKET={pwned},CDER_DEVICES={gpus}"),
                        ],
                        "CDER_CONFIG=/dev/null",
                        String::new(),
                    ),
                ];
                let (args, step_env, step_opts) = &forms[self.action_rng.below(forms.len() as u64) as usize];
                let body = format!("sh {probe} 2 &\nenv {step_env} srun -n1 {step_opts} sh {probe} 2\nwait\n");
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                self.submit_hostile(&args, &body, &mut u);
            }
            Action::RequestForms => {
                let forms: [&[&str]; 6] = [
                    &["--gpus=1"],
                    &["--gpus-per-task=1", "-n1"],
                    &["--gpus-per-socket=1", "--sockets-per-node=1"],
                    &["--gpus-per-node=2"],
                    &["--gres=gpu:1"],
                    &["-H", "--gres=gpu:1"],
                ];
                let form = self.action_rng.below(forms.len() as u64) as usize;
                let step = ["", "--gres=gpu:3", "--gpus=4"][self.action_rng.below(3) as usize];
                let body = format!("sh {probe} 2 &\nsrun -n1 {step} sh {probe} 2\nwait\n");
                self.submit_hostile(forms[form], &body, &mut u);
                if let (Some(&id), true) = (u.jobs.last(), forms[form][0] == "-H") {
                    self.edit_held_job(id);
                }
            }
            Action::SubmitFields => {
                let pwned = self.tripwire(&mut u).display().to_string();
                let forms: [Vec<String>; 4] = [
                    vec![
                        "--gres=gpu:1".into(),
                        format!("--job-name=$(touch {pwned})"),
                        format!("--comment=`touch {pwned}`;cder"),
                    ],
                    vec!["--gres=gpu:1,gpu:3".into()],
                    vec!["--gres=gpu:01".into()],
                    vec![format!("--gres=gpu:1,shard:4"), format!("--comment=cder:gpgpu=4\ntouch {pwned}")],
                ];
                let form = &forms[self.action_rng.below(forms.len() as u64) as usize];
                let args: Vec<&str> = form.iter().map(String::as_str).collect();
                self.submit_hostile(&args, &format!("sh {probe} 2\n"), &mut u);
            }
            Action::ForgedStamp => {
                let forged = ["gres/shard:4", "gres/gpu:4", "gres/gpu:1,gres/shard:2"];
                let value = forged[self.action_rng.below(forged.len() as u64) as usize];
                // Per job or none: job_submit writes no stamp of its own, so
                // only the guard stands between the forgery and the prolog.
                let form: &[&str] = if self.action_rng.below(2) == 0 { &["--gpus=1"] } else { &[] };
                let control = forge_control(self.c());
                std::fs::write(&control, value).map_err(|e| format!("{}: {e}", control.display()))?;
                let before = u.jobs.len();
                self.submit_hostile(form, &format!("sh {probe} 1\n"), &mut u);
                let _ = std::fs::remove_file(&control);
                u.forged.extend(u.jobs[before..].iter().copied());
            }
            Action::LockHeavy => {
                let file = self.c().jobs_dir().join(format!("hostile-locks-{}", self.started.elapsed().as_millis()));
                let file = file.display().to_string();
                let child = self
                    .hostile(uid, &["locks", &file, "10000", "2000", "60"])
                    .spawn()
                    .map_err(|e| format!("starting hostile.py: {e}"))?;
                u.outsiders.push((format!("a lock-heavy process of uid {uid}"), child));
                // The GPU job ends once the locks are all taken, passing its
                // GPU out first: a scan the locks slow to minutes never
                // finds (nor ends) the receiver in time.
                let send = self.pass_descriptors(uid, &mut u)?;
                let body = format!(
                    "n=0; while [ ! -e {file}.ready ] && [ $n -lt 400 ]; do sleep 0.1; n=$((n+1)); done\n\
                     sh {probe} 1 &\n{send}wait\n"
                );
                self.submit_hostile(&["--gres=gpu:1"], &body, &mut u);
            }
            Action::HostileJobName => {
                let names = [
                    "p NumCPUs=many JobState=RUNNING",
                    "x JobState=RUNNING Partition=gpu-cms GroupId=root(0) UserId=root(0) TRES=cpu=1,gres/gpu=4",
                    "q JobState=RUNNING NumNodes=x JOB_GRES=gpu:4 TimeLimit=forever",
                ];
                let name = names[self.action_rng.below(names.len() as u64) as usize];
                let arg = format!("--job-name={name}");
                let mut held = Underway::default();
                self.submit_hostile(&["-H", "--gres=gpu:1", &arg], &format!("sh {probe} 1\n"), &mut held);
                if let Some(&id) = held.jobs.first() {
                    self.check_published(id, name);
                    let _ = self.c().command("scancel").arg(id.to_string()).output();
                }
            }
            Action::Escape => {
                let marker = self.c().jobs_dir().join("hostile-escape").display().to_string();
                let clear = if self.action_rng.below(2) == 0 { "env -i" } else { "" };
                let gpus = self.gpu_paths().join(" ");
                let body = format!(
                    "sh {probe} 1 &\nfor g in {gpus}; do if ( : < \"$g\" ) 2>/dev/null; then break; fi; done\n\
                     ( setsid {clear} sh -c 'exec 3< \"$1\"; while :; do sleep 1; done' {marker} \"$g\" & )\nwait\n"
                );
                self.submit_hostile(&["--gres=gpu:1"], &body, &mut u);
            }
            Action::FdPassing => {
                let send = self.pass_descriptors(uid, &mut u)?;
                let body = format!("sh {probe} 1 &\n{send}wait\n");
                self.submit_hostile(&["--gres=gpu:1"], &body, &mut u);
            }
            Action::OpenOutsideJob => {
                let mut args = vec!["open".to_string()];
                args.extend(self.gpu_paths());
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = self.hostile_output(uid, &args)?;
                let opened: BTreeSet<u32> = out
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("OPEN="))
                    .map(|o| o.split(',').filter_map(|i| i.parse().ok()).collect())
                    .unwrap_or_default();
                // A user's own jobs' devices are theirs to open outside
                // them (the file's owner); any other is not.
                let status = self.c().cderd_status()?;
                for d in status.devices.iter().filter(|d| opened.contains(&d.index)) {
                    if d.uid != Some(uid) {
                        let holder = d.job.as_ref().map_or("no job".to_string(), |j| format!("{j} (uid {:?})", d.uid));
                        self.violation(
                            Check::OpenedOutsideLedger,
                            &format!("uid {uid}, outside any job, opened GPU {} held by {holder}", d.index),
                        );
                    }
                }
            }
            Action::StalledMount | Action::StuckProcess => {
                let mount = self.c().jobs_dir().join(format!("fuse-{}", self.started.elapsed().as_millis()));
                let fuse = StalledFuse::mount(&mount, HOSTILE_USER.1, HOSTILE_USER.1)
                    .map_err(|e| format!("mounting a stalled FUSE file system on {}: {e}", mount.display()))?;
                let mount = mount.display().to_string();
                let body = if action == Action::StalledMount {
                    let child = self
                        .hostile(HOSTILE_USER.1, &["hold", &mount, "30"])
                        .spawn()
                        .map_err(|e| format!("starting hostile.py: {e}"))?;
                    u.outsiders.push(("a descriptor on the stalled mount".into(), child));
                    // The job also passes its GPU out: a scan the stalled
                    // file system blinds never finds (nor ends) the receiver.
                    let send = self.pass_descriptors(HOSTILE_USER.1, &mut u)?;
                    format!("sh {probe} 1 &\n{send}wait\n")
                } else {
                    // The job's own process stalls; SLURM's SIGKILL at the
                    // job's end leaves it asleep in D state.
                    format!("sh {probe} 1 &\nstat {mount}/never >/dev/null 2>&1 &\nsleep 2\n")
                };
                u.fuse = Some(fuse);
                self.submit_hostile(&["--gres=gpu:1"], &body, &mut u);
            }
            Action::CgroupWrites => {
                let record = self.c().jobs_dir().join("cgroup-writes");
                let parent = &self.cgroup_parent;
                let body = format!(
                    "own=$(grep ':devices:' /proc/self/cgroup | cut -d: -f3)\n\
                     try() {{ if sh -c \"$1\" 2>/dev/null; then echo \"$SLURM_JOB_ID $1\" >> {record}; fi; }}\n\
                     try \"echo 'a *:* rwm' > /sys/fs/cgroup/devices$own/devices.allow\"\n\
                     for g in /sys/fs/cgroup/*/{parent}/*/ /sys/fs/cgroup/unified/{parent}/*/; do\n\
                     [ -d \"$g\" ] || continue\n\
                     try \"echo $$ > $g/cgroup.procs\"\n\
                     try \"echo 'a *:* rwm' > $g/devices.allow\"\n\
                     done\n\
                     try \"mkdir /sys/fs/cgroup/devices/{parent}/hostile-$$\"\n\
                     try \"echo $$ > /sys/fs/cgroup/unified/cgroup.procs\"\n\
                     sh {probe} 2\n",
                    record = record.display()
                );
                u.tripwires.push(record);
                let gpus = ["--gres=gpu:1", "--gpgpu-per-node=1", ""][self.action_rng.below(3) as usize];
                let args: Vec<&str> = [gpus].into_iter().filter(|a| !a.is_empty()).collect();
                self.submit_hostile(&args, &body, &mut u);
            }
        }
        Ok(u)
    }

    /// Starts a process of `uid` outside any job that waits on a socket for
    /// descriptors (and holds them 25 s); returns the job script's lines
    /// that send it every GPU file the job can open.
    fn pass_descriptors(&mut self, uid: u32, u: &mut Underway) -> Result<String, String> {
        let sock = self.c().jobs_dir().join(format!("fd-{}.sock", self.started.elapsed().as_millis()));
        let sock = sock.display().to_string();
        let child =
            self.hostile(uid, &["recv-fd", &sock, "25"]).spawn().map_err(|e| format!("starting hostile.py: {e}"))?;
        u.outsiders.push((format!("descriptor receiver of uid {uid}"), child));
        let wait = format!("n=0; while [ ! -S {sock} ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done\n");
        let helper = self.c().jobs_dir().join("hostile.py").display().to_string();
        Ok(format!("{wait}{} {helper} send-fd {sock} {}\n", python3(), self.gpu_paths().join(" ")))
    }

    /// The owner of held job `id` edits it, then releases it: each edit
    /// SLURM takes is recorded, and one that changes the GPU count is a
    /// grant.
    fn edit_held_job(&mut self, id: u32) {
        let job = format!("jobid={id}");
        for edit in ["TresPerNode=gres:gpu:4", "ExcNodeList=node1", "ExcNodeList=", "NumNodes=1", "Gres=gpu:4"] {
            let out = self.c().command_as(HOSTILE_USER.0, "nogroup", "scontrol").args(["update", &job, edit]).output();
            let taken = out.as_ref().is_ok_and(|o| o.status.success());
            self.observe(format!(
                "the owner's scontrol update {edit} of a held job: {}",
                if taken { "taken" } else { "refused" }
            ));
            if taken && edit.contains("gpu:4") {
                self.violation(Check::Granted, &format!("the owner of held job {id} changed it with {edit}"));
            }
        }
        let _ = self.c().command_as(HOSTILE_USER.0, "nogroup", "scontrol").args(["release", &id.to_string()]).output();
    }

    /// Lets the action run (its jobs to their end, at most 30 s) with the
    /// honest workload going, then checks what only it can show, then ends
    /// its programs.
    fn hold(&mut self, mut u: Underway) -> Result<(), String> {
        let since = Instant::now();
        let minimum = self.action_rng.millis(1500, 4000);
        loop {
            self.tick();
            let states = squeue_states(self.c()).unwrap_or_default();
            let jobs_done = u.jobs.iter().all(|id| states.get(id).is_none_or(|s| terminal(s)));
            let outsiders_done = u.outsiders.iter_mut().all(|(_, c)| c.try_wait().is_ok_and(|s| s.is_some()));
            if since.elapsed() >= minimum && (jobs_done && (outsiders_done || !u.jobs.is_empty()))
                || since.elapsed() > Duration::from_secs(30)
            {
                break;
            }
        }
        // A descriptor passed out of a job that ended: cderd must keep its
        // device out of the pool while the receiver holds it; and nothing
        // else may keep one out (measured while the action's programs,
        // its stalled mount included, are still there).
        self.holders();
        self.unfounded_kept_out();
        self.judge_stamps(&u.forged);
        for (what, mut child) in u.outsiders {
            let _ = child.kill();
            if let Ok(out) = child.wait_with_output() {
                let text = String::from_utf8_lossy(&out.stdout);
                if let Some(first) = text.lines().next() {
                    self.observe(format!("{what}: {}", first.split_whitespace().next().unwrap_or("")));
                    self.say(&format!("{what}: {}", text.trim()));
                }
            }
        }
        if let Some(fuse) = u.fuse.take() {
            self.observe(format!(
                "requests the stalled mount swallowed: {}",
                if fuse.requests() > 0 { "some" } else { "none" }
            ));
            drop(fuse);
        }
        for wire in &u.tripwires {
            let Ok(text) = std::fs::read_to_string(wire) else { continue };
            let what = if text.trim().is_empty() {
                "an injected command ran".to_string()
            } else {
                format!("took {}", text.trim())
            };
            self.violation(Check::Granted, &format!("{}: {what}", wire.display()));
            let _ = std::fs::remove_file(wire);
        }
        Ok(())
    }

    /// Devices held open by a process: each must be its job's by the
    /// ledger, or kept out of the pool (drained) while an outsider or an
    /// ended job's process holds it. A release does not wait for the scan:
    /// an outsider it had not seen yet is ended by the look after the
    /// release, so one gone within [`KEPT_OUT_GRACE`] is seen, not a
    /// violation (a scan a user blinds or slows never ends it).
    fn holders(&mut self) {
        let since = Instant::now();
        loop {
            let found = self.held_by_others();
            if found.is_empty() {
                return;
            }
            if since.elapsed() >= KEPT_OUT_GRACE {
                for f in found {
                    self.violation(Check::Accounting, &format!("{f} ({:.0} s on)", since.elapsed().as_secs_f64()));
                }
                return;
            }
            self.tick();
        }
    }

    /// What [`Self::holders`] finds wrong now.
    fn held_by_others(&mut self) -> Vec<String> {
        let Ok(status) = self.c().cderd_status() else { return Vec::new() };
        let paths: BTreeMap<PathBuf, u32> = (0..GPUS).map(|i| (self.c().gpu_path(i), i)).collect();
        let states = squeue_states(self.c()).unwrap_or_default();
        let mut found = Vec::new();
        for (pid, gpu) in open_descriptors(&paths) {
            let job = process_job(pid, self.c().slurm_conf(), &self.cgroup_parent);
            let Some(d) = status.devices.iter().find(|d| d.index == gpu) else { continue };
            let holder = d.job.as_ref().map(JobKey::to_string);
            let own = job.is_some_and(|id| {
                states.get(&id).is_some_and(|s| s == "RUNNING") && holder.as_deref() == Some(&format!("slurm:{id}"))
            });
            if own {
                continue;
            }
            if d.reason.is_some() {
                let whose = if job.is_some() { "a process of its job" } else { "a process outside any job" };
                self.observe(format!("a GPU held open by {whose} after its release: kept out of the pool by cderd"));
                continue;
            }
            let who = match job {
                Some(id) => {
                    format!("a process of job {id} ({})", states.get(&id).map_or("unknown to SLURM", String::as_str))
                }
                None => "a process outside any job".to_string(),
            };
            let given = holder.map_or("counts it free".to_string(), |h| format!("gives it to {h}"));
            found.push(format!("GPU {gpu} is held open by pid {pid}, {who}, while cderd {given}"));
        }
        found
    }

    /// Waits (at most [`SETTLE`], with the reconcile timer) for the node's
    /// invariants to hold; records what still fails then, and judges the
    /// opens of every job that ended.
    fn check(&mut self) {
        let since = Instant::now();
        let mut reconciled = false;
        loop {
            match node_invariants(self.c(), &self.cgroup_parent) {
                Ok(v) if v.is_empty() => break,
                Ok(v) if since.elapsed() > SETTLE => {
                    for (check, what) in v {
                        self.violation(Check::of(check), &what);
                    }
                    break;
                }
                Err(e) if since.elapsed() > SETTLE => {
                    self.violation(Check::SlowAnswer, &format!("the checker could not read the node's state: {e}"));
                    break;
                }
                _ => {}
            }
            if since.elapsed() > Duration::from_secs(5) && !reconciled {
                reconcile_node(self.c());
                reconciled = true;
            }
            self.tick();
        }
        self.holders();
        self.judge_opens();
        self.say(&format!("checked {} in {:.1} s", self.current, since.elapsed().as_secs_f64()));
    }

    /// GPUs cderd keeps out after a release with no holder found: no
    /// process holds the device's file and no process of the job the
    /// reason names survives. One that cderd puts back by itself within
    /// [`KEPT_OUT_GRACE`] (the honest workload going on meanwhile) is
    /// seen, not a violation; the rest are.
    fn unfounded_kept_out(&mut self) {
        let since = Instant::now();
        let mut first = true;
        loop {
            let unfounded = self.unfounded();
            if unfounded.is_empty() {
                if !first {
                    self.observe("a GPU kept out with no holder found, put back by cderd within the grace".into());
                }
                return;
            }
            if since.elapsed() >= KEPT_OUT_GRACE {
                for (gpu, reason) in unfounded {
                    self.violation(
                        Check::KeptOut,
                        &format!(
                            "GPU {gpu} kept out of the pool for {:.0} s with no holder found: {reason}",
                            since.elapsed().as_secs_f64()
                        ),
                    );
                }
                return;
            }
            first = false;
            self.tick();
        }
    }

    /// The kept-out GPUs (index, reason) without a holder, now.
    fn unfounded(&self) -> Vec<(u32, String)> {
        let Ok(status) = self.c().cderd_status() else { return Vec::new() };
        let paths: BTreeMap<PathBuf, u32> = (0..GPUS).map(|i| (self.c().gpu_path(i), i)).collect();
        let held: BTreeSet<u32> = open_descriptors(&paths).into_iter().map(|(_, gpu)| gpu).collect();
        let mut survivors: Option<BTreeSet<u32>> = None;
        let mut out = Vec::new();
        for d in status.devices.iter().filter(|d| d.job.is_none()) {
            // An operator's drain or a health verdict is no release's.
            let Some(reason) = d.reason.as_deref().filter(|r| r.starts_with("released by job")) else { continue };
            if held.contains(&d.index) {
                continue;
            }
            let job = reason
                .strip_prefix("released by job slurm:")
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse::<u32>().ok());
            let alive = survivors.get_or_insert_with(|| self.job_processes());
            if job.is_some_and(|id| alive.contains(&id)) {
                continue;
            }
            out.push((d.index, reason.to_string()));
        }
        out
    }

    /// The SLURM jobs of this cluster with a process alive.
    fn job_processes(&self) -> BTreeSet<u32> {
        let Ok(entries) = std::fs::read_dir("/proc") else { return BTreeSet::new() };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| process_job(pid, self.c().slurm_conf(), &self.cgroup_parent))
            .collect()
    }

    /// The jobs submitted with a forged stamp: what their prolog read.
    fn judge_stamps(&mut self, forged: &[u32]) {
        if forged.is_empty() {
            return;
        }
        let report = std::fs::read_to_string(self.c().dir().join(FORGER_REPORT)).unwrap_or_default();
        for id in forged {
            let prefix = format!("{id}=");
            match report.lines().find_map(|l| l.strip_prefix(&prefix)) {
                None => self.observe("a job with a forged stamp never reached its prolog".into()),
                Some("unset") => self.observe("a forged stamp: removed before the prolog".into()),
                Some(v) => self
                    .violation(Check::Granted, &format!("job {id}'s prolog read the stamp its submitter forged: {v}")),
            }
        }
    }

    /// Runs the GLUE provider (as the BDII's unprivileged user, with a
    /// share for the campaign's users) while held job `held`, named
    /// `name`, waits: it must publish, count that job as waiting, and
    /// count no more running jobs than SLURM ran.
    fn check_published(&mut self, held: u32, name: &str) {
        let count = |c: &SlurmCluster, state: &str| {
            c.command("squeue")
                .args(["--noheader", "--all", &format!("--states={state}"), "--format=%i"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).lines().filter(|l| !l.trim().is_empty()).count())
                .unwrap_or(0)
        };
        let before = (count(self.c(), "RUNNING"), count(self.c(), "PENDING"));
        let mut provider = Command::new("setpriv");
        provider
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(crate::glue::provider())
            .arg("--config")
            .arg(self.c().dir().join(PROVIDER_CONFIG))
            .env("SLURM_CONF", self.c().slurm_conf())
            .stdin(Stdio::null());
        if let Some(m) = &self.config.mutation {
            provider.env(cder_model::mutation::VARIABLE, m);
        }
        let out = provider.output();
        let after = (count(self.c(), "RUNNING"), count(self.c(), "PENDING"));
        let out = match out {
            Ok(o) => o,
            Err(e) => return self.say(&format!("running cder-glue-provider: {e}")),
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            let why = stderr.lines().last().unwrap_or("").to_string();
            return self.violation(
                Check::Published,
                &format!("the provider published nothing while job {held} was named {name:?}: {why}"),
            );
        }
        if stderr.contains(&format!("job {held}")) {
            self.observe("the provider skipped the hostile-named job with a warning".into());
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let share = cder_glue_provider::ldif::parse(&text).ok().and_then(|entries| {
            entries.into_iter().find(|e| e.values("objectClass").any(|c| c == "GLUE2ComputingShare"))
        });
        let Some(share) = share else {
            return self.violation(
                Check::Published,
                &format!("the provider published no share while job {held} was named {name:?}"),
            );
        };
        let count = |a: &str| share.values(a).next().and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
        let (published_running, waiting) =
            (count("GLUE2ComputingShareRunningJobs"), count("GLUE2ComputingShareWaitingJobs"));
        // Jobs start and end while the provider runs: it may publish any
        // count between SLURM's before and after, never past them.
        if waiting == 0 || waiting < before.1.min(after.1) || published_running > before.0.max(after.0) {
            self.violation(
                Check::Published,
                &format!(
                    "with held job {held} named {name:?} the provider published {published_running} running, \
                     {waiting} waiting; SLURM had (running, pending) {before:?} before and {after:?} after"
                ),
            );
        } else {
            self.observe("the provider counted the hostile-named job as waiting".into());
        }
    }

    /// Every job that ended: the devices it could ever open against those
    /// cderd ever gave it.
    fn judge_opens(&mut self) {
        let Ok(states) = squeue_states(self.c()) else { return };
        let ended: Vec<u32> = self
            .jobs
            .keys()
            .copied()
            .filter(|id| !self.judged.contains(id) && states.get(id).is_none_or(|s| terminal(s)))
            .collect();
        if ended.is_empty() {
            return;
        }
        let Ok(records) = Client::connect(self.c().cderd_socket(), Duration::from_secs(5))
            .and_then(|mut c| c.accounting(&AccountingRequest::default()))
        else {
            return;
        };
        for id in ended {
            self.judged.insert(id);
            let key = format!("slurm:{id}");
            let given: BTreeSet<u32> =
                records.records.iter().filter(|r| r.job.to_string() == key).map(|r| r.index).collect();
            let opened = ever_opened(&self.c().jobs_dir(), id);
            let outside: Vec<&u32> = opened.difference(&given).collect();
            if !outside.is_empty() {
                let owner = if self.jobs.get(&id) == Some(&Owner::Hostile) { "hostile" } else { "honest" };
                let now = sample(self.c(), id);
                self.violation(
                    Check::OpenedOutsideLedger,
                    &format!(
                        "{owner} job {id} ({}) could open GPU(s) {outside:?}; the ledger gave it {given:?} (last report {now:?})",
                        states.get(&id).map_or("unknown to SLURM", String::as_str)
                    ),
                );
            }
        }
    }

    /// Ends what the hostile actions left (processes of its users naming
    /// this cluster's hostile helpers), and puts back a device cderd kept
    /// out of the pool for them, as an operator would once they are gone.
    /// A GPU kept out with no holder found is recorded first: nothing is
    /// put back before it is measured.
    fn sweep(&mut self) {
        self.unfounded_kept_out();
        let marker = self.c().jobs_dir().join("hostile").display().to_string();
        let mut ended = 0;
        for pid in processes_naming(&marker) {
            if cder_testkit::faults::signal(pid, "KILL").is_ok() {
                ended += 1;
            }
        }
        if ended > 0 {
            self.observe(format!("hostile processes left after their action, ended by the campaign: {ended} in all"));
            std::thread::sleep(Duration::from_millis(300));
        }
        let Ok(status) = self.c().cderd_status() else { return };
        for d in status.devices.iter().filter(|d| d.job.is_none()) {
            let Some(reason) = &d.reason else { continue };
            self.observe(format!("a GPU cderd kept out of the pool: {}", reason.split(':').next().unwrap_or(reason)));
            let resumed = Client::connect(self.c().cderd_socket(), Duration::from_secs(5))
                .and_then(|mut c| c.resume(&format!("gpgpu:{}", d.index)));
            if let Err(e) = resumed {
                self.say(&format!("undrain gpgpu:{}: {e}", d.index));
            }
        }
    }
}

impl Drop for Adversary {
    fn drop(&mut self) {
        if let Some(mut cluster) = self.cluster.take() {
            let marker = cluster.jobs_dir().join("hostile").display().to_string();
            for pid in processes_naming(&marker) {
                let _ = cder_testkit::faults::signal(pid, "KILL");
            }
            cluster.cancel_all();
            cluster.stop_cderd();
            drop(cluster);
        }
        remove_groups(&self.cgroup_parent);
    }
}

/// The system's python3, which every user may run (a root's PATH may
/// name one in its home first).
fn python3() -> &'static str {
    ["/usr/bin/python3", "/usr/local/bin/python3"].into_iter().find(|p| Path::new(p).exists()).unwrap_or("python3")
}

fn truncate(text: &str) -> String {
    text.chars().take(200).collect()
}

/// Every set of devices job `id` reported it could open (`opens-<id>`).
fn ever_opened(jobs_dir: &Path, id: u32) -> BTreeSet<u32> {
    let text = std::fs::read_to_string(jobs_dir.join(format!("opens-{id}"))).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.strip_prefix("OPEN="))
        .flat_map(|o| o.split(',').filter_map(|i| i.trim().parse().ok()).collect::<Vec<u32>>())
        .collect()
}

/// Processes (pid) with a descriptor on one of `paths` (its GPU number),
/// found by `readlink` alone.
fn open_descriptors(paths: &BTreeMap<PathBuf, u32>) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return out };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else { continue };
        let held: BTreeSet<u32> = fds
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter_map(|l| paths.get(&l).copied())
            .collect();
        out.extend(held.into_iter().map(|gpu| (pid, gpu)));
    }
    out
}

/// The SLURM job a process belongs to: by its environment (this cluster's
/// `SLURM_CONF` and a `SLURM_JOB_ID`), else by its group under cderd's
/// parent (which a cleared environment does not leave).
fn process_job(pid: u32, conf: &Path, cgroup_parent: &str) -> Option<u32> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let vars: Vec<&[u8]> = env.split(|b| *b == 0).collect();
    let want = format!("SLURM_CONF={}", conf.display());
    if vars.contains(&want.as_bytes()) {
        let id = vars
            .iter()
            .find_map(|v| v.strip_prefix(b"SLURM_JOB_ID="))
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok());
        if id.is_some() {
            return id;
        }
    }
    let groups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    groups.lines().find_map(|l| {
        let path = l.splitn(3, ':').nth(2)?;
        let name = path.strip_prefix(&format!("/{cgroup_parent}/"))?;
        match campaign::group_owner(name)? {
            campaign::GroupOwner::Slurm(id) => Some(id),
            campaign::GroupOwner::Other(_) => None,
        }
    })
}

/// Processes of unprivileged users whose command line names `marker`.
fn processes_naming(marker: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return out };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let unprivileged = std::fs::read_to_string(e.path().join("status")).ok().is_some_and(|s| {
            s.lines().find_map(|l| l.strip_prefix("Uid:")).is_some_and(|u| u.split_whitespace().next() != Some("0"))
        });
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if unprivileged && String::from_utf8_lossy(&cmdline).contains(marker) {
            out.push(pid);
        }
    }
    out
}

/// Where the forger's prolog writes `<job id>=<the stamp it read>`.
const FORGER_REPORT: &str = "prolog-stamps";

/// The file whose content the forger writes as the stamp, while it exists.
fn forge_control(cluster: &SlurmCluster) -> PathBuf {
    cluster.dir().join("forge-stamp")
}

/// The stamp forger of `slurm_trust`, as a submitter's own SPANK plugin:
/// in `sbatch` of the hostile user (uid 65534), while the control file
/// exists, it writes its content as cder's stamp in both spellings; in
/// every job's prolog it reports what the prolog's environment holds.
fn install_forger(cluster: &SlurmCluster) -> Result<(), String> {
    let source = cluster.dir().join("forge.c");
    let plugin = cluster.dir().join("plugins/forge.so");
    let text = format!(
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n#include <slurm/spank.h>\n\
         SPANK_PLUGIN(forge, 1);\n\
         int slurm_spank_init(spank_t sp, int ac, char **av) {{\n\
           if ((spank_context() == S_CTX_LOCAL || spank_context() == S_CTX_ALLOCATOR) && getuid() == {uid}) {{\n\
             char v[256] = \"\"; FILE *f = fopen(\"{control}\", \"r\");\n\
             if (f) {{\n\
               if (fgets(v, sizeof v, f)) {{\n\
                 v[strcspn(v, \"\\n\")] = 0;\n\
                 spank_job_control_setenv(sp, \"CDER_NODE_GRES\", v, 1);\n\
                 spank_job_control_setenv(sp, \"SPANK_CDER_NODE_GRES\", v, 1);\n\
               }}\n\
               fclose(f);\n\
             }}\n\
           }}\n\
           return 0;\n\
         }}\n\
         int slurm_spank_job_prolog(spank_t sp, int ac, char **av) {{\n\
           const char *v = getenv(\"SPANK_CDER_NODE_GRES\"); const char *id = getenv(\"SLURM_JOB_ID\");\n\
           FILE *f = fopen(\"{report}\", \"a\");\n\
           if (f) {{ fprintf(f, \"%s=%s\\n\", id ? id : \"?\", v ? v : \"unset\"); fclose(f); }}\n\
           return 0;\n\
         }}\n",
        uid = HOSTILE_USER.1,
        control = forge_control(cluster).display(),
        report = cluster.dir().join(FORGER_REPORT).display()
    );
    std::fs::write(&source, text).map_err(|e| format!("{}: {e}", source.display()))?;
    crate::slurm::build_spank_plugin(&source, &plugin).map_err(|e| format!("building the stamp forger: {e}"))?;
    let plugstack = cluster.dir().join("plugstack.conf");
    let mut conf = std::fs::read_to_string(&plugstack).map_err(|e| format!("{}: {e}", plugstack.display()))?;
    conf.push_str(&format!("optional {}\n", plugin.display()));
    std::fs::write(&plugstack, conf).map_err(|e| format!("{}: {e}", plugstack.display()))
}

/// The GLUE provider's configuration for the campaign's node: one VO
/// share of the `debug` partition for the honest and hostile users'
/// groups, so that it lists their jobs.
const PROVIDER_CONFIG: &str = "glue-provider.toml";

fn write_provider_config(cluster: &SlurmCluster) -> Result<(), String> {
    let mut clients = String::new();
    for program in ["scontrol", "squeue"] {
        let path = cluster.dir().join(format!("provider-{program}"));
        let exec = match crate::slurm::release().ok().and_then(|r| r.root.as_ref()) {
            Some(root) => format!(
                "'{}' '{}' / /usr/bin/{program}",
                crate::slurm::workspace_root().join("deploy/slurm/in-root.sh").display(),
                root.display()
            ),
            None => program.to_string(),
        };
        std::fs::write(&path, format!("#!/bin/sh\nSLURM_CONF={} exec {exec} \"$@\"\n", cluster.slurm_conf().display()))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let _ = writeln!(clients, "{program} = \"{}\"", path.display());
    }
    let text = crate::glue::slurm_ce_config(&clients)
        + &format!(
            "\n[[group]]\nid = \"ce.example.org_node1\"\nnodes = [\"node1\"]\nplatform = \"amd64\"\nmain_memory_mib = 1000\n\
             virtual_memory_mib = 1000\nos_name = \"Debian\"\nos_version = \"12\"\n\n\
             [[group.device]]\nmodel = \"NVIDIA A100-SXM4-40GB\"\ncount = {GPUS}\nmemory_mib = 40960\n\n\
             [[vo]]\nname = \"ops\"\ngroups = [\"{}\", \"nogroup\"]\nqueues = [\"debug\"]\n",
            HONEST_USER.0
        );
    let path = cluster.dir().join(PROVIDER_CONFIG);
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_lists_parse_and_refuse_unknown_names() {
        assert_eq!(Action::parse_list("snoop,escape").unwrap(), vec![Action::Snoop, Action::Escape]);
        assert_eq!(Action::parse_list("all").unwrap(), Action::ALL.to_vec());
        let e = Action::parse_list("snoop,rootkit").unwrap_err();
        assert!(e.contains("\"rootkit\"") && e.contains("fd-passing"), "{e}");
    }

    #[test]
    fn every_fault_campaign_check_falls_under_one_of_the_three_promises() {
        assert_eq!(Check::of(campaign::Check::SharedDevice), Check::OpenedOutsideLedger);
        assert_eq!(Check::of(campaign::Check::Leak), Check::Accounting);
        assert_eq!(Check::of(campaign::Check::LostAllocation), Check::Accounting);
    }

    #[test]
    fn a_jobs_opens_are_the_union_of_its_reports() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("opens-7"), "OPEN=\nOPEN=2\nOPEN=2,3\n").unwrap();
        assert_eq!(ever_opened(dir.path(), 7), BTreeSet::from([2, 3]));
        assert!(ever_opened(dir.path(), 8).is_empty());
    }

    #[test]
    fn the_table_names_the_action_and_counts_violations() {
        let mut r = Report { seed: 44, ..Report::default() };
        r.actions.insert(Action::Snoop, 3);
        r.violations.entry(Check::Granted).or_default().push("snoop #1 at 3 s (seed 44): x".into());
        r.honest.insert("status".into(), vec![Duration::from_millis(3), Duration::from_millis(5)]);
        let t = r.table();
        assert!(t.contains("| snoop | 3 |"), "{t}");
        assert!(t.contains("| a hostile request granted | 1 |"), "{t}");
        assert!(t.contains("| status | 1.000 s | 0.005 s |"), "{t}");
        assert!(t.contains("VIOLATION (a hostile request granted): snoop #1"), "{t}");
        assert_eq!(r.violation_count(), 1);
    }
}
