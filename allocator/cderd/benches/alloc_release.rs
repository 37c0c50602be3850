//! alloc+release round trips over the socket of the real cderd binary on an
//! 8-device node, against the floor of the same writes as bare SQLite
//! transactions (WAL, synchronous=FULL, same disk) measured in the same run.
//!
//! `cargo bench -p cderd --bench alloc_release` (CDER_BENCH_PAIRS sets the
//! number of pairs per measurement, default 2000).

use std::path::Path;
use std::time::{Duration, Instant};

use cder_model::Config;
use cder_protocol::{AllocRequest, Client};
use cderd::store::Store;
use cderd::LocalityPolicy;

const DEVICES: u32 = 8;

struct Stats {
    pairs: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Stats {
    fn empty() -> Stats {
        Stats { pairs: 0, elapsed: Duration::ZERO, latencies: Vec::new() }
    }
    fn add(&mut self, other: Stats) {
        self.pairs += other.pairs;
        self.elapsed += other.elapsed;
        self.latencies.extend(other.latencies);
    }
    fn percentile(&self, p: f64) -> Duration {
        let mut l = self.latencies.clone();
        l.sort_unstable();
        if l.is_empty() {
            return Duration::ZERO;
        }
        l[((l.len() as f64 * p).ceil() as usize).clamp(1, l.len()) - 1]
    }
    fn per_second(&self) -> f64 {
        self.pairs as f64 / self.elapsed.as_secs_f64()
    }
    fn line(&self, name: &str) -> String {
        format!(
            "{name:<34} p50 {:>8.3} ms   p99 {:>8.3} ms   {:>8.0} pairs/s",
            self.percentile(0.50).as_secs_f64() * 1e3,
            self.percentile(0.99).as_secs_f64() * 1e3,
            self.per_second()
        )
    }
}

fn config_text(dir: &Path) -> String {
    let mut text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\n[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
        dir.join("cderd.sock"),
        dir.join("state")
    );
    for i in 0..DEVICES {
        text += &format!("[[cder.device]]\nindex = {i}\nmodel = \"Tesla K20m\"\nmemory_mib = 4800\npath = \"/dev/nvidia{i}\"\nnuma_node = {}\n", i / 4);
    }
    text
}

/// Sequential pairs from one client, each pair timed.
fn socket_sequential(client: &mut Client, pairs: usize, offset: usize) -> Stats {
    let mut latencies = Vec::with_capacity(pairs);
    let start = Instant::now();
    for i in 0..pairs {
        let job = format!("slurm:{}", offset + i).parse().unwrap();
        let t = Instant::now();
        let a = client.alloc(&AllocRequest::new(job, 1000, 1)).expect("alloc");
        client.release(&a.job).expect("release");
        latencies.push(t.elapsed());
    }
    Stats { pairs, elapsed: start.elapsed(), latencies }
}

/// `threads` clients at once, each doing its share of pairs.
fn socket_concurrent(socket: &Path, threads: usize, pairs: usize, offset: usize) -> Stats {
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let socket = socket.to_path_buf();
            std::thread::spawn(move || {
                let mut c = Client::connect(&socket, Duration::from_secs(30)).unwrap();
                socket_sequential(&mut c, pairs / threads, offset + t * 1_000_000).latencies
            })
        })
        .collect();
    let latencies: Vec<Duration> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    Stats { pairs: latencies.len(), elapsed: start.elapsed(), latencies }
}

/// The daemon's store in-process: its SQL without the socket.
struct StoreBench {
    store: Store,
    next: usize,
}

impl StoreBench {
    fn new(dir: &Path, config: &Config) -> StoreBench {
        let path = dir.join("store.db");
        let mut store = Store::open(&path, &["gpgpu".to_string()]).unwrap();
        cderd::store::checkpoint_in_background(&path, Duration::from_millis(500)).unwrap();
        store.sync_inventory(&config.cders[0].static_devices()).unwrap();
        StoreBench { store, next: 0 }
    }

    fn run(&mut self, pairs: usize) -> Stats {
        let mut latencies = Vec::with_capacity(pairs);
        let start = Instant::now();
        for _ in 0..pairs {
            self.next += 1;
            let job: cder_model::JobKey = format!("slurm:{}", self.next).parse().unwrap();
            let t = Instant::now();
            self.store.alloc(&AllocRequest::new(job.clone(), 1000, 1), &LocalityPolicy, 1).unwrap();
            self.store.release(&job, 2).unwrap();
            latencies.push(t.elapsed());
        }
        Stats { pairs, elapsed: start.elapsed(), latencies }
    }
}

/// The floor: the same rows written by two bare transactions per pair.
struct BareBench {
    conn: rusqlite::Connection,
}

