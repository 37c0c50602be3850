//! `[registry]` in `cder.toml`: the cluster's vGPGPU registry, as its
//! server (`cder-registryd`), its clients (the SLURM plugin, the TORQUE
//! monitor, the GLUE provider, `cderctl registry`) and the per-node factory
//! (`cder-vgpgpu-factory`, `[registry.factory]`) see it.
//!
//! ```toml
//! [registry]
//! url = "http://registry.example.org:8731"
//! listen = "0.0.0.0:8731"
//! operators = ["slurm"]
//! policy = "local-first"
//!
//! [registry.factory]
//! launcher = ["/usr/local/sbin/vgpgpu-backend", "start", "{uuid}", "{index}", "{port}", "{visible_env}={index}"]
//! ```

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The vGPGPU methods: one vocabulary for every part of cder (`cder_request`).
pub use cder_request::{UnknownMethod, VgpgpuMethod};

/// How the registry picks backends for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RegistryPolicy {
    /// Uniformly random among the free backends (the thesis's "random").
    Random,
    /// Backends on the job's own node first (the thesis's "prioritised").
    #[default]
    LocalFirst,
    /// Backends on the hosts serving the fewest jobs first.
    Spread,
}

/// `[registry]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// Where clients reach the registry: `http://host:port` (plain HTTP;
    /// every request carries a MUNGE credential).
    #[serde(default = "default_url")]
    pub url: String,
    /// The address `cder-registryd` listens on.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Where the registry keeps its SQLite database.
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// Users (names or uids) who, besides root, may register, request,
    /// release and set backends offline — e.g. the SLURM user, or the
    /// TORQUE monitor's operator account. Any authenticated user may query.
    #[serde(default)]
    pub operators: Vec<String>,
    /// `random`, `local-first` or `spread`.
    #[serde(default)]
    pub policy: RegistryPolicy,
    /// munged's socket (default: MUNGE's own default).
    #[serde(default)]
    pub munge_socket: Option<PathBuf>,
    /// The `munge` program clients use to make credentials.
    #[serde(default = "default_munge")]
    pub munge_program: PathBuf,
    /// The `unmunge` program the registry uses to check them.
    #[serde(default = "default_unmunge")]
    pub unmunge_program: PathBuf,
    /// Largest request body the registry reads, in bytes.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Client timeout for one request, in seconds.
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
    /// Connections `cder-registryd` holds open at once; beyond it the
    /// oldest one still sending its headers is dropped.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Authenticated requests of one uid in progress at once (its body
    /// being read, or being served); more are refused at once, so that one
    /// user holding connections cannot take every slot.
    #[serde(default = "default_max_connections_per_uid")]
    pub max_connections_per_uid: usize,
    /// Seconds a client has, from connecting, to send its request headers.
    #[serde(default = "default_io_timeout")]
    pub header_timeout_s: u64,
    /// Seconds an authenticated client has to send its body, and to take
    /// the reply.
    #[serde(default = "default_io_timeout")]
    pub body_timeout_s: u64,
    /// First port handed to a host's backends (rCUDA's own default is 8308).
    #[serde(default = "default_port_base")]
    pub port_base: u16,
    /// Where the SLURM plugin writes a job's VCL node file.
    #[serde(default = "default_vcl_dir")]
    pub vcl_dir: PathBuf,
    /// `[registry.factory]`, for `cder-vgpgpu-factory` on GPU nodes.
    #[serde(default)]
    pub factory: Option<FactoryConfig>,
}

/// `[registry.factory]`: how a GPU node starts its backends.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FactoryConfig {
    /// This node's name as jobs reach it (default: its FQDN).
    #[serde(default)]
    pub host: Option<String>,
    /// The command that starts one backend, as an argv template. It must
    /// return once the backend runs (e.g. `docker run -d …`). Placeholders:
    /// `{uuid}`, `{index}`, `{port}`, `{host}`, `{vendor}`, `{methods}`
    /// (comma-separated), `{visible_env}` (`CUDA_VISIBLE_DEVICES` on NVIDIA,
    /// `GPU_DEVICE_ORDINAL` otherwise), `{path}` (the device file).
    pub launcher: Vec<String>,
    /// Optional argv template that stops a backend whose device is gone.
    #[serde(default)]
    pub stop: Option<Vec<String>>,
    /// The methods every backend of this node serves (default by vendor:
    /// rCUDA and VCL on NVIDIA, VCL otherwise).
    #[serde(default)]
    pub methods: Option<Vec<VgpgpuMethod>>,
    /// Seconds between two inventory walks when running as a service.
    #[serde(default = "default_interval")]
    pub interval_s: u64,
}

/// The largest `max_body_bytes`: a body travels inside its MUNGE
/// credential, which `munge --string` takes as one argument (Linux allows
/// 128 KiB), so larger bodies could not be sent anyway.
pub const MAX_BODY_LIMIT: usize = 1024 * 1024;

/// The placeholders a launcher template may use.
pub const LAUNCHER_PLACEHOLDERS: [&str; 8] =
    ["uuid", "index", "port", "host", "vendor", "methods", "visible_env", "path"];

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            url: default_url(),
            listen: default_listen(),
            state_dir: default_state_dir(),
            operators: Vec::new(),
            policy: RegistryPolicy::default(),
            munge_socket: None,
            munge_program: default_munge(),
            unmunge_program: default_unmunge(),
            max_body_bytes: default_max_body(),
            timeout_s: default_timeout(),
            max_connections: default_max_connections(),
            max_connections_per_uid: default_max_connections_per_uid(),
            header_timeout_s: default_io_timeout(),
            body_timeout_s: default_io_timeout(),
            port_base: default_port_base(),
            vcl_dir: default_vcl_dir(),
            factory: None,
        }
    }
}

