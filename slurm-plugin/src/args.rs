//! The arguments of `spank_cder.so` on its plugstack.conf line:
//!
//! ```text
//! required /usr/lib/cder/spank_cder.so socket=/run/cder/cderd.sock fail=closed confine=optional
//! ```
//!
//! `mode=managed|observe` of earlier releases is still accepted and has no
//! effect: SLURM's GRES always chooses the devices now (docs/slurm.md).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// What the plugin does when cderd cannot give a job what it asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// The job fails with a readable message (the default): no job runs
    /// without the exclusivity it asked for.
    Closed,
    /// The job runs with an empty visible list: no devices, but no outage
    /// of the cluster while cderd is down.
    Open,
}

/// Whether tasks are put into cderd's device cgroup (`confine`) where
/// SLURM gives them none (`task/cgroup` with `ConstrainDevices=yes`):
/// `required` (a task that cannot be confined does not start), `optional`
/// (the default: confine where cderd can, else the job runs with its
/// visibility variables only and slurmd logs it) or `off` (never; the
/// variables use absolute indices). The vocabulary is cder-model's, shared
/// with TORQUE's torque.toml.
pub use cder_model::Confine;

/// The parsed plugin arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginArgs {
    /// `socket=`: cderd's Unix socket.
    pub socket: PathBuf,
    /// `fail=`: what happens when cderd cannot serve the job.
    pub fail: FailMode,
    /// `confine=`: whether tasks go into cderd's device cgroup.
    pub confine: Confine,
    /// `mode=` was given: accepted for old plugstack.conf lines, no effect.
    pub legacy_mode: Option<String>,
    /// An old spelling of `confine=` was given (`auto`): read, and worth a
    /// warning that names the new word.
    pub deprecated_confine: Option<cder_model::DeprecatedConfine>,
    /// How long one call to cderd may take before it counts as unreachable.
    pub timeout: Duration,
    /// `config=`: the cder.toml whose `[registry]` vGPGPU jobs use
    /// (default /etc/cder/cder.toml; never `$CDER_CONFIG`, see
    /// [`PluginArgs::config_path`]).
    pub config: Option<PathBuf>,
}

impl Default for PluginArgs {
    fn default() -> Self {
        PluginArgs {
            socket: cder_model::DEFAULT_SOCKET.into(),
            fail: FailMode::Closed,
            confine: Confine::Optional,
            legacy_mode: None,
            deprecated_confine: None,
            timeout: Duration::from_secs(10),
            config: None,
        }
    }
}

/// A plugstack.conf argument the plugin does not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugstack.conf argument {arg:?}: {why}")]
pub struct ArgError {
    /// The argument as written.
    pub arg: String,
    /// What is wrong with it.
    pub why: String,
}

impl PluginArgs {
    /// The cder.toml to read: `config=` from plugstack.conf, else the fixed
    /// default. The plugin runs in srun and beside the job in slurmstepd,
    /// so no environment variable may choose the file.
    pub fn config_path(&self) -> PathBuf {
        self.config.clone().unwrap_or_else(|| cder_model::DEFAULT_CONFIG_PATH.into())
    }

    /// Parses `key=value` words; unknown keys and bad values are errors that
    /// name the argument, so a typo in plugstack.conf is not silently ignored.
    pub fn parse<S: AsRef<str>>(words: &[S]) -> Result<PluginArgs, ArgError> {
        let mut args = PluginArgs::default();
        for word in words {
            let word = word.as_ref();
            let bad = |why: &str| ArgError { arg: word.to_string(), why: why.to_string() };
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| bad("expected key=value (socket=, fail=, confine=, timeout=, config=)"))?;
            match key {
                "socket" if value.starts_with('/') => args.socket = value.into(),
                "socket" => return Err(bad("the socket must be an absolute path")),
                "config" if value.starts_with('/') => args.config = Some(value.into()),
                "config" => return Err(bad("the config must be an absolute path")),
                "fail" => {
                    args.fail = match value {
                        "closed" => FailMode::Closed,
                        "open" => FailMode::Open,
                        _ => return Err(bad("fail must be closed or open")),
                    }
                }
                "mode" => match value {
                    "managed" | "observe" => args.legacy_mode = Some(value.to_string()),
                    _ => return Err(bad("mode= has no effect any more (SLURM's GRES chooses the devices); remove it")),
                },
                "confine" => {
                    let (confine, deprecated) = Confine::read(value)
                        .map_err(|_| bad(&format!("confine must be {}", cder_model::CONFINE_WORDS)))?;
                    args.confine = confine;
                    args.deprecated_confine = deprecated;
                }
                "timeout" => match value.parse::<u64>() {
                    Ok(s) if s > 0 => args.timeout = Duration::from_secs(s),
                    _ => return Err(bad("timeout must be a whole number of seconds, at least 1")),
                },
                _ => return Err(bad("unknown argument (expected socket=, fail=, confine=, timeout=, config=)")),
            }
        }
        Ok(args)
    }
}

impl fmt::Display for FailMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailMode::Closed => "closed",
            FailMode::Open => "open",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_closed_and_confining() {
        let a = PluginArgs::parse::<&str>(&[]).unwrap();
        assert_eq!(a.fail, FailMode::Closed);
        assert_eq!(a.confine, Confine::Optional);
        assert_eq!(a.legacy_mode, None);
        assert_eq!(a.deprecated_confine, None);
        assert_eq!(a.socket, PathBuf::from("/run/cder/cderd.sock"));
    }

    #[test]
    fn parses_every_key() {
        let a =
            PluginArgs::parse(&["socket=/tmp/x.sock", "fail=open", "mode=observe", "timeout=3", "confine=required"])
                .unwrap();
        assert_eq!(a.socket, PathBuf::from("/tmp/x.sock"));
        assert_eq!(a.fail, FailMode::Open);
        assert_eq!(a.legacy_mode.as_deref(), Some("observe"));
        assert_eq!(a.confine, Confine::Required);
        assert_eq!(a.timeout, Duration::from_secs(3));
    }

    /// plugstack.conf lines of earlier releases (`confine=auto`) still load,
    /// as `optional`, with a warning that names the word to write.
    #[test]
    fn the_old_confine_word_is_read_with_a_warning() {
        let a = PluginArgs::parse(&["confine=auto"]).unwrap();
        assert_eq!(a.confine, Confine::Optional);
        let warning = a.deprecated_confine.expect("a deprecation").to_string();
        assert!(warning.contains("\"auto\"") && warning.contains("write \"optional\""), "{warning}");
        let a = PluginArgs::parse(&["confine=optional"]).unwrap();
        assert_eq!((a.confine, a.deprecated_confine), (Confine::Optional, None));
        let e = PluginArgs::parse(&["confine=best-effort"]).unwrap_err();
        assert!(e.why.contains("required, optional or off"), "{e}");
    }

    #[test]
    fn rejects_typos_naming_the_argument() {
        for bad in ["fail=opne", "mode=x", "confine=yes", "sockt=/a", "socket=rel", "verbose", "timeout=0"] {
            let e = PluginArgs::parse(&[bad]).unwrap_err();
            assert_eq!(e.arg, bad);
            assert!(e.to_string().contains(bad));
        }
    }
}
