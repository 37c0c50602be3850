//! Phase 1 from the local index (docs/two-phase.md, "Freshness"), with real
//! components: a real `bdii-update` feeding slapd from cder-glue-provider,
//! which reads a real cderd; `cder-jdl index refresh` as the timer runs it.
//!
//! - a GPU taken on the node reaches `list-match`'s answer from the index
//!   within one BDII cycle plus the refresher's period, and the answer's
//!   BDII cycle (UpdateStats) advances;
//! - readers during refreshes get the old or the new snapshot, never a mix,
//!   and a refresh waits for one already running;
//! - an old snapshot with the BDII down: a warning and the old answer, or
//!   exit 1 with `--strict`; no snapshot at all names the BDII; a full disk
//!   keeps the old snapshot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use cder_jdl::index::cache::{self, Cache};
use cder_protocol::{AllocRequest, Client};
use cder_testkit::{require_programs, TestNode};
use cder_tests::bdii::{built_binary, require_bdii, Bdii, BdiiOptions};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::twophase::{cder_jdl, ce_glue2_ldif, gpu_sites, grid_ldif, provider, VO};

const CE: &str = "wn01.example.org:8443/cream-slurm-gpgpu";
/// Ranked by the free count, so that each answer shows the count it saw.
const BY_FREE: &str = "[ Requirements = other.GPGPUTotalInstances >= 1; Rank = other.GPGPUFreeInstances ]";

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no JSON ({e}): {}", text(out)))
}

/// `cder-jdl` with the index in `index` and nothing from the caller's environment.
fn jdl(index: &Path) -> Command {
    let mut c = Command::new(cder_jdl());
    c.env("CDER_INDEX_DIR", index).env_remove("LCG_GFAL_INFOSYS").env_remove("CDER_INDEX_MAX_AGE").stdin(Stdio::null());
    c
}

fn node_config(dir: &Path) -> (PathBuf, PathBuf) {
    let socket = dir.join("cderd.sock");
    let mut text = format!(
        "[node]\nsocket = \"{}\"\nstate_dir = \"{}\"\n\n[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
        socket.display(),
        dir.join("state").display()
    );
    for i in 0..4 {
        text.push_str(&format!(
            "\n[[cder.device]]\nindex = {i}\nuuid = \"GPU-idx-{i}\"\nmodel = \"Tesla K20m\"\nmemory_mib = 4800\ncompute_capability = \"3.5\"\nmultiprocessors = 13\ncores_per_mp = 192\nclock_mhz = 706\necc = true\npath = \"/dev/nvidia{i}\"\n"
        ));
    }
    let path = dir.join("cder.toml");
    std::fs::write(&path, text).unwrap();
    (path, socket)
}

