//! `cderctl registry …`: the cluster vGPGPU registry, from the admin's side
//! (status, query, offline/online, release) and SLURM's licence count.

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use cder_model::{Config, VgpgpuMethod};
use cder_registry_client::api::{OfflineRequest, QueryName};
use cder_registry_client::{ApiErrorCode, RegistryClient, RegistryClientError, RegistryStatus};
use clap::{Args as ClapArgs, Subcommand};

use super::{print, Failure};

/// `cderctl registry`.
#[derive(ClapArgs)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every backend with its state and job, and the counts per method
    #[command(after_help = "EXAMPLES:\n    cderctl registry status\n    cderctl registry status --json")]
    Status {
        /// Print the registry's JSON.
        #[arg(long)]
        json: bool,
    },
    /// One count: free, total, in_use or offline, for one method or all (the thesis's query)
    #[command(after_help = "EXAMPLES:\n    cderctl registry query free --method rCUDA")]
    Query {
        /// free, total, in_use (or used), offline.
        name: String,
        /// rCUDA or VCL (default: backends of any method).
        #[arg(long)]
        method: Option<String>,
    },
    /// Take one backend (--uuid) or every backend of a host (--host) out of service
    #[command(after_help = "EXAMPLES:\n    cderctl registry offline --host gpu03.example.org --reason \"PSU swap\"")]
    Offline(Target),
    /// Put a backend or a host back into service
    #[command(after_help = "EXAMPLES:\n    cderctl registry online --host gpu03.example.org")]
    Online(Target),
    /// Give a job's backends back (all nodes); idempotent
    #[command(after_help = "EXAMPLES:\n    cderctl registry release --job slurm:4242")]
    Release {
        #[arg(long)]
        job: String,
    },
    /// Print the slurm.conf Licenses line for the registry's backends; with --slurm-conf, check it
    #[command(
        long_about = "Prints `Licenses=vgpgpu:N`, N being the registry's backends in service (total \
minus offline: an offline backend would let SLURM start a job the registry cannot serve). With \
--slurm-conf it also reads that file's Licenses line and exits 1, naming the line, when its vgpgpu \
count differs (then set it and run `scontrol reconfigure`).",
        after_help = "EXAMPLES:\n    cderctl registry slurm-licenses\n    cderctl registry slurm-licenses --slurm-conf /etc/slurm/slurm.conf"
    )]
    SlurmLicenses {
        #[arg(long, value_name = "FILE")]
        slurm_conf: Option<PathBuf>,
    },
}

/// One backend or one host.
#[derive(ClapArgs)]
struct Target {
    #[arg(long, conflicts_with = "host", required_unless_present = "host")]
    uuid: Option<String>,
    #[arg(long)]
    host: Option<String>,
    /// Why (offline only).
    #[arg(long)]
    reason: Option<String>,
}

fn client(config: Option<&Path>) -> Result<RegistryClient, Failure> {
    let c = Config::load(config).map_err(Failure::usage)?;
    let rc = c
        .registry
        .ok_or_else(|| Failure::usage(anyhow!("{}: no [registry] section", Config::resolve_path(config).display())))?;
    RegistryClient::from_config(&rc).map_err(Failure::usage)
}

fn refused(e: RegistryClientError) -> Failure {
    match e.code() {
        Some(ApiErrorCode::BadRequest | ApiErrorCode::NotFound | ApiErrorCode::TooLarge) => Failure::usage(e),
        _ => Failure::runtime(e),
    }
}

fn method(text: Option<&str>) -> Result<Option<VgpgpuMethod>, Failure> {
    text.map(|m| m.parse().map_err(|e: cder_model::registry::UnknownMethod| Failure::usage(anyhow!("--method: {e}"))))
        .transpose()
}

