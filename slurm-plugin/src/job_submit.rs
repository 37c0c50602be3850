//! The controller side: turn a job's cder request into the GRES that
//! SLURM's scheduler counts, or refuse it with a message the user sees.

use std::path::Path;

use crate::gres::{cder_type, merge_tres_per_node, tres_entries, typed_tres_entries, NodeGres};
use crate::request::{RawRequest, GPGPU};

/// What the translation reads from a job description.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Submission {
    /// The job's environment (`NAME=value`), where a CE puts the JDL keys.
    pub environment: Vec<String>,
    /// The SPANK job-control environment, where the SPANK options' twins
    /// arrive (a SPANK option outranks a JDL key).
    pub spank_job_env: Vec<String>,
    /// The job's `tres_per_node`, as submitted.
    pub tres_per_node: Option<String>,
}

/// Translates a submission: `Ok(None)` when it asks for no CDER (nothing to
/// change), `Ok(Some(tres))` with the new `tres_per_node`, `Err(message)`
/// for a request to refuse.
pub fn translate(sub: &Submission, nodes: &NodeGres) -> Result<Option<String>, String> {
    let raw = RawRequest::from_control_env(&sub.spank_job_env).or(RawRequest::from_jdl_env(&sub.environment));
    if raw.is_empty() {
        return Ok(None);
    }
    let req = raw.parse().map_err(|e| e.to_string())?;
    if req.is_empty() {
        // Only a constraint (e.g. --gpgpu-min-memory) without a count.
        return Ok(None);
    }
    nodes.validate(&req).map_err(|e| e.to_string())?;
    merge_tres_per_node(sub.tres_per_node.as_deref(), &req).map(Some).map_err(|e| e.to_string())
}

/// A job's GRES in every form SLURM takes them, as submitted, updated
/// (only what changes) or recorded by the controller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GresAsked {
    /// `tres_per_node` (`--gres`, `--gpus-per-node`, a cder request).
    pub tres_per_node: Option<String>,
    /// `tres_per_job` (`--gpus`).
    pub tres_per_job: Option<String>,
    /// `tres_per_task` (`--gpus-per-task`).
    pub tres_per_task: Option<String>,
    /// `tres_per_socket` (`--gpus-per-socket`).
    pub tres_per_socket: Option<String>,
    /// `ntasks_per_tres` (`--ntasks-per-gpu`), when set: with a task count
    /// and no GPU asked otherwise, slurmctld gives the job GPUs from it.
    pub ntasks_per_gpu: Option<u16>,
}

impl GresAsked {
    /// Does the job ask for whole GPUs, in any form?
    pub fn whole_gpus(&self) -> bool {
        self.gpu_count_given() || self.ntasks_per_gpu.is_some()
    }

    /// Does a TRES field name a GPU count (what the controller's record of
    /// the job keeps, unlike `ntasks_per_tres`)?
    fn gpu_count_given(&self) -> bool {
        let gpu = crate::gres::gres_name(GPGPU);
        [&self.tres_per_node, &self.tres_per_job, &self.tres_per_task, &self.tres_per_socket]
            .into_iter()
            .flatten()
            .any(|t| tres_entries(t).iter().any(|(g, n)| g == gpu && *n > 0))
    }

    /// Does an update set any of these fields?
    pub fn any(&self) -> bool {
        *self != GresAsked::default()
    }

    /// The job after `update`: each field it sets replaces the recorded one.
    pub fn updated_by(&self, update: &GresAsked) -> GresAsked {
        let pick = |new: &Option<String>, old: &Option<String>| new.clone().or_else(|| old.clone());
        GresAsked {
            tres_per_node: pick(&update.tres_per_node, &self.tres_per_node),
            tres_per_job: pick(&update.tres_per_job, &self.tres_per_job),
            tres_per_task: pick(&update.tres_per_task, &self.tres_per_task),
            tres_per_socket: pick(&update.tres_per_socket, &self.tres_per_socket),
            ntasks_per_gpu: update.ntasks_per_gpu.or(self.ntasks_per_gpu),
        }
    }
}

