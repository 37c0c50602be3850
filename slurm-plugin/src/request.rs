//! What a job asked for, in cder's terms, and the messages users see when
//! the request is malformed.
//!
//! A request reaches the controller two ways: as SPANK options
//! (`--gpgpu-per-node=N`, `--cder=TYPE[:GRESTYPE]:N`, `--gpgpu-min-memory=MB`), which
//! the plugin copies into the job-control environment on the submit host
//! (the controller sees `CDER_GPGPU_PER_NODE=2` in `spank_job_env`, the
//! prolog and epilog `SPANK_CDER_GPGPU_PER_NODE=2`), or as the JDL keys a
//! CE puts into the job's environment (`GPGPUPerNode=2`). On the node the
//! plugin sees the option values through its callbacks and the JDL keys in
//! the step's environment.

use std::collections::BTreeMap;
use std::fmt;

use cder_request::keys::{GPGPU_PER_NODE, GPGPU_SHARES_PER_NODE};

/// The CDER type that `--gpgpu-per-node` and `GPGPUPerNode` ask for.
pub const GPGPU: &str = cder_request::GPGPU;
/// What `--gpgpu-shares-per-node` and `GPGPUSharesPerNode` ask for: shares
/// of one GPU, SLURM's `gres/shard`.
pub const GPGPU_SHARES: &str = cder_request::GPGPU_SHARES;
/// Job-control variable for `--gpgpu-shares-per-node`.
pub const CONTROL_GPGPU_SHARES_PER_NODE: &str = "CDER_GPGPU_SHARES_PER_NODE";
/// Job-control variable (before SLURM's `SPANK_` prefix) for `--gpgpu-per-node`.
pub const CONTROL_GPGPU_PER_NODE: &str = "CDER_GPGPU_PER_NODE";
/// Job-control variable for `--cder`.
pub const CONTROL_CDER: &str = "CDER_REQUEST";
/// Job-control variable for `--gpgpu-min-memory`.
pub const CONTROL_GPGPU_MIN_MEMORY: &str = "CDER_GPGPU_MIN_MEMORY";
/// The prefix SLURM puts before job-control variables.
pub const CONTROL_PREFIX: &str = "SPANK_";
/// The largest count accepted from anyone (one bound for every door).
pub const MAX_COUNT: u32 = cder_request::MAX_COUNT;

/// The SPANK option names, as users type them.
pub const OPT_GPGPU_PER_NODE: &str = "gpgpu-per-node";
/// `--cder=TYPE[:GRESTYPE]:N[,…]`; `GRESTYPE` names a GRES type of the
/// nodes, e.g. a MIG profile (`gpgpu:1g.10gb:2`).
pub const OPT_CDER: &str = "cder";
/// `--gpgpu-min-memory=MB`.
pub const OPT_GPGPU_MIN_MEMORY: &str = "gpgpu-min-memory";
/// `--gpgpu-shares-per-node=N`.
pub const OPT_GPGPU_SHARES_PER_NODE: &str = "gpgpu-shares-per-node";

/// Where a value came from, for the message a user sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A SPANK option (`--gpgpu-per-node`).
    Option(&'static str),
    /// A JDL key in the job's environment (`GPGPUPerNode`).
    JdlKey(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Option(name) => write!(f, "--{name}"),
            Source::JdlKey(key) => write!(f, "{key}"),
        }
    }
}

/// One raw value and its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sourced {
    /// The text as given.
    pub value: String,
    /// Where it was given.
    pub source: Source,
}

/// The request as typed, before validation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawRequest {
    /// `--gpgpu-per-node` or `GPGPUPerNode`.
    pub gpgpu_per_node: Option<Sourced>,
    /// `--cder`.
    pub cder: Option<Sourced>,
    /// `--gpgpu-min-memory`.
    pub gpgpu_min_memory: Option<Sourced>,
    /// `--gpgpu-shares-per-node` or `GPGPUSharesPerNode`.
    pub gpgpu_shares_per_node: Option<Sourced>,
}

