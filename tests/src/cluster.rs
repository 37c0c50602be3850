//! A real SLURM cluster of several hosts on one machine: every host (the
//! head and N workers) is a network namespace of its own with an address in
//! 10.77.0.0/24, joined by veth pairs to a Linux bridge that lives in a
//! "switch" namespace; none of these addresses exists outside the test's
//! namespaces. Each host also has its own mount and UTS namespace, in which
//! a folder of the temp dir is bind-mounted over `/run`: every host has its
//! own `/run/cder/cderd.sock`, SLURM spool and logs at the same paths, so
//! one slurm.conf, one plugstack.conf and one cder.toml layout serve all.
//!
//! The head runs slurmctld and, with [`ClusterConfig::registry`], munged
//! (a local socket in the temp dir) and cder-registryd on 10.77.0.1. Each
//! worker `wN` (10.77.0.1N) runs its own cderd (a `cgroup_parent` of its
//! own, so two hosts' groups for the same job do not collide), its own fake
//! GPUs (mem-driver character devices with distinct numbers, at
//! `/run/gpu/gpuI` inside the host) and `slurmd -N wN`.
//!
//! ```no_run
//! use cder_tests::cluster::{Cluster, ClusterConfig};
//! use cder_tests::slurm::SlurmClient;
//! if !cder_tests::cluster::require_cluster() { return; }
//! let cluster = Cluster::start(&ClusterConfig::default()).unwrap();
//! let script = "#!/bin/sh\nsrun printenv CUDA_VISIBLE_DEVICES\n";
//! let job = cluster.sbatch(&["-N", "2", "--gpgpu-per-node=2"], script).unwrap();
//! cluster.wait_job(job, std::time::Duration::from_secs(60)).unwrap();
//! ```
//!
//! A host's processes are started with `nsenter` into the namespaces of a
//! holder process (`sleep`) that keeps them alive; [`Host::command`] gives
//! such a command. `Drop` cancels the jobs, kills every process left in
//! the namespaces, deletes the namespaces and removes cderd's cgroups, also
//! when the test panicked.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::munge::Munged;
use cder_testkit::find_program;

use crate::slurm::{artifacts, make_fake_gpu, JobInfo, SlurmClient, SLURM_CONF_COMMON, SLURM_PLUGIN_DIR};

/// The private range the hosts live in (only inside the test's namespaces).
pub const SUBNET: &str = "10.77.0";

/// SLURM's ports; fixed, since every cluster has network stacks of its own.
const CTLD_PORT: u16 = 6817;
const SLURMD_PORT: u16 = 6818;
/// The registry's port on the head.
pub const REGISTRY_PORT: u16 = 8790;

/// The programs the harness itself runs, besides SLURM's.
pub const CLUSTER_PROGRAMS: [&str; 5] = ["ip", "nsenter", "unshare", "mount", "mknod"];

/// Checks that SLURM and the namespace tools are installed. When not: with
/// `CI=true` this panics (the test fails); otherwise it prints why and
/// returns false. (Namespaces need root, as slurmd does.)
pub fn require_cluster() -> bool {
    crate::slurm::require_slurm() && cder_testkit::require_programs(&CLUSTER_PROGRAMS)
}

/// How to set the cluster up.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Worker hosts (`w1` … `wN`).
    pub workers: u32,
    /// Fake GPUs per worker (character devices for the first four, plain
    /// files beyond: see [`crate::slurm::make_fake_gpu`]).
    pub gpus: u32,
    /// CPUs each worker declares.
    pub cpus: u32,
    /// Words after the plugin path in plugstack.conf besides `socket=`.
    pub spank_args: Vec<String>,
    /// Extra lines for slurm.conf.
    pub extra_slurm_conf: String,
    /// Start munged and cder-registryd on the head; the SPANK plugin gets
    /// `config=` the registry's config.
    pub registry: bool,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            workers: 3,
            gpus: 2,
            cpus: 8,
            spank_args: Vec::new(),
            extra_slurm_conf: String::new(),
            registry: false,
        }
    }
}

/// One host: its namespaces (held by a `sleep` process), its folder and
/// the daemons started in it.
pub struct Host {
    /// The node name (`head`, `w1` …), also its hostname.
    pub name: String,
    /// Its address in [`SUBNET`].
    pub addr: String,
    netns: String,
    dir: PathBuf,
    holder: Option<Child>,
    daemons: Vec<(String, Child)>,
    /// cderd (a worker's), started as every test's is.
    cderd: Option<cder_testkit::TestNode>,
}