impl RegistryConfig {
    /// Checks what TOML types cannot; the error is `(key, message)`.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |k: &str, m: String| Err((format!("registry.{k}"), m));
        match self.url.strip_prefix("http://") {
            Some(rest) if !rest.is_empty() && !rest.starts_with('/') => {}
            _ => return bad("url", format!("{:?} must look like http://host:port", self.url)),
        }
        if self.listen.parse::<std::net::SocketAddr>().is_err() && !self.listen.contains(':') {
            return bad("listen", format!("{:?} is not host:port", self.listen));
        }
        if !(256..=MAX_BODY_LIMIT).contains(&self.max_body_bytes) {
            return bad("max_body_bytes", format!("must be 256 to {MAX_BODY_LIMIT}"));
        }
        if !(1..=65536).contains(&self.max_connections) {
            return bad("max_connections", "must be 1 to 65536".into());
        }
        if !(1..=65536).contains(&self.max_connections_per_uid) {
            return bad("max_connections_per_uid", "must be 1 to 65536".into());
        }
        for (key, v) in [("header_timeout_s", self.header_timeout_s), ("body_timeout_s", self.body_timeout_s)] {
            if !(1..=3600).contains(&v) {
                return bad(key, "must be 1 to 3600".into());
            }
        }
        if self.timeout_s == 0 {
            return bad("timeout_s", "must be at least 1".into());
        }
        if self.port_base == 0 {
            return bad("port_base", "must not be 0".into());
        }
        if let Some(f) = &self.factory {
            if f.launcher.is_empty() || f.launcher[0].trim().is_empty() {
                return bad("factory.launcher", "must name a program".into());
            }
            for arg in f.launcher.iter().chain(f.stop.iter().flatten()) {
                if let Some(name) = unknown_placeholder(arg) {
                    return bad(
                        "factory.launcher",
                        format!(
                            "unknown placeholder {{{name}}} in {arg:?} (known: {})",
                            LAUNCHER_PLACEHOLDERS.join(", ")
                        ),
                    );
                }
            }
            if f.stop.as_ref().is_some_and(|s| s.is_empty()) {
                return bad("factory.stop", "must name a program when given".into());
            }
            if f.methods.as_ref().is_some_and(|m| m.is_empty()) {
                return bad("factory.methods", "must list at least one method when given".into());
            }
            if f.interval_s == 0 {
                return bad("factory.interval_s", "must be at least 1".into());
            }
        }
        Ok(())
    }
}

/// The first `{name}` in `arg` that is not a known placeholder.
fn unknown_placeholder(arg: &str) -> Option<String> {
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after.find('}')?;
        let name = &after[..close];
        if !LAUNCHER_PLACEHOLDERS.contains(&name) {
            return Some(name.to_string());
        }
        rest = &after[close + 1..];
    }
    None
}

fn default_url() -> String {
    "http://127.0.0.1:8731".into()
}
fn default_listen() -> String {
    "127.0.0.1:8731".into()
}
fn default_state_dir() -> PathBuf {
    "/var/lib/cder-registry".into()
}
fn default_munge() -> PathBuf {
    "/usr/bin/munge".into()
}
fn default_unmunge() -> PathBuf {
    "/usr/bin/unmunge".into()
}
fn default_max_body() -> usize {
    64 * 1024
}
fn default_timeout() -> u64 {
    10
}
fn default_max_connections() -> usize {
    512
}
fn default_max_connections_per_uid() -> usize {
    64
}
fn default_io_timeout() -> u64 {
    10
}
fn default_port_base() -> u16 {
    8308
}
fn default_vcl_dir() -> PathBuf {
    "/run/cder/vgpgpu".into()
}
fn default_interval() -> u64 {
    60
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_parse_case_insensitively_and_print_as_published() {
        assert_eq!("rcuda".parse::<VgpgpuMethod>().unwrap(), VgpgpuMethod::Rcuda);
        assert_eq!("VCL".parse::<VgpgpuMethod>().unwrap().to_string(), "VCL");
        assert!("opencl".parse::<VgpgpuMethod>().is_err());
        assert_eq!(VgpgpuMethod::defaults_for_vendor("AMD"), vec![VgpgpuMethod::Vcl]);
    }

    #[test]
    fn validate_names_the_key() {
        let mut c = RegistryConfig { url: "ftp://x".into(), ..RegistryConfig::default() };
        assert_eq!(c.validate().unwrap_err().0, "registry.url");
        c.url = default_url();
        c.factory = Some(FactoryConfig {
            host: None,
            launcher: vec!["run".into(), "{uid}".into()],
            stop: None,
            methods: None,
            interval_s: 5,
        });
        let (key, msg) = c.validate().unwrap_err();
        assert_eq!(key, "registry.factory.launcher");
        assert!(msg.contains("{uid}"), "{msg}");
        c.factory.as_mut().unwrap().launcher = vec!["run".into(), "{uuid}:{port}".into()];
        assert!(c.validate().is_ok());
        for (key, bad) in [
            ("registry.max_connections", RegistryConfig { max_connections: 0, ..c.clone() }),
            ("registry.max_connections_per_uid", RegistryConfig { max_connections_per_uid: 0, ..c.clone() }),
            ("registry.header_timeout_s", RegistryConfig { header_timeout_s: 0, ..c.clone() }),
            ("registry.body_timeout_s", RegistryConfig { body_timeout_s: 86_400, ..c.clone() }),
            ("registry.max_body_bytes", RegistryConfig { max_body_bytes: usize::MAX, ..c.clone() }),
        ] {
            assert_eq!(bad.validate().unwrap_err().0, key);
        }
    }
}
