//! `cder-registryd --config FILE`: the cluster's vGPGPU registry service.

// The clap arguments' doc comments are the --help text, printed as written:
// `[registry]` or `<lrms>:<id>` there are words for the admin, not Markdown.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

/// The cluster vGPGPU registry.
#[derive(Parser, Debug)]
#[command(
    name = "cder-registryd",
    version,
    about = "The cluster's vGPGPU registry: hands GPU backends (rCUDA / VCL servers) on any node to jobs on any node",
    long_about = "cder-registryd pools the site's GPU backends — one API-interception server (rCUDA or VCL) \
per GPU, started by cder-vgpgpu-factory on each GPU node — and hands them to jobs, each backend to one \
job at a time. It speaks HTTP with JSON bodies on [registry] listen (docs/vgpgpu.md): register, \
unregister, request, release, query, offline/online and status.\n\n\
Every request must carry `Authorization: MUNGE <credential>` whose payload is the request itself \
(\"METHOD PATH\\n\" + body); anything else is refused with 401. Root and [registry] operators may \
change state; any authenticated user may query. State lives in SQLite (WAL, synchronous=FULL) at \
<[registry] state_dir>/registry.db and is committed before a reply is sent, so the service may be \
killed at any moment. Request bodies are limited to [registry] max_body_bytes.\n\n\
The credential is checked before the body is read. A client has [registry] header_timeout_s \
to send its headers and body_timeout_s to send its body; at most [registry] max_connections \
are held (the oldest not yet authenticated is dropped for a new one), and at most \
max_connections_per_uid authenticated requests of one uid at once, by one event loop and \
--threads workers. The state directory is kept 0700 and the database 0600; a state \
directory writable by group or others is refused.\n\n\
Logs go to stderr (journald under systemd); RUST_LOG=debug for more.",
    after_help = "EXAMPLES:\n    cder-registryd --config /etc/cder/cder.toml\n    cder-registryd --listen 0.0.0.0:8731 --state-dir /var/lib/cder-registry\n    cder-registryd --check          # validate config and state, print the counts, exit\n\n\
    curl -s -H \"Authorization: MUNGE $(printf 'GET /v1/status\\n' | munge)\" http://registry:8731/v1/status\n\n\
EXIT STATUS:\n    2  bad command line or configuration\n    1  cannot start (state, address) or serving failed"
)]
pub(crate) struct Args {
    /// Configuration file [default: $CDER_CONFIG, else /etc/cder/cder.toml].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen here instead of [registry] listen.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<String>,
    /// Keep state here instead of [registry] state_dir.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Worker threads (credential checks and database work); connections
    /// are held by one event loop, bounded by [registry] max_connections.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: u16,
    /// Check the configuration and the state, print the counts and exit.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    cder_registry::startup::init_logging();
    let mut rc = match cder_registry::startup::load(args.config.as_deref(), false) {
        Ok((_, rc)) => rc,
        Err(e) => {
            eprintln!("cder-registryd: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(l) = args.listen {
        rc.listen = l;
    }
    if let Some(d) = args.state_dir {
        rc.state_dir = d;
    }
    let registry = match cder_registry::service::Registry::open(&rc) {
        Ok(r) => Arc::new(r),
        Err(e) => {
            eprintln!("cder-registryd: cannot start: {e}");
            return ExitCode::from(if matches!(e, cder_registry::service::StartError::Operators(_)) { 2 } else { 1 });
        }
    };
    if args.check {
        return match registry.status().and_then(|s| registry.check().map(|p| (s, p))) {
            Ok((s, problems)) => {
                for (m, c) in &s.counts {
                    println!("{m}: {} total, {} free, {} in use, {} offline", c.total, c.free, c.in_use, c.offline);
                }
                for p in &problems {
                    eprintln!("cder-registryd: state: {p}");
                }
                if problems.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
            Err(e) => {
                eprintln!("cder-registryd: {e}");
                ExitCode::from(1)
            }
        };
    }
    let limits = match cder_registry::http::Limits::from_config(&rc, usize::from(args.threads)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cder-registryd: {e}");
            return ExitCode::from(2);
        }
    };
    let listener = match std::net::TcpListener::bind(&rc.listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cder-registryd: cannot listen on {}: {e}", rc.listen);
            return ExitCode::from(1);
        }
    };
    tracing::info!(
        listen = %rc.listen,
        policy = registry.policy_name(),
        state = %rc.state_dir.display(),
        workers = limits.workers,
        max_connections = limits.max_connections,
        max_connections_per_uid = limits.max_connections_per_uid,
        header_timeout_s = rc.header_timeout_s,
        body_timeout_s = rc.body_timeout_s,
        version = env!("CARGO_PKG_VERSION"),
        "cder-registryd serving"
    );
    if let Err(e) = cder_registry::http::serve(registry, listener, limits) {
        eprintln!("cder-registryd: serving: {e}");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
