//! The process at the other end of a connection: who it is (SO_PEERCRED),
//! and what tells it from a later process given the same pid, so that
//! `confine` moves the process that asks and no other.

use std::os::unix::net::UnixStream;
use std::path::Path;

/// Who sent a request, from SO_PEERCRED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The caller's uid: root and operators may do everything, others
    /// only read their own jobs.
    pub uid: u32,
    /// The caller's pid: `confine` moves this process into the job's cgroup.
    pub pid: i32,
    /// What tells that process from a later one with its pid (see
    /// [`AskingProcess`]); `None` when it was gone at once,
    /// or for cderd's own requests, which never `confine`.
    pub process: Option<ProcessIdentity>,
}

/// What tells the process that connected from a later one given its pid,
/// so that `confine` moves the process that asks and no other (the pid from
/// SO_PEERCRED is the one it had at `connect()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// Its start time in clock ticks after boot (`/proc/PID/stat` field
    /// 22); not read where the pidfs inode tells already.
    pub start_time: Option<u64>,
    /// Its pidfs inode (Linux 6.9+), which no other process of this boot has.
    pub pidfs_inode: Option<u64>,
}

impl ProcessIdentity {
    /// The identity of the process that connected `stream` as `pid`; `None`
    /// when it has already gone. SO_PEERPIDFD's pidfd is the connecting
    /// process's even after its pid was reused: its pidfs inode identifies
    /// it, or, without pidfs, it proves the start time read from /proc is its.
    pub fn at_connect(stream: &UnixStream, pid: i32) -> Option<ProcessIdentity> {
        let start_time = |pid| proc_identity(Path::new("/proc"), pid).ok().map(|(start, _)| start);
        let Ok(pidfd) = crate::sys::peer_pidfd(stream) else {
            // Before Linux 6.5: the pid may already be another's; the uid
            // and start time are still checked again at `confine`.
            return Some(ProcessIdentity { start_time: Some(start_time(pid)?), pidfs_inode: None });
        };
        if let Some(inode) = crate::sys::pidfs_inode(&pidfd) {
            return Some(ProcessIdentity { start_time: None, pidfs_inode: Some(inode) });
        }
        let alive = || crate::sys::pidfd_pid(&pidfd) == Some(pid);
        if !alive() {
            return None;
        }
        let start_time = start_time(pid)?;
        alive().then_some(ProcessIdentity { start_time: Some(start_time), pidfs_inode: None })
    }
}

/// `(start time, effective uid)` of `pid` under the procfs at `proc`.
pub fn proc_identity(proc: &Path, pid: i32) -> std::io::Result<(u64, u32)> {
    let dir = proc.join(pid.to_string());
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {what}", dir.display()));
    let stat = std::fs::read_to_string(dir.join("stat"))?;
    // The command name (field 2) may hold spaces and ')': fields 3… follow the last ')'.
    let rest = stat.rsplit_once(')').ok_or_else(|| bad("no ')' in stat"))?.1;
    let start_time =
        rest.split_whitespace().nth(19).and_then(|f| f.parse().ok()).ok_or_else(|| bad("no start time in stat"))?;
    let status = std::fs::read_to_string(dir.join("status"))?;
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| bad("no effective uid in status"))?;
    Ok((start_time, euid))
}

/// Whether `pid` under `proc` still runs as `uid` and, where `identity`
/// has the start time recorded at connect, started then.
pub fn same_process(proc: &Path, pid: i32, uid: u32, identity: &ProcessIdentity) -> Result<(), String> {
    match proc_identity(proc, pid) {
        Ok((start_time, _)) if identity.start_time.is_some_and(|t| t != start_time) => Err(format!(
            "pid {pid} is no longer the process that connected (it started at tick {start_time}, not {})",
            identity.start_time.unwrap_or_default()
        )),
        Ok((_, euid)) if euid == uid => Ok(()),
        Ok((_, euid)) => Err(format!("pid {pid} now runs as uid {euid}, not uid {uid} that connected")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!("pid {pid}, which connected, has exited")),
        Err(e) => Err(format!("cannot read pid {pid} in /proc: {e}")),
    }
}

