//! The daemon's brain: authorization and the operations, over the store,
//! the selection policy and enforcement. The socket lives in [`crate::server`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use cder_model::{Config, Device, DeviceCgroup, Discovery, HeldDevice, HeldOpen, JobEnvironment, JobKey};
use cder_protocol::{
    Accounting, AccountingRequest, AllocRequest, AllocatedDevice, Allocation, Confined, DeviceState, EnvRequest,
    ErrorCode, ErrorReply, IdleDevice, Pong, ReconcileRequest, Reconciled, Released, Request, ShareStatus, Status,
    TypeCounts, Usage, UsageRequest, Utilisation, PROTOCOL_VERSION,
};

use crate::cgroup::{DeviceCgroups, DeviceNumber, Fenced, SharedFile};
use crate::enforce::Enforcer;
use crate::intake::{Intake, Record};
use crate::policy::{LocalityPolicy, SelectionPolicy};
use crate::store::{JobAllocation, LedgerRow, Store, StoreError, UsageObservation, UsageRules};
use crate::warmup::{favors_dynmods, MigrationWarmup};

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Discovering the node's devices failed (NVML, sysfs, the config).
    #[error("discovery: {0}")]
    Inventory(#[from] cder_inventory::InventoryError),
    /// The state database could not be opened or reconciled.
    #[error("state: {0}")]
    Store(#[from] StoreError),
    /// `[node.enforcement]` asks for something this node cannot do.
    #[error("enforcement: {0}")]
    Enforcement(#[from] crate::enforce::EnforcementError),
    /// `confine` was configured but device cgroups are unavailable.
    #[error("device cgroups: {0}")]
    Cgroup(#[from] crate::cgroup::CgroupError),
    /// A `[node] operators` entry names no user this node knows.
    #[error("[node] operators: {0}")]
    Operator(String),
    /// `[node.mps] enabled` on a node that shares no GPU.
    #[error("[node.mps]: {0}")]
    Mps(String),
    /// `[node.sharing]` and SLURM's gres.conf disagree.
    #[error("[node.sharing]: {0}")]
    Sharing(#[from] crate::sharing::SharingError),
    /// SLURM's gres.conf counts a type's devices otherwise than discovery found them.
    #[error("gres.conf and discovery disagree: {0}")]
    GresCount(crate::sharing::SharingError),
    /// The state folder could not be created or secured.
    #[error("state dir {}: {source}", path.display())]
    StateDir {
        /// `[node] state_dir`.
        path: std::path::PathBuf,
        /// Why it could not be used.
        source: std::io::Error,
    },
}

pub use crate::peer::Caller;

/// The node daemon's state and operations. Thread-safe: every operation
/// takes the one store lock, which serializes writers (SQLite has one
/// writer anyway) and keeps enforcement in step with the database.
pub struct Daemon {
    config: Config,
    /// The MPS control daemons of shared GPUs (`[node.mps] enabled`).
    mps: Option<crate::mps::Mps>,
    store: Mutex<Store>,
    policy: Box<dyn SelectionPolicy>,
    enforcer: Enforcer,
    operators: BTreeSet<u32>,
    /// The inventory found at start, by UUID, for the job environment.
    inventory: HashMap<String, Device>,
    /// The devices the ledger knows that discovery did not find at start,
    /// as they were last discovered: a job still holding one gets its
    /// environment from them.
    last_discovered: HashMap<String, Device>,
    /// Per-job device cgroups (`confine`).
    cgroups: Arc<DeviceCgroups>,
    /// Files open to the jobs holding a device of some types (AMD's kfd).
    shared_files: Vec<SharedFile>,
    /// Which job groups are set up, by group name (see [`GroupState`]).
    groups: Arc<Mutex<HashMap<String, GroupState>>>,
    /// Released jobs' leftovers being ended, off the ledger lock.
    ending: Arc<crate::ending::Ending>,
    /// The held-open scan: one thread, shared by every caller that needs a
    /// look at the node's open descriptors (see [`crate::held`]).
    scanner: crate::held::Scanner,
    /// The looks asked for by releases, each until a finished round covers
    /// it (see [`AfterRelease`]).
    looks: Mutex<Vec<AfterRelease>>,
    /// What end-job threads found after their release had answered, for the
    /// leftover watcher to record.
    late: Arc<Mutex<Vec<LateEnd>>>,
    /// Warms the kernel's cgroup migration lock before tasks are confined.
    warmup: MigrationWarmup,
    /// Runs what follows an `alloc`'s reply (cgroup set-up, held-open warning).
    background: Background,
    /// `alloc`s on their way in, for the `env` that follows (see [`crate::intake`]).
    intake: Intake,
    /// Devices whose file this process has seen: one that vanishes after
    /// is drained (one never seen may not be made yet, see nvidia-modprobe).
    files_seen: Mutex<BTreeSet<String>>,
    /// How usage samples are rolled up (`[node.usage]`).
    usage_rules: UsageRules,
    /// The last period's sample of each device a running job holds (for
    /// gauges; empty until the sampler's first period).
    latest: Mutex<Vec<cder_protocol::UsageSample>>,
    /// The node's drain in the batch system while a device is kept out
    /// (`[node.batch]`); the ledger pokes it at every change.
    node_drain: Arc<crate::node_drain::NodeDrain>,
}

/// A device a running job holds, for the usage sampler.
#[derive(Debug, Clone)]
pub struct UsageTarget {
    /// The job.
    pub job: JobKey,
    /// Its allocation's token (names its device cgroups).
    pub token: String,
    /// The device's UUID.
    pub uuid: String,
    /// Its CDER type.
    pub cder_type: String,
    /// Whether the job holds shares of the device beside other jobs: its
    /// sample is then its own processes' only, never the whole device's.
    pub shared: bool,
}

/// A look at a released device's holders, asked for by its release: a
/// process outside the ledger found holding the device (a descriptor
/// passed out of the job) is ended and its use counted for the job it came
/// from. Done once a finished round of the scan that started after the
/// release covers it; a round that could not finish is looked at again,
/// and never taken for a finding (docs/architecture.md, "The held-open
/// scan"). The device is in the pool meanwhile.
#[derive(Debug, Clone)]
struct AfterRelease {
    job: JobKey,
    token: String,
    device: String,
    rdev: u64,
    /// The release, unix seconds: a use found counts from here.
    released: i64,
    since: std::time::Instant,
    /// Whether the log said it has taken long.
    warned: bool,
}

/// What an end-job thread ended after its release had stopped waiting.
#[derive(Debug)]
struct LateEnd {
    job: JobKey,
    token: String,
    devices: Vec<(String, u64)>,
    ended: Vec<crate::ending::Ended>,
    released: i64,
}

/// Whether `holder` may hold a device whose live allocations or shares are
/// `rights`: a process of a sharer's uid (a shared GPU: the sharers' own
/// helpers, such as their MPS server, outlive any one of their jobs), or
/// of the whole device's owner that started no earlier than its
/// allocation (to the second). A process older than the allocation got
/// its descriptor from elsewhere: passed out of an earlier job.
fn is_rightful(holder: &crate::held::Holder, rights: &[crate::store::Right]) -> bool {
    let started = crate::held::started_unix(holder.start_ticks);
    rights.iter().any(|r| r.uid == holder.uid && (r.shared || started.is_none_or(|s| s.floor() >= r.start as f64)))
}

/// Releases whose holders are ended within this much are not logged as
/// still pending.
const LOOK_TAKES_LONG: std::time::Duration = std::time::Duration::from_secs(30);

/// The longest an `alloc` waits out a conflict (the protocol's bound).
pub const MAX_ALLOC_WAIT: std::time::Duration = std::time::Duration::from_millis(cder_protocol::MAX_WAIT_MS);
/// How long after its wait an `alloc` is still expected to end: an `env`
/// waits no longer for a pending record.
const ALLOC_SETTLES_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// How often an `alloc` waiting out a conflict looks again at the devices
/// kept out after a release.
const LEFTOVER_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// Work queued for after a reply.
type Chore = Box<dyn FnOnce() + Send>;

/// One long-lived thread for the work that follows an `alloc` (a job's
/// cgroup set-up, the held-open warning): a channel send on the job's start
/// path instead of starting a thread per chore (~50 µs each, more on a busy
/// node). Chores run in the order queued.
struct Background {
    queue: Mutex<Option<std::sync::mpsc::Sender<Chore>>>,
}

impl Background {
    fn start() -> Background {
        let (tx, rx) = std::sync::mpsc::channel::<Chore>();
        let spawned = std::thread::Builder::new().name("cderd-background".into()).spawn(move || {
            for chore in rx {
                chore();
            }
        });
        Background { queue: Mutex::new(spawned.ok().map(|_| tx)) }
    }

    /// Queues `chore`; runs it here when the thread is gone.
    fn run(&self, chore: Chore) {
        let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let refused = match queue.as_ref() {
            Some(tx) => tx.send(chore).err().map(|e| e.0),
            None => Some(chore),
        };
        drop(queue);
        if let Some(chore) = refused {
            chore();
        }
    }
}

pub use cder_ledger::{now, resolve_operators};

/// Unix milliseconds now (usage samples may come faster than a second).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How long `request` may wait out a conflict.
/// The policy `[node] selection` names (cder-ledger maps names to
/// policies, for cderd and `cder-sim` alike).
fn selection_policy(config: &Config) -> Box<dyn SelectionPolicy> {
    crate::policy::by_name(config.node.selection.name()).unwrap_or_else(|| Box::new(LocalityPolicy))
}

fn alloc_wait(request: &AllocRequest) -> std::time::Duration {
    request.wait_ms.map_or(std::time::Duration::ZERO, |ms| std::time::Duration::from_millis(ms).min(MAX_ALLOC_WAIT))
}

/// Marks an `alloc` refused in the intake unless it ended normally.
struct Settle<'a> {
    intake: &'a Intake,
    job: &'a JobKey,
    uid: u32,
    done: bool,
}

impl Drop for Settle<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.intake.settled(
                self.job,
                self.uid,
                Some(&ErrorReply::new(ErrorCode::Internal, "internal error while recording (see the cderd log)")),
            );
        }
    }
}

/// A job's device cgroups between `alloc` and `release`. `alloc` sets them
/// up on the background thread after its commit, so neither the job prolog
/// nor a task's `confine` waits for the directories, the v1 rules or the
/// BPF program. Whoever holds the map's lock while setting up is the only
/// one doing it; `confine` sets up itself whatever is not `Ready`. A
/// restarted cderd knows no group as ready, so it re-applies the rules
/// before moving anyone into an existing group. A job the batch system
/// confines gets none ahead (see [`JobAllocation::batch_confined`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupState {
    /// The set-up thread has not run yet.
    Pending,
    /// Directories, rules and program are in place.
    Ready,
    /// Released before the set-up thread ran: it must not create them.
    Released,
}

impl Daemon {
    /// Discovers devices, opens the state under `[node] state_dir`, brings
    /// the device table in line with the inventory and re-asserts
    /// enforcement on every device (a crash may have left it half done).
    pub fn start(config: Config) -> Result<Daemon, StartError> {
        let policy = selection_policy(&config);
        Self::start_with(config, policy)
    }

    /// As [`Daemon::start`], with another selection policy.
    pub fn start_with(config: Config, policy: Box<dyn SelectionPolicy>) -> Result<Daemon, StartError> {
        let mut daemon = Self::open(config, policy)?;
        daemon.cgroups = Arc::new(DeviceCgroups::new(&daemon.config.node.enforcement)?);
        daemon.warmup = warmup_for(&daemon.cgroups, daemon.config.node.enforcement.cgroup_warmup_ms);
        let db = daemon.config.node.state_dir.join("cderd.db");
        crate::store::checkpoint_in_background(&db, std::time::Duration::from_millis(500))?;
        daemon.reassert_enforcement()?;
        // After a restart the GPUs still shared get their control daemons back.
        for uuid in daemon.sharers_by_device().keys() {
            daemon.mps_settle(uuid).map_err(StartError::Mps)?;
        }
        Ok(daemon)
    }

    /// Each shared device's sharers now, by UUID, for MPS.
    fn sharers_by_device(&self) -> BTreeMap<String, Vec<crate::mps::Sharer>> {
        let mut out: BTreeMap<String, Vec<crate::mps::Sharer>> = BTreeMap::new();
        if self.mps.is_none() {
            return out;
        }
        let rows = { self.store().shares().unwrap_or_default() };
        for r in rows {
            out.entry(r.device.uuid.clone()).or_default().push(crate::mps::Sharer {
                job: r.job.to_string(),
                uid: r.uid,
                shares: r.shares,
                total: r.total,
            });
        }
        out
    }

