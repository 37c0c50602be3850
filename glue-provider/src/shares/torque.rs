//! Per-VO shares from TORQUE:
//!
//! * `qstat -Qf`: each queue's `acl_group_enable` / `acl_groups`,
//!   `acl_user_enable` / `acl_users` (who may submit), `enabled` / `started`
//!   (serving state) and `resources_default.neednodes` (the node properties
//!   that pick its nodes; without it, every node);
//! * `pbsnodes -x`: each node's GPUs and `<properties>` (as for the EE);
//! * `qstat -f -1`: the running jobs' `queue`, `euser`, `egroup`,
//!   `Account_Name` and `exec_gpus` (`wn01-gpu/0+wn01-gpu/1`: two GPUs).
//!
//! TORQUE has no per-queue GPU limit: the shares differ by which nodes a
//! queue runs on, who it admits and what the VO's jobs hold.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::{ProviderConfig, VoConfig};
use crate::error::ProviderError;
use crate::shares::{job_is_vos, queue_devices, share_devices, share_id, VoShare};
use crate::site::NodeGroup;
use crate::sources::walk::node_counts;
use crate::sources::{parse_pbsnodes, run_command, TorqueNode};

/// Reads per-VO shares from TORQUE.
#[derive(Debug, Clone)]
pub struct TorqueShares {
    /// The `qstat` program.
    pub qstat: PathBuf,
    /// The `pbsnodes` program.
    pub pbsnodes: PathBuf,
    /// How long each command may run.
    pub timeout: Duration,
}

/// One queue of `qstat -Qf`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Queue {
    /// `Queue: <name>`.
    pub name: String,
    /// Every `key = value` of the queue (continuation lines joined).
    pub attributes: BTreeMap<String, String>,
}

/// One running job of `qstat -f -1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorqueJob {
    /// `queue`.
    pub queue: String,
    /// `euser`: the account the job runs as.
    pub user: String,
    /// `egroup`.
    pub group: String,
    /// `Account_Name`, when given.
    pub account: String,
    /// GPUs in `exec_gpus`.
    pub gpus: u32,
}

/// `Queue: x` / `Job Id: x` blocks of `qstat -f`-style output: the header's
/// value and the block's attributes. A line without ` = ` continues the
/// previous value (qstat wraps long values without `-1`).
fn blocks(text: &str, header: &str) -> Vec<(String, BTreeMap<String, String>)> {
    let mut out: Vec<(String, BTreeMap<String, String>)> = Vec::new();
    let mut last: Option<String> = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix(header) {
            out.push((name.trim().to_string(), BTreeMap::new()));
            last = None;
            continue;
        }
        let Some((_, attrs)) = out.last_mut() else { continue };
        match line.split_once(" = ") {
            Some((k, v)) => {
                attrs.insert(k.trim().to_string(), v.trim().to_string());
                last = Some(k.trim().to_string());
            }
            None if !line.trim().is_empty() => {
                if let Some(v) = last.as_ref().and_then(|k| attrs.get_mut(k)) {
                    v.push_str(line.trim());
                }
            }
            None => {}
        }
    }
    out
}

fn utf8(output: &[u8], what: &str) -> Result<String, ProviderError> {
    String::from_utf8(output.to_vec()).map_err(|e| {
        ProviderError::Runtime(format!("{what}: not valid UTF-8 at byte {}", e.utf8_error().valid_up_to()))
    })
}

/// Parses `qstat -Qf`.
pub fn parse_queues(output: &[u8]) -> Result<Vec<Queue>, ProviderError> {
    let text = utf8(output, "qstat -Qf")?;
    Ok(blocks(&text, "Queue:").into_iter().map(|(name, attributes)| Queue { name, attributes }).collect())
}

/// Parses the running jobs of `qstat -f -1`.
pub fn parse_jobs(output: &[u8]) -> Result<Vec<TorqueJob>, ProviderError> {
    let text = utf8(output, "qstat -f -1")?;
    let mut out = Vec::new();
    for (id, a) in blocks(&text, "Job Id:") {
        if a.get("job_state").map(String::as_str) != Some("R") {
            continue;
        }
        let gpus = a.get("exec_gpus").map_or(0, |g| g.split('+').filter(|s| !s.trim().is_empty()).count());
        let gpus = u32::try_from(gpus)
            .map_err(|_| ProviderError::Runtime(format!("qstat -f -1: job {id}: exec_gpus lists too many GPUs")))?;
        let get = |k: &str| a.get(k).cloned().unwrap_or_default();
        out.push(TorqueJob {
            queue: get("queue"),
            user: get("euser"),
            group: get("egroup"),
            account: get("Account_Name"),
            gpus,
        });
    }
    Ok(out)
}

