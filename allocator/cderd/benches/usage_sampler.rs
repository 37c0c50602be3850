//! What cderd's usage sampler costs.
//!
//! 1. CPU per sample per device: the sampler's periods run back to back
//!    in-process over N devices, each held by a job, measured in the
//!    thread's own CPU time (/proc/thread-self/schedstat). Beside it, the
//!    references: the NVML calls alone (the floor of asking the library,
//!    what an `nvidia-smi --query-gpu` loop pays per device) and a bare
//!    SQLite transaction writing the same rows.
//! 2. The one-GPU job start (an alloc+release pair over the real cderd's
//!    socket) with the sampler on (every 0.1 s, 100 times the default rate,
//!    four busy jobs to sample) and off, in interleaved rounds.
//!
//! `cargo bench -p cderd --bench usage_sampler` runs against the fake NVML
//! built in this workspace (`CDER_BENCH_DEVICES`, default 8). With
//! `CDER_BENCH_REAL_NVML=1` it asks the driver's libnvidia-ml.so.1 instead,
//! about every GPU the node has. `CDER_BENCH_CDERD` and `CDER_BENCH_TMPDIR`
//! name the cderd binary and the scratch folder where the build's own
//! paths do not exist (the program copied to a GPU node).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cder_fake_nvml::{FakeDevice, FakeDeviceUsage, FakeNvml, FakeProcess, FakeUsage};
use cder_model::Config;
use cder_protocol::AllocRequest;

/// Nanoseconds this thread has run on a CPU (the first field of schedstat).
fn thread_cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    text.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn config_text(dir: &Path, library: Option<&Path>, usage: &str) -> String {
    let library = library.map(|l| format!("nvml_library = {l:?}\n")).unwrap_or_default();
    format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\n[node.enforcement]\ncgroup = \"off\"\n[node.health]\nwatch = false\n\
         [node.usage]\n{usage}\n[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\n{library}\
         device_path = \"{}/nvidia{{minor}}\"\n",
        dir.join("cderd.sock"),
        dir.join("state"),
        dir.display()
    )
}

/// The fake machine: `n` A100s, each with one compute process at 60 %.
fn fake_machine(dir: &Path, n: u32) -> Vec<(String, PathBuf)> {
    let (machine, usage) = (dir.join("machine.json"), dir.join("usage.json"));
    let devices: Vec<FakeDevice> = (0..n).map(|i| FakeDevice::a100("be0c0000", i, 40960)).collect();
    let mut answers = FakeUsage::default();
    for d in &devices {
        let process =
            FakeProcess { pid: std::process::id(), used_memory_mib: Some(9000), sm_percent: 60, memory_percent: 20 };
        answers.devices.insert(
            d.uuid.clone(),
            FakeDeviceUsage { gpu_percent: 60, memory_percent: 20, memory_used_mib: 9000, processes: vec![process] },
        );
    }
    FakeNvml { devices, fail: vec![] }.write(&machine).unwrap();
    answers.write(&usage).unwrap();
    vec![("CDER_FAKE_NVML".into(), machine), ("CDER_FAKE_NVML_USAGE".into(), usage)]
}

struct Cost {
    per_device_us: f64,
}

/// Runs `f` `periods` times; CPU µs per period per device.
fn per_device(periods: u32, devices: usize, mut f: impl FnMut()) -> Cost {
    let before = thread_cpu_ns();
    for _ in 0..periods {
        f();
    }
    let ns = thread_cpu_ns().saturating_sub(before) as f64;
    Cost { per_device_us: ns / 1000.0 / f64::from(periods) / devices.max(1) as f64 }
}