/// The process that asks to be confined, checked to be the one that
/// connected; held across the move into the job's groups.
pub struct AskingProcess {
    pid: i32,
    uid: u32,
    identity: ProcessIdentity,
    /// A pidfd taken at the check: while it shows the pid, the pid was never free.
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl AskingProcess {
    /// Checks that `caller`'s pid is still the process that connected: its
    /// pidfs inode where the kernel has pidfs, its uid and start time always.
    pub fn confirm(caller: &Caller) -> Result<AskingProcess, String> {
        let Some(identity) = caller.process else {
            return Err(format!(
                "the process that connected (pid {}) had gone before cderd could identify it",
                caller.pid
            ));
        };
        let pid = caller.pid;
        let pidfd = match crate::sys::pidfd_open(pid) {
            Ok(fd) => Some(fd),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                return Err(format!("pid {pid}, which connected, has exited"))
            }
            Err(_) => None,
        };
        if let Some(recorded) = identity.pidfs_inode {
            if pidfd.as_ref().and_then(crate::sys::pidfs_inode) != Some(recorded) {
                return Err(format!("pid {pid} is no longer the process that connected"));
            }
        }
        same_process(Path::new("/proc"), pid, caller.uid, &identity)?;
        let asking = AskingProcess { pid, uid: caller.uid, identity, pidfd };
        asking.still_there()?;
        Ok(asking)
    }

    /// After the move: the pid still belongs to the process checked, so the
    /// move reached it and no other.
    pub fn still_there(&self) -> Result<(), String> {
        match &self.pidfd {
            Some(fd) if crate::sys::pidfd_pid(fd) == Some(self.pid) => Ok(()),
            Some(_) => Err(format!("pid {} exited while it was being confined", self.pid)),
            None => same_process(Path::new("/proc"), self.pid, self.uid, &self.identity),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_start_time_and_uid_tell_processes_apart() {
        let proc = tempfile::tempdir().unwrap();
        let at = proc.path().join("42");
        std::fs::create_dir(&at).unwrap();
        // A command name with spaces and ')' must not shift the fields.
        let stat = |start: u64| {
            format!("42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 {start} 1000 100 18446744073709551615\n")
        };
        std::fs::write(at.join("stat"), stat(777)).unwrap();
        std::fs::write(at.join("status"), "Name:\ta) b (c\nUid:\t1000\t1000\t1000\t1000\n").unwrap();
        assert_eq!(proc_identity(proc.path(), 42).unwrap(), (777, 1000));
        let recorded = ProcessIdentity { start_time: Some(777), pidfs_inode: None };
        assert_eq!(same_process(proc.path(), 42, 1000, &recorded), Ok(()));
        // The same uid, but the pid now names a later process.
        std::fs::write(at.join("stat"), stat(901)).unwrap();
        let e = same_process(proc.path(), 42, 1000, &recorded).unwrap_err();
        assert!(e.contains("no longer the process that connected"), "{e}");
        // The same start, another effective uid (a set-uid program was run).
        std::fs::write(at.join("stat"), stat(777)).unwrap();
        std::fs::write(at.join("status"), "Uid:\t1000\t0\t0\t0\n").unwrap();
        assert!(same_process(proc.path(), 42, 1000, &recorded).unwrap_err().contains("uid 0"));
        // Gone.
        assert!(same_process(proc.path(), 43, 1000, &recorded).unwrap_err().contains("has exited"));
        // Our own stat parses, and says we are us.
        let me = std::process::id() as i32;
        let (start, uid) = proc_identity(Path::new("/proc"), me).unwrap();
        assert_eq!(
            same_process(Path::new("/proc"), me, uid, &ProcessIdentity { start_time: Some(start), pidfs_inode: None }),
            Ok(())
        );
    }

    #[test]
    fn a_caller_that_has_exited_is_not_confirmed() {
        let (a, b) = UnixStream::pair().unwrap();
        let me = std::process::id() as i32;
        let uid = proc_identity(Path::new("/proc"), me).unwrap().1;
        let identity = ProcessIdentity::at_connect(&a, me).expect("we are alive");
        let caller = Caller { uid, pid: me, process: Some(identity) };
        AskingProcess::confirm(&caller).unwrap().still_there().unwrap();
        drop(b);
        // A child's identity, checked after it was reaped.
        let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
        let pid = child.id() as i32;
        let start_time = proc_identity(Path::new("/proc"), pid).unwrap().0;
        let pidfs_inode = crate::sys::pidfd_open(pid).ok().and_then(|fd| crate::sys::pidfs_inode(&fd));
        child.kill().unwrap();
        child.wait().unwrap();
        // Recorded either way, a reaped caller is refused.
        for identity in [
            ProcessIdentity { start_time: Some(start_time), pidfs_inode: None },
            ProcessIdentity { start_time: None, pidfs_inode },
        ] {
            let gone = Caller { uid, pid, process: Some(identity) };
            let e = AskingProcess::confirm(&gone).err().expect("a reaped caller is refused");
            assert!(e.contains(&pid.to_string()), "{e}");
        }
        assert!(AskingProcess::confirm(&Caller { process: None, ..caller }).is_err());
    }
}
