//! Phase 2: the refined JDL, and handing it to a broker or a local LRMS.
//!
//! The refined JDL is the user's, attribute for attribute, with the thesis's
//! CELIST conjoined in front of the original Requirements:
//! `Requirements = (other.GlueCEUniqueID == "ce1…" || other.GlueCEUniqueID == "ce2…") && (<original>)`.

use std::path::Path;
use std::process::{Command, Stdio};

use cder_classad::ast::{BinOp, ClassAd, Expr, Scope, Sym};
use cder_classad::value::Value;
use cder_request::keys;

use crate::resources::{directives, JobResources, Settings};

/// The CELIST expression of some CEs.
pub fn celist(ce_ids: &[&str]) -> Expr {
    let eq = |ce: &str| {
        Expr::Binary(
            BinOp::Eq,
            Box::new((
                Expr::Attr { scope: Scope::Target, sym: Sym::of("GlueCEUniqueID"), name: "GlueCEUniqueID".into() },
                Expr::Lit(Value::str(ce)),
            )),
        )
    };
    let mut it = ce_ids.iter();
    let first = it.next().map(|c| eq(c)).unwrap_or(Expr::Lit(Value::Bool(false)));
    it.fold(first, |acc, c| Expr::Binary(BinOp::Or, Box::new((acc, eq(c)))))
}

/// The phase-2 JDL: `job` with Requirements restricted to `ce_ids`.
pub fn refine(job: &ClassAd, ce_ids: &[&str]) -> ClassAd {
    let mut out = job.clone();
    let list = celist(ce_ids);
    let req = match job.lookup(keys::REQUIREMENTS) {
        Some(orig) => Expr::Binary(BinOp::And, Box::new((list, orig.clone()))),
        None => list,
    };
    out.insert(keys::REQUIREMENTS, req);
    out
}

/// The phase-2 JDL with Requirements replaced by the CE list alone (the
/// thesis's Listing 3.11), for brokers that cannot evaluate CDER attributes.
pub fn restrict(job: &ClassAd, ce_ids: &[&str]) -> ClassAd {
    let mut out = job.clone();
    out.insert(keys::REQUIREMENTS, celist(ce_ids));
    out
}

/// A JDL text: one attribute per line, as users write them, with the other
/// ad's scope spelled `other.` as gLite's WMS expects.
pub fn render(ad: &ClassAd) -> String {
    let mut s = String::from("[\n");
    for (name, expr) in ad.iter() {
        let plain = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if plain {
            s.push_str(&format!("  {name} = {expr:#};\n"));
        } else {
            // Ad Display quotes odd names; reuse it for one attribute.
            let mut one = ClassAd::new();
            one.insert(name, expr.clone());
            let text = one.to_string();
            let inner = text.trim_start_matches("[ ").trim_end_matches(" ]");
            s.push_str(&format!("  {inner};\n"));
        }
    }
    s.push_str("]\n");
    s
}

/// A failed submission.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The JDL lacks what the backend needs, or has a bad value.
    #[error("{0}")]
    Input(String),
    /// The submit command could not run or failed.
    #[error("{0}")]
    Runtime(String),
}

/// Runs a submit command with the refined JDL's (or batch script's) path as
/// last argument and `env` added to its environment; returns its stdout, or
/// an error with its stderr.
pub fn run_submit(argv: &[String], jdl: &Path, env: &[(String, String)]) -> Result<String, SubmitError> {
    let (prog, args) = argv.split_first().ok_or_else(|| SubmitError::Input("empty submit command".into()))?;
    let out = Command::new(prog)
        .args(args)
        .arg(jdl)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| SubmitError::Runtime(format!("cannot run {prog}: {e}")))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(SubmitError::Runtime(format!(
            "{} failed ({}): {}{}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            if stdout.trim().is_empty() { String::new() } else { format!(" {}", stdout.trim()) }
        )));
    }
    Ok(stdout)
}

