//! NVIDIA MPS on shared GPUs (`[node.mps] enabled`).
//!
//! One control daemon per GPU offered as shares, started when its first
//! sharer arrives: `nvidia-cuda-mps-control -d` with the GPU's UUID as
//! `CUDA_VISIBLE_DEVICES` and a pipe and log directory of its own, so each
//! GPU's clients reach only that GPU's daemon, and only its sharers reach
//! those directories (an ACL entry per uid, [`Mps::grant`]). Its default
//! active-thread percentage and pinned-memory limit are the largest
//! fraction any current sharer holds (shares / total); each job's
//! environment carries its own fraction, which the MPS client can only
//! lower below the server's. The daemon is told `quit` when the last sharer
//! leaves.
//!
//! MPS runs one user's server per GPU at a time: a second user's clients
//! would queue inside MPS until the first user's server is gone. cderd
//! refuses a sharer of another user while one user's jobs hold the GPU, as
//! a conflict (which `alloc` waits out for its `wait_ms`), with a message
//! that says why.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use cder_model::Mps as MpsConfig;

use crate::acl::Acl;

/// One GPU's sharer: job, uid, shares held, device total.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sharer {
    /// The job (as its key's text).
    pub job: String,
    /// Its uid.
    pub uid: u32,
    /// Shares it holds of the GPU.
    pub shares: u32,
    /// Shares the GPU is offered as.
    pub total: u32,
}

/// The limits a GPU's server gets, from its sharers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// `set_default_active_thread_percentage`.
    pub thread_percent: f64,
    /// `set_default_device_pinned_mem_limit 0 <MiB>M`.
    pub pinned_mib: u64,
}

/// A job's own limits for its environment: `shares` of `total` of a GPU of
/// `memory_mib`.
pub fn fraction(shares: u32, total: u32, memory_mib: u64) -> Limits {
    let total = total.max(1);
    let shares = shares.min(total);
    Limits {
        thread_percent: (f64::from(shares) * 100.0 / f64::from(total) * 10.0).floor() / 10.0,
        pinned_mib: memory_mib * u64::from(shares) / u64::from(total),
    }
}

/// The MPS layer of cderd: the control daemons it runs, by GPU UUID.
pub struct Mps {
    config: MpsConfig,
    /// GPU UUID → the uid whose jobs share it now (MPS serves one user).
    running: Mutex<HashMap<String, u32>>,
}

impl Mps {
    /// `None` unless `[node.mps] enabled`.
    pub fn new(config: &MpsConfig) -> Option<Mps> {
        config.enabled.then(|| Mps { config: config.clone(), running: Mutex::new(HashMap::new()) })
    }

    /// The GPU's pipe directory (`CUDA_MPS_PIPE_DIRECTORY`).
    pub fn pipe_dir(&self, uuid: &str) -> PathBuf {
        self.config.runtime_dir.join(uuid).join("pipe")
    }

    /// The GPU's log directory (`CUDA_MPS_LOG_DIRECTORY`).
    pub fn log_dir(&self, uuid: &str) -> PathBuf {
        self.config.runtime_dir.join(uuid).join("log")
    }

