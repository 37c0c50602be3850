//! `/etc/cder/torque.toml`: the TORQUE side's own settings.
//!
//! Kept apart from `cder.toml` because the submit filter runs on submit hosts
//! (the CE, user interfaces) that have no cderd and no `cder.toml`, and
//! because `cder.toml` rejects keys it does not know. Every key is optional;
//! a missing file means the defaults.
//!
//! ```toml
//! [torque]
//! directive = "native"          # or "maui": -W x=GRES:gpus@N, as in the seed thesis
//! default_ppn = 1               # ppn of the nodes= line the filter adds when a job has none
//! cder_type = "gpgpu"           # the cderd type GPGPUPerNode and gpus= ask for
//! gres_names = ["gpus", "gpgpu"] # -l gres=<name>:N entries the prologue counts
//! maui_gres = "gpus"            # the MAUI GRES name in x=GRES:<name>@N
//! max_per_node = 64             # the filter rejects larger GPGPUPerNode
//! cderd_timeout_s = 20          # each hook's bound on one cderd call
//! confine = "required"          # job starter: "required", "optional" or "off"
//! pbs_home = "/var/spool/torque" # only where the hooks do not run from mom_priv/
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use cder_model::config::{self, ConfigError};
use serde::Deserialize;

/// Where the settings live unless `CDER_TORQUE_CONFIG` names another file.
pub const DEFAULT_SETTINGS_PATH: &str = "/etc/cder/torque.toml";
/// The variable that overrides [`DEFAULT_SETTINGS_PATH`].
pub const SETTINGS_ENV: &str = "CDER_TORQUE_CONFIG";

/// Which scheduler dialect the submit filter writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Directive {
    /// TORQUE's own GPU scheduling: `#PBS -l nodes=1:ppn=P:gpus=N`.
    Native,
    /// MAUI with the consumable-resource patch: `#PBS -W x=GRES:gpus@N`
    /// (the seed thesis, section 3.3.2), plus a mark the prologue can read.
    Maui,
}

impl fmt::Display for Directive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Directive::Native => "native",
            Directive::Maui => "maui",
        })
    }
}

/// What the job starter does about kernel enforcement (cderd's `confine`:
/// a device cgroup that denies the job every managed device but its own):
/// `required` (a job that cannot be confined is not started), `optional`
/// (it runs with the visible-device variables only, and its error file says
/// so) or `off` (never ask; TORQUE's own cgroups constrain devices). The
/// vocabulary is cder-model's, shared with SLURM's plugstack.conf.
pub use cder_model::Confine;

/// The `[torque]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorqueSettings {
    /// Which scheduler dialect the submit filter writes (`native`).
    #[serde(default = "default_directive")]
    pub directive: Directive,
    /// `ppn` of the `nodes=` line the filter adds when a job has none (1).
    #[serde(default = "default_ppn")]
    pub default_ppn: u32,
    /// The cderd device type `GPGPUPerNode` and `gpus=` ask for (`gpgpu`).
    #[serde(default = "default_cder_type")]
    pub cder_type: String,
    /// The `-l gres=<name>:N` names the prologue counts as a device request
    /// (`gpus`, `gpgpu`).
    #[serde(default = "default_gres_names")]
    pub gres_names: Vec<String>,
    /// The MAUI GRES name in `x=GRES:<name>@N` (`gpus`).
    #[serde(default = "default_maui_gres")]
    pub maui_gres: String,
    /// The largest `GPGPUPerNode` the filter accepts (64).
    #[serde(default = "default_max_per_node")]
    pub max_per_node: u32,
    /// Each hook's bound, in seconds, on one cderd call (20).
    #[serde(default = "default_timeout")]
    pub cderd_timeout_s: u64,
    /// What the job starter does about kernel enforcement (`required`).
    #[serde(default = "default_confine")]
    pub confine: Confine,
    /// `$PBS_HOME`, where the hooks cannot tell it from the `mom_priv/` they
    /// run from, and for `cder-torque-reconcile`.
    #[serde(default)]
    pub pbs_home: Option<PathBuf>,
    /// What the file says that still works but should be written otherwise
    /// (an old `confine` word), each with file, line and key: the programs
    /// an admin runs print them.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    torque: Option<TorqueSettings>,
}

