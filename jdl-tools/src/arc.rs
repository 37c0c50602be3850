//! Phase 2 through NorduGrid ARC: the refined JDL as xRSL for `arcsub`.
//!
//! The GPU request travels as the CE's runtime environment
//! `(runtimeenvironment="ENV/GPGPU" "N")` (deploy/arc/ENV/GPGPU), which turns
//! it, at A-REX's stage 0, into the SLURM form job_submit_cder counts; a
//! vGPGPU request as `(runtimeenvironment="ENV/VGPGPU" "V" "rCUDA|VCL")`
//! (deploy/arc/ENV/VGPGPU, cder's SPANK options). The values are read with
//! the same reader as every other directive writer ([`JobResources`], which
//! applies cder-request's count and method rules), so a value this module
//! writes is one the CE's RTEs and job_submit accept.
//!
//! xRSL strings are written in double quotes with an inner `"` doubled, as
//! ARC's RSL parser reads them; control characters are refused because the
//! parser would take a newline literally into a file name or argument.

use std::path::Path;

use cder_request::keys;

use cder_classad::ast::ClassAd;
use cder_classad::value::Value;

use crate::resources::JobResources;

/// The runtime environment an ARC CE running cder publishes for GPGPU jobs.
pub const GPGPU_RTE: &str = "ENV/GPGPU";

/// The runtime environment for vGPGPU jobs (deploy/arc/ENV/VGPGPU):
/// arguments per-node count and method.
pub const VGPGPU_RTE: &str = "ENV/VGPGPU";

/// Why a JDL cannot be written as xRSL.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {message}")]
pub struct XrslError {
    /// The JDL attribute at fault.
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

fn err(key: &str, message: impl Into<String>) -> XrslError {
    XrslError { key: key.into(), message: message.into() }
}

/// One xRSL string literal: `"…"` with inner quotes doubled; control
/// characters refused (`key` names the JDL attribute in the error).
pub fn quote(key: &str, s: &str) -> Result<String, XrslError> {
    if let Some(c) = s.chars().find(|c| c.is_control()) {
        return Err(err(key, format!("{s:?} holds the control character {c:?}, which xRSL cannot carry")));
    }
    Ok(format!("\"{}\"", s.replace('"', "\"\"")))
}

fn string_attr(job: &ClassAd, key: &str) -> Result<Option<String>, XrslError> {
    match job.lookup(key).map(|_| job.eval_attr(key)) {
        None | Some(Value::Undefined) => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s.to_string())),
        Some(v) => Err(err(key, format!("must be a string, not {v}"))),
    }
}

fn string_list(job: &ClassAd, key: &str) -> Result<Vec<String>, XrslError> {
    match job.lookup(key).map(|_| job.eval_attr(key)) {
        None | Some(Value::Undefined) => Ok(Vec::new()),
        Some(Value::Str(s)) => Ok(vec![s.to_string()]),
        Some(Value::List(items)) => items
            .iter()
            .map(|v| match v {
                Value::Str(s) => Ok(s.to_string()),
                other => Err(err(key, format!("{other} is not a string"))),
            })
            .collect(),
        Some(v) => Err(err(key, format!("must be a string or a list of strings, not {v}"))),
    }
}

/// The name a local file has in the job's session directory.
fn session_name(key: &str, path: &str) -> Result<String, XrslError> {
    let name = Path::new(path).file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    if name.is_empty() || name == "." || name == ".." {
        return Err(err(key, format!("{path:?} names no file")));
    }
    Ok(name)
}

/// A local path as an absolute one: ARC's client uploads input files from
/// where it runs, and relative JDL paths are from the JDL's directory.
fn absolute(dir: &Path, path: &str) -> String {
    if Path::new(path).is_absolute() {
        path.to_string()
    } else {
        dir.join(path).display().to_string()
    }
}

