//! `cder-jdl`: the ClassAd / gLite JDL tool.

use std::io::Read;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cder_classad::{eval_expr, parse_classad, parse_expr, ClassAd};
use cder_jdl::jdl::{check, Severity};

const EXAMPLES: &str = "\
Examples:
  cder-jdl eval '1 + 2.5'                          # 3.5
  cder-jdl eval --json 'strcat(\"a\", 1)'           # {\"type\":\"string\",\"value\":\"a1\"}
  cder-jdl eval --ad job.jdl 'GPGPUPerNode * 2'
  cder-jdl check job.jdl

Exit status: 0 success, 1 runtime failure, 2 bad input or usage.";

/// The ClassAd / gLite JDL language: evaluate expressions and check job descriptions.
#[derive(Parser)]
#[command(
    name = "cder-jdl",
    version,
    about = "Evaluate ClassAd expressions and check gLite JDL job descriptions",
    long_about = "Evaluate ClassAd expressions and check gLite JDL job descriptions.\n\n\
The language is HTCondor's ClassAd language as gLite's JDL uses it: `[ Name = expr; ... ]` ads, \
lists `{ ... }`, three-valued logic with undefined and error, attribute references with MY., \
OTHER./TARGET. and PARENT. scopes, and HTCondor's built-in functions. Ads may also be written one \
`Name = expr` per line, as `condor_status -l` prints them. Errors are printed on stderr as \
FILE:LINE:COL: message.",
    after_long_help = EXAMPLES
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Evaluate an expression and print its value.
    #[command(
        long_about = "Evaluate an expression and print its value in ClassAd syntax.\n\n\
With --ad, unqualified attribute names and MY. refer to that ad. With --json, print \
{\"type\": T, \"value\": V} where T is boolean, integer, real, string, undefined, error, list or \
classad, and V the natural JSON value (a list of such objects for lists, null for undefined and \
error, an object of such objects for classads).",
        after_long_help = EXAMPLES
    )]
    Eval {
        /// A ClassAd / JDL file providing the scope (`-` for standard input).
        #[arg(long, value_name = "FILE")]
        ad: Option<String>,
        /// Print {"type": T, "value": V} instead of ClassAd syntax.
        #[arg(long)]
        json: bool,
        /// The expression.
        expr: String,
    },
    /// Check a JDL file and report every problem with line:column.
    #[command(
        long_about = "Check a JDL file and report every problem with line:column on stderr.\n\n\
Checked: syntax; Requirements that cannot be boolean-valued; GPGPUPerNode and \
VirtualGPGPUPerNode that are not positive integers; VirtualGPGPUMethod (alias VirtualGPGPUType) \
other than rCUDA or VCL. Calls to unknown functions are warnings. Exit status 2 when there is \
an error, 0 otherwise.",
        after_long_help = EXAMPLES
    )]
    Check {
        /// The JDL file (`-` for standard input).
        file: String,
    },
    /// Phase 1: list the CEs whose published CDERs match a job, best rank first.
    #[command(
        name = "list-match",
        long_about = "Phase 1 of the two-phase submission, like glite-wms-job-list-match: query the BDII \
(GLUE 2.0 OtherInfo and Extensions under --base, GLUE 1.3 tags under --base13), turn each CE queue into a \
ClassAd Resource Offer, match the job's Requirements (plus GPGPUPerNode <= other.GPGPUPerNode, and \
VirtualGPGPUPerNode × CPUNumber <= TotalVGPGPU_<method> for vGPGPU jobs) and rank by the job's Rank, a \
--rank preset, or gLite's default -GlueCEStateEstimatedResponseTime. The BDII defaults to \
$LCG_GFAL_INFOSYS. Entries with malformed CDER data are skipped with a warning on stderr.\n\n\
The answer comes from a local index of the BDII's offers (see cder-jdl index), not from the BDII: a \
snapshot checked less than --max-age seconds ago (300) is used as it is; an older one is refreshed first \
(re-read only if the BDII has finished an update cycle since, waiting for a refresh another process is \
running). A line on stderr says how old the data is and which BDII cycle it came from (# index: 37 s old, \
BDII cycle 2026-11-26T09:10:02Z (UpdateStats), 12,345 offers); --json adds it as \"index\". When the \
refresh fails, the old snapshot answers with a warning, or with --strict the command exits 1. Snapshots \
are per user in $XDG_CACHE_HOME/cder, or a site's shared directory (--index-dir, $CDER_INDEX_DIR). \
--live asks the BDII directly, as before the index. Exit status 1 when the BDII is unreachable or slow \
and there is no snapshot (or --strict), or when no CE matches; 2 for a bad JDL or option.",
        after_long_help = "Examples:\n  cder-jdl list-match --bdii ldap://bdii.example.org:2170 job.jdl\n  \
LCG_GFAL_INFOSYS=bdii.example.org:2170 cder-jdl list-match --vo gputestvo --explain job.jdl\n  \
cder-jdl list-match --rank gpgpu-max-free --json job.jdl\n  \
cder-jdl list-match --max-age 60 --strict job.jdl      # data at most a minute old, or exit 1\n  \
cder-jdl list-match --live job.jdl                     # ask the BDII itself"
    )]
    ListMatch(cder_jdl::cmd::list_match::Args),
    /// Both phases: list-match, then submit a refined JDL restricted to the matching CEs.
    #[command(
        long_about = "Phase 1, then phase 2, in one command. The refined JDL keeps every attribute of the job \
and conjoins the thesis's CELIST, (other.GlueCEUniqueID == \"ce1\" || ...), with the original Requirements. \
--via wms runs glite-wms-job-submit -a (or $CDER_WMS_SUBMIT), --via arc runs arcsub (or $CDER_ARC_SUBMIT), \
--via command runs --submit-command; each gets the refined JDL's path last, and the job id it reports is \
printed. --via slurm submits to this CE's SLURM (--ce must be among the matches) with sbatch: the JDL's \
GPGPUPerNode, VirtualGPGPU*, CPUNumber, SMPGranularity and WholeNodes become #SBATCH lines as lrms-attrs \
prints them, the matched share's queue the partition; prints slurm:<id>. --dry-run prints the refined JDL \
(and the batch script). No match: exit 1 with the reason for each CE. Phase 1 answers from the local \
index as list-match does (--max-age, --strict, --index-dir; --live asks the BDII directly), and says how \
old its data is on stderr.",
        after_long_help = "Examples:\n  cder-jdl submit --dry-run job.jdl\n  cder-jdl submit --via wms job.jdl\n  \
cder-jdl submit --via slurm --ce ce.example.org:8443/cream-slurm-gpu job.jdl"
    )]
    Submit(cder_jdl::cmd::submit::Args),
    /// CE side: print SLURM / TORQUE directives for a JDL's CDER and CPU attributes.
    #[command(
        name = "lrms-attrs",
        long_about = "The CE side of the translation, for BLAH's slurm_local_submit_attributes.sh and \
pbs_local_submit_attributes.sh (deploy/blah/): reads GPGPUPerNode, VirtualGPGPUPerNode, VirtualGPGPUMethod \
(alias VirtualGPGPUType), CPUNumber, SMPGranularity, HostNumber, WholeNodes and HTCondor's RequestGPUs, \
require_gpus, gpus_minimum_capability and gpus_minimum_memory from a JDL (--jdl), the environment \
(--from-env) or --attr KEY=VALUE (what the drop-ins pass) and prints the lines BLAH inserts into the batch \
script: #SBATCH --gres=gpu:N, #PBS -l nodes=...:gpus=N (native) or #PBS -W x=GRES:gpus@N with the \
prologue's mark -l other=cder:gpgpu:N (--pbs-gpus maui), licences for vGPGPUs and export lines. Site \
settings come from --config (root-owned; the drop-ins use /etc/cder/blah.conf). A bad value is rejected \
naming the key (exit 2); with --blah it also prints a directive the batch system refuses, naming the key.",
        after_long_help = "Examples:\n  cder-jdl lrms-attrs --lrms slurm --blah --attr GPGPUPerNode=2\n  \
cder-jdl lrms-attrs --lrms pbs --pbs-gpus maui --jdl job.jdl"
    )]
    LrmsAttrs(cder_jdl::cmd::lrms_attrs::Args),
    /// The local index of the BDII's GPU offers that list-match and submit answer from.
    #[command(
        long_about = "The local index of the BDII's GPU offers: one snapshot file per BDII (and bases, \
strategies, prefixes) that list-match and submit answer from without asking the BDII. Snapshots live in \
$XDG_CACHE_HOME/cder (~/.cache/cder) per user, or in a site's shared directory (--index-dir, \
$CDER_INDEX_DIR; the cder-index-refresh timer keeps /var/cache/cder). `index refresh` brings one up to \
date; `index show` prints what one holds.",
        after_long_help = "Examples:\n  cder-jdl index refresh --bdii ldap://bdii.example.org:2170\n  \
cder-jdl index show --bdii ldap://bdii.example.org:2170"
    )]
    Index(cder_jdl::cmd::index::Args),
}