/// The `confine` word as written, for the deprecation warning.
#[derive(Deserialize)]
struct Written {
    torque: Option<WrittenTorque>,
}

#[derive(Deserialize)]
struct WrittenTorque {
    confine: Option<String>,
}

fn default_directive() -> Directive {
    Directive::Native
}
fn default_ppn() -> u32 {
    1
}
fn default_cder_type() -> String {
    cder_protocol::DEFAULT_TYPE.to_string()
}
fn default_gres_names() -> Vec<String> {
    vec!["gpus".into(), "gpgpu".into()]
}
fn default_maui_gres() -> String {
    "gpus".into()
}
fn default_max_per_node() -> u32 {
    64
}
fn default_timeout() -> u64 {
    20
}
fn default_confine() -> Confine {
    Confine::Required
}

impl Default for TorqueSettings {
    fn default() -> Self {
        TorqueSettings {
            directive: default_directive(),
            default_ppn: default_ppn(),
            cder_type: default_cder_type(),
            gres_names: default_gres_names(),
            maui_gres: default_maui_gres(),
            max_per_node: default_max_per_node(),
            cderd_timeout_s: default_timeout(),
            confine: default_confine(),
            pbs_home: None,
            warnings: Vec::new(),
        }
    }
}

/// A settings file that could not be read or is wrong: cder's one config
/// error, with file, line, column and the dotted key (`torque.default_ppn`).
pub type SettingsError = ConfigError;

impl TorqueSettings {
    /// The file to read: `$CDER_TORQUE_CONFIG` when set, else
    /// `/etc/cder/torque.toml`.
    pub fn resolve_path() -> PathBuf {
        config::resolve_path(None, SETTINGS_ENV, DEFAULT_SETTINGS_PATH)
    }