impl BareBench {
    fn new(dir: &Path) -> BareBench {
        let conn = rusqlite::Connection::open(dir.join("bare.db")).unwrap();
        conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)).unwrap();
        conn.execute_batch(
            "PRAGMA synchronous=FULL;
             CREATE TABLE jobs (id INTEGER PRIMARY KEY, job TEXT NOT NULL, uid INTEGER NOT NULL, start INTEGER NOT NULL, end INTEGER);
             CREATE TABLE allocations (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, device TEXT NOT NULL, start INTEGER NOT NULL, end INTEGER);
             CREATE UNIQUE INDEX live ON allocations(device) WHERE end IS NULL;",
        )
        .unwrap();
        BareBench { conn }
    }

    fn run(&self, pairs: usize) -> Stats {
        let conn = &self.conn;
        let mut latencies = Vec::with_capacity(pairs);
        let start = Instant::now();
        for i in 0..pairs {
            let t = Instant::now();
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
            conn.execute("INSERT INTO jobs (job, uid, start) VALUES (?1, 1000, 1)", [format!("slurm:{i}")]).unwrap();
            let id = conn.last_insert_rowid();
            conn.execute("INSERT INTO allocations (job_id, device, start) VALUES (?1, 'gpgpu-0', 1)", [id]).unwrap();
            conn.execute_batch("COMMIT; BEGIN IMMEDIATE").unwrap();
            conn.execute("UPDATE allocations SET end = 2 WHERE job_id = ?1 AND end IS NULL", [id]).unwrap();
            conn.execute("UPDATE jobs SET end = 2 WHERE id = ?1", [id]).unwrap();
            conn.execute_batch("COMMIT").unwrap();
            latencies.push(t.elapsed());
        }
        Stats { pairs, elapsed: start.elapsed(), latencies }
    }
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing
    // useful either way: a short run then keeps the test suite quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let pairs: usize =
        std::env::var("CDER_BENCH_PAIRS").ok().and_then(|v| v.parse().ok()).unwrap_or(if quick { 50 } else { 2000 });
    // On the real disk (not tmpfs), so fsync costs what it costs.
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(base).unwrap();
    let dir = tempfile::tempdir_in(base).unwrap();
    let text = config_text(dir.path());
    let config_path = dir.path().join("cder.toml");
    std::fs::write(&config_path, &text).unwrap();
    let config = Config::parse(&text, &config_path).unwrap();

    let socket = dir.path().join("cderd.sock");
    let mut daemon = cder_testkit::TestNode::started(
        env!("CARGO_BIN_EXE_cderd"),
        &config_path,
        &socket,
        dir.path().join("cderd.log"),
    );
    let mut client = daemon.client();

    socket_sequential(&mut client, pairs / 10 + 1, 10_000_000); // warm-up
                                                                // Interleaved rounds, so that noise from other work on the machine falls
                                                                // on every measurement alike rather than on whichever ran last.
    const ROUNDS: usize = 4;
    let share = (pairs / ROUNDS).max(1);
    let (mut seq, mut conc, mut store, mut bare) = (Stats::empty(), Stats::empty(), Stats::empty(), Stats::empty());
    let mut store_db = StoreBench::new(dir.path(), &config);
    let bare_db = BareBench::new(dir.path());
    for round in 0..ROUNDS {
        seq.add(socket_sequential(&mut client, share, round * share));
        conc.add(socket_concurrent(&socket, 4, share, 20_000_000 + round * share));
        store.add(store_db.run(share));
        bare.add(bare_db.run(share));
    }
    daemon.kill();
    let pairs = seq.pairs;

    println!(
        "alloc+release pairs on an {DEVICES}-device node, {pairs} pairs each, WAL + synchronous=FULL, {}",
        if cfg!(debug_assertions) { "debug build" } else { "release build" }
    );
    println!("{}", seq.line("cderd over the socket, 1 client"));
    println!("{}", conc.line("cderd over the socket, 4 clients"));
    println!("{}", store.line("cderd store in-process (no socket)"));
    println!("{}", bare.line("bare SQLite, 2 transactions/pair"));
    println!(
        "ratio cderd/bare: p50 {:.2}x, p99 {:.2}x, throughput {:.2}x (1 client), {:.2}x (4 clients)",
        seq.percentile(0.5).as_secs_f64() / bare.percentile(0.5).as_secs_f64(),
        seq.percentile(0.99).as_secs_f64() / bare.percentile(0.99).as_secs_f64(),
        seq.per_second() / bare.per_second(),
        conc.per_second() / bare.per_second()
    );
    let target_met = seq.percentile(0.99) < Duration::from_millis(2) && seq.per_second() >= 1000.0;
    println!("target (p99 < 2 ms and >= 1000 pairs/s, 1 client): {}", if target_met { "met" } else { "NOT met" });
}