    /// Brings `uuid`'s MPS control daemon in line with its sharers now:
    /// running with their limits, or stopped when none is left.
    fn mps_settle(&self, uuid: &str) -> Result<(), String> {
        let Some(mps) = &self.mps else { return Ok(()) };
        let memory = self.inventory.get(uuid).map_or(0, |d| d.attributes.memory_mib);
        let sharers = self.sharers_by_device().remove(uuid).unwrap_or_default();
        if sharers.is_empty() {
            mps.leave(uuid, memory, &[])
        } else {
            mps.arrive(uuid, memory, &sharers)
        }
    }

    /// MPS for a new sharer `job` of `uid`: refused while another user's
    /// jobs share one of `uuids`; else each GPU's daemon up with new limits.
    fn mps_admit(&self, job: &JobKey, uid: u32, uuids: &[String]) -> Result<(), ErrorReply> {
        let Some(mps) = &self.mps else { return Ok(()) };
        let all = self.sharers_by_device();
        for uuid in uuids {
            let others: Vec<crate::mps::Sharer> =
                all.get(uuid).into_iter().flatten().filter(|s| s.job != job.to_string()).cloned().collect();
            mps.admits(uuid, uid, &others).map_err(|m| ErrorReply::new(ErrorCode::Conflict, m))?;
        }
        for uuid in uuids {
            self.mps_settle(uuid).map_err(|m| ErrorReply::new(ErrorCode::Internal, m))?;
        }
        Ok(())
    }