    /// Reads the settings; a file that does not exist gives the defaults
    /// (a site that never wrote one gets native TORQUE directives).
    pub fn load(path: &Path) -> Result<TorqueSettings, SettingsError> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TorqueSettings::default()),
            _ => Self::parse(&config::read_text(path)?, path),
        }
    }

    /// Parses and checks settings text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<TorqueSettings, SettingsError> {
        let file: File = config::from_toml(text, path)?;
        let mut settings = file.torque.unwrap_or_default();
        let bad = |key: &str, message: String| match value_offset(text, key) {
            Some(offset) => ConfigError::at(path, text, offset, &format!("torque.{key}"), message),
            None => {
                ConfigError { path: path.into(), line: None, column: None, key: Some(format!("torque.{key}")), message }
            }
        };
        if settings.default_ppn == 0 {
            return Err(bad("default_ppn", "must be at least 1".into()));
        }
        if settings.max_per_node == 0 {
            return Err(bad("max_per_node", "must be at least 1".into()));
        }
        if settings.cderd_timeout_s == 0 || settings.cderd_timeout_s > 120 {
            // pbs_mom kills a prologue after $prologalarm (300 s by default);
            // two calls of at most 120 s each stay inside it.
            return Err(bad("cderd_timeout_s", format!("{} is outside 1..=120 seconds", settings.cderd_timeout_s)));
        }
        if !is_name(&settings.cder_type) {
            return Err(bad(
                "cder_type",
                format!("{:?} is not a CDER type name (lowercase letters, digits, _ and -)", settings.cder_type),
            ));
        }
        if !is_name(&settings.maui_gres) {
            return Err(bad("maui_gres", format!("{:?} is not a GRES name", settings.maui_gres)));
        }
        if let Some(home) = settings.pbs_home.as_ref().filter(|h| !h.is_absolute()) {
            return Err(bad("pbs_home", format!("{} is not an absolute path", home.display())));
        }
        if let Some(g) = settings.gres_names.iter().find(|g| !is_name(g)) {
            return Err(bad("gres_names", format!("{g:?} is not a GRES name")));
        }
        // The value parsed (old words are read as the new); say so where an old one was written.
        let written = config::from_toml::<Written>(text, path).ok().and_then(|w| w.torque?.confine);
        if let Some(Ok((_, Some(deprecated)))) = written.as_deref().map(Confine::read) {
            settings.warnings.push(bad("confine", deprecated.to_string()).to_string());
        }
        Ok(settings)
    }

    /// Prints [`TorqueSettings::warnings`] to stderr, each after `program: `.
    pub fn print_warnings(&self, program: &str) {
        for warning in &self.warnings {
            eprintln!("{program}: warning: {warning}");
        }
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Byte offset of the value of `key = …`, for checks made after parsing.
fn value_offset(text: &str, key: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix(key) {
            if rest.trim_start().starts_with('=') {
                let value_at =
                    offset + line.len() - trimmed.len() + key.len() + (rest.len() - rest.trim_start().len()) + 1;
                return Some(value_at + (text[value_at..].len() - text[value_at..].trim_start().len()));
            }
        }
        offset += line.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_when_empty_or_missing() {
        let s = TorqueSettings::parse("", Path::new("t.toml")).unwrap();
        assert_eq!(s, TorqueSettings::default());
        assert_eq!(s.directive, Directive::Native);
        let missing = TorqueSettings::load(Path::new("/nonexistent/cder/torque.toml")).unwrap();
        assert_eq!(missing.default_ppn, 1);
    }

    #[test]
    fn reads_maui_settings() {
        let s = TorqueSettings::parse(
            "[torque]\ndirective = \"maui\"\nmaui_gres = \"gpgpu\"\ndefault_ppn = 4\nconfine = \"optional\"\n",
            Path::new("t.toml"),
        )
        .unwrap();
        assert_eq!(
            (s.directive, s.maui_gres.as_str(), s.default_ppn, s.confine),
            (Directive::Maui, "gpgpu", 4, Confine::Optional)
        );
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        assert_eq!(TorqueSettings::default().confine, Confine::Required);
        let e = TorqueSettings::parse("[torque]\npbs_home = \"spool\"\n", Path::new("t.toml")).unwrap_err();
        assert_eq!(e.to_string(), "t.toml:2:12: torque.pbs_home: spool is not an absolute path");
    }

    /// torque.toml files of earlier releases (`confine = "best_effort"`)
    /// still load, as `optional`, with a warning naming file, line, key and
    /// the word to write.
    #[test]
    fn the_old_confine_word_loads_with_a_warning() {
        let s = TorqueSettings::parse("[torque]\n\nconfine = \"best_effort\"\n", Path::new("t.toml")).unwrap();
        assert_eq!(s.confine, Confine::Optional);
        assert_eq!(
            s.warnings,
            ["t.toml:3:11: torque.confine: confine \"best_effort\" is deprecated: write \"optional\" (the same policy)"]
        );
        let e = TorqueSettings::parse("[torque]\nconfine = \"auto-ish\"\n", Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().starts_with("t.toml:2:") && e.to_string().contains("required, optional or off"), "{e}");
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let e = TorqueSettings::parse("[torque]\ndirective = \"pbspro\"\n", Path::new("t.toml")).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("t.toml:2:"), "{text}");
        assert!(text.contains("pbspro") || text.contains("variant"), "{text}");
        let e = TorqueSettings::parse("[torque]\ncolour = 1\n", Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().starts_with("t.toml:2:") && e.to_string().contains("colour"), "{e}");
        let e = TorqueSettings::parse("[torque]\n\ndefault_ppn = 0\n", Path::new("t.toml")).unwrap_err();
        assert_eq!(e.to_string(), "t.toml:3:15: torque.default_ppn: must be at least 1");
        let e = TorqueSettings::parse("[torque]\ncderd_timeout_s = 900\n", Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().contains("torque.cderd_timeout_s"), "{e}");
        let e = TorqueSettings::parse("[torque]\ncder_type = \"GPU'\"\n", Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().contains("torque.cder_type"), "{e}");
    }
}
