//! The local index answers as `--live` does, through the CLI and a real
//! slapd (Debian's BDII config, the GLUE schemas): for each grid, one
//! `cder-jdl index refresh`, then every JDL of a fixed mix and of a seeded
//! pseudo-random set runs as `list-match` from the index and with `--live`
//! against the same slapd, and the answers must be the same:
//!
//! - `--json --explain`: the CEs matched, in order, with their ranks
//!   (undefined and NaN alike), queue, share, EE and schema; the CEs left
//!   out with their reasons; the shares closed to the VO; the refused CE-ID
//!   claims; the number of offers; the exit status;
//! - plain text without `--explain`, the index's candidate cut at work
//!   (`CDER_LOG=debug` says how many of the visible offers survived it):
//!   the CE and rank lines.
//!
//! The grids: the four shapes of `cder_tests::egi_snapshot` (keys on shares
//! or EEs, OtherInfo or Extensions; per-VO shares with MappingPolicies,
//! shares naming their EE or not, site trees and a site BDII's flat tree,
//! GLUE 1.3 beside GLUE 2.0, EE IDs reused by every site), and the
//! hand-written sites of `cder_tests::twophase` published by the real
//! `cder-glue-provider` with a different strategy each (Extensions plus
//! GLUE 1.3 tags and rCUDA counts, hybrid plus VCL counts, GLUE 2.1
//! AcceleratorInfo only, GLUE 1.3 only), a hostile service claiming
//! another site's CE ID, and sites without GPUs. The mix: selective, broad,
//! match-all with Rank, no match, `Member`, string `==`, Rank presets,
//! `GPGPUPerNode`, a vGPGPU job, a VO by `--vo` and by `VirtualOrganisation`,
//! an unknown VO. Each grid must give matches, no match, and a cut.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use cder_testkit::requirements::{random_requirements, Lcg};
use cder_tests::egi_snapshot::{generate, update_stats_ldif, Placement, SnapshotSpec, Strategy};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::twophase::{
    cder_jdl, ce, ce_glue13_ldif, ce_glue2_ldif, gpu_sites, plain_site_ldif, provider, provider_ldif, GpuSite, VO,
};

/// A job: its JDL, `--vo`, `--rank`.
#[derive(Clone, Debug)]
struct Job {
    jdl: String,
    vo: Option<&'static str>,
    rank: Option<&'static str>,
}

fn job(jdl: &str, vo: Option<&'static str>, rank: Option<&'static str>) -> Job {
    Job { jdl: jdl.to_string(), vo, rank }
}

/// The fixed mix, meaningful on every grid (the models, memories and VOs
/// both generators publish).
fn fixed_jobs() -> Vec<Job> {
    vec![
        // Selective: few carriers have ≥ 12 GB (K40m, FirePro).
        job("[ Requirements = other.GPGPUMainMemorySize >= 12000; Rank = other.GPGPUMainMemorySize ]", None, None),
        job("[ Requirements = other.GPGPUModel == \"Tesla K20m\" && other.GPGPUPerNode >= 2 ]", None, None),
        // Broad, gLite's default Rank.
        job("[ Requirements = other.GPGPUTotalInstances >= 1 ]", None, None),
        // Match-all with a Rank, and with each preset.
        job("[ Requirements = true; Rank = other.GPGPUFreeInstances ]", None, None),
        job("[ Requirements = true ]", None, Some("gpgpu-max-free")),
        job("[ Requirements = other.GPGPUECCSupport ]", None, Some("gpgpu-free-ratio")),
        // No match.
        job("[ Requirements = other.GPGPUMainMemorySize > 99999999 ]", None, None),
        job("[ Requirements = other.GPGPUModel == \"A100\" ]", None, None),
        // Member over the RTE tags (the vendor marker), case ignored.
        job("[ Requirements = Member(\"NvidiaGPGPU\", other.GlueHostApplicationSoftwareRunTimeEnvironment) ]", None, None),
        job("[ Requirements = member(\"amdgpgpu\", other.GlueHostApplicationSoftwareRunTimeEnvironment) ]", None, None),
        // String ==, and the thesis's unqualified form.
        job("[ Requirements = other.GPGPUVendor == \"AMD\" ]", None, None),
        job("[ Requirements = GPGPUVendor == \"Nvidia\" && GPGPUMainMemorySize >= 4096 ]", None, None),
        // The job's own GPUs per node, and a vGPGPU job.
        job("[ GPGPUPerNode = 2; Requirements = other.GPGPUVendor =?= \"nvidia\" ]", None, None),
        job("[ VirtualGPGPUPerNode = 1; VirtualGPGPUMethod = \"rCUDA\"; Requirements = true ]", None, Some("gpgpu-free-ratio")),
        // The share's and the GLUE 1.3 names.
        job("[ Requirements = other.GLUE2ComputingShareFreeSlots > 10; Rank = -other.GlueCEStateEstimatedResponseTime ]", None, None),
        // A VO by --vo, by the JDL, and one nobody supports.
        job("[ Requirements = other.GPGPUTotalInstances >= 1 ]", Some("atlas"), None),
        job("[ VirtualOrganisation = \"atlas\"; Requirements = other.GPGPUMainMemorySize >= 2048 ]", None, None),
        job("[ VirtualOrganisation = \"cms\"; Requirements = other.GPGPUTotalInstances >= 1 ]", Some(VO), None),
        job("[ Requirements = other.GPGPUTotalInstances >= 1 ]", Some("nosuchvo"), None),
    ]
}