    /// Under `device_files`, opens each shared file (kfd) to exactly the uids
    /// the ledger now shows holding a device of its types, whole or in
    /// shares. Called under the ledger lock after every change of holders;
    /// the files are root's (`/dev/kfd`), never a user's. A failure is
    /// logged: the job keeps its devices, and the next change tries again.
    fn open_shared_files(&self, store: &Store) {
        if !self.enforcer.manages_files() || self.shared_files.is_empty() {
            return;
        }
        let (devices, shares) = match (store.devices(), store.shares()) {
            (Ok(d), Ok(s)) => (d, s),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!("opening the shared device files to their holders: {e}");
                return;
            }
        };
        for file in &self.shared_files {
            let holders = shared_file_holders(file, &devices, &shares);
            if let Err(e) = self.enforcer.apply_shared_file(&file.path, &file.name(), &holders) {
                tracing::error!("opening {} to the jobs holding its devices: {e}", file.name());
            }
        }
    }

    /// Under `device_files`, checks every present device's file (and each
    /// shared file, kfd) against how cder set it for who holds the device
    /// in the ledger now, and sets each one that differs again, logging
    /// what was found: the NVIDIA driver's `nvidia-modprobe` re-creates a
    /// device file 0666 root:root where `ModifyDeviceFiles` is 1, udev
    /// re-applies its rules. Under the ledger lock, as every change of
    /// these files is (cderd's own files: nothing here can be made to
    /// wait). The number of files set again.
    pub fn reassert_device_files(&self) -> usize {
        if !self.enforcer.manages_files() {
            return 0;
        }
        let store = self.store();
        let (devices, shares) = match (store.devices(), store.shares()) {
            (Ok(d), Ok(s)) => (d, s),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!("checking the device files: {e}");
                return 0;
            }
        };
        let mut fixed = 0;
        for d in devices.iter().filter(|d| d.present) {
            let sharers: BTreeSet<u32> = shares.iter().filter(|s| s.device.uuid == d.uuid).map(|s| s.uid).collect();
            let want = match d.uid {
                Some(uid) => crate::enforce::FileWant::Job(uid),
                None if !sharers.is_empty() => crate::enforce::FileWant::Shared(&sharers),
                None => crate::enforce::FileWant::Idle,
            };
            match self.enforcer.reassert_file(d, want) {
                Ok(None) => {}
                Ok(Some(found)) => {
                    fixed += 1;
                    tracing::warn!(
                        device = %d.name(),
                        path = %d.path.display(),
                        "device file found {found}, not as cder set it (re-created by nvidia-modprobe? deploy/cderd.md, \"The NVIDIA driver and device_files\"): owner, mode and ACL set again"
                    );
                }
                Err(e) => tracing::error!(device = %d.name(), "setting a changed device file again: {e}"),
            }
        }
        for file in &self.shared_files {
            let holders = shared_file_holders(file, &devices, &shares);
            match self.enforcer.reassert_shared_file(&file.path, &file.name(), &holders) {
                Ok(None) => {}
                Ok(Some(found)) => {
                    fixed += 1;
                    tracing::warn!(file = %file.path.display(), "shared device file found {found}, not as cder set it: owner, mode and ACL set again");
                }
                Err(e) => tracing::error!("setting {} again: {e}", file.name()),
            }
        }
        drop(store);
        fixed
    }

    /// The device files cder sets under `device_files` (every present
    /// device's, and the shared files): what the watcher watches.
    pub fn managed_files(&self) -> Vec<std::path::PathBuf> {
        if !self.enforcer.manages_files() {
            return Vec::new();
        }
        let devices = { self.store().devices().unwrap_or_default() };
        let mut out: Vec<std::path::PathBuf> = devices.into_iter().filter(|d| d.present).map(|d| d.path).collect();
        out.extend(self.shared_files.iter().map(|f| f.path.clone()));
        out.sort();
        out.dedup();
        out
    }

    /// Opens each of `devices` to exactly its sharers in the ledger now:
    /// the device file's ACL (`device_files`) and the GPU's MPS
    /// directories. A device no job shares any more is the caller's to
    /// restore; its MPS directories are closed here. The caller holds the
    /// ledger lock (`store`), so that two changes of one device's sharers
    /// are written in the order they were recorded; these are cderd's own
    /// files, never a user's, so nothing here can be made to wait.
    fn open_to_sharers(&self, store: &Store, devices: &[LedgerRow]) -> Result<(), String> {
        let shares = store.shares().map_err(|e| e.to_string())?;
        for d in devices {
            let uids: BTreeSet<u32> = shares.iter().filter(|s| s.device.uuid == d.uuid).map(|s| s.uid).collect();
            if !uids.is_empty() {
                self.enforcer.apply_shared(std::slice::from_ref(d), &uids).map_err(|e| e.to_string())?;
            }
            if let Some(mps) = &self.mps {
                mps.grant(&d.uuid, &uids)?;
            }
        }
        Ok(())
    }

    /// Discovery, state and device table as [`Daemon::start`] does, but
    /// without touching devices (no enforcement) or starting threads: for
    /// `cderd --check`, which may run beside a live daemon.
    pub fn inspect(config: Config) -> Result<Daemon, StartError> {
        let policy = selection_policy(&config);
        Self::open(config, policy)
    }

    fn open(config: Config, policy: Box<dyn SelectionPolicy>) -> Result<Daemon, StartError> {
        let operators = resolve_operators(&config.node.operators).map_err(StartError::Operator)?;
        // `auto` is decided once: the health watch, the usage sampler and
        // enforcement follow the source that was actually used.
        let config = cder_inventory::resolved(&config)?;
        for cder in &config.cders {
            let source = cder_inventory::source_name(cder.discovery);
            tracing::info!(cder_type = cder.name(), source, "type {:?}: devices from {source}", cder.name());
        }
        let devices = cder_inventory::discover(&config)?;
        crate::gres_count::check(&config.node.sharing, &config.cders, &devices).map_err(StartError::GresCount)?;
        let dir = &config.node.state_dir;
        // 0700 whatever the umask, and refused if others could write it.
        crate::durable::create_state_dir(dir)
            .map_err(|e| StartError::StateDir { path: dir.clone(), source: std::io::Error::other(e.to_string()) })?;
        let types: Vec<String> = config.cders.iter().map(|c| c.name().to_string()).collect();
        let db = dir.join("cderd.db");
        let mut store = Store::open(&db, &types)?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let slurm_conf = std::env::var_os("SLURM_CONF").map(std::path::PathBuf::from);
        let node_drain = Arc::new(crate::node_drain::NodeDrain::new(crate::node_drain::resolve(
            &config.node.batch,
            config.node.sharing.slurm_node_name.as_deref(),
            &host,
            slurm_conf.as_deref(),
            |p| p.exists(),
        )));
        let poke = Arc::clone(&node_drain);
        store.on_keep_out_change(Box::new(move || poke.poke()));
        // The ledger numbers a device for good by its UUID: discovery's
        // numbering shifts when a GPU disappears. `devices` keep
        // discovery's, the runtimes' own, for the job environment.
        let numbered: BTreeSet<String> =
            config.cders.iter().filter(|c| c.discovery == Discovery::Nvml).map(|c| c.name().to_string()).collect();
        let mut in_ledger = devices.clone();
        for (uuid, found, kept) in store.keep_indices(&mut in_ledger, &numbered)? {
            tracing::warn!(
                device = %uuid,
                "discovery numbers this device {found} (a device before it is gone or new); the ledger keeps it {kept}"
            );
        }
        store.sync_inventory(&in_ledger)?;
        let last_discovered = store.last_discovered()?;
        let rows = store.devices()?;
        let offers = crate::sharing::offered(&config.node.sharing, &rows);
        crate::sharing::check(&config.node.sharing, &offers, &rows, "cder.toml")?;
        store.offer_shares(offers);
        let enforcer = Enforcer::new(&config)?;
        let mut held_open_ignore = BTreeSet::new();
        for name in &config.node.enforcement.held_open_ignore_users {
            // A default name such as nvidia-persistenced is absent on most
            // nodes; absence only means there is nothing to ignore.
            match resolve_operators(std::slice::from_ref(name)) {
                Ok(uids) => held_open_ignore.extend(uids),
                Err(e) => tracing::debug!("[node.enforcement] held_open_ignore_users: {e}"),
            }
        }
        let config_usage = config.node.usage.clone();
        let config_cders = config.cders.clone();
        if config.node.mps.enabled && config.node.sharing.shares_per_gpu == 0 {
            return Err(StartError::Mps(
                "enabled = true, but [node.sharing] shares_per_gpu is 0: MPS runs on GPUs offered as shares".into(),
            ));
        }
        let ending: Arc<crate::ending::Ending> = Arc::default();
        let scanner = {
            // cderd's own device files (root's, under /dev): their numbers
            // are read again at each scan (nvidia-modprobe may make one late).
            let paths: Vec<std::path::PathBuf> = rows.iter().map(|d| d.path.clone()).collect();
            // Uids whose open descriptors do not make a device busy.
            let ignore = held_open_ignore;
            let scanner = crate::held::Scanner::new(
                std::path::Path::new("/proc"),
                move || crate::held::Targets::of(paths.iter().map(std::path::PathBuf::as_path)),
                Arc::new(move |uid| uid == 0 || ignore.contains(&uid)),
                crate::held::Budget::default(),
            );
            // Each scan may settle looks after releases: the watcher looks.
            let ending = Arc::clone(&ending);
            scanner.on_scan(move || {
                ending.ask();
            });
            scanner
        };
        let daemon = Daemon {
            mps: crate::mps::Mps::new(&config.node.mps),
            inventory: devices.into_iter().map(|d| (d.uuid.clone(), d)).collect(),
            last_discovered,
            config,
            store: Mutex::new(store),
            policy,
            enforcer,
            operators,
            cgroups: Arc::new(DeviceCgroups::off("cderd --check does not touch cgroups")),
            shared_files: SharedFile::of_types(&config_cders),
            groups: Arc::default(),
            ending,
            scanner,
            looks: Mutex::default(),
            late: Arc::default(),
            warmup: MigrationWarmup::off(),
            background: Background::start(),
            intake: Intake::default(),
            files_seen: Mutex::default(),
            usage_rules: UsageRules::from_config(&config_usage),
            latest: Mutex::new(Vec::new()),
            node_drain,
        };
        daemon.drain_vanished_files(&mut daemon.store()).map_err(|e| StartError::Store(StoreError::Refused(e)))?;
        Ok(daemon)
    }

    /// The configuration the daemon runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        // A panic while holding the lock rolled its transaction back (the
        // Transaction drop does), so the store is still consistent.
        self.store.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn reassert_enforcement(&self) -> Result<(), StartError> {
        let store = self.store();
        let devices = store.devices()?;
        // Shared devices and their MPS directories, enforced or not.
        for d in devices.iter().filter(|d| d.present && d.uid.is_none()) {
            if let Err(e) = self.open_to_sharers(&store, std::slice::from_ref(d)) {
                tracing::error!(device = %d.name(), "re-opening a shared device to its sharers: {e}");
            }
        }
        self.open_shared_files(&store);
        if !self.enforcer.is_active() {
            return Ok(());
        }
        for d in devices.iter().filter(|d| d.present) {
            match d.uid {
                Some(uid) => {
                    if let Err(e) = self.enforcer.apply(uid, std::slice::from_ref(d)) {
                        tracing::error!(device = %d.name(), "re-applying enforcement: {e}");
                    }
                }
                None if d.shared > 0 => {}
                None => {
                    for e in self.enforcer.restore(std::slice::from_ref(d)) {
                        tracing::error!(device = %d.name(), "restoring idle ownership: {e}");
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether `uid` may alloc, release, drain, resume and reconcile.
    pub fn is_operator(&self, uid: u32) -> bool {
        uid == 0 || self.operators.contains(&uid)
    }

    /// Answers one request: the result value or the error to send.
    pub fn handle(&self, caller: Caller, request: &Request) -> Result<Value, ErrorReply> {
        if request.needs_operator() && !self.is_operator(caller.uid) {
            return Err(ErrorReply::new(
                ErrorCode::PermissionDenied,
                format!(
                    "{} is only for root and the operators in [node] operators; uid {} is neither",
                    request.op(),
                    caller.uid
                ),
            ));
        }
        match request {
            Request::Ping => {
                Ok(to_value(&Pong { version: env!("CARGO_PKG_VERSION").into(), protocol: PROTOCOL_VERSION }))
            }
            Request::Alloc(r) => self.alloc(r).map(|a| to_value(&a)),
            Request::Release(r) => {
                self.release(&r.job).map(|n| to_value(&Released { job: r.job.clone(), released: n }))
            }
            Request::Env(r) => self.env_after(caller, r, None).map(|a| to_value(&a)),
            Request::Status => {
                // A device kept out after a release shows why only while it
                // still is: a look, waited for briefly and off the lock.
                self.recheck_soon(crate::ending::RECHECK_WAITS);
                let mut store = self.store();
                self.drain_vanished_files(&mut store)?;
                drop(store);
                let status = self.status()?;
                Ok(to_value(&if self.is_operator(caller.uid) { status } else { own_only(status, caller.uid) }))
            }
            Request::Drain(r) => self.set_drained(&r.device, Some(&r.reason)),
            Request::Resume(r) => self.set_drained(&r.device, None),
            Request::Reconcile(r) => self.reconcile(r).map(|r| to_value(&r)),
            Request::Accounting(r) => self.accounting(caller, r).map(|a| to_value(&a)),
            Request::Confine(r) => self.confine(caller, &r.job).map(|c| to_value(&c)),
            Request::Usage(r) => self.usage(caller, r).map(|u| to_value(&u)),
        }
    }

    /// A connection was accepted; its place in the arrival order for
    /// [`Daemon::handle_arrival`] (the server calls [`Daemon::arrival_read`]
    /// when the connection ends, whatever it sent).
    pub fn arrived(&self) -> u64 {
        self.intake.arrived()
    }

    /// The connection `seq` has sent its first request, or ended.
    pub fn arrival_read(&self, seq: u64) {
        self.intake.read(seq);
    }

    /// [`Daemon::handle`] for a request read from connection `seq` (see
    /// [`crate::intake`]): an operator's `alloc` is known to be pending
    /// before the connection counts as read, and an `env` for a job with no
    /// record waits for the connections accepted before its own, and for
    /// their `alloc`s to end.
    pub fn handle_arrival(&self, caller: Caller, request: &Request, seq: u64) -> Result<Value, ErrorReply> {
        if let Request::Alloc(r) = request {
            if self.is_operator(caller.uid) {
                self.intake.pending(&r.job, std::time::Instant::now() + alloc_wait(r) + ALLOC_SETTLES_WITHIN);
            }
        }
        self.intake.read(seq);
        match request {
            Request::Env(r) => self.env_after(caller, r, Some(seq)).map(|a| to_value(&a)),
            _ => self.handle(caller, request),
        }
    }

    /// `env`, for a job whose `alloc` may still be on its way in: waits for
    /// the connections accepted before `seq` (if given) and for the job's
    /// pending `alloc`; a refused one is reported with its reason to the
    /// job's uid and operators.
    pub fn env_after(&self, caller: Caller, request: &EnvRequest, seq: Option<u64>) -> Result<Allocation, ErrorReply> {
        let job = &request.job;
        match self.env_for(caller, request) {
            Err(e) if e.code == ErrorCode::UnknownJob => {}
            other => return other,
        }
        if let Some(seq) = seq {
            self.intake.wait_older_arrivals(seq);
        }
        match self.intake.settle(job) {
            Some(Record::Refused { uid, reply }) if uid == caller.uid || self.is_operator(caller.uid) => {
                // A later alloc may have been committed since.
                match self.env_for(caller, request) {
                    Err(e) if e.code == ErrorCode::UnknownJob => Err(ErrorReply::new(
                        ErrorCode::UnknownJob,
                        format!(
                            "job {job} holds no allocation on this node: {}{}",
                            cder_protocol::REFUSED_TO_RECORD,
                            reply.message
                        ),
                    )),
                    other => other,
                }
            }
            // Committed meanwhile (a record leaves the intake only after its
            // commit), or never asked for.
            _ => self.env_for(caller, request),
        }
    }

    fn allocation(&self, a: &JobAllocation) -> Allocation {
        let devices: Vec<Device> = a
            .devices
            .iter()
            .map(|d| {
                let known = self.inventory.get(&d.uuid).or_else(|| self.last_discovered.get(&d.uuid));
                known.cloned().unwrap_or_else(|| device_from_row(d))
            })
            .collect();
        Allocation {
            job: a.job.clone(),
            uid: a.uid,
            devices: a
                .devices
                .iter()
                .map(|d| AllocatedDevice {
                    cder_type: d.cder_type.clone(),
                    index: d.index,
                    uuid: d.uuid.clone(),
                    path: Some(d.path.display().to_string()),
                })
                .collect(),
            env: self.with_mps(JobEnvironment::for_devices(&self.config.cders, &devices), a),
            cgroups: None,
            device_cgroup: None,
            shares: a.shares,
        }
    }

    /// `env` with the MPS variables of a sharer's GPU (none otherwise).
    fn with_mps(&self, mut env: JobEnvironment, a: &JobAllocation) -> JobEnvironment {
        let (Some(mps), Some(shares)) = (&self.mps, a.shares) else { return env };
        let total = self.config.node.sharing.shares_per_gpu;
        // A job's shares come from one GPU (SLURM takes them so).
        if let Some(d) = a.devices.first() {
            env.0.extend(mps.job_env(&d.uuid, shares, total, d.memory_mib));
        }
        env
    }

    /// The environment of `reply`'s devices, narrowed to `step` (indices of
    /// the default type), numbered for `cgroup`.
    fn step_environment(&self, reply: &Allocation, step: Option<&[u32]>, cgroup: DeviceCgroup) -> JobEnvironment {
        // Numbered as the runtimes number them (discovery's index now),
        // chosen by the ledger's index (the step's list).
        let runtime_index = |d: &AllocatedDevice| self.inventory.get(&d.uuid).map_or(d.index, |i| i.index);
        let held: Vec<HeldDevice<'_>> = reply
            .devices
            .iter()
            .map(|d| HeldDevice { cder_type: &d.cder_type, index: runtime_index(d), uuid: &d.uuid })
            .collect();
        let visible: Vec<HeldDevice<'_>> = reply
            .devices
            .iter()
            .zip(&held)
            .filter(|(d, _)| match step {
                Some(list) if d.cder_type == cder_protocol::DEFAULT_TYPE => list.contains(&d.index),
                _ => true,
            })
            .map(|(_, h)| *h)
            .collect();
        let mut env = JobEnvironment::for_step(&self.config.cders, &held, &visible, cgroup);
        env.0.extend(
            reply.env.0.iter().filter(|(k, _)| k.starts_with("CUDA_MPS_")).map(|(k, v)| (k.clone(), v.clone())),
        );
        env
    }

    /// `alloc`: idempotent per job; enforced after commit, undone if
    /// enforcement fails. A conflict (another job still holds the devices)
    /// is retried after each release for up to the request's `wait_ms`. The
    /// outcome is left in the intake for a later `env` to explain.
    pub fn alloc(&self, request: &AllocRequest) -> Result<Allocation, ErrorReply> {
        let until = std::time::Instant::now() + alloc_wait(request);
        // Settles the record as refused if the attempt panics.
        let mut settle = Settle { intake: &self.intake, job: &request.job, uid: request.uid, done: false };
        let result = loop {
            let releases = self.intake.releases();
            match self.alloc_now(request) {
                Err(e) if e.code == ErrorCode::Conflict && std::time::Instant::now() < until => {
                    tracing::debug!(job = %request.job, "alloc waits out a conflict: {}", e.message);
                    // A device kept out after a release comes back when its
                    // holder is gone, which no release announces: look again soon.
                    let kept_out = self.store().leftovers().is_ok_and(|l| !l.is_empty());
                    let wake = if kept_out { until.min(std::time::Instant::now() + LEFTOVER_POLL) } else { until };
                    self.intake.wait_release(releases, wake);
                }
                other => break other,
            }
        };
        if let Err(e) = &result {
            tracing::warn!(job = %request.job, uid = request.uid, code = e.code.as_str(), "alloc refused: {}", e.message);
        }
        self.intake.settled(&request.job, request.uid, result.as_ref().err());
        settle.done = true;
        result
    }

    fn alloc_now(&self, request: &AllocRequest) -> Result<Allocation, ErrorReply> {
        if self.config.cder(&request.cder_type).is_none() {
            return Err(ErrorReply::new(
                ErrorCode::UnknownDevice,
                format!(
                    "type {:?} is not configured on this node (configured: {})",
                    request.cder_type,
                    self.type_list()
                ),
            ));
        }
        let started = std::time::Instant::now();
        // The /proc scan costs a walk of every descriptor on the node: only
        // for a job that holds nothing yet (a retried prologue skips it), and
        // only where cderd chooses. A list from the batch system is
        // recorded whoever holds its devices open, so for it the scan only
        // feeds a warning, which a thread logs after the reply. The scan
        // reads what users' processes hold: never under the lock.
        let explicit = request.devices.is_some() || request.device_files.is_some();
        // Devices kept out after a release may be back: a look, off the lock.
        if self.store().leftovers().is_ok_and(|l| !l.is_empty()) {
            self.recheck_soon(crate::ending::RECHECK_WAITS);
        }
        let free = {
            let store = self.store();
            if explicit || store.job(&request.job).map_err(|e| store.reply(e))?.is_some() {
                None
            } else {
                let devices = store.devices().map_err(|e| store.reply(e))?;
                Some(devices.into_iter().filter(LedgerRow::is_free).collect::<Vec<_>>())
            }
        };
        let busy = free.map(|free| self.held_open(free)).unwrap_or_default();
        let scanned = started.elapsed();
        let mut store = self.store();
        self.drain_vanished_files(&mut store)?;
        let by_file;
        let request = match &request.device_files {
            None => request,
            Some(files) => {
                let devices = store.devices().map_err(|e| store.reply(e))?;
                by_file = AllocRequest {
                    devices: Some(indices_at(&devices, &request.cder_type, files)?),
                    device_files: None,
                    ..request.clone()
                };
                &by_file
            }
        };
        // Only where cderd chooses: a list from the batch system is its
        // decision (Trust), and the holder may be the job itself.
        let skip = self.config.node.enforcement.held_open == HeldOpen::Skip && request.devices.is_none();
        if skip {
            for (uuid, why) in &busy {
                tracing::warn!(device = %uuid, job = %request.job, "not choosing a free device: {why}");
            }
        }
        let avoid = if skip { busy.clone() } else { BTreeMap::new() };
        let (allocation, new) =
            store.alloc_avoiding(request, self.policy.as_ref(), now(), &avoid).map_err(|e| store.reply(e))?;
        let committed = started.elapsed();
        if new {
            // Only a choice of cderd's gets here (busy is empty for a list
            // from the batch system, which warn_held_open_later covers).
            for d in allocation.devices.iter().filter(|d| busy.contains_key(&d.uuid)) {
                tracing::warn!(
                    device = %d.name(),
                    job = %allocation.job,
                    "handing out a device that {} ([node.enforcement] held_open = \"allow\"): that process can use it beside the job",
                    busy[&d.uuid]
                );
            }
        }
        if new {
            let applied = match allocation.shares {
                // Several uids open a shared device: no one owns it, and its
                // compute mode stays DEFAULT.
                Some(_) => self.open_to_sharers(&store, &allocation.devices),
                None => self.enforcer.apply(allocation.uid, &allocation.devices).map_err(|e| e.to_string()),
            };
            if let Err(e) = applied {
                tracing::error!(job = %allocation.job, "enforcement failed, undoing the allocation: {e}");
                let released = store.release(&allocation.job, now()).map_err(|e| store.reply(e))?;
                let idle: Vec<LedgerRow> = released.iter().filter(|d| d.shared == 0).cloned().collect();
                for e in self.enforcer.restore(&idle) {
                    tracing::error!(job = %allocation.job, "restoring after failed enforcement: {e}");
                }
                if let Err(e) = self.open_to_sharers(&store, &released) {
                    tracing::error!(job = %allocation.job, "re-opening shared devices to their sharers: {e}");
                }
                self.open_shared_files(&store);
                return Err(ErrorReply::new(
                    ErrorCode::Internal,
                    format!("enforcement failed, allocation undone: {e}"),
                ));
            }
            if allocation.shares.is_some() && self.mps.is_some() {
                let uuids: Vec<String> = allocation.devices.iter().map(|d| d.uuid.clone()).collect();
                drop(store);
                if let Err(e) = self.mps_admit(&allocation.job, allocation.uid, &uuids) {
                    let mut store = self.store();
                    let released = store.release(&allocation.job, now()).map_err(|e| store.reply(e))?;
                    let idle: Vec<LedgerRow> = released.iter().filter(|d| d.shared == 0).cloned().collect();
                    for e in self.enforcer.restore(&idle) {
                        tracing::error!(job = %allocation.job, "restoring after an undone share: {e}");
                    }
                    if let Err(e) = self.open_to_sharers(&store, &released) {
                        tracing::error!(job = %allocation.job, "re-opening shared devices to their sharers: {e}");
                    }
                    self.open_shared_files(&store);
                    drop(store);
                    for uuid in &uuids {
                        if let Err(m) = self.mps_settle(uuid) {
                            tracing::error!(job = %allocation.job, "MPS after an undone share: {m}");
                        }
                    }
                    return Err(ErrorReply::new(e.code, format!("{}; allocation undone", e.message)));
                }
                store = self.store();
            }
            self.open_shared_files(&store);
            let indices: Vec<String> = allocation.devices.iter().map(LedgerRow::name).collect();
            tracing::info!(job = %allocation.job, uid = allocation.uid, token = %allocation.token, devices = %indices.join(","), "allocated");
            if !allocation.batch_confined {
                self.prepare_groups_later(&store, &allocation)?;
            }
            // The job's tasks are moved into cgroups next (cderd's, or the
            // batch system's own): wait out the grace period now.
            self.warmup.warm();
            if explicit {
                self.warn_held_open_later(&allocation);
            }
        }
        // Where a job's start time goes, for an admin measuring it.
        tracing::debug!(
            job = %allocation.job,
            held_open_scan_us = scanned.as_micros() as u64,
            commit_us = committed.saturating_sub(scanned).as_micros() as u64,
            enforce_us = started.elapsed().saturating_sub(committed).as_micros() as u64,
            "alloc timing"
        );
        Ok(self.allocation(&allocation))
    }

    /// `release`: idempotent; the number of devices freed. What is left of
    /// the job is ended first, off the lock and waited for at most
    /// [`crate::ending::RELEASE_WAITS`]: its processes in its device
    /// cgroups, and any process the last scan saw holding one of its
    /// devices that may not hold it now. A device is kept out of the pool
    /// only for something found that SIGKILL has not ended (see
    /// [`Daemon::end_job`]); a look at the whole node follows, off every
    /// request's path (see [`AfterRelease`]).
    pub fn release(&self, job: &JobKey) -> Result<u32, ErrorReply> {
        let allocation = {
            let store = self.store();
            store.job(job).map_err(|e| store.reply(e))?
        };
        let (held, ended) = allocation.as_ref().map(|a| self.end_job(a)).unwrap_or_default();
        for (device, reason) in &held {
            tracing::error!(device = %device, "{reason}");
        }
        let released = self.release_ended(job, allocation.as_ref(), &held, &ended)?;
        if !released.is_empty() {
            tracing::info!(job = %job, devices = released.len(), "released");
        }
        Ok(released.len() as u32)
    }

    /// Ends `allocation` in the ledger, keeping `held` (UUID → why) out of
    /// the pool and recording the processes outside the job that `ended`
    /// names, unless the job's record changed since `allocation` was read
    /// (another request released it): then nothing is done. Each released
    /// device gets a look at the whole node after it.
    fn release_ended(
        &self,
        job: &JobKey,
        allocation: Option<&JobAllocation>,
        held: &BTreeMap<String, String>,
        ended: &[crate::ending::Ended],
    ) -> Result<Vec<LedgerRow>, ErrorReply> {
        let mut store = self.store();
        let now_held = store.job(job).map_err(|e| store.reply(e))?;
        if now_held.as_ref().map(|a| &a.token) != allocation.map(|a| &a.token) {
            return Ok(Vec::new());
        }
        let released_at = now();
        let released = store.release_keeping(job, released_at, held).map_err(|e| store.reply(e))?;
        self.drain_vanished_files(&mut store)?;
        // A shared device goes back to idle when its last sharer leaves.
        let idle: Vec<LedgerRow> = released.iter().filter(|d| d.shared == 0).cloned().collect();
        for e in self.enforcer.restore(&idle) {
            tracing::error!(job = %job, "restoring idle ownership: {e}");
        }
        // The other sharers keep their access; this job's uid leaves the ACLs.
        if let Err(e) = self.open_to_sharers(&store, &released) {
            tracing::error!(job = %job, "re-opening shared devices to their sharers: {e}");
        }
        self.open_shared_files(&store);
        drop(store);
        if let Some(a) = allocation {
            let (by_rdev, _) = targets_of(&a.devices);
            let devices: Vec<(String, u64)> =
                by_rdev.iter().flat_map(|(rdev, rows)| rows.iter().map(|d| (d.uuid.clone(), *rdev))).collect();
            self.record_ended(job, &a.token, &devices, ended, released_at);
            self.look_after_release(job, &a.token, &devices, released_at);
        }
        self.mps_after_release(job, allocation, &released);
        if let Some(a) = allocation {
            // Groups still holding processes stay; the look that finds them
            // empty removes them.
            self.remove_groups(job, &a.token);
        }
        self.intake.released(Some(job));
        Ok(released)
    }

    /// Asks for a look at the whole node for `devices` (UUID, number) of
    /// `job`'s allocation `token`, released at `released`.
    fn look_after_release(&self, job: &JobKey, token: &str, devices: &[(String, u64)], released: i64) {
        // MUTATION ignore-holders (test builds only): no look for holders after a release.
        if cder_model::mutation::on("ignore-holders") {
            return;
        }
        if devices.is_empty() {
            return;
        }
        let since = std::time::Instant::now();
        {
            let mut looks = self.looks.lock().unwrap_or_else(|p| p.into_inner());
            for (device, rdev) in devices {
                looks.push(AfterRelease {
                    job: job.clone(),
                    token: token.to_string(),
                    device: device.clone(),
                    rdev: *rdev,
                    released,
                    since,
                    warned: false,
                });
            }
        }
        self.scanner.ask();
    }

    /// Records and logs each process of `ended` (found outside allocation
    /// `token` of `job` holding one of `devices`): its use counts for the
    /// job from `start` until it was seen gone.
    fn record_ended(
        &self,
        job: &JobKey,
        token: &str,
        devices: &[(String, u64)],
        ended: &[crate::ending::Ended],
        start: i64,
    ) {
        if ended.is_empty() {
            return;
        }
        let at = now();
        let mut store = self.store();
        for e in ended {
            for (device, _) in devices.iter().filter(|(_, rdev)| e.rdevs.contains(rdev)) {
                let h = &e.holder;
                if e.gone {
                    tracing::error!(
                        device = %device, job = %job, pid = h.pid, uid = h.uid, command = %h.comm, exe = %e.exe,
                        "ended {e}: it held the device after job {job} released it (a descriptor outside the job); its use is counted for {job}"
                    );
                } else {
                    tracing::error!(
                        device = %device, job = %job, pid = h.pid, uid = h.uid, command = %h.comm, exe = %e.exe,
                        "{e} holds the device after job {job} released it and SIGKILL has not ended it yet; its use is counted for {job} until it ends"
                    );
                }
                let recorded = store.record_outside_use(
                    token,
                    device,
                    h.pid,
                    h.uid,
                    &h.comm,
                    h.start_ticks,
                    start,
                    e.gone.then_some(at),
                );
                if let Err(e) = recorded {
                    tracing::error!(device = %device, job = %job, "recording a use outside the job: {e}");
                }
            }
        }
    }

    /// The processes the latest scan saw holding one of `devices` that may
    /// not hold it (see [`is_rightful`]), leaving out the allocation `token`
    /// (being released): candidates to end, each looked at again first.
    fn known_outsiders(&self, devices: &[LedgerRow], token: &str) -> Vec<crate::held::Holder> {
        // MUTATION ignore-holders (test builds only): release as if no process held a device.
        if cder_model::mutation::on("ignore-holders") {
            return Vec::new();
        }
        let Some(scan) = self.scanner.latest() else { return Vec::new() };
        let (by_rdev, _) = targets_of(devices);
        let mut out = Vec::new();
        for (rdev, rows) in &by_rdev {
            let holders = scan.holders_of(*rdev);
            if holders.is_empty() {
                continue;
            }
            let mut rights = Vec::new();
            {
                let store = self.store();
                for d in rows {
                    rights.extend(store.rightful(&d.uuid).unwrap_or_default());
                }
            }
            rights.retain(|r| r.token != token);
            out.extend(holders.iter().filter(|h| !is_rightful(h, &rights)).cloned());
        }
        out
    }

    /// Ends what is left of `allocation`'s job before its devices go back:
    /// every process in its device cgroups, whatever `held_open` says, and
    /// every process the last scan saw holding one of its devices that may
    /// not hold it after this release (another user's, a process outside
    /// the job that got a descriptor passed; the other sharers of a shared
    /// GPU may). Returns the devices to keep out of the pool, UUID → why:
    /// only for something found that has not ended. All of it runs off the
    /// ledger lock, on a thread (started only when something was found)
    /// waited for at most [`crate::ending::RELEASE_WAITS`]: past that (a
    /// process in uninterruptible sleep), the devices stay out and the
    /// watcher settles them once the thread is done.
    fn end_job(&self, allocation: &JobAllocation) -> (BTreeMap<String, String>, Vec<crate::ending::Ended>) {
        let name = DeviceCgroups::group_name(&allocation.job, &allocation.token);
        let candidates = self.known_outsiders(&allocation.devices, &allocation.token);
        let in_groups = self.cgroups.is_available() && self.cgroups.has_processes(&name);
        if !in_groups && candidates.is_empty() {
            return Default::default();
        }
        let job = allocation.job.clone();
        let what = {
            let mut what = Vec::new();
            if in_groups {
                what.push("its processes in its device cgroups".to_string());
            }
            if !candidates.is_empty() {
                what.push(describe_holders(&candidates));
            }
            what.join(" and ")
        };
        let pending = || {
            let reason =
                format!("released by job {job}, but {what}: still being ended; kept out of the pool until that ends");
            allocation.devices.iter().map(|d| (d.uuid.clone(), reason.clone())).collect::<BTreeMap<_, _>>()
        };
        let Some(claim) = self.ending.claim(&name) else { return (pending(), Vec::new()) };
        let (by_rdev, targets) = targets_of(&allocation.devices);
        let devices: Vec<(String, u64)> =
            by_rdev.iter().flat_map(|(rdev, rows)| rows.iter().map(|d| (d.uuid.clone(), *rdev))).collect();
        let rdevs = targets.rdevs;
        let (cgroups, proc_root) = (Arc::clone(&self.cgroups), self.scanner.proc_root().to_path_buf());
        let work = move || {
            let survivors = if in_groups { cgroups.end_processes(&name) } else { Vec::new() };
            let deadline = std::time::Instant::now() + crate::ending::KILL_WAITS;
            let ended = crate::ending::end_holders(&proc_root, &candidates, &rdevs, deadline);
            drop(claim);
            (survivors, ended)
        };
        // Overran: the watcher records what it ended and looks again.
        let (late, ending, token, late_job) =
            (Arc::clone(&self.late), Arc::clone(&self.ending), allocation.token.clone(), allocation.job.clone());
        let late_devices = devices.clone();
        let released = now();
        let overran = move |(_, ended): (Vec<u32>, Vec<crate::ending::Ended>)| {
            late.lock().unwrap_or_else(|p| p.into_inner()).push(LateEnd {
                job: late_job,
                token,
                devices: late_devices,
                ended,
                released,
            });
            ending.ask();
        };
        match crate::ending::within("end-job", crate::ending::RELEASE_WAITS, work, overran) {
            Some((survivors, ended)) => (kept_out(&allocation.job, &devices, &survivors, &ended), ended),
            None => (pending(), Vec::new()),
        }
    }

    /// Starts the thread that drains this node in the batch system while a
    /// device is kept out of the pool, and returns it once every device is
    /// back (`[node.batch]`, see [`crate::node_drain`]).
    pub fn watch_node_drain(daemon: &Arc<Daemon>) {
        let reader = Arc::clone(daemon);
        crate::node_drain::spawn(Arc::clone(&daemon.node_drain), move || {
            reader.kept_out_devices().map_err(|e| e.message)
        });
    }

    /// The node's drain in the batch system (`[node.batch]`).
    pub fn node_drain(&self) -> &crate::node_drain::NodeDrain {
        &self.node_drain
    }

    /// The devices kept out of the pool with no job on them now, as the
    /// batch system's drain reason names them (read under the ledger lock).
    pub fn kept_out_devices(&self) -> Result<Vec<crate::node_drain::KeptOut>, ErrorReply> {
        let (devices, leftovers) = {
            let store = self.store();
            (store.devices().map_err(|e| store.reply(e))?, store.leftovers().map_err(|e| store.reply(e))?)
        };
        Ok(crate::node_drain::kept_out(&devices, &leftovers))
    }

    /// Starts a thread that looks again every `period` at the devices kept
    /// out after a release (and whenever a request asks, or a scan ends),
    /// so that one goes back to the pool soon after its holder is gone,
    /// and settles the looks asked for after releases.
    pub fn watch_leftovers(daemon: &Arc<Daemon>, period: std::time::Duration) {
        let daemon = Arc::clone(daemon);
        daemon.ending.watched();
        let spawned = std::thread::Builder::new().name("cderd-leftovers".into()).spawn(move || loop {
            let ticket = daemon.ending.next(period);
            if let Err(e) = daemon.recheck_leftovers() {
                tracing::warn!("looking again at devices kept out after a release: {}", e.message);
            }
            daemon.settle_looks();
            daemon.ending.done(ticket);
        });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the thread that looks again at devices kept out after a release: {e}");
        }
    }

    /// A look at the devices kept out after a release, waited for at most
    /// `wait`: by the watcher thread, or here when none runs. Never call it
    /// holding the store's lock.
    fn recheck_soon(&self, wait: std::time::Duration) {
        if self.ending.is_watched() {
            let ticket = self.ending.ask();
            if !wait.is_zero() {
                self.ending.wait(ticket, wait);
            }
        } else {
            if let Err(e) = self.recheck_leftovers() {
                tracing::warn!("looking again at devices kept out after a release: {}", e.message);
            }
            self.settle_looks();
        }
    }

    /// The looks asked for after releases, with the latest scan: each
    /// process it found holding a released device that may not hold it
    /// (see [`is_rightful`]) is ended, logged and its use counted for the
    /// job the device came from; a free device whose holder SIGKILL has not
    /// ended is kept out. A look is done once a finished round that
    /// started after the release covers it; otherwise another scan is
    /// asked for. Runs off the ledger lock but for the ledger's reads and
    /// writes.
    fn settle_looks(&self) {
        let pending: Vec<AfterRelease> = self.looks.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if pending.is_empty() {
            return;
        }
        let Some(scan) = self.scanner.latest() else {
            self.scanner.ask();
            return;
        };
        let mut done = Vec::new();
        for look in pending.iter().filter(|l| scan.started >= l.since) {
            let holders = scan.holders_of(look.rdev);
            if !holders.is_empty() {
                let rights = {
                    let store = self.store();
                    store.rightful(&look.device).unwrap_or_default()
                };
                let outsiders: Vec<crate::held::Holder> =
                    holders.iter().filter(|h| !is_rightful(h, &rights)).cloned().collect();
                if !outsiders.is_empty() {
                    let deadline = std::time::Instant::now() + crate::ending::KILL_WAITS;
                    let ended =
                        crate::ending::end_holders(self.scanner.proc_root(), &outsiders, &[look.rdev].into(), deadline);
                    let devices = [(look.device.clone(), look.rdev)];
                    self.record_ended(&look.job, &look.token, &devices, &ended, look.released);
                    let alive: Vec<crate::held::Holder> =
                        ended.iter().filter(|e| !e.gone).map(|e| e.holder.clone()).collect();
                    if !alive.is_empty() {
                        let reason = format!(
                            "released by job {}, but {}, which SIGKILL has not ended; kept out of the pool until that ends",
                            look.job,
                            describe_holders(&alive)
                        );
                        let mut store = self.store();
                        match store.keep_out(&look.device, &look.job, &look.token, &reason, now()) {
                            Ok(true) => tracing::error!(device = %look.device, "{reason}"),
                            Ok(false) => {}
                            Err(e) => tracing::error!(device = %look.device, "keeping a device out of the pool: {e}"),
                        }
                    }
                }
            }
            if scan.covers(look.since) {
                done.push((look.token.clone(), look.device.clone()));
            }
        }
        let mut looks = self.looks.lock().unwrap_or_else(|p| p.into_inner());
        looks.retain(|l| !done.iter().any(|(t, d)| *t == l.token && *d == l.device));
        for l in looks.iter_mut().filter(|l| !l.warned && l.since.elapsed() > LOOK_TAKES_LONG) {
            l.warned = true;
            tracing::warn!(
                device = %l.device,
                job = %l.job,
                "the look at the node after job {}'s release has not covered every process yet (each scan's budget ran out); the device is in the pool meanwhile, and the look goes on",
                l.job
            );
        }
        if !looks.is_empty() {
            self.scanner.ask();
        }
    }

    /// Looks again at the devices kept out after a release, and puts back
    /// in the pool each whose job has nothing left on it; ends and removes
    /// the device cgroups of jobs released earlier. Looks again at each
    /// process recorded outside its job holding a released device (one
    /// `statx`; SIGKILL again while it holds it). Off the ledger lock but
    /// for reading and writing the ledger itself.
    fn recheck_leftovers(&self) -> Result<(), ErrorReply> {
        // What end-job threads ended after their release had answered.
        let late: Vec<LateEnd> = std::mem::take(&mut *self.late.lock().unwrap_or_else(|p| p.into_inner()));
        for l in &late {
            self.record_ended(&l.job, &l.token, &l.devices, &l.ended, l.released);
        }
        // The groups first: each one seen belongs to a job recorded before
        // the ledger is read below, so a job starting now is never swept.
        let groups = if self.cgroups.is_available() { self.cgroups.group_names() } else { BTreeSet::new() };
        let (leftovers, devices, live, outside) = {
            let store = self.store();
            let leftovers = store.leftovers().map_err(|e| store.reply(e))?;
            let devices = store.devices().map_err(|e| store.reply(e))?;
            let live: BTreeSet<String> = store
                .live_allocations()
                .map_err(|e| store.reply(e))?
                .iter()
                .map(|(job, _, token)| DeviceCgroups::group_name(job, token))
                .collect();
            let outside = store.open_outside_use().map_err(|e| store.reply(e))?;
            (leftovers, devices, live, outside)
        };
        // Processes outside their job that held a released device, ended
        // once already: a process still there is asleep in the kernel past
        // SIGKILL (it cannot close a descriptor either); SIGKILL again.
        let (by_rdev, _) = targets_of(&devices);
        let rdev_of: BTreeMap<&str, u64> =
            by_rdev.iter().flat_map(|(rdev, rows)| rows.iter().map(move |d| (d.uuid.as_str(), *rdev))).collect();
        let proc_root = self.scanner.proc_root();
        let mut still: BTreeMap<String, Vec<crate::held::Holder>> = BTreeMap::new();
        for o in &outside {
            let pidfd = i32::try_from(o.pid).ok().and_then(|p| crate::sys::pidfd_open(p).ok());
            // Checked with the pidfd open: the pidfd is this process's.
            if crate::held::runs(proc_root, o.pid, o.started) {
                if let Some(fd) = &pidfd {
                    let _ = crate::sys::pidfd_kill(fd);
                }
                still.entry(o.device.clone()).or_default().push(crate::held::Holder {
                    pid: o.pid,
                    uid: o.uid,
                    comm: o.comm.clone(),
                    start_ticks: o.started,
                    at: BTreeMap::new(),
                });
                continue;
            }
            let mut store = self.store();
            store.close_outside_use(o.id, now()).map_err(|e| store.reply(e))?;
            tracing::info!(device = %o.device, job = %o.job, pid = o.pid, "the process outside job {} that held the device is gone", o.job);
        }
        let mut by_job: BTreeMap<String, Vec<&crate::store::Leftover>> = BTreeMap::new();
        for l in &leftovers {
            by_job.entry(DeviceCgroups::group_name(&l.job, &l.token)).or_default().push(l);
        }
        let mut back = 0;
        for (name, group) in &by_job {
            let Some(_claim) = self.ending.claim(name) else { continue };
            let job = &group[0].job;
            let survivors = if self.cgroups.is_available() { self.cgroups.end_processes(name) } else { Vec::new() };
            let mut store = self.store();
            let now_kept = store.leftovers().map_err(|e| store.reply(e))?;
            for l in group {
                // Still kept out for this job (not settled by another look).
                let Some(current) = now_kept.iter().find(|c| c.device == l.device && c.token == l.token) else {
                    continue;
                };
                let mut why = Vec::new();
                if !survivors.is_empty() {
                    let pids: Vec<String> = survivors.iter().take(5).map(ToString::to_string).collect();
                    why.push(format!("pid {} stayed in its device cgroups after SIGKILL", pids.join(", ")));
                }
                if let Some(h) = still.get(&l.device) {
                    why.push(format!("{}, which SIGKILL has not ended", describe_holders(h)));
                }
                if why.is_empty() {
                    store.set_leftover(&l.device, None).map_err(|e| store.reply(e))?;
                    tracing::info!(device = %l.device, job = %job, "nothing found of the released job holds the device any more: back in the pool");
                    back += 1;
                    // A look at the whole node after it, as after a release.
                    if let Some(rdev) = rdev_of.get(l.device.as_str()) {
                        let devices = [(l.device.clone(), *rdev)];
                        drop(store);
                        self.look_after_release(job, &l.token, &devices, now());
                        store = self.store();
                    }
                    continue;
                }
                let reason =
                    format!("released by job {job}, but {}; kept out of the pool until that ends", why.join("; "));
                if reason != current.reason {
                    tracing::error!(device = %l.device, "{reason}");
                    store.set_leftover(&l.device, Some(&reason)).map_err(|e| store.reply(e))?;
                }
            }
            drop(store);
            if survivors.is_empty() && self.cgroups.is_available() {
                for e in self.cgroups.remove(name) {
                    tracing::warn!(job = %job, "removing a released job's device cgroup: {e}");
                }
            }
        }
        // Groups of jobs released earlier that still held processes then.
        for name in groups.iter().filter(|g| !live.contains(*g) && !by_job.contains_key(*g)) {
            let Some(_claim) = self.ending.claim(name) else { continue };
            let survivors = self.cgroups.end_processes(name);
            if !survivors.is_empty() {
                tracing::error!(group = %name, "processes of a released job stayed after SIGKILL: {survivors:?}");
            }
            for e in self.cgroups.remove(name) {
                tracing::warn!(group = %name, "a released job's device cgroup is still busy; it is looked at again: {e}");
            }
        }
        if back > 0 {
            self.intake.released(None);
        }
        Ok(())
    }

    /// Drains each present device whose file this process saw and that is
    /// gone now (removed under a running node): a job holding it keeps its
    /// record, and the device goes offline, not back to the pool, at release.
    fn drain_vanished_files(&self, store: &mut Store) -> Result<(), ErrorReply> {
        let devices = store.devices().map_err(|e| store.reply(e))?;
        let mut seen = self.files_seen.lock().unwrap_or_else(|p| p.into_inner());
        for d in devices.iter().filter(|d| d.present) {
            if std::fs::symlink_metadata(&d.path).is_ok() {
                seen.insert(d.uuid.clone());
                continue;
            }
            if d.drained || !seen.contains(&d.uuid) {
                continue;
            }
            let reason = format!("device file {} vanished", d.path.display());
            store.set_drained(&d.uuid, Some(&reason)).map_err(|e| store.reply(e))?;
            match &d.job {
                Some(job) => {
                    tracing::error!(device = %d.name(), job = %job, "{reason}: drained; the job keeps its record until release")
                }
                None => tracing::error!(device = %d.name(), "{reason}: drained, handed out to nobody"),
            }
        }
        Ok(())
    }

    /// `env` of the job's whole allocation in node indices: the job's own
    /// uid or an operator.
    pub fn env(&self, caller: Caller, job: &JobKey) -> Result<Allocation, ErrorReply> {
        self.env_for(caller, &EnvRequest::new(job.clone()))
    }

    /// `env`, numbered for the request's device cgroup and narrowed to its
    /// step's devices: the job's own uid or an operator.
    pub fn env_for(&self, caller: Caller, request: &EnvRequest) -> Result<Allocation, ErrorReply> {
        let job = &request.job;
        let store = self.store();
        let allocation = store.job(job).map_err(|e| store.reply(e))?;
        match allocation {
            Some(a) if a.uid == caller.uid || self.is_operator(caller.uid) => {
                // A step starts (slurmstepd asks, as root): its tasks'
                // `confine` follows. A user's own `env` calls do not keep
                // the node's fork path slow.
                let mut reply = self.allocation(&a);
                if self.is_operator(caller.uid) {
                    // SLURM's task/cgroup moves the step's tasks too, and
                    // gains as much from a warm lock.
                    self.warmup.warm();
                    // slurmstepd's tasks enter the groups themselves, as
                    // root, instead of asking `confine` each.
                    if self.cgroups.is_available() && !a.batch_confined {
                        reply.cgroups =
                            Some(self.ready_groups(&store, &a)?.iter().map(|p| p.display().to_string()).collect());
                    }
                }
                drop(store);
                // `confine` refuses where no device cgroup can be used, and
                // the job's own user where the batch system confines it:
                // those processes see every device, in node indices.
                let cgroup = match request.device_cgroup {
                    DeviceCgroup::Job if !self.cgroups.is_available() => DeviceCgroup::None,
                    DeviceCgroup::Job if a.batch_confined && !self.is_operator(caller.uid) => DeviceCgroup::None,
                    other => other,
                };
                if cgroup != DeviceCgroup::None || request.step_devices.is_some() {
                    reply.env = self.step_environment(&reply, request.step_devices.as_deref(), cgroup);
                    reply.device_cgroup = Some(cgroup);
                }
                Ok(reply)
            }
            Some(_) => Err(ErrorReply::new(
                ErrorCode::PermissionDenied,
                format!("job {job} does not belong to uid {}", caller.uid),
            )),
            None => Err(ErrorReply::new(ErrorCode::UnknownJob, format!("job {job} holds no allocation on this node"))),
        }
    }

    /// MPS after `job` released `released`: the other sharers' limits, or
    /// the GPU's control daemon stopped when it was the last.
    fn mps_after_release(&self, job: &JobKey, allocation: Option<&JobAllocation>, released: &[LedgerRow]) {
        if self.mps.is_none() || allocation.is_none_or(|a| a.shares.is_none()) {
            return;
        }
        for d in released {
            if let Err(m) = self.mps_settle(&d.uuid) {
                tracing::error!(job = %job, device = %d.uuid, "MPS after a release: {m}");
            }
        }
    }

    /// `status`: one snapshot, read under the lock, so it agrees with the database.
    pub fn status(&self) -> Result<Status, ErrorReply> {
        let store = self.store();
        let devices = store.devices().map_err(|e| store.reply(e))?;
        let generation = store.generation().map_err(|e| store.reply(e))?;
        let shares = store.shares().map_err(|e| store.reply(e))?;
        let share_totals: Vec<Option<u32>> = devices.iter().map(|d| store.share_total(d)).collect();
        drop(store);
        let mut counts: BTreeMap<String, TypeCounts> =
            self.config.cders.iter().map(|c| (c.name().to_string(), TypeCounts::default())).collect();
        for (d, share_total) in devices.iter().zip(&share_totals) {
            let c = counts.entry(d.cder_type.clone()).or_default();
            c.total += 1;
            match d.state() {
                DeviceState::Free => c.free += 1,
                DeviceState::Allocated => c.allocated += 1,
                DeviceState::Offline => c.offline += 1,
                DeviceState::Unhealthy => c.unhealthy += 1,
            }
            if let Some(total) = share_total.filter(|_| d.present) {
                c.shares_total += total;
                c.shares_used += d.shared;
                c.shares_per_device = c.shares_per_device.max(total);
                if d.healthy && !d.drained {
                    c.shares_free += total.saturating_sub(d.shared);
                }
            }
        }
        let shares = shares
            .into_iter()
            .map(|s| ShareStatus {
                cder_type: s.device.cder_type,
                index: s.device.index,
                uuid: s.device.uuid,
                job: s.job,
                uid: s.uid,
                shares: s.shares,
                total: s.total,
            })
            .collect();
        let idle = self.idle_devices()?;
        Ok(Status { devices: devices.iter().map(LedgerRow::status).collect(), counts, generation, idle, shares })
    }

    /// `usage`: per job and device, what the samples say; operators see
    /// every job, others their own.
    pub fn usage(&self, caller: Caller, request: &UsageRequest) -> Result<Usage, ErrorReply> {
        let uid = (!self.is_operator(caller.uid)).then_some(caller.uid);
        let job = request.job.as_ref();
        let store = self.store();
        let devices = store.usage(job, uid, request.since, now()).map_err(|e| store.reply(e))?;
        let recent = match request.recent {
            Some(n) if n > 0 => store.recent_samples(n, job, uid).map_err(|e| store.reply(e))?,
            _ => Vec::new(),
        };
        drop(store);
        let idle = self
            .idle_devices()?
            .into_iter()
            .filter(|d| uid.is_none_or(|u| d.uid == u) && job.is_none_or(|j| &d.job == j))
            .collect();
        let usage = &self.config.node.usage;
        Ok(Usage {
            devices,
            idle,
            recent,
            sample_period_s: usage.sample_period_s,
            active_threshold_percent: usage.active_threshold_percent,
        })
    }

    /// Running jobs' devices idle for `[node.usage] idle_after_s` or longer
    /// (none while sampling is off).
    pub fn idle_devices(&self) -> Result<Vec<IdleDevice>, ErrorReply> {
        let usage = &self.config.node.usage;
        if !usage.sample {
            return Ok(Vec::new());
        }
        let after_ms = (usage.idle_after_s * 1000.0).round() as i64;
        let store = self.store();
        store.idle(after_ms, now_ms()).map_err(|e| store.reply(e))
    }

    /// The devices running jobs hold, of types discovered through NVML or
    /// another vendor's library: what the usage sampler asks about.
    pub fn usage_targets(&self) -> Result<Vec<UsageTarget>, ErrorReply> {
        let store = self.store();
        let tokens: HashMap<JobKey, String> = store
            .live_allocations()
            .map_err(|e| store.reply(e))?
            .into_iter()
            .map(|(job, _, token)| (job, token))
            .collect();
        let devices = store.devices().map_err(|e| store.reply(e))?;
        let shares = store.shares().map_err(|e| store.reply(e))?;
        drop(store);
        // The types whose devices a library can say something about.
        let sampled = |t: &str| {
            self.config.cder(t).is_some_and(|c| {
                c.discovery == cder_model::Discovery::Nvml || cder_inventory::reads_devices(c.discovery)
            })
        };
        let whole = devices.into_iter().filter(|d| d.present && sampled(&d.cder_type)).filter_map(|d| {
            let job = d.job?;
            let token = tokens.get(&job)?.clone();
            Some(UsageTarget { job, token, uuid: d.uuid, cder_type: d.cder_type, shared: false })
        });
        let shared = shares.into_iter().filter(|s| s.device.present && sampled(&s.device.cder_type)).filter_map(|s| {
            let token = tokens.get(&s.job)?.clone();
            Some(UsageTarget { job: s.job, token, uuid: s.device.uuid, cder_type: s.device.cder_type, shared: true })
        });
        Ok(whole.chain(shared).collect())
    }

    /// Rolls one period's samples up durably (one transaction), and keeps
    /// them as the latest (see [`Daemon::latest_samples`]).
    pub fn record_usage(&self, observations: &[UsageObservation]) -> Result<usize, ErrorReply> {
        let recorded = {
            let mut store = self.store();
            store.record_usage(observations, &self.usage_rules).map_err(|e| store.reply(e))?
        };
        let latest = observations
            .iter()
            .map(|o| cder_protocol::UsageSample {
                at_ms: o.at_ms,
                job: o.job.clone(),
                uuid: o.uuid.clone(),
                utilisation_percent: o.utilisation,
                memory_mib: o.memory_mib,
                processes: o.processes.clone().unwrap_or_default(),
            })
            .collect();
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = latest;
        Ok(recorded)
    }

    /// The sampler's last period: one sample per device a running job held
    /// then (in memory, for gauges such as an OpenMetrics endpoint; the
    /// durable record is [`Daemon::usage`]).
    pub fn latest_samples(&self) -> Vec<cder_protocol::UsageSample> {
        self.latest.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_drained(&self, device: &str, reason: Option<&str>) -> Result<Value, ErrorReply> {
        let row = {
            let mut store = self.store();
            store.set_drained(device, reason).map_err(|e| store.reply(e))?
        };
        // A resumed device may end an `alloc`'s conflict.
        self.intake.released(None);
        match reason {
            Some(r) => tracing::warn!(device = %row.name(), reason = r, "drained"),
            None => tracing::info!(device = %row.name(), "resumed"),
        }
        Ok(to_value(&row.status()))
    }

    /// `reconcile`: frees every job (of the given batch system) not in the live list.
    pub fn reconcile(&self, request: &ReconcileRequest) -> Result<Reconciled, ErrorReply> {
        let live: BTreeSet<&JobKey> = request.live_jobs.iter().collect();
        let lrms = request.lrms.as_deref();
        let as_of = request.as_of;
        let store = self.store();
        // Newer than the caller's snapshot of live jobs: the snapshot
        // cannot know the job, so its absence there says nothing.
        let keep = |job: &JobKey, seq: u64| {
            as_of.is_some_and(|g| seq > g) || live.contains(job) || lrms.is_some_and(|l| job.lrms().as_str() != l)
        };
        let doomed: Vec<JobKey> = store
            .live_allocations()
            .map_err(|e| store.reply(e))?
            .into_iter()
            .filter(|(j, seq, _)| !keep(j, *seq))
            .map(|(j, _, _)| j)
            .collect();
        let mut allocations = Vec::new();
        for job in doomed {
            allocations.extend(store.job(&job).map_err(|e| store.reply(e))?);
        }
        drop(store);
        // Each job's leftovers are ended off the lock, as by its release.
        let mut jobs = Vec::new();
        for allocation in allocations {
            let (held, ended) = self.end_job(&allocation);
            for (device, reason) in &held {
                tracing::error!(device = %device, "{reason}");
            }
            let devices = self.release_ended(&allocation.job, Some(&allocation), &held, &ended)?;
            if devices.is_empty() {
                // Released meanwhile, by its epilog.
                continue;
            }
            tracing::info!(job = %allocation.job, devices = devices.len(), "released by reconcile: the batch system no longer knows the job");
            jobs.push(allocation.job);
        }
        if !jobs.is_empty() {
            self.intake.released(None);
        }
        // Devices kept out earlier, and groups of jobs released earlier
        // that still held processes then.
        self.recheck_soon(crate::ending::RECHECK_WAITS);
        let store = self.store();
        // Free devices go back to their idle owner too, in case a crash left
        // one behind; a shared device (no job, but sharers) is not free.
        if self.enforcer.is_active() {
            let free: Vec<LedgerRow> = store
                .devices()
                .map_err(|e| store.reply(e))?
                .into_iter()
                .filter(|d| d.job.is_none() && d.shared == 0)
                .collect();
            for e in self.enforcer.restore(&free) {
                tracing::error!("restoring idle ownership: {e}");
            }
        }
        Ok(Reconciled { released: jobs })
    }

    /// `accounting`: records and the Appendix C utilisation over the period.
    pub fn accounting(&self, caller: Caller, request: &AccountingRequest) -> Result<Accounting, ErrorReply> {
        let now = now();
        let store = self.store();
        let until = request.until.unwrap_or(now);
        let since = match request.since {
            Some(s) if s > until => {
                // The protocol checks a pair it is given; an `until` left to
                // default to now is only known here.
                return Err(ErrorReply::new(
                    ErrorCode::BadRequest,
                    format!("accounting: since {s} is after until {until} (now)"),
                ));
            }
            Some(s) => s,
            None => {
                // From the first record of either kind: allocations or drains.
                let first = store.first_start().map_err(|e| store.reply(e))?;
                let first_drain = store.first_drain_start().map_err(|e| store.reply(e))?;
                first.into_iter().chain(first_drain).min().unwrap_or(until).min(until)
            }
        };
        let uid = (!self.is_operator(caller.uid)).then_some(caller.uid);
        let records = store.accounting(since, until, uid, now).map_err(|e| store.reply(e))?;
        let pool_size = store.pool_size().map_err(|e| store.reply(e))?;
        let drains = store.drains(since, until).map_err(|e| store.reply(e))?;
        drop(store);
        // since <= until here, and both are bounded by the protocol
        // (MAX_UNIX_TIME); record times come from this daemon's clock. Still
        // saturate: a sum over a huge history must not wrap. A share counts
        // its fraction of the device: four 1-of-4 sharers make one device.
        let held: f64 = records
            .iter()
            .map(|r| r.end.unwrap_or(now).min(until).saturating_sub(r.start.max(since)).max(0) as f64 * r.fraction)
            .sum();
        // `as` saturates, so the rounded sum never wraps either.
        let device_seconds = held.round() as i64;
        // In floating point: pool size × period exceeds i64 for long periods.
        let capacity = f64::from(pool_size) * until.saturating_sub(since) as f64;
        let ratio = if capacity > 0.0 { held / capacity } else { 0.0 };
        Ok(Accounting { records, utilisation: Utilisation { since, until, pool_size, device_seconds, ratio }, drains })
    }

    /// `confine`: moves the caller's process (SO_PEERCRED pid) into the
    /// job's device cgroups, creating them on first use.
    pub fn confine(&self, caller: Caller, job: &JobKey) -> Result<Confined, ErrorReply> {
        let started = std::time::Instant::now();
        let store = self.store();
        let allocation = store.job(job).map_err(|e| store.reply(e))?;
        let Some(allocation) = allocation else {
            return Err(ErrorReply::new(ErrorCode::UnknownJob, format!("job {job} holds no allocation on this node")));
        };
        if allocation.uid != caller.uid && !self.is_operator(caller.uid) {
            return Err(ErrorReply::new(
                ErrorCode::PermissionDenied,
                format!("job {job} does not belong to uid {}", caller.uid),
            ));
        }
        // On cgroup v2 a process is in one cgroup: a move would take it out
        // of the batch system's tracking, limits and end-of-job kill.
        if allocation.batch_confined && !self.is_operator(caller.uid) {
            return Err(ErrorReply::new(
                ErrorCode::PermissionDenied,
                format!(
                    "job {job} is confined by the batch system (its alloc said prepare_cgroups = false), so cder will not move its processes \
                     out of the batch system's cgroups; only root and the operators in [node] operators may confine it"
                ),
            ));
        }
        if !self.cgroups.is_available() {
            let why = self.cgroups.unavailable_reason().unwrap_or("no device cgroup can be used on this node");
            return Err(ErrorReply::new(ErrorCode::EnforcementUnavailable, why.to_string()));
        }
        let pid = u32::try_from(caller.pid).ok().filter(|p| *p > 0).ok_or_else(|| {
            ErrorReply::new(
                ErrorCode::BadRequest,
                format!("the caller's pid {} (SO_PEERCRED) is not a process this daemon can see", caller.pid),
            )
        })?;
        let name = DeviceCgroups::group_name(job, &allocation.token);
        let failed = |e: crate::cgroup::CgroupError| {
            tracing::error!(job = %job, pid, "confine failed: {e}");
            ErrorReply::new(ErrorCode::Internal, format!("confining pid {pid} for job {job}: {e}"))
        };
        // The store's lock, held throughout, keeps a `release` from
        // removing the groups in between (it would find them re-created).
        self.ready_groups(&store, &allocation)?;
        // The pid is the one the caller had at connect(): move it only while it is still the caller's.
        let asking = crate::peer::AskingProcess::confirm(&caller).map_err(|why| {
            ErrorReply::new(
                ErrorCode::PermissionDenied,
                format!("confine moves only the process that connected: {why}"),
            )
        })?;
        let groups = self.cgroups.enter(&name, pid).map_err(failed)?;
        asking.still_there().map_err(|why| {
            tracing::error!(job = %job, pid, "confine: {why}; the pid written to {groups:?} may have been another process's");
            ErrorReply::new(ErrorCode::Internal, format!("confining pid {pid} for job {job}: {why}"))
        })?;
        drop(store);
        tracing::info!(job = %job, pid, took_us = started.elapsed().as_micros() as u64, "confined");
        Ok(Confined { job: job.clone(), pid, cgroups: groups.iter().map(|p| p.display().to_string()).collect() })
    }

    /// The paths of `allocation`'s device cgroups, set up (rules, program)
    /// if the background thread has not done it yet.
    /// `store` is the held store: a `release` cannot run in between.
    fn ready_groups(&self, store: &Store, allocation: &JobAllocation) -> Result<Vec<std::path::PathBuf>, ErrorReply> {
        let name = DeviceCgroups::group_name(&allocation.job, &allocation.token);
        // Under the map's lock: never beside the set-up thread.
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        if groups.get(&name) != Some(&GroupState::Ready) {
            let devices = store.devices().map_err(|e| store.reply(e))?;
            let deny = deny_list(&devices, allocation, &self.inventory, &self.shared_files);
            deny.and_then(|deny| self.cgroups.prepare(&name, &deny)).map_err(|e| {
                tracing::error!(job = %allocation.job, "setting up the job's device cgroups: {e}");
                ErrorReply::new(
                    ErrorCode::Internal,
                    format!("setting up the device cgroups of job {}: {e}", allocation.job),
                )
            })?;
            groups.insert(name.clone(), GroupState::Ready);
        }
        Ok(self.cgroups.paths(&name))
    }

    /// Of `free` devices, those that some process (not root, not an
    /// ignored uid) holds open: UUID → why. From the latest scan if it
    /// started within [`crate::ending::SCAN_FRESH`] (scans follow every
    /// release) or another is under way, else the next one, waited for at most
    /// [`crate::ending::SCAN_WAITS`]; each holder it names is looked at
    /// again where it held the device (one `statx`), so one that has closed
    /// it or ended is no reason. A look that did not finish names only what
    /// it found: it never keeps a device from a job.
    fn held_open(&self, free: Vec<LedgerRow>) -> BTreeMap<String, String> {
        let latest = self.scanner.latest();
        let scan = match latest {
            Some(s) if s.started.elapsed() < crate::ending::SCAN_FRESH => Some(s),
            // A scan under way on a crowded node may take seconds: the
            // latest and the look again at its holders do meanwhile.
            Some(s) if self.scanner.scanning() => {
                self.scanner.ask();
                Some(s)
            }
            latest => {
                let ticket = self.scanner.ask();
                self.scanner.wait(ticket, crate::ending::SCAN_WAITS).or(latest)
            }
        };
        let Some(scan) = scan else { return BTreeMap::new() };
        let mut out = BTreeMap::new();
        let (by_rdev, _) = targets_of(&free);
        for (rdev, rows) in &by_rdev {
            let still = still_holding(self.scanner.proc_root(), scan.holders_of(*rdev), *rdev);
            if still.is_empty() {
                continue;
            }
            let why = describe_holders(&still);
            for d in rows {
                out.insert(d.uuid.clone(), why.clone());
            }
        }
        out
    }

    /// After a new allocation from the batch system's list: logs, with the
    /// next scan (on the scanner's thread), each of its devices that
    /// another process holds open (that process can use it beside the job).
    fn warn_held_open_later(&self, allocation: &JobAllocation) {
        let devices: Vec<LedgerRow> = allocation.devices.clone();
        if devices.is_empty() {
            return;
        }
        let job = allocation.job.clone();
        let proc_root = self.scanner.proc_root().to_path_buf();
        let ticket = self.scanner.ask();
        self.scanner.then(ticket, move |scan| {
            let (by_rdev, _) = targets_of(&devices);
            for (rdev, rows) in &by_rdev {
                let still = still_holding(&proc_root, scan.holders_of(*rdev), *rdev);
                if still.is_empty() {
                    continue;
                }
                for d in rows {
                    tracing::warn!(
                        device = %d.name(),
                        job = %job,
                        "handing out a device that {} (the batch system chose it): that process can use it beside the job",
                        describe_holders(&still)
                    );
                }
            }
        });
    }

    /// After a new allocation: sets its device cgroups up on the background
    /// thread (see [`GroupState`]).
    fn prepare_groups_later(&self, store: &Store, allocation: &JobAllocation) -> Result<(), ErrorReply> {
        if !self.cgroups.is_available() {
            return Ok(());
        }
        let deny = match deny_list(
            &store.devices().map_err(|e| store.reply(e))?,
            allocation,
            &self.inventory,
            &self.shared_files,
        ) {
            Ok(deny) => deny,
            Err(e) => {
                // Left unset: the job's `confine` (or root's `env`) answers it.
                tracing::error!(job = %allocation.job, "setting up the job's device cgroups: {e}");
                return Ok(());
            }
        };
        let name = DeviceCgroups::group_name(&allocation.job, &allocation.token);
        self.groups.lock().unwrap_or_else(|p| p.into_inner()).insert(name.clone(), GroupState::Pending);
        let (cgroups, groups, job) = (Arc::clone(&self.cgroups), Arc::clone(&self.groups), allocation.job.clone());
        let thread_name = name;
        self.background.run(Box::new(move || {
            let mut groups = groups.lock().unwrap_or_else(|p| p.into_inner());
            match groups.get(&thread_name) {
                Some(GroupState::Pending) => match cgroups.prepare(&thread_name, &deny) {
                    Ok(()) => {
                        groups.insert(thread_name, GroupState::Ready);
                    }
                    Err(e) => {
                        // confine tries again and answers the error then.
                        tracing::warn!(job = %job, "setting up the job's device cgroups: {e}");
                        groups.remove(&thread_name);
                    }
                },
                Some(GroupState::Released) => {
                    groups.remove(&thread_name);
                }
                _ => {}
            }
        }));
        Ok(())
    }

    /// Removes a released job's device cgroups; never fails the release.
    fn remove_groups(&self, job: &JobKey, token: &str) {
        if !self.cgroups.is_available() {
            return;
        }
        let name = DeviceCgroups::group_name(job, token);
        {
            let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            if groups.get(&name) == Some(&GroupState::Pending) {
                groups.insert(name.clone(), GroupState::Released);
            } else {
                groups.remove(&name);
            }
        }
        for e in self.cgroups.remove(&name) {
            tracing::warn!(job = %job, "device cgroup left in place (processes remain?); reconcile will retry: {e}");
        }
    }

    fn type_list(&self) -> String {
        let names: Vec<&str> = self.config.cders.iter().map(|c| c.name()).collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }

    /// Waits for the operation in progress, if any, to finish (commit and
    /// enforcement), and returns holding the lock, so that nothing starts
    /// after it: for a clean exit on SIGTERM.
    pub fn quiesce(&self) -> MutexGuard<'_, Store> {
        self.store()
    }

    /// Checks the store's invariants (for tests and `--check`).
    pub fn check_invariants(&self) -> Result<Vec<String>, ErrorReply> {
        let store = self.store();
        store.check_invariants().map_err(|e| store.reply(e))
    }
}

/// Every present device this node manages, by number, except the job's own
/// (see [`crate::cgroup::deny_list`]); `inventory` has the numbers discovery
/// knows. A shared file (kfd) is the job's own when it holds any device of
/// the file's types, and another's otherwise: a job without one, NVIDIA's
/// or none at all, is denied it.
fn deny_list(
    devices: &[LedgerRow],
    allocation: &JobAllocation,
    inventory: &HashMap<String, Device>,
    shared: &[SharedFile],
) -> Result<Vec<DeviceNumber>, crate::cgroup::CgroupError> {
    let own: BTreeSet<&str> = allocation.devices.iter().map(|d| d.uuid.as_str()).collect();
    let mut fenced: Vec<Fenced<'_>> = devices
        .iter()
        .filter(|d| d.present)
        .map(|d| Fenced {
            name: d.name(),
            path: &d.path,
            known: inventory.get(&d.uuid).and_then(|i| i.dev),
            own: own.contains(d.uuid.as_str()),
        })
        .collect();
    let held: BTreeSet<&str> = allocation.devices.iter().map(|d| d.cder_type.as_str()).collect();
    let present: BTreeSet<&str> = devices.iter().filter(|d| d.present).map(|d| d.cder_type.as_str()).collect();
    for file in shared {
        let own = file.opened_by(held.iter().copied());
        // Read only while the file is missing: an existing file's own number wins.
        let known = if file.exists() { None } else { file.registered_number() };
        // No device of its types here and no driver to make it: nothing
        // can open it, nor can a number be denied. With devices present,
        // an unknown number fails closed (`UnknownNumber`), as for a device.
        if !own && known.is_none() && !file.exists() && !file.types.iter().any(|t| present.contains(t.as_str())) {
            continue;
        }
        fenced.push(Fenced { name: file.name(), path: &file.path, known, own });
    }
    crate::cgroup::deny_list(&fenced)
}

/// The uids the ledger shows holding a device of `file`'s types, whole or
/// in shares: whom a shared file (kfd) is open to.
fn shared_file_holders(file: &SharedFile, devices: &[LedgerRow], shares: &[crate::store::ShareRow]) -> BTreeSet<u32> {
    let mut holders: BTreeSet<u32> =
        devices.iter().filter(|d| d.present && file.types.contains(&d.cder_type)).filter_map(|d| d.uid).collect();
    holders.extend(shares.iter().filter(|s| file.types.contains(&s.device.cder_type)).map(|s| s.uid));
    holders
}

/// Of `holders` (of device `rdev`, from a scan), those still holding it
/// where the scan found it (at most the first eight are looked at).
fn still_holding(proc_root: &std::path::Path, holders: &[crate::held::Holder], rdev: u64) -> Vec<crate::held::Holder> {
    let wanted: BTreeSet<u64> = [rdev].into();
    holders.iter().take(8).filter(|h| crate::held::still_holds(proc_root, h, &wanted).is_some()).cloned().collect()
}

/// Character devices by device number, and what the held-open scan looks for.
fn targets_of(devices: &[LedgerRow]) -> (BTreeMap<u64, Vec<&LedgerRow>>, crate::held::Targets) {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut by_rdev: BTreeMap<u64, Vec<&LedgerRow>> = BTreeMap::new();
    for d in devices {
        if let Ok(meta) = std::fs::metadata(&d.path) {
            if meta.file_type().is_char_device() {
                by_rdev.entry(meta.rdev()).or_default().push(d);
            }
        }
    }
    (by_rdev, crate::held::Targets::of(devices.iter().map(|d| d.path.as_path())))
}

/// The devices of released `job` to keep out of the pool, UUID → why:
/// every one while processes `survivors` stayed in its device cgroups,
/// and each one that a process of `ended` held and has not ended.
fn kept_out(
    job: &JobKey,
    devices: &[(String, u64)],
    survivors: &[u32],
    ended: &[crate::ending::Ended],
) -> BTreeMap<String, String> {
    let mut held = BTreeMap::new();
    for (uuid, rdev) in devices {
        let mut why = Vec::new();
        if !survivors.is_empty() {
            let pids: Vec<String> = survivors.iter().take(5).map(ToString::to_string).collect();
            why.push(format!("pid {} stayed in its device cgroups after SIGKILL", pids.join(", ")));
        }
        let alive: Vec<crate::held::Holder> =
            ended.iter().filter(|e| !e.gone && e.rdevs.contains(rdev)).map(|e| e.holder.clone()).collect();
        if !alive.is_empty() {
            why.push(format!("{}, which SIGKILL has not ended", describe_holders(&alive)));
        }
        if !why.is_empty() {
            let reason = format!("released by job {job}, but {}; kept out of the pool until that ends", why.join("; "));
            held.insert(uuid.clone(), reason);
        }
    }
    held
}

/// `status` as a user who is not an operator sees it: other users' jobs
/// and uids are left out (of the devices, the sharers and the idle
/// devices), as `usage` leaves them out.
fn own_only(mut status: Status, uid: u32) -> Status {
    status.shares.retain(|s| s.uid == uid);
    status.idle.retain(|d| d.uid == uid);
    // The state stays (the free counts are everyone's); whose it is does not.
    for d in status.devices.iter_mut().filter(|d| d.uid.is_some_and(|u| u != uid)) {
        d.uid = None;
        d.job = None;
    }
    // Why a device is kept out names another user's processes.
    for d in status.devices.iter_mut().filter(|d| d.reason.as_deref().is_some_and(|r| r.starts_with("released by job")))
    {
        d.reason = Some("kept out of the pool after a release (an operator's status says why)".into());
    }
    status
}

/// "held open by pid 1 (…), pid 2 (…) and 3 more".
fn describe_holders(holders: &[crate::held::Holder]) -> String {
    let list: Vec<String> = holders.iter().take(3).map(ToString::to_string).collect();
    let more = holders.len().saturating_sub(3);
    format!("held open by {}{}", list.join(", "), if more > 0 { format!(" and {more} more") } else { String::new() })
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A device that discovery no longer reports and that the ledger has no
/// discovered record of (a row written by a cderd before it kept one; the
/// next start that finds the device writes it): rebuilt from its row, which
/// is enough for the environment (type, index, UUID). Vendor, PCI bus id and
/// the attributes beyond model and memory are not in the row.
fn device_from_row(d: &LedgerRow) -> Device {
    Device {
        cder_type: d.cder_type.clone(),
        vendor: String::new(),
        index: d.index,
        uuid: d.uuid.clone(),
        pci_bus_id: String::new(),
        attributes: cder_model::DeviceAttributes::new(d.model.clone(), d.memory_mib),
        path: d.path.clone(),
        dev: None,
        numa_node: d.numa_node,
        health: cder_model::Health::Unhealthy,
    }
}

/// The indices of the `cder_type` devices at `files` (one entry per
/// device, any of its files), as the batch system names its choice.
fn indices_at(devices: &[LedgerRow], cder_type: &str, files: &[Vec<String>]) -> Result<Vec<u32>, ErrorReply> {
    let mut out = Vec::with_capacity(files.len());
    for group in files {
        let found = devices
            .iter()
            .find(|d| d.cder_type == cder_type && group.iter().any(|f| d.path == std::path::Path::new(f)));
        match found {
            Some(d) => out.push(d.index),
            None => {
                let known: Vec<String> = devices
                    .iter()
                    .filter(|d| d.cder_type == cder_type)
                    .map(|d| format!("{}={}", d.index, d.path.display()))
                    .collect();
                return Err(ErrorReply::new(
                    ErrorCode::UnknownDevice,
                    format!(
                        "no {cder_type} device of this node is at {} (cderd's: {})",
                        group.join(" or "),
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    let listed = out.len();
    out.sort_unstable();
    out.dedup();
    if out.len() != listed {
        let named: Vec<String> = files.iter().map(|g| g.join(" or ")).collect();
        return Err(ErrorReply::new(
            ErrorCode::BadRequest,
            format!("device_files names one {cder_type} device twice ({})", named.join(", ")),
        ));
    }
    Ok(out)
}

/// The warm-up for this node: off with `cgroup_warmup_ms = 0`, without
/// device cgroups, or where `favordynmods` already makes moves cheap.
fn warmup_for(cgroups: &DeviceCgroups, window_ms: u64) -> MigrationWarmup {
    if window_ms == 0 || !cgroups.is_available() {
        return MigrationWarmup::off();
    }
    if favors_dynmods() {
        tracing::info!("cgroup warm-up off: a cgroup hierarchy is mounted with favordynmods, moves are cheap");
        return MigrationWarmup::off();
    }
    let Some(procs) = cgroups.own_procs_file() else {
        tracing::warn!(
            "cgroup warm-up off: cderd's own group is not in /proc/self/cgroup; confine may wait for RCU grace periods"
        );
        return MigrationWarmup::off();
    };
    match MigrationWarmup::start(&procs, std::time::Duration::from_millis(window_ms)) {
        Ok(w) => {
            tracing::debug!(procs = %procs.display(), window_ms, "cgroup warm-up on");
            w
        }
        Err(e) => {
            tracing::warn!(procs = %procs.display(), "cgroup warm-up off: {e}; confine may wait for RCU grace periods");
            MigrationWarmup::off()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn row(cder_type: &str, index: u32, path: &str) -> LedgerRow {
        LedgerRow::for_test(cder_type, index, &format!("{cder_type}-{index}"), path)
    }

    fn holding(devices: Vec<LedgerRow>) -> JobAllocation {
        JobAllocation {
            job: "slurm:1".parse().unwrap(),
            uid: 1000,
            cder_type: devices.first().map_or("gpgpu".into(), |d| d.cder_type.clone()),
            count: devices.len() as u32,
            token: "t".into(),
            start: 0,
            devices,
            seq: 1,
            batch_confined: false,
            shares: None,
        }
    }

    fn config(text: &str) -> Config {
        Config::parse(text, Path::new("cder.toml")).unwrap()
    }

    const N: fn(u32, u32) -> DeviceNumber = |major, minor| DeviceNumber { major, minor };

    /// A node with two AMD GPUs (/dev/zero, /dev/full as their render
    /// nodes), an NVIDIA one (/dev/random) and kfd at /dev/urandom (1:9).
    #[test]
    fn kfd_is_open_exactly_to_jobs_holding_an_amd_device() {
        let c = config(
            "[[cder]]\nname = \"gpgpu\"\nvendor = \"amd\"\ndiscovery = \"static\"\nkfd_path = \"/dev/urandom\"\n\
             [[cder]]\nname = \"nv\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
        );
        let shared = SharedFile::of_types(&c.cders);
        assert_eq!(shared.len(), 1, "only the AMD type has a shared file: {shared:?}");
        let devices = [row("gpgpu", 0, "/dev/zero"), row("gpgpu", 1, "/dev/full"), row("nv", 0, "/dev/random")];
        let inventory = HashMap::new();
        let deny = |held: Vec<LedgerRow>| deny_list(&devices, &holding(held), &inventory, &shared).unwrap();
        // An AMD job: its render node and kfd open, the others' denied.
        assert_eq!(deny(vec![devices[0].clone()]), [N(1, 7), N(1, 8)]);
        assert_eq!(deny(vec![devices[1].clone()]), [N(1, 5), N(1, 8)]);
        // An NVIDIA job and a job with no device: kfd denied as well.
        assert_eq!(deny(vec![devices[2].clone()]), [N(1, 5), N(1, 7), N(1, 9)]);
        assert_eq!(deny(vec![]), [N(1, 5), N(1, 7), N(1, 8), N(1, 9)]);
    }

    #[test]
    fn a_missing_kfd_is_denied_by_its_registered_number_or_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let kfd = dir.path().join("kfd");
        let majors = dir.path().join("devices");
        std::fs::write(&majors, "Character devices:\n  1 mem\n226 drm\n235 kfd\n\nBlock devices:\n  8 sd\n").unwrap();
        let text = |proc_devices: &Path| {
            format!(
                "[[cder]]\nname = \"gpgpu\"\nvendor = \"amd\"\ndiscovery = \"static\"\nkfd_path = {kfd:?}\nproc_devices = {proc_devices:?}\n\
                 [[cder]]\nname = \"mi100\"\nvendor = \"amd\"\ndiscovery = \"static\"\nkfd_path = {kfd:?}\n"
            )
        };
        let shared = SharedFile::of_types(&config(&text(&majors)).cders);
        assert_eq!(shared.len(), 1, "two AMD types share one kfd: {shared:?}");
        assert_eq!(shared[0].types.len(), 2);
        let devices = [row("gpgpu", 0, "/dev/zero"), row("mi100", 0, "/dev/full")];
        let inventory = HashMap::new();
        // Not made yet: amdgpu's major from the list, minor 0.
        assert_eq!(deny_list(&devices, &holding(vec![]), &inventory, &shared).unwrap(), [N(1, 5), N(1, 7), N(235, 0)]);
        // Either type's device opens it.
        assert_eq!(deny_list(&devices, &holding(vec![devices[1].clone()]), &inventory, &shared).unwrap(), [N(1, 5)]);
        // Driver not loaded, GPUs configured: no job is confined until it is known.
        let shared = SharedFile::of_types(&config(&text(&dir.path().join("none"))).cders);
        let e = deny_list(&devices, &holding(vec![]), &inventory, &shared).unwrap_err().to_string();
        assert!(e.contains("kfd of gpgpu,mi100") && e.contains(&kfd.display().to_string()), "{e}");
        // A job holding an AMD device needs nothing denied for it.
        assert_eq!(deny_list(&devices, &holding(vec![devices[0].clone()]), &inventory, &shared).unwrap(), [N(1, 7)]);
        // No AMD device at all and no driver: nothing to fence.
        let nvidia_only = [row("nv", 0, "/dev/random")];
        assert_eq!(deny_list(&nvidia_only, &holding(vec![]), &inventory, &shared).unwrap(), [N(1, 8)]);
    }

    /// Render nodes are device files like any other: `/dev/dri/renderD129`
    /// (226:129) not made yet is denied by the number discovery knows.
    #[test]
    fn render_nodes_are_denied_by_number() {
        let devices = [row("gpgpu", 0, "/nonexistent/dri/renderD128"), row("gpgpu", 1, "/nonexistent/dri/renderD129")];
        let mut inventory = HashMap::new();
        for (i, d) in devices.iter().enumerate() {
            let mut dev = device_from_row(d);
            dev.dev = Some(N(226, 128 + i as u32));
            inventory.insert(d.uuid.clone(), dev);
        }
        let deny = deny_list(&devices, &holding(vec![devices[0].clone()]), &inventory, &[]).unwrap();
        assert_eq!(deny, [N(226, 129)]);
    }
}