    /// Opens the GPU's pipe and log directories to exactly `uids`, its
    /// sharers now: cderd's own, mode 0700, with an ACL entry `r-x` per
    /// sharer (what 0755 gave every local user before). Whoever cannot
    /// search the pipe directory cannot reach the control daemon, nor ask
    /// it for a server of their own. Makes them when missing; with no
    /// sharer left, leaves them to cderd alone. cderd calls it under the
    /// ledger lock whenever a GPU's sharers change, so writes of one GPU's
    /// ACL come in the order its sharers were recorded.
    pub fn grant(&self, uuid: &str, uids: &BTreeSet<u32>) -> Result<(), String> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let top = self.config.runtime_dir.join(uuid);
        if uids.is_empty() && !top.exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&top).map_err(|e| format!("MPS: cannot make {}: {e}", top.display()))?;
        // Holds only the two below: every sharer passes through it.
        std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("MPS: chmod {}: {e}", top.display()))?;
        let acl = Acl {
            users: uids.iter().map(|&uid| (uid, crate::acl::READ | crate::acl::EXECUTE)).collect(),
            ..Acl::from_mode(0o700)
        };
        for dir in [self.pipe_dir(uuid), self.log_dir(uuid)] {
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => {}
                Err(e) => return Err(format!("MPS: cannot make {}: {e}", dir.display())),
            }
            // Root's whoever made it before (an older cderd made it 0755).
            if crate::sys::running_as_root() {
                std::os::unix::fs::chown(&dir, Some(0), Some(0))
                    .map_err(|e| format!("MPS: chown {}: {e}", dir.display()))?;
            }
            crate::acl::set(&dir, &acl).map_err(|e| format!("MPS: setting the ACL of {}: {e}", dir.display()))?;
        }
        Ok(())
    }

    /// Whether `uid` may share `uuid` now, given the GPU's other `sharers`:
    /// MPS serves one user per GPU at a time. The refusal's message.
    pub fn admits(&self, uuid: &str, uid: u32, sharers: &[Sharer]) -> Result<(), String> {
        match sharers.iter().find(|s| s.uid != uid) {
            Some(other) => Err(format!(
                "GPU {uuid} runs under MPS for uid {} (job {}): MPS serves one user's server per GPU at a time, \
                 so a job of uid {uid} cannot share it until that user's jobs leave",
                other.uid, other.job
            )),
            None => Ok(()),
        }
    }

    /// Brings the GPU's control daemon up (if it is not) and sets its
    /// limits for the `sharers` now holding it (`memory_mib`: the GPU's).
    pub fn arrive(&self, uuid: &str, memory_mib: u64, sharers: &[Sharer]) -> Result<(), String> {
        let Some(first) = sharers.first() else { return Ok(()) };
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if !running.contains_key(uuid) && !self.alive(uuid) {
            self.start(uuid)?;
        }
        running.insert(uuid.to_string(), first.uid);
        drop(running);
        self.set_limits(uuid, server_limits(sharers, memory_mib))
    }

    /// After a sharer left: `quit` when none is left, else the limits of
    /// those that remain.
    pub fn leave(&self, uuid: &str, memory_mib: u64, remaining: &[Sharer]) -> Result<(), String> {
        if !remaining.is_empty() {
            return self.set_limits(uuid, server_limits(remaining, memory_mib));
        }
        self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(uuid);
        if !self.alive(uuid) {
            return Ok(());
        }
        self.command(uuid, "quit").map(|_| tracing::info!(device = %uuid, "MPS control daemon stopped"))
    }

    /// The job environment's MPS variables for its shares of `uuid`.
    pub fn job_env(&self, uuid: &str, shares: u32, total: u32, memory_mib: u64) -> BTreeMap<String, String> {
        let own = fraction(shares, total, memory_mib);
        BTreeMap::from([
            ("CUDA_MPS_PIPE_DIRECTORY".to_string(), self.pipe_dir(uuid).display().to_string()),
            ("CUDA_MPS_LOG_DIRECTORY".to_string(), self.log_dir(uuid).display().to_string()),
            ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_string(), format!("{:.1}", own.thread_percent)),
            ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_string(), format!("0={}M", own.pinned_mib)),
        ])
    }

    fn alive(&self, uuid: &str) -> bool {
        self.pipe_dir(uuid).join("control").exists() && self.command(uuid, "get_server_list").is_ok()
    }

    fn start(&self, uuid: &str) -> Result<(), String> {
        let (pipe, log) = (self.pipe_dir(uuid), self.log_dir(uuid));
        for dir in [&pipe, &log] {
            // [`Mps::grant`] made them, open to the sharers, under the ledger lock.
            if !dir.is_dir() {
                return Err(format!("MPS: {} is missing: its sharers were not granted it", dir.display()));
            }
        }
        let out = self
            .control(uuid)
            .arg("-d")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("MPS: cannot run {}: {e}", self.config.mps_control.display()))?;
        if !out.status.success() {
            return Err(format!(
                "MPS: {} -d for {uuid} failed ({}): {}",
                self.config.mps_control.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        // `-d` returns once it has forked; its pipe may come a moment later.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !pipe.join("control").exists() {
            if std::time::Instant::now() >= deadline {
                return Err(format!("MPS: the control daemon for {uuid} made no {}/control in 10 s", pipe.display()));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        tracing::info!(device = %uuid, pipe = %pipe.display(), "MPS control daemon started");
        Ok(())
    }

    fn set_limits(&self, uuid: &str, limits: Limits) -> Result<(), String> {
        self.command(uuid, &format!("set_default_active_thread_percentage {:.1}", limits.thread_percent))?;
        self.command(uuid, &format!("set_default_device_pinned_mem_limit 0 {}M", limits.pinned_mib))?;
        // The defaults reach servers started after; a running server is set too.
        let servers = self.command(uuid, "get_server_list")?;
        for pid in servers.split_whitespace().filter(|p| p.chars().all(|c| c.is_ascii_digit())) {
            self.command(uuid, &format!("set_active_thread_percentage {pid} {:.1}", limits.thread_percent))?;
            self.command(uuid, &format!("set_device_pinned_mem_limit {pid} 0 {}M", limits.pinned_mib))?;
        }
        tracing::info!(device = %uuid, thread_percent = limits.thread_percent, pinned_mib = limits.pinned_mib, "MPS limits set");
        Ok(())
    }

    /// One command on the control program's stdin; its answer.
    fn command(&self, uuid: &str, line: &str) -> Result<String, String> {
        let mut child = self
            .control(uuid)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("MPS: cannot run {}: {e}", self.config.mps_control.display()))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = writeln!(stdin, "{line}");
        }
        let out = child.wait_with_output().map_err(|e| format!("MPS: {line}: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() {
            return Err(format!("MPS: {line} for {uuid} failed ({}): {text}", out.status));
        }
        Ok(text)
    }

    fn control(&self, uuid: &str) -> Command {
        let mut c = Command::new(&self.config.mps_control);
        c.env("CUDA_VISIBLE_DEVICES", uuid)
            .env("CUDA_MPS_PIPE_DIRECTORY", self.pipe_dir(uuid))
            .env("CUDA_MPS_LOG_DIRECTORY", self.log_dir(uuid));
        c
    }

    /// Where the control program lives (for messages).
    pub fn control_path(&self) -> &Path {
        &self.config.mps_control
    }
}

/// The server's limits: the largest fraction any sharer holds (all are one
/// user's jobs; each job's environment lowers its own client to its share).
pub fn server_limits(sharers: &[Sharer], memory_mib: u64) -> Limits {
    let best = sharers.iter().max_by_key(|s| u64::from(s.shares) * 1_000_000 / u64::from(s.total.max(1)));
    best.map_or(Limits { thread_percent: 100.0, pinned_mib: memory_mib }, |s| fraction(s.shares, s.total, memory_mib))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_follow_the_shares() {
        assert_eq!(fraction(2, 4, 40_960), Limits { thread_percent: 50.0, pinned_mib: 20_480 });
        assert_eq!(fraction(1, 3, 81_559).thread_percent, 33.3);
        let s = |job: &str, shares| Sharer { job: job.into(), uid: 1000, shares, total: 4 };
        assert_eq!(server_limits(&[s("a", 1), s("b", 3)], 4000), Limits { thread_percent: 75.0, pinned_mib: 3000 });
        let mps = Mps::new(&MpsConfig { enabled: true, ..Default::default() }).unwrap();
        assert!(mps.admits("GPU-x", 1000, &[s("a", 1)]).is_ok());
        let refused = mps.admits("GPU-x", 1001, &[s("a", 1)]).unwrap_err();
        assert!(refused.contains("one user's server per GPU") && refused.contains("uid 1000"), "{refused}");
    }
}