/// A small deterministic generator (64-bit LCG, Knuth's constants).
/// Random Requirements over the published attributes: comparisons with
/// values at and beside the published ones, `Member`, `isUndefined`, bare
/// attributes, `||` and `!`, type mismatches, a job `GPGPUPerNode`, vGPGPU
/// jobs, Rank presets and expressions, VOs.
fn random_job(rng: &mut Lcg) -> Job {
    let attrs: [(&str, &[&str]); 17] = [
        ("GPGPUMainMemorySize", &["512", "1024", "2048", "4800", "4799", "6144.0", "12288", "16384", "\"big\""]),
        ("GPGPUVendor", &["\"Nvidia\"", "\"NVIDIA\"", "\"amd\"", "\"Intel\"", "5"]),
        ("GPGPUModel", &["\"Tesla K20m\"", "\"tesla k40m\"", "\"GeForce GTX 680\"", "\"Quadro 600\"", "\"Z\""]),
        ("GPGPUPerNode", &["1", "2", "4", "3", "2.5", "false"]),
        ("GPGPUCUDAComputeCapability", &["2.0", "2.1", "3.5", "3.0", "\"3.5\"", "0.0"]),
        ("GPGPUECCSupport", &["true", "false", "1", "0"]),
        ("GPGPUFreeInstances", &["0", "1", "3", "6", "-1"]),
        ("GPGPUTotalInstances", &["1", "8", "16", "32"]),
        ("GPGPUUsedInstances", &["0", "3", "5"]),
        ("GPGPUClockSpeed", &["705", "1000", "1300"]),
        ("GlueCEStateFreeCPUs", &["0", "10", "50"]),
        ("GLUE2ComputingShareFreeSlots", &["0", "10", "40", "63"]),
        ("GlueCEStateEstimatedResponseTime", &["60", "600", "3000"]),
        ("GlueHostMainMemoryRAMSize", &["16384", "65536"]),
        ("GPGPUNoSuchKey", &["1", "\"x\""]),
        ("GLUE2ComputingShareMappingQueue", &["\"gpu\"", "\"q1\"", "\"GPU\""]),
        ("GlueCEInfoLRMSType", &["\"slurm\"", "\"SLURM\"", "\"pbs\""]),
    ];
    let mut jdl = format!("Requirements = {};", random_requirements(rng, &attrs));
    if rng.below(3) == 0 {
        jdl.push_str(&format!(" GPGPUPerNode = {};", rng.pick(&["1", "2", "4"])));
    }
    if rng.below(8) == 0 {
        jdl.push_str(&format!(
            " VirtualGPGPUPerNode = 1; VirtualGPGPUMethod = {};",
            rng.pick(&["\"rCUDA\"", "\"VCL\""])
        ));
    }
    if rng.below(6) == 0 {
        jdl.push_str(&format!(" VirtualOrganisation = {};", rng.pick(&["\"atlas\"", "\"cms\"", "\"gputestvo\""])));
    }
    let rank = match rng.below(5) {
        0 => Some("gpgpu-max-free"),
        1 => Some("gpgpu-free-ratio"),
        2 => {
            jdl.push_str(" Rank = other.GPGPUMainMemorySize;");
            None
        }
        _ => None,
    };
    let vo = *rng.pick(&[None, None, None, Some("atlas"), Some("cms"), Some(VO), Some("dteam"), Some("ATLAS")]);
    Job { jdl: format!("[ {jdl} ]"), vo, rank }
}

