//! A real Prometheus (Debian's package) scrapes a real cder-exporter in
//! front of a real cderd; the values are read back through Prometheus's
//! HTTP API and compared with cderd's state.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use cder_testkit::TestNode;

const EXPORTER: &str = env!("CARGO_BIN_EXE_cder-exporter");

/// The cderd binary beside cder-exporter, built first when missing.
fn cderd_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let path = Path::new(EXPORTER).with_file_name("cderd");
            if !path.exists() {
                let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
                let status = Command::new(cargo)
                    .args(["build", "-j", "2", "-p", "cderd", "--bin", "cderd"])
                    .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
                    .stdin(Stdio::null())
                    .status()
                    .expect("run cargo build -p cderd");
                assert!(status.success(), "cargo build -p cderd failed");
            }
            path
        })
        .clone()
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

/// An instant query's result vector.
fn query(port: u16, q: &str) -> Vec<serde_json::Value> {
    let Some((head, body)) = get(port, &format!("/api/v1/query?query={}", encode(q)), "application/json") else {
        return vec![];
    };
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{q}: {head}\n{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{q}: {body}");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

#[test]
fn prometheus_scrapes_the_exporter() {
    let Some(prometheus) = cder_testkit::find_program("prometheus") else {
        cder_testkit::missing("missing prometheus (Debian package prometheus; deploy/install-deps.sh)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("cderd.sock");
    let mut text = format!(
        "[node]\nsocket = {socket:?}\nstate_dir = {:?}\n[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
        dir.path().join("state")
    );
    for i in 0..4 {
        text += &format!(
            "[[cder.device]]\nindex = {i}\nmodel = \"Tesla T4\"\nmemory_mb = 15360\npath = \"/dev/nvidia{i}\"\nnuma_node = 0\ndev = \"195:{i}\"\n"
        );
    }
    let config = dir.path().join("cder.toml");
    std::fs::write(&config, text).unwrap();
    let cderd = TestNode::started(cderd_binary(), &config, &socket, dir.path().join("cderd.log"));
    let mut client = cderd.client();
    let request = cder_protocol::AllocRequest {
        job: "slurm:4242".parse().unwrap(),
        uid: 1000,
        count: 2,
        cder_type: "gpgpu".into(),
        min_memory_mb: None,
        model: None,
        devices: None,
        device_files: None,
        wait_ms: None,
        prepare_cgroups: None,
        shares: None,
    };
    let allocation = client.alloc(&request).unwrap();
    let held: Vec<String> = allocation.devices.iter().map(|d| d.uuid.clone()).collect();

    let port = free_port();
    let _exporter = Running(
        Command::new(EXPORTER)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--hostname", "wn01", "--socket"])
            .arg(&socket)
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("exporter.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    cder_testkit::wait_for("cder-exporter to listen", Duration::from_secs(30), || {
        get(port, "/metrics", "*/*").is_some()
    });
    let (head, body) = get(port, "/metrics", "application/openmetrics-text;version=1.0.0").unwrap();
    assert!(head.contains("Content-Type: application/openmetrics-text; version=1.0.0"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{body}");

    let prom_port = free_port();
    let prom_config = dir.path().join("prometheus.yml");
    std::fs::write(
        &prom_config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: cder\n    \
             static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let _prometheus = Running(
        Command::new(prometheus)
            .arg(format!("--config.file={}", prom_config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let log = || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    cder_testkit::wait_for("Prometheus to scrape cder-exporter", Duration::from_secs(60), || {
        query(prom_port, "up{job=\"cder\"} == 1").len() == 1
    });
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
        query(prom_port, "sum(cder_device_allocated)").first().map(|r| r["value"][1].clone()) == Some("0".into())
    });
}
