//! The few libc calls std does not offer: the peer's credentials of a Unix
//! socket (SO_PEERCRED), user-name lookup through NSS (from cder-ledger,
//! which the registry shares), waiting for SIGTERM
//! synchronously, and the three bpf(2) commands that device cgroups on
//! cgroup v2 need (load a program, attach it to a cgroup, count what is
//! attached).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Who is on the other end of a Unix socket, as the kernel says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// The peer's pid when it connected.
    pub pid: i32,
    /// Its effective uid: what authorization goes by.
    pub uid: u32,
    /// Its effective gid.
    pub gid: u32,
}

/// The credentials of the process that connected `stream`.
pub fn peer_cred(stream: &UnixStream) -> std::io::Result<PeerCred> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the fd is a live socket owned by `stream`; `cred` and `len` are
    // valid for writes and `len` holds the size of `cred`, as getsockopt requires.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(PeerCred { pid: cred.pid, uid: cred.uid, gid: cred.gid })
}

/// `SO_PEERPIDFD` (Linux 6.5+), asm-generic's number; not yet in libc.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64",
    target_arch = "x86",
    target_arch = "arm"
))]
const SO_PEERPIDFD: libc::c_int = 77;

/// A pidfd for the process that connected `stream`, taken by the kernel at
/// `connect()`: it refers to that process even once its pid is reused.
/// An error where the kernel has none (before 6.5: `ENOPROTOOPT`).
pub fn peer_pidfd(stream: &UnixStream) -> std::io::Result<OwnedFd> {
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64",
        target_arch = "x86",
        target_arch = "arm"
    ))]
    {
        let mut fd: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: the fd is a live socket owned by `stream`; `fd` and `len`
        // are valid for writes and `len` holds the size of `fd`.
        let rc = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERPIDFD,
                (&mut fd as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a successful SO_PEERPIDFD returns a new descriptor that
        // nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64",
        target_arch = "x86",
        target_arch = "arm"
    )))]
    {
        let _ = stream;
        Err(std::io::Error::from_raw_os_error(libc::ENOPROTOOPT))
    }
}

/// A pidfd for `pid` now (Linux 5.3+); `ESRCH` when no such process.
pub fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // or -1; no memory is passed.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a non-negative return is a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as libc::c_int) })
}

/// Sends SIGKILL to the process of `pidfd` (Linux 5.1+): never to another
/// process that has taken its pid since.
pub fn pidfd_kill(pidfd: &OwnedFd) -> std::io::Result<()> {
    // SAFETY: pidfd_send_signal takes a live descriptor, a signal, a null
    // siginfo and flags; no memory of ours is written.
    let rc = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), libc::SIGKILL, std::ptr::null::<u8>(), 0)
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(e);
        }
    }
    Ok(())
}

/// Whether the process of `pidfd` has exited (its descriptors are closed
/// by then): a pidfd polls readable once it has.
pub fn pidfd_exited(pidfd: &OwnedFd) -> bool {
    let mut poll = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd, owned here; a zero timeout never blocks.
    let n = unsafe { libc::poll(&mut poll, 1, 0) };
    n > 0 && poll.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
}

/// The pid a pidfd refers to, from `/proc/self/fdinfo` (`Pid:`); `None`
/// once that process has been reaped (the kernel writes -1) or where the
/// kernel does not say.
pub fn pidfd_pid(pidfd: &OwnedFd) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    let pid: i32 = text.lines().find_map(|l| l.strip_prefix("Pid:"))?.trim().parse().ok()?;
    (pid > 0).then_some(pid)
}

/// pidfs's `f_type` (Linux 6.9+), where every pidfd of one process has the
/// same inode and no two processes of a boot share one.
const PIDFS_MAGIC: i64 = 0x5049_4446;

/// The pidfs inode of `pidfd`; `None` on kernels without pidfs, whose
/// pidfds all share one anonymous inode.
pub fn pidfs_inode(pidfd: &OwnedFd) -> Option<u64> {
    // SAFETY: both structs are plain data, zeroed as valid initial values;
    // the fd is live and each pointer is valid for the call's write.
    unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        if libc::fstatfs(pidfd.as_raw_fd(), &mut fs) != 0 || fs.f_type as i64 != PIDFS_MAGIC {
            return None;
        }
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(pidfd.as_raw_fd(), &mut st) != 0 {
            return None;
        }
        Some(st.st_ino as u64)
    }
}

pub use cder_ledger::sys::uid_of_user;