fn sampler_cost(base: &Path, library: Option<&Path>, fake_devices: u32, periods: u32) {
    let dir = tempfile::tempdir_in(base).unwrap();
    if library.is_some() {
        for (k, v) in fake_machine(dir.path(), fake_devices) {
            std::env::set_var(k, v);
        }
    }
    let text = config_text(dir.path(), library, "sample = false");
    let path = dir.path().join("cder.toml");
    std::fs::write(&path, &text).unwrap();
    let config = Config::parse(&text, &path).unwrap();
    let daemon = cderd::Daemon::start(config).expect("cderd starts");
    let status = daemon.status().unwrap();
    let n = status.devices.len();
    for (i, d) in status.devices.iter().enumerate() {
        let mut request = AllocRequest::new(format!("slurm:{}", 100 + i).parse().unwrap(), 1000, 1);
        request.devices = Some(vec![d.index]);
        daemon.alloc(&request).unwrap();
    }
    let nvmls = cderd::usage::open_types(&daemon);
    let mut sampler = cderd::usage::Sampler::new(&nvmls);
    sampler.tick(&daemon).unwrap(); // warm-up: statements prepared, files read
    let observe = per_device(periods, n, || {
        sampler.observe_all(&daemon).unwrap();
    });
    let tick = per_device(periods, n, || {
        sampler.tick(&daemon).unwrap();
    });
    // The floor of asking the library: the same four queries per device.
    let nvml = &nvmls[0].1;
    let uuids: Vec<String> = status.devices.iter().map(|d| d.uuid.clone()).collect();
    let floor = per_device(periods, n, || {
        for uuid in &uuids {
            let device = nvml.device_by_uuid(uuid.as_str()).unwrap();
            let _ = std::hint::black_box((
                device.utilization_rates(),
                device.memory_info(),
                device.running_compute_processes(),
                device.process_utilization_stats(None),
            ));
        }
    });
    // The floor of the commit: a bare transaction writing n rows to two tables.
    let conn = rusqlite::Connection::open(dir.path().join("bare.db")).unwrap();
    conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)).unwrap();
    conn.execute_batch(
        "PRAGMA synchronous=NORMAL; CREATE TABLE agg (k TEXT PRIMARY KEY, n INTEGER, s REAL);
         CREATE TABLE ring (slot INTEGER PRIMARY KEY, at INTEGER, v INTEGER);",
    )
    .unwrap();
    let mut seq = 0i64;
    let bare = per_device(periods, n, || {
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        for uuid in &uuids {
            conn.prepare_cached(
                "INSERT INTO agg VALUES (?1, 1, 60) ON CONFLICT(k) DO UPDATE SET n = n + 1, s = s + 60",
            )
            .unwrap()
            .execute([uuid])
            .unwrap();
            conn.prepare_cached("INSERT OR REPLACE INTO ring VALUES (?1, ?2, 60)")
                .unwrap()
                .execute([seq % 10_000, seq])
                .unwrap();
            seq += 1;
        }
        conn.execute_batch("COMMIT").unwrap();
    });
    println!(
        "sampler, {n} device(s) held by {n} jobs, {periods} periods, {}:",
        if library.is_some() { "fake NVML" } else { "the driver's NVML" }
    );
    println!("  one period (NVML + commit + idle check)  {:>9.1} us CPU per device", tick.per_device_us);
    println!("  of which asking NVML (observe)          {:>9.1} us CPU per device", observe.per_device_us);
    println!("  reference: the 4 NVML queries alone      {:>9.1} us CPU per device", floor.per_device_us);
    println!("  reference: bare SQLite, same rows        {:>9.1} us CPU per device", bare.per_device_us);
    println!(
        "  ratio sampler / (NVML floor + SQL floor): {:.2}x; at the default 10 s period: {:.4} % of one core per device",
        tick.per_device_us / (floor.per_device_us + bare.per_device_us),
        tick.per_device_us / 1e6 / 10.0 * 100.0
    );
}

fn percentile(l: &mut [Duration], p: f64) -> Duration {
    l.sort_unstable();
    if l.is_empty() {
        return Duration::ZERO;
    }
    l[((l.len() as f64 * p).ceil() as usize).clamp(1, l.len()) - 1]
}