fn provider_config(dir: &Path, node_config: &Path, socket: &Path) -> PathBuf {
    let text = format!(
        r#"[site]
computing_service_id = "wn01.example.org_ComputingElement"
computing_manager_id = "wn01.example.org_ComputingElement_Manager"
ce_unique_id = "{CE}"
strategies = ["attribute-extension"]
cder_config = "{}"

[service]
type = "org.glite.ce.CREAM"
admin_domain = "EXAMPLE-SITE"
manager_product = "SLURM"
manager_version = "22.05.8"

[counts]
source = "cderd"
socket = "{}"
timeout_s = 5

[[group]]
id = "wn01.example.org_gpgpu"
nodes = ["wn01"]
platform = "amd64"
main_memory_mib = 65536
inventory = true
"#,
        node_config.display(),
        socket.display()
    );
    let path = dir.join("glue-provider.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The free count list-match ranks the CE with, and the answer's BDII cycle.
fn answer(index: &Path, url: &str, job: &Path) -> (Option<f64>, Option<String>, serde_json::Value) {
    let out = jdl(index).args(["list-match", "--json", "--max-age", "3600", "--bdii", url]).arg(job).output().unwrap();
    let v = json(&out);
    let rank = v["matches"].as_array().and_then(|m| m.iter().find(|m| m["ce"] == CE)).and_then(|m| m["rank"].as_f64());
    let cycle = v["index"]["bdii_cycle"].as_str().map(str::to_string);
    (rank, cycle, v)
}

#[test]
fn a_taken_gpu_reaches_the_index_within_a_bdii_cycle_and_a_refresh() {
    if !require_bdii() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let (node_cfg, socket) = node_config(work.path());
    let bin = built_binary("cderd", "cderd").unwrap_or_else(|e| panic!("{e}"));
    let _cderd = TestNode::started(bin, &node_cfg, &socket, work.path().join("cderd.log"));
    let glue_cfg = provider_config(work.path(), &node_cfg, &socket);
    let breathe = 2.0;
    let mut bdii = Bdii::new(&BdiiOptions { breathe_time: breathe, delete_delay: 3600, ..Default::default() })
        .unwrap_or_else(|e| panic!("{e}"));
    let install = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/bdii/install-provider.sh"))
        .arg("--binary")
        .arg(provider())
        .arg("--prefix")
        .arg(work.path().join("prefix"))
        .arg("--provider-dir")
        .arg(bdii.provider_dir())
        .arg("--config")
        .arg(&glue_cfg)
        .output()
        .unwrap();
    assert!(install.status.success(), "install-provider.sh: {}", text(&install));
    // The CE's own providers' part: its queue (share, policy) and endpoint, as a static LDIF.
    let queue = [("gpgpu".to_string(), vec![VO.to_string()], 60, 8)];
    let ce_ldif = ce_glue2_ldif(
        "wn01.example.org",
        "SLURM",
        "wn01.example.org_ComputingElement",
        Some("wn01.example.org_gpgpu"),
        &queue,
    );
    std::fs::write(bdii.provider_dir().with_file_name("ldif").join("ce.ldif"), ce_ldif).unwrap();
    bdii.run().unwrap_or_else(|e| panic!("{e}"));
    bdii.wait_cycles(0, 1, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    let url = bdii.slapd.url();
    let index = work.path().join("index");
    let job = work.path().join("job.jdl");
    std::fs::write(&job, BY_FREE).unwrap();

    // The refresher as the timer runs it, every `period`; list-match below
    // never refreshes itself (--max-age 3600): it answers from what the
    // refresher wrote.
    let period = Duration::from_millis(500);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let refresher = {
        let (stop, index, url) = (stop.clone(), index.clone(), url.clone());
        std::thread::spawn(move || {
            let mut runs = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let out = jdl(&index).args(["index", "refresh", "--json", "--bdii", &url]).output().unwrap();
                assert!(out.status.success(), "index refresh: {}", text(&out));
                runs.push(json(&out)["action"].as_str().unwrap_or_default().to_string());
                std::thread::sleep(period);
            }
            runs
        })
    };
    let mut last = serde_json::Value::Null;
    let (before, cycle_before, first) =
        cder_testkit::wait_for_value(Duration::from_secs(60), Duration::from_millis(200), || {
            let (rank, cycle, v) = answer(&index, &url, &job);
            if let (Some(rank), Some(cycle)) = (rank, cycle.clone()) {
                return Some((rank, cycle, v));
            }
            last = v;
            None
        })
        .unwrap_or_else(|| panic!("the CE never appeared from the index with a BDII cycle: {last}\n{}", bdii.log()));
    assert_eq!(before, 4.0, "four free GPUs first: {first}");
    assert_eq!(
        first["index"]["update_stats"]["hostname"], "127.0.0.1",
        "bdii-update's UpdateStats (BDII_HOSTNAME): {first}"
    );

    // A job takes a GPU.
    let mut client = Client::connect(&socket, Duration::from_secs(5)).unwrap();
    let cycles_at_alloc = bdii.cycles();
    let alloc_stamp = Command::new("date").args(["-u", "+%Y%m%d%H%M%SZ"]).output().unwrap();
    let alloc_stamp = String::from_utf8_lossy(&alloc_stamp.stdout).trim().to_string();
    let t0 = Instant::now();
    client.alloc(&AllocRequest::new("slurm:4242".parse().unwrap(), 1000, 1)).unwrap();
    let mut last = serde_json::Value::Null;
    let (seen_after, cycle_after, stamp_after) =
        cder_testkit::wait_for_value(Duration::from_secs(60), Duration::from_millis(100), || {
            let (rank, cycle, v) = answer(&index, &url, &job);
            if rank == Some(3.0) {
                return Some((
                    t0.elapsed(),
                    cycle.unwrap_or_default(),
                    v["index"]["update_stats"]["modify_timestamp"].clone(),
                ));
            }
            last = v;
            None
        })
        .unwrap_or_else(|| panic!("the index never showed 3 free: {last}\n{}", bdii.log()));
    let cycles_since = bdii.cycles() - cycles_at_alloc;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let runs = refresher.join().unwrap();
    let written = runs.iter().filter(|a| *a == "written").count();
    let unchanged = runs.iter().filter(|a| *a == "unchanged").count();
    eprintln!(
        "index freshness: the taken GPU showed in list-match from the index {:.2} s after the allocation \
         (BDII_BREATHE_TIME {breathe} s, refresher every {:.1} s; {cycles_since} bdii-update cycles ended meanwhile); \
         refresher runs: {} ({written} re-read, {unchanged} found the BDII cycle unchanged)",
        seen_after.as_secs_f64(),
        period.as_secs_f64(),
        runs.len()
    );
    assert!(cycle_after > cycle_before, "the answer's BDII cycle must advance: {cycle_before} -> {cycle_after}");
    // The new count comes from a cycle that ended after the allocation
    // (UpdateStats' modifyTimestamp, second resolution).
    let stamp_after = stamp_after.as_str().unwrap_or_default();
    assert!(stamp_after >= alloc_stamp.as_str(), "cycle {stamp_after} ended before the allocation at {alloc_stamp}");
    // A refresh that finds the BDII in its snapshot's cycle only marks it
    // checked; one that finds a newer cycle reads it.
    let refresh = || {
        let out = jdl(&index).args(["index", "refresh", "--json", "--bdii", &url]).output().unwrap();
        assert!(out.status.success(), "index refresh: {}", text(&out));
        json(&out)
    };
    let mut same_cycle = 0;
    for _ in 0..10 {
        let (a, b) = (refresh(), refresh());
        let stamp = |v: &serde_json::Value| v["update_stats"]["modify_timestamp"].as_str().map(str::to_string);
        if stamp(&a).is_some() && stamp(&a) == stamp(&b) {
            assert_eq!(b["action"], "unchanged", "same BDII cycle, yet read again: {a} then {b}");
            same_cycle += 1;
            break;
        }
        assert_eq!(b["action"], "written", "a new BDII cycle must be read: {a} then {b}");
    }
    assert!(same_cycle > 0, "no two refreshes in a row ever saw the same BDII cycle");
}

/// The grid of `cder_tests::twophase` with every free count raised by `add`.
fn grid(add: u32, dir: &Path) -> Slapd {
    std::fs::create_dir_all(dir).unwrap();
    let ldif = grid_ldif(&provider(), &gpu_sites(), &["attribute-extension"], 2, dir).unwrap_or_else(|e| panic!("{e}"));
    let mut shifted = String::new();
    for line in ldif.lines() {
        match line.split_once("GPGPUFreeInstances=") {
            Some((head, n)) => {
                let n: u32 = n.trim().parse().unwrap_or_else(|e| panic!("{line}: {e}"));
                shifted.push_str(&format!("{head}GPGPUFreeInstances={}\n", n + add));
            }
            None => {
                shifted.push_str(line);
                shifted.push('\n');
            }
        }
    }
    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&shifted).unwrap_or_else(|e| panic!("{e}"));
    slapd
}

fn ranks(v: &serde_json::Value) -> BTreeMap<String, f64> {
    v["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["ce"].as_str().unwrap().to_string(), m["rank"].as_f64().unwrap_or(f64::NAN)))
        .collect()
}

#[test]
fn answers_during_refreshes_come_from_one_snapshot_and_refreshes_take_turns() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let job = d.join("job.jdl");
    std::fs::write(&job, BY_FREE).unwrap();
    // Two generations of the same grid: every free count differs by 100.
    let old = grid(0, &d.join("old"));
    let new = grid(100, &d.join("new"));
    let url = old.url();
    let (gen_old, gen_new) = (d.join("gen-old"), d.join("gen-new"));
    let generation = |slapd: &Slapd, index: &Path| {
        let out = jdl(index).args(["list-match", "--json", "--bdii", &slapd.url()]).arg(&job).output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let v = json(&out);
        let bytes = std::fs::read(
            index.join(
                std::fs::read_dir(index)
                    .unwrap()
                    .find_map(|e| {
                        let n = e.unwrap().file_name().into_string().unwrap();
                        n.ends_with(".cdx").then_some(n)
                    })
                    .unwrap(),
            ),
        )
        .unwrap();
        (ranks(&v), v["index"]["fetched_at"].as_str().unwrap().to_string(), bytes)
    };
    let (ranks_old, read_old, bytes_old) = generation(&old, &gen_old);
    std::thread::sleep(Duration::from_millis(1100));
    let (ranks_new, read_new, bytes_new) = generation(&new, &gen_new);
    assert!(ranks_old.len() >= 3, "{ranks_old:?}");
    assert_eq!(ranks_old.keys().collect::<Vec<_>>(), ranks_new.keys().collect::<Vec<_>>());
    assert!(ranks_old.iter().all(|(ce, r)| ranks_new[ce] == r + 100.0), "{ranks_old:?} {ranks_new:?}");
    assert_ne!(read_old, read_new);

    // A writer replaces the snapshot of `url` with one generation, then the
    // other, as fast as it can, with the refresher's own write, while
    // readers answer from it.
    let index = d.join("shared");
    let cache = Cache::resolve(Some(&index)).unwrap();
    cache.create_dir().unwrap();
    let path = index.join(
        std::fs::read_dir(&gen_old)
            .unwrap()
            .find_map(|e| {
                let n = e.unwrap().file_name().into_string().unwrap();
                n.ends_with(".cdx").then_some(n)
            })
            .unwrap(),
    );
    cache::write_atomic(&path, &bytes_old).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, path) = (stop.clone(), path.clone());
        let (bytes_old, bytes_new) = (bytes_old.clone(), bytes_new.clone());
        std::thread::spawn(move || {
            let (mut writes, mut next_new) = (0u64, true);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                cache::write_atomic(&path, if next_new { &bytes_new } else { &bytes_old }).unwrap();
                next_new = !next_new;
                writes += 1;
            }
            writes
        })
    };
    let readers: Vec<_> = (0..6)
        .map(|_| {
            let (index, url, job) = (index.clone(), url.clone(), job.clone());
            std::thread::spawn(move || {
                (0..15)
                    .map(|_| {
                        let out = jdl(&index)
                            .args(["list-match", "--json", "--max-age", "3600", "--bdii", &url])
                            .arg(&job)
                            .output()
                            .unwrap();
                        let v = json(&out);
                        (ranks(&v), v["index"]["fetched_at"].as_str().unwrap_or_default().to_string())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let answers: Vec<_> = readers.into_iter().flat_map(|r| r.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.join().unwrap();
    let (mut olds, mut news) = (0, 0);
    for (r, read) in &answers {
        if *r == ranks_old && *read == read_old {
            olds += 1;
        } else if *r == ranks_new && *read == read_new {
            news += 1;
        } else {
            panic!("an answer mixed the generations: {r:?} (read {read}); old {ranks_old:?} ({read_old}), new {ranks_new:?} ({read_new})");
        }
    }
    eprintln!("snapshot swaps: {} answers ({olds} old, {news} new) during {writes} replacements", answers.len());
    assert!(olds > 0 && news > 0, "the readers must have met both generations: {olds} old, {news} new");
    assert!(!std::fs::read_dir(&index).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".tmp")));

    // One refresh at a time: while the lock is held (as by a running
    // refresh), a refresh waits and then does its work; one that may not
    // wait that long says who holds it.
    let held = cache::lock(&path, Duration::ZERO).unwrap();
    let refresh = |timeout: &str| {
        jdl(&index)
            .args(["index", "refresh", "--force", "--json", "--timeout", timeout, "--bdii", &url])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut waiting = refresh("30");
    let impatient = refresh("0.5").wait_with_output().unwrap();
    assert_eq!(impatient.status.code(), Some(1), "{}", text(&impatient));
    assert!(text(&impatient).contains("another refresh still holds the lock"), "{}", text(&impatient));
    assert!(waiting.try_wait().unwrap().is_none(), "a refresh ran while another held the lock");
    let released = SystemTime::now();
    drop(held);
    let out = waiting.wait_with_output().unwrap();
    let done = SystemTime::now();
    assert!(out.status.success(), "{}", text(&out));
    let v = json(&out);
    assert_eq!(v["action"], "written", "{v}");
    assert!(v["waited_s"].as_f64().unwrap() > 0.4, "it waited for the lock: {v}");
    // It wrote after the lock was released: the snapshot's time says so.
    let written = cache::checked_at(&path).unwrap();
    assert!(written >= released && written <= done, "written {written:?}, released {released:?}");
    let out =
        jdl(&index).args(["list-match", "--json", "--max-age", "3600", "--bdii", &url]).arg(&job).output().unwrap();
    assert_eq!(ranks(&json(&out)), ranks_old, "the refresh read the BDII at {url} again");

    // A list-match that finds the snapshot too old waits for the refresh
    // another process runs, and answers from its result without reading the
    // BDII itself (which serves the old generation).
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    let held = cache::lock(&path, Duration::ZERO).unwrap();
    let mut waiting = jdl(&index)
        .args(["list-match", "--json", "--max-age", "60", "--bdii", &url])
        .arg(&job)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(waiting.try_wait().unwrap().is_none(), "list-match answered while a refresh held the lock");
    cache::write_atomic(&path, &bytes_new).unwrap();
    drop(held);
    let out = waiting.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let v = json(&out);
    assert_eq!(ranks(&v), ranks_new, "the answer must come from the other refresh's snapshot: {v}");
    assert_eq!(v["index"]["refreshed"], "fresh", "{v}");
    drop(new);
}

#[test]
fn an_old_snapshot_with_the_bdii_down_warns_or_fails_under_strict() {
    if !require_slapd() || !require_programs(&["unshare", "mount"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let job = d.join("job.jdl");
    std::fs::write(&job, BY_FREE).unwrap();
    let slapd = grid(0, &d.join("grid"));
    let url = slapd.url();
    let index = d.join("index");
    let run = |extra: &[&str]| {
        jdl(&index).args(["list-match", "--json", "--bdii", &url]).args(extra).arg(&job).output().unwrap()
    };
    let first = run(&[]);
    assert!(first.status.success(), "{}", text(&first));
    let stderr = String::from_utf8_lossy(&first.stderr).to_string();
    assert!(stderr.contains("# index: ") && stderr.contains("just read from the BDII"), "{stderr}");
    assert!(stderr.contains("no UpdateStats"), "a plain slapd has no o=infosys stats: {stderr}");
    let expected = ranks(&json(&first));

    // A full disk during a refresh: the old snapshot stays, the error names the file.
    let small = d.join("small");
    std::fs::create_dir(&small).unwrap();
    let script = format!(
        "set -e; mount -t tmpfs -o size=256k tmpfs {s}; \
         {jdl} index refresh --index-dir {s} --bdii {url}; \
         dd if=/dev/zero of={s}/filler bs=4k 2>/dev/null || true; \
         rc=0; {jdl} index refresh --force --index-dir {s} --bdii {url} 2>{err} || rc=$?; echo rc=$rc; cat {err}; \
         {jdl} index show --index-dir {s} --bdii {url}; ls -a {s} | sed 's/^/file: /'",
        s = small.display(),
        err = d.join("refresh.err").display(),
        jdl = cder_jdl().display()
    );
    let full = Command::new("unshare").args(["-m", "--propagation", "private", "sh", "-c", &script]).output().unwrap();
    let shown = text(&full);
    assert!(full.status.success(), "{shown}");
    assert!(shown.contains("rc=1"), "a refresh on a full disk must fail: {shown}");
    assert!(
        shown.contains("No space left on device") && shown.contains("previous snapshot, if any, is kept"),
        "{shown}"
    );
    assert!(shown.contains("cannot write the new snapshot of ") && shown.contains(".cdx: No space"), "{shown}");
    assert!(shown.contains(&small.display().to_string()), "the error names the path: {shown}");
    assert!(shown.contains("offers:"), "the old snapshot still reads: {shown}");
    assert!(!shown.lines().any(|l| l.starts_with("file: ") && l.ends_with(".tmp")), "a temp file was left: {shown}");

    let path = std::fs::read_dir(&index)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "cdx"))
        .unwrap();
    // A snapshot this cder cannot read (another format version, damage) is made anew.
    cache::write_atomic(&path, b"CDERIDX\0 of another version").unwrap();
    let again = run(&[]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(String::from_utf8_lossy(&again.stderr).contains("just read from the BDII"), "{}", text(&again));
    assert_eq!(ranks(&json(&again)), expected);
    assert_ne!(std::fs::read(&path).unwrap(), b"CDERIDX\0 of another version");

    // The snapshot grows old; the BDII goes down.
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    drop(slapd);

    let strict = run(&["--max-age", "60", "--strict", "--connect-timeout", "2"]);
    assert_eq!(strict.status.code(), Some(1), "{}", text(&strict));
    let err = String::from_utf8_lossy(&strict.stderr);
    assert!(err.contains("--max-age 60") && err.contains(&url) && err.contains("could not be refreshed"), "{err}");
    assert!(strict.stdout.is_empty(), "no answer under --strict: {}", text(&strict));

    let lenient = run(&["--max-age", "60", "--connect-timeout", "2"]);
    assert!(lenient.status.success(), "{}", text(&lenient));
    let err = String::from_utf8_lossy(&lenient.stderr);
    assert!(err.contains("warning: answering from an index ") && err.contains(&url), "{err}");
    assert!(err.contains("could not be refreshed") && err.contains("# index: "), "{err}");
    let v = json(&lenient);
    assert!(v["index"]["age_s"].as_u64().is_some_and(|a| a >= 3600), "{v}");
    assert_eq!(ranks(&v), expected, "the old snapshot's answer");
    assert!(v["index"]["stale"].as_str().is_some_and(|s| s.contains(&url)), "{v}");

    // No snapshot at all and the BDII down: exit 1 naming it.
    let out = jdl(&d.join("empty"))
        .args(["list-match", "--connect-timeout", "2", "--bdii", &url])
        .arg(&job)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains(&format!("no index of {url}")) && text(&out).contains("unreachable"), "{}", text(&out));
    // --live asks the BDII itself: down is down.
    let out = run(&["--live", "--connect-timeout", "2"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}
