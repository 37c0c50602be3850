//! `cder-jdl submit`: phase 1, then phase 2, in one command.

use std::path::{Path, PathBuf};

use crate::cmd::{explain_text, phase1, Failure, Phase1Args};
use crate::resources::{DirectiveDialect, Settings};
use crate::submit::{arc_job_id, last_line, refine, render, restrict, run_submit, slurm_script, wms_job_id};

/// Arguments of `submit`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The phase-1 options shared with the other command (BDII, VO, rank, timeouts).
    #[command(flatten)]
    pub phase1: Phase1Args,
    /// Where phase 2 goes: wms (glite-wms-job-submit -a), arc (arcsub), slurm (sbatch on this CE),
    /// command (--submit-command).
    #[arg(long, default_value = "wms", value_parser = ["wms", "arc", "slurm", "command"])]
    pub via: String,
    /// Print the refined JDL instead of submitting it (for --via slurm, also the batch script; for
    /// --via arc, the xRSL).
    #[arg(long)]
    pub dry_run: bool,
    /// The submit command for wms, arc or command, split on spaces; the refined JDL's path is appended.
    /// Defaults: wms "glite-wms-job-submit -a" ($CDER_WMS_SUBMIT), arc "arcsub" ($CDER_ARC_SUBMIT).
    #[arg(long, value_name = "COMMAND")]
    pub submit_command: Option<String>,
    /// For --via slurm: this CE's GlueCEUniqueID; phase 1 must have matched it.
    #[arg(long, env = "CDER_LOCAL_CE", value_name = "CE_ID")]
    pub ce: Option<String>,
    /// For --via slurm: the sbatch program.
    #[arg(long, env = "CDER_SBATCH", default_value = "sbatch", value_name = "PATH")]
    pub sbatch: String,
    /// For --via slurm: the GRES name of GPGPUs.
    #[arg(long, default_value = "gpu", value_name = "NAME")]
    pub gres: String,
    /// Make the refined Requirements the CE list alone, as the seed thesis's
    /// Listing 3.11 does: for a broker that reads GLUE 1.3 and so sees the
    /// CDER clauses (already checked in phase 1) as undefined.
    #[arg(long)]
    pub celist_only: bool,
    /// Keep the refined JDL (the xRSL for --via arc) in this file (default: a temporary file,
    /// removed after submission).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The job description.
    #[arg(value_name = "JOB.jdl")]
    pub job: String,
}

fn words(cmd: &str) -> Vec<String> {
    cmd.split_whitespace().map(str::to_string).collect()
}

/// Runs `submit`.
pub fn run(args: &Args) -> Result<(), Failure> {
    if args.via == "command" && args.submit_command.is_none() {
        return Err(Failure::input("--via command needs --submit-command"));
    }
    if args.via == "slurm" && args.ce.is_none() {
        return Err(Failure::input("--via slurm needs --ce (or CDER_LOCAL_CE): this CE's GlueCEUniqueID"));
    }
    let p = phase1(&args.phase1, &args.job, true)?;
    p.report_source();
    if p.result.matches.is_empty() {
        return Err(Failure::runtime(format!(
            "{}: no CE matches the job requirements:\n{}",
            args.job,
            explain_text(&p).trim_end()
        )));
    }
    let ces: Vec<&str> = p.result.ce_ids();
    let refined = render(&if args.celist_only { restrict(&p.job, &ces) } else { refine(&p.job, &ces) });
    // The refined JDL must read back: a broker would reject it otherwise.
    cder_classad::parser::parse_classad(&refined)
        .map_err(|e| Failure::runtime(format!("refined JDL does not parse ({e}):\n{refined}")))?;
    let dir = Path::new(&args.job)
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);

    if args.via == "slurm" {
        let ce = args.ce.as_deref().unwrap_or_default();
        let Some(m) = p.result.matches.iter().find(|m| m.ce_id == ce) else {
            return Err(Failure::runtime(format!(
                "{}: this CE ({ce}) is not among the matching CEs: {}",
                args.job,
                ces.join(", ")
            )));
        };
        let queue = p.offers.offers[m.offer].queue.clone();
        let settings = Settings { gres: args.gres.clone(), ..Settings::new(DirectiveDialect::Slurm) };
        let refined_ad = cder_classad::parser::parse_classad(&refined).map_err(|e| Failure::runtime(e.to_string()))?;
        let script = slurm_script(&refined_ad, queue.as_deref(), &settings, &dir).map_err(|e| match e {
            crate::submit::SubmitError::Input(m) => Failure::input(format!("{}: {m}", args.job)),
            crate::submit::SubmitError::Runtime(m) => Failure::runtime(m),
        })?;
        if args.dry_run {
            print!("{refined}\n{script}");
            return Ok(());
        }
        let path = write_temp("sh", &script)?;
        let argv = vec![args.sbatch.clone(), "--parsable".into()];
        let env =
            crate::submit::slurm_submit_env(&refined_ad).map_err(|e| Failure::input(format!("{}: {e}", args.job)))?;
        let out = run_submit(&argv, &path, &env);
        let _ = std::fs::remove_file(&path);
        let out = out.map_err(|e| Failure::runtime(e.to_string()))?;
        let id = out.trim().split(';').next().unwrap_or_default().to_string();
        if id.is_empty() {
            return Err(Failure::runtime(format!("{} printed no job id", args.sbatch)));
        }
        println!("slurm:{id}");
        return Ok(());
    }

    if args.via == "arc" {
        return submit_arc(args, &refined, &ces, &dir);
    }
    if args.dry_run {
        print!("{refined}");
        return Ok(());
    }
    let path = match &args.output {
        Some(p) => {
            write_private(p, &refined, false).map_err(|e| Failure::runtime(format!("{}: {e}", p.display())))?;
            p.clone()
        }
        None => write_temp("jdl", &refined)?,
    };
    let argv = match (&args.submit_command, args.via.as_str()) {
        (Some(c), _) => words(c),
        (None, "wms") => words(&std::env::var("CDER_WMS_SUBMIT").unwrap_or_else(|_| "glite-wms-job-submit -a".into())),
        (None, _) => Vec::new(),
    };
    let out = run_submit(&argv, &path, &[]);
    if args.output.is_none() {
        let _ = std::fs::remove_file(&path);
    }
    let out = out.map_err(|e| Failure::runtime(e.to_string()))?;
    let id = match args.via.as_str() {
        "wms" => wms_job_id(&out),
        _ => last_line(&out),
    };
    match id {
        Some(id) => {
            println!("{id}");
            Ok(())
        }
        None => Err(Failure::runtime(format!("{} reported no job id: {}", argv.join(" "), out.trim()))),
    }
}