/// The `exc_nodes` that keep a job asking for whole GPUs (in any form)
/// off the nodes whose GPUs are offered as shares: SLURM 22.05 keeps a
/// shard job off a GPU held as `gpu`, but not a `gpu` job off a GPU whose
/// shards are held, and cderd refuses to record a whole GPU that is
/// shared. `None`: nothing to change (no whole GPU asked, no node shares,
/// or `exc_nodes` already names every node that shares).
pub fn exclude_shared_nodes(asked: &GresAsked, exc_nodes: Option<&str>, nodes: &NodeGres) -> Option<String> {
    use cder_request::hostlist::Hostlist;
    if !asked.whole_gpus() || nodes.shard_nodes.is_empty() {
        return None;
    }
    let exc_nodes = exc_nodes.unwrap_or("").trim();
    // What SLURM will exclude, by name; a list this cannot read (SLURM
    // checks it) is added to rather than trusted.
    let excluded =
        if exc_nodes.is_empty() { Vec::new() } else { Hostlist::HOSTS.expand(exc_nodes).unwrap_or_default() };
    let missing: Vec<&str> = nodes
        .shard_nodes
        .iter()
        .filter(|n| match Hostlist::HOSTS.expand(n) {
            Ok(names) => names.iter().any(|name| !excluded.contains(name)),
            Err(_) => true,
        })
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        return None;
    }
    let mut list: Vec<&str> = if exc_nodes.is_empty() { Vec::new() } else { vec![exc_nodes] };
    list.extend(missing);
    Some(list.join(","))
}

/// Refuses, where nodes share their GPUs, a job whose only GPU request is
/// `--ntasks-per-gpu`: slurmctld derives its GPUs from its task count but
/// keeps no GPU count in the job's record, so a later update (an
/// `ExcNodeList` its owner clears) could not be told from one of a job
/// without GPUs, and the job would reach a shared GPU.
pub fn check_tasks_per_gpu(asked: &GresAsked, nodes: &NodeGres) -> Result<(), String> {
    match asked.ntasks_per_gpu {
        Some(n) if !asked.gpu_count_given() && !nodes.shard_nodes.is_empty() => Err(format!(
            "cder: --ntasks-per-gpu={n} without a GPU count: on this cluster, where {} share their GPUs, \
             ask for the GPUs too (--gpus=N or --gres=gpu:N), which keeps the job off those nodes",
            nodes.shard_nodes.join(",")
        )),
        _ => Ok(()),
    }
}

/// Checks a `TresPerNode` update (`scontrol update job … TresPerNode=`).
/// The node honours what the controller granted, so a device count
/// changed after submit would quietly part the job from the cder request it
/// was validated for. Its owner may not change the count of a device GRES
/// (one the nodes declare); an operator (root, SlurmUser) may, except to 0,
/// which SLURM 22.05 shows in `TresPerNode` while the job keeps the devices
/// allocated.
pub fn check_tres_update(update: Option<&str>, operator: bool, nodes: &NodeGres) -> Result<(), String> {
    let Some(update) = update else { return Ok(()) };
    for (gres, count) in tres_entries(update) {
        let Some(&max) = nodes.max_per_node.get(&gres) else { continue };
        let ty = cder_type(&gres);
        if !operator {
            return Err(format!(
                "cder: TresPerNode={update}: a job's {ty} devices are fixed when it is submitted; cancel it and submit it again (operators may change them)"
            ));
        }
        if count == 0 {
            return Err(format!("cder: TresPerNode={update}: SLURM keeps the job's {gres} allocated when the count is set to 0; cancel the job instead"));
        }
        if count > max {
            return Err(format!(
                "cder: TresPerNode={update}: more than any node has (at most {max} {ty} devices per node)"
            ));
        }
    }
    // Typed entries (MIG profiles): the sum per GRES, and each type's own count.
    let mut totals: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for (gres, gres_type, count) in typed_tres_entries(update) {
        let Some(&max) = nodes.max_per_node.get(&gres) else { continue };
        let ty = cder_type(&gres);
        let total = totals.entry(gres.clone()).or_insert(0);
        *total = total.saturating_add(count);
        if *total > max {
            return Err(format!(
                "cder: TresPerNode={update}: more than any node has (at most {max} {ty} devices per node)"
            ));
        }
        if let Some(t) = gres_type {
            let type_max = nodes.max_per_type.get(&gres).and_then(|m| m.get(&t)).copied().unwrap_or(0);
            if count > type_max {
                return Err(format!(
                    "cder: TresPerNode={update}: more than any node has (at most {type_max} {ty} devices of GRES type {t} per node)"
                ));
            }
        }
    }
    Ok(())
}