impl Host {
    /// The folder mounted over the host's `/run` (as seen from outside).
    pub fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    /// cderd's socket, as seen from outside the host (a Unix socket is
    /// reached through the file system, not the network).
    pub fn cderd_socket(&self) -> PathBuf {
        self.run_dir().join("cder/cderd.sock")
    }

    /// The network namespace's name (`ip netns`).
    pub fn netns(&self) -> &str {
        &self.netns
    }

    fn holder_pid(&self) -> u32 {
        self.holder.as_ref().map_or(0, Child::id)
    }

    /// `program` run inside this host (its network, mount and UTS
    /// namespaces), with stdin from /dev/null.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["-t", &self.holder_pid().to_string(), "-n", "-m", "-u", "--"])
            .arg(find_program(program).unwrap_or_else(|| program.into()))
            .stdin(Stdio::null());
        c
    }

    /// Starts a daemon in this host (`cmd` from [`Host::command`]), its
    /// output appended to `/run/<name>.out` of the host; [`Host::logs`]
    /// shows it and `Drop` of the cluster kills it.
    pub fn spawn(&mut self, name: &str, mut cmd: Command) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.run_dir().join(format!("{name}.out")))
            .map_err(|e| e.to_string())?;
        let child = cmd
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {name} on {}: {e}", self.name))?;
        self.daemons.push((name.to_string(), child));
        Ok(())
    }

    /// Kills the named daemon (SIGKILL) and waits for it.
    fn kill(&mut self, name: &str) {
        if name == "cderd" {
            self.cderd = None;
        }
        while let Some(at) = self.daemons.iter().position(|(n, _)| n == name) {
            let (_, mut child) = self.daemons.remove(at);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Why a daemon has already exited, if one has.
    fn exited(&mut self) -> Option<String> {
        if self.cderd.as_mut().is_some_and(|c| !c.alive()) {
            return Some(format!("cderd on {} exited", self.name));
        }
        self.daemons.iter_mut().find_map(|(n, c)| match c.try_wait() {
            Ok(Some(status)) => Some(format!("{n} on {} exited ({status})", self.name)),
            _ => None,
        })
    }

    /// Kills (SIGKILL) every process in this host whose command name is
    /// one of `names`, as a crash of those daemons would: e.g. `slurmd`
    /// and `slurmstepd`, so that no epilog runs for the host's jobs.
    pub fn crash(&mut self, names: &[&str]) {
        for name in names {
            self.kill(name);
        }
        let Ok(text) = sh("ip", &["netns", "pids", &self.netns]) else { return };
        for pid in text.split_whitespace() {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if names.contains(&comm.trim()) {
                let _ = Command::new("kill").args(["-9", pid]).stderr(Stdio::null()).status();
            }
        }
    }

    /// cderd's `status` on this host.
    pub fn cderd_status(&self) -> Result<cder_protocol::Status, String> {
        cder_protocol::Client::connect(self.cderd_socket(), Duration::from_secs(5))
            .and_then(|mut c| c.status())
            .map_err(|e| e.to_string())
    }

    /// The device indices cderd on this host shows held by `slurm:<id>`.
    pub fn ledger(&self, id: u32) -> Result<Vec<u32>, String> {
        let key = format!("slurm:{id}");
        let mut held: Vec<u32> = self
            .cderd_status()?
            .devices
            .iter()
            .filter(|d| d.job.as_ref().is_some_and(|j| j.to_string() == key))
            .map(|d| d.index)
            .collect();
        held.sort_unstable();
        Ok(held)
    }

    /// The last lines of every log in the host's `/run`.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        let Ok(entries) = std::fs::read_dir(self.run_dir()) else { return out };
        let mut names: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "log" || x == "out"))
            .collect();
        names.sort();
        for path in names {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(30)..];
            let _ = writeln!(
                out,
                "==== {}:{} (last {} lines) ====\n{}",
                self.name,
                path.display(),
                tail.len(),
                tail.join("\n")
            );
        }
        out
    }
}

