//! Matchmaking benchmark: one request (the seed thesis's Listing 3.10 plus a
//! Rank) against 10,000 and 100,000 offers shaped like its Listing 3.9 with
//! varied values; cder-jdl and HTCondor's classad2 (through its Python
//! binding, measured in the same run), with the ratio printed.
//!
//! Run: cargo bench -p cder-jdl --bench match
//! Env: CDER_CLASSAD_PYTHON (default /opt/cder-venv/bin/python); CDER_BENCH_SIZES
//! (default "10000,100000"). Without the reference, only cder's figures print
//! (under CI=true a missing reference is a failure).

use std::hint::black_box;
use std::process::Command;
use std::time::Instant;

use cder_classad::{parse_classad, parse_classads, ClassAd, CompiledRequest};

/// The thesis writes the offer's attributes unqualified (the matchmaking
/// fallback resolves them); classad2's ClassAd.matches has no fallback, so the
/// reference gets the explicit other. form. Both are timed on our side.
const REQUEST_THESIS: &str = r#"[
  Requirements = GPGPUVendor == "Nvidia" && (GPGPUMainMemorySize >= 512);
  Rank = GPGPUMainMemorySize * GPGPUCores / 1024.0 + GPGPUClockSpeed / 1000.0
]"#;
const REQUEST_EXPLICIT: &str = r#"[
  Requirements = other.GPGPUVendor == "Nvidia" && (other.GPGPUMainMemorySize >= 512);
  Rank = other.GPGPUMainMemorySize * other.GPGPUCores / 1024.0 + other.GPGPUClockSpeed / 1000.0
]"#;

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

/// An offer like Listing 3.9, values varied.
fn offer(r: &mut Rng, i: usize) -> String {
    let vendors = ["Nvidia", "Nvidia", "NVIDIA", "AMD", "Intel"];
    let models = ["GTS 450", "K20m", "K80", "P100", "V100", "MI50"];
    let mem = [256, 512, 1024, 2048, 4096, 5120, 12288, 16384][r.below(8) as usize];
    let mp = 1 + r.below(80);
    let cores_per_mp = [32, 48, 64, 128, 192][r.below(5) as usize];
    let total = 1 + r.below(64);
    let used = r.below(total + 1);
    format!(
        "[ MyType = \"Machine\"; Machine = \"wn{i}.grid.example.org\"; GPGPUTotalInstances = {total}; \
GPGPUUsedInstances = {used}; GPGPUCUDAComputeCapability = {cc}; GPGPUMainMemorySize = {mem}; GPGPUMP = {mp}; \
GPGPUCoresPerMP = {cores_per_mp}; GPGPUCores = {cores}; GPGPUClockSpeed = {clock}; GPGPUECCSupport = {ecc}; \
GPGPUVendor = \"{vendor}\"; GPGPUModel = \"{model}\"; GPGPUPerNode = {per}; Requirements = true; Rank = 1 ]",
        cc = ["1.3", "2.0", "2.1", "3.5", "3.7", "6.0", "7.0"][r.below(7) as usize],
        cores = mp * cores_per_mp,
        clock = 500 + r.below(1500),
        ecc = if r.below(2) == 0 { "false" } else { "true" },
        vendor = vendors[r.below(vendors.len() as u64) as usize],
        model = models[r.below(models.len() as u64) as usize],
        per = 1 + r.below(8),
    )
}

/// Best of `reps` passes: (seconds, matches, rank sum).
fn time_ours(req: &CompiledRequest, offers: &[ClassAd], reps: usize) -> (f64, usize, f64) {
    let mut best = f64::INFINITY;
    let mut out = (0, 0.0);
    for _ in 0..reps {
        let t0 = Instant::now();
        let mut matches = 0;
        let mut rank_sum = 0.0;
        for o in offers {
            if let Some(r) = req.match_rank(black_box(o)) {
                matches += 1;
                rank_sum += r;
            }
        }
        best = best.min(t0.elapsed().as_secs_f64());
        out = (black_box(matches), rank_sum);
    }
    (best, out.0, out.1)
}

