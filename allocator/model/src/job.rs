//! Job identity: `<lrms>:<job id>`, e.g. `slurm:4242` or
//! `torque:17.ce.example.org`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The batch system a job belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lrms {
    /// SLURM (`slurm:4242`).
    Slurm,
    /// TORQUE/PBS (`torque:17.ce.example.org`).
    Torque,
    /// Jobs started by hand or by tests (`local:demo-1`).
    Local,
}

impl Lrms {
    /// The name in a job key (`slurm`).
    pub fn as_str(self) -> &'static str {
        match self {
            Lrms::Slurm => "slurm",
            Lrms::Torque => "torque",
            Lrms::Local => "local",
        }
    }
}

/// Longest job id accepted; TORQUE ids with long FQDNs stay well below it.
pub const MAX_JOB_ID_LEN: usize = 200;

/// A job's identity across cder. The id is restricted to the characters that
/// real SLURM and TORQUE ids use, so a key can never smuggle shell, SQL, LDAP
/// or path syntax into anything that logs or stores it.
///
/// ```
/// use cder_model::{JobKey, Lrms};
///
/// let key: JobKey = "torque:12.ce.example.org".parse().unwrap();
/// assert_eq!(key, JobKey::new(Lrms::Torque, "12.ce.example.org").unwrap());
/// assert_eq!(key.to_string(), "torque:12.ce.example.org");
/// // Shell syntax never gets into a key.
/// assert!("slurm:1;rm -rf /".parse::<JobKey>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobKey {
    lrms: Lrms,
    id: String,
}

/// Why a text is not a job key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JobKeyError {
    /// Not `<lrms>:<id>`.
    #[error("job key {0:?} is not of the form <lrms>:<job id> (e.g. slurm:4242)")]
    Shape(String),
    /// A batch system cder does not know.
    #[error("job key {0:?}: unknown batch system (expected slurm, torque or local)")]
    UnknownLrms(String),
    /// An id with characters no batch system uses.
    #[error("job key {0:?}: the job id may hold only letters, digits and . _ - [ ] (at most {MAX_JOB_ID_LEN})")]
    BadId(String),
}

impl JobKey {
    /// A key from its parts; the id is checked.
    pub fn new(lrms: Lrms, id: &str) -> Result<Self, JobKeyError> {
        let valid = !id.is_empty()
            && id.len() <= MAX_JOB_ID_LEN
            && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-[]".contains(&b));
        if !valid {
            return Err(JobKeyError::BadId(format!("{}:{id}", lrms.as_str())));
        }
        Ok(JobKey { lrms, id: id.to_string() })
    }

    /// The batch system.
    pub fn lrms(&self) -> Lrms {
        self.lrms
    }

    /// The batch system's own job id (`4242`, `17.ce.example.org`).
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.lrms.as_str(), self.id)
    }
}

impl FromStr for JobKey {
    type Err = JobKeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (lrms, id) = s.split_once(':').ok_or_else(|| JobKeyError::Shape(s.to_string()))?;
        let lrms = match lrms {
            "slurm" => Lrms::Slurm,
            "torque" => Lrms::Torque,
            "local" => Lrms::Local,
            _ => return Err(JobKeyError::UnknownLrms(s.to_string())),
        };
        JobKey::new(lrms, id)
    }
}

impl Serialize for JobKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for JobKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_real_ids() {
        let k: JobKey = "torque:17.ce.example.org".parse().unwrap();
        assert_eq!(k.lrms(), Lrms::Torque);
        assert_eq!(k.id(), "17.ce.example.org");
        assert_eq!(k.to_string(), "torque:17.ce.example.org");
        let array: JobKey = "torque:18[3].ce".parse().unwrap();
        assert_eq!(array.id(), "18[3].ce");
        assert_eq!("slurm:4242".parse::<JobKey>().unwrap().lrms(), Lrms::Slurm);
    }

    #[test]
    fn rejects_injection_and_bad_shapes() {
        for bad in ["slurm:1;rm -rf /", "slurm:1' OR 1=1", "slurm:", "slurm:a/b", "slurm:a b", "slurm:1)(uid=*"] {
            assert!(matches!(bad.parse::<JobKey>(), Err(JobKeyError::BadId(_))), "{bad}");
        }
        assert!(matches!("4242".parse::<JobKey>(), Err(JobKeyError::Shape(_))));
        assert!(matches!("lsf:1".parse::<JobKey>(), Err(JobKeyError::UnknownLrms(_))));
        let long = format!("slurm:{}", "9".repeat(MAX_JOB_ID_LEN + 1));
        assert!(long.parse::<JobKey>().is_err());
    }
}
