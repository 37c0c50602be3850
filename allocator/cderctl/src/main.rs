//! `cderctl`: the admin's and the hooks' view of cder on one node.

// The clap arguments' doc comments are the --help text, printed as written:
// `[registry]` or `<lrms>:<id>` there are words for the admin, not Markdown.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

// In a module of their own, which every command's module uses: were they
// here, each command would import the root that imports it.
use failure::{print, Failure};

mod apel;
mod failure;
mod inventory;
mod node;
mod registry;
mod usage;

#[derive(Parser)]
#[command(
    name = "cderctl",
    version,
    about = "Inspect and control the CDERs (GPUs and other accelerators) of this node",
    long_about = "cderctl shows what devices this node has and, through the node daemon cderd, \
who holds them. It reads /etc/cder/cder.toml unless --config or CDER_CONFIG names another file.",
    after_help = "EXAMPLES:\n    cderctl inventory\n    cderctl inventory --json --config deploy/cder.example.toml\n    cderctl status\n    cderctl alloc --job local:demo-1 --uid 1000 --count 2\n\n\
EXIT STATUS:\n    0 success, 1 runtime failure (daemon down, too few devices), 2 bad input or usage."
)]
pub(crate) struct Cli {
    /// Config file [default: $CDER_CONFIG, else /etc/cder/cder.toml]
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Discover this node's devices (NVML or static config) and print them
    #[command(long_about = "Runs device discovery exactly as cderd does at start-up and prints what it \
found: a table for people, or with --json an array of device objects with the fields index, uuid, \
pci_bus_id, model, memory_mib, compute_capability, multiprocessors, cores_per_mp, cores, clock_mhz, ecc, \
path, numa_node, health, vendor and type. It does not need cderd to be running.")]
    Inventory(inventory::Args),
    /// Give a job devices (root and [node] operators)
    #[command(
        long_about = "Asks cderd for COUNT devices of TYPE for JOB, run by UID, and prints the job's \
environment as KEY=VALUE lines (CUDA_VISIBLE_DEVICES=1,3, CUDA_DEVICE_ORDER=PCI_BUS_ID, …) or, with --json, \
{\"job\":…,\"uid\":…,\"devices\":[{\"type\":…,\"index\":…,\"uuid\":…}],\"env\":{…}}. Idempotent: asking again \
for the same job returns the same devices. Among free devices that satisfy --min-memory and --model, \
cderd prefers one NUMA node. Too few free devices: exit 1, saying how many are free.",
        after_help = "EXAMPLES:\n    cderctl alloc --job slurm:4242 --uid 1000 --count 2\n    cderctl alloc --job local:demo-1 --uid $(id -u alice) --count 1 --min-memory 8000 --model A100 --json"
    )]
    Alloc(node::AllocArgs),
    /// Take a job's devices back (root and [node] operators); idempotent
    #[command(after_help = "EXAMPLES:\n    cderctl release --job slurm:4242")]
    Release(node::JobArgs),
    /// Print a job's environment (the job's own user, or an operator)
    #[command(after_help = "EXAMPLES:\n    eval \"$(cderctl env --job torque:$PBS_JOBID | sed 's/^/export /')\"")]
    Env(node::JobArgs),
    /// Every device with its state (free, allocated, offline, unhealthy) and job, and counts per type
    #[command(after_help = "EXAMPLES:\n    cderctl status\n    cderctl status --json --socket /tmp/cderd.sock")]
    Status(node::StatusArgs),
    /// Take a device out of service: it is never allocated until resumed (root and operators)
    #[command(
        long_about = "Marks DEVICE offline with a reason. A device that a job holds stays with the job \
and goes offline when released. Offline devices are counted apart in status and never allocated.",
        after_help = "EXAMPLES:\n    cderctl drain gpgpu:3 --reason \"Xid 79\""
    )]
    Drain(node::DrainArgs),
    /// Put a drained device back into service (root and operators); also
    /// `undrain`, the only way back for a device the health watch drained
    #[command(
        visible_alias = "undrain",
        after_help = "EXAMPLES:\n    cderctl resume gpgpu:3\n    cderctl undrain GPU-4ea17400-0000-4000-8000-000000000000"
    )]
    Resume(node::ResumeArgs),
    /// Free the devices of jobs the batch system no longer knows (root and operators)
    #[command(
        long_about = "Releases every allocation whose job is not in the live list. The list comes from \
a file (--live-jobs FILE, or - for stdin; one <lrms>:<id> per line) or from the batch system (--from slurm \
runs squeue; CDER_SQUEUE names another squeue binary). With --from slurm, or --lrms, only that batch \
system's jobs are considered: every job SLURM knows in a non-terminal state is live (STOPPED, \
SIGNALING, STAGE_OUT, RESIZING … included). The ledger's generation is read before squeue runs and sent as \
as_of, so an allocation made meanwhile is never released (--as-of does the same for a --live-jobs file). \
If squeue fails, nothing is released.",
        after_help = "EXAMPLES:\n    cderctl reconcile --from slurm\n    qstat -f | awk '/Job Id/{print \"torque:\" $3}' | cderctl reconcile --live-jobs - --lrms torque"
    )]
    Reconcile(node::ReconcileArgs),
    /// Put this process, and COMMAND, into a job's device cgroups (the job's own user, or an operator)
    #[command(
        long_about = "Asks cderd to move this process into JOB's device cgroups, where every device \
cderd manages except the job's own is denied by the kernel (cgroup v1 devices controller and/or a cgroup v2 \
device BPF program, per [node.enforcement] cgroup). With COMMAND, then runs it there with the job's \
environment in indices relative to its own devices (CUDA_VISIBLE_DEVICES=0,1,…), as the CUDA runtime \
numbers them inside a device cgroup. Exit 1 when the node has no usable device cgroup \
(enforcement_unavailable).",
        after_help = "EXAMPLES:\n    cderctl confine --job slurm:4242 -- ./train.sh\n    cderctl confine --job torque:17.ce --json"
    )]
    Confine(node::ConfineArgs),
    /// Device usage per job and device, and the pool's utilisation over a period
    #[command(
        long_about = "Prints one record per job and device (user, start, end, share, device-seconds) and the \
utilisation of the node's pool over the period: device-seconds allocated / (pool size x period), the \
seed thesis's Appendix C function. A job holding k of a device's N shares ([node.sharing]) counts k/N of \
its seconds, in the utilisation and in APEL's Count. Users other than root and operators see their own records only. \
With --apel it writes instead the month's APEL-accelerator-message v0.1 records (one per job, model and \
month; ActiveDuration measured by cderd's sampler, null where not sampled) into the dirq spool ssmsend \
sends from (docs/accounting.md).",
        after_help = "EXAMPLES:\n    cderctl accounting --since 24h\n    cderctl accounting --since 1700000000 --until 1700086400 --json\n    cderctl accounting --apel --month 2026-03 --site CESGA --user-map /etc/cder/apel-users.toml --spool /var/spool/apel/outgoing"
    )]
    Accounting(node::AccountingArgs),
    /// What each job did with its GPUs: device-seconds, active-seconds, utilisation, memory
    #[command(
        long_about = "Prints, per job and device, what cderd's usage sampler measured ([node.usage]): the \
device as its model and UUID, device-seconds (how long the job held it), active-seconds (the sampled \
time its utilisation was at or above [node.usage] active_threshold_percent), mean and peak utilisation, \
peak memory in use, and the samples taken; then the running jobs' devices that are idle now. A MIG \
instance without GPM (before Hopper) has no utilisation in NVML: its utilisation columns show -. \
Users other than root and operators see their own jobs only. --json prints the daemon's result \
(the usage reply of docs/protocol.md).",
        after_help = "EXAMPLES:\n    cderctl usage\n    cderctl usage --job slurm:4242 --json\n    cderctl usage --since 24h --recent 20"
    )]
    Usage(node::UsageArgs),
    /// The cluster's vGPGPU registry: status, query, offline/online, release, SLURM licences
    #[command(
        long_about = "Talks to cder-registryd ([registry] url, MUNGE-authenticated) about the \
cluster's vGPGPU backends (rCUDA / VCL servers, one per GPU). status and query are open to any user; \
offline, online and release need root or a [registry] operator.",
        after_help = "EXAMPLES:\n    cderctl registry status\n    cderctl registry query free --method rCUDA\n    cderctl registry offline --host gpu03 --reason \"PSU\"\n    cderctl registry slurm-licenses --slurm-conf /etc/slurm/slurm.conf"
    )]
    Registry(registry::Args),
}