/// Why a request is refused. The text is what `sbatch` prints.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A count that is not a whole number.
    #[error("cder: {origin}={value}: not a whole number of devices")]
    NotANumber {
        /// Where the value was given.
        origin: Source,
        /// The value as given.
        value: String,
    },
    /// A count below 1.
    #[error("cder: {origin}={value}: the count must be at least 1")]
    NotPositive {
        /// Where the value was given.
        origin: Source,
        /// The value as given.
        value: String,
    },
    /// A count above [`MAX_COUNT`].
    #[error("cder: {origin}={value}: at most {MAX_COUNT} devices may be asked for")]
    Huge {
        /// Where the value was given.
        origin: Source,
        /// The value as given.
        value: String,
    },
    /// A `--cder` value not of the form `TYPE[:GRESTYPE]:N[,…]`, or with a
    /// type name cderd would refuse.
    #[error("cder: {origin}={value}: expected TYPE:N or TYPE:GRESTYPE:N, e.g. gpgpu:2 or gpgpu:1g.10gb:2 (several as gpgpu:2,fpga:1)")]
    Shape {
        /// Where the value was given.
        origin: Source,
        /// The value as given.
        value: String,
    },
    /// A GRES type (`--cder=gpgpu:GRESTYPE:N`) SLURM could not take.
    #[error("cder: {origin}={value}: {why}")]
    BadGresType {
        /// Where the value was given.
        origin: Source,
        /// The value as given.
        value: String,
        /// What is wrong with it (the shared rule's message).
        why: String,
    },
    /// A `--gpgpu-min-memory` outside 1 to [`cder_request::MAX_GPU_MEMORY_MIB`] megabytes.
    #[error("cder: {origin}={value}: {why}")]
    BadMemory {
        /// Where the value was given.
        origin: Source,
        /// The value as given.
        value: String,
        /// What is wrong with it.
        why: cder_request::MemoryError,
    },
    /// Two ways of asking give different counts for one type.
    #[error("cder: {first} and {second} ask for different numbers of {cder_type} devices")]
    Conflict {
        /// The first request, as the user typed it (`--gpgpu-per-node=2`).
        first: String,
        /// The contradicting one.
        second: String,
        /// The type both ask for.
        cder_type: String,
    },
    /// A type no node of the cluster has.
    #[error("cder: {origin}: unknown CDER type {cder_type:?} (this cluster has: {known})")]
    UnknownType {
        /// Where the type was given.
        origin: Source,
        /// The type asked for.
        cder_type: String,
        /// The types the cluster has, for the message.
        known: String,
    },
    /// A GRES type (e.g. a MIG profile) no node declares for that type.
    #[error("cder: {given}: no node has {cder_type} devices of GRES type {gres_type:?} (this cluster has: {known})")]
    UnknownGresType {
        /// The request as the user typed it.
        given: String,
        /// The CDER type asked for.
        cder_type: String,
        /// The GRES type asked for.
        gres_type: String,
        /// The GRES types the nodes declare for it, for the message.
        known: String,
    },
    /// More devices of one GRES type per node than the largest node has.
    #[error(
        "cder: {given}: more than any node has (at most {max} {cder_type} devices of GRES type {gres_type} per node)"
    )]
    TooManyOfGresType {
        /// The request as the user typed it.
        given: String,
        /// The CDER type asked for.
        cder_type: String,
        /// The GRES type asked for.
        gres_type: String,
        /// The count asked for.
        count: u32,
        /// The largest count of that GRES type any node has.
        max: u64,
    },
    /// Whole GPGPUs and shares of one in the same job.
    #[error("cder: {whole} and {shares}: a job asks for whole GPGPUs or for shares of one, not both")]
    SharesAndWhole {
        /// The whole-GPU request as given.
        whole: String,
        /// The share request as given.
        shares: String,
    },
    /// More shares than one GPU is offered as.
    #[error("cder: {given}: more shares than any GPU is offered as (at most {max}; SLURM takes a job's shards on a node from one GPU)")]
    TooManyShares {
        /// The request as the user typed it.
        given: String,
        /// The most shares one GPU is offered as.
        max: u64,
    },
    /// More devices per node than the largest node has.
    #[error("cder: {given}: more than any node has (at most {max} {cder_type} devices per node)")]
    TooMany {
        /// The request as the user typed it.
        given: String,
        /// The type asked for.
        cder_type: String,
        /// The count asked for.
        count: u32,
        /// The largest count any node has.
        max: u64,
    },
}

