//! `cder-jdl lrms-attrs`: the CE-side drop-in BLAH's
//! `*_local_submit_attributes.sh` runs; it prints batch directives.

use std::collections::BTreeMap;
use std::path::Path;

use crate::cmd::{read_job, Failure};
use crate::resources::{
    directives, refusal_directive, DirectiveDialect, EnvSource, JobResources, PbsGpus, Settings, BLAH_KEYS,
};

/// Arguments of `lrms-attrs`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The batch system: slurm or pbs (TORQUE).
    #[arg(long, value_parser = ["slurm", "pbs"])]
    pub lrms: String,
    /// Read the attributes from a JDL file (`-` for standard input).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["from_env", "attr"], required_unless_present_any = ["from_env", "attr", "blah"])]
    pub jdl: Option<String>,
    /// Read the attributes from the environment (GPGPUPerNode=2, …).
    #[arg(long, conflicts_with = "attr")]
    pub from_env: bool,
    /// One attribute as the BLAH drop-in hands it over: KEY=VALUE (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    pub attr: Vec<String>,
    /// BLAH mode (the drop-ins): a value cder cannot honour also prints a
    /// directive the batch system refuses, naming the attribute, because
    /// BLAH ignores the exit status and stderr.
    #[arg(long)]
    pub blah: bool,
    /// Site settings (the drop-ins: /etc/cder/blah.conf): must be owned by
    /// root and writable by no one else. Options given here override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<String>,
    /// TORQUE GPU request style: native (nodes=…:gpus=N) or maui (-W x=GRES:gpus@N and the prologue's mark).
    #[arg(long, value_parser = ["native", "maui"])]
    pub pbs_gpus: Option<String>,
    /// SLURM GRES name of GPGPUs (default gpu).
    #[arg(long, value_name = "NAME")]
    pub gres: Option<String>,
    /// MAUI generic-resource name of GPGPUs (--pbs-gpus maui; default gpus).
    #[arg(long, value_name = "NAME")]
    pub maui_gres: Option<String>,
    /// SLURM licence that counts vGPGPU backends (default: vgpgpu, the licence job_submit_cder.so counts).
    #[arg(long, value_name = "NAME")]
    pub licence: Option<String>,
}

/// The settings `blah.conf` may hold, `key = value` a line, `#` comments.
const CONFIG_KEYS: [&str; 5] = ["slurm_gres", "pbs_gpus", "maui_gres", "licence", "blahp_writes_gpus"];

/// Reads the site configuration, refusing one that a non-root user could
/// have written: its values become directives in every job's script.
pub fn read_config(path: &Path) -> Result<BTreeMap<String, String>, String> {
    use std::os::unix::fs::MetadataExt;
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if meta.uid() != 0 {
        return Err(format!(
            "{shown}: owned by uid {}, not root; cder reads its settings only from a root-owned file",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{shown}: writable by group or others (mode {:o}); make it 0644 or stricter",
            meta.mode() & 0o7777
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: {e}"))?;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line.split_once('=').ok_or_else(|| format!("{shown}:{}: expected key = value", i + 1))?;
        let (k, v) = (k.trim(), v.trim());
        if !CONFIG_KEYS.contains(&k) {
            return Err(format!("{shown}:{}: unknown key {k:?} (known: {})", i + 1, CONFIG_KEYS.join(", ")));
        }
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

fn settings(args: &Args) -> Result<Settings, Failure> {
    let lrms = if args.lrms == "slurm" { DirectiveDialect::Slurm } else { DirectiveDialect::Pbs };
    let conf = match &args.config {
        Some(p) => read_config(Path::new(p)).map_err(Failure::input)?,
        None => BTreeMap::new(),
    };
    let pick = |cli: &Option<String>, key: &str| cli.clone().or_else(|| conf.get(key).cloned());
    let mut s = Settings::new(lrms);
    match pick(&args.pbs_gpus, "pbs_gpus").as_deref() {
        None | Some("native") => {}
        Some("maui") => s.pbs_gpus = PbsGpus::Maui,
        Some(other) => return Err(Failure::input(format!("pbs_gpus {other:?}: native or maui"))),
    }
    if let Some(g) = pick(&args.gres, "slurm_gres") {
        s.gres = g;
    }
    if let Some(g) = pick(&args.maui_gres, "maui_gres") {
        s.maui_gres = g;
    }
    s.licence = pick(&args.licence, "licence");
    s.blahp_writes_gpus = match conf.get("blahp_writes_gpus").map(String::as_str) {
        None | Some("no") => false,
        Some("yes") => true,
        Some(other) => return Err(Failure::input(format!("blahp_writes_gpus {other:?}: yes or no"))),
    };
    // These names are written into the batch script: nothing but a name may get in.
    for (option, name) in
        [("slurm_gres", Some(&s.gres)), ("maui_gres", Some(&s.maui_gres)), ("licence", s.licence.as_ref())]
    {
        if let Some(l) = name {
            if l.is_empty() || !l.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(Failure::input(format!("{option} {l:?}: letters, digits and _ only")));
            }
        }
    }
    Ok(s)
}

/// Runs `lrms-attrs`.
pub fn run(args: &Args) -> Result<(), Failure> {
    let lrms = if args.lrms == "slurm" { DirectiveDialect::Slurm } else { DirectiveDialect::Pbs };
    let result = translate(args);
    if let (Err(e), true) = (&result, args.blah) {
        // BLAH appends stdout to the batch script and drops the rest: the
        // refusal must be a directive, or the job would run without its request.
        println!("{}", refusal_directive(lrms, e.1));
        return Err(Failure::input(e.0.clone()));
    }
    for line in result.map_err(|e| Failure::input(e.0))? {
        println!("{line}");
    }
    Ok(())
}

/// The directives, or the message and the attribute (or `config`) to name.
fn translate(args: &Args) -> Result<Vec<String>, (String, &'static str)> {
    let settings = settings(args).map_err(|e| (e.message, "config"))?;
    let which = |key: &str| BLAH_KEYS.iter().copied().find(|k| *k == key).unwrap_or("attribute");
    let resources = if let Some(path) = &args.jdl {
        let ad = read_job(path).map_err(|e| (e.message, "jdl"))?;
        JobResources::read(&ad).map_err(|e| (format!("{path}:{e}"), which(&e.key)))?
    } else if args.from_env {
        JobResources::read(&EnvSource(|k: &str| std::env::var(k).ok()))
            .map_err(|e| (format!("environment: {e}"), which(&e.key)))?
    } else {
        let mut attrs = BTreeMap::new();
        for a in &args.attr {
            let (k, v) = a.split_once('=').ok_or_else(|| (format!("--attr {a:?}: expected KEY=VALUE"), "attribute"))?;
            let Some(key) = BLAH_KEYS.iter().copied().find(|x| *x == k) else {
                return Err((format!("--attr {k:?}: not one of {}", BLAH_KEYS.join(", ")), "attribute"));
            };
            attrs.insert(key, v.to_string());
        }
        JobResources::read(&EnvSource(|k: &str| attrs.get(k).cloned()))
            .map_err(|e| (format!("BLAH attributes: {e}"), which(&e.key)))?
    };
    resources.check_dialect(settings.lrms).map_err(|e| (e.to_string(), which(&e.key)))?;
    Ok(directives(&resources, &settings))
}