/// The GRES of the nodes, from the `slurm.conf` the controller runs with.
pub fn node_gres(slurm_conf: Option<&Path>) -> Result<NodeGres, String> {
    let path = slurm_conf
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SLURM_CONF").map(Into::into))
        .unwrap_or_else(|| "/etc/slurm/slurm.conf".into());
    NodeGres::load(&path)
        .map_err(|e| format!("cder: cannot read {} to check the request against the nodes: {e}", path.display()))
}

/// Exports a job_submit plugin: `plugin_name`, `plugin_type`
/// (`job_submit/<name>`), `plugin_version`, `init`, `fini`, `job_submit`
/// and `job_modify`, the last two calling `$submit`
/// (`fn(&mut JobDesc, submit_uid) -> Result<(), String>`) and `$modify`
/// (`fn(&mut JobDesc, &JobRecord, submit_uid) -> Result<(), String>`, with
/// the controller's record of the job); the error text is what the user sees.
#[macro_export]
macro_rules! job_submit_plugin {
    ($name:literal, $submit:path, $modify:path) => {
        /// The plugin's name, as slurmctld's plugin loader logs it.
        #[no_mangle]
        #[used]
        pub static plugin_name: [u8; concat!("job_submit/", $name).len() + 1] =
            $crate::nul_terminated::<{ concat!("job_submit/", $name).len() + 1 }>(concat!("job_submit/", $name));
        /// `job_submit/<name>`: what `JobSubmitPlugins=<name>` selects.
        #[no_mangle]
        #[used]
        pub static plugin_type: [u8; concat!("job_submit/", $name).len() + 1] =
            $crate::nul_terminated::<{ concat!("job_submit/", $name).len() + 1 }>(concat!("job_submit/", $name));
        /// The SLURM release built against; the loader refuses a plugin
        /// built for another one.
        #[no_mangle]
        #[used]
        pub static plugin_version: u32 = $crate::SLURM_VERSION_NUMBER;

        /// Called once when slurmctld loads the plugin; logs that it did.
        #[no_mangle]
        pub extern "C" fn init() -> ::std::ffi::c_int {
            $crate::sys::log($crate::sys::Level::Verbose, concat!("job_submit/", $name, " loaded"));
            0
        }

        /// Called when slurmctld unloads the plugin; nothing to free.
        #[no_mangle]
        pub extern "C" fn fini() -> ::std::ffi::c_int {
            0
        }

        /// Called by slurmctld for every new job, before it is queued; an
        /// error refuses the submission and the user sees the message.
        ///
        /// # Safety
        ///
        /// Only slurmctld calls it, with a live job description and message slot.
        #[no_mangle]
        pub unsafe extern "C" fn job_submit(
            job_desc: *mut $crate::ffi::job_desc_msg_t,
            submit_uid: u32,
            err_msg: *mut *mut ::std::ffi::c_char,
        ) -> ::std::ffi::c_int {
            // SAFETY: slurmctld passes a valid job description and message slot.
            unsafe {
                $crate::sys::dispatch_job_submit(concat!("job_submit/", $name), $submit, job_desc, submit_uid, err_msg)
            }
        }

        /// Called by slurmctld for `scontrol update job`; an error refuses
        /// the update and the user sees the message.
        ///
        /// # Safety
        ///
        /// Only slurmctld calls it, with a live job description and message slot.
        #[no_mangle]
        pub unsafe extern "C" fn job_modify(
            job_desc: *mut $crate::ffi::job_desc_msg_t,
            job_ptr: *mut ::std::ffi::c_void,
            submit_uid: u32,
            err_msg: *mut *mut ::std::ffi::c_char,
        ) -> ::std::ffi::c_int {
            // SAFETY: slurmctld passes a valid job description, the job's
            // record and a message slot.
            unsafe {
                $crate::sys::dispatch_job_modify(
                    concat!("job_submit/", $name),
                    $modify,
                    job_desc,
                    job_ptr,
                    submit_uid,
                    err_msg,
                )
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gres::TRES_PREFIX;

    fn nodes() -> NodeGres {
        NodeGres::parse("NodeName=n1 Gres=gpu:4\n", Path::new("/")).unwrap()
    }

    fn sub(spank: &[&str], env: &[&str]) -> Submission {
        Submission {
            environment: env.iter().map(|s| s.to_string()).collect(),
            spank_job_env: spank.iter().map(|s| s.to_string()).collect(),
            tres_per_node: None,
        }
    }

    #[test]
    fn options_and_jdl_keys_become_gres() {
        assert_eq!(
            translate(&sub(&["CDER_GPGPU_PER_NODE=2"], &[]), &nodes()).unwrap(),
            Some(format!("{TRES_PREFIX}gpu:2"))
        );
        assert_eq!(translate(&sub(&[], &["GPGPUPerNode=3"]), &nodes()).unwrap(), Some(format!("{TRES_PREFIX}gpu:3")));
        assert_eq!(
            translate(&sub(&["CDER_REQUEST=gpgpu:1"], &[]), &nodes()).unwrap(),
            Some(format!("{TRES_PREFIX}gpu:1"))
        );
        assert_eq!(translate(&sub(&[], &["PATH=/bin"]), &nodes()).unwrap(), None);
    }

    #[test]
    fn bad_requests_are_refused_with_the_reason() {
        let e = translate(&sub(&["CDER_GPGPU_PER_NODE=0"], &[]), &nodes()).unwrap_err();
        assert!(e.contains("--gpgpu-per-node=0") && e.contains("at least 1"), "{e}");
        let e = translate(&sub(&["CDER_GPGPU_PER_NODE=abc"], &[]), &nodes()).unwrap_err();
        assert!(e.contains("not a whole number"), "{e}");
        let e = translate(&sub(&["CDER_GPGPU_PER_NODE=5"], &[]), &nodes()).unwrap_err();
        assert!(e.contains("--gpgpu-per-node=5: more than any node has (at most 4 gpgpu devices per node)"), "{e}");
        let e = translate(&sub(&["CDER_REQUEST=fpga:1"], &[]), &nodes()).unwrap_err();
        assert!(e.contains("unknown CDER type"), "{e}");
        let e = translate(&sub(&[], &["GPGPUPerNode=-2"]), &nodes()).unwrap_err();
        assert!(e.contains("GPGPUPerNode=-2"), "{e}");
    }

    #[test]
    fn tres_updates_keep_the_grant_and_the_request_together() {
        assert!(check_tres_update(None, false, &nodes()).is_ok());
        assert!(check_tres_update(Some("gres:license_x:1"), false, &nodes()).is_ok(), "not a device GRES");
        let e = check_tres_update(Some("gres:gpu:0"), false, &nodes()).unwrap_err();
        assert!(e.contains("TresPerNode=gres:gpu:0") && e.contains("fixed when it is submitted"), "{e}");
        assert!(check_tres_update(Some("gres:gpu:4"), false, &nodes()).is_err());
        assert!(check_tres_update(Some("gres:gpu:2"), true, &nodes()).is_ok());
        assert!(check_tres_update(Some("gres:gpu:0"), true, &nodes()).unwrap_err().contains("cancel the job"));
        assert!(check_tres_update(Some("gres/gpu:5"), true, &nodes()).unwrap_err().contains("at most 4"));
    }

    #[test]
    fn typed_tres_updates_are_bounded_per_type() {
        let mig = NodeGres::parse("NodeName=a Gres=gpu:1g.10gb:3,gpu:2g.20gb:1\n", Path::new("/")).unwrap();
        assert!(check_tres_update(Some("gres:gpu:1g.10gb:3"), true, &mig).is_ok());
        assert!(check_tres_update(Some("gres:gpu:1g.10gb:1,gres:gpu:2g.20gb:1"), true, &mig).is_ok());
        let e = check_tres_update(Some("gres:gpu:2g.20gb:2"), true, &mig).unwrap_err();
        assert!(e.contains("at most 1 gpgpu devices of GRES type 2g.20gb per node"), "{e}");
        let e = check_tres_update(Some("gres:gpu:3g.40gb:1"), true, &mig).unwrap_err();
        assert!(e.contains("at most 0 gpgpu devices of GRES type 3g.40gb"), "{e}");
        let e = check_tres_update(Some("gres:gpu:1g.10gb:3,gres:gpu:2g.20gb:1,gres:gpu:1g.10gb:1"), true, &mig)
            .unwrap_err();
        assert!(e.contains("at most 4 gpgpu devices per node"), "{e}");
        assert!(check_tres_update(Some("gres:gpu:1g.10gb:1"), false, &mig).is_err(), "owners still may not change it");
    }

    #[test]
    fn shares_are_bounded_per_gpu_and_whole_gpus_kept_off_shared_nodes() {
        let conf = "NodeName=wn[1-2] Gres=gpu:2,shard:8\nNodeName=wn3 Gres=gpu:4\n";
        let nodes = NodeGres::parse(conf, Path::new("/")).unwrap();
        assert_eq!((nodes.max_shares_per_gpu, nodes.shard_nodes.clone()), (4, vec!["wn[1-2]".to_string()]));
        assert_eq!(
            translate(&sub(&["CDER_GPGPU_SHARES_PER_NODE=3"], &[]), &nodes).unwrap(),
            Some(format!("{TRES_PREFIX}shard:3"))
        );
        assert_eq!(
            translate(&sub(&[], &["GPGPUSharesPerNode=4"]), &nodes).unwrap(),
            Some(format!("{TRES_PREFIX}shard:4"))
        );
        let e = translate(&sub(&["CDER_GPGPU_SHARES_PER_NODE=5"], &[]), &nodes).unwrap_err();
        assert!(e.contains("--gpgpu-shares-per-node=5: more shares than any GPU is offered as (at most 4"), "{e}");
        let e = translate(&sub(&["CDER_GPGPU_SHARES_PER_NODE=1"], &[]), &self::nodes()).unwrap_err();
        assert!(e.contains("unknown CDER type \"gpgpu-shares\""), "{e}");
        let per_node = |t: &str| GresAsked { tres_per_node: Some(t.into()), ..Default::default() };
        assert_eq!(exclude_shared_nodes(&per_node("gres:gpu:1"), None, &nodes), Some("wn[1-2]".into()));
        assert_eq!(exclude_shared_nodes(&per_node("gres/gpu:2"), Some("wn9"), &nodes), Some("wn9,wn[1-2]".into()));
        assert_eq!(exclude_shared_nodes(&per_node("gres:shard:2"), None, &nodes), None);
        assert_eq!(exclude_shared_nodes(&per_node("gres:gpu:1"), None, &self::nodes()), None);
        assert_eq!(exclude_shared_nodes(&GresAsked::default(), None, &nodes), None);
    }

    /// Every form SLURM takes a GPU count in (issue 44.5): per job, task
    /// and socket, and tasks per GPU, are kept off nodes that share, as
    /// per node is.
    #[test]
    fn every_form_of_whole_gpus_is_kept_off_shared_nodes() {
        let nodes =
            NodeGres::parse("NodeName=wn[1-2] Gres=gpu:2,shard:8\nNodeName=wn3 Gres=gpu:4\n", Path::new("/")).unwrap();
        let forms = [
            GresAsked { tres_per_job: Some("gres:gpu:1".into()), ..Default::default() },
            GresAsked { tres_per_job: Some("gres/gpu:a100:2".into()), ..Default::default() },
            GresAsked { tres_per_task: Some("gres:gpu:1".into()), ..Default::default() },
            GresAsked { tres_per_socket: Some("gres/gpu:1".into()), ..Default::default() },
            GresAsked { ntasks_per_gpu: Some(2), tres_per_job: Some("gres:gpu:2".into()), ..Default::default() },
            GresAsked {
                tres_per_node: Some("gres/fpga:1".into()),
                tres_per_task: Some("cpu=2,gres/gpu:1".into()),
                ..Default::default()
            },
        ];
        for asked in &forms {
            assert!(asked.whole_gpus(), "{asked:?}");
            assert_eq!(exclude_shared_nodes(asked, None, &nodes), Some("wn[1-2]".into()), "{asked:?}");
        }
        for not_whole in [
            GresAsked { tres_per_job: Some("gres/shard:2".into()), ..Default::default() },
            GresAsked { tres_per_task: Some("gres:gpu:0".into()), ..Default::default() },
            GresAsked { tres_per_job: Some("cpu=4".into()), ..Default::default() },
        ] {
            assert!(!not_whole.whole_gpus(), "{not_whole:?}");
            assert_eq!(exclude_shared_nodes(&not_whole, None, &nodes), None);
        }
        for asked in &forms {
            assert_eq!(check_tasks_per_gpu(asked, &nodes), Ok(()), "{asked:?}");
        }
        // Tasks per GPU alone: steered, but refused where nodes share (the
        // record would not show its GPUs to a later update).
        let tasks_only = GresAsked { ntasks_per_gpu: Some(2), ..Default::default() };
        assert!(tasks_only.whole_gpus());
        assert_eq!(exclude_shared_nodes(&tasks_only, None, &nodes), Some("wn[1-2]".into()));
        let e = check_tasks_per_gpu(&tasks_only, &nodes).unwrap_err();
        assert!(e.contains("--ntasks-per-gpu=2 without a GPU count") && e.contains("where wn[1-2] share"), "{e}");
        let unshared = NodeGres::parse("NodeName=wn3 Gres=gpu:4\n", Path::new("/")).unwrap();
        assert_eq!(check_tasks_per_gpu(&tasks_only, &unshared), Ok(()));
        // Already excluded, by name or by range: nothing to change.
        let gpus = &forms[0];
        assert_eq!(exclude_shared_nodes(gpus, Some("wn[1-2]"), &nodes), None);
        assert_eq!(exclude_shared_nodes(gpus, Some("wn2,wn1,wn3"), &nodes), None);
        assert_eq!(exclude_shared_nodes(gpus, Some("wn1"), &nodes), Some("wn1,wn[1-2]".into()));
        assert_eq!(exclude_shared_nodes(gpus, Some(" "), &nodes), Some("wn[1-2]".into()));
    }

    /// An update carries only what changes: the job's recorded request
    /// decides what the update leaves, and an `ExcNodeList` its owner
    /// clears or shortens gets the nodes that share back.
    #[test]
    fn updates_are_judged_on_the_job_they_leave() {
        let nodes =
            NodeGres::parse("NodeName=node1 Gres=gpu:1,shard:4\nNodeName=node2 Gres=gpu:1\n", Path::new("/")).unwrap();
        let recorded = GresAsked { tres_per_job: Some("gres:gpu:1".into()), ..Default::default() };
        // `ExcNodeList=` (cleared) and `ExcNodeList=node2`, GRES untouched.
        let after = recorded.updated_by(&GresAsked::default());
        assert_eq!(after, recorded);
        assert_eq!(exclude_shared_nodes(&after, Some(""), &nodes), Some("node1".into()));
        assert_eq!(exclude_shared_nodes(&after, Some("node2"), &nodes), Some("node2,node1".into()));
        // A shard job's owner may clear it.
        let shard = GresAsked { tres_per_node: Some("gres:shard:1".into()), ..Default::default() };
        assert_eq!(exclude_shared_nodes(&shard.updated_by(&GresAsked::default()), Some(""), &nodes), None);
        // An operator's new TresPerNode over a CPU job's record.
        let update = GresAsked { tres_per_node: Some("gres:gpu:1".into()), ..Default::default() };
        assert!(update.any() && !GresAsked::default().any());
        let after = GresAsked::default().updated_by(&update);
        assert_eq!(exclude_shared_nodes(&after, Some("node9"), &nodes), Some("node9,node1".into()));
        // A GPU count the update removes no longer steers.
        let cleared = GresAsked { tres_per_job: Some(String::new()), ..Default::default() };
        assert!(!recorded.updated_by(&cleared).whole_gpus());
    }

    #[test]
    fn missing_slurm_conf_is_reported() {
        let e = node_gres(Some(Path::new("/nonexistent/slurm.conf"))).unwrap_err();
        assert!(e.contains("/nonexistent/slurm.conf"), "{e}");
    }
}
