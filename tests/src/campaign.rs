//! The fault campaign: faults a production node sees (daemons killed and
//! restarted, a full disk, a GPU lost, a device file gone, the wall clock
//! stepping), injected one at a time at seeded random moments into a real
//! one-node SLURM (slurmctld, slurmd, both cder plugins) and a real cderd
//! over the fake NVML, while a mixed-job workload runs, with the node's
//! invariants checked after every fault. `cder-faults` (tests/demos) runs
//! it for as long as asked; the `faults_campaign` test of the `cluster`
//! binary runs it briefly. docs/testing.md, "The campaign", has the tables.
//!
//! The workload submits, as `nobody`, jobs asking for 0, 1 or 2 GPUs
//! (`--gres=gpu:N` and `--gpgpu-per-node=N`), some through an `srun` step,
//! some with a one-minute time limit they overrun, and cancels some; each
//! job writes, a few times a second, which fake GPU files it can open.
//! cderd's `state_dir` is a tmpfs of its own, so it can be filled.
//!
//! After each fault, once the fault has ended, the checker first measures
//! how long each daemon takes to answer again (violation past its bound),
//! then waits (bounded, running `reconcile` as the node's timer does) for:
//! - no lost allocation: every job SLURM runs has a record in cderd (`env`);
//! - no shared device: the devices the running jobs can open are pairwise
//!   disjoint, and each within its own record;
//! - no leak: no device cgroup, device or process of a job that ended;
//! - usage records: none negative, none of one device overlapping another.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cder_protocol::{AccountingRecord, AccountingRequest, AllocRequest, Client, ErrorCode, ReconcileRequest};

use cder_testkit::faults::{lose_gpu, remove_device_file, WallClock, LIBFAKETIME};

use crate::slurm::{fake_nvml_library, make_fake_gpu, SlurmCluster, SlurmConfig};

/// A fault the campaign can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// `kill -9` cderd, keep it down a moment (jobs start meanwhile), restart it.
    KillCderd,
    /// `kill -9` slurmd (its steps live on), restart it.
    RestartSlurmd,
    /// Stop slurmctld as `systemctl restart` does (SIGTERM: it saves its
    /// state), start it again.
    RestartSlurmctld,
    /// `kill -9` slurmctld, restart it from the state it last saved.
    KillSlurmctld,
    /// Fill cderd's state file system (a tmpfs) to ENOSPC, hold, empty it.
    FullDisk,
    /// A GPU falls off the bus in the fake NVML (every call on it answers
    /// `GPU_IS_LOST`), then comes back.
    GpuLost,
    /// A GPU's device file is removed (held or not), then made again and
    /// the device undrained, as an operator does.
    VanishDevice,
    /// cderd's wall clock steps forwards or backwards by minutes to hours
    /// (libfaketime), and stays there.
    ClockJump,
}

impl Fault {
    /// Every fault, in the order the table prints them.
    pub const ALL: [Fault; 8] = [
        Fault::KillCderd,
        Fault::RestartSlurmd,
        Fault::RestartSlurmctld,
        Fault::KillSlurmctld,
        Fault::FullDisk,
        Fault::GpuLost,
        Fault::VanishDevice,
        Fault::ClockJump,
    ];

    /// The name `--faults` takes.
    pub fn name(self) -> &'static str {
        match self {
            Fault::KillCderd => "kill-cderd",
            Fault::RestartSlurmd => "restart-slurmd",
            Fault::RestartSlurmctld => "restart-slurmctld",
            Fault::KillSlurmctld => "kill-slurmctld",
            Fault::FullDisk => "full-disk",
            Fault::GpuLost => "gpu-lost",
            Fault::VanishDevice => "vanish-device",
            Fault::ClockJump => "clock-jump",
        }
    }

    /// Parses a comma-separated list of fault names; `all` is every fault.
    pub fn parse_list(text: &str) -> Result<Vec<Fault>, String> {
        parse_names(text, &Fault::ALL, Fault::name, "fault")
    }
}

/// Parses a comma-separated list of names out of `all` (`all` is every
/// one), sorted and without repeats; `what` names the kind in errors.
pub(crate) fn parse_names<T: Copy + Ord>(
    text: &str,
    all: &[T],
    name: fn(T) -> &'static str,
    what: &str,
) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        if word == "all" {
            out.extend_from_slice(all);
            continue;
        }
        let item = all.iter().copied().find(|f| name(*f) == word).ok_or_else(|| {
            let names: Vec<&str> = all.iter().map(|f| name(*f)).collect();
            format!("unknown {what} {word:?} (known: {}, all)", names.join(", "))
        })?;
        out.push(item);
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        return Err(format!("no {what} named"));
    }
    Ok(out)
}

/// What the checker verifies after every fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Check {
    /// A job SLURM runs has no record in cderd.
    LostAllocation,
    /// Two running jobs can open one device, or a job opens a device its
    /// record does not give it.
    SharedDevice,
    /// A device cgroup, device or process of a job that ended.
    Leak,
    /// A daemon did not answer again within its bound.
    Recovery,
    /// A usage record with a negative interval, or two records of one
    /// device overlapping (counted twice).
    Accounting,
}

impl Check {
    /// Every check, in the order the table prints them.
    pub const ALL: [Check; 5] =
        [Check::LostAllocation, Check::SharedDevice, Check::Leak, Check::Recovery, Check::Accounting];

    /// The name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Check::LostAllocation => "lost allocation",
            Check::SharedDevice => "device held by two live jobs",
            Check::Leak => "leaked cgroup, device or process",
            Check::Recovery => "daemon not answering in time",
            Check::Accounting => "usage interval negative or counted twice",
        }
    }
}

/// How long each daemon may take to answer again after its fault ended
/// (docs/testing.md, "The campaign"): what a node's operator can expect
/// on a loaded two-core machine, not a tuned figure.
pub const RECOVERY_BOUNDS: [(&str, Duration); 5] = [
    ("cderd", Duration::from_secs(20)),
    ("slurmd", Duration::from_secs(30)),
    ("slurmctld", Duration::from_secs(30)),
    ("cderd writes", Duration::from_secs(10)),
    ("gpu drain/return", Duration::from_secs(20)),
];

fn bound(daemon: &str) -> Duration {
    RECOVERY_BOUNDS.iter().find(|(d, _)| *d == daemon).map(|(_, b)| *b).unwrap_or(Duration::from_secs(30))
}