/// Sets how many connections may wait to be accepted on `listener`
/// (listen(2) again on a listening socket changes only that). std asks for
/// the system's maximum (4096): a flood of a user's connections queued
/// ahead of root's would make root wait for every one of them.
pub fn set_backlog(listener: &std::os::unix::net::UnixListener, backlog: i32) -> std::io::Result<()> {
    // SAFETY: listen takes the listener's open descriptor and an integer.
    if unsafe { libc::listen(listener.as_raw_fd(), backlog) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether cderd runs as root (an ordinary user's, in tests, keeps its
/// directories its own and cannot raise a thread's priority back).
pub fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Sets the nice value of the calling thread alone (Linux keeps one per
/// thread): a user's connection is served at a lower CPU priority than the
/// batch system's, so a user's flood cannot starve root's requests.
pub fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid and setpriority take plain integers and touch no memory of ours.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice)
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Blocks SIGTERM and SIGINT in the calling thread and every thread it
/// starts afterwards, so that [`wait_for_termination`] can take them
/// synchronously. Call it first thing in `main`.
pub fn block_termination_signals() -> std::io::Result<()> {
    let set = termination_set();
    // SAFETY: `set` is an initialised sigset_t; a null old-set pointer is allowed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Waits until SIGTERM or SIGINT arrives (they must be blocked, see
/// [`block_termination_signals`]) and returns its number.
pub fn wait_for_termination() -> std::io::Result<i32> {
    let set = termination_set();
    let mut signal: libc::c_int = 0;
    // SAFETY: `set` is initialised and `signal` is valid for a write.
    let rc = unsafe { libc::sigwait(&set, &mut signal) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(signal)
}

fn termination_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the zeroed set; sigaddset adds valid
    // signal numbers to it. Neither can fail with these arguments.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

/// Sends SIGKILL to every process of the process group `pgid` (a batch
/// system command cderd started as its group's leader, and its children).
/// A group that is already gone (ESRCH) is not an error.
pub fn kill_process_group(pgid: u32) -> std::io::Result<()> {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else { return Ok(()) };
    if pgid <= 1 {
        return Ok(());
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; a
    // negative pid names the group, and pgid > 1 never names every process.
    let rc = unsafe { libc::kill(-pgid, libc::SIGKILL) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(e);
        }
    }
    Ok(())
}

/// A new inotify instance (close-on-exec, non-blocking), read through the
/// returned file.
pub fn inotify_new() -> std::io::Result<std::fs::File> {
    // SAFETY: plain syscall with constant flags.
    let raw = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a new descriptor nobody else owns.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) }))
}

/// Watches `dir` for `mask`'s events on `inotify`; the watch descriptor.
pub fn inotify_watch(inotify: &std::fs::File, dir: &std::path::Path, mask: u32) -> std::io::Result<i32> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: a live descriptor and a NUL-terminated path that outlives the call.
    let wd = unsafe { libc::inotify_add_watch(inotify.as_raw_fd(), path.as_ptr(), mask) };
    if wd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(wd)
}

/// Whether `fd` has something to read within `timeout` (poll(2)).
pub fn readable_within(fd: &impl AsRawFd, timeout: std::time::Duration) -> bool {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd, which lives across the call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    n > 0 && pfd.revents & libc::POLLIN != 0
}

/// Sends SIGKILL to `pid` (a process left in a released job's cgroup).
/// A process that is already gone (ESRCH) is not an error.
pub fn kill_process(pid: u32) -> std::io::Result<()> {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return Ok(()) };
    if pid <= 0 {
        return Ok(());
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; a
    // positive pid names one process, never a group.
    let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(e);
        }
    }
    Ok(())
}

/// One eBPF instruction as the kernel reads it (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BpfInsn {
    /// The opcode (class, size/source and operation bits).
    pub code: u8,
    /// `dst_reg:4, src_reg:4` as a C bitfield: see [`BpfInsn::new`].
    pub regs: u8,
    /// The jump or memory offset.
    pub off: i16,
    /// The immediate operand.
    pub imm: i32,
}

impl BpfInsn {
    /// An instruction with destination register `dst` and source `src`
    /// packed as the kernel's bitfield expects on this target.
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> BpfInsn {
        // C bitfields fill from the least significant bit on little-endian
        // targets and from the most significant on big-endian ones.
        #[cfg(target_endian = "little")]
        let regs = (dst & 0xf) | ((src & 0xf) << 4);
        #[cfg(target_endian = "big")]
        let regs = ((dst & 0xf) << 4) | (src & 0xf);
        BpfInsn { code, regs, off, imm }
    }
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_QUERY: libc::c_long = 16;
/// `BPF_PROG_TYPE_CGROUP_DEVICE` (include/uapi/linux/bpf.h).
pub const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
/// `BPF_CGROUP_DEVICE`, the attach type of device programs.
pub const BPF_CGROUP_DEVICE: u32 = 6;
/// `BPF_F_ALLOW_MULTI`: run beside programs attached above, all must allow.
pub const BPF_F_ALLOW_MULTI: u32 = 2;

/// The `BPF_PROG_LOAD` part of `union bpf_attr`, up to and including
/// `expected_attach_type`; the kernel zero-extends shorter attrs.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The `BPF_PROG_ATTACH` part of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct ProgAttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
}

