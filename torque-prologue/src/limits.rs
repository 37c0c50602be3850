//! pbs_mom's "list of requested resource limits": argument 5 of the
//! prologue, argument 6 of the epilogue, e.g.
//! `neednodes=1:ppn=2:gpus=2,nodes=1:ppn=2:gpus=2,walltime=01:00:00`.
//!
//! A job asks for devices in one of three ways, and this module finds the
//! count per node from any of them:
//!
//! * TORQUE's own node spec: `nodes=2:ppn=4:gpus=2` (per node);
//! * a generic resource: `gres=gpus:2` or `gres=gpgpu:2` (names configured);
//! * the mark cder's submit filter leaves in MAUI mode, where the device
//!   request itself (`-W x=GRES:gpus@2`) never reaches pbs_mom:
//!   `other=cder:gpgpu:2`.

use std::fmt;

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
    Nodes,
    Gres,
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
    #[error("{resource}: {value:?} is not a device count")]
    BadCount { resource: String, value: String },
    #[error("the job asks for {a_count} devices per node by {a} but {b_count} by {b}")]
    Contradiction { a: Source, a_count: u32, b: Source, b_count: u32 },
}

/// The parsed list, in its original order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceList {
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

/// The device count per node a job asks for on the node playing `role`,
/// or `None` when it asks for none. `gres_names` are the `gres=` names that
/// mean `cder_type`.
pub fn requested_devices(limits: &str, role: Role, cder_type: &str, gres_names: &[String]) -> Result<Option<u32>, LimitsError> {
    let list = ResourceList::parse(limits);
    let mut found: Vec<(Source, u32)> = Vec::new();

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
            found.push((Source::Nodes, n));
        }
    }
    if let Some(gres) = list.get("gres") {
        let mut total = None;
        for item in gres.split('+').filter(|i| !i.is_empty()) {
            let (name, n) = match item.split_once(':') {
                Some((name, n)) => (name, count("gres", n)?),
                None => (item, 1),
            };
            if gres_names.iter().any(|g| g == name) {
                total = Some(total.unwrap_or(0) + n);
            }
        }
        if let Some(n) = total {
            found.push((Source::Gres, n));
        }
    }
    if let Some(mark) = list.get(MARK_RESOURCE) {
        let fields: Vec<&str> = mark.split(':').collect();
        if fields.len() == 3 && fields[0] == MARK_PREFIX && fields[1] == cder_type {
            found.push((Source::Mark, count("other (cder mark)", fields[2])?));
        }
    }

    let Some(&(first, n)) = found.first() else { return Ok(None) };
    if let Some(&(other, m)) = found.iter().find(|(_, m)| *m != n) {
        return Err(LimitsError::Contradiction { a: first, a_count: n, b: other, b_count: m });
    }
    Ok((n > 0).then_some(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["gpus".into(), "gpgpu".into()]
    }

    fn ms(limits: &str) -> Result<Option<u32>, LimitsError> {
        requested_devices(limits, Role::MotherSuperior, "gpgpu", &names())
    }

    #[test]
    fn real_limit_strings() {
        // As TORQUE 4.2 passes them (docs example plus gpus).
        assert_eq!(ms("neednodes=1:ppn=2:gpus=2,nodes=1:ppn=2:gpus=2,walltime=01:00:00"), Ok(Some(2)));
        assert_eq!(ms("neednodes=node01,nodes=1,walltime=00:01:00"), Ok(None));
        assert_eq!(ms("walltime=00:01:00,gres=gpus:3"), Ok(Some(3)));
        assert_eq!(ms("gres=matlab:2+gpgpu:1,nodes=1:ppn=1"), Ok(Some(1)));
        assert_eq!(ms("gres=gpus"), Ok(Some(1)));
        assert_eq!(ms("nodes=1:ppn=4,other=cder:gpgpu:2,walltime=1:00:00"), Ok(Some(2)));
        assert_eq!(ms(""), Ok(None));
        // Someone else's use of `other` is not a request.
        assert_eq!(ms("other=fastscratch"), Ok(None));
        assert_eq!(ms("nodes=1:ppn=2:gpus=0"), Ok(None));
    }

    #[test]
    fn scheduler_rewritten_neednodes_is_a_fallback() {
        assert_eq!(ms("neednodes=wn07:ppn=2:gpus=1"), Ok(Some(1)));
        // `nodes` wins over the scheduler's copy.
        assert_eq!(ms("neednodes=wn07:ppn=2,nodes=1:ppn=2:gpus=2"), Ok(Some(2)));
    }

    #[test]
    fn multi_part_specs_by_role() {
        let spec = "nodes=1:ppn=4:gpus=2+2:ppn=1:gpus=1";
        assert_eq!(ms(spec), Ok(Some(2)));
        assert_eq!(requested_devices("nodes=1:ppn=1+1:ppn=1:gpus=3", Role::MotherSuperior, "gpgpu", &names()), Ok(None));
        assert_eq!(requested_devices("nodes=1:ppn=1+1:ppn=1:gpus=3", Role::Sister, "gpgpu", &names()), Ok(Some(3)));
        assert_eq!(requested_devices(spec, Role::Sister, "gpgpu", &names()), Ok(Some(2)));
    }

    #[test]
    fn bad_and_contradictory_requests() {
        assert!(matches!(ms("nodes=1:gpus=two"), Err(LimitsError::BadCount { .. })));
        assert!(matches!(ms("nodes=1:gpus=-1"), Err(LimitsError::BadCount { .. })));
        assert!(matches!(ms("gres=gpus:"), Err(LimitsError::BadCount { .. })));
        assert!(matches!(ms("nodes=1:gpus=99999999999"), Err(LimitsError::BadCount { .. })));
        let e = ms("nodes=1:gpus=2,gres=gpus:1").unwrap_err();
        assert_eq!(e.to_string(), "the job asks for 2 devices per node by nodes=…:gpus= but 1 by gres=");
        // Agreeing twice is fine.
        assert_eq!(ms("nodes=1:gpus=2,gres=gpus:2,other=cder:gpgpu:2"), Ok(Some(2)));
    }

    #[test]
    fn mark_round_trips() {
        let limits = format!("nodes=1,{MARK_RESOURCE}={}", mark_value("gpgpu", 4));
        assert_eq!(ms(&limits), Ok(Some(4)));
        // A mark for another type is not a gpgpu request.
        assert_eq!(ms(&format!("{MARK_RESOURCE}={}", mark_value("fpga", 1))), Ok(None));
    }
}