/// How long the checker waits for the invariants to hold after a fault.
pub const SETTLE: Duration = Duration::from_secs(60);

/// How the campaign runs.
#[derive(Debug, Clone)]
pub struct CampaignConfig {
    /// The seed of every random choice (faults, their timing, the workload).
    pub seed: u64,
    /// How long to run; a run also lasts until each selected fault has been
    /// injected once.
    pub duration: Duration,
    /// The faults to choose from.
    pub faults: Vec<Fault>,
    /// Print each step as it happens (stderr).
    pub verbose: bool,
}

/// Per fault kind: how often, and the recovery times measured.
#[derive(Debug, Clone, Default)]
pub struct FaultStats {
    /// Times injected.
    pub injected: usize,
    /// Time from the fault's end until every daemon answered again.
    pub recovery: Vec<Duration>,
}

/// What a campaign found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The seed it ran with.
    pub seed: u64,
    /// How long it ran.
    pub elapsed: Duration,
    /// By fault kind.
    pub faults: BTreeMap<Fault, FaultStats>,
    /// By check: one line per violation, naming the fault it followed.
    pub violations: BTreeMap<Check, Vec<String>>,
    /// Jobs submitted.
    pub jobs: usize,
    /// Their states when the run ended (`COMPLETED`, `FAILED` …).
    pub job_states: BTreeMap<String, usize>,
    /// Recovery time per daemon, over all faults.
    pub daemons: BTreeMap<String, Vec<Duration>>,
    /// What SLURM itself did that an operator had to undo (the node
    /// drained for a duplicate job id after slurmctld lost its last
    /// seconds of state), with how often.
    pub slurm_events: BTreeMap<String, usize>,
    /// What the faults did on the way (writes cderd refused while its
    /// disk was full …), with how often.
    pub observed: BTreeMap<String, usize>,
}

pub(crate) fn percentile(v: &[Duration], p: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    if v.is_empty() {
        return Duration::ZERO;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

impl Report {
    /// Violations over every check.
    pub fn violation_count(&self) -> usize {
        self.violations.values().map(Vec::len).sum()
    }

    /// The table: faults injected with their recovery times, violations
    /// per check, recovery per daemon, jobs.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let ms = |d: Duration| format!("{:.2} s", d.as_secs_f64());
        let _ = writeln!(t, "seed {} ({:#x}), {:.0} s", self.seed, self.seed, self.elapsed.as_secs_f64());
        let _ = writeln!(t, "\n| fault | injected | recovery max | recovery p50 |\n|---|---:|---:|---:|");
        for (f, s) in &self.faults {
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} |",
                f.name(),
                s.injected,
                ms(percentile(&s.recovery, 1.0)),
                ms(percentile(&s.recovery, 0.5))
            );
        }
        let _ = writeln!(t, "\n| check | violations |\n|---|---:|");
        for c in Check::ALL {
            let _ = writeln!(t, "| {} | {} |", c.name(), self.violations.get(&c).map_or(0, Vec::len));
        }
        let _ = writeln!(t, "\n| daemon answering again | bound | max | p50 | samples |\n|---|---:|---:|---:|---:|");
        for (d, v) in &self.daemons {
            let _ = writeln!(
                t,
                "| {d} | {} | {} | {} | {} |",
                ms(bound(d)),
                ms(percentile(v, 1.0)),
                ms(percentile(v, 0.5)),
                v.len()
            );
        }
        for (what, n) in &self.observed {
            let _ = writeln!(t, "\nobserved ({n}x): {what}");
        }
        for (what, n) in &self.slurm_events {
            let _ = writeln!(t, "\nSLURM, not cder ({n}x): {what}");
        }
        let states: Vec<String> = self.job_states.iter().map(|(s, n)| format!("{n} {s}")).collect();
        let _ = writeln!(t, "\njobs run: {} ({})", self.jobs, states.join(", "));
        for (c, lines) in &self.violations {
            for l in lines {
                let _ = writeln!(t, "VIOLATION ({}): {l}", c.name());
            }
        }
        t
    }
}

/// xorshift64*: a replayable sequence from the seed (the adversary
/// campaign's too).
pub(crate) struct Rng(u64);
impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        // Never 0 (a fixed point), and distinct seeds stay distinct.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub(crate) fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

/// SLURM's job states after which a job holds nothing (as `cderctl
/// reconcile --from slurm` reads them).
const TERMINAL: [&str; 9] =
    ["COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"];

pub(crate) fn terminal(state: &str) -> bool {
    TERMINAL.contains(&state)
}

pub(crate) const GPUS: u32 = 4;
/// Jobs pending or running at once, at most.
const MAX_ACTIVE: usize = 6;
/// The tmpfs cderd's state lives on.
const STATE_FS_SIZE: &str = "16m";

/// One campaign: the cluster, the workload's jobs, the figures.
pub struct Campaign {
    cluster: Option<SlurmCluster>,
    config: CampaignConfig,
    /// The workload's choices; they depend on what SLURM did meanwhile.
    rng: Rng,
    /// The faults' choices (kind, spacing, hold, GPU, clock step), a stream
    /// of their own, so that a seed replays the same faults whatever the
    /// jobs around them did.
    fault_rng: Rng,
    /// The cgroup parent of this campaign's cderd (its own, so other
    /// cderds on the machine do not mix in).
    cgroup_parent: String,
    state_mount: PathBuf,
    mounted: bool,
    jobs: BTreeSet<u32>,
    report: Report,
    last_reconcile: Instant,
    started: Instant,
    /// The fault being checked, for the violation lines.
    current: String,
    /// cderd's wall clock, when `clock-jump` is among the faults.
    clock: Option<WallClock>,
    /// The campaign's own write probes whose `release` cderd refused (its
    /// disk was full): released once it takes writes again.
    unreleased: Vec<cder_model::JobKey>,
}

