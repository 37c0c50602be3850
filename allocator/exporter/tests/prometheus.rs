//! A real Prometheus (Debian's package) scrapes a real cder-exporter in
//! front of a real cderd; the values are read back through Prometheus's
//! HTTP API and compared with cderd's state.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cder_testkit::TestNode;

const EXPORTER: &str = env!("CARGO_BIN_EXE_cder-exporter");

/// The cderd binary beside cder-exporter, built first.
fn cderd_binary() -> PathBuf {
    cder_testkit::built("cderd", "cderd")
}

/// A child process killed and reaped when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `GET path` over HTTP/1.0 (so the reply is never chunked): status line
/// and headers, body.
fn get(port: u16, path: &str, accept: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    Some((head.to_string(), body.to_string()))
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// An instant query's result vector, or why there is none: Prometheus not
/// reachable, or answering other than 200 (a starting one says 503).
fn try_query(port: u16, q: &str) -> Result<Vec<serde_json::Value>, String> {
    let (head, body) = get(port, &format!("/api/v1/query?query={}", encode(q)), "application/json")
        .ok_or_else(|| format!("{q}: no answer from Prometheus on port {port}"))?;
    if !(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200")) {
        return Err(format!("{q}: {head}\n{body}"));
    }
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("{q}: {e}: {body}"))?;
    if v["status"] != "success" {
        return Err(format!("{q}: {body}"));
    }
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// An instant query's result vector, from a Prometheus known to be ready.
fn query(port: u16, q: &str) -> Vec<serde_json::Value> {
    try_query(port, q).unwrap_or_else(|e| panic!("{e}"))
}

/// Prometheus's own readiness: `/-/ready` answers 200 once its storage and
/// rules are loaded, 503 before.
fn prometheus_ready(port: u16) -> bool {
    get(port, "/-/ready", "*/*")
        .is_some_and(|(head, _)| head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"))
}

fn have_prometheus() -> bool {
    if cder_testkit::find_program("prometheus").is_none() {
        cder_testkit::missing("missing prometheus (Debian package prometheus; deploy/install-deps.sh)");
        return false;
    }
    true
}

/// cder-exporter with `flags` in front of the cderd at `socket`, listening
/// on the port returned once it answers.
fn exporter(dir: &Path, socket: &Path, flags: &[&str]) -> (Running, u16) {
    let port = free_port();
    let exporter = Running(
        Command::new(EXPORTER)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--hostname", "wn01", "--socket"])
            .arg(socket)
            .args(flags)
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("exporter-{port}.log"))).unwrap())
            .spawn()
            .unwrap(),
    );
    cder_testkit::wait_for("cder-exporter to listen", Duration::from_secs(30), || {
        get(port, "/metrics", "*/*").is_some()
    });
    (exporter, port)
}