/// The job id in `glite-wms-job-submit` output: the last line that is an
/// `https://…` URL (the first names the WMProxy it connected to).
pub fn wms_job_id(stdout: &str) -> Option<String> {
    stdout
        .lines()
        .map(str::trim)
        .rfind(|l| l.starts_with("https://") && !l.contains(char::is_whitespace))
        .map(str::to_string)
}

/// The job id in `arcsub` output: `Job submitted with jobid: <id>`.
pub fn arc_job_id(stdout: &str) -> Option<String> {
    stdout.lines().find_map(|l| l.split_once("jobid:").map(|(_, id)| id.trim().to_string())).filter(|s| !s.is_empty())
}

/// The job id of a generic command: its last non-empty line.
pub fn last_line(stdout: &str) -> Option<String> {
    stdout.lines().map(str::trim).rfind(|l| !l.is_empty()).map(str::to_string)
}

fn string_attr(job: &ClassAd, key: &str) -> Result<Option<String>, SubmitError> {
    match job.lookup(key).map(|_| job.eval_attr(key)) {
        None => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s.to_string())),
        Some(v) => Err(SubmitError::Input(format!("{key}: must be a string, not {v}"))),
    }
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The JDL keys a SLURM CE passes to `sbatch` in the environment, where
/// `job_submit_cder.so` reads them (an `export` in the script would come too late).
pub fn slurm_submit_env(job: &ClassAd) -> Result<Vec<(String, String)>, SubmitError> {
    let r = JobResources::read(job).map_err(|e| SubmitError::Input(e.to_string()))?;
    let mut env = Vec::new();
    if let Some(n) = r.gpgpus_per_node {
        env.push((keys::GPGPU_PER_NODE.to_string(), n.to_string()));
    }
    if let Some(n) = r.gpgpu_shares_per_node {
        env.push((keys::GPGPU_SHARES_PER_NODE.to_string(), n.to_string()));
    }
    if let (Some(v), Some(m)) = (r.vgpgpus_per_node, r.vgpgpu_method) {
        env.push((keys::VIRTUAL_GPGPU_PER_NODE.to_string(), v.to_string()));
        env.push((keys::VIRTUAL_GPGPU_METHOD.to_string(), m));
    }
    Ok(env)
}

/// A SLURM batch script for a JDL job on a local CE: the LRMS directives
/// of [`crate::resources`], the queue, the job's files and Environment.
/// `dir`: the JDL's directory (relative paths are from there).
pub fn slurm_script(
    job: &ClassAd,
    queue: Option<&str>,
    settings: &Settings,
    dir: &Path,
) -> Result<String, SubmitError> {
    let exe = string_attr(job, keys::EXECUTABLE)?
        .ok_or_else(|| SubmitError::Input("Executable: missing (phase 2 needs a program to run)".into()))?;
    let resources = JobResources::read(job).map_err(|e| SubmitError::Input(e.to_string()))?;
    let mut s = String::from("#!/bin/sh\n");
    let name = Path::new(&exe).file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| exe.clone());
    s.push_str(&format!(
        "#SBATCH --job-name={}\n",
        name.replace(|c: char| !c.is_ascii_alphanumeric() && c != '.' && c != '_' && c != '-', "_")
    ));
    if let Some(q) = queue {
        if !q.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)) {
            return Err(SubmitError::Input(format!("queue {q:?}: not a SLURM partition name")));
        }
        s.push_str(&format!("#SBATCH --partition={q}\n"));
    }
    s.push_str(&format!("#SBATCH --chdir={}\n", dir.display()));
    for (key, opt) in [(keys::STD_OUTPUT, "--output"), (keys::STD_ERROR, "--error")] {
        if let Some(f) = string_attr(job, key)? {
            // sbatch splits a #SBATCH line at blanks (a space or \r would
            // start another option) and expands %: only a plain path gets in.
            if f.is_empty() || f.chars().any(|c| c.is_whitespace() || c.is_control() || "%\"'\\".contains(c)) {
                return Err(SubmitError::Input(format!(
                    "{key}: {f:?} is not a plain file name (no blanks, control characters, quotes, \\ or %)"
                )));
            }
            s.push_str(&format!("#SBATCH {opt}={f}\n"));
        }
    }
    for line in directives(&resources, settings) {
        s.push_str(&line);
        s.push('\n');
    }
    if let Some(Expr::List(_)) | Some(Expr::Lit(Value::List(_))) = job.lookup(keys::ENVIRONMENT) {
        if let Value::List(items) = job.eval_attr(keys::ENVIRONMENT) {
            for it in items.iter() {
                let Value::Str(kv) = it else {
                    return Err(SubmitError::Input(format!("Environment: {it} is not a \"NAME=value\" string")));
                };
                let (k, v) =
                    kv.split_once('=').ok_or_else(|| SubmitError::Input(format!("Environment: {kv:?} has no '='")))?;
                if !is_shell_name(k) {
                    return Err(SubmitError::Input(format!("Environment: {k:?} is not a variable name")));
                }
                s.push_str(&format!("export {k}={}\n", sh_quote(v)));
            }
        }
    }
    let exe_path = if Path::new(&exe).is_absolute() || !dir.join(&exe).exists() {
        exe.clone()
    } else {
        dir.join(&exe).display().to_string()
    };
    let args = string_attr(job, keys::ARGUMENTS)?.unwrap_or_default();
    // gLite hands Arguments to the shell as written.
    s.push_str(&format!("exec {} {args}\n", sh_quote(&exe_path)));
    Ok(s)
}