/// One round: a fresh cderd, four busy jobs, then `pairs` timed
/// alloc+release pairs of one device.
fn job_start_round(
    base: &Path,
    library: Option<&Path>,
    sample: bool,
    pairs: usize,
    env: &[(String, PathBuf)],
) -> Vec<Duration> {
    let dir = tempfile::tempdir_in(base).unwrap();
    let usage = if sample { "sample_period_s = 0.1" } else { "sample = false" };
    let path = dir.path().join("cder.toml");
    std::fs::write(&path, config_text(dir.path(), library, usage)).unwrap();
    let cderd = std::env::var_os("CDER_BENCH_CDERD").unwrap_or_else(|| env!("CARGO_BIN_EXE_cderd").into());
    let socket = dir.path().join("cderd.sock");
    let mut daemon = env
        .iter()
        .fold(cder_testkit::TestNode::new(cderd, &path, &socket, dir.path().join("cderd.log")), |d, (k, v)| {
            d.env(k, v)
        });
    daemon.start(Duration::from_secs(30));
    let mut client = daemon.client();
    let total = client.status().unwrap().devices.len();
    let busy = total.saturating_sub(1).min(4);
    for i in 0..busy {
        client.alloc(&AllocRequest::new(format!("slurm:{}", 900_000 + i).parse().unwrap(), 1000, 1)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300)); // the sampler is at work
    let mut latencies = Vec::with_capacity(pairs);
    for i in 0..pairs {
        let job = format!("slurm:{i}").parse().unwrap();
        let t = Instant::now();
        let a = client.alloc(&AllocRequest::new(job, 1000, 1)).expect("alloc");
        client.release(&a.job).expect("release");
        latencies.push(t.elapsed());
    }
    daemon.kill();
    latencies
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let real = std::env::var_os("CDER_BENCH_REAL_NVML").is_some();
    let n: u32 = std::env::var("CDER_BENCH_DEVICES").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let periods: u32 = if quick { 20 } else { 500 };
    let pairs: usize =
        std::env::var("CDER_BENCH_PAIRS").ok().and_then(|v| v.parse().ok()).unwrap_or(if quick { 20 } else { 500 });
    let base =
        std::env::var_os("CDER_BENCH_TMPDIR").map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from);
    let base = base.as_path();
    std::fs::create_dir_all(base).unwrap();
    let fake = if real { None } else { Some(cder_fake_nvml::library_path().expect("libcder_fake_nvml.so built")) };
    sampler_cost(base, fake.as_deref(), n, periods);

    let env_dir = tempfile::tempdir_in(base).unwrap();
    let env = if real { Vec::new() } else { fake_machine(env_dir.path(), n) };
    const ROUNDS: usize = 4;
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // Alternate which goes first.
        for sample in if round % 2 == 0 { [false, true] } else { [true, false] } {
            let l = job_start_round(base, fake.as_deref(), sample, pairs / ROUNDS, &env);
            if sample {
                on.extend(l)
            } else {
                off.extend(l)
            }
        }
    }
    let line = |name: &str, l: &mut Vec<Duration>| {
        let (p50, p99) = (percentile(l, 0.5), percentile(l, 0.99));
        println!(
            "{name:<44} p50 {:>7.3} ms   p99 {:>7.3} ms   ({} pairs)",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            l.len()
        );
        p99
    };
    println!(
        "one-GPU job start (alloc+release over the socket), {}:",
        if cfg!(debug_assertions) { "debug build" } else { "release build" }
    );
    let p99_off = line("sampler off", &mut off);
    let busy = if real { "the other GPUs held" } else { "4 busy jobs" };
    let p99_on = line(&format!("sampler on, every 0.1 s, {busy}"), &mut on);
    println!(
        "ratio on/off p99: {:.2}x; 2 ms budget (p99, sampler on): {}",
        p99_on.as_secs_f64() / p99_off.as_secs_f64().max(1e-9),
        if p99_on < Duration::from_millis(2) { "met" } else { "NOT met" }
    );
}