/// Writes `text` readable by its owner only (mode 0600): a job's JDL and
/// script hold its environment. `exclusive`: never open an existing file
/// (O_EXCL), so another user cannot plant a file or link in the temp dir.
fn write_private(path: &std::path::Path, text: &str, exclusive: bool) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).mode(0o600);
    if exclusive {
        o.create_new(true);
    } else {
        o.create(true).truncate(true);
    }
    o.open(path)?.write_all(text.as_bytes())
}

/// A new 0600 file in the temp dir holding `text`; its path.
fn write_temp(ext: &str, text: &str) -> Result<PathBuf, Failure> {
    let mut last = None;
    for attempt in 0..100u32 {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let path = std::env::temp_dir().join(format!("cder-jdl-{}-{nanos}-{attempt}.{ext}", std::process::id()));
        match write_private(&path, text, true) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(Failure::runtime(format!("{}: {e}", path.display()))),
        }
    }
    Err(Failure::runtime(format!(
        "{}: no new file could be created ({})",
        std::env::temp_dir().display(),
        last.map(|e| e.to_string()).unwrap_or_default()
    )))
}

/// `--via arc`: the refined JDL as xRSL with the GPGPU runtime environment,
/// handed to `arcsub -T arcrest -C <each matching CE>`; prints ARC's job ID.
fn submit_arc(args: &Args, refined: &str, ces: &[&str], dir: &Path) -> Result<(), Failure> {
    let ad = cder_classad::parser::parse_classad(refined).map_err(|e| Failure::runtime(e.to_string()))?;
    let xrsl = crate::arc::xrsl(&ad, dir).map_err(|e| Failure::input(format!("{}: {e}", args.job)))?;
    if args.dry_run {
        print!("{xrsl}");
        return Ok(());
    }
    let path = match &args.output {
        Some(p) => {
            write_private(p, &xrsl, false).map_err(|e| Failure::runtime(format!("{}: {e}", p.display())))?;
            p.clone()
        }
        None => write_temp("xrsl", &xrsl)?,
    };
    let mut argv = words(
        &args
            .submit_command
            .clone()
            .or_else(|| std::env::var("CDER_ARC_SUBMIT").ok())
            .unwrap_or_else(|| "arcsub".into()),
    );
    argv.extend(crate::arc::arcsub_args(ces));
    let out = run_submit(&argv, &path, &[]);
    if args.output.is_none() {
        let _ = std::fs::remove_file(&path);
    }
    let out = out.map_err(|e| Failure::runtime(e.to_string()))?;
    let id = arc_job_id(&out)
        .ok_or_else(|| Failure::runtime(format!("{} reported no job id: {}", argv.join(" "), out.trim())))?;
    println!("{id}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn job_files_are_private_and_never_reuse_a_planted_file() {
        let path = write_temp("jdl", "[ X = 1 ]").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[ X = 1 ]");
        // A file already there (planted, or a symlink) is refused, not followed.
        assert_eq!(write_private(&path, "other", true).unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
        std::fs::remove_file(&path).unwrap();
        let out = std::env::temp_dir().join(format!("cder-jdl-test-{}-refined.jdl", std::process::id()));
        let _ = std::fs::remove_file(&out);
        write_private(&out, "[ Y = 2 ]", false).unwrap();
        assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::remove_file(&out).unwrap();
    }
}
