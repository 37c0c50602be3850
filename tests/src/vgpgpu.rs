//! A real `cder-registryd` on 127.0.0.1 with a private port, state dir and
//! its own munged ([`crate::munge::Munged`]); it can be killed with
//! SIGKILL and restarted on the same state. Also the fake vGPGPU backend
//! used by the factory tests (`cder-test-vgpgpu-backend`, a small TCP
//! server standing in for an rCUDA/VCL server in a container: container
//! runtimes and GPUs are not on these machines).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::munge::Munged;

/// A running registry.
pub struct Registryd {
    /// The munged the registry verifies credentials with; clients in the test use it too.
    pub munged: Munged,
    dir: tempfile::TempDir,
    child: Option<Child>,
    bin: PathBuf,
    /// The loopback port the registry listens on.
    pub port: u16,
    starts: u32,
}

/// Builds (if needed) and finds a workspace binary
/// ([`cder_testkit::workspace_binary`]).
pub fn binary(package: &str, name: &str) -> Result<PathBuf, String> {
    cder_testkit::workspace_binary(package, name)
}

impl Registryd {
    /// Starts munged and cder-registryd with `[registry]` plus `extra`
    /// lines (e.g. `policy = "spread"`, `operators = ["daemon"]`).
    pub fn start(extra: &str) -> Result<Registryd, String> {
        Self::start_in(None, extra)
    }

    /// As [`Registryd::start`], with the state in `state_dir` (e.g. on a
    /// small file system the test fills) instead of the temp dir.
    pub fn start_in(state_dir: Option<&Path>, extra: &str) -> Result<Registryd, String> {
        let munged = Munged::start()?;
        let bin = binary("cder-registry", "cder-registryd")?;
        let dir = tempfile::Builder::new().prefix("cder-registry-").tempdir().map_err(|e| e.to_string())?;
        let port = crate::ldap::free_port();
        let config = format!(
            "[registry]\nurl = \"http://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\nstate_dir = \"{}\"\nvcl_dir = \"{}\"\nmunge_socket = \"{}\"\n{extra}\n",
            state_dir.map_or_else(|| dir.path().join("state"), Path::to_path_buf).display(),
            dir.path().join("vcl").display(),
            munged.socket().display()
        );
        std::fs::write(dir.path().join("cder.toml"), config).map_err(|e| e.to_string())?;
        let mut r = Registryd { munged, dir, child: None, bin, port, starts: 0 };
        r.launch()?;
        Ok(r)
    }