/// The error and its causes on one line, leaving out a cause whose text the
/// message already carries (the libraries' messages often include it).
fn one_line(error: &anyhow::Error) -> String {
    let mut line = error.to_string();
    for cause in error.chain().skip(1) {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Inventory(args) => inventory::run(cli.config.as_deref(), &args),
        Command::Alloc(args) => node::alloc(cli.config.as_deref(), &args),
        Command::Release(args) => node::release(cli.config.as_deref(), &args),
        Command::Env(args) => node::env(cli.config.as_deref(), &args),
        Command::Status(args) => node::status(cli.config.as_deref(), &args),
        Command::Drain(args) => node::drain(cli.config.as_deref(), &args),
        Command::Resume(args) => node::resume(cli.config.as_deref(), &args),
        Command::Reconcile(args) => node::reconcile(cli.config.as_deref(), &args),
        Command::Confine(args) => node::confine(cli.config.as_deref(), &args),
        Command::Accounting(args) => node::accounting(cli.config.as_deref(), &args),
        Command::Usage(args) => node::usage(cli.config.as_deref(), &args),
        Command::Registry(args) => registry::run(cli.config.as_deref(), &args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("cderctl: {}", one_line(&failure.error));
            ExitCode::from(failure.status)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot connect to cderd at /run/x.sock: {source}")]
    struct Connect {
        source: std::io::Error,
    }

    #[test]
    fn causes_already_in_the_message_are_not_repeated() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = anyhow::Error::new(Connect { source: io() });
        assert_eq!(one_line(&e), format!("cannot connect to cderd at /run/x.sock: {}", io()));
        let e = anyhow::Error::new(io()).context("reading live jobs");
        assert_eq!(one_line(&e), format!("reading live jobs: {}", io()));
    }
}
