//! `cder-exporter`: serves this node's cder metrics to Prometheus.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use cder_exporter::http::{self, Limits, Request, Response};
use cder_exporter::metrics::{render, Format, Snapshot};
use cder_protocol::{Client, UsageRequest, MAX_RECENT_SAMPLES};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "cder-exporter",
    version,
    about = "Serve this node's GPU use per job to Prometheus (OpenMetrics, dcgm-exporter's names)",
    long_about = "cder-exporter answers GET /metrics with what cderd knows at that moment: every device \
(allocated or not, and to which job), the running jobs' device-seconds and measured active seconds, the \
latest utilisation and memory sample of each held device, and the idle flag. Device series carry \
dcgm-exporter's names and labels (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED; gpu, UUID, device, modelName, \
Hostname), so Grafana boards made for it read them. Which job holds a device (hpc_job, lrms) and the \
running jobs' counters are served only with --job-labels: anyone who reaches the port reads them, while \
cderd shows other users' jobs to root and operators only (docs/metrics.md). It answers OpenMetrics 1.0.0 to a client that \
asks for it (Prometheus does), else Prometheus text 0.0.4. It must run as root or a [node] operator to see \
every job. Connections are bounded (--max-connections served, as many queued, the rest refused with 503) \
and each has deadlines (--head-timeout, --write-timeout).",
    after_help = "EXAMPLES:\n    cder-exporter --listen 127.0.0.1:9400\n    cder-exporter --listen 10.1.0.11:9400 --job-labels\n    curl -H 'Accept: application/openmetrics-text' http://127.0.0.1:9400/metrics\n\n\
EXIT STATUS:\n    1 when the address cannot be bound, 2 for bad usage; otherwise it runs until stopped."
)]
pub struct Args {
    /// Address to listen on
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9400")]
    listen: String,
    /// Label each held device with its job (hpc_job, lrms) and serve the running jobs' counters
    /// (cder_job_*); whoever reaches --listen sees them, so firewall it to Prometheus
    #[arg(long)]
    job_labels: bool,
    /// cderd's socket [default: [node] socket of the config, else /run/cder/cderd.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Config file [default: $CDER_CONFIG, else /etc/cder/cder.toml]
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The Hostname label [default: the kernel's host name]
    #[arg(long, value_name = "NAME")]
    hostname: Option<String>,
    /// Connections served at once (as many more may wait)
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    max_connections: u16,
    /// Seconds a client has to send its request head
    #[arg(long, value_name = "SECS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    head_timeout: u64,
    /// Seconds a client has to take the reply
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    write_timeout: u64,
    /// Seconds to wait for cderd's replies
    #[arg(long, value_name = "SECS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    cderd_timeout: u64,
}

/// One scrape: cderd's state now, rendered.
fn scrape(
    socket: &std::path::Path,
    timeout: Duration,
    hostname: &str,
    job_labels: bool,
    format: Format,
) -> anyhow::Result<String> {
    let mut client = Client::connect(socket, timeout)?;
    let status = client.status()?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    // The running jobs' totals and, for the gauges, a few samples per device.
    let recent = (status.devices.len() as u32).saturating_mul(4).clamp(16, MAX_RECENT_SAMPLES);
    let usage = client.usage(&UsageRequest { since: Some(now), recent: Some(recent), ..UsageRequest::default() });
    let usage = match usage {
        Ok(u) => Some(u),
        // A cderd from before the sampler answers `usage` with bad_request.
        Err(e) if e.code() == Some(cder_protocol::ErrorCode::BadRequest) => None,
        Err(e) => return Err(e.into()),
    };
    Ok(render(&Snapshot { hostname, status: &status, usage: usage.as_ref(), job_labels }, format))
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let socket = match &args.socket {
        Some(s) => s.clone(),
        None => match cder_model::Config::load(args.config.as_deref()) {
            Ok(c) => c.node.socket,
            Err(e) => {
                eprintln!("cder-exporter: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let hostname = args.hostname.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
    });
    let listener = match TcpListener::bind(&args.listen).with_context(|| format!("binding {}", args.listen)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cder-exporter: {e:#}");
            return ExitCode::from(1);
        }
    };
    let limits = Limits {
        max_connections: usize::from(args.max_connections),
        head_timeout: Duration::from_secs(args.head_timeout),
        write_timeout: Duration::from_secs(args.write_timeout),
        ..Limits::default()
    };
    let timeout = Duration::from_secs(args.cderd_timeout);
    let job_labels = args.job_labels;
    tracing::info!(
        "serving /metrics on {} from cderd at {}{}",
        args.listen,
        socket.display(),
        if job_labels { ", naming the jobs (--job-labels)" } else { "" }
    );
    let handler = Arc::new(move |r: &Request| {
        if r.path != "/metrics" {
            return Response::text(404, "try /metrics\n");
        }
        let format = Format::from_accept(r.accept.as_deref());
        match scrape(&socket, timeout, &hostname, job_labels, format) {
            Ok(body) => Response { status: 200, content_type: format.content_type().into(), body },
            Err(e) => {
                tracing::warn!("scrape: {e:#}");
                Response::text(503, format!("cderd: {e:#}\n"))
            }
        }
    });
    http::serve(listener, limits, handler);
    ExitCode::from(1)
}
