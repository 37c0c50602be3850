//! Latency of an authenticated `GET /v1/status` (MUNGE credential made with
//! `munge`, checked with `unmunge`) against the real `cder-registryd`
//! while 316 hostile connections are held open — 300 with partial headers,
//! 8 announcing a 60000-byte body without a credential and sending one
//! byte, 8 with a valid credential for such a body that stall after one
//! byte — against the same calls with nothing held, measured in the same
//! run, interleaved in rounds. Also the daemon's thread count in each state.
//!
//! `cargo bench -p cder-registry --bench held_connections`
//! (needs munge; `CDER_BENCH_CALLS=N` calls per series, default 100;
//! `CDER_BENCH_ROUNDS=N`, default 3; `CDER_BENCH_TIMEOUT_S`, the client's
//! timeout, default 30). `CDER_BENCH_REGISTRYD=PATH` runs another build
//! instead (e.g. an earlier version, for comparison); the config uses only
//! keys every version knows, so the registry's default limits apply.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cder_registry::api::RegisterRequest;
use cder_registry::{Munge, RegistryClient};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_munged(dir: &Path) -> Kill {
    let key = dir.join("munge.key");
    let ok = Command::new("dd")
        .args(["if=/dev/urandom", &format!("of={}", key.display()), "bs=1", "count=1024", "status=none"])
        .status()
        .expect("dd");
    assert!(ok.success());
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let child = Command::new("/usr/sbin/munged")
        .args(["--foreground", "--force"])
        .arg(format!("--socket={}", dir.join("munge.socket").display()))
        .arg(format!("--key-file={}", key.display()))
        .arg(format!("--pid-file={}", dir.join("munged.pid").display()))
        .arg(format!("--log-file={}", dir.join("munged.log").display()))
        .arg(format!("--seed-file={}", dir.join("munged.seed").display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("munged (Debian package munge) must be installed");
    let started = cder_testkit::wait_for_value(Duration::from_secs(20), Duration::from_millis(50), || {
        dir.join("munge.socket").exists().then_some(())
    });
    assert!(started.is_some(), "munged did not start");
    Kill(child)
}

fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

struct Series {
    latencies: Vec<Duration>,
    failures: usize,
}

impl Series {
    fn pct(&self, p: f64) -> Duration {
        let mut l = self.latencies.clone();
        l.sort_unstable();
        if l.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((l.len() as f64 * p).ceil() as usize).clamp(1, l.len());
        l[rank - 1]
    }
}

fn series(client: &RegistryClient, calls: usize) -> Series {
    let mut s = Series { latencies: Vec::with_capacity(calls), failures: 0 };
    for _ in 0..calls {
        let t = Instant::now();
        match client.status() {
            Ok(_) => s.latencies.push(t.elapsed()),
            Err(e) => {
                eprintln!("status failed after {:?}: {e}", t.elapsed());
                s.failures += 1;
            }
        }
    }
    s
}

/// Opens the 316 hostile connections.
fn hold(port: u16, munge: &Munge) -> Vec<TcpStream> {
    let open = |first: &[u8]| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.write_all(first).expect("write");
        s
    };
    let mut held: Vec<TcpStream> = (0..300).map(|_| open(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n")).collect();
    held.extend((0..8).map(|_| open(b"POST /v1/release HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n{")));
    let frame = r#"{"job":"slurm:1","pad":""}"#.len();
    let big = format!("{{\"job\":\"slurm:1\",\"pad\":\"{}\"}}", "x".repeat(60_000 - frame));
    for _ in 0..8 {
        let cred =
            munge.encode(&cder_registry::munge::request_payload("POST", "/v1/release", big.as_bytes())).expect("munge");
        held.push(open(format!("POST /v1/release HTTP/1.1\r\nHost: x\r\nAuthorization: MUNGE {cred}\r\nContent-Length: 60000\r\n\r\n{{").as_bytes()));
    }
    held
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let calls = env_usize("CDER_BENCH_CALLS", 100);
    let rounds = env_usize("CDER_BENCH_ROUNDS", 3);
    let timeout = Duration::from_secs(env_usize("CDER_BENCH_TIMEOUT_S", 30) as u64);
    let program = std::env::var_os("CDER_BENCH_REGISTRYD")
        .map_or_else(|| env!("CARGO_BIN_EXE_cder-registryd").into(), std::path::PathBuf::from);
    let dir = tempfile::tempdir().unwrap();
    let _munged = start_munged(dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = dir.path().join("cder.toml");
    std::fs::write(
        &config,
        format!(
            "[registry]\nurl = \"http://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\nstate_dir = \"{}\"\nmunge_socket = \"{}\"\n",
            dir.path().join("state").display(),
            dir.path().join("munge.socket").display()
        ),
    )
    .unwrap();
    let daemon = Command::new(&program)
        .arg("--config")
        .arg(&config)
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cder-registryd");
    let pid = daemon.id();
    let _daemon = Kill(daemon);
    let munge = Munge {
        munge_program: "/usr/bin/munge".into(),
        unmunge_program: "/usr/bin/unmunge".into(),
        socket: Some(dir.path().join("munge.socket")),
    };
    let client = RegistryClient::new(&format!("http://127.0.0.1:{port}"), munge.clone(), timeout).unwrap();
    let serving = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(50), || {
        client.status().is_ok().then_some(())
    });
    assert!(serving.is_some(), "cder-registryd not serving");
    for i in 0..4 {
        let r = RegisterRequest {
            uuid: format!("GPU-{i}"),
            vendor: "Nvidia".into(),
            device: i,
            host: "n1".into(),
            methods: vec![cder_model::VgpgpuMethod::Rcuda],
        };
        client.register(&r).unwrap();
    }
    println!("{}", program.display());
    println!("authenticated GET /v1/status, {calls} calls per series, {rounds} rounds, client timeout {timeout:?}; latency of the whole call (munge + HTTP + unmunge)");
    println!("| round | idle p50 / p99 / max | 316 held p50 / p99 / max | ratio held/idle p50, p99 | threads idle, held | failures |");
    println!("|---|---|---|---|---|---|");
    let (mut all_idle, mut all_held) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let idle = series(&client, calls);
        let idle_threads = threads(pid);
        let held = hold(port, &munge);
        std::thread::sleep(Duration::from_millis(200));
        let loaded = series(&client, calls);
        let held_threads = threads(pid);
        drop(held);
        println!(
            "| {round} | {} / {} / {} | {} / {} / {} | {:.2}x, {:.2}x | {idle_threads}, {held_threads} | {} |",
            ms(idle.pct(0.5)),
            ms(idle.pct(0.99)),
            ms(idle.pct(1.0)),
            ms(loaded.pct(0.5)),
            ms(loaded.pct(0.99)),
            ms(loaded.pct(1.0)),
            loaded.pct(0.5).as_secs_f64() / idle.pct(0.5).as_secs_f64().max(1e-9),
            loaded.pct(0.99).as_secs_f64() / idle.pct(0.99).as_secs_f64().max(1e-9),
            idle.failures + loaded.failures
        );
        all_idle.extend(idle.latencies);
        all_held.extend(loaded.latencies);
        std::thread::sleep(Duration::from_millis(300));
    }
    let (idle, held) = (Series { latencies: all_idle, failures: 0 }, Series { latencies: all_held, failures: 0 });
    println!(
        "all rounds: idle p50 {} p99 {}; held p50 {} p99 {}; ratio p50 {:.2}x, p99 {:.2}x",
        ms(idle.pct(0.5)),
        ms(idle.pct(0.99)),
        ms(held.pct(0.5)),
        ms(held.pct(0.99)),
        held.pct(0.5).as_secs_f64() / idle.pct(0.5).as_secs_f64().max(1e-9),
        held.pct(0.99).as_secs_f64() / idle.pct(0.99).as_secs_f64().max(1e-9)
    );
}
