//! The held-open scan, and a release and an alloc where cderd chooses, on a
//! node crowded with other users' descriptors (issue 52, items 1 and 8).
//!
//! `cargo bench -p cderd --bench held_scan` (a program). In one run, in
//! interleaved rounds:
//!
//! - **the scan** (`cderd::held::scan_whole`, in-process, default budgets)
//!   against **the floor**: listing the same `/proc/PID/fd` entries and
//!   nothing more (`cderd::held::list_only`), on a node with
//!   `CDER_BENCH_PROCESSES` processes (default 2,000) of uid 65534 holding
//!   `CDER_BENCH_FDS` descriptors each (default 100: 200,000 in all; dups
//!   of a file on disk, a pipe, a socket pair and /dev/null), plus the
//!   lock-heavy process of finding A (one file with `CDER_BENCH_LOCKS`
//!   POSIX byte-range locks, default 10,000, and `CDER_BENCH_DUPS` dups of
//!   its descriptor, default 2,000). Target: the scan within 2x the floor.
//! - **release and alloc, end to end** over the socket of the real cderd
//!   (8 devices, cderd choosing, `held_open = "skip"`), timed apart, on the
//!   same node with and without those processes. Target: each within 1.5x.
//! - **a busy node** (item 8): the same processes plus a CPU-bound process
//!   on every core; each release is followed at once by an operator's
//!   `status`: the device must be free when the release has returned.
//!
//! `CDER_BENCH_PAIRS` sets the alloc+release pairs per measurement
//! (default 200), `CDER_BENCH_ROUNDS` the rounds (default 3).

use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cder_protocol::{AllocRequest, Client, DeviceState};
use cderd::held;