/// A validated request: devices per node by CDER type, and constraints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// Count per CDER type, each at least 1.
    pub counts: BTreeMap<String, u32>,
    /// Where each count came from (for messages).
    pub sources: BTreeMap<String, Source>,
    /// Counts by GRES type, for the CDER types whose request named them
    /// (`--cder=gpgpu:1g.10gb:2` → `gpgpu` → `1g.10gb` → 2); their sum is
    /// the type's entry in `counts`.
    pub gres_types: BTreeMap<String, BTreeMap<String, u32>>,
    /// Only GPGPUs with at least this much memory.
    pub gpgpu_min_memory_mib: Option<u64>,
}

impl Request {
    /// True when the job asked for no device at all.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

/// Looks `name` up in a `KEY=VALUE` list (an environment array).
pub fn env_lookup<'a, S: AsRef<str>>(vars: &'a [S], name: &str) -> Option<&'a str> {
    vars.iter().rev().find_map(|kv| kv.as_ref().strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
}

impl RawRequest {
    /// The options as the controller sees them in `spank_job_env`
    /// (`CDER_GPGPU_PER_NODE=2`, …; `SPANK_CDER_…` in the prolog).
    pub fn from_control_env<S: AsRef<str>>(spank_job_env: &[S]) -> RawRequest {
        // slurmctld holds them unprefixed; the prolog/epilog see them with
        // SLURM's `SPANK_` prefix.
        let get = |name: &str| {
            env_lookup(spank_job_env, name)
                .or_else(|| env_lookup(spank_job_env, &format!("{CONTROL_PREFIX}{name}")))
                .map(str::to_string)
        };
        RawRequest {
            gpgpu_per_node: get(CONTROL_GPGPU_PER_NODE)
                .map(|value| Sourced { value, source: Source::Option(OPT_GPGPU_PER_NODE) }),
            cder: get(CONTROL_CDER).map(|value| Sourced { value, source: Source::Option(OPT_CDER) }),
            gpgpu_min_memory: get(CONTROL_GPGPU_MIN_MEMORY)
                .map(|value| Sourced { value, source: Source::Option(OPT_GPGPU_MIN_MEMORY) }),
            gpgpu_shares_per_node: get(CONTROL_GPGPU_SHARES_PER_NODE)
                .map(|value| Sourced { value, source: Source::Option(OPT_GPGPU_SHARES_PER_NODE) }),
        }
    }

    /// The JDL keys a CE puts into the job's environment (`GPGPUPerNode`).
    pub fn from_jdl_env<S: AsRef<str>>(environment: &[S]) -> RawRequest {
        RawRequest {
            gpgpu_per_node: env_lookup(environment, GPGPU_PER_NODE)
                .map(|v| Sourced { value: v.to_string(), source: Source::JdlKey(GPGPU_PER_NODE) }),
            gpgpu_shares_per_node: env_lookup(environment, GPGPU_SHARES_PER_NODE)
                .map(|v| Sourced { value: v.to_string(), source: Source::JdlKey(GPGPU_SHARES_PER_NODE) }),
            ..RawRequest::default()
        }
    }

    /// Options win over JDL keys, field by field: a user's explicit option
    /// is the more specific statement.
    pub fn or(self, fallback: RawRequest) -> RawRequest {
        RawRequest {
            gpgpu_per_node: self.gpgpu_per_node.or(fallback.gpgpu_per_node),
            cder: self.cder.or(fallback.cder),
            gpgpu_min_memory: self.gpgpu_min_memory.or(fallback.gpgpu_min_memory),
            gpgpu_shares_per_node: self.gpgpu_shares_per_node.or(fallback.gpgpu_shares_per_node),
        }
    }

    /// True when nothing at all was given.
    pub fn is_empty(&self) -> bool {
        self.gpgpu_per_node.is_none()
            && self.cder.is_none()
            && self.gpgpu_min_memory.is_none()
            && self.gpgpu_shares_per_node.is_none()
    }

