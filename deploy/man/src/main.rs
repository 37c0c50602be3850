//! `cder-man OUTDIR`: writes the man pages of every cder program and config
//! file into OUTDIR (`OUTDIR/man1/cder-jdl.1`, `OUTDIR/man8/cderd.8`, …).
//!
//! The program pages come from the programs' own clap definitions: each
//! program's source is compiled here as a module (`#[path]`), so a page can
//! never drift from `--help`. The three hooks that pbs_mom or qsub call take
//! no clap options; their pages come from the `HELP` text they print. The
//! config pages come from the annotated example files that document every
//! key (deploy/*.example.toml).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;

// Each program's main source, compiled as a module: only its clap
// definition is used here, so its main() and helpers are dead code.
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../allocator/cderctl/src/main.rs"]
mod bin_cderctl;
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../allocator/cderd/src/bin/cderd.rs"]
mod bin_cderd;
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../torque-prologue/src/bin/cder-env.rs"]
mod bin_env;
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../allocator/exporter/src/bin/cder-exporter.rs"]
mod bin_exporter;
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../allocator/registry/src/bin/cder-vgpgpu-factory.rs"]
mod bin_factory;
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../torque-prologue/src/bin/cder-torque-submit-filter.rs"]
mod bin_filter;
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../glue-provider/src/bin/cder-glue-provider.rs"]
mod bin_glue_provider;
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../torque-prologue/src/bin/cder-torque-hook.rs"]
mod bin_hook;
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../jdl-tools/src/bin/cder-jdl.rs"]
mod bin_jdl;
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../torque-prologue/src/bin/cder-torque-monitor.rs"]
mod bin_monitor;
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../torque-prologue/src/bin/cder-torque-reconcile.rs"]
mod bin_reconcile;
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../allocator/registry/src/bin/cder-registryd.rs"]
mod bin_registryd;
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../sim/src/main.rs"]
mod bin_sim;
#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../../torque-prologue/src/bin/cder-job-starter.rs"]
mod bin_starter;

/// A config file's page: its name, a one-line summary, and the annotated
/// example that documents every key.
struct ConfigPage {
    name: &'static str,
    summary: &'static str,
    path: &'static str,
    example: &'static str,
}

const CONFIG_PAGES: [ConfigPage; 4] = [
    ConfigPage {
        name: "cder.toml",
        summary: "cder node configuration: devices, cderd, enforcement, the vGPGPU registry",
        path: "/etc/cder/cder.toml",
        // The [registry] part lives in the same file; its example is kept apart.
        example: concat!(
            include_str!("../../cder.example.toml"),
            "\n",
            include_str!("../../vgpgpu/cder-registry.example.toml")
        ),
    },
    ConfigPage {
        name: "torque.toml",
        summary: "cder's TORQUE settings for the submit filter and the pbs_mom hooks",
        path: "/etc/cder/torque.toml",
        example: include_str!("../../torque/torque.example.toml"),
    },
    ConfigPage {
        name: "glue-provider.toml",
        summary: "what cder-glue-provider publishes to the BDII",
        path: "/etc/cder/glue-provider.toml",
        example: include_str!("../../bdii/glue-provider.example.toml"),
    },
    ConfigPage {
        name: "blah.conf",
        summary: "site settings of cder's BLAH drop-ins",
        path: "/etc/cder/blah.conf",
        example: include_str!("../../blah/blah.example.conf"),
    },
];

/// The programs with a clap definition: their command and man section (8 for daemons and what root
/// or a batch system runs, 1 for what users run).
fn programs() -> Vec<(clap::Command, &'static str)> {
    vec![
        (bin_cderd::Args::command(), "8"),
        (bin_cderctl::Cli::command(), "1"),
        (bin_exporter::Args::command(), "8"),
        (bin_registryd::Args::command(), "8"),
        (bin_factory::Args::command(), "8"),
        (bin_glue_provider::Cli::command(), "8"),
        (bin_jdl::Cli::command(), "1"),
        (bin_env::Args::command(), "1"),
        (bin_reconcile::Args::command(), "8"),
        (bin_monitor::Args::command(), "8"),
        (bin_sim::Args::command(), "1"),
    ]
}

/// The programs that print their own help, with their man section.
const HELP_PAGES: [(&str, &str, &str); 3] = [
    ("cder-torque-hook", "8", bin_hook::HELP),
    ("cder-job-starter", "8", bin_starter::HELP),
    ("cder-torque-submit-filter", "8", bin_filter::HELP),
];

