//! The confinement policy: whether a job's processes go into cderd's device
//! cgroup (`confine`), one vocabulary for SLURM's plugstack.conf
//! (`confine=`) and TORQUE's torque.toml (`confine =`).
//!
//! The words are `required`, `optional` and `off`: plugstack.conf, where a
//! SLURM admin writes `confine=`, already says `required` or `optional`
//! for each plugin with the same meaning — fail without it, or carry on
//! without it. Earlier releases spelled `optional` as `auto` (SPANK) and
//! `best_effort` (TORQUE); those are still read, with a warning that names
//! the new word.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

/// Whether a job holding devices must run inside its device cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confine {
    /// A job (or task) that cannot be confined does not start: fail closed.
    Required,
    /// Confine where cderd can; where it cannot, the job runs with its
    /// visibility variables only, and the batch system's log says so.
    Optional,
    /// Never confine: another mechanism enforces (SLURM's or TORQUE's own
    /// device cgroups, cderd's device-file modes).
    Off,
}

/// The words [`Confine`] reads, for messages.
pub const CONFINE_WORDS: &str = "required, optional or off";

/// An old spelling of a [`Confine`] word, read as the word it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeprecatedConfine {
    /// The spelling as written (`auto`, `best_effort`).
    pub old: &'static str,
    /// What it means now.
    pub now: Confine,
}

impl fmt::Display for DeprecatedConfine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "confine {:?} is deprecated: write {:?} (the same policy)", self.old, self.now.as_str())
    }
}

/// A word that is no [`Confine`] value, old or new.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("confine {0:?}: expected {CONFINE_WORDS}")]
pub struct UnknownConfine(pub String);

impl Confine {
    /// The word as written now.
    pub fn as_str(self) -> &'static str {
        match self {
            Confine::Required => "required",
            Confine::Optional => "optional",
            Confine::Off => "off",
        }
    }

    /// Reads `word`: a current word, or an old spelling with what to tell
    /// the admin about it.
    pub fn read(word: &str) -> Result<(Confine, Option<DeprecatedConfine>), UnknownConfine> {
        let old = |old: &'static str| Ok((Confine::Optional, Some(DeprecatedConfine { old, now: Confine::Optional })));
        match word {
            "required" => Ok((Confine::Required, None)),
            "optional" => Ok((Confine::Optional, None)),
            "off" => Ok((Confine::Off, None)),
            // plugstack.conf's word in earlier releases.
            "auto" => old("auto"),
            // torque.toml's word in earlier releases.
            "best_effort" => old("best_effort"),
            _ => Err(UnknownConfine(word.to_string())),
        }
    }
}

impl fmt::Display for Confine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Old spellings are read too; [`Confine::read`] says which were old.
impl FromStr for Confine {
    type Err = UnknownConfine;
    fn from_str(word: &str) -> Result<Confine, UnknownConfine> {
        Confine::read(word).map(|(confine, _)| confine)
    }
}

impl<'de> Deserialize<'de> for Confine {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Confine, D::Error> {
        let word = String::deserialize(deserializer)?;
        word.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_and_their_old_spellings() {
        for confine in [Confine::Required, Confine::Optional, Confine::Off] {
            assert_eq!(Confine::read(confine.as_str()), Ok((confine, None)));
            assert_eq!(confine.to_string().parse::<Confine>(), Ok(confine));
        }
        for old in ["auto", "best_effort"] {
            let (confine, deprecated) = Confine::read(old).unwrap();
            assert_eq!(confine, Confine::Optional);
            let warning = deprecated.unwrap().to_string();
            assert!(warning.contains(old) && warning.contains("\"optional\""), "{warning}");
        }
        let e = Confine::read("Best-Effort").unwrap_err();
        assert_eq!(e.to_string(), "confine \"Best-Effort\": expected required, optional or off");
    }
}
