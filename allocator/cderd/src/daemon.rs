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
    /// Uids whose open descriptors do not make a device busy.
    held_open_ignore: BTreeSet<u32>,
    /// Released jobs' leftovers being ended, off the ledger lock.
    ending: Arc<crate::ending::Ending>,
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
            let mut holders: BTreeSet<u32> = devices
                .iter()
                .filter(|d| d.present && file.types.contains(&d.cder_type))
                .filter_map(|d| d.uid)
                .collect();
            holders.extend(shares.iter().filter(|s| file.types.contains(&s.device.cder_type)).map(|s| s.uid));
            if let Err(e) = self.enforcer.apply_shared_file(&file.path, &file.name(), &holders) {
                tracing::error!("opening {} to the jobs holding its devices: {e}", file.name());
            }
        }
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
            held_open_ignore,
            ending: Arc::default(),
            warmup: MigrationWarmup::off(),
            background: Background::start(),
            intake: Intake::default(),
            files_seen: Mutex::default(),
            usage_rules: UsageRules::from_config(&config_usage),
            latest: Mutex::new(Vec::new()),
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

    /// `release`: idempotent; the number of devices freed. The job's
    /// processes left in its device cgroups are ended first, off the lock
    /// and waited for at most [`crate::ending::RELEASE_WAITS`]; a device
    /// that one of them may still hold stays out of the pool (see
    /// [`Daemon::end_job`]).
    pub fn release(&self, job: &JobKey) -> Result<u32, ErrorReply> {
        let allocation = {
            let store = self.store();
            store.job(job).map_err(|e| store.reply(e))?
        };
        let held = allocation.as_ref().map(|a| self.end_job(a)).unwrap_or_default();
        for (device, reason) in &held {
            tracing::error!(device = %device, "{reason}");
        }
        let released = self.release_ended(job, allocation.as_ref(), &held)?;
        if !released.is_empty() {
            tracing::info!(job = %job, devices = released.len(), "released");
        }
        Ok(released.len() as u32)
    }

    /// Ends `allocation` in the ledger, keeping `held` (UUID → why) out of
    /// the pool, unless the job's record changed since `allocation` was read
    /// (another request released it): then nothing is done.
    fn release_ended(
        &self,
        job: &JobKey,
        allocation: Option<&JobAllocation>,
        held: &BTreeMap<String, String>,
    ) -> Result<Vec<LedgerRow>, ErrorReply> {
        let mut store = self.store();
        let now_held = store.job(job).map_err(|e| store.reply(e))?;
        if now_held.as_ref().map(|a| &a.token) != allocation.map(|a| &a.token) {
            return Ok(Vec::new());
        }
        let released = store.release_keeping(job, now(), held).map_err(|e| store.reply(e))?;
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
        self.mps_after_release(job, allocation, &released);
        if let Some(a) = allocation {
            // Groups still holding processes stay; the look that finds them
            // empty removes them.
            self.remove_groups(job, &a.token);
        }
        self.intake.released(Some(job));
        Ok(released)
    }

    /// Ends what is left of `allocation`'s job before its devices go back:
    /// every process in its device cgroups, whatever `held_open` says. Then
    /// looks for a process of the job's uid that still holds one of its
    /// devices (one that left the groups, or a job cder did not confine).
    /// Returns the devices to keep out of the pool: UUID → why. All of it
    /// runs off the ledger lock, on a thread waited for at most
    /// [`crate::ending::RELEASE_WAITS`]: past that (a process in
    /// uninterruptible sleep), every device is kept out and the watcher
    /// settles them once the thread is done.
    fn end_job(&self, allocation: &JobAllocation) -> BTreeMap<String, String> {
        let name = DeviceCgroups::group_name(&allocation.job, &allocation.token);
        let pending = || {
            let reason = format!(
                "released by job {}, whose processes are still being ended; kept out of the pool until that ends",
                allocation.job
            );
            allocation.devices.iter().map(|d| (d.uuid.clone(), reason.clone())).collect()
        };
        let Some(claim) = self.ending.claim(&name) else { return pending() };
        let (cgroups, ignore, ending) =
            (Arc::clone(&self.cgroups), self.held_open_ignore.clone(), Arc::clone(&self.ending));
        let (job, devices) = (allocation.job.clone(), allocation.devices.clone());
        let work = move || {
            let survivors = if cgroups.is_available() { cgroups.end_processes(&name) } else { Vec::new() };
            let holders = holders_of(&ignore, &devices);
            drop(claim);
            kept_out(&job, &devices, &survivors, &holders)
        };
        // Overran: the watcher looks again now that the thread is done.
        let overran = move |_| {
            ending.ask();
        };
        crate::ending::within("end-job", crate::ending::RELEASE_WAITS, work, overran).unwrap_or_else(pending)
    }

    /// Starts a thread that looks again every `period` at the devices kept
    /// out after a release (and whenever a request asks), so that one goes
    /// back to the pool soon after its holder is gone.
    pub fn watch_leftovers(daemon: &Arc<Daemon>, period: std::time::Duration) {
        let daemon = Arc::clone(daemon);
        daemon.ending.watched();
        let spawned = std::thread::Builder::new().name("cderd-leftovers".into()).spawn(move || loop {
            let ticket = daemon.ending.next(period);
            if let Err(e) = daemon.recheck_leftovers() {
                tracing::warn!("looking again at devices kept out after a release: {}", e.message);
            }
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
        } else if let Err(e) = self.recheck_leftovers() {
            tracing::warn!("looking again at devices kept out after a release: {}", e.message);
        }
    }

    /// Looks again at the devices kept out after a release, and puts back
    /// in the pool each whose job has nothing left on it; ends and removes
    /// the device cgroups of jobs released earlier. Off the ledger lock but
    /// for reading and writing the ledger itself.
    fn recheck_leftovers(&self) -> Result<(), ErrorReply> {
        // The groups first: each one seen belongs to a job recorded before
        // the ledger is read below, so a job starting now is never swept.
        let groups = if self.cgroups.is_available() { self.cgroups.group_names() } else { BTreeSet::new() };
        let (leftovers, devices, live) = {
            let store = self.store();
            let leftovers = store.leftovers().map_err(|e| store.reply(e))?;
            let devices = store.devices().map_err(|e| store.reply(e))?;
            let live: BTreeSet<String> = store
                .live_allocations()
                .map_err(|e| store.reply(e))?
                .iter()
                .map(|(job, _, token)| DeviceCgroups::group_name(job, token))
                .collect();
            (leftovers, devices, live)
        };
        let mut by_job: BTreeMap<String, Vec<&crate::store::Leftover>> = BTreeMap::new();
        for l in &leftovers {
            by_job.entry(DeviceCgroups::group_name(&l.job, &l.token)).or_default().push(l);
        }
        let mut back = 0;
        for (name, group) in &by_job {
            let Some(_claim) = self.ending.claim(name) else { continue };
            let job = &group[0].job;
            let survivors = if self.cgroups.is_available() { self.cgroups.end_processes(name) } else { Vec::new() };
            let rows: Vec<LedgerRow> =
                devices.iter().filter(|d| group.iter().any(|l| l.device == d.uuid)).cloned().collect();
            let holders = holders_of(&self.held_open_ignore, &rows);
            let why = kept_out(job, &rows, &survivors, &holders);
            let mut store = self.store();
            let now_kept = store.leftovers().map_err(|e| store.reply(e))?;
            for l in group {
                // Still kept out for this job (not settled by another look).
                let Some(current) = now_kept.iter().find(|c| c.device == l.device && c.token == l.token) else {
                    continue;
                };
                match why.get(&l.device) {
                    None => {
                        store.set_leftover(&l.device, None).map_err(|e| store.reply(e))?;
                        tracing::info!(device = %l.device, job = %job, "nothing of the released job holds the device any more: back in the pool");
                        back += 1;
                    }
                    Some(reason) if *reason != current.reason => {
                        tracing::error!(device = %l.device, "{reason}");
                        store.set_leftover(&l.device, Some(reason)).map_err(|e| store.reply(e))?;
                    }
                    Some(_) => {}
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
            let held = self.end_job(&allocation);
            for (device, reason) in &held {
                tracing::error!(device = %device, "{reason}");
            }
            let devices = self.release_ended(&allocation.job, Some(&allocation), &held)?;
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
    /// ignored uid) holds open: UUID → why. The scan reads what users'
    /// processes hold, so it runs on a thread of its own, waited for at
    /// most [`crate::ending::SCAN_WAITS`] (it cannot stall on a user's file
    /// system, see [`crate::held`]; the bound is for what nobody foresaw).
    fn held_open(&self, free: Vec<LedgerRow>) -> BTreeMap<String, String> {
        let ignore = self.held_open_ignore.clone();
        let scan = move || {
            let (by_rdev, targets) = targets_of(&free);
            let mut out = BTreeMap::new();
            for (rdev, holders) in crate::held::holders(std::path::Path::new("/proc"), &targets, &ignore) {
                let why = describe_holders(&holders);
                for d in by_rdev.get(&rdev).into_iter().flatten() {
                    out.insert(d.uuid.clone(), why.clone());
                }
            }
            out
        };
        crate::ending::within("held-open-scan", crate::ending::SCAN_WAITS, scan, |_| ()).unwrap_or_default()
    }

    /// After a new allocation from the batch system's list: logs, on a
    /// thread of its own, each of its devices that another process holds
    /// open (that process can use it beside the job).
    fn warn_held_open_later(&self, allocation: &JobAllocation) {
        let devices: Vec<LedgerRow> = allocation.devices.clone();
        if devices.is_empty() {
            return;
        }
        let (job, ignore) = (allocation.job.clone(), self.held_open_ignore.clone());
        self.background.run(Box::new(move || warn_held_open(&job, &devices, &ignore)));
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

/// Logs each of `devices` that a process (not root, not an ignored uid)
/// holds open: the batch system chose it for `job`, so it was recorded.
fn warn_held_open(job: &JobKey, devices: &[LedgerRow], ignore: &BTreeSet<u32>) {
    let (by_rdev, targets) = targets_of(devices);
    for (rdev, holders) in crate::held::holders(std::path::Path::new("/proc"), &targets, ignore) {
        for d in by_rdev.get(&rdev).into_iter().flatten() {
            tracing::warn!(
                device = %d.name(),
                job = %job,
                "handing out a device that {} (the batch system chose it): that process can use it beside the job",
                describe_holders(&holders)
            );
        }
    }
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

/// `devices` of a released job that a process holds open: UUID → why.
/// Root's and the `ignore`d uids' processes are trusted, as for the
/// held-open scan; any other uid counts, not only the job's own (a job can
/// pass a descriptor to another user's process over a socket).
fn holders_of(ignore: &BTreeSet<u32>, devices: &[LedgerRow]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let (by_rdev, targets) = targets_of(devices);
    for (rdev, holders) in crate::held::holders(std::path::Path::new("/proc"), &targets, ignore) {
        let why = describe_holders(&holders);
        for d in by_rdev.get(&rdev).into_iter().flatten() {
            out.insert(d.uuid.clone(), why.clone());
        }
    }
    out
}

/// The devices of released `job` to keep out of the pool, UUID → why:
/// every one while processes `survivors` stayed in its device cgroups,
/// and each one that `holders` (of [`holders_of`]) names.
fn kept_out(
    job: &JobKey,
    devices: &[LedgerRow],
    survivors: &[u32],
    holders: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut held = BTreeMap::new();
    for d in devices {
        let mut why = Vec::new();
        if !survivors.is_empty() {
            let pids: Vec<String> = survivors.iter().take(5).map(ToString::to_string).collect();
            why.push(format!("pid {} stayed in its device cgroups after SIGKILL", pids.join(", ")));
        }
        why.extend(holders.get(&d.uuid).cloned());
        if !why.is_empty() {
            let reason = format!("released by job {job}, but {}; kept out of the pool until that ends", why.join("; "));
            held.insert(d.uuid.clone(), reason);
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
