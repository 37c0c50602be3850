//! What a hostile user of a node can do to stall a root daemon, made
//! reproducible for the tests (docs/security.md, issue 44).
//!
//! [`StalledFuse`] is a FUSE file system whose server answers the
//! kernel's `INIT` and then reads every request without ever answering:
//! a user can run one with Debian's setuid `fusermount3`. Anything that
//! follows a path or a descriptor into it (`stat`, `open`, a read) sleeps
//! until the server goes away; once the request has reached the server,
//! the sleeper is past `SIGKILL` too (the kernel waits uninterruptibly for
//! a request it has handed out). Dropping the [`StalledFuse`] closes the
//! device, which aborts the connection and wakes every sleeper with
//! `ENOTCONN`, then detaches the mount.
//!
//! The tests mount it as root with `allow_other` and the hostile user's
//! uid, which is what `fusermount3` does for a user when the admin allows
//! `user_allow_other`; without it, root's own accesses would be refused
//! rather than stalled, and the test would prove nothing.

use std::ffi::CString;
use std::io::{Error, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `FUSE_INIT`'s opcode.
const FUSE_INIT: u32 = 26;
/// The kernel reads requests into a buffer of at least this size.
const READ_BUFFER: usize = 1 << 17;

/// A mounted FUSE file system that never answers (see the module docs).
#[derive(Debug)]
pub struct StalledFuse {
    mountpoint: PathBuf,
    device: Option<OwnedFd>,
    server: Option<std::thread::JoinHandle<()>>,
    seen: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl StalledFuse {
    /// Mounts it at `mountpoint` (created if missing) for `uid`/`gid`,
    /// answers `INIT`, and starts the server thread that swallows every
    /// later request. Needs root and `/dev/fuse`.
    pub fn mount(mountpoint: &Path, uid: u32, gid: u32) -> Result<StalledFuse> {
        std::fs::create_dir_all(mountpoint)?;
        let path = CString::new("/dev/fuse").expect("no NUL");
        // SAFETY: a plain open(2) of a NUL-terminated path.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor this function just opened.
        let device = unsafe { OwnedFd::from_raw_fd(raw) };
        let target = CString::new(mountpoint.as_os_str().as_bytes()).map_err(Error::other)?;
        let options =
            CString::new(format!("fd={},rootmode=40000,user_id={uid},group_id={gid},allow_other", device.as_raw_fd()))
                .expect("no NUL");
        let (source, fstype) = (CString::new("cder-stalled").expect("no NUL"), CString::new("fuse").expect("no NUL"));
        // SAFETY: every pointer is a NUL-terminated string that outlives the call.
        let mounted = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                options.as_ptr().cast(),
            )
        };
        if mounted != 0 {
            return Err(Error::last_os_error());
        }
        let mut fuse = StalledFuse {
            mountpoint: mountpoint.to_path_buf(),
            device: Some(device),
            server: None,
            seen: Default::default(),
            stop: Default::default(),
        };
        let fd = fuse.device.as_ref().map(AsRawFd::as_raw_fd).expect("just set");
        answer_init(fd)?;
        // Reads (and drops) every later request until the device is closed.
        let (seen, stop) = (std::sync::Arc::clone(&fuse.seen), std::sync::Arc::clone(&fuse.stop));
        fuse.server = Some(std::thread::spawn(move || {
            let mut buf = vec![0u8; READ_BUFFER];
            // Polls, so that the thread sees the stop and lets go of the
            // device: a read in progress keeps the connection alive.
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let mut poll = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one pollfd, owned here.
                match unsafe { libc::poll(&mut poll, 1, 50) } {
                    0 => continue,
                    n if n < 0 => continue,
                    _ if poll.revents & libc::POLLIN == 0 => return,
                    _ => {}
                }
                // SAFETY: reading into a buffer of its own length.
                let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    match Error::last_os_error().raw_os_error() {
                        Some(libc::EINTR | libc::ENOENT | libc::EAGAIN) => continue,
                        _ => return,
                    }
                }
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }));
        Ok(fuse)
    }

    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Starts, as `uid`/`gid`, a process that holds the mount's root open
    /// (an `O_PATH` descriptor: opening it sends the server nothing) and
    /// sleeps: following that descriptor with `stat` stalls. The
    /// mountpoint's parents must be searchable by `uid`.
    pub fn hold_descriptor(&self, uid: u32, gid: u32) -> Result<Child> {
        let code = "import os,sys,time; os.open(sys.argv[1], os.O_PATH); print('held', flush=True); time.sleep(3600)";
        let mut python = Command::new("python3");
        python.args(["-c", code]).arg(&self.mountpoint).stdout(Stdio::piped());
        let mut child = as_user(&mut python, uid, gid).spawn()?;
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)?;
        if line.trim() != "held" {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::other(format!("the holder did not start: {line:?}")));
        }
        Ok(child)
    }

    /// `stat` of a file inside the mount: a command that stalls.
    pub fn stat_command(&self) -> Command {
        let mut stat = Command::new("stat");
        stat.arg(self.mountpoint.join("never")).stdout(Stdio::null()).stderr(Stdio::null());
        stat
    }

    /// Spawns `cmd` (which must touch the mount, e.g. [`Self::stat_command`]
    /// run as the user in their job) and returns once its request has
    /// reached the server: it sleeps until this is dropped, killable until
    /// a `SIGKILL` arrives, and from then on uninterruptibly
    /// ([`make_unkillable`]).
    pub fn stall(&self, cmd: &mut Command) -> Result<Child> {
        let before = self.requests();
        let child = cmd.spawn()?;
        let until = Instant::now() + Duration::from_secs(10);
        while self.requests() == before {
            if Instant::now() > until {
                return Err(Error::other(format!("pid {} sent the stalled mount nothing in 10 s", child.id())));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(child)
    }

    /// As `uid`/`gid`, a process in uninterruptible sleep inside the mount.
    pub fn stuck_process(&self, uid: u32, gid: u32) -> Result<Child> {
        let mut child = self.stall(as_user(&mut self.stat_command(), uid, gid))?;
        make_unkillable(&mut child)?;
        Ok(child)
    }

    /// Requests the server has read (and will never answer).
    pub fn requests(&self) -> u64 {
        self.seen.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Sends `SIGKILL` to `child`, stalled by [`StalledFuse::stall`]: its
/// request is with the server, so it sleeps on in `D` state.
pub fn make_unkillable(child: &mut Child) -> Result<()> {
    child.kill()?;
    wait_for_d_state(child.id(), Duration::from_secs(10))
}

impl Drop for StalledFuse {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
        // Closing the device aborts the connection: every sleeper wakes.
        drop(self.device.take());
        if let Ok(target) = CString::new(self.mountpoint.as_os_str().as_bytes()) {
            // SAFETY: a NUL-terminated path.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// `cmd` run as `uid`/`gid` (std drops root's supplementary groups).
fn as_user(cmd: &mut Command, uid: u32, gid: u32) -> &mut Command {
    cmd.uid(uid).gid(gid)
}

/// Waits until process `pid` sleeps uninterruptibly (`State: D`).
pub fn wait_for_d_state(pid: u32, within: Duration) -> Result<()> {
    let until = Instant::now() + within;
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        if status.lines().any(|l| l.starts_with("State:") && l.contains("D (disk sleep)")) {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(Error::other(format!("pid {pid} is not in D state after {within:?}")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads the kernel's `INIT` request and answers it (protocol 7.31), so
/// that later requests are handed to the server (and their callers become
/// unkillable) instead of waiting for the connection to start.
fn answer_init(fd: i32) -> Result<()> {
    let mut buf = vec![0u8; READ_BUFFER];
    // SAFETY: reading into a buffer of its own length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(Error::last_os_error());
    }
    let word = |at: usize| u32::from_ne_bytes(buf[at..at + 4].try_into().expect("4 bytes"));
    if n < 40 || word(4) != FUSE_INIT {
        return Err(Error::other("the first FUSE request is not INIT"));
    }
    let unique = u64::from_ne_bytes(buf[8..16].try_into().expect("8 bytes"));
    // fuse_out_header (16 bytes) + fuse_init_out (64 bytes).
    let mut reply = Vec::with_capacity(80);
    reply.extend_from_slice(&80u32.to_ne_bytes());
    reply.extend_from_slice(&0i32.to_ne_bytes());
    reply.extend_from_slice(&unique.to_ne_bytes());
    reply.extend_from_slice(&7u32.to_ne_bytes()); // major
    reply.extend_from_slice(&31u32.to_ne_bytes()); // minor
    reply.extend_from_slice(&0u32.to_ne_bytes()); // max_readahead
    reply.extend_from_slice(&0u32.to_ne_bytes()); // flags
    reply.extend_from_slice(&16u16.to_ne_bytes()); // max_background
    reply.extend_from_slice(&12u16.to_ne_bytes()); // congestion_threshold
    reply.extend_from_slice(&4096u32.to_ne_bytes()); // max_write
    reply.extend_from_slice(&1u32.to_ne_bytes()); // time_gran
    reply.resize(80, 0); // max_pages, map_alignment, flags2, unused
                         // SAFETY: writing a buffer of its own length.
    let written = unsafe { libc::write(fd, reply.as_ptr().cast(), reply.len()) };
    if written != reply.len() as isize {
        return Err(Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stalled_mount_holds_its_sleepers_until_dropped() {
        if !crate::require_root("mounting FUSE") || !crate::require_programs(&["/dev/fuse", "python3", "stat"]) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let fuse = StalledFuse::mount(&dir.path().join("mnt"), 65534, 65534).unwrap();
        let mut stuck = fuse.stuck_process(65534, 65534).unwrap();
        // Past SIGKILL: the request has been handed to the server.
        stuck.kill().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(stuck.try_wait().unwrap().is_none(), "a D-state process ended on SIGKILL");
        let mut holder = fuse.hold_descriptor(65534, 65534).unwrap();
        drop(fuse);
        let status = stuck.wait().unwrap();
        assert!(!status.success());
        let _ = holder.kill();
        let _ = holder.wait();
    }
}
