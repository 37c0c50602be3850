//! `cderd --config FILE`: the cder node daemon.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

use cder_model::Config;

/// The cder node daemon: exclusive, durable allocation of this node's CDERs.
#[derive(Parser, Debug)]
#[command(
    name = "cderd",
    version,
    about = "The cder node daemon: gives each of this node's CDERs (GPUs …) to one job at a time",
    long_about = "cderd owns the CDERs of a worker node and hands them to jobs, one job per device. \
The SLURM plugin, the TORQUE hooks and cderctl are its clients; they talk to it over a Unix \
stream socket ([node] socket, default /run/cder/cderd.sock) with newline-delimited JSON \
(docs/protocol.md). Callers are identified by SO_PEERCRED: root and [node] operators may \
allocate, release, drain, resume and reconcile; any user may read status and its own jobs.\n\n\
State lives in SQLite (WAL, synchronous=FULL) at <[node] state_dir>/cderd.db; every change is \
committed before it is acknowledged, so the daemon may be killed at any moment. At start it \
discovers the devices (each type through its discovery: NVML, ROCm SMI, Level Zero, the /dev scan, \
`auto` decided once here and logged, or the static config; a type with no device, or SLURM's gres.conf \
counting otherwise, stops it), reconciles the device table with them \
(a vanished device keeps its allocation until released) and re-asserts device-file \
enforcement when [node.enforcement] is on.\n\n\
While cderd keeps a device out of the pool (a process still holds it after its job, it is drained, \
its file vanished, discovery found it unhealthy) it drains this node in the batch system, so that no \
job is placed on it: `scontrol update NodeName=N State=DRAIN Reason=\"cder: gpgpu:1 (/dev/nvidia1) kept \
out: …\"` (SLURM) or `pbsnodes -o -N \"cder: …\" N` (TORQUE), and returns the node (State=UNDRAIN, \
`pbsnodes -c`) once every device is back; a node drained with a reason not beginning `cder:` (an \
admin's) is never touched. Off the ledger lock, each call killed after [node.batch] timeout_s; \
[node.batch] drain_node (auto | slurm | torque | off) and node_name set it.\n\n\
With [node.enforcement] device_files = true the NVIDIA driver must leave device files alone \
(NVreg_ModifyDeviceFiles=0, e.g. in /etc/modprobe.d/): --check and the start warn when \
/proc/driver/nvidia/params says ModifyDeviceFiles: 1, and a watcher sets owner, mode and ACL again \
(and logs it) when it finds a device file changed, e.g. re-created 0666 by nvidia-modprobe.\n\n\
Logs go to stderr (journald captures them under systemd); set RUST_LOG (e.g. cderd=debug) \
for more or less detail.",
    after_help = "EXAMPLES:\n    cderd --config /etc/cder/cder.toml\n    CDER_CONFIG=/tmp/test.toml RUST_LOG=debug cderd\n    cderd --config /etc/cder/cder.toml --check    # validate config, discovery and state, then exit\n\n\
EXIT STATUS:\n    2  bad command line or configuration\n    1  cannot start (discovery, state, socket) or serving failed"
)]
pub(crate) struct Args {
    /// Configuration file [default: $CDER_CONFIG, else /etc/cder/cder.toml].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check the configuration, discovery and state (no device is touched), print the counts and exit;
    /// warns (on stderr) where the NVIDIA driver would undo device_files (ModifyDeviceFiles: 1).
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Before any thread starts, so that every thread inherits the mask and
    // only the signal thread below sees SIGTERM.
    if let Err(e) = cderd::sys::block_termination_signals() {
        eprintln!("cderd: cannot block SIGTERM: {e}");
        return ExitCode::from(1);
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let config = match Config::load(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cderd: {e}");
            return ExitCode::from(2);
        }
    };
    let socket = config.node.socket.clone();
    let mode = config.node.socket_mode;
    let daemon =
        match if args.check { cderd::Daemon::inspect(config) } else { cderd::Daemon::start(config) } {
            Ok(d) => Arc::new(d),
            Err(e) => {
                eprintln!("cderd: cannot start: {e}");
                return ExitCode::from(
                    if matches!(e, cderd::StartError::Operator(_) | cderd::StartError::Sharing(_)) { 2 } else { 1 },
                );
            }
        };
    // The NVIDIA driver would undo device_files (docs/security.md).
    for warning in cderd::enforce::driver_warnings(daemon.config()) {
        if args.check {
            eprintln!("cderd: warning: {warning}");
        } else {
            tracing::warn!("{warning}");
        }
    }
    if args.check {
        return match daemon.status().and_then(|s| daemon.check_invariants().map(|p| (s, p))) {
            Ok((status, problems)) if problems.is_empty() => {
                for (t, c) in &status.counts {
                    let source = daemon.config().cder(t).map_or("?", |c| cder_inventory::source_name(c.discovery));
                    println!(
                        "{t}: {} total, {} free, {} allocated, {} offline, {} unhealthy; devices from {source}",
                        c.total, c.free, c.allocated, c.offline, c.unhealthy
                    );
                }
                ExitCode::SUCCESS
            }
            Ok((_, problems)) => {
                for p in problems {
                    eprintln!("cderd: state: {p}");
                }
                ExitCode::from(1)
            }
            Err(e) => {
                eprintln!("cderd: {e}");
                ExitCode::from(1)
            }
        };
    }
    let listener = match cderd::server::bind(&socket, mode) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cderd: {e}");
            return ExitCode::from(1);
        }
    };
    tracing::info!(socket = %socket.display(), mode = format!("{mode:o}"), version = env!("CARGO_PKG_VERSION"), "cderd listening");
    cderd::health::spawn(&daemon);
    cderd::vendor_watch::spawn_health(&daemon);
    cderd::usage::spawn(&daemon);
    cderd::Daemon::watch_leftovers(&daemon, std::time::Duration::from_secs(10));
    cderd::Daemon::watch_node_drain(&daemon);
    cderd::file_watch::spawn(&daemon);
    let stopping = Arc::clone(&daemon);
    let socket_path = socket.clone();
    // SIGTERM/SIGINT: let the operation in progress finish, remove the
    // socket, exit. (SIGKILL is safe too; this only makes stops tidy.)
    std::thread::spawn(move || {
        if let Ok(signal) = cderd::sys::wait_for_termination() {
            let _held = stopping.quiesce();
            let _ = std::fs::remove_file(&socket_path);
            tracing::info!(signal, "cderd stopping");
            std::process::exit(0);
        }
    });
    match cderd::server::serve(daemon, listener) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cderd: serving: {e}");
            ExitCode::from(1)
        }
    }
}