/// Random jobs per grid: with the fixed mix, about 40 per grid, which
/// keeps the five grids under a minute of a debug build on 2 CPUs.
const RANDOM_JOBS: usize = 24;

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `cder-jdl` with the index in `index`, never refreshing it (the test
/// refreshes once, first), and nothing from the caller's environment.
fn jdl(index: &Path) -> Command {
    // Built once: `cder_jdl()` runs cargo to make sure it is fresh.
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    let mut c = Command::new(BINARY.get_or_init(cder_jdl));
    c.env("CDER_INDEX_DIR", index)
        .env("CDER_INDEX_MAX_AGE", "86400")
        .env_remove("LCG_GFAL_INFOSYS")
        .env_remove("CDER_LOG")
        .stdin(Stdio::null());
    c
}

/// `list-match`; `debug`: with the index's debug line (visible offers, candidates).
fn list_match(index: &Path, url: &str, job: &Job, path: &Path, extra: &[&str], debug: bool) -> Output {
    let mut c = jdl(index);
    if debug {
        c.env("CDER_LOG", "debug").env("NO_COLOR", "1");
    }
    c.args(["list-match", "--timeout", "60", "--bdii", url]).args(extra);
    if let Some(vo) = job.vo {
        c.args(["--vo", vo]);
    }
    if let Some(rank) = job.rank {
        c.args(["--rank", rank]);
    }
    c.arg(path).output().unwrap()
}

/// What must be the same from the index and live: the exit status, and of
/// the JSON answer everything but where it came from (`index`, `queries`)
/// and the fetch's warnings (the live fetch reads only the job's keys).
fn comparable(out: &Output) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("list-match printed no JSON ({e}): {}", text(out)));
    let closed: BTreeSet<String> = v["closed_to_vo"].as_array().unwrap().iter().map(|c| c.to_string()).collect();
    serde_json::json!({
        "status": out.status.code(),
        "matches": v["matches"],
        "excluded": v["excluded"],
        "closed_to_vo": closed,
        "refused_claims": v["refused_claims"],
        "offers": v["offers"],
    })
}

/// The `(CE, rank)` lines of a text answer, best first.
fn answer_lines(out: &Output) -> (Option<i32>, Vec<String>) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    (out.status.code(), stdout.lines().filter(|l| l.starts_with(" - ")).map(|l| l.trim().to_string()).collect())
}