fn read_input(path: &str) -> Result<String, String> {
    if path == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(|e| format!("-: cannot read standard input: {e}"))?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(|e| format!("{path}: cannot read: {e}"))
}

/// The BDII's answers are read on the I/O threads into 10^5 small buffers;
/// glibc grows a thread's malloc arena 128 KiB at a time, an `mprotect` each.
/// Growing it 64 MiB at a time (address space: pages cost memory only once
/// touched) took system time from 0.18 to 0.11 s on 30,000 shares.
fn grow_malloc_arenas_in_large_steps() {
    // SAFETY: mallopt only sets a tunable of glibc's allocator, before any thread starts.
    unsafe {
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
}

fn main() -> ExitCode {
    grow_malloc_arenas_in_large_steps();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::ListMatch(a) => {
            cder_jdl::cmd::init_logging();
            cder_jdl::cmd::finish(cder_jdl::cmd::list_match::run(&a))
        }
        Cmd::Submit(a) => {
            cder_jdl::cmd::init_logging();
            cder_jdl::cmd::finish(cder_jdl::cmd::submit::run(&a))
        }
        Cmd::LrmsAttrs(a) => cder_jdl::cmd::finish(cder_jdl::cmd::lrms_attrs::run(&a)),
        Cmd::Index(a) => {
            cder_jdl::cmd::init_logging();
            cder_jdl::cmd::finish(cder_jdl::cmd::index::run(&a))
        }
        Cmd::Eval { ad, json, expr } => {
            let scope = match ad {
                Some(path) => {
                    let src = match read_input(&path) {
                        Ok(s) => s,
                        Err(e) => {
                            eprintln!("{e}");
                            return ExitCode::from(2);
                        }
                    };
                    match parse_classad(&src) {
                        Ok(a) => Some(a),
                        Err(e) => {
                            eprintln!("{path}:{e}");
                            return ExitCode::from(2);
                        }
                    }
                }
                None => None::<ClassAd>,
            };
            let e = match parse_expr(&expr) {
                Ok(e) => e,
                Err(e) => {
                    eprintln!("<expr>:{e}");
                    return ExitCode::from(2);
                }
            };
            let v = eval_expr(&e, scope.as_ref(), None);
            if json {
                println!("{}", v.to_json());
            } else {
                println!("{v}");
            }
            ExitCode::SUCCESS
        }
        Cmd::Check { file } => {
            let src = match read_input(&file) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            let diags = check(&src);
            let mut errors = 0;
            for d in &diags {
                if d.severity == Severity::Error {
                    errors += 1;
                }
                eprintln!("{file}:{d}");
            }
            if errors > 0 {
                ExitCode::from(2)
            } else {
                println!(
                    "{file}: ok{}",
                    if diags.is_empty() { String::new() } else { format!(" ({} warnings)", diags.len()) }
                );
                ExitCode::SUCCESS
            }
        }
    }
}