    /// The config file (`[registry]` only), for clients and other daemons.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("cder.toml")
    }

    /// Appends lines to the config file (e.g. a `[registry.factory]`).
    pub fn append_config(&self, text: &str) -> Result<(), String> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(self.config_path()).map_err(|e| e.to_string())?;
        f.write_all(text.as_bytes()).map_err(|e| e.to_string())
    }

    /// The temp dir.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn launch(&mut self) -> Result<(), String> {
        self.starts += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("registryd.log"))
            .map_err(|e| e.to_string())?;
        let child = Command::new(&self.bin)
            .arg("--config")
            .arg(self.config_path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.bin.display()))?;
        self.child = Some(child);
        let serving = cder_testkit::try_wait_for(Duration::from_secs(30), Duration::from_millis(50), || {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() && self.client().status().is_ok() {
                return Ok(Some(()));
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                return Err(format!("cder-registryd exited ({status}): {}", self.log()));
            }
            Ok(None)
        })?;
        serving.ok_or_else(|| format!("cder-registryd not serving after 30 s: {}", self.log()))
    }

    /// A client as root (the test runs as root), through this munged.
    pub fn client(&self) -> cder_registry::RegistryClient {
        let munge = cder_registry::Munge {
            munge_program: "/usr/bin/munge".into(),
            unmunge_program: "/usr/bin/unmunge".into(),
            socket: Some(self.munged.socket()),
        };
        cder_registry::RegistryClient::new(&self.url(), munge, Duration::from_secs(30)).expect("a valid URL")
    }

    /// SIGKILL, no clean-up of any kind.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same state.
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill9();
        self.launch()
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// The daemon's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registryd.log")).unwrap_or_default()
    }

    /// One raw HTTP exchange with any `Authorization` value (or none):
    /// status and body.
    pub fn raw(&self, method: &str, path: &str, auth: Option<&str>, body: &[u8]) -> Result<(u16, String), String> {
        let mut head =
            format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
        if let Some(a) = auth {
            head.push_str(&format!("Authorization: {a}\r\n"));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(body);
        let reply = self.raw_bytes(&bytes)?;
        let r = cder_registry::client::parse_reply(&reply)?;
        Ok((r.status, String::from_utf8_lossy(&r.body).into_owned()))
    }

    /// Writes `bytes` on a fresh connection and reads until the server closes.
    pub fn raw_bytes(&self, bytes: &[u8]) -> Result<Vec<u8>, String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        s.write_all(bytes).map_err(|e| e.to_string())?;
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        Ok(out)
    }

    /// A credential bound to this request, made as `user` (None: root).
    pub fn credential(&self, user: Option<&str>, method: &str, path: &str, body: &[u8]) -> Result<String, String> {
        let payload = cder_registry::munge::request_payload(method, path, body);
        self.munged.encode_as(user, &payload)
    }

    /// Registers `n` backends on `host` (UUIDs `<prefix>-<i>`), both methods.
    pub fn register_many(&self, prefix: &str, host: &str, n: u32) -> Result<(), String> {
        use cder_model::VgpgpuMethod;
        let c = self.client();
        for i in 0..n {
            let r = cder_registry::api::RegisterRequest {
                uuid: format!("{prefix}-{i}"),
                vendor: "Nvidia".into(),
                device: i,
                host: host.into(),
                methods: vec![VgpgpuMethod::Rcuda, VgpgpuMethod::Vcl],
            };
            c.register(&r).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

impl Drop for Registryd {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Kills the fake backends whose pid files (`*.pid`) are in `dir`.
pub fn kill_backends(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        if e.path().extension().is_some_and(|x| x == "pid") {
            if let Some(pid) = std::fs::read_to_string(e.path()).ok().and_then(|s| s.trim().parse::<i32>().ok()) {
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            }
        }
    }
}

/// The `[registry.factory]` launcher/stop lines that start
/// `cder-test-vgpgpu-backend` detached, with the device pinned, its pid in
/// `<dir>/backend-<host>-<port>.pid`.
pub fn factory_section(backend: &Path, dir: &Path, host: &str) -> String {
    let pid = format!("{}/backend-{{host}}-{{port}}.pid", dir.display());
    format!(
        "\n[registry.factory]\nhost = \"{host}\"\ninterval_s = 1\n\
launcher = [\"/bin/sh\", \"-c\", \"{{visible_env}}={{index}} setsid {} {{host}} {{port}} {{uuid}} {pid} >> {}/backends.log 2>&1 < /dev/null &\"]\n\
stop = [\"/bin/sh\", \"-c\", \"kill $(cat {pid}) && rm -f {pid}\"]\n",
        backend.display(),
        dir.display(),
    )
}

/// Writes `<registry dir>/<host>.toml` for one GPU "node": the registry's
/// `[registry]` section, a `[registry.factory]` that launches
/// `cder-test-vgpgpu-backend` on `host`, and a static `[[cder]]` with one
/// device per `(index, uuid)` (device files are plain files in the temp dir).
pub fn node_config(
    r: &Registryd,
    backend: &Path,
    host: &str,
    vendor: &str,
    gpus: &[(u32, &str)],
) -> Result<PathBuf, String> {
    node_config_in(&r.config_path(), r.dir(), backend, host, vendor, gpus)
}

/// [`node_config`] for any registry: `registry_config` holds its
/// `[registry]` section, and `dir` gets the config, the device files, the
/// backends' pid files and log.
pub fn node_config_in(
    registry_config: &Path,
    dir: &Path,
    backend: &Path,
    host: &str,
    vendor: &str,
    gpus: &[(u32, &str)],
) -> Result<PathBuf, String> {
    let base = std::fs::read_to_string(registry_config).map_err(|e| e.to_string())?;
    let mut text = base + &factory_section(backend, dir, host);
    text.push_str(&format!("\n[[cder]]\nname = \"gpgpu\"\nvendor = \"{vendor}\"\ndiscovery = \"static\"\n"));
    for (index, uuid) in gpus {
        let dev = dir.join(format!("{host}-gpu{index}"));
        std::fs::write(&dev, "").map_err(|e| e.to_string())?;
        text.push_str(&format!(
            "\n[[cder.device]]\nindex = {index}\nuuid = \"{uuid}\"\npci_bus_id = \"0000:0{index}:00.0\"\nmodel = \"Tesla K20m\"\nmemory_mib = 4800\npath = \"{}\"\n",
            dev.display()
        ));
    }
    let path = dir.join(format!("{host}.toml"));
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    Ok(path)
}

/// Runs `cder-vgpgpu-factory --once` with `config`: exit status and stdout.
pub fn factory_once(config: &Path) -> Result<(i32, String, String), String> {
    let bin = binary("cder-registry", "cder-vgpgpu-factory")?;
    let out = Command::new(bin)
        .arg("--config")
        .arg(config)
        .arg("--once")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The banner line a backend at `host:port` answers with.
pub fn banner(host: &str, port: u16) -> Result<String, String> {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect((host, port)).map_err(|e| format!("{host}:{port}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    Ok(text.trim().to_string())
}

/// A job script that prints its `RCUDA_*` variables and reads the banner
/// of every backend they name (`BANNER …` lines), then waits until the file
/// `$FLAG` exists (or returns at once when `FLAG` is unset).
pub const RCUDA_JOB: &str = r#"#!/bin/bash
env | grep '^RCUDA_' | sort
for j in $(seq 0 $((RCUDA_DEVICE_COUNT - 1))); do
    v=RCUDA_DEVICE_$j; e=${!v%:0}; h=${e%@*}; p=${e#*@}
    exec 3<>/dev/tcp/$h/$p && read -r line <&3 && echo "BANNER $line"; exec 3>&-
done
if [ -n "${FLAG:-}" ]; then while [ ! -e "$FLAG" ]; do sleep 0.2; done; fi
"#;

/// Runs one factory pass per "node" (`host`, NVIDIA GPU count) with the
/// fake backend; UUIDs `GPU-<node number>-<index>`.
pub fn start_backends(r: &Registryd, nodes: &[(&str, u32)]) -> Result<(), String> {
    let backend = binary("cder-tests", "cder-test-vgpgpu-backend")?;
    for (n, (host, gpus)) in nodes.iter().enumerate() {
        let uuids: Vec<String> = (0..*gpus).map(|i| format!("GPU-{n}-{i}")).collect();
        let devices: Vec<(u32, &str)> = uuids.iter().enumerate().map(|(i, u)| (i as u32, u.as_str())).collect();
        let cfg = node_config(r, &backend, host, "nvidia", &devices)?;
        let (code, out, err) = factory_once(&cfg)?;
        if code != 0 {
            return Err(format!("cder-vgpgpu-factory for {host} exited {code}: {out}{err}"));
        }
    }
    Ok(())
}