/// The one node both campaigns run on: SLURM with both plugins, four fake
/// A100s in the fake NVML (its machine file and event file in the
/// cluster's folder), cderd started by the caller with its job groups
/// under `cgroup_parent` (its own, so other cderds on the machine do not
/// mix in).
pub(crate) fn node_config(cgroup_parent: &str) -> Result<SlurmConfig, String> {
    let library = fake_nvml_library()?;
    let gpu = |i: u32| {
        serde_json::json!({"uuid": gpu_uuid(i), "name": "NVIDIA A100-SXM4-40GB",
                "pci_bus_id": format!("0000:{:02x}:00.0", 7 + i), "memory_mib": 40960, "compute_capability": "8.0",
                "cores": 6912, "clock_mhz": 1410, "ecc": true, "numa_node": i / 2, "minor": i})
    };
    let machine = serde_json::json!({"devices": (0..GPUS).map(gpu).collect::<Vec<_>>()}).to_string();
    Ok(SlurmConfig {
        gpus: GPUS,
        cderd: false,
        files: vec![("machine.json".into(), machine), ("nvml-events".into(), String::new())],
        cder_types: Some(format!(
            "[node.health]\ninterval_s = 1\nreturn_after_s = 2\n\n\
                 [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = \"{}\"\n\
                 device_path = \"{{dir}}/dev/gpu{{minor}}\"\n",
            library.display()
        )),
        cderd_env: vec![
            ("CDER_FAKE_NVML".into(), "{dir}/machine.json".into()),
            ("CDER_FAKE_NVML_EVENTS".into(), "{dir}/nvml-events".into()),
        ],
        cderd_enforcement: format!("cgroup_parent = \"{cgroup_parent}\""),
        ..SlurmConfig::default()
    })
}

fn say(verbose: bool, text: &str) {
    if verbose {
        eprintln!("cder-faults: {text}");
    }
}