fn table(s: &RegistryStatus) -> String {
    let mut out = format!(
        "{:<40} {:<24} {:>6} {:>4} {:<10} {:<9} {}\n",
        "UUID", "HOST", "PORT", "DEV", "METHODS", "STATE", "JOB"
    );
    for b in &s.backends {
        let methods = b.methods.iter().map(|m| m.name()).collect::<Vec<_>>().join(",");
        let state = format!("{:?}", b.state).to_lowercase();
        let job = match (&b.job, &b.node, &b.reason) {
            (Some(j), Some(n), _) => format!("{j} on {n}"),
            (_, _, Some(r)) => format!("({r})"),
            _ => String::new(),
        };
        out.push_str(&format!(
            "{:<40} {:<24} {:>6} {:>4} {:<10} {:<9} {}\n",
            b.uuid, b.host, b.port, b.device, methods, state, job
        ));
    }
    for (m, c) in &s.counts {
        out.push_str(&format!("{m}: {} total, {} free, {} in use, {} offline\n", c.total, c.free, c.in_use, c.offline));
    }
    out
}

/// The `vgpgpu` count of slurm.conf's `Licenses=` line: (line number, count).
fn slurm_conf_licenses(text: &str) -> Option<(usize, Option<u64>)> {
    text.lines().enumerate().find_map(|(n, line)| {
        let line = line.split('#').next().unwrap_or("").trim();
        let (k, v) = line.split_once('=')?;
        if !k.trim().eq_ignore_ascii_case("licenses") {
            return None;
        }
        let count = v.split(',').find_map(|item| {
            let (name, count) = item.trim().split_once([':', '*']).unwrap_or((item.trim(), "1"));
            (name == "vgpgpu").then(|| count.trim().parse().ok()).flatten()
        });
        Some((n + 1, count))
    })
}

/// `cderctl registry …`.
pub fn run(config: Option<&Path>, args: &Args) -> Result<(), Failure> {
    let c = client(config)?;
    match &args.command {
        Command::Status { json } => {
            let s = c.status().map_err(refused)?;
            if *json {
                print(&format!("{}\n", serde_json::to_string_pretty(&s).map_err(Failure::runtime)?))
            } else {
                print(&table(&s))
            }
        }
        Command::Query { name, method: m } => {
            let name: QueryName = name.parse().map_err(|e: String| Failure::usage(anyhow!(e)))?;
            let value = c.query(name, method(m.as_deref())?).map_err(refused)?;
            print(&format!("{value}\n"))
        }
        Command::Offline(t) | Command::Online(t) => {
            let r = OfflineRequest { uuid: t.uuid.clone(), host: t.host.clone(), reason: t.reason.clone() };
            let s = if matches!(args.command, Command::Offline(_)) { c.offline(&r) } else { c.online(&r) }
                .map_err(refused)?;
            print(&table(&s))
        }
        Command::Release { job } => {
            let job = job.parse().map_err(|e| Failure::usage(anyhow!("--job: {e}")))?;
            let r = c.release(&job).map_err(refused)?;
            print(&format!("{}: released {} backend(s)\n", r.job, r.released))
        }
        Command::SlurmLicenses { slurm_conf } => {
            let counts = c.status().map_err(refused)?.counts_for(None);
            let n = counts.total - counts.offline.min(counts.total);
            print(&format!("Licenses=vgpgpu:{n}\n"))?;
            let Some(path) = slurm_conf else { return Ok(()) };
            let text = std::fs::read_to_string(path).map_err(|e| Failure::usage(anyhow!("{}: {e}", path.display())))?;
            match slurm_conf_licenses(&text) {
                Some((_, Some(have))) if have == n => Ok(()),
                Some((line, have)) => Err(Failure::runtime(anyhow!(
                    "{}:{line}: Licenses has vgpgpu:{}, the registry has {n} backends in service; set vgpgpu:{n} and run `scontrol reconfigure`",
                    path.display(),
                    have.map_or("(none)".to_string(), |h| h.to_string())
                ))),
                None => Err(Failure::runtime(anyhow!("{}: no Licenses line; add Licenses=vgpgpu:{n}", path.display()))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_licence_line() {
        assert_eq!(slurm_conf_licenses("A=1\nLicenses=matlab:2,vgpgpu:6 # pool\n"), Some((2, Some(6))));
        assert_eq!(slurm_conf_licenses("licenses = vgpgpu*4\n"), Some((1, Some(4))));
        assert_eq!(slurm_conf_licenses("Licenses=matlab\n"), Some((1, None)));
        assert_eq!(slurm_conf_licenses("# Licenses=vgpgpu:1\n"), None);
    }
}