const DEVICES: u32 = 8;
/// A major number no driver on the node has: the devices' numbers are
/// looked for, never opened.
const MAJOR: u32 = 240;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Percentiles of a series of durations.
fn pct(series: &[Duration], p: f64) -> Duration {
    let mut l = series.to_vec();
    l.sort_unstable();
    if l.is_empty() {
        return Duration::ZERO;
    }
    l[((l.len() as f64 * p).ceil() as usize).clamp(1, l.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Processes of uid 65534 forked from here, each holding descriptors; all
/// SIGKILLed on drop (and by the kernel if this program dies first).
struct Crowd {
    pids: Vec<libc::pid_t>,
}

impl Drop for Crowd {
    fn drop(&mut self) {
        for pid in &self.pids {
            // SAFETY: kill and waitpid take plain integers; the pids are our children.
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        for pid in &self.pids {
            // SAFETY: as above.
            unsafe {
                libc::waitpid(*pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// In a forked child: only async-signal-safe calls from here on.
unsafe fn child_setup() {
    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
    }
}

unsafe fn child_wait(ready: RawFd) -> ! {
    if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
        libc::_exit(3);
    }
    libc::write(ready, b"r".as_ptr().cast(), 1);
    loop {
        libc::pause();
    }
}

/// `n` processes each holding `fds` dups of `base`, and (if `locks` > 0)
/// one holding `locks` byte-range locks on `lock_file` and `dups` dups of
/// its descriptor. Returns once every one is ready.
fn crowd(n: usize, fds: usize, base: &[RawFd], lock_file: &Path, locks: usize, dups: usize) -> Crowd {
    let mut pipe = [0; 2];
    // SAFETY: pipe fills the two-element array.
    assert_eq!(unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let (read, write) = (pipe[0], pipe[1]);
    let mut crowd = Crowd { pids: Vec::with_capacity(n + 1) };
    let lock_path = std::ffi::CString::new(lock_file.as_os_str().as_encoded_bytes()).unwrap();
    for i in 0..n + usize::from(locks > 0) {
        // SAFETY: the child makes only async-signal-safe calls, then waits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: this is the child; raw syscalls only.
            unsafe {
                child_setup();
                if i == n {
                    let fd = libc::open(lock_path.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o600);
                    if fd < 0 {
                        libc::_exit(4);
                    }
                    for k in 0..locks {
                        let mut lock: libc::flock = std::mem::zeroed();
                        lock.l_type = libc::F_WRLCK as libc::c_short;
                        lock.l_whence = libc::SEEK_SET as libc::c_short;
                        // Every other byte: the kernel cannot merge them.
                        lock.l_start = (2 * k) as libc::off_t;
                        lock.l_len = 1;
                        libc::fcntl(fd, libc::F_SETLK, &lock);
                    }
                    for _ in 0..dups {
                        libc::dup(fd);
                    }
                } else {
                    for k in 0..fds {
                        libc::dup(base[k % base.len()]);
                    }
                }
                child_wait(write);
            }
        }
        crowd.pids.push(pid);
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(write) };
    let mut got = 0;
    let mut buf = [0u8; 4096];
    while got < crowd.pids.len() {
        // SAFETY: reading into a buffer of its own length.
        let r = unsafe { libc::read(read, buf.as_mut_ptr().cast(), buf.len()) };
        assert!(r > 0, "the crowd did not start: {} of {} ready", got, crowd.pids.len());
        got += r as usize;
    }
    // SAFETY: our read end.
    unsafe { libc::close(read) };
    crowd
}

/// A process per core spinning until dropped.
struct Spinners(Vec<libc::pid_t>);

impl Drop for Spinners {
    fn drop(&mut self) {
        drop(Crowd { pids: std::mem::take(&mut self.0) });
    }
}

fn spinners(n: usize) -> Spinners {
    let mut pids = Vec::new();
    for _ in 0..n {
        // SAFETY: the child only spins.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: raw calls in the child.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
        }
        pids.push(pid);
    }
    Spinners(pids)
}

fn config_text(dir: &Path) -> String {
    let mut text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\n[node.enforcement]\ncgroup = \"off\"\nheld_open = \"skip\"\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
        dir.join("cderd.sock"),
        dir.join("state")
    );
    for i in 0..DEVICES {
        text += &format!(
            "[[cder.device]]\nindex = {i}\nmodel = \"Tesla K20m\"\nmemory_mib = 4800\npath = {:?}\nnuma_node = {}\n",
            dir.join(format!("nvidia{i}")),
            i / 4
        );
    }
    text
}

/// Alloc (cderd choosing one device) and release, timed apart.
#[derive(Default)]
struct Pairs {
    alloc: Vec<Duration>,
    release: Vec<Duration>,
}

fn pairs(client: &mut Client, n: usize, next: &mut u64) -> Pairs {
    let mut out = Pairs::default();
    for _ in 0..n {
        *next += 1;
        let job: cder_model::JobKey = format!("slurm:{next}").parse().unwrap();
        let t = Instant::now();
        client.alloc(&AllocRequest::new(job.clone(), 1000, 1)).expect("alloc");
        out.alloc.push(t.elapsed());
        let t = Instant::now();
        client.release(&job).expect("release");
        out.release.push(t.elapsed());
    }
    out
}

/// The batch system's choice (as SLURM's prolog sends it), released, then
/// the device's state as the next request sees it.
fn busy_releases(client: &mut Client, n: usize, next: &mut u64) -> (Vec<Duration>, usize) {
    let mut took = Vec::new();
    let mut free_after = 0;
    for i in 0..n {
        *next += 1;
        let job: cder_model::JobKey = format!("slurm:{next}").parse().unwrap();
        let index = (i as u32) % DEVICES;
        let mut r = AllocRequest::new(job.clone(), 1000, 1);
        r.devices = Some(vec![index]);
        client.alloc(&r).expect("alloc");
        let t = Instant::now();
        client.release(&job).expect("release");
        took.push(t.elapsed());
        let status = client.status().expect("status");
        if status.devices.iter().any(|d| d.index == index && d.state == DeviceState::Free) {
            free_after += 1;
        }
    }
    (took, free_after)
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let processes = env_or("CDER_BENCH_PROCESSES", if quick { 100 } else { 2000 });
    let fds = env_or("CDER_BENCH_FDS", 100);
    let locks = env_or("CDER_BENCH_LOCKS", if quick { 1000 } else { 10_000 });
    let dups = env_or("CDER_BENCH_DUPS", if quick { 200 } else { 2000 });
    let n_pairs = env_or("CDER_BENCH_PAIRS", if quick { 20 } else { 200 });
    let rounds = env_or("CDER_BENCH_ROUNDS", if quick { 1 } else { 3 });
    let scans = env_or("CDER_BENCH_SCANS", if quick { 3 } else { 7 });
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("held_scan: skipped (needs root: mknod, and processes of uid 65534)");
        return;
    }
    let base_dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(base_dir).unwrap();
    let dir = tempfile::tempdir_in(base_dir).unwrap();
    let mut paths: Vec<PathBuf> = Vec::new();
    for i in 0..DEVICES {
        let path = dir.path().join(format!("nvidia{i}"));
        let ok = std::process::Command::new("mknod")
            .arg(&path)
            .args(["c", &MAJOR.to_string(), &i.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "mknod {}", path.display());
        paths.push(path);
    }
    let targets = held::Targets::of(paths.iter().map(PathBuf::as_path));
    let config_path = dir.path().join("cder.toml");
    std::fs::write(&config_path, config_text(dir.path())).unwrap();

    // What the crowd holds: dups of a file, a pipe, a socket pair, /dev/null.
    let file = std::fs::File::create(dir.path().join("data")).unwrap();
    let (pipe_r, _pipe_w) = std::io::pipe().unwrap();
    let (sock_a, _sock_b) = std::os::unix::net::UnixStream::pair().unwrap();
    let null = std::fs::File::open("/dev/null").unwrap();
    let base = [file.as_raw_fd(), pipe_r.as_raw_fd(), sock_a.as_raw_fd(), null.as_raw_fd()];
    let lock_file = dir.path().join("locked");

    let socket = dir.path().join("cderd.sock");
    let mut daemon = cder_testkit::TestNode::started(
        env!("CARGO_BIN_EXE_cderd"),
        &config_path,
        &socket,
        dir.path().join("cderd.log"),
    );
    let mut client = daemon.client();
    let mut next = 0u64;
    pairs(&mut client, n_pairs / 4 + 1, &mut next); // warm-up

    let trusted: held::Trusted = Arc::new(|uid| uid == 0);
    let (mut scan_t, mut floor_t) = (Vec::new(), Vec::new());
    let (mut quiet, mut crowded) = (Pairs::default(), Pairs::default());
    let (mut busy_t, mut busy_free, mut busy_n) = (Vec::new(), 0, 0);
    let (mut entries, mut placed, mut listed_processes) = (0u64, 0u64, 0usize);
    let mut fdinfo_read = None;
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    for round in 0..rounds {
        // The same node without the crowd.
        let p = pairs(&mut client, n_pairs, &mut next);
        quiet.alloc.extend(p.alloc);
        quiet.release.extend(p.release);

        let started = Instant::now();
        let crowd = crowd(processes, fds, &base, &lock_file, locks, dups);
        if round == 0 {
            eprintln!("held_scan: {} processes started in {:.1} s", crowd.pids.len(), started.elapsed().as_secs_f64());
            // What the scan before issue 52 paid per descriptor of the
            // lock-heavy process (it read every descriptor's fdinfo).
            let heavy = *crowd.pids.last().unwrap();
            let fd = std::fs::read_dir(format!("/proc/{heavy}/fd"))
                .unwrap()
                .flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
                .max()
                .unwrap();
            let t = Instant::now();
            let text = std::fs::read_to_string(format!("/proc/{heavy}/fdinfo/{fd}")).unwrap_or_default();
            fdinfo_read = Some((t.elapsed(), text.lines().filter(|l| l.starts_with("lock:")).count()));
        }
        for _ in 0..scans {
            let t = Instant::now();
            let (n, e) = held::list_only(Path::new("/proc"));
            floor_t.push(t.elapsed());
            let t = Instant::now();
            let scan = held::scan_whole(Path::new("/proc"), &targets, Arc::clone(&trusted), held::Budget::default());
            scan_t.push(t.elapsed());
            (listed_processes, entries, placed) = (n, e, scan.descriptors);
            eprintln!(
                "held_scan: scan {:.2} ms ({} descriptors), floor {:.2} ms ({e} entries, {n} processes)",
                ms(*scan_t.last().unwrap()),
                scan.descriptors,
                ms(*floor_t.last().unwrap())
            );
        }
        if std::env::var_os("CDER_BENCH_SCAN_ONLY").is_some() {
            continue;
        }
        let p = pairs(&mut client, n_pairs, &mut next);
        crowded.alloc.extend(p.alloc);
        crowded.release.extend(p.release);

        let spin = spinners(cores);
        let (t, free) = busy_releases(&mut client, n_pairs / 4 + 1, &mut next);
        busy_n += t.len();
        busy_t.extend(t);
        busy_free += free;
        drop(spin);
        drop(crowd);
    }
    daemon.kill();

    println!(
        "held-open scan and cderd on a crowded node: {} processes of uid 65534 x {fds} descriptors + one with {locks} POSIX locks and {dups} dups; {rounds} rounds; {}",
        processes,
        if cfg!(debug_assertions) { "debug build" } else { "release build" }
    );
    if let Some((t, n)) = fdinfo_read {
        println!(
            "  one fdinfo read of the lock-heavy process's descriptor: {:.3} ms ({n} lock lines); x {} descriptors = {:.1} s (the scan before issue 52 read every one)",
            ms(t),
            dups + 1,
            t.as_secs_f64() * (dups + 1) as f64
        );
    }
    println!("  /proc: {listed_processes} processes, {entries} /proc/PID/fd entries listed; the scan placed {placed} descriptors");
    let (scan50, floor50) = (pct(&scan_t, 0.5), pct(&floor_t, 0.5));
    println!(
        "  scan  p50 {:>9.2} ms  max {:>9.2} ms   floor (list only) p50 {:>9.2} ms  max {:>9.2} ms   ratio p50 {:.2}x  (target <= 2x: {})",
        ms(scan50),
        ms(pct(&scan_t, 1.0)),
        ms(floor50),
        ms(pct(&floor_t, 1.0)),
        scan50.as_secs_f64() / floor50.as_secs_f64(),
        if scan50.as_secs_f64() <= 2.0 * floor50.as_secs_f64() { "met" } else { "NOT met" }
    );
    for (what, q, c) in
        [("alloc (cderd chooses)", &quiet.alloc, &crowded.alloc), ("release", &quiet.release, &crowded.release)]
    {
        let ratio = pct(c, 0.5).as_secs_f64() / pct(q, 0.5).as_secs_f64();
        println!(
            "  {what:<22} without the crowd p50 {:>7.3} ms p90 {:>7.3} ms   with p50 {:>7.3} ms p90 {:>7.3} ms   ratio p50 {:.2}x, p90 {:.2}x  (target <= 1.5x: {})",
            ms(pct(q, 0.5)),
            ms(pct(q, 0.9)),
            ms(pct(c, 0.5)),
            ms(pct(c, 0.9)),
            ratio,
            pct(c, 0.9).as_secs_f64() / pct(q, 0.9).as_secs_f64(),
            if ratio <= 1.5 { "met" } else { "NOT met" }
        );
    }
    println!(
        "  busy node (the crowd + {cores} spinning processes): release p50 {:.3} ms max {:.3} ms; device free when the release returned: {busy_free} of {busy_n} ({})",
        ms(pct(&busy_t, 0.5)),
        ms(pct(&busy_t, 1.0)),
        if busy_free == busy_n { "met" } else { "NOT met" }
    );
}
