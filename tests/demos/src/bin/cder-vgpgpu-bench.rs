//! Benchmark: request+release pairs against the real cder-registryd (HTTP,
//! MUNGE, SQLite with synchronous=FULL), one client and four at once,
//! against the floor of the same pair's MUNGE work alone (two credentials
//! made with `munge` and checked with `unmunge` through the same munged),
//! measured in the same run, interleaved.
//!
//! ```text
//! cargo run --release -p cder-tests --bin cder-vgpgpu-bench   # CDER_BENCH_PAIRS=N (default 200)
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use cder_model::VgpgpuMethod;
use cder_registry::munge::{request_payload, Munge};
use cder_tests::munge::require_munge;
use cder_tests::vgpgpu::Registryd;

struct Stats {
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Stats {
    fn new() -> Stats {
        Stats { latencies: Vec::new(), elapsed: Duration::ZERO }
    }
    fn percentile(&self, p: f64) -> f64 {
        let mut l = self.latencies.clone();
        l.sort_unstable();
        l.get(((l.len() as f64 * p).ceil() as usize).clamp(1, l.len().max(1)) - 1)
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    }
    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }
    fn line(&self, name: &str) -> String {
        format!(
            "{name:<36} p50 {:>7.2} ms   p99 {:>7.2} ms   {:>7.1} pairs/s",
            self.percentile(0.5),
            self.percentile(0.99),
            self.rate()
        )
    }
}

fn pairs(r: &Registryd, clients: u32, per_client: u32, round: u32) -> Result<Stats, String> {
    let start = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|t| {
            let c = r.client();
            std::thread::spawn(move || -> Result<Vec<Duration>, String> {
                let mut l = Vec::new();
                for i in 0..per_client {
                    let job =
                        format!("slurm:{}", round * 1_000_000 + t * 10_000 + i).parse().map_err(|e| format!("{e}"))?;
                    let t0 = Instant::now();
                    c.request(&job, 2, "bench-node", VgpgpuMethod::Rcuda).map_err(|e| e.to_string())?;
                    c.release(&job).map_err(|e| e.to_string())?;
                    l.push(t0.elapsed());
                }
                Ok(l)
            })
        })
        .collect();
    let mut s = Stats::new();
    for t in threads {
        s.latencies.extend(t.join().map_err(|_| "client thread panicked")??);
    }
    s.elapsed = start.elapsed();
    Ok(s)
}

fn munge_floor(m: &Munge, n: u32) -> Result<Stats, String> {
    let start = Instant::now();
    let mut s = Stats::new();
    for i in 0..n {
        let t0 = Instant::now();
        for path in ["/v1/request", "/v1/release"] {
            let body = format!("{{\"job\":\"slurm:{i}\"}}");
            let cred = m.encode(&request_payload("POST", path, body.as_bytes())).map_err(|e| e.to_string())?;
            m.decode(&cred).map_err(|e| e.to_string())?;
        }
        s.latencies.push(t0.elapsed());
    }
    s.elapsed = start.elapsed();
    Ok(s)
}

fn main() -> ExitCode {
    if !require_munge() {
        return ExitCode::from(1);
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cder-vgpgpu-bench: {e}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<(), String> {
    let n: u32 = std::env::var("CDER_BENCH_PAIRS").ok().and_then(|v| v.parse().ok()).unwrap_or(200).max(4);
    let r = Registryd::start("")?;
    for h in 0..8 {
        r.register_many(&format!("GPU-h{h}"), &format!("wn{h}"), 8)?;
    }
    let munge = Munge {
        munge_program: "/usr/bin/munge".into(),
        unmunge_program: "/usr/bin/unmunge".into(),
        socket: Some(r.munged.socket()),
    };
    let (mut one, mut four, mut floor) = (Stats::new(), Stats::new(), Stats::new());
    // Four interleaved rounds, so load from elsewhere falls on all alike.
    for round in 0..4 {
        let a = pairs(&r, 1, n / 4, round * 3)?;
        let b = pairs(&r, 4, n / 16, round * 3 + 1)?;
        let f = munge_floor(&munge, n / 4)?;
        for (acc, s) in [(&mut one, a), (&mut four, b), (&mut floor, f)] {
            acc.latencies.extend(s.latencies);
            acc.elapsed += s.elapsed;
        }
    }
    println!("request(2 backends)+release pairs, 64 backends on 8 hosts, {n} pairs per series");
    println!("{}", one.line("registry, 1 client"));
    println!("{}", four.line("registry, 4 clients"));
    println!("{}", floor.line("MUNGE floor (2 x munge+unmunge)"));
    println!(
        "ratio registry/floor: p50 {:.2}x, p99 {:.2}x, throughput (1 client) {:.2}x",
        one.percentile(0.5) / floor.percentile(0.5),
        one.percentile(0.99) / floor.percentile(0.99),
        one.rate() / floor.rate()
    );
    let leftover = r.client().status().map_err(|e| e.to_string())?.counts_for(None);
    if leftover.in_use != 0 {
        return Err(format!("{} backends still in use after the benchmark", leftover.in_use));
    }
    Ok(())
}