/// A running cluster; dropping it stops everything and removes the namespaces.
pub struct Cluster {
    dir: tempfile::TempDir,
    /// Prefix of every namespace and cgroup this cluster creates.
    tag: String,
    switch: Option<String>,
    /// The head host (slurmctld, munged, cder-registryd).
    pub head: Host,
    /// The worker hosts, `w1` first.
    pub workers: Vec<Host>,
    /// munged on the head, with [`ClusterConfig::registry`].
    pub munged: Option<Munged>,
    /// How the cluster was set up.
    pub config: ClusterConfig,
}

fn sh(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(find_program(program).unwrap_or_else(|| program.into()))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A name no other cluster on this machine uses now: the process id and a
/// counter (namespaces, cgroups and SLURM job ids are machine-wide).
fn unique_tag() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!("cdc{}x{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

impl Cluster {
    /// Creates the namespaces and the bridge, writes the configs, starts
    /// every daemon and waits until every worker is idle.
    pub fn start(config: &ClusterConfig) -> Result<Cluster, String> {
        if config.workers == 0 || config.workers > 80 {
            return Err(format!("workers = {}: between 1 and 80", config.workers));
        }
        let arts = artifacts()?;
        let dir = tempfile::Builder::new().prefix("cder-cluster-").tempdir().map_err(|e| e.to_string())?;
        let d = dir.path().to_path_buf();
        for sub in ["plugins", "jobs", "state", "hosts"] {
            std::fs::create_dir_all(d.join(sub)).map_err(|e| e.to_string())?;
        }
        // Jobs run as root or nobody on any host and write into jobs/.
        sh("chmod", &["0755", &d.to_string_lossy()])?;
        sh("chmod", &["1777", &d.join("jobs").to_string_lossy()])?;
        let tag = unique_tag();
        let host = |name: &str, addr: String| Host {
            name: name.into(),
            addr,
            netns: format!("{tag}-{name}"),
            dir: d.join("hosts").join(name),
            holder: None,
            daemons: Vec::new(),
            cderd: None,
        };
        let mut cluster = Cluster {
            tag: tag.clone(),
            switch: None,
            head: host("head", format!("{SUBNET}.1")),
            workers: (1..=config.workers).map(|i| host(&format!("w{i}"), format!("{SUBNET}.{}", 10 + i))).collect(),
            munged: None,
            config: config.clone(),
            dir,
        };
        // From here on, an error drops `cluster`, which undoes what was made.
        cluster.make_network()?;
        cluster.enter_hosts()?;
        std::fs::copy(&arts.spank, d.join("plugins/spank_cder.so"))
            .map_err(|e| format!("copying the SPANK plugin: {e}"))?;
        std::fs::copy(&arts.job_submit, d.join("plugins/job_submit_cder.so"))
            .map_err(|e| format!("copying the job_submit plugin: {e}"))?;
        cluster.write_slurm_conf()?;
        if config.registry {
            cluster.start_registry()?;
        }
        cluster.set_plugstack(&config.spank_args)?;
        for i in 0..cluster.workers.len() {
            cluster.write_worker(i)?;
            cluster.start_cderd(i)?;
        }
        let conf = cluster.slurm_conf();
        let mut ctld = cluster.head.command("slurmctld");
        ctld.args(["-D", "-f"]).arg(&conf).env("SLURM_CONF", &conf);
        cluster.head.spawn("slurmctld", ctld)?;
        for w in &mut cluster.workers {
            let mut slurmd = w.command("slurmd");
            slurmd.args(["-D", "-N", &w.name, "-f"]).arg(&conf).env("SLURM_CONF", &conf);
            w.spawn("slurmd", slurmd)?;
        }
        cluster.wait_idle(Duration::from_secs(90))?;
        Ok(cluster)
    }

    /// The bridge in the switch namespace and, per host, a namespace with a
    /// veth pair whose one end is on the bridge; checks that every host
    /// routes the subnet through its own interface before any traffic.
    fn make_network(&mut self) -> Result<(), String> {
        let switch = format!("{}-switch", self.tag);
        sh("ip", &["netns", "add", &switch])?;
        self.switch = Some(switch.clone());
        sh("ip", &["-n", &switch, "link", "add", "br0", "type", "bridge"])?;
        sh("ip", &["-n", &switch, "link", "set", "br0", "up"])?;
        let hosts: Vec<(String, String)> =
            std::iter::once(&self.head).chain(&self.workers).map(|h| (h.netns.clone(), h.addr.clone())).collect();
        for (i, (ns, addr)) in hosts.iter().enumerate() {
            sh("ip", &["netns", "add", ns])?;
            // Both ends are made inside namespaces: no name in the root one.
            let port = format!("p{i}");
            sh("ip", &["-n", &switch, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", ns])?;
            sh("ip", &["-n", &switch, "link", "set", &port, "master", "br0", "up"])?;
            sh("ip", &["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
            sh("ip", &["-n", ns, "link", "set", "eth0", "up"])?;
            sh("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        }
        for (ns, _) in &hosts {
            for (_, to) in &hosts {
                let route = sh("ip", &["-n", ns, "route", "get", to])?;
                if !(route.contains("dev eth0") || route.contains("dev lo")) {
                    return Err(format!("in {ns}, {to} is not routed through the test's own interface: {route}"));
                }
            }
        }
        Ok(())
    }

    /// Starts every host's holder: in its network namespace, a new mount
    /// and UTS namespace with the host's folder over `/run` and its name as
    /// hostname (slurmctld checks that it runs on `SlurmctldHost`).
    fn enter_hosts(&mut self) -> Result<(), String> {
        for h in std::iter::once(&mut self.head).chain(self.workers.iter_mut()) {
            std::fs::create_dir_all(h.run_dir().join("cder")).map_err(|e| e.to_string())?;
            let ready = h.dir.join("ready");
            let child = Command::new("nsenter")
                .arg(format!("--net=/run/netns/{}", h.netns))
                .args(["--", "unshare", "-m", "-u", "--propagation", "private", "--", "/bin/sh", "-c"])
                .arg("mount --bind \"$1\" /run && hostname \"$2\" && touch \"$3\" && exec sleep 100000")
                .arg("sh")
                .arg(h.run_dir())
                .arg(&h.name)
                .arg(&ready)
                .stdin(Stdio::null())
                .spawn()
                .map_err(|e| format!("entering {}: {e}", h.name))?;
            h.holder = Some(child);
            let started = cder_testkit::try_wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
                if ready.exists() {
                    return Ok(Some(()));
                }
                if let Some(Ok(Some(status))) = h.holder.as_mut().map(Child::try_wait) {
                    return Err(format!("the holder of {} exited ({status})", h.name));
                }
                Ok(None)
            })?;
            if started.is_none() {
                return Err(format!("the holder of {} did not start in 10 s", h.name));
            }
        }
        Ok(())
    }

    fn write_slurm_conf(&self) -> Result<(), String> {
        let d = self.dir();
        let c = &self.config;
        let mut nodes = String::new();
        let mut gres = String::new();
        for w in &self.workers {
            let _ = writeln!(
                nodes,
                "NodeName={n} NodeAddr={a} NodeHostname={n} CPUs={cpus} RealMemory=1000 Gres=gpu:{g} State=UNKNOWN",
                n = w.name,
                a = w.addr,
                cpus = c.cpus,
                g = c.gpus
            );
            let range = if c.gpus == 1 { "0".to_string() } else { format!("[0-{}]", c.gpus - 1) };
            let _ = writeln!(gres, "NodeName={} Name=gpu File=/run/gpu/gpu{range}", w.name);
        }
        let names: Vec<&str> = self.workers.iter().map(|w| w.name.as_str()).collect();
        // Job ids of their own: cderd's cgroups and the plugins' logs are
        // named after the job, and other clusters may run at the same time.
        let first_job_id = 1000 + (std::process::id() % 20000) * 1000;
        let text = format!(
            "# Written by cder-tests: a cluster of network namespaces.\n\
             ClusterName={tag}\n\
             SlurmctldHost=head({head})\n\
             SlurmctldPort={CTLD_PORT}\n\
             SlurmdPort={SLURMD_PORT}\n\
             {SLURM_CONF_COMMON}\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             FirstJobId={first_job_id}\n\
             StateSaveLocation={state}\n\
             SlurmdSpoolDir=/run/slurmd\n\
             SlurmctldPidFile=/run/slurmctld.pid\n\
             SlurmdPidFile=/run/slurmd.pid\n\
             SlurmctldLogFile=/run/slurmctld.log\n\
             SlurmdLogFile=/run/slurmd.log\n\
             PluginDir={SLURM_PLUGIN_DIR}:{plugins}\n\
             PlugStackConfig={plugstack}\n\
             JobSubmitPlugins=cder\n\
             SlurmdTimeout=30\n\
             {extra}\n\
             {nodes}\
             PartitionName=debug Nodes={list} Default=YES MaxTime=INFINITE State=UP\n",
            tag = self.tag,
            head = self.head.addr,
            state = d.join("state").display(),
            plugins = d.join("plugins").display(),
            plugstack = d.join("plugstack.conf").display(),
            extra = c.extra_slurm_conf,
            list = names.join(","),
        );
        std::fs::write(self.slurm_conf(), text).map_err(|e| e.to_string())?;
        std::fs::write(d.join("gres.conf"), gres).map_err(|e| e.to_string())
    }

    /// Rewrites plugstack.conf (read anew by every srun and slurmstepd):
    /// the plugin on each host talks to that host's cderd.
    pub fn set_plugstack(&self, args: &[String]) -> Result<(), String> {
        let registry =
            if self.config.registry { format!(" config={}", self.registry_config().display()) } else { String::new() };
        let text = format!(
            "required {}/plugins/spank_cder.so socket=/run/cder/cderd.sock{registry} {}\n",
            self.dir().display(),
            args.join(" ")
        );
        std::fs::write(self.dir().join("plugstack.conf"), text).map_err(|e| e.to_string())
    }

    /// Empties plugstack.conf: no cder on any host (the reference side of
    /// a benchmark); [`Self::set_plugstack`] loads the plugin again.
    pub fn disable_spank(&self) -> Result<(), String> {
        std::fs::write(self.dir().join("plugstack.conf"), "").map_err(|e| e.to_string())
    }

    /// The fake GPUs and cderd's config of worker `i`.
    fn write_worker(&self, i: usize) -> Result<(), String> {
        let w = &self.workers[i];
        let gpu_dir = w.run_dir().join("gpu");
        std::fs::create_dir_all(&gpu_dir).map_err(|e| e.to_string())?;
        sh("chmod", &["0755", &gpu_dir.to_string_lossy()])?;
        let mut t = format!(
            "[node]\nsocket = \"/run/cder/cderd.sock\"\nstate_dir = \"/run/cder/state\"\n\n\
             [node.enforcement]\n# Two hosts hold groups for the same job: each needs a parent of its own.\ncgroup_parent = \"{}-{}\"\n\n\
             [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
            self.tag, w.name
        );
        for g in 0..self.config.gpus {
            make_fake_gpu(&gpu_dir.join(format!("gpu{g}")), g)?;
            let _ = write!(
                t,
                "\n[[cder.device]]\nindex = {g}\nuuid = \"GPU-00000000-0000-4000-8000-0000{:04}{:04}\"\nmodel = \"Fake Tesla K20m\"\nmemory_mib = 4800\npath = \"/run/gpu/gpu{g}\"\n",
                i + 1,
                g
            );
        }
        std::fs::write(w.run_dir().join("cder/cder.toml"), t).map_err(|e| e.to_string())
    }

    /// Starts cderd on worker `i` (again), waiting for its socket: a
    /// [`cder_testkit::TestNode`] run through `nsenter` into the host.
    pub fn start_cderd(&mut self, i: usize) -> Result<(), String> {
        let bin = artifacts()?.cderd;
        let w = &mut self.workers[i];
        let _ = std::fs::remove_file(w.cderd_socket());
        let holder = w.holder_pid().to_string();
        let mut node =
            cder_testkit::TestNode::new(&bin, "/run/cder/cder.toml", w.cderd_socket(), w.run_dir().join("cderd.out"))
                .wrapper("nsenter", ["-t", &holder, "-n", "-m", "-u", "--"])
                .keep_rust_log();
        node.try_start(Duration::from_secs(20)).map_err(|e| format!("cderd on {}: {e}\n{}", w.name, w.logs()))?;
        w.cderd = Some(node);
        Ok(())
    }

    /// Stops cderd on worker `i` (SIGKILL) and removes its socket.
    pub fn stop_cderd(&mut self, i: usize) {
        let w = &mut self.workers[i];
        w.kill("cderd");
        let _ = std::fs::remove_file(w.cderd_socket());
    }

    /// munged and cder-registryd on the head, listening on its address.
    fn start_registry(&mut self) -> Result<(), String> {
        let munged = Munged::start()?;
        let bin = crate::vgpgpu::binary("cder-registry", "cder-registryd")?;
        let d = self.dir().join("registry");
        std::fs::create_dir_all(&d).map_err(|e| e.to_string())?;
        let url = format!("http://{}:{REGISTRY_PORT}", self.head.addr);
        let text = format!(
            "[registry]\nurl = \"{url}\"\nlisten = \"{}:{REGISTRY_PORT}\"\nstate_dir = \"{}\"\nvcl_dir = \"{}\"\nmunge_socket = \"{}\"\n",
            self.head.addr,
            d.join("state").display(),
            d.join("vcl").display(),
            munged.socket().display()
        );
        std::fs::write(self.registry_config(), text).map_err(|e| e.to_string())?;
        self.munged = Some(munged);
        let mut cmd = self.head.command(&bin.to_string_lossy());
        cmd.arg("--config").arg(self.registry_config());
        self.head.spawn("registryd", cmd)?;
        let serving = cder_testkit::try_wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
            if self.registry_query("total").is_ok() {
                return Ok(Some(()));
            }
            if let Some(why) = self.head.exited() {
                return Err(format!("{why}\n{}", self.head.logs()));
            }
            Ok(None)
        })?;
        serving.ok_or_else(|| format!("cder-registryd not serving on {url} after 30 s\n{}", self.head.logs()))
    }

    /// The registry's config file (`[registry]` only).
    pub fn registry_config(&self) -> PathBuf {
        self.dir().join("registry/cder.toml")
    }

    /// `cderctl registry query NAME` on the head: the number it prints.
    pub fn registry_query(&self, name: &str) -> Result<u32, String> {
        let cderctl = crate::vgpgpu::binary("cderctl", "cderctl")?;
        let out = self
            .head
            .command(&cderctl.to_string_lossy())
            .arg("--config")
            .arg(self.registry_config())
            .args(["registry", "query", name])
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!("cderctl registry query {name}: {}", String::from_utf8_lossy(&out.stderr)));
        }
        text.trim().parse().map_err(|_| format!("cderctl registry query {name} printed {text:?}"))
    }

    /// On each named worker, one pass of `cder-vgpgpu-factory --once` run
    /// in that host: it starts `cder-test-vgpgpu-backend` (a stand-in for
    /// an rCUDA/VCL server) for each of `gpus` devices (UUIDs
    /// `GPU-<host>-<index>`), listening on the host's address, and
    /// registers them with the head's registry.
    pub fn start_backends(&self, hosts: &[(&str, u32)]) -> Result<(), String> {
        let backend = crate::vgpgpu::binary("cder-tests", "cder-test-vgpgpu-backend")?;
        let factory = crate::vgpgpu::binary("cder-registry", "cder-vgpgpu-factory")?;
        for (name, gpus) in hosts {
            let w = self.worker(name);
            let dir = w.dir.join("vgpgpu");
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let uuids: Vec<String> = (0..*gpus).map(|i| format!("GPU-{name}-{i}")).collect();
            let devices: Vec<(u32, &str)> = uuids.iter().enumerate().map(|(i, u)| (i as u32, u.as_str())).collect();
            let config =
                crate::vgpgpu::node_config_in(&self.registry_config(), &dir, &backend, &w.addr, "nvidia", &devices)?;
            let out = w
                .command(&factory.to_string_lossy())
                .arg("--config")
                .arg(&config)
                .arg("--once")
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(format!(
                    "cder-vgpgpu-factory on {name} exited {}: {}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        Ok(())
    }

    fn wait_idle(&mut self, timeout: Duration) -> Result<(), String> {
        let mut last = String::new();
        let idle = cder_testkit::try_wait_for(timeout, Duration::from_millis(250), || {
            for h in std::iter::once(&mut self.head).chain(self.workers.iter_mut()) {
                if let Some(why) = h.exited() {
                    return Err(format!("{why} while starting\n{}", self.logs()));
                }
            }
            if let Ok(out) = self.run("sinfo", &["-h", "-N", "-o", "%N %T"]) {
                last = String::from_utf8_lossy(&out.stdout).trim().to_string();
                // -N lists a node once per partition it is in.
                let idle: std::collections::BTreeSet<&str> = last.lines().filter(|l| l.ends_with(" idle")).collect();
                let idle = idle.len();
                if idle == self.workers.len() {
                    return Ok(Some(()));
                }
            }
            Ok(None)
        })?;
        if idle.is_some() {
            return Ok(());
        }
        Err(format!("the workers did not all become idle within {timeout:?} (last {last:?})\n{}", self.logs()))
    }

    /// The temp dir everything lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The cluster's one slurm.conf.
    pub fn slurm_conf(&self) -> PathBuf {
        self.dir().join("slurm.conf")
    }

    /// The worker called `name`.
    pub fn worker(&self, name: &str) -> &Host {
        self.workers.iter().find(|w| w.name == name).unwrap_or_else(|| panic!("no worker {name}"))
    }

    /// The index in [`Self::workers`] of the worker called `name`.
    pub fn worker_index(&self, name: &str) -> usize {
        self.workers.iter().position(|w| w.name == name).unwrap_or_else(|| panic!("no worker {name}"))
    }

    /// The nodes SLURM gave a job (`scontrol show hostnames` of its NodeList).
    pub fn job_nodes(&self, job: &JobInfo) -> Result<Vec<String>, String> {
        let list = job.fields.get("NodeList").ok_or_else(|| format!("job {} has no NodeList", job.id))?;
        Ok(self.scontrol(&["show", "hostnames", list])?.lines().map(str::to_string).collect())
    }

    /// Runs `program` with `args` in worker `name` with `SLURM_CONF` set
    /// (e.g. `cderctl reconcile --from slurm` as the node runs it).
    pub fn on_worker(&self, name: &str, program: &str, args: &[&str]) -> Result<std::process::Output, String> {
        self.worker(name)
            .command(program)
            .args(args)
            .env("SLURM_CONF", self.slurm_conf())
            .output()
            .map_err(|e| format!("{program} on {name}: {e}"))
    }

    /// Every network namespace of this cluster, the switch's included.
    pub fn namespaces(&self) -> Vec<String> {
        self.switch
            .iter()
            .cloned()
            .chain(std::iter::once(&self.head).chain(&self.workers).map(|h| h.netns.clone()))
            .collect()
    }

    /// Every process in this cluster's host namespaces, holders included.
    pub fn pids(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        for h in std::iter::once(&self.head).chain(&self.workers) {
            if let Ok(text) = sh("ip", &["netns", "pids", &h.netns]) {
                pids.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
        pids
    }
}

/// True for a process that has exited and waits for its parent to reap it.
pub fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
}

impl SlurmClient for Cluster {
    /// Client commands run on the head.
    fn command(&self, program: &str) -> Command {
        let mut c = self.head.command(program);
        c.env("SLURM_CONF", self.slurm_conf()).current_dir(self.jobs_dir());
        c
    }

    fn jobs_dir(&self) -> PathBuf {
        self.dir().join("jobs")
    }

    fn logs(&self) -> String {
        std::iter::once(&self.head).chain(&self.workers).map(Host::logs).collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.head.daemons.iter().any(|(n, _)| n == "slurmctld") {
            self.cancel_all();
        }
        for h in self.workers.iter_mut().chain(std::iter::once(&mut self.head)) {
            h.cderd = None;
            for (_, mut c) in h.daemons.drain(..) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        // What is left (job steps, fake backends, the holders) was started
        // in these namespaces by this cluster.
        // Repeated: a step may fork between listing and killing.
        // After 10 s the namespaces are deleted with whatever is left.
        let _ = cder_testkit::wait_for_value(Duration::from_secs(10), Duration::from_millis(50), || {
            let pids: Vec<i32> = self.pids().into_iter().filter(|p| !is_zombie(*p)).collect();
            for pid in &pids {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).stderr(Stdio::null()).status();
            }
            pids.is_empty().then_some(())
        });
        for h in self.workers.iter_mut().chain(std::iter::once(&mut self.head)) {
            if let Some(mut c) = h.holder.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            let _ = sh("ip", &["netns", "del", &h.netns]);
        }
        if let Some(s) = self.switch.take() {
            let _ = sh("ip", &["netns", "del", &s]);
        }
        for root in ["/sys/fs/cgroup/devices", "/sys/fs/cgroup/unified"] {
            for w in &self.workers {
                let parent = Path::new(root).join(format!("{}-{}", self.tag, w.name));
                if let Ok(entries) = std::fs::read_dir(&parent) {
                    for e in entries.flatten().filter(|e| e.path().is_dir()) {
                        let _ = std::fs::remove_dir(e.path());
                    }
                }
                let _ = std::fs::remove_dir(&parent);
            }
        }
        if std::env::var_os("CDER_KEEP_TMP").is_some() {
            eprintln!("kept {}", self.dir.path().display());
            std::mem::forget(std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir")));
        }
    }
}