impl Campaign {
    /// Starts the cluster: SLURM with both plugins, cderd over the fake
    /// NVML with its state on a tmpfs. Needs root (mount, cgroups).
    pub fn start(config: CampaignConfig) -> Result<Campaign, String> {
        let cgroup_parent = format!("cder-faults-{}", std::process::id());
        let slurm = node_config(&cgroup_parent)?;
        let mut cluster = SlurmCluster::start(&slurm)?;
        let state_mount = cluster.dir().join("cder/state");
        let mut campaign = Campaign {
            rng: Rng::new(config.seed ^ 0x5EED_C0DE_0035),
            fault_rng: Rng::new(config.seed),
            report: Report { seed: config.seed, ..Report::default() },
            config,
            cgroup_parent,
            state_mount: state_mount.clone(),
            mounted: false,
            jobs: BTreeSet::new(),
            last_reconcile: Instant::now(),
            started: Instant::now(),
            current: "start".into(),
            cluster: None,
            clock: None,
            unreleased: Vec::new(),
        };
        if campaign.config.faults.contains(&Fault::ClockJump) {
            if !Path::new(LIBFAKETIME).exists() {
                return Err(format!("clock-jump needs {LIBFAKETIME} (install faketime with deploy/install-deps.sh)"));
            }
            let clock = WallClock::new(cluster.dir())?;
            cluster.config.cderd_env.extend(
                clock
                    .env()
                    .into_iter()
                    .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned())),
            );
            campaign.clock = Some(clock);
        }
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={STATE_FS_SIZE},mode=0755"), "cder-faults"])
            .arg(&state_mount)
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mounting a tmpfs on {}: {}",
                state_mount.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        campaign.mounted = true;
        cluster.start_cderd()?;
        write_probe(&cluster)?;
        campaign.cluster = Some(cluster);
        Ok(campaign)
    }

    fn c(&self) -> &SlurmCluster {
        self.cluster.as_ref().expect("the cluster runs until drop")
    }

    fn cm(&mut self) -> &mut SlurmCluster {
        self.cluster.as_mut().expect("the cluster runs until drop")
    }

    fn say(&self, text: &str) {
        say(self.config.verbose, &format!("[{:6.1}s] {text}", self.started.elapsed().as_secs_f64()));
    }

    /// Runs the campaign and returns its report.
    pub fn run(mut self) -> Result<Report, String> {
        self.started = Instant::now();
        let mut bag: Vec<Fault> = Vec::new();
        let mut next_fault = Instant::now() + self.fault_rng.millis(2000, 6000);
        let mut done: BTreeSet<Fault> = BTreeSet::new();
        loop {
            let all_done = self.config.faults.iter().all(|f| done.contains(f));
            if self.started.elapsed() >= self.config.duration && all_done {
                break;
            }
            if Instant::now() >= next_fault {
                // A shuffled bag of every selected fault: each kind comes
                // once per round, in a seeded order.
                if bag.is_empty() {
                    bag = self.config.faults.clone();
                    for i in (1..bag.len()).rev() {
                        let j = self.fault_rng.below(i as u64 + 1) as usize;
                        bag.swap(i, j);
                    }
                }
                let fault = bag.pop().expect("refilled above");
                let n = self.report.faults.get(&fault).map_or(0, |s| s.injected) + 1;
                self.current = format!("{} #{n} at {:.0} s", fault.name(), self.started.elapsed().as_secs_f64());
                self.say(&format!("inject {}", self.current));
                let recovery = self.inject(fault)?;
                let stats = self.report.faults.entry(fault).or_default();
                stats.injected += 1;
                stats.recovery.push(recovery);
                done.insert(fault);
                self.check_after_fault();
                next_fault = Instant::now() + self.fault_rng.millis(1000, 8000);
            } else {
                self.tick(true);
            }
        }
        self.current = "end of run".into();
        self.check_after_fault();
        self.report.elapsed = self.started.elapsed();
        let states = self.states().unwrap_or_default();
        self.report.jobs = self.jobs.len();
        for id in &self.jobs {
            let s = states.get(id).cloned().unwrap_or_else(|| "UNKNOWN".into());
            *self.report.job_states.entry(s).or_default() += 1;
        }
        Ok(std::mem::take(&mut self.report))
    }

    /// One step of the workload: perhaps submit, perhaps cancel, the
    /// reconcile timer; then a pause.
    fn tick(&mut self, controller_up: bool) {
        if controller_up {
            let states = self.states().unwrap_or_default();
            let active: Vec<u32> =
                self.jobs.iter().copied().filter(|id| states.get(id).is_some_and(|s| !terminal(s))).collect();
            if active.len() < MAX_ACTIVE && self.rng.below(3) > 0 {
                self.submit();
            }
            if !active.is_empty() && self.rng.below(12) == 0 {
                let id = active[self.rng.below(active.len() as u64) as usize];
                let _ = self.c().run("scancel", &[&id.to_string()]);
                self.say(&format!("scancel {id}"));
            }
            if self.last_reconcile.elapsed() > Duration::from_secs(15) {
                self.reconcile();
            }
        }
        let pause = self.rng.millis(200, 800);
        std::thread::sleep(pause);
    }

    fn submit(&mut self) {
        let gpus = self.rng.below(3);
        let seconds = 2 + self.rng.below(10);
        let mut args: Vec<String> = Vec::new();
        match (gpus, self.rng.below(2)) {
            (0, _) => {}
            (n, 0) => args.push(format!("--gres=gpu:{n}")),
            (n, _) => args.push(format!("--gpgpu-per-node={n}")),
        }
        let probe = self.c().jobs_dir().join("probe.sh");
        // One job in ten overruns a one-minute limit; one in four runs
        // its work as an srun step.
        let (seconds, limit) = if self.rng.below(10) == 0 { (0, true) } else { (seconds, false) };
        if limit {
            args.push("--time=1".into());
        }
        let step = self.rng.below(4) == 0;
        let script = if step {
            format!("#!/bin/sh\nsrun -n1 sh {} {seconds}\n", probe.display())
        } else {
            format!("#!/bin/sh\nexec sh {} {seconds}\n", probe.display())
        };
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        match self.c().sbatch_as_user(&argv, &script) {
            Ok(id) => {
                self.jobs.insert(id);
                self.say(&format!(
                    "sbatch {} ({seconds} s{}) -> {id}",
                    args.join(" "),
                    if step { ", srun" } else { "" }
                ));
            }
            Err(e) => self.say(&format!("sbatch {}: {}", args.join(" "), e.trim())),
        }
    }

    /// What `cderctl reconcile --from slurm` does, as a node's timer runs it.
    fn reconcile(&mut self) {
        self.last_reconcile = Instant::now();
        if let Some(released) = reconcile_node(self.c()).filter(|r| !r.is_empty()) {
            self.say(&format!("reconcile released {released:?}"));
        }
    }

    /// Every job SLURM knows, by id: its state.
    fn states(&self) -> Result<BTreeMap<u32, String>, String> {
        squeue_states(self.c())
    }

    /// Injects `fault`, keeps the workload going while it lasts, ends it,
    /// and returns the time from its end until every daemon answered.
    fn inject(&mut self, fault: Fault) -> Result<Duration, String> {
        let hold = self.fault_rng.millis(500, 3000);
        let ended;
        match fault {
            Fault::KillCderd => {
                self.cm().kill_cderd();
                self.hold(hold, true);
                ended = Instant::now();
                if let Err(e) = self.cm().start_cderd() {
                    self.violation(Check::Recovery, &format!("cderd did not come back: {e}"));
                }
            }
            // A start that fails or waits out its own limit is judged by
            // `wait_daemons` below, like every other recovery.
            Fault::RestartSlurmd => {
                self.cm().kill_slurmd();
                self.hold(hold, true);
                ended = Instant::now();
                self.cm().spawn_slurmd()?;
            }
            Fault::RestartSlurmctld => {
                self.cm().stop_slurmctld()?;
                self.hold(hold, false);
                ended = Instant::now();
                if let Err(e) = self.cm().start_slurmctld() {
                    self.say(&format!("slurmctld start: {e}"));
                }
            }
            Fault::KillSlurmctld => {
                self.cm().kill_slurmctld();
                self.hold(hold, false);
                ended = Instant::now();
                if let Err(e) = self.cm().start_slurmctld() {
                    self.say(&format!("slurmctld start: {e}"));
                }
            }
            Fault::ClockJump => {
                let clock = self.clock.as_ref().ok_or("clock-jump: cderd runs on no fake clock")?;
                let size = 60 + self.fault_rng.below(7200) as i64;
                // Steps towards the true time once it is off by more than two hours.
                let back = match clock.offset() {
                    o if o > 2 * 3600 => true,
                    o if o < -2 * 3600 => false,
                    _ => self.fault_rng.below(2) == 0,
                };
                let step = if back { -size } else { size };
                let clock = self.clock.as_mut().expect("checked above");
                clock.jump(step)?;
                let offset = clock.offset();
                self.say(&format!("cderd's wall clock stepped {step:+} s (now {offset:+} s off)"));
                self.hold(hold, true);
                ended = Instant::now();
            }
            Fault::VanishDevice => {
                let gpu = self.fault_rng.below(u64::from(GPUS)) as u32;
                let path = self.c().gpu_path(gpu);
                remove_device_file(&path)?;
                // cderd looks at the next alloc, release or status.
                let drained = self.wait_device(gpu, |r| r.contains("vanished"));
                self.say(&format!("device file of GPU {gpu} removed; drained: {drained:?}"));
                match drained {
                    Some(d) => self.report.daemons.entry("gpu drain/return".into()).or_default().push(d),
                    None => self.violation(
                        Check::Recovery,
                        &format!(
                            "cderd did not drain GPU {gpu} whose file vanished within {:?}",
                            bound("gpu drain/return")
                        ),
                    ),
                }
                self.hold(hold, true);
                make_fake_gpu(&path, gpu)?;
                ended = Instant::now();
                let resumed = Client::connect(self.c().cderd_socket(), Duration::from_secs(5))
                    .and_then(|mut c| c.resume(&format!("gpgpu:{gpu}")))
                    .map_err(|e| e.to_string());
                if let Err(e) = resumed {
                    self.violation(
                        Check::Recovery,
                        &format!("cderctl undrain gpgpu:{gpu} after its file came back: {e}"),
                    );
                }
                let daemons = self.wait_daemons(ended);
                return Ok(match self.wait_device(gpu, |r| r.is_empty()) {
                    Some(_) => daemons.max(ended.elapsed()),
                    None => {
                        self.violation(Check::Recovery, &format!("GPU {gpu} stayed drained after its undrain"));
                        daemons.max(ended.elapsed())
                    }
                });
            }
            Fault::FullDisk => {
                let filler = self.state_mount.join("filler");
                fill(&filler)?;
                self.say(&format!("state file system full ({})", self.state_mount.display()));
                // A burst of writes: SQLite first reuses the pages its WAL
                // has, then needs new ones.
                let refused = (0..200).find_map(|_| self.probe_write().err());
                let seen = match &refused {
                    Some(e) if e.contains("full") => "full-disk: cderd refused a write, saying the disk is full".into(),
                    Some(e) => format!("full-disk: cderd refused a write: {e}"),
                    None => "full-disk: cderd took 200 writes while full (SQLite reused pages it had)".into(),
                };
                *self.report.observed.entry(seen).or_default() += 1;
                self.hold(hold, true);
                std::fs::remove_file(&filler).map_err(|e| format!("emptying {}: {e}", filler.display()))?;
                ended = Instant::now();
                let daemons = self.wait_daemons(ended);
                self.wait_writes(ended);
                return Ok(daemons.max(ended.elapsed()));
            }
            Fault::GpuLost => {
                let gpu = self.fault_rng.below(u64::from(GPUS)) as u32;
                let events = self.c().dir().join("nvml-events");
                lose_gpu(&events, &gpu_uuid(gpu))?;
                let drained = self.wait_device(gpu, |r| r.starts_with("GPU lost"));
                self.say(&format!("gpu {gpu} lost; drained: {drained:?}"));
                match drained {
                    Some(d) => self.report.daemons.entry("gpu drain/return".into()).or_default().push(d),
                    None => self.violation(
                        Check::Recovery,
                        &format!("cderd did not drain lost GPU {gpu} within {:?}", bound("gpu drain/return")),
                    ),
                }
                self.hold(hold, true);
                std::fs::write(&events, "").map_err(|e| format!("{}: {e}", events.display()))?;
                ended = Instant::now();
                let daemons = self.wait_daemons(ended);
                match self.wait_device(gpu, |r| !r.starts_with("GPU lost")) {
                    Some(_) => {
                        let d = ended.elapsed();
                        self.report.daemons.entry("gpu drain/return".into()).or_default().push(d);
                        return Ok(daemons.max(d));
                    }
                    None => {
                        self.violation(
                            Check::Recovery,
                            &format!(
                                "cderd did not return GPU {gpu} within {:?} of its repair",
                                bound("gpu drain/return")
                            ),
                        );
                        return Ok(daemons.max(ended.elapsed()));
                    }
                }
            }
        }
        Ok(self.wait_daemons(ended))
    }

    /// Lets `hold` pass with the workload running.
    fn hold(&mut self, hold: Duration, controller_up: bool) {
        let until = Instant::now() + hold;
        while Instant::now() < until {
            self.tick(controller_up);
        }
    }

    /// A write to cderd's ledger: an `alloc` of no device for a job of the
    /// campaign's own, then its `release`.
    fn probe_write(&mut self) -> Result<(), String> {
        let job: cder_model::JobKey =
            format!("local:faults-{}", self.started.elapsed().as_micros()).parse().expect("a valid key");
        let mut c = Client::connect(self.c().cderd_socket(), Duration::from_secs(5)).map_err(|e| e.to_string())?;
        c.alloc(&AllocRequest::new(job.clone(), 0, 0)).map_err(|e| e.to_string())?;
        c.release(&job).map(|_| ()).map_err(|e| {
            self.unreleased.push(job);
            e.to_string()
        })
    }

    /// Waits for a write to cderd's ledger to succeed again.
    fn wait_writes(&mut self, since: Instant) {
        let limit = bound("cderd writes");
        // The bound runs from `since` (the disk emptied), not from now.
        let mut refused = String::new();
        let wrote =
            cder_testkit::wait_for_value(limit.saturating_sub(since.elapsed()), Duration::from_millis(100), || {
                match self.probe_write() {
                    Ok(_) => Some(()),
                    Err(e) => {
                        refused = e;
                        None
                    }
                }
            });
        if wrote.is_some() {
            self.report.daemons.entry("cderd writes".into()).or_default().push(since.elapsed());
            let socket = self.c().cderd_socket();
            self.unreleased.retain(|job| {
                Client::connect(&socket, Duration::from_secs(5)).and_then(|mut c| c.release(job)).is_err()
            });
        } else {
            self.violation(
                Check::Recovery,
                &format!("cderd refused writes {limit:?} after the disk emptied: {refused}"),
            );
        }
    }

    /// Waits until GPU `index`'s drain reason (empty: none) passes `want`;
    /// the time it took, or None past the bound.
    fn wait_device(&self, index: u32, want: impl Fn(&str) -> bool) -> Option<Duration> {
        let since = Instant::now();
        cder_testkit::wait_for_value(bound("gpu drain/return"), Duration::from_millis(100), || {
            let status = self.c().cderd_status().ok()?;
            // A GPU cderd no longer lists ends the wait: it will not pass.
            let Some(d) = status.devices.iter().find(|d| d.index == index) else { return Some(None) };
            want(d.reason.as_deref().unwrap_or("")).then(|| Some(since.elapsed()))
        })
        .flatten()
    }

    /// Waits until cderd, slurmctld and slurmd answer; records each one's
    /// time from `since` and a violation past its bound. Returns the
    /// longest.
    fn wait_daemons(&mut self, since: Instant) -> Duration {
        let mut longest = Duration::ZERO;
        for daemon in ["cderd", "slurmctld", "slurmd"] {
            let limit = bound(daemon);
            // The bound runs from `since` (the fault), not from now.
            let answered =
                cder_testkit::wait_for_value(limit.saturating_sub(since.elapsed()), Duration::from_millis(50), || {
                    self.resume_after_slurm_state_loss();
                    self.answers(daemon).then(|| since.elapsed())
                });
            match answered {
                Some(d) => {
                    self.report.daemons.entry(daemon.into()).or_default().push(d);
                    longest = longest.max(d);
                }
                None => {
                    self.violation(Check::Recovery, &format!("{daemon} did not answer within {limit:?}"));
                    longest = longest.max(since.elapsed());
                }
            }
        }
        longest
    }

    fn answers(&self, daemon: &str) -> bool {
        let c = self.c();
        match daemon {
            "cderd" => c.cderd_status().is_ok(),
            "slurmctld" => c
                .run("scontrol", &["ping"])
                .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("is UP")),
            // slurmd accepts connections, and slurmctld counts its node
            // in service (not DOWN, not unresponsive).
            _ => {
                TcpStream::connect_timeout(&([127, 0, 0, 1], c.slurmd_port).into(), Duration::from_secs(1)).is_ok()
                    && c.run("sinfo", &["-h", "-n", c.node_name(), "-o", "%T"]).is_ok_and(|o| {
                        let s = String::from_utf8_lossy(&o.stdout).trim().to_string();
                        !s.is_empty()
                            && !s.ends_with('*')
                            && !["down", "unknown", "drained", "fail"].contains(&s.as_str())
                    })
            }
        }
    }

    /// slurmctld killed with `kill -9` forgets its last seconds: jobs that
    /// ran or ended then are pending again in its saved state, and when it
    /// starts one that slurmd still runs, it drains the node ("Duplicate
    /// jobid"). That is SLURM's own recovery, not cder's: resume the node
    /// as its operator would, and count it.
    fn resume_after_slurm_state_loss(&mut self) {
        let c = self.c();
        let Ok(out) = c.run("scontrol", &["show", "node", "-o", c.node_name()]) else { return };
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let reason = text.split(" Reason=").nth(1).unwrap_or("");
        if !reason.starts_with("Duplicate jobid") {
            return;
        }
        let node = c.node_name().to_string();
        let _ = c.run("scontrol", &["update", &format!("nodename={node}"), "state=resume"]);
        self.say("SLURM drained the node for a duplicate job id after its lost state; resumed");
        *self
            .report
            .slurm_events
            .entry("slurmctld drained the node for a duplicate job id (a job it started again from the state a kill -9 cut short); resumed by hand".into())
            .or_default() += 1;
    }

    fn violation(&mut self, check: Check, what: &str) {
        let line = format!("after {}: {what}", self.current);
        eprintln!("cder-faults: VIOLATION ({}): {line}", check.name());
        self.report.violations.entry(check).or_default().push(line);
    }

    /// Waits (at most [`SETTLE`], with the reconcile timer) for the
    /// invariants to hold; records what still fails then.
    fn check_after_fault(&mut self) {
        let since = Instant::now();
        let mut reconciled = false;
        loop {
            let found = self.invariants();
            match found {
                Ok(v) if v.is_empty() => {
                    self.say(&format!("checked after {} in {:.1} s", self.current, since.elapsed().as_secs_f64()));
                    return;
                }
                Ok(v) if since.elapsed() > SETTLE => {
                    for (check, what) in v {
                        self.violation(check, &what);
                    }
                    return;
                }
                Err(e) if since.elapsed() > SETTLE => {
                    self.violation(Check::Recovery, &format!("the checker could not read the node's state: {e}"));
                    return;
                }
                _ => {}
            }
            self.resume_after_slurm_state_loss();
            // Jobs whose epilog never ran are the reconcile timer's.
            if since.elapsed() > Duration::from_secs(5) && !reconciled {
                self.reconcile();
                reconciled = true;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The invariants at this instant: what violates them, or an error
    /// when SLURM or cderd could not be read.
    fn invariants(&self) -> Result<Vec<(Check, String)>, String> {
        node_invariants(self.c(), &self.cgroup_parent)
    }
}

impl Drop for Campaign {
    fn drop(&mut self) {
        if let Some(mut cluster) = self.cluster.take() {
            cluster.cancel_all();
            cluster.stop_cderd();
            if self.mounted {
                let _ = Command::new("umount").arg("-l").arg(&self.state_mount).status();
            }
            drop(cluster);
        }
        // Groups of allocations the stopped cderd still held.
        remove_groups(&self.cgroup_parent);
    }
}

/// What `cderctl reconcile --from slurm` does, as a node's timer runs it:
/// the allocations cderd released, or None when cderd or SLURM did not
/// answer.
pub(crate) fn reconcile_node(c: &SlurmCluster) -> Option<Vec<cder_model::JobKey>> {
    let mut client = Client::connect(c.cderd_socket(), Duration::from_secs(5)).ok()?;
    let generation = client.status().ok()?.generation;
    let states = squeue_states(c).ok()?;
    let live_jobs = states.iter().filter(|(_, s)| !terminal(s)).filter_map(|(id, _)| job_key(*id)).collect();
    client
        .reconcile(&ReconcileRequest { live_jobs, lrms: Some("slurm".into()), as_of: Some(generation) })
        .ok()
        .map(|r| r.released)
}

/// Every job SLURM knows, by id: its state.
pub(crate) fn squeue_states(cluster: &SlurmCluster) -> Result<BTreeMap<u32, String>, String> {
    let out = cluster.run("squeue", &["-h", "--all", "--states=all", "-o", "%i %T"])?;
    if !out.status.success() {
        return Err(format!("squeue: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(id, s)| Some((id.trim().parse().ok()?, s.trim().to_string())))
        .collect())
}

/// The node's invariants at this instant (the adversary campaign checks
/// them too): what violates them, or an error
/// when SLURM or cderd could not be read.
pub(crate) fn node_invariants(c: &SlurmCluster, cgroup_parent: &str) -> Result<Vec<(Check, String)>, String> {
    let before = squeue_states(c)?;
    let mut client = Client::connect(c.cderd_socket(), Duration::from_secs(5)).map_err(|e| e.to_string())?;
    let status = client.status().map_err(|e| e.to_string())?;
    // Jobs whose script runs (their prolog is done): their record and
    // what they can open.
    let mut records: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    let mut opened: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    let mut unrecorded: Vec<u32> = Vec::new();
    for (&id, _) in before.iter().filter(|(_, s)| s.as_str() == "RUNNING") {
        let Some(open) = sample(c, id) else { continue };
        opened.insert(id, open);
        match client.env(&job_key(id).expect("a valid key")) {
            Ok(a) => {
                records.insert(id, a.devices.iter().map(|d| d.index).collect());
            }
            Err(e) if e.code() == Some(ErrorCode::UnknownJob) => unrecorded.push(id),
            Err(e) => return Err(format!("env of slurm:{id}: {e}")),
        }
    }
    let groups = job_groups(cgroup_parent);
    let processes = job_processes(c.slurm_conf());
    let after = squeue_states(c)?;
    // SLURM believes it runs, and the node runs it: after slurmctld
    // lost its last seconds of state, a job that ended is RUNNING
    // again in its view until slurmd reports it missing.
    let running = |id: &u32| {
        before.get(id).is_some_and(|s| s == "RUNNING")
            && after.get(id).is_some_and(|s| s == "RUNNING")
            && processes.iter().any(|(_, j)| j == id)
    };
    // Unknown to SLURM counts as ended: MinJobAge keeps every job of
    // the run in squeue.
    let ended = |id: &u32| before.get(id).is_none_or(|s| terminal(s)) && after.get(id).is_none_or(|s| terminal(s));
    let state = |id: &u32| after.get(id).cloned().unwrap_or_else(|| "unknown to SLURM".into());
    let mut v = Vec::new();
    for id in unrecorded.iter().filter(|id| running(id)) {
        v.push((Check::LostAllocation, format!("job {id} is RUNNING in SLURM and has no record in cderd")));
    }
    let live: Vec<(&u32, &BTreeSet<u32>)> = opened.iter().filter(|(id, _)| running(id)).collect();
    for (i, (a, da)) in live.iter().enumerate() {
        for (b, db) in &live[i + 1..] {
            let shared: Vec<&u32> = da.intersection(db).collect();
            if !shared.is_empty() {
                v.push((Check::SharedDevice, format!("running jobs {a} and {b} can both open GPU(s) {shared:?}")));
            }
        }
        if let Some(own) = records.get(a) {
            let outside: Vec<&u32> = da.difference(own).collect();
            if !outside.is_empty() {
                v.push((
                    Check::SharedDevice,
                    format!("job {a} can open GPU(s) {outside:?} outside its record {own:?}"),
                ));
            }
        }
    }
    for (owner, path) in &groups {
        let procs = std::fs::read_to_string(path.join("cgroup.procs")).unwrap_or_default();
        let n = procs.split_whitespace().count();
        match owner {
            GroupOwner::Slurm(id) if ended(id) => v.push((
                Check::Leak,
                format!("{} of job {id} ({}) is left, {n} process(es) in it", path.display(), state(id)),
            )),
            GroupOwner::Slurm(_) => {}
            // The campaign's own probes: a group needs a live allocation.
            GroupOwner::Other(job) => match client.env(job) {
                Err(e) if e.code() == Some(ErrorCode::UnknownJob) => v.push((
                    Check::Leak,
                    format!("{} of {job}, which holds no allocation, is left, {n} process(es) in it", path.display()),
                )),
                _ => {}
            },
        }
    }
    for d in &status.devices {
        let Some(job) = &d.job else { continue };
        let Some(id) = job.to_string().strip_prefix("slurm:").and_then(|i| i.parse::<u32>().ok()) else { continue };
        if ended(&id) {
            v.push((Check::Leak, format!("GPU {} still held by job {id} ({})", d.index, state(&id))));
        }
    }
    for (pid, id) in processes.iter().filter(|(_, id)| ended(id)) {
        v.push((Check::Leak, format!("process {pid} of job {id} ({}) still runs", state(id))));
    }
    let usage =
        client.accounting(&AccountingRequest { since: None, until: None }).map_err(|e| format!("accounting: {e}"))?;
    v.extend(usage_problems(&usage.records).into_iter().map(|p| (Check::Accounting, p)));
    Ok(v)
}

/// Usage records that break the accounting promises: a negative interval,
/// or two records of one device overlapping (its seconds counted twice).
pub(crate) fn usage_problems(records: &[AccountingRecord]) -> Vec<String> {
    let mut v = Vec::new();
    let mut by_device: BTreeMap<&str, Vec<&AccountingRecord>> = BTreeMap::new();
    for r in records {
        if r.device_seconds < 0 || r.end.is_some_and(|end| end < r.start) {
            v.push(format!(
                "{} on GPU {}: {}..{:?}, {} device-seconds",
                r.job, r.index, r.start, r.end, r.device_seconds
            ));
        }
        // Sharers of a device overlap by design, and so does a use after a
        // release by a process outside the job (ended by cderd, counted for
        // the job it came from, issue 52): only whole holders must not.
        if r.shares.is_none() && r.after_release.is_none() {
            by_device.entry(&r.uuid).or_default().push(r);
        }
    }
    for records in by_device.values_mut() {
        // An open record (no end yet) after a closed one of the same start.
        records.sort_by_key(|r| (r.start, r.end.unwrap_or(i64::MAX)));
        for w in records.windows(2) {
            match w[0].end {
                Some(end) if end <= w[1].start => {}
                _ => v.push(format!(
                    "GPU {}: {} ({}..{:?}) overlaps {} ({}..{:?})",
                    w[0].index, w[0].job, w[0].start, w[0].end, w[1].job, w[1].start, w[1].end
                )),
            }
        }
    }
    v
}

pub(crate) fn gpu_uuid(i: u32) -> String {
    format!("GPU-fa017000-0000-4000-8000-{i:012}")
}

pub(crate) fn job_key(id: u32) -> Option<cder_model::JobKey> {
    format!("slurm:{id}").parse().ok()
}

/// The job script's worker: reports what it can open until its time is up
/// (`0`: forever), and appends each new set to `opens-<job id>`.
pub(crate) fn write_probe(cluster: &SlurmCluster) -> Result<(), String> {
    let dir = cluster.jobs_dir();
    let text = format!(
        "#!/bin/sh\n# $1: seconds to run (0: until killed). Reports the fake GPUs this process can open,\n\
         # now (state-ID) and each set it ever could (opens-ID).\n\
         end=$(( $(date +%s) + $1 ))\nn=0\nlast=none\n\
         while [ \"$1\" = 0 ] || [ \"$(date +%s)\" -lt \"$end\" ]; do\n{}n=$((n+1))\n\
         [ \"$open\" = \"$last\" ] || echo \"OPEN=${{open%,}}\" >> \"{dir}/opens-$SLURM_JOB_ID\"\nlast=$open\n\
         echo \"OPEN=${{open%,}} SEQ=$n\" > \"{dir}/state-$SLURM_JOB_ID.$$\"\n\
         mv \"{dir}/state-$SLURM_JOB_ID.$$\" \"{dir}/state-$SLURM_JOB_ID\"\nsleep 0.3\ndone\n",
        cluster.open_probe().replace("echo OPEN=${open%,}\n", ""),
        dir = dir.display()
    );
    std::fs::write(dir.join("probe.sh"), text).map_err(|e| format!("writing probe.sh: {e}"))
}

/// The GPUs job `id` last reported it can open, if it reported.
pub(crate) fn sample(cluster: &SlurmCluster, id: u32) -> Option<BTreeSet<u32>> {
    let text = std::fs::read_to_string(cluster.jobs_dir().join(format!("state-{id}"))).ok()?;
    let open = text.split_whitespace().find_map(|w| w.strip_prefix("OPEN="))?;
    Some(open.split(',').filter_map(|s| s.parse().ok()).collect())
}

/// Writes `path` until the file system is full (ENOSPC).
fn fill(path: &Path) -> Result<(), String> {
    let mut f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let chunk = vec![0xa5u8; 64 * 1024];
    let mut size = chunk.len();
    loop {
        match f.write(&chunk[..size]) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => {
                if size == 1 {
                    return Ok(());
                }
                size = (size / 2).max(1);
            }
            Err(e) => return Err(format!("filling {}: {e}", path.display())),
        }
    }
}

/// The mount points of the cgroup hierarchies cderd may use: v1 `devices`
/// and `freezer`, and cgroup2.
pub(crate) fn cgroup_roots() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((before, after)) = line.split_once(" - ") else { continue };
        let fields: Vec<&str> = before.split(' ').collect();
        let tail: Vec<&str> = after.split(' ').collect();
        if fields.len() < 5 || tail.len() < 3 {
            continue;
        }
        let v1 = tail[0] == "cgroup" && tail[2].split(',').any(|o| o == "devices" || o == "freezer");
        if v1 || tail[0] == "cgroup2" {
            out.push(PathBuf::from(fields[4]));
        }
    }
    out
}

/// Whose a job group under cderd's cgroup parent is.
pub(crate) enum GroupOwner {
    /// A SLURM job, by id.
    Slurm(u32),
    /// Any other job key (the campaign's own `local:` probes).
    Other(cder_model::JobKey),
}

/// The job groups under cderd's parent in every hierarchy, named
/// `<lrms>-<id>-<token>` (see cderd's cgroup.rs).
pub(crate) fn job_groups(parent: &str) -> Vec<(GroupOwner, PathBuf)> {
    let mut out = Vec::new();
    for root in cgroup_roots() {
        let Ok(entries) = std::fs::read_dir(root.join(parent)) else { continue };
        for e in entries.flatten().filter(|e| e.path().is_dir()) {
            if let Some(owner) = group_owner(&e.file_name().to_string_lossy()) {
                out.push((owner, e.path()));
            }
        }
    }
    out
}

pub(crate) fn group_owner(name: &str) -> Option<GroupOwner> {
    let (lrms, id) = name.rsplit_once('-').and_then(|(key, _token)| key.split_once('-'))?;
    match (lrms, id.parse()) {
        ("slurm", Ok(id)) => Some(GroupOwner::Slurm(id)),
        _ => format!("{lrms}:{id}").parse().ok().map(GroupOwner::Other),
    }
}

/// Removes the job groups left under `parent` (empty ones; a group with
/// processes stays) and then `parent` itself.
pub(crate) fn remove_groups(parent: &str) {
    for (_, path) in job_groups(parent) {
        let _ = std::fs::remove_dir(path);
    }
    for root in cgroup_roots() {
        let _ = std::fs::remove_dir(root.join(parent));
    }
}

/// The processes of this cluster's jobs (unprivileged, with its
/// `SLURM_CONF` and a `SLURM_JOB_ID`): pid, job id.
pub(crate) fn job_processes(conf: &Path) -> Vec<(u32, u32)> {
    let want = format!("SLURM_CONF={}", conf.display());
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return out };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let uid = std::fs::read_to_string(e.path().join("status")).ok().and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Uid:")).map(|u| u.split_whitespace().next() != Some("0"))
        });
        if uid != Some(true) {
            continue;
        }
        let Ok(env) = std::fs::read(e.path().join("environ")) else { continue };
        let vars: Vec<&[u8]> = env.split(|b| *b == 0).collect();
        if !vars.contains(&want.as_bytes()) {
            continue;
        }
        let job = vars
            .iter()
            .find_map(|v| v.strip_prefix(b"SLURM_JOB_ID="))
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok());
        if let Some(job) = job {
            out.push((pid, job));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_lists_parse_and_refuse_unknown_names() {
        assert_eq!(
            Fault::parse_list("restart-slurmd,kill-cderd").unwrap(),
            vec![Fault::KillCderd, Fault::RestartSlurmd]
        );
        assert_eq!(Fault::parse_list("all").unwrap(), Fault::ALL.to_vec());
        let e = Fault::parse_list("kill-cderd,reboot").unwrap_err();
        assert!(e.contains("\"reboot\"") && e.contains("gpu-lost"), "{e}");
        assert!(Fault::parse_list(",").is_err());
    }

    #[test]
    fn group_names_give_their_job() {
        assert!(matches!(group_owner("slurm-4214907-96f5b0ceac30"), Some(GroupOwner::Slurm(4214907))));
        match group_owner("local-faults-565306383-131500dba36f") {
            Some(GroupOwner::Other(job)) => assert_eq!(job.to_string(), "local:faults-565306383"),
            _ => panic!("a local job's group"),
        }
        assert!(group_owner("stray").is_none());
    }

    #[test]
    fn usage_overlaps_are_found_and_a_zero_interval_before_an_open_one_is_not_one() {
        let rec = |job: &str, start: i64, end: Option<i64>| AccountingRecord {
            job: job.parse().unwrap(),
            uid: 65534,
            cder_type: "gpgpu".into(),
            index: 2,
            uuid: "GPU-x".into(),
            start,
            end,
            device_seconds: end.map_or(0, |e| e - start),
            shares: None,
            shares_total: None,
            fraction: 1.0,
            after_release: None,
        };
        // The wall clock stepped back: a release recorded at its start, the
        // next allocation starting there.
        assert!(usage_problems(&[rec("slurm:2", 100, None), rec("slurm:1", 100, Some(100))]).is_empty());
        let p = usage_problems(&[rec("slurm:1", 100, Some(150)), rec("slurm:2", 120, None)]);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("overlaps"), "{p:?}");
        let p = usage_problems(&[rec("slurm:3", 100, Some(90))]);
        assert!(p.len() == 1 && p[0].contains("100..Some(90)"), "{p:?}");
    }

    #[test]
    fn one_seed_gives_one_sequence() {
        let (mut a, mut b, mut c) = (Rng::new(7), Rng::new(7), Rng::new(8));
        let sa: Vec<u64> = (0..5).map(|_| a.next()).collect();
        assert_eq!(sa, (0..5).map(|_| b.next()).collect::<Vec<_>>());
        assert_ne!(sa, (0..5).map(|_| c.next()).collect::<Vec<_>>());
    }

    #[test]
    fn the_table_counts_violations_per_check() {
        let mut r = Report { seed: 42, ..Report::default() };
        r.faults.entry(Fault::KillCderd).or_default().injected = 2;
        r.violations.entry(Check::Leak).or_default().push("after kill-cderd #1: x".into());
        let t = r.table();
        assert!(t.contains("| kill-cderd | 2 |"), "{t}");
        assert!(t.contains("| leaked cgroup, device or process | 1 |"), "{t}");
        assert!(t.contains("| lost allocation | 0 |"), "{t}");
        assert_eq!(r.violation_count(), 1);
    }
}
