//! `cder-glue-provider`: prints the site's CDERs as GLUE LDIF for bdii-update,
//! or as GLUE 2 JSON (`--format json`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};

use cder_glue_provider::config::ProviderConfig;
use cder_glue_provider::strategy::Strategy;
use cder_glue_provider::{publish, publish_json, sources, ProviderError};

/// What the provider prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// GLUE 2.0 (and GLUE 1.3) LDIF, as bdii-update loads it.
    Ldif,
    /// The GLUE 2 entities in OGF's JSON rendering (GFD.219), with GLUE 2.1's
    /// accelerator entities, as IPF publishes GLUE and REST information services read it.
    Json,
}

#[derive(Parser, Debug)]
#[command(
    name = "cder-glue-provider",
    version,
    about = "GIP provider: publish a site's CDERs (GPUs …) to the BDII as GLUE 2.0 LDIF, or as GLUE 2 JSON",
    long_about = "cder-glue-provider is an information provider for the BDII. bdii-update runs every \
executable in its provider directory (/var/lib/bdii/gip/provider/) and loads the LDIF they print.\n\n\
It publishes one GLUE2ExecutionEnvironment per group of identical worker nodes, under \
GLUE2ServiceID=<service>,GLUE2GroupID=resource,o=glue, with the CDER attributes \
(GPGPUTotalInstances, GPGPUFreeInstances, GPGPUUsedInstances, GPGPUOfflineInstances, \
GPGPUPerNode, GPGPUModel, …) attached by the chosen strategies; vGPGPU services become \
GLUE2ApplicationEnvironments rCUDA / VCL with FreeVGPGPU / TotalVGPGPU. With [[vo]] tables, \
one GLUE2ComputingShare per queue (SLURM partition, TORQUE queue) and VO it admits carries the \
VO's own free, used and per-job GPU figures, with a GLUE2MappingPolicy GLUE2PolicyRule VO:<name>.\n\n\
Counts come from the local cderd (single node), SLURM (scontrol -d show node -o), TORQUE \
(pbsnodes -x) or the config. Everything is built in memory and printed only if it all \
succeeded: on any error the provider prints one line to stderr, nothing to stdout, and exits \
non-zero (2: bad config or input, 1: cderd / LRMS / inventory failure, or the output could not \
be written: redirected to a file on a full disk, the partial output is cut off again).\n\n\
With --format json it prints the same GLUE 2 entities as one JSON document in the OGF GLUE \
working group's rendering (GFD.219; schemas from github.com/OGF-GLUE/JSON): one array per entity \
type (ComputingService, ComputingManager, ExecutionEnvironment, ApplicationEnvironment, …), \
foreign keys as Associations (ManagerID, ServiceID, …), OtherInfo as an array and Extensions as \
an Extension object; glue21-accelerator adds AcceleratorEnvironment, \
ComputingManagerAcceleratorInfo and ComputingShareAcceleratorInfo arrays in the same style. GLUE \
1.3 (tagged-environment) has no JSON rendering and is left out.\n\n\
The config is --config, else $CDER_GLUE_CONFIG, else /etc/cder/glue-provider.toml; see \
docs/glue-provider.md.",
    after_help = "Examples:\n  \
cder-glue-provider                                   # strategies from [site] strategies, default attribute-extension\n  \
cder-glue-provider --strategy class-extension\n  \
cder-glue-provider --strategy hybrid --strategy tagged-environment\n  \
cder-glue-provider --format json --strategy class-extension,glue21-accelerator   # GLUE 2 JSON\n  \
cder-glue-provider --config /etc/cder/glue-provider.toml | ldapadd -x -H ldap://localhost:2170 -D o=glue -w secret\n\n\
Install into the BDII: deploy/bdii/install-provider.sh"
)]
pub(crate) struct Cli {
    /// The provider config (default: $CDER_GLUE_CONFIG or /etc/cder/glue-provider.toml).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// How to publish CDER attributes; repeat or comma-separate for several
    /// (default: [site] strategies, else attribute-extension).
    #[arg(long, short = 's', value_enum, value_delimiter = ',', value_name = "STRATEGY")]
    strategy: Vec<Strategy>,
    /// Run as a BDII plugin of a NorduGrid ARC CE's infosys: print modify
    /// records adding the keys (attribute-extension) to ARC's own
    /// ExecutionEnvironments, whose IDs are the `[[group]] id`s (docs/arc.md).
    #[arg(long, conflicts_with = "strategy")]
    arc_plugin: bool,
    /// What to print: `ldif` (for bdii-update) or `json` (GLUE 2 in OGF's
    /// JSON rendering, GFD.219, accelerator entities included; GLUE 1.3 is
    /// left out). `--arc-plugin` prints LDIF only.
    #[arg(long, short = 'f', value_enum, value_name = "FORMAT", default_value = "ldif")]
    format: Format,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("CDER_LOG").unwrap_or_else(|_| "warn".into()))
        .init();
    let cli = Cli::parse();
    match run(&cli) {
        Ok(ldif) => match write_all_or_nothing(ldif.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cder-glue-provider: writing the output: {e}; nothing was published");
                ExitCode::from(1)
            }
        },
        Err(e) => {
            eprintln!("cder-glue-provider: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Writes the whole document to stdout in one go. bdii-update reads it
/// through a pipe, where a write either completes or fails because the
/// reader is gone. Redirected to a regular file, a full disk (ENOSPC,
/// EDQUOT) can stop it part-way: the file is then cut back to its length
/// before, so that no half document is left for anyone to load.
fn write_all_or_nothing(doc: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsFd;
    // Written through a second handle on the same open file, unbuffered:
    // nothing is left in stdout's buffer for the exit to flush after a cut.
    let mut out = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let before = out.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
    let result = out.write_all(doc);
    if let (Err(_), Some(len)) = (&result, before) {
        if out.metadata().is_ok_and(|m| m.len() > len) {
            if let Err(e) = out.set_len(len) {
                eprintln!("cder-glue-provider: cutting the partial output back to {len} bytes: {e}");
            }
        }
    }
    result
}

fn run(cli: &Cli) -> Result<String, ProviderError> {
    let config = ProviderConfig::load(cli.config.as_deref())?;
    let strategies = if cli.strategy.is_empty() { config.default_strategies() } else { cli.strategy.clone() };
    tracing::debug!(?strategies, source = ?config.counts.source.get_ref(), "publishing");
    let counts = sources::from_config(&config);
    let vgpus = sources::virtual_from_config(&config)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    if cli.arc_plugin {
        if cli.format != Format::Ldif {
            return Err(ProviderError::Input(
                "--arc-plugin prints LDIF modify records for ARC's infosys; ARC 7 publishes its JSON itself".into(),
            ));
        }
        let snapshot = cder_glue_provider::snapshot(&config, counts.as_ref(), vgpus.as_ref(), now)?;
        return cder_glue_provider::arc::plugin_ldif(&config, &snapshot);
    }
    match cli.format {
        Format::Ldif => publish(&config, counts.as_ref(), vgpus.as_ref(), &strategies, now),
        Format::Json => publish_json(&config, counts.as_ref(), vgpus.as_ref(), &strategies, now),
    }
}