fn main() {
    let sizes: Vec<usize> = std::env::var("CDER_BENCH_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let py = std::env::var("CDER_CLASSAD_PYTHON").unwrap_or_else(|_| "/opt/cder-venv/bin/python".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/classad2_match.py");
    let dir = std::env::temp_dir().join(format!("cder-jdl-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let req_path = dir.join("request.ad");
    std::fs::write(&req_path, REQUEST_EXPLICIT).unwrap();

    let thesis = CompiledRequest::new(&parse_classad(REQUEST_THESIS).unwrap());
    let explicit = CompiledRequest::new(&parse_classad(REQUEST_EXPLICIT).unwrap());
    println!("cder-jdl matchmaking benchmark (one core, release build)");
    println!("request (thesis form): {}", REQUEST_THESIS.split_whitespace().collect::<Vec<_>>().join(" "));
    for &n in &sizes {
        let mut r = Rng(0xC0DE_0000 + n as u64);
        let text: Vec<String> = (0..n).map(|i| offer(&mut r, i)).collect();
        let offers_path = dir.join(format!("offers-{n}.ads"));
        std::fs::write(&offers_path, text.join("\n")).unwrap();
        let t0 = Instant::now();
        let offers = parse_classads(&text.join("\n")).unwrap();
        let parse_s = t0.elapsed().as_secs_f64();
        assert_eq!(offers.len(), n);
        let reps = (2_000_000 / n).clamp(3, 50);
        let (t_thesis, m_thesis, rank_thesis) = time_ours(&thesis, &offers, reps);
        let (t_explicit, m_explicit, rank_explicit) = time_ours(&explicit, &offers, reps);
        assert_eq!((m_thesis, rank_thesis), (m_explicit, rank_explicit), "the two request forms disagree");
        println!("\n{n} offers (parsed in {parse_s:.3} s): {m_thesis} match, rank sum {rank_thesis:.3}");
        println!(
            "  cder-jdl, thesis form:   {:.4} s, {:.1} ns/match, {:.2} M matches/s",
            t_thesis,
            t_thesis / n as f64 * 1e9,
            n as f64 / t_thesis / 1e6
        );
        println!(
            "  cder-jdl, other. form:   {:.4} s, {:.1} ns/match, {:.2} M matches/s",
            t_explicit,
            t_explicit / n as f64 * 1e9,
            n as f64 / t_explicit / 1e6
        );
        let out = Command::new(&py).arg(script).arg(&req_path).arg(&offers_path).arg("3").output();
        match out {
            Ok(o) if o.status.success() => {
                let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("reference JSON");
                let t_ref = v["seconds"].as_f64().unwrap();
                let m_ref = v["matches"].as_u64().unwrap() as usize;
                let rank_ref = v["rank_sum"].as_f64().unwrap();
                assert_eq!(m_ref, m_thesis, "classad2 found a different number of matches");
                assert!(
                    (rank_ref - rank_thesis).abs() <= 1e-9 * rank_ref.abs().max(1.0),
                    "rank sums differ: {rank_ref} vs {rank_thesis}"
                );
                println!(
                    "  classad2 (Python):       {:.4} s, {:.1} ns/match, {:.3} M matches/s",
                    t_ref,
                    t_ref / n as f64 * 1e9,
                    n as f64 / t_ref / 1e6
                );
                println!("  ratio (classad2 s/match ÷ cder-jdl s/match): {:.1}x", t_ref / t_thesis);
            }
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                    Err(e) => e.to_string(),
                };
                if std::env::var("CI").as_deref() == Ok("true") {
                    panic!("classad2 reference failed with {py}: {why}");
                }
                println!("  classad2 reference unavailable ({py}): {}", why.lines().last().unwrap_or(""));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