/// cder-exporter (naming the jobs: `--job-labels`) in front of the cderd at
/// `socket`, and a Prometheus scraping it every second; returns both,
/// Prometheus's port and a reader of its log, once the first scrape
/// succeeded.
fn scrape(dir: &Path, socket: &Path) -> (Running, Running, u16, impl Fn() -> String) {
    let prometheus = cder_testkit::find_program("prometheus").unwrap();
    let (exporter, port) = exporter(dir, socket, &["--job-labels"]);
    let (head, body) = get(port, "/metrics", "application/openmetrics-text;version=1.0.0").unwrap();
    assert!(head.contains("Content-Type: application/openmetrics-text; version=1.0.0"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{body}");

    let prom_port = free_port();
    let prom_config = dir.join("prometheus.yml");
    std::fs::write(
        &prom_config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: cder\n    \
             static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let prometheus = Running(
        Command::new(prometheus)
            .arg(format!("--config.file={}", prom_config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let log_path = dir.join("prometheus.log");
    let log = move || std::fs::read_to_string(&log_path).unwrap_or_default();
    cder_testkit::wait_for("Prometheus to be ready (/-/ready)", Duration::from_secs(60), || {
        prometheus_ready(prom_port)
    });
    cder_testkit::wait_for("Prometheus to scrape cder-exporter", Duration::from_secs(60), || {
        try_query(prom_port, "up{job=\"cder\"} == 1").is_ok_and(|r| r.len() == 1)
    });
    (exporter, prometheus, prom_port, log)
}

/// A cderd over `n` static T4s in a temp dir (searchable by all): the
/// dir, its socket, the daemon.
fn static_node(n: u32) -> (tempfile::TempDir, PathBuf, TestNode) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("cderd.sock");
    let mut text = format!(
        "[node]\nsocket = {socket:?}\nstate_dir = {:?}\n[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
        dir.path().join("state")
    );
    for i in 0..n {
        text += &format!(
            "[[cder.device]]\nindex = {i}\nmodel = \"Tesla T4\"\nmemory_mib = 15360\npath = \"/dev/nvidia{i}\"\nnuma_node = 0\ndev = \"195:{i}\"\n"
        );
    }
    let config = dir.path().join("cder.toml");
    std::fs::write(&config, text).unwrap();
    let cderd = TestNode::started(cderd_binary(), &config, &socket, dir.path().join("cderd.log"));
    (dir, socket, cderd)
}

#[test]
fn prometheus_scrapes_the_exporter() {
    if !have_prometheus() {
        return;
    }
    let (dir, socket, cderd) = static_node(4);
    let mut client = cderd.client();
    let request = cder_protocol::AllocRequest {
        job: "slurm:4242".parse().unwrap(),
        uid: 1000,
        count: 2,
        cder_type: "gpgpu".into(),
        min_memory_mib: None,
        model: None,
        devices: None,
        device_files: None,
        wait_ms: None,
        prepare_cgroups: None,
        shares: None,
    };
    let allocation = client.alloc(&request).unwrap();
    let held: Vec<String> = allocation.devices.iter().map(|d| d.uuid.clone()).collect();

    let (_exporter, _prometheus, prom_port, log) = scrape(dir.path(), &socket);
    let allocated = query(prom_port, "cder_device_allocated{hpc_job=\"4242\"}");
    let mut uuids: Vec<String> =
        allocated.iter().map(|r| r["metric"]["UUID"].as_str().unwrap_or_default().to_string()).collect();
    uuids.sort();
    let mut want = held.clone();
    want.sort();
    assert_eq!(uuids, want, "the job's devices, as cderd holds them: {allocated:?}\n{}", log());
    for r in &allocated {
        assert_eq!(r["value"][1], "1", "{r}");
        assert_eq!(r["metric"]["Hostname"], "wn01");
        assert_eq!(r["metric"]["modelName"], "Tesla T4");
        assert_eq!(r["metric"]["lrms"], "slurm");
        assert!(r["metric"]["device"].as_str().unwrap_or_default().starts_with("nvidia"), "{r}");
    }
    let free = query(prom_port, "count(cder_device_allocated == 0)");
    assert_eq!(free.first().map(|r| r["value"][1].clone()), Some("2".into()), "{free:?}");

    // Releasing the job shows up in the next scrapes.
    client.release(&"slurm:4242".parse().unwrap()).unwrap();
    cder_testkit::wait_for("the release to reach Prometheus", Duration::from_secs(30), || {
        try_query(prom_port, "sum(cder_device_allocated)")
            .is_ok_and(|r| r.first().map(|r| r["value"][1].clone()) == Some("0".into()))
    });
}

/// Any local user can scrape the exporter's port, while cderd shows other
/// users' jobs to root and operators only: by default the exposition names
/// no job (no `hpc_job`, `lrms`, per-job counters); `--job-labels` does.
#[test]
fn the_exporter_names_no_job_unless_told_to() {
    let (dir, socket, cderd) = static_node(2);
    let request = cder_protocol::AllocRequest::new("slurm:987654".parse().unwrap(), 1000, 1);
    cderd.client().alloc(&request).unwrap();

    let (_plain, port) = exporter(dir.path(), &socket, &[]);
    let (head, body) = get(port, "/metrics", "application/openmetrics-text;version=1.0.0").unwrap();
    assert!(head.contains(" 200 "), "{head}");
    assert!(!body.contains("hpc_job") && !body.contains("lrms=") && !body.contains("987654"), "{body}");
    assert!(!body.lines().any(|l| l.starts_with("cder_job_")), "no per-job counters: {body}");
    // Which devices are held stays visible; not by whom.
    assert_eq!(
        body.lines().filter(|l| l.starts_with("cder_device_allocated{") && l.ends_with(" 1")).count(),
        1,
        "{body}"
    );

    let (_named, port) = exporter(dir.path(), &socket, &["--job-labels"]);
    let (_, body) = get(port, "/metrics", "application/openmetrics-text;version=1.0.0").unwrap();
    let held = body.lines().find(|l| l.starts_with("cder_device_allocated{") && l.ends_with(" 1")).unwrap_or_default();
    assert!(held.contains("hpc_job=\"987654\"") && held.contains("lrms=\"slurm\""), "{body}");
}

/// A job's measured use, as the fake NVML reports it to cderd's sampler,
/// through the exporter into Prometheus: the utilisation gauge of each of
/// its GPUs and the active-seconds counter, against cderd's own figures.
#[test]
fn prometheus_scrapes_the_measured_use_of_a_job() {
    use cder_fake_nvml::{FakeDevice, FakeDeviceUsage, FakeNvml, FakeUsage};
    if !have_prometheus() {
        return;
    }
    let library = cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (machine, usage_file) = (dir.path().join("machine.json"), dir.path().join("usage.json"));
    let gpus: Vec<FakeDevice> = (0..2).map(|i| FakeDevice::a100("e0000000", i, 40960)).collect();
    let (busy, idle) = (gpus[0].uuid.clone(), gpus[1].uuid.clone());
    FakeNvml { devices: gpus, fail: vec![] }.write(&machine).unwrap();
    let at = |percent: u32, mib: u64| FakeDeviceUsage {
        gpu_percent: percent,
        memory_percent: percent / 2,
        memory_used_mib: mib,
        processes: vec![],
    };
    let usage = FakeUsage { devices: [(busy.clone(), at(80, 2048)), (idle.clone(), at(0, 0))].into(), gpm: false };
    usage.write(&usage_file).unwrap();
    for i in 0..2 {
        std::fs::write(dir.path().join(format!("nvidia{i}")), b"").unwrap();
    }
    let socket = dir.path().join("cderd.sock");
    let text = format!(
        "[node]\nsocket = {socket:?}\nstate_dir = {:?}\n[node.health]\nwatch = false\n[node.usage]\nsample_period_s = 0.2\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {library:?}\n\
         device_path = \"{}/nvidia{{minor}}\"\n",
        dir.path().join("state"),
        dir.path().display()
    );
    let config = dir.path().join("cder.toml");
    std::fs::write(&config, text).unwrap();
    let mut cderd = cder_testkit::TestNode::new(cderd_binary(), &config, &socket, dir.path().join("cderd.log"))
        .env("CDER_FAKE_NVML", &machine)
        .env("CDER_FAKE_NVML_USAGE", &usage_file);
    cderd.start(Duration::from_secs(30));
    let mut client = cderd.client();
    let job: cder_model::JobKey = "slurm:4243".parse().unwrap();
    let request = cder_protocol::AllocRequest {
        job: job.clone(),
        uid: 1000,
        count: 2,
        cder_type: "gpgpu".into(),
        min_memory_mib: None,
        model: None,
        devices: None,
        device_files: None,
        wait_ms: None,
        prepare_cgroups: None,
        shares: None,
    };
    client.alloc(&request).unwrap();
    let (_exporter, _prometheus, prom_port, log) = scrape(dir.path(), &socket);

    let value = |r: &serde_json::Value| r["value"][1].as_str().unwrap_or_default().parse::<f64>().unwrap_or(f64::NAN);
    let one = |q: &str| query(prom_port, q).first().map(value);
    // The gauges: the latest sample of each GPU, as the fake reports it.
    cder_testkit::wait_for("the busy GPU's utilisation in Prometheus", Duration::from_secs(30), || {
        one(&format!("DCGM_FI_DEV_GPU_UTIL{{hpc_job=\"4243\",UUID=\"{busy}\"}}")) == Some(80.0)
    });
    assert_eq!(one(&format!("DCGM_FI_DEV_GPU_UTIL{{hpc_job=\"4243\",UUID=\"{idle}\"}}")), Some(0.0), "{}", log());
    assert_eq!(one(&format!("DCGM_FI_DEV_FB_USED{{hpc_job=\"4243\",UUID=\"{busy}\"}}")), Some(2048.0), "{}", log());

    // The counter: what cderd had counted at the scrape Prometheus holds.
    // Read Prometheus between two readings of cderd, so the scraped value
    // lies between them (it is at most one scrape, 1 s, old).
    std::thread::sleep(Duration::from_secs(3));
    let active_now = |client: &mut cder_protocol::Client| {
        let u = client.usage(&cder_protocol::UsageRequest { job: Some(job.clone()), ..Default::default() }).unwrap();
        let of = |uuid: &str| u.devices.iter().find(|d| d.uuid == uuid).and_then(|d| d.active_seconds).unwrap();
        (of(&busy), of(&idle))
    };
    let (before, _) = active_now(&mut client);
    let scraped = one(&format!("cder_job_active_seconds_total{{hpc_job=\"4243\",UUID=\"{busy}\"}}")).unwrap();
    let idle_scraped = one(&format!("cder_job_active_seconds_total{{hpc_job=\"4243\",UUID=\"{idle}\"}}"));
    let (after, idle_after) = active_now(&mut client);
    assert!(scraped >= 2.0, "busy GPU: {scraped} s active in Prometheus\n{}", log());
    assert!(
        scraped >= before - 1.5 && scraped <= after + 0.01,
        "Prometheus {scraped} s; cderd {before} s before and {after} s after the query"
    );
    assert_eq!((idle_scraped, idle_after), (Some(0.0), 0.0), "the idle GPU counts no active time");
}