    /// Checks the syntax and ranges of every value.
    pub fn parse(&self) -> Result<Request, RequestError> {
        let mut req = Request::default();
        if let Some(s) = &self.gpgpu_per_node {
            let n = parse_count(&s.value, &s.source, &s.value)?;
            req.counts.insert(GPGPU.into(), n);
            req.sources.insert(GPGPU.into(), s.source.clone());
        }
        if let Some(s) = &self.cder {
            let shape = || RequestError::Shape { origin: s.source.clone(), value: s.value.clone() };
            let whole = format!("--{OPT_CDER}={}", s.value);
            let mut typed: BTreeMap<String, BTreeMap<String, u32>> = BTreeMap::new();
            for item in s.value.split(',') {
                let parts: Vec<&str> = item.split(':').map(str::trim).collect();
                let (ty, gres_type, n) = match parts.as_slice() {
                    [ty, n] => (*ty, None, *n),
                    [ty, g, n] => (*ty, Some(*g), *n),
                    _ => return Err(shape()),
                };
                // The rule cderd applies too, so the controller never accepts a name the node refuses.
                if cder_request::check_type_name(ty).is_err() {
                    return Err(shape());
                }
                let n = parse_count(n, &s.source, &s.value)?;
                if let Some(g) = gres_type {
                    cder_request::lrms::check_gres_type(g).map_err(|e| RequestError::BadGresType {
                        origin: s.source.clone(),
                        value: s.value.clone(),
                        why: e.to_string(),
                    })?;
                    let slot = typed.entry(ty.to_string()).or_default();
                    match slot.get(g) {
                        Some(&old) if old != n => {
                            return Err(RequestError::Conflict {
                                first: whole.clone(),
                                second: whole,
                                cder_type: format!("{ty} {g}"),
                            });
                        }
                        _ => {
                            slot.insert(g.to_string(), n);
                        }
                    }
                    continue;
                }
                match req.counts.get(ty) {
                    Some(&old) if old != n => {
                        let first = match &req.sources[ty] {
                            Source::Option(o) if *o == OPT_CDER => whole.clone(),
                            other => format!("{other}={old}"),
                        };
                        return Err(RequestError::Conflict { first, second: whole, cder_type: ty.into() });
                    }
                    _ => {
                        req.counts.insert(ty.into(), n);
                        req.sources.entry(ty.into()).or_insert_with(|| s.source.clone());
                    }
                }
            }
            // A type asked for by GRES type: the sum is its count, which must
            // agree with an untyped count of the same type.
            for (ty, by_gres_type) in typed {
                let total: u64 = by_gres_type.values().map(|&n| u64::from(n)).sum();
                if total > u64::from(MAX_COUNT) {
                    return Err(RequestError::Huge { origin: s.source.clone(), value: s.value.clone() });
                }
                let total = total as u32;
                if let Some(&old) = req.counts.get(&ty) {
                    if old != total {
                        let first = match &req.sources[&ty] {
                            Source::Option(o) if *o == OPT_CDER => whole.clone(),
                            other => format!("{other}={old}"),
                        };
                        return Err(RequestError::Conflict { first, second: whole, cder_type: ty });
                    }
                }
                req.counts.insert(ty.clone(), total);
                req.sources.entry(ty.clone()).or_insert_with(|| s.source.clone());
                req.gres_types.insert(ty, by_gres_type);
            }
        }
        if let Some(s) = &self.gpgpu_shares_per_node {
            let n = parse_count(&s.value, &s.source, &s.value)?;
            match req.counts.get(GPGPU_SHARES) {
                Some(&old) if old != n => {
                    return Err(RequestError::Conflict {
                        first: format!("{}={old}", req.sources[GPGPU_SHARES]),
                        second: format!("{}={}", s.source, s.value),
                        cder_type: GPGPU_SHARES.into(),
                    })
                }
                _ => {
                    req.counts.insert(GPGPU_SHARES.into(), n);
                    req.sources.insert(GPGPU_SHARES.into(), s.source.clone());
                }
            }
        }
        // One GPU is offered whole or as shares: a job takes it one way.
        if let (Some(&w), Some(&n)) = (req.counts.get(GPGPU), req.counts.get(GPGPU_SHARES)) {
            return Err(RequestError::SharesAndWhole {
                whole: format!("{}={w}", req.sources[GPGPU]),
                shares: format!("{}={n}", req.sources[GPGPU_SHARES]),
            });
        }
        if let Some(s) = &self.gpgpu_min_memory {
            let mb = cder_request::parse_memory_mib(&s.value).map_err(|why| RequestError::BadMemory {
                origin: s.source.clone(),
                value: s.value.clone(),
                why,
            })?;
            req.gpgpu_min_memory_mib = Some(u64::from(mb));
        }
        Ok(req)
    }
}

