//! pbs_mom's "list of requested resource limits": argument 5 of the
//! prologue, argument 6 of the epilogue, e.g.
//! `neednodes=1:ppn=2:gpus=2,nodes=1:ppn=2:gpus=2,walltime=01:00:00`.
//!
//! The batch system is the authority on how many devices a job has, so only
//! the form the site's scheduler counts is honoured (`[torque] directive`):
//!
//! * `native` (TORQUE schedules GPUs): TORQUE's own node spec,
//!   `nodes=2:ppn=4:gpus=2` (per node);
//! * `maui` (MAUI counts a consumable GRES): a generic resource
//!   `gres=gpus:2` / `gres=gpgpu:2` (names configured), and the mark cder's
//!   submit filter leaves, because the MAUI request itself
//!   (`-W x=GRES:gpus@2`) never reaches pbs_mom: `other=cder:gpgpu:2`.
//!
//! A form the scheduler does not count is ignored and reported: devices
//! TORQUE never counted would requeue every later `gpus=` job on the node.

use std::fmt;

use crate::settings::{Directive, TorqueSettings};

/// The resource that carries the submit filter's mark.
pub const MARK_RESOURCE: &str = "other";
/// The mark's first field: `other=cder:<type>:<count>`.
pub const MARK_PREFIX: &str = "cder";

/// The mark value for `count` devices of `cder_type`.
pub fn mark_value(cder_type: &str, count: u32) -> String {
    format!("{MARK_PREFIX}:{cder_type}:{count}")
}

/// Which mom is asking: the mother superior runs `prologue`, the sisters
/// `prologue.parallel`. A node spec with parts that ask for different
/// counts (`nodes=1:gpus=2+2:gpus=1`) means something else on each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The first node of the job: the first part of the node spec.
    MotherSuperior,
    /// Any other node. It cannot tell which part it was given, so a
    /// non-uniform spec yields the largest count (never fewer devices than
    /// the job asked for on its node).
    Sister,
}

/// Where a device count was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `nodes=…:gpus=N`: TORQUE's native GPU request.
    Nodes,
    /// `gres=<name>:N`, for a name in `gres_names`.
    Gres,
    /// `other=cder:<type>:<count>`, which the submit filter writes under
    /// `directive = "maui"`.
    Mark,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Nodes => "nodes=…:gpus=",
            Source::Gres => "gres=",
            Source::Mark => "the submit filter's mark (other=cder:…)",
        })
    }
}

/// A request that can never be understood: the job should be aborted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    /// A count that is not a number, or is out of range.
    #[error("{resource}: {value:?} is not a device count")]
    BadCount {
        /// The entry the count came from.
        resource: String,
        /// The text found where a count should be.
        value: String,
    },
    /// Two ways of asking disagree on the count.
    #[error("the job asks for {a_count} devices per node by {a} but {b_count} by {b}")]
    Contradiction {
        /// One way of asking.
        a: Source,
        /// The count `a` asks for.
        a_count: u32,
        /// The other way of asking.
        b: Source,
        /// The count `b` asks for.
        b_count: u32,
    },
}

/// The parsed list, in its original order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceList {
    /// The `(name, value)` pairs; an entry without `=` has an empty value.
    pub entries: Vec<(String, String)>,
}

impl ResourceList {
    /// Splits `name=value,name=value`. Node specs and times never hold a
    /// comma, so a plain split is what pbs_mom's own encoder reverses.
    pub fn parse(text: &str) -> ResourceList {
        let entries = text
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| match e.split_once('=') {
                Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
                None => (e.to_string(), String::new()),
            })
            .collect();
        ResourceList { entries }
    }

    /// The last value of `name` (a later entry overrides an earlier one).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

fn count(resource: &str, value: &str) -> Result<u32, LimitsError> {
    let bad = || LimitsError::BadCount { resource: resource.to_string(), value: value.to_string() };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    value.parse().map_err(|_| bad())
}

/// `gpus=N` per part of a node spec (`None` for a part without one).
pub fn node_spec_gpus(spec: &str) -> Result<Vec<Option<u32>>, LimitsError> {
    spec.split('+')
        .map(|part| {
            let mut found = None;
            for field in part.split(':') {
                if let Some(v) = field.strip_prefix("gpus=") {
                    found = Some(count("nodes gpus", v)?);
                }
            }
            Ok(found)
        })
        .collect()
}