/// The xRSL of a (refined) JDL job: executable, arguments, stdout/stderr,
/// input files (the executable when it is a local file, and InputSandbox),
/// output files (OutputSandbox), Environment, and the GPGPU runtime
/// environment(s): `ENV/GPGPU "N"` for `GPGPUPerNode`, `ENV/VGPGPU "V" "M"`
/// for `VirtualGPGPUPerNode` and its method (rCUDA unless the job names
/// one). `dir`: the JDL's directory.
pub fn xrsl(job: &ClassAd, dir: &Path) -> Result<String, XrslError> {
    let exe = string_attr(job, keys::EXECUTABLE)?
        .ok_or_else(|| err(keys::EXECUTABLE, "missing (phase 2 needs a program to run)"))?;
    let resources = JobResources::read(job).map_err(|e| match e.pos {
        Some(p) if p.line > 0 => err(&e.key, format!("{} (at {p})", e.message)),
        _ => err(&e.key, e.message),
    })?;
    let mut out = String::from("&");
    let mut inputs: Vec<(String, String)> = Vec::new();
    let local_exe = !Path::new(&exe).is_absolute() && dir.join(&exe).is_file();
    if local_exe {
        let name = session_name(keys::EXECUTABLE, &exe)?;
        out.push_str(&format!("(executable={})\n", quote(keys::EXECUTABLE, &name)?));
        inputs.push((name, absolute(dir, &exe)));
    } else {
        out.push_str(&format!("(executable={})\n", quote(keys::EXECUTABLE, &exe)?));
    }
    if let Some(args) = string_attr(job, keys::ARGUMENTS)? {
        // gLite hands Arguments to a shell; xRSL takes a list of words and
        // runs no shell, so only plain words have one meaning in both.
        if let Some(c) = args.chars().find(|c| "\"'\\$`;&|<>(){}*?".contains(*c)) {
            return Err(err(keys::ARGUMENTS, format!("{args:?}: {c:?} would be read by gLite's shell but not by ARC; write plain words separated by blanks")));
        }
        let words: Vec<String> =
            args.split_whitespace().map(|w| quote(keys::ARGUMENTS, w)).collect::<Result<_, _>>()?;
        if !words.is_empty() {
            out.push_str(&format!(" (arguments={})\n", words.join(" ")));
        }
    }
    for (key, attr) in [(keys::STD_OUTPUT, "stdout"), (keys::STD_ERROR, "stderr")] {
        if let Some(f) = string_attr(job, key)? {
            out.push_str(&format!(" ({attr}={})\n", quote(key, &f)?));
        }
    }
    for f in string_list(job, keys::INPUT_SANDBOX)? {
        let name = session_name(keys::INPUT_SANDBOX, &f)?;
        if !inputs.iter().any(|(n, _)| *n == name) {
            inputs.push((name, absolute(dir, &f)));
        }
    }
    if !inputs.is_empty() {
        out.push_str(" (inputfiles=");
        for (name, src) in &inputs {
            out.push_str(&format!("({} {})", quote(keys::INPUT_SANDBOX, name)?, quote(keys::INPUT_SANDBOX, src)?));
        }
        out.push_str(")\n");
    }
    let outputs = string_list(job, keys::OUTPUT_SANDBOX)?;
    if !outputs.is_empty() {
        out.push_str(" (outputfiles=");
        for f in &outputs {
            // An empty destination keeps the file for arcget.
            out.push_str(&format!("({} \"\")", quote(keys::OUTPUT_SANDBOX, f)?));
        }
        out.push_str(")\n");
    }
    let env = string_list(job, keys::ENVIRONMENT)?;
    if !env.is_empty() {
        out.push_str(" (environment=");
        for kv in &env {
            let (k, v) = kv.split_once('=').ok_or_else(|| err(keys::ENVIRONMENT, format!("{kv:?} has no '='")))?;
            if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(err(keys::ENVIRONMENT, format!("{k:?} is not a variable name")));
            }
            out.push_str(&format!("({} {})", quote(keys::ENVIRONMENT, k)?, quote(keys::ENVIRONMENT, v)?));
        }
        out.push_str(")\n");
    }
    if let Some(n) = resources.gpgpus_per_node {
        let n = cder_request::check_count(n).map_err(|e| err(keys::GPGPU_PER_NODE, format!("{n}: {e}")))?;
        out.push_str(&format!(
            " (runtimeenvironment={} {})\n",
            quote(keys::GPGPU_PER_NODE, GPGPU_RTE)?,
            quote(keys::GPGPU_PER_NODE, &n.to_string())?
        ));
    }
    // Per node, as the SPANK option: job_submit multiplies by the nodes.
    if let (Some(v), Some(method)) = (resources.vgpgpus_per_node, &resources.vgpgpu_method) {
        let v = cder_request::check_count(v).map_err(|e| err(keys::VIRTUAL_GPGPU_PER_NODE, format!("{v}: {e}")))?;
        let method: cder_request::VgpgpuMethod =
            method.parse().map_err(|e: cder_request::UnknownMethod| err(keys::VIRTUAL_GPGPU_METHOD, e.to_string()))?;
        out.push_str(&format!(
            " (runtimeenvironment={} {} {})\n",
            quote(keys::VIRTUAL_GPGPU_PER_NODE, VGPGPU_RTE)?,
            quote(keys::VIRTUAL_GPGPU_PER_NODE, &v.to_string())?,
            quote(keys::VIRTUAL_GPGPU_METHOD, method.name())?
        ));
    }
    let name = session_name(keys::EXECUTABLE, &exe).unwrap_or_else(|_| "cder-job".into());
    out.push_str(&format!(" (jobname={})\n", quote(keys::EXECUTABLE, &name)?));
    Ok(out)
}