/// The one count rule (cder_request), with the messages sbatch prints.
fn parse_count(text: &str, source: &Source, whole: &str) -> Result<u32, RequestError> {
    let (origin, value) = (source.clone(), whole.to_string());
    cder_request::parse_count(text).map_err(|e| match e {
        cder_request::CountError::NotANumber => RequestError::NotANumber { origin, value },
        cder_request::CountError::NotPositive => RequestError::NotPositive { origin, value },
        cder_request::CountError::TooLarge => RequestError::Huge { origin, value },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opt(v: &str) -> RawRequest {
        RawRequest {
            gpgpu_per_node: Some(Sourced { value: v.into(), source: Source::Option(OPT_GPGPU_PER_NODE) }),
            ..Default::default()
        }
    }

    #[test]
    fn counts_must_be_positive_integers() {
        assert_eq!(opt("2").parse().unwrap().counts[GPGPU], 2);
        assert_eq!(opt(" 3 ").parse().unwrap().counts[GPGPU], 3);
        let e = opt("abc").parse().unwrap_err();
        assert_eq!(e.to_string(), "cder: --gpgpu-per-node=abc: not a whole number of devices");
        assert!(matches!(opt("0").parse(), Err(RequestError::NotPositive { .. })));
        assert!(matches!(opt("-1").parse(), Err(RequestError::NotPositive { .. })));
        assert!(matches!(opt("2.5").parse(), Err(RequestError::NotANumber { .. })));
        assert!(matches!(opt("").parse(), Err(RequestError::NotANumber { .. })));
        assert!(matches!(opt("99999999999").parse(), Err(RequestError::Huge { .. })));
    }

    #[test]
    fn shares_are_a_count_of_their_own_never_beside_whole_gpus() {
        let raw = RawRequest::from_jdl_env(&["GPGPUSharesPerNode=2"]);
        let req = raw.parse().unwrap();
        assert_eq!(req.counts[GPGPU_SHARES], 2);
        assert_eq!(req.sources[GPGPU_SHARES], Source::JdlKey("GPGPUSharesPerNode"));
        let opt = RawRequest::from_control_env(&["CDER_GPGPU_SHARES_PER_NODE=3"]);
        assert_eq!(opt.parse().unwrap().counts[GPGPU_SHARES], 3);
        let cder = RawRequest::from_control_env(&["CDER_REQUEST=gpgpu-shares:1"]).parse().unwrap();
        assert_eq!(cder.counts[GPGPU_SHARES], 1);
        let both = RawRequest::from_control_env(&["CDER_GPGPU_SHARES_PER_NODE=1", "CDER_GPGPU_PER_NODE=1"]);
        let e = both.parse().unwrap_err().to_string();
        assert!(e.contains("--gpgpu-per-node=1 and --gpgpu-shares-per-node=1") && e.contains("not both"), "{e}");
        let e = RawRequest::from_jdl_env(&["GPGPUSharesPerNode=0"]).parse().unwrap_err().to_string();
        assert!(e.contains("GPGPUSharesPerNode=0: the count must be at least 1"), "{e}");
    }

    #[test]
    fn control_env_and_jdl_keys() {
        let spank = ["CDER_GPGPU_PER_NODE=2", "SPANK_CDER_GPGPU_MIN_MEMORY=4096", "OTHER=1"];
        let env = ["PATH=/bin", "GPGPUPerNode=1"];
        let raw = RawRequest::from_control_env(&spank).or(RawRequest::from_jdl_env(&env));
        let req = raw.parse().unwrap();
        assert_eq!(req.counts[GPGPU], 2, "the option wins over the JDL key");
        assert_eq!(req.gpgpu_min_memory_mib, Some(4096));
        let jdl = RawRequest::from_control_env::<&str>(&[]).or(RawRequest::from_jdl_env(&env)).parse().unwrap();
        assert_eq!(jdl.counts[GPGPU], 1);
        assert_eq!(jdl.sources[GPGPU], Source::JdlKey(GPGPU_PER_NODE));
        let e = RawRequest::from_jdl_env(&["GPGPUPerNode=two"]).parse().unwrap_err();
        assert_eq!(e.to_string(), "cder: GPGPUPerNode=two: not a whole number of devices");
        assert!(RawRequest::from_jdl_env(&["GPGPUPerNodeX=2"]).is_empty());
    }

    #[test]
    fn cder_option_lists_types() {
        let raw = RawRequest {
            cder: Some(Sourced { value: "gpgpu:2,fpga:1".into(), source: Source::Option(OPT_CDER) }),
            ..Default::default()
        };
        let req = raw.parse().unwrap();
        assert_eq!(req.counts.len(), 2);
        assert_eq!(req.counts["fpga"], 1);
        for bad in ["gpgpu", ":2", "GPU:1", "gpgpu:x", "a b:1"] {
            let raw = RawRequest {
                cder: Some(Sourced { value: bad.into(), source: Source::Option(OPT_CDER) }),
                ..Default::default()
            };
            assert!(raw.parse().is_err(), "{bad}");
        }
        let both = RawRequest {
            cder: Some(Sourced { value: "gpgpu:3".into(), source: Source::Option(OPT_CDER) }),
            ..opt("2")
        };
        let e = both.parse().unwrap_err();
        assert!(matches!(e, RequestError::Conflict { .. }), "{e}");
        assert!(e.to_string().contains("--gpgpu-per-node=2"), "{e}");
        let same = RawRequest {
            cder: Some(Sourced { value: "gpgpu:2".into(), source: Source::Option(OPT_CDER) }),
            ..opt("2")
        };
        assert_eq!(same.parse().unwrap().counts[GPGPU], 2);
    }

    fn cder(v: &str) -> RawRequest {
        RawRequest { cder: Some(Sourced { value: v.into(), source: Source::Option(OPT_CDER) }), ..Default::default() }
    }

    /// `--cder=TYPE:GRESTYPE:N` names a GRES type (a MIG profile): the
    /// counts by GRES type sum to the type's count.
    #[test]
    fn cder_option_names_gres_types() {
        let req = cder("gpgpu:1g.10gb:2,gpgpu:2g.20gb:1").parse().unwrap();
        assert_eq!(req.counts[GPGPU], 3);
        assert_eq!(req.gres_types[GPGPU]["1g.10gb"], 2);
        assert_eq!(req.gres_types[GPGPU]["2g.20gb"], 1);
        assert!(cder("gpgpu:2").parse().unwrap().gres_types.is_empty());
        // The untyped count of the same type must agree with the sum.
        let both = RawRequest { cder: cder("gpgpu:1g.10gb:2").cder, ..opt("2") };
        assert_eq!(both.parse().unwrap().counts[GPGPU], 2);
        let e = RawRequest { cder: cder("gpgpu:1g.10gb:2").cder, ..opt("3") }.parse().unwrap_err();
        assert!(matches!(e, RequestError::Conflict { .. }), "{e}");
        assert!(
            e.to_string().contains("--gpgpu-per-node=3") && e.to_string().contains("--cder=gpgpu:1g.10gb:2"),
            "{e}"
        );
        let e = cder("gpgpu:1g.10gb:1,gpgpu:1g.10gb:2").parse().unwrap_err();
        assert!(matches!(e, RequestError::Conflict { .. }), "{e}");
        let e = cder("gpgpu:1g 10gb:1").parse().unwrap_err();
        assert!(e.to_string().contains("is not a GRES type name"), "{e}");
        for bad in ["gpgpu:1g.10gb", "gpgpu:a:b:1", "gpgpu::1", "GPU:1g.10gb:1", "gpgpu:1g.10gb:0", "gpgpu:.x:1"] {
            assert!(cder(bad).parse().is_err(), "{bad}");
        }
        let e = cder("gpgpu:a:4000,gpgpu:b:4000").parse().unwrap_err();
        assert!(matches!(e, RequestError::Huge { .. }), "{e}");
    }

    #[test]
    fn memory_must_be_positive() {
        let mem = |v: &str| RawRequest {
            gpgpu_min_memory: Some(Sourced { value: v.into(), source: Source::Option(OPT_GPGPU_MIN_MEMORY) }),
            ..Default::default()
        };
        assert!(matches!(mem("0").parse(), Err(RequestError::BadMemory { .. })));
        assert_eq!(
            mem("0").parse().unwrap_err().to_string(),
            "cder: --gpgpu-min-memory=0: the memory must be at least 1 MB"
        );
        assert_eq!(
            mem("lots").parse().unwrap_err().to_string(),
            "cder: --gpgpu-min-memory=lots: not a whole number of megabytes"
        );
        // The shared bound: no GPU has more than 16 TiB.
        let e = mem("99999999999").parse().unwrap_err();
        assert!(matches!(e, RequestError::BadMemory { why: cder_request::MemoryError::TooLarge, .. }), "{e}");
        assert_eq!(mem("16384").parse().unwrap().gpgpu_min_memory_mib, Some(16384));
    }
}