/// `name=N` in the index's `CDER_LOG=debug` line (colour codes, if any, skipped).
fn logged(stderr: &str, name: &str) -> Option<usize> {
    let line = stderr.lines().find(|l| l.contains("phase 1 from the index"))?;
    let mut plain = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|c| c.is_ascii_alphabetic());
        } else {
            plain.push(c);
        }
    }
    let at = plain.find(&format!("{name}="))? + name.len() + 1;
    plain[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// What one grid's run found.
#[derive(Default, Debug)]
struct Tally {
    jobs: usize,
    matched: usize,
    no_match: usize,
    cut: usize,
    /// Jobs whose answers differ: the JDL and both answers.
    differences: Vec<String>,
}

/// Refreshes an index of `slapd` and compares every job's answers.
fn compare(name: &str, slapd: &Slapd, jobs: &[Job], dir: &Path) -> Tally {
    let url = slapd.url();
    let index = dir.join(format!("index-{name}"));
    let t = Instant::now();
    let out = jdl(&index).args(["index", "refresh", "--json", "--bdii", &url]).output().unwrap();
    assert!(out.status.success(), "{name}: index refresh: {}", text(&out));
    let refresh: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(refresh["action"], "written", "{name}: {refresh}");
    let refreshed_in = t.elapsed();
    let t = Instant::now();
    let next = AtomicUsize::new(0);
    let results: Vec<(bool, bool, bool, Option<String>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(job) = jobs.get(i) else { break mine };
                        let path = dir.join(format!("{name}-{i}.jdl"));
                        std::fs::write(&path, &job.jdl).unwrap();
                        let what = format!("{name}: job {i} {:?} (--vo {:?}, --rank {:?})", job.jdl, job.vo, job.rank);
                        let ours = list_match(&index, &url, job, &path, &["--json", "--explain"], false);
                        let live = list_match(&index, &url, job, &path, &["--json", "--explain", "--live"], false);
                        let (a, b) = (comparable(&ours), comparable(&live));
                        let mut diff = (a != b).then(|| format!("{what}\n  index: {a}\n  live:  {b}"));
                        // Without --explain the index cuts its candidates first.
                        let cut_out = list_match(&index, &url, job, &path, &[], true);
                        let live_text = list_match(&index, &url, job, &path, &["--live"], false);
                        let (x, y) = (answer_lines(&cut_out), answer_lines(&live_text));
                        if x != y && diff.is_none() {
                            diff = Some(format!("{what} (text, with the cut)\n  index: {x:?}\n  live:  {y:?}"));
                        }
                        let stderr = String::from_utf8_lossy(&cut_out.stderr);
                        let (visible, candidates) = (logged(&stderr, "visible"), logged(&stderr, "candidates"));
                        assert!(
                            visible.is_some() && candidates.is_some(),
                            "{what}: no `phase 1 from the index` debug line: {stderr}"
                        );
                        let matched = !b["matches"].as_array().unwrap().is_empty();
                        mine.push((matched, !matched, candidates < visible && matched, diff));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    let mut tally = Tally { jobs: jobs.len(), ..Default::default() };
    for (matched, none, cut, diff) in results {
        tally.matched += matched as usize;
        tally.no_match += none as usize;
        tally.cut += cut as usize;
        tally.differences.extend(diff);
    }
    eprintln!(
        "{name}: refresh {:.2} s ({} offers); {} jobs compared in {:.1} s: {} matched, {} matched nothing, \
         {} matched after a cut; {} differ",
        refreshed_in.as_secs_f64(),
        refresh["offers"],
        tally.jobs,
        t.elapsed().as_secs_f64(),
        tally.matched,
        tally.no_match,
        tally.cut,
        tally.differences.len()
    );
    tally
}

/// One generated shape, a few hundred GPU carriers, loaded with slapadd.
fn generated(spec: &SnapshotSpec) -> Slapd {
    let mut snap = generate(spec);
    assert!(snap.gpu.len() >= 200, "{spec:?}: {} GPU offers", snap.gpu.len());
    snap.ldif.push_str(&update_stats_ldif(snap.entities));
    Slapd::start_preloaded(&SlapdOptions { maxsize: Some(1 << 30), port: None }, &snap.ldif)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn jobs(seed: u64) -> Vec<Job> {
    let mut rng = Lcg(seed);
    fixed_jobs().into_iter().chain((0..RANDOM_JOBS).map(|_| random_job(&mut rng))).collect()
}

fn check(name: &str, tally: &Tally) {
    assert!(tally.differences.is_empty(), "{name}: the index and --live differ:\n{}", tally.differences.join("\n"));
    assert!(tally.matched * 4 >= tally.jobs, "{name}: too few jobs matched anything: {tally:?}");
    assert!(tally.no_match > 0, "{name}: no job matched nothing: {tally:?}");
    assert!(tally.cut > 0, "{name}: no job was answered after the index cut its candidates: {tally:?}");
}

fn shape(placement: Placement, strategy: Strategy) -> SnapshotSpec {
    let spec = SnapshotSpec { queues: 4, vos: 2, app_envs: 3, placement, ..SnapshotSpec::thesis(strategy) };
    match placement {
        // 80 CEs × 8 per-VO shares, 300 of them carrying the keys.
        Placement::Shares => SnapshotSpec { ces: 80, gpu_shares: 300, ..spec },
        // 80 CEs × 3 EEs, all 240 carrying the keys.
        Placement::ExecutionEnvironments => SnapshotSpec { ces: 80, gpu_shares: 240, ..spec },
    }
}

#[test]
fn the_index_answers_as_live_on_every_generated_shape() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let shapes = [
        ("shares-attr", SnapshotSpec { site_tree: true, ..shape(Placement::Shares, Strategy::AttributeExtension) }),
        // A site BDII's flat tree; shares naming no EE.
        ("shares-class", SnapshotSpec { share_ee_fk: false, ..shape(Placement::Shares, Strategy::ClassExtension) }),
        // Every queue offers every EE; GLUE 1.3 beside.
        (
            "ees-attr",
            SnapshotSpec {
                share_ee_fk: false,
                glue13: true,
                site_tree: true,
                ..shape(Placement::ExecutionEnvironments, Strategy::AttributeExtension)
            },
        ),
        // `execenv0` at every site; GLUE 1.3 beside.
        (
            "ees-class",
            SnapshotSpec {
                reused_ee_ids: true,
                glue13: true,
                site_tree: true,
                ..shape(Placement::ExecutionEnvironments, Strategy::ClassExtension)
            },
        ),
    ];
    let mut total = 0;
    for (seed, (name, spec)) in shapes.iter().enumerate() {
        let slapd = generated(spec);
        let tally = compare(name, &slapd, &jobs(0x0ac1e + seed as u64), dir.path());
        check(name, &tally);
        total += tally.jobs;
    }
    eprintln!("{total} jobs on {} generated grids compared in {:.1} s", shapes.len(), t.elapsed().as_secs_f64());
}

/// The GLUE 2.1 schema cder ships for the accelerator entities.
fn glue21_schema() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/bdii/GLUE21-accelerator.schema")
}

/// The provider's output for `site` with `strategies`; `shares`: the
/// ComputingShares GLUE 2.1's AcceleratorInfo is published for.
fn published(site: &GpuSite, strategies: &[&str], shares: bool, dir: &Path) -> String {
    if !shares {
        return provider_ldif(&provider(), site, strategies, dir).unwrap_or_else(|e| panic!("{e}"));
    }
    let ids: Vec<String> = site.queues.iter().map(|q| format!("{:?}", format!("{}_{}", q.0, site.service()))).collect();
    let config = dir.join(format!("{}.toml", site.host));
    std::fs::write(
        &config,
        site.provider_config().replacen(
            "[site]\n",
            &format!("[site]\ncomputing_share_ids = [{}]\n", ids.join(", ")),
            1,
        ),
    )
    .unwrap();
    let mut c = Command::new(provider());
    c.arg("--config").arg(&config).stdin(Stdio::null());
    for s in strategies {
        c.args(["--strategy", s]);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_index_answers_as_live_on_the_hand_written_sites() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let t = Instant::now();
    let sites = gpu_sites();
    let mut ldif = String::new();
    // ce-a: Extensions, GLUE 1.3 tags (the same CE in both schemas), rCUDA counts.
    // ce-b: hybrid (static keys as OtherInfo, counts as Extensions), VCL counts.
    // ce-c: GLUE 2.1 AcceleratorInfo only.
    for (site, strategies, glue21) in [
        (&sites[0], &["class-extension", "tagged-environment"][..], false),
        (&sites[1], &["hybrid"][..], false),
        (&sites[2], &["glue21-accelerator"][..], true),
    ] {
        ldif.push_str(&published(site, strategies, glue21, d));
        ldif.push('\n');
        ldif.push_str(&ce_glue2_ldif(&site.host, &site.lrms, &site.service(), Some(&site.group), &site.queues));
        if strategies.contains(&"tagged-environment") {
            ldif.push_str(&ce_glue13_ldif(site));
        }
    }
    // A GLUE 1.3-only site (a legacy CE): tags and GlueCEs, open to atlas only on one queue.
    let mut legacy = sites[1].clone();
    legacy.host = "ce-legacy.example.org".into();
    legacy.group = "ce-legacy_gtx680".into();
    legacy.virtual_gpgpu = None;
    legacy.queues = vec![("gpgpu".into(), vec![VO.into()], 90, 12), ("atlasq".into(), vec!["atlas".into()], 30, 2)];
    ldif.push_str(&published(&legacy, &["tagged-environment"], false, d));
    ldif.push('\n');
    ldif.push_str(&ce_glue13_ldif(&legacy));
    // A hostile service: its own AMD GPUs, and a share claiming ce-a's CE ID.
    let mut evil = sites[2].clone();
    evil.host = "evil.example.net".into();
    evil.group = "evil_s9150".into();
    evil.queues = vec![("evil_partition".into(), vec![VO.into(), "atlas".into()], 0, 64)];
    ldif.push_str(&published(&evil, &["attribute-extension"], false, d));
    ldif.push('\n');
    let own_claim = format!("CREAMCEId={}", evil.ce_id("evil_partition"));
    let shares = ce_glue2_ldif(&evil.host, &evil.lrms, &evil.service(), Some(&evil.group), &evil.queues);
    assert!(shares.contains(&own_claim), "the generator's CREAMCEId form changed");
    ldif.push_str(&shares.replace(&own_claim, &format!("CREAMCEId={}", ce(0, "gpu"))));
    for i in 0..2 {
        ldif.push_str(&plain_site_ldif(&format!("ce-plain{i}.example.org")));
    }
    let slapd =
        Slapd::start_with_schemas(&SlapdOptions::default(), &[glue21_schema()]).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));

    let mut all = jobs(0x51735);
    // The hand grid's own features: the refused claim, the vGPGPU counts, GLUE 1.3's queues.
    all.extend([
        job("[ Requirements = GPGPUPerNode >= 1; Rank = 0 ]", Some(VO), None),
        job("[ VirtualGPGPUPerNode = 2; VirtualGPGPUMethod = \"VCL\"; Requirements = true ]", Some(VO), None),
        job("[ Requirements = other.GlueCEName == \"atlasq\" ]", Some("atlas"), None),
        job("[ Requirements = other.GPGPUFreeInstances >= 5; Rank = other.GPGPUFreeInstances ]", None, None),
    ]);
    let tally = compare("hand", &slapd, &all, d);
    check("hand", &tally);
    eprintln!("{} jobs on the hand-written grid compared in {:.1} s", tally.jobs, t.elapsed().as_secs_f64());
}