/// `arcsub`'s arguments before the xRSL file: the REST interface and each
/// CE phase 1 matched (arcsub brokers among them).
pub fn arcsub_args(ce_ids: &[&str]) -> Vec<String> {
    let mut argv = vec!["-T".to_string(), "arcrest".to_string()];
    for ce in ce_ids {
        argv.push("-C".into());
        argv.push((*ce).to_string());
    }
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ad(text: &str) -> ClassAd {
        ClassAd::parse(text).unwrap()
    }

    #[test]
    fn gpgpu_request_becomes_the_runtime_environment() {
        let dir = std::env::temp_dir().join(format!("cder-arc-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("run.sh"), "#!/bin/sh\n").unwrap();
        let job = ad("[ Executable = \"run.sh\"; Arguments = \"a b\"; StdOutput = \"std.out\"; StdError = \"std.err\"; \
                      InputSandbox = { \"data/in.txt\" }; OutputSandbox = { \"res.txt\" }; Environment = { \"A=say \\\"hi\\\"\" }; GPGPUPerNode = 2 ]");
        let x = xrsl(&job, &dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let d = dir.display();
        for part in [
            "&(executable=\"run.sh\")".to_string(),
            "(arguments=\"a\" \"b\")".into(),
            "(stdout=\"std.out\")".into(),
            "(stderr=\"std.err\")".into(),
            format!("(inputfiles=(\"run.sh\" \"{d}/run.sh\")(\"in.txt\" \"{d}/data/in.txt\"))"),
            "(outputfiles=(\"res.txt\" \"\"))".into(),
            "(environment=(\"A\" \"say \"\"hi\"\"\"))".into(),
            "(runtimeenvironment=\"ENV/GPGPU\" \"2\")".into(),
        ] {
            assert!(x.contains(&part), "{part} missing from\n{x}");
        }
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        let d = Path::new("/nonexistent");
        for (text, key) in [
            ("[ Executable = \"/bin/x\"; GPGPUPerNode = 0 ]", "GPGPUPerNode"),
            ("[ Executable = \"/bin/x\"; GPGPUPerNode = 4097 ]", "GPGPUPerNode"),
            ("[ Executable = \"/bin/x\"; StdOutput = \"a\\nb\" ]", "StdOutput"),
            ("[ Executable = \"/bin/x\"; Arguments = \"a; rm\" ]", "Arguments"),
            ("[ Executable = \"/bin/x\"; VirtualGPGPUPerNode = 0 ]", "VirtualGPGPUPerNode"),
            (
                "[ Executable = \"/bin/x\"; VirtualGPGPUPerNode = 1; VirtualGPGPUMethod = \"cuda\" ]",
                "VirtualGPGPUMethod",
            ),
            ("[ Arguments = \"a\" ]", "Executable"),
        ] {
            let e = xrsl(&ad(text), d).unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
        }
        assert!(quote("k", "tab\there").is_err());
        assert_eq!(quote("k", "a\"b").unwrap(), "\"a\"\"b\"");
    }

    #[test]
    fn vgpgpu_request_becomes_its_runtime_environment() {
        let d = Path::new("/nonexistent");
        let x =
            xrsl(&ad("[ Executable = \"/bin/x\"; VirtualGPGPUPerNode = 3; VirtualGPGPUMethod = \"vcl\" ]"), d).unwrap();
        assert!(x.contains("(runtimeenvironment=\"ENV/VGPGPU\" \"3\" \"VCL\")"), "{x}");
        assert!(!x.contains("ENV/GPGPU\""), "{x}");
        // No method: rCUDA, as everywhere else; both kinds: both RTEs.
        let x = xrsl(&ad("[ Executable = \"/bin/x\"; GPGPUPerNode = 1; VirtualGPGPUPerNode = 2 ]"), d).unwrap();
        assert!(
            x.contains("(runtimeenvironment=\"ENV/VGPGPU\" \"2\" \"rCUDA\")")
                && x.contains("(runtimeenvironment=\"ENV/GPGPU\" \"1\")"),
            "{x}"
        );
    }

    #[test]
    fn no_request_no_runtime_environment() {
        let x = xrsl(&ad("[ Executable = \"/bin/hostname\" ]"), Path::new("/nonexistent")).unwrap();
        assert!(!x.contains("runtimeenvironment"), "{x}");
        assert!(x.starts_with("&(executable=\"/bin/hostname\")"), "{x}");
        assert_eq!(arcsub_args(&["https://a:443/arex", "b"]), ["-T", "arcrest", "-C", "https://a:443/arex", "-C", "b"]);
    }
}