/// The `BPF_PROG_QUERY` part of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct ProgQueryAttr {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    _pad: u32,
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> std::io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, initialised repr(C) prefix of `union bpf_attr`
    // for `cmd`, valid for reads and writes of size_of::<T>() bytes, which is
    // the size passed; every pointer inside it was set by the caller to
    // memory that outlives this call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *mut T).cast::<libc::c_void>(),
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(rc)
}

/// Loads `insns` as a program of `prog_type` (`name` is shown by bpftool).
/// On a verifier refusal the error carries the verifier's log.
pub fn bpf_prog_load(
    prog_type: u32,
    expected_attach_type: u32,
    insns: &[BpfInsn],
    name: &str,
) -> std::io::Result<OwnedFd> {
    // The verifier's log slows every load; ask for it only to explain a
    // refusal.
    bpf_prog_load_logged(prog_type, expected_attach_type, insns, name, false)
        .or_else(|_| bpf_prog_load_logged(prog_type, expected_attach_type, insns, name, true))
}

fn bpf_prog_load_logged(
    prog_type: u32,
    expected_attach_type: u32,
    insns: &[BpfInsn],
    name: &str,
    logged: bool,
) -> std::io::Result<OwnedFd> {
    let license = c"GPL";
    let mut log = vec![0u8; if logged { 64 * 1024 } else { 0 }];
    let mut prog_name = [0u8; 16];
    for (dst, src) in
        prog_name.iter_mut().zip(name.bytes().filter(|b| b.is_ascii_alphanumeric() || *b == b'_').take(15))
    {
        *dst = src;
    }
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: u32::from(logged),
        log_size: log.len() as u32,
        log_buf: if logged { log.as_mut_ptr() as u64 } else { 0 },
        prog_name,
        expected_attach_type,
        ..ProgLoadAttr::default()
    };
    match bpf(BPF_PROG_LOAD, &mut attr) {
        // SAFETY: a non-negative return of BPF_PROG_LOAD is a new file
        // descriptor that nothing else owns.
        Ok(fd) => Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]).trim().replace('\n', "; ");
            Err(if text.is_empty() { e } else { std::io::Error::new(e.kind(), format!("{e}; verifier: {text}")) })
        }
    }
}

/// Attaches `prog` to the cgroup open as `cgroup` for `attach_type`.
pub fn bpf_prog_attach(
    cgroup: &impl AsRawFd,
    prog: &impl AsRawFd,
    attach_type: u32,
    flags: u32,
) -> std::io::Result<()> {
    let mut attr = ProgAttachAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type,
        attach_flags: flags,
    };
    bpf(BPF_PROG_ATTACH, &mut attr).map(|_| ())
}

/// How many programs are attached to the cgroup itself for `attach_type`
/// (not counting those inherited from its ancestors).
pub fn bpf_prog_query_count(cgroup: &impl AsRawFd, attach_type: u32) -> std::io::Result<u32> {
    let mut attr = ProgQueryAttr { target_fd: cgroup.as_raw_fd() as u32, attach_type, ..ProgQueryAttr::default() };
    bpf(BPF_PROG_QUERY, &mut attr)?;
    Ok(attr.prog_cnt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_pidfd_names_the_connecting_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let pidfd = match peer_pidfd(&a) {
            Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => {
                return eprintln!("skipping: no SO_PEERPIDFD (Linux < 6.5)")
            }
            other => other.unwrap(),
        };
        assert_eq!(pidfd_pid(&pidfd), Some(std::process::id() as i32));
        let mine = pidfd_open(std::process::id() as i32).unwrap();
        assert_eq!(pidfs_inode(&pidfd), pidfs_inode(&mine));
        // A reaped child's pidfd says so, and its pid opens no more.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let fd = pidfd_open(pid).unwrap();
        child.wait().unwrap();
        assert_eq!(pidfd_pid(&fd), None);
        assert_ne!(pidfs_inode(&fd), pidfs_inode(&mine));
    }

    #[test]
    fn peer_cred_is_our_own() {
        let (a, _b) = UnixStream::pair().unwrap();
        let cred = peer_cred(&a).unwrap();
        assert_eq!(cred.pid as u32, std::process::id());
        assert_eq!(cred.uid, std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap());
    }
}