/// A POSIX shell variable name: a letter or `_`, then letters, digits and `_`
/// (`2X=1` would be run as a command, not assigned).
fn is_shell_name(k: &str) -> bool {
    k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn celist_only_drops_the_cder_clauses_and_keeps_the_rest() {
        let job =
            ClassAd::parse("[ Executable = \"run.sh\"; GPGPUPerNode = 2; Requirements = GPGPUVendor == \"Nvidia\" ]")
                .unwrap();
        let text = render(&restrict(&job, &["ce1:8443/cream-slurm-gpu"]));
        assert!(text.contains("Requirements = other.GlueCEUniqueID == \"ce1:8443/cream-slurm-gpu\";"), "{text}");
        assert!(!text.contains("GPGPUVendor"), "{text}");
        assert!(text.contains("GPGPUPerNode = 2;"), "{text}");
        // A GLUE 1.3 offer of that CE, without CDER attributes, now matches.
        let back = ClassAd::parse(&text).unwrap();
        let glue13 = ClassAd::parse("[ GlueCEUniqueID = \"ce1:8443/cream-slurm-gpu\" ]").unwrap();
        assert!(cder_classad::CompiledRequest::new(&back).matches(&glue13));
        assert!(!cder_classad::CompiledRequest::new(&refine(&job, &["ce1:8443/cream-slurm-gpu"])).matches(&glue13));
    }

    #[test]
    fn refined_jdl_round_trips_through_the_parser() {
        let job = ClassAd::parse(
            "[ Executable = \"run.sh\"; VirtualOrganisation = \"gputestvo\"; GPGPUPerNode = 2;\n  Requirements = GPGPUVendor == \"Nvidia\" && GPGPUMainMemorySize >= 512; Rank = 1 ]",
        )
        .unwrap();
        let refined = refine(&job, &["ce1.example.org:8443/cream-slurm-gpu", "ce\"2:8443/x"]);
        let text = render(&refined);
        assert!(text.contains(
            "Requirements = (other.GlueCEUniqueID == \"ce1.example.org:8443/cream-slurm-gpu\" || other.GlueCEUniqueID == \"ce\\\"2:8443/x\") && (GPGPUVendor == \"Nvidia\" && GPGPUMainMemorySize >= 512);"
        ), "{text}");
        let back = ClassAd::parse(&text).unwrap();
        assert_eq!(back.to_string(), refined.to_string());
        assert_eq!(back.len(), job.len());
        // Each CE of the list passes the restriction, others do not.
        let ce = |id: &str| {
            ClassAd::parse(&format!(
                "[ GlueCEUniqueID = \"{id}\"; GPGPUVendor = \"Nvidia\"; GPGPUMainMemorySize = 1024 ]"
            ))
            .unwrap()
        };
        let req = cder_classad::CompiledRequest::new(&back);
        assert!(req.matches(&ce("ce1.example.org:8443/cream-slurm-gpu")));
        assert!(!req.matches(&ce("ce3.example.org:8443/cream-pbs-gpu")));
    }

    #[test]
    fn job_ids_from_submit_tools() {
        let wms = "Connecting to the service https://wms.example.org:7443/glite_wms_wmproxy_server\n\n====\nYour job identifier is:\n\nhttps://lb.example.org:9000/AbCdEf123\n\n====\n";
        assert_eq!(wms_job_id(wms).as_deref(), Some("https://lb.example.org:9000/AbCdEf123"));
        let arc = "Job submitted with jobid: gsiftp://arc.example.org:2811/jobs/abc123\n";
        assert_eq!(arc_job_id(arc).as_deref(), Some("gsiftp://arc.example.org:2811/jobs/abc123"));
        assert_eq!(last_line("a\nslurm:42\n\n").as_deref(), Some("slurm:42"));
    }

    #[test]
    fn slurm_script_carries_the_translation() {
        let job = ClassAd::parse("[ Executable = \"/bin/echo\"; Arguments = \"hi\"; StdOutput = \"std.out\"; GPGPUPerNode = 2; Environment = { \"A=it's\" } ]").unwrap();
        let s = slurm_script(
            &job,
            Some("debug"),
            &Settings::new(crate::resources::DirectiveDialect::Slurm),
            Path::new("/tmp"),
        )
        .unwrap();
        for line in [
            "#SBATCH --partition=debug",
            "#SBATCH --output=std.out",
            "#SBATCH --gres=gpu:2",
            "export A='it'\\''s'",
            "exec '/bin/echo' hi",
        ] {
            assert!(s.lines().any(|l| l == line), "{line} missing from\n{s}");
        }
        let bad = ClassAd::parse("[ Executable = \"x\"; GPGPUPerNode = -2 ]").unwrap();
        assert!(matches!(
            slurm_script(&bad, None, &Settings::new(crate::resources::DirectiveDialect::Slurm), Path::new("/tmp")),
            Err(SubmitError::Input(_))
        ));
    }

    #[test]
    fn file_names_and_variable_names_cannot_add_options_or_commands() {
        let slurm = Settings::new(crate::resources::DirectiveDialect::Slurm);
        for (attr, key) in [
            ("StdOutput = \"out --partition=prio\"", "StdOutput"),
            ("StdError = \"err\\r--partition=prio\"", "StdError"),
            ("StdOutput = \"a\\tb\"", "StdOutput"),
            ("StdOutput = \"\"", "StdOutput"),
            ("Environment = { \"2X=1\" }", "Environment"),
            ("Environment = { \"A-B=1\" }", "Environment"),
        ] {
            let job = ClassAd::parse(&format!("[ Executable = \"x\"; {attr} ]")).unwrap();
            match slurm_script(&job, None, &slurm, Path::new("/tmp")) {
                Err(SubmitError::Input(m)) => assert!(m.starts_with(key), "{attr}: {m}"),
                other => panic!("{attr} was accepted: {other:?}"),
            }
        }
        let ok =
            ClassAd::parse("[ Executable = \"x\"; StdOutput = \"logs/job_1.out\"; Environment = { \"_X2=a b\" } ]")
                .unwrap();
        let s = slurm_script(&ok, None, &slurm, Path::new("/tmp")).unwrap();
        assert!(s.contains("#SBATCH --output=logs/job_1.out\n") && s.contains("export _X2='a b'\n"), "{s}");
    }
}