/// The page of a program that prints its own help (pbs_mom and qsub call
/// these with their own argv layout, not clap's): the first line
/// (`name — summary`) is the NAME line, the rest is kept as laid out.
fn help_page(name: &str, section: &str, help: &str) -> String {
    let (first, rest) = help.split_once('\n').unwrap_or((help, ""));
    let about = first.split_once(" — ").map_or(first, |(_, s)| s);
    let mut out =
        format!(".TH {} {section} \"\" \"cder {}\" \"cder\"\n", name.to_uppercase(), env!("CARGO_PKG_VERSION"));
    out.push_str(&format!(".SH NAME\n{} \\- {}\n.SH DESCRIPTION\n.nf\n", roff_line(name), roff_line(about)));
    for line in rest.trim().lines() {
        out.push_str(&roff_line(line));
        out.push('\n');
    }
    out.push_str(".fi\n");
    out
}

/// Writes the page of `cmd` and, git-style, one per subcommand
/// (`cderctl-alloc`), returning the files written.
fn write_program(mut cmd: clap::Command, section: &str, dir: &Path, written: &mut Vec<PathBuf>) -> std::io::Result<()> {
    cmd.build();
    let name = cmd.get_name().to_string();
    // What the synopsis shows: `cderctl registry status`.
    let bin = cmd.get_bin_name().unwrap_or(&name).to_string();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section(section)
        .manual("cder")
        .source(format!("cder {}", env!("CARGO_PKG_VERSION")))
        .render(&mut page)?;
    let path = dir.join(format!("{name}.{section}"));
    std::fs::write(&path, page)?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let full = format!("{name}-{}", sub.get_name());
        // clap names are &'static str without its "string" feature; this
        // program runs once and exits.
        let full: &'static str = Box::leak(full.into_boxed_str());
        let sub = sub.clone().name(full).bin_name(format!("{bin} {}", sub.get_name()));
        write_program(sub, section, dir, written)?;
    }
    Ok(())
}

/// Escapes a line for roff: backslashes, and a leading `.` or `'` that
/// would read as a request.
fn roff_line(line: &str) -> String {
    let line = line.replace('\\', "\\e");
    if line.starts_with('.') || line.starts_with('\'') {
        format!("\\&{line}")
    } else {
        line
    }
}

fn config_page(page: &ConfigPage) -> String {
    let mut out = String::new();
    let title = page.name.to_uppercase();
    out.push_str(&format!(".TH {title} 5 \"\" \"cder {}\" \"cder\"\n", env!("CARGO_PKG_VERSION")));
    out.push_str(&format!(".SH NAME\n{} \\- {}\n", roff_line(page.name), roff_line(page.summary)));
    out.push_str(".SH DESCRIPTION\n");
    // The example's comment header says what reads the file and how.
    for line in page.example.lines().take_while(|l| l.starts_with('#')) {
        out.push_str(&roff_line(line.trim_start_matches('#').trim()));
        out.push('\n');
    }
    out.push_str(".SH EXAMPLE\nEvery key, with its meaning in the comment above it:\n.PP\n.nf\n");
    for line in page.example.lines() {
        out.push_str(&roff_line(line));
        out.push('\n');
    }
    out.push_str(".fi\n");
    out.push_str(&format!(".SH FILES\n.TP\n{}\n", roff_line(page.path)));
    out.push_str(".SH SEE ALSO\ncderd(8), cderctl(1)\n");
    out
}

fn run(out: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (cmd, section) in programs() {
        let dir = out.join(format!("man{section}"));
        std::fs::create_dir_all(&dir)?;
        write_program(cmd, section, &dir, &mut written)?;
    }
    for (name, section, help) in HELP_PAGES {
        let dir = out.join(format!("man{section}"));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{name}.{section}"));
        std::fs::write(&path, help_page(name, section, help))?;
        written.push(path);
    }
    let dir = out.join("man5");
    std::fs::create_dir_all(&dir)?;
    for page in &CONFIG_PAGES {
        let path = dir.join(format!("{}.5", page.name));
        std::fs::write(&path, config_page(page))?;
        written.push(path);
    }
    Ok(written)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = match args.as_slice() {
        [flag] if flag == "--help" || flag == "-h" => {
            println!("usage: cder-man OUTDIR\n\nWrites the man pages of every cder program and config file into OUTDIR/man{{1,5,8}}.");
            return ExitCode::SUCCESS;
        }
        [flag] if flag == "--version" || flag == "-V" => {
            println!("cder-man {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        [dir] if !dir.starts_with('-') => PathBuf::from(dir),
        _ => {
            eprintln!("cder-man: usage: cder-man OUTDIR");
            return ExitCode::from(2);
        }
    };
    match run(&out) {
        Ok(written) => {
            let mut stdout = std::io::stdout().lock();
            for p in written {
                let _ = writeln!(stdout, "{}", p.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cder-man: {}: {e}", out.display());
            ExitCode::from(1)
        }
    }
}