/// What the resource limits ask of this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requested {
    /// Devices per node in the form the scheduler counts (`None`: none).
    pub count: Option<u32>,
    /// Forms found that the scheduler does not count, as written: they are
    /// not honoured, and the hook says so.
    pub ignored: Vec<String>,
}

/// The device count per node a job asks for on the node playing `role`,
/// in the form `settings.directive` makes the scheduler count.
pub fn requested_devices(limits: &str, role: Role, settings: &TorqueSettings) -> Result<Requested, LimitsError> {
    let list = ResourceList::parse(limits);
    let mut found: Vec<(Source, u32)> = Vec::new();
    let mut ignored = Vec::new();
    let counted = |source: Source| match settings.directive {
        Directive::Native => source == Source::Nodes,
        Directive::Maui => source != Source::Nodes,
    };

    // `neednodes` is the scheduler's copy, sometimes rewritten to host
    // names; `nodes` is what the user asked for.
    if let Some(spec) = list.get("nodes").or_else(|| list.get("neednodes")) {
        let parts = node_spec_gpus(spec)?;
        if parts.iter().any(Option::is_some) {
            let per_part: Vec<u32> = parts.iter().map(|p| p.unwrap_or(0)).collect();
            let n = match role {
                Role::MotherSuperior => per_part[0],
                Role::Sister => per_part.iter().copied().max().unwrap_or(0),
            };
            if counted(Source::Nodes) {
                found.push((Source::Nodes, n));
            } else if n > 0 {
                ignored.push(format!("nodes={spec}"));
            }
        }
    }
    if let Some(gres) = list.get("gres") {
        let mut total = None;
        for item in gres.split('+').filter(|i| !i.is_empty()) {
            let (name, n) = match item.split_once(':') {
                Some((name, n)) => (name, count("gres", n)?),
                None => (item, 1),
            };
            if settings.gres_names.iter().any(|g| g == name) {
                total = Some(total.unwrap_or(0) + n);
            }
        }
        if let Some(n) = total {
            if counted(Source::Gres) {
                found.push((Source::Gres, n));
            } else if n > 0 {
                ignored.push(format!("gres={gres}"));
            }
        }
    }
    if let Some(mark) = list.get(MARK_RESOURCE) {
        let fields: Vec<&str> = mark.split(':').collect();
        if fields.len() == 3 && fields[0] == MARK_PREFIX && fields[1] == settings.cder_type {
            let n = count("other (cder mark)", fields[2])?;
            if counted(Source::Mark) {
                found.push((Source::Mark, n));
            } else if n > 0 {
                ignored.push(format!("{MARK_RESOURCE}={mark}"));
            }
        }
    }

    let Some(&(first, n)) = found.first() else { return Ok(Requested { count: None, ignored }) };
    if let Some(&(other, m)) = found.iter().find(|(_, m)| *m != n) {
        return Err(LimitsError::Contradiction { a: first, a_count: n, b: other, b_count: m });
    }
    Ok(Requested { count: (n > 0).then_some(n), ignored })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maui() -> TorqueSettings {
        TorqueSettings { directive: Directive::Maui, ..TorqueSettings::default() }
    }

    fn with(limits: &str, role: Role, settings: &TorqueSettings) -> Result<Option<u32>, LimitsError> {
        requested_devices(limits, role, settings).map(|r| r.count)
    }

    /// Native TORQUE, mother superior.
    fn ms(limits: &str) -> Result<Option<u32>, LimitsError> {
        with(limits, Role::MotherSuperior, &TorqueSettings::default())
    }

    /// MAUI, mother superior.
    fn mm(limits: &str) -> Result<Option<u32>, LimitsError> {
        with(limits, Role::MotherSuperior, &maui())
    }

    #[test]
    fn real_limit_strings() {
        // As TORQUE 4.2 passes them (docs example plus gpus).
        assert_eq!(ms("neednodes=1:ppn=2:gpus=2,nodes=1:ppn=2:gpus=2,walltime=01:00:00"), Ok(Some(2)));
        assert_eq!(ms("neednodes=node01,nodes=1,walltime=00:01:00"), Ok(None));
        assert_eq!(mm("walltime=00:01:00,gres=gpus:3"), Ok(Some(3)));
        assert_eq!(mm("gres=matlab:2+gpgpu:1,nodes=1:ppn=1"), Ok(Some(1)));
        assert_eq!(mm("gres=gpus"), Ok(Some(1)));
        assert_eq!(mm("nodes=1:ppn=4,other=cder:gpgpu:2,walltime=1:00:00"), Ok(Some(2)));
        assert_eq!(ms(""), Ok(None));
        // Someone else's use of `other` is not a request.
        assert_eq!(mm("other=fastscratch"), Ok(None));
        assert_eq!(ms("nodes=1:ppn=2:gpus=0"), Ok(None));
    }

    #[test]
    fn only_the_form_the_scheduler_counts_is_honoured() {
        // Native TORQUE never counts a hand-written mark or gres=.
        let r = requested_devices("nodes=1:ppn=1,other=cder:gpgpu:4", Role::MotherSuperior, &TorqueSettings::default())
            .unwrap();
        assert_eq!(r, Requested { count: None, ignored: vec!["other=cder:gpgpu:4".into()] });
        let r = requested_devices("nodes=1:ppn=1:gpus=1,gres=gpus:3", Role::MotherSuperior, &TorqueSettings::default())
            .unwrap();
        assert_eq!(r, Requested { count: Some(1), ignored: vec!["gres=gpus:3".into()] });
        // MAUI counts its GRES, not TORQUE's gpus=.
        let r = requested_devices("nodes=1:ppn=1:gpus=2", Role::MotherSuperior, &maui()).unwrap();
        assert_eq!(r, Requested { count: None, ignored: vec!["nodes=1:ppn=1:gpus=2".into()] });
        // A site that says its MAUI does not count gres= turns it off.
        let no_gres = TorqueSettings { gres_names: vec![], ..maui() };
        assert_eq!(with("gres=gpus:2", Role::MotherSuperior, &no_gres), Ok(None));
    }

    #[test]
    fn scheduler_rewritten_neednodes_is_a_fallback() {
        assert_eq!(ms("neednodes=wn07:ppn=2:gpus=1"), Ok(Some(1)));
        // `nodes` wins over the scheduler's copy.
        assert_eq!(ms("neednodes=wn07:ppn=2,nodes=1:ppn=2:gpus=2"), Ok(Some(2)));
    }

    #[test]
    fn multi_part_specs_by_role() {
        let native = TorqueSettings::default();
        let spec = "nodes=1:ppn=4:gpus=2+2:ppn=1:gpus=1";
        assert_eq!(ms(spec), Ok(Some(2)));
        assert_eq!(with("nodes=1:ppn=1+1:ppn=1:gpus=3", Role::MotherSuperior, &native), Ok(None));
        assert_eq!(with("nodes=1:ppn=1+1:ppn=1:gpus=3", Role::Sister, &native), Ok(Some(3)));
        assert_eq!(with(spec, Role::Sister, &native), Ok(Some(2)));
    }

    #[test]
    fn bad_and_contradictory_requests() {
        assert!(matches!(ms("nodes=1:gpus=two"), Err(LimitsError::BadCount { .. })));
        assert!(matches!(ms("nodes=1:gpus=-1"), Err(LimitsError::BadCount { .. })));
        assert!(matches!(mm("gres=gpus:"), Err(LimitsError::BadCount { .. })));
        assert!(matches!(ms("nodes=1:gpus=99999999999"), Err(LimitsError::BadCount { .. })));
        let e = mm("gres=gpus:2,other=cder:gpgpu:1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the job asks for 2 devices per node by gres= but 1 by the submit filter's mark (other=cder:…)"
        );
        // Agreeing twice is fine.
        assert_eq!(mm("nodes=1,gres=gpus:2,other=cder:gpgpu:2"), Ok(Some(2)));
    }

    #[test]
    fn mark_round_trips() {
        let limits = format!("nodes=1,{MARK_RESOURCE}={}", mark_value("gpgpu", 4));
        assert_eq!(mm(&limits), Ok(Some(4)));
        // A mark for another type is not a gpgpu request.
        assert_eq!(mm(&format!("{MARK_RESOURCE}={}", mark_value("fpga", 1))), Ok(None));
    }
}