impl Queue {
    fn flag(&self, key: &str) -> bool {
        self.attributes.get(key).is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    fn list(&self, key: &str) -> Vec<String> {
        // ACL entries may carry a host (`atlas@ui.example.org`).
        self.attributes
            .get(key)
            .map(|v| v.split(',').map(|e| e.split('@').next().unwrap_or(e).trim().to_string()).collect())
            .unwrap_or_default()
    }

    /// An execution queue whose enabled ACLs let one of the VO's groups and users in.
    pub fn admits(&self, vo: &VoConfig) -> bool {
        if self.attributes.get("queue_type").is_some_and(|t| !t.eq_ignore_ascii_case("execution")) {
            return false;
        }
        let groups_ok = !self.flag("acl_group_enable") || {
            let acl = self.list("acl_groups");
            vo.groups.iter().any(|g| acl.contains(g))
        };
        let users_ok = !self.flag("acl_user_enable") || {
            let acl = self.list("acl_users");
            vo.users.iter().any(|u| acl.contains(u))
        };
        groups_ok && users_ok
    }

    /// The node properties `resources_default.neednodes` asks for (`gpu` in `1:ppn=4:gpu`).
    pub fn needed_properties(&self) -> Vec<String> {
        self.attributes
            .get("resources_default.neednodes")
            .map(|v| {
                v.split([':', '+'])
                    .filter(|p| !p.is_empty() && !p.contains('=') && !p.bytes().all(|b| b.is_ascii_digit()))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `GLUE2ComputingShareServingState`: a disabled queue takes no jobs
    /// (closed); a stopped one takes but does not run them (queueing).
    pub fn serving_state(&self) -> &'static str {
        if self.attributes.get("enabled").is_some_and(|v| v.eq_ignore_ascii_case("false")) {
            "closed"
        } else if self.attributes.get("started").is_some_and(|v| v.eq_ignore_ascii_case("false")) {
            "queueing"
        } else {
            "production"
        }
    }
}

impl TorqueShares {
    /// From `[counts]`.
    pub fn from_config(config: &ProviderConfig, timeout: Duration) -> TorqueShares {
        TorqueShares { qstat: config.counts.qstat.clone(), pbsnodes: config.counts.pbsnodes.clone(), timeout }
    }

    /// Asks TORQUE and builds the shares.
    pub fn shares(&self, config: &ProviderConfig, groups: &[NodeGroup]) -> Result<Vec<VoShare>, ProviderError> {
        let queues = parse_queues(&run_command(&self.qstat, &["-Qf"], self.timeout)?)?;
        let nodes = parse_pbsnodes(&run_command(&self.pbsnodes, &["-x"], self.timeout)?)?;
        let jobs = parse_jobs(&run_command(&self.qstat, &["-f", "-1"], self.timeout)?)?;
        build(config, groups, &queues, &nodes, &jobs)
    }
}

/// The shares from what TORQUE printed.
pub fn build(
    config: &ProviderConfig,
    groups: &[NodeGroup],
    queues: &[Queue],
    nodes: &[TorqueNode],
    jobs: &[TorqueJob],
) -> Result<Vec<VoShare>, ProviderError> {
    let nodes: BTreeMap<&str, &TorqueNode> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let service = config.site.computing_service_id.get_ref();
    let mut out = Vec::new();
    for q in queues {
        let needed = q.needed_properties();
        let runs_on = |h: &str| nodes.get(h).is_some_and(|n| needed.iter().all(|p| n.properties.contains(p)));
        let (environments, devices) = queue_devices(groups, &runs_on, |host, _| {
            let n = nodes[host];
            let mut c = node_counts(n.gpus, n.gpus_used(), n.unavailable());
            let prohibited = n.gpus_prohibited.min(c.free);
            c.free -= prohibited;
            c.offline += prohibited;
            Ok(c)
        })?;
        if environments.is_empty() {
            continue;
        }
        for vo in &config.vos {
            if vo.queues.as_ref().is_some_and(|list| !list.contains(&q.name)) || !q.admits(vo) {
                continue;
            }
            let vo_name = vo.name.get_ref();
            let used = jobs
                .iter()
                .filter(|j| j.queue == q.name && job_is_vos(vo, &j.account, &j.group, &j.user, ""))
                .try_fold(0u32, |sum, j| sum.checked_add(j.gpus))
                .ok_or_else(|| {
                    ProviderError::Runtime(format!(
                        "queue {}: the {vo_name} jobs hold more GPUs than a count holds",
                        q.name
                    ))
                })?;
            let figures = devices
                .iter()
                .map(|(p, (c, per_node))| (p.clone(), share_devices(*c, *per_node, used, &[], &[])))
                .collect();
            out.push(VoShare {
                id: share_id(&q.name, vo_name, service),
                queue: q.name.clone(),
                vo: vo_name.clone(),
                serving_state: q.serving_state(),
                environments: environments.clone(),
                devices: figures,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const QUEUES: &[u8] = b"Queue: gpu\n    queue_type = Execution\n    total_jobs = 1\n    acl_group_enable = True\n    acl_groups = atlas,cms@ui.example.org\n    resources_default.neednodes = 1:gpu\n    enabled = True\n    started = True\n\n\
Queue: atlasonly\n    queue_type = Execution\n    acl_group_enable = True\n    acl_groups = atlas\n    enabled = True\n    started = False\n\n\
Queue: route\n    queue_type = Route\n    route_destinations = gpu\n    enabled = True\n    started = True\n\n\
Queue: cpu\n    queue_type = Execution\n    resources_default.neednodes = cpu\n    enabled = True\n    started = True\n";

    const NODES: &[u8] =
        b"<Data><Node><name>wn01</name><state>job-exclusive</state><properties>gpu,k20</properties><gpus>2</gpus>\
<gpu_status>gpu[1]=gpu_state=Exclusive,gpu[0]=gpu_state=Exclusive</gpu_status><jobs>0/7.srv</jobs></Node>\
<Node><name>wn02</name><state>free</state><properties>gpu</properties><gpus>2</gpus></Node></Data>";

    const JOBS: &[u8] = b"Job Id: 7.srv\n    Job_Name = train\n    job_state = R\n    queue = gpu\n    euser = cms001\n    egroup = cms\n    exec_host = wn01/0\n    exec_gpus = wn01-gpu/0+wn01-gpu/1\n\n\
Job Id: 8.srv\n    job_state = Q\n    queue = gpu\n    euser = atlas001\n    egroup = atlas\n";

    #[test]
    fn queue_acls_nodes_and_jobs_make_the_shares() {
        let text = crate::config::tests::SAMPLE
            .replace("source = \"static\"", "source = \"torque\"")
            .replace("wn[01-16]", "wn[01-02]")
            .replace("used = 2\n", "");
        let vos = "\n[[vo]]\nname = \"atlas\"\ngroups = [\"atlas\"]\n\n[[vo]]\nname = \"cms\"\ngroups = [\"cms\"]\n";
        let cfg = ProviderConfig::parse(&format!("{text}{vos}"), Path::new("t.toml")).unwrap();
        let groups = crate::site::node_groups(&cfg).unwrap();
        let queues = parse_queues(QUEUES).unwrap();
        assert_eq!(queues[0].needed_properties(), ["gpu"]);
        assert_eq!(queues[0].attributes["acl_groups"], "atlas,cms@ui.example.org");
        let jobs = parse_jobs(JOBS).unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!((jobs[0].group.as_str(), jobs[0].gpus), ("cms", 2));
        let shares = build(&cfg, &groups, &queues, &parse_pbsnodes(NODES).unwrap(), &jobs).unwrap();
        let got: Vec<(&str, &str, [u32; 4], &str)> = shares
            .iter()
            .map(|s| {
                let d = s.devices["GPGPU"];
                (s.queue.as_str(), s.vo.as_str(), [d.total, d.free, d.used, d.max_per_job], s.serving_state)
            })
            .collect();
        assert_eq!(
            got,
            [
                ("gpu", "atlas", [4, 2, 0, 2], "production"),
                ("gpu", "cms", [4, 2, 2, 2], "production"),
                ("atlasonly", "atlas", [4, 2, 0, 2], "queueing"),
            ],
            "the route queue takes no jobs itself, cpu's nodes carry none of the groups"
        );
    }
}
