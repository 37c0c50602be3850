use std::cell::RefCell;
use std::rc::Rc;

use cder_protocol::ErrorReply;

use super::*;
use crate::request::{RawRequest, Sourced};

/// cderd as the functions see it: answers for `job`, every `env` kept.
#[derive(Default)]
struct FakeCderd {
    job: Option<Allocation>,
    asked: Rc<RefCell<Vec<EnvRequest>>>,
}

impl Cderd for FakeCderd {
    fn env(&mut self, request: &EnvRequest) -> Result<Allocation, ClientError> {
        self.asked.borrow_mut().push(request.clone());
        let mut a =
            self.job.clone().ok_or_else(|| ClientError::Server(ErrorReply::new(ErrorCode::UnknownJob, "no record")))?;
        // What cderd renders: the step's GPUs, numbered as asked.
        let step: Vec<u32> = a
            .devices
            .iter()
            .map(|d| d.index)
            .filter(|i| request.step_devices.as_ref().is_none_or(|s| s.contains(i)))
            .collect();
        let pos = |i: &u32| step.iter().position(|s| s == i).unwrap_or(0).to_string();
        let value = match request.device_cgroup {
            DeviceCgroup::None => step.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
            _ => step.iter().map(pos).collect::<Vec<_>>().join(","),
        };
        a.env.0.insert("CUDA_VISIBLE_DEVICES".into(), value);
        a.device_cgroup = Some(request.device_cgroup);
        Ok(a)
    }
    fn alloc(&mut self, request: &AllocRequest) -> Result<Allocation, ClientError> {
        let a = Allocation {
            job: request.job.clone(),
            uid: request.uid,
            devices: vec![],
            env: empty_env(),
            cgroups: None,
            device_cgroup: None,
            shares: request.shares,
        };
        self.job = Some(a.clone());
        Ok(a)
    }
    fn alloc_unanswered(&mut self, _request: &AllocRequest) -> Result<(), ClientError> {
        Ok(())
    }
    fn status(&mut self) -> Result<Status, ClientError> {
        Err(ClientError::Closed)
    }
    fn confine(&mut self, _job: &JobKey) -> Result<Confined, ClientError> {
        Err(ClientError::Server(ErrorReply::new(ErrorCode::Internal, "no cgroup here")))
    }
    fn release(&mut self, _job: &JobKey) -> Result<u32, ClientError> {
        Ok(0)
    }
    fn release_unanswered(&mut self, _job: &JobKey) -> Result<(), ClientError> {
        Ok(())
    }
    fn usage(&mut self, _request: &UsageRequest) -> Result<Usage, ClientError> {
        Err(ClientError::Connect { path: "cderd.sock".into(), source: std::io::ErrorKind::Unsupported.into() })
    }
}

/// The node: a gres.conf, a cderd holding `job`, SLURM's cgroup on or off.
struct FakeNode {
    gres: Result<Vec<GresDevice>, String>,
    job: Option<Allocation>,
    slurm_cgroup: bool,
    up: bool,
    asked: Rc<RefCell<Vec<EnvRequest>>>,
    logged: RefCell<Vec<String>>,
    shards: bool,
    detail: Option<String>,
}

impl FakeNode {
    fn new(job: Option<Allocation>) -> FakeNode {
        FakeNode {
            gres: Ok(Vec::new()),
            job,
            slurm_cgroup: false,
            up: true,
            asked: Rc::default(),
            logged: RefCell::default(),
            shards: false,
            detail: None,
        }
    }
}

impl Node for FakeNode {
    fn gres(&self) -> Result<Vec<GresDevice>, String> {
        self.gres.clone()
    }
    fn node_name(&self) -> Option<String> {
        Some("n1".into())
    }
    fn granted(&self, _job_id: u32) -> Result<GrantedJob, String> {
        match &self.detail {
            Some(d) => Ok(GrantedJob {
                licenses: None,
                num_nodes: 1,
                nodes: Some("n1".into()),
                gres_detail: vec![d.clone()],
                admin_comment: None,
            }),
            None => Err("no slurmctld here".into()),
        }
    }
    fn shards(&self) -> bool {
        self.shards
    }
    fn slurm_cgroup(&self) -> bool {
        self.slurm_cgroup
    }
    fn deny_in_slurm_cgroup(&self, job_id: &str, pid: u32, numbers: &[DeviceNumber]) -> Result<PathBuf, String> {
        let denied: Vec<String> = numbers.iter().map(DeviceNumber::to_string).collect();
        self.logged.borrow_mut().push(format!("DENIED job_{job_id} pid {pid}: {}", denied.join(",")));
        Ok(PathBuf::from(format!("/slurm/job_{job_id}")))
    }
    fn cderd(&self, args: &PluginArgs) -> Result<Box<dyn Cderd>, ClientError> {
        if !self.up {
            return Err(ClientError::Connect {
                path: args.socket.clone(),
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        Ok(Box::new(FakeCderd { job: self.job.clone(), asked: self.asked.clone() }))
    }
    fn log(&self, _level: Level, text: &str) {
        self.logged.borrow_mut().push(text.to_string());
    }
    fn update_admin_comment(&self, _: &std::path::Path, _: u32, _: &str, _: std::time::Duration) -> Result<(), String> {
        Err("no slurmctld here".into())
    }
}

fn job() -> JobKey {
    "slurm:7".parse().unwrap()
}

fn held(indices: &[u32]) -> Allocation {
    let devices = indices
        .iter()
        .map(|&i| AllocatedDevice {
            cder_type: GPGPU.into(),
            index: i,
            uuid: format!("GPU-{i}"),
            path: Some(format!("/dev/nvidia{i}")),
        })
        .collect();
    Allocation {
        job: job(),
        uid: 1000,
        devices,
        env: JobEnvironment::default(),
        cgroups: None,
        device_cgroup: None,
        shares: None,
    }
}

fn step(options: RawRequest, gpus: Option<&str>) -> Step {
    let cder_option = options.cder.as_ref().map(|c| c.value.clone());
    Step {
        job: job(),
        uid: Some(1000),
        request: options.parse().map_err(|e| e.to_string()),
        cder_option,
        gpus: gpus.map(str::to_string),
    }
}

fn gpgpus(n: &str) -> RawRequest {
    RawRequest {
        gpgpu_per_node: Some(Sourced { value: n.into(), source: Source::Option(crate::request::OPT_GPGPU_PER_NODE) }),
        ..RawRequest::default()
    }
}

#[test]
fn a_step_of_its_jobs_gpus_asks_cderd_once_for_its_cgroup() {
    let node = FakeNode::new(Some(held(&[1, 3])));
    let plan = plan_step(&step(gpgpus("2"), Some("1,3")), &PluginArgs::default(), &node).unwrap();
    assert_eq!(plan.env.get("CUDA_VISIBLE_DEVICES"), Some("0,1"));
    assert_eq!((plan.device_cgroup, plan.confine, plan.step_devices.clone()), (DeviceCgroup::Job, true, None));
    assert_eq!(node.asked.borrow().len(), 1, "one env for a step of the whole job");
}

#[test]
fn a_step_of_some_gpus_gets_cderds_rendering_of_its_share() {
    let mut node = FakeNode::new(Some(held(&[1, 3])));
    node.slurm_cgroup = true;
    let plan = plan_step(&step(RawRequest::default(), Some("3")), &PluginArgs::default(), &node).unwrap();
    assert_eq!(plan.step_devices, Some(vec![3]));
    assert_eq!(plan.device_cgroup, DeviceCgroup::Step);
    assert!(!plan.confine, "SLURM confines");
    let asked = node.asked.borrow();
    assert_eq!(asked.last().unwrap().step_devices, Some(vec![3]));
    assert_eq!(asked.last().unwrap().device_cgroup, DeviceCgroup::Step);
    assert_eq!(plan.env.get("CUDA_VISIBLE_DEVICES"), Some("0"));
}

#[test]
fn more_than_the_job_has_is_refused_whatever_fail_says() {
    let node = FakeNode::new(Some(held(&[0])));
    let e = plan_step(&step(gpgpus("2"), None), &PluginArgs::default(), &node).unwrap_err();
    let Refusal::Request(message) = &e else { panic!("{e:?}") };
    assert!(
        message.contains("SLURM gave slurm:7 1 gpgpu device(s)") && message.contains("--gpgpu-per-node=2"),
        "{message}"
    );
    let open = PluginArgs { fail: FailMode::Open, ..PluginArgs::default() };
    assert!(matches!(e.outcome(&job(), open.fail, &node), TaskOutcome::Fail(_)));
}

#[test]
fn an_unreachable_cderd_follows_fail_mode() {
    let mut node = FakeNode::new(None);
    node.up = false;
    let args = PluginArgs { socket: "/nonexistent/cderd.sock".into(), ..PluginArgs::default() };
    // No devices and no cderd on the node: the empty list, nothing to confine.
    let plan = plan_step(&step(RawRequest::default(), None), &args, &node).unwrap();
    assert_eq!((plan.env.get("CUDA_VISIBLE_DEVICES"), plan.confine), (Some(""), false));
    let e = plan_step(&step(gpgpus("1"), None), &args, &node).unwrap_err();
    assert!(matches!(&e, Refusal::Unserved(why) if why.contains("cannot connect")), "{e:?}");
    match e.clone().outcome(&job(), FailMode::Closed, &node) {
        TaskOutcome::Fail(m) => assert!(m.ends_with("(fail=closed); the job is not started"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(e.outcome(&job(), FailMode::Open, &node), TaskOutcome::Env(empty_env()));
}

#[test]
fn no_record_and_no_devices_records_none() {
    let node = FakeNode::new(None);
    let plan = plan_step(&step(RawRequest::default(), None), &PluginArgs::default(), &node).unwrap();
    assert_eq!(plan.env.get("CUDA_VISIBLE_DEVICES"), Some(""));
    let e = plan_step(&step(gpgpus("1"), None), &PluginArgs::default(), &node).unwrap_err();
    assert!(matches!(&e, Refusal::Unserved(why) if why.contains("cderd holds no record")), "{e:?}");
}

#[test]
fn an_unconfined_task_asks_for_node_indices() {
    let node = FakeNode::new(Some(held(&[1, 3])));
    let plan = plan_step(&step(RawRequest::default(), Some("3")), &PluginArgs::default(), &node).unwrap();
    assert_eq!(plan.env.get("CUDA_VISIBLE_DEVICES"), Some("0"));
    // confine fails (no cgroup), fail=open lets the task run: it sees every device.
    let open = PluginArgs { fail: FailMode::Open, ..PluginArgs::default() };
    let env = confine_task(&plan, &open, 1, &node).unwrap();
    assert_eq!(env.get("CUDA_VISIBLE_DEVICES"), Some("3"));
    assert_eq!(node.asked.borrow().last().unwrap().device_cgroup, DeviceCgroup::None);
    let e = confine_task(&plan, &PluginArgs::default(), 1, &node).unwrap_err();
    assert!(e.contains("(fail=closed); the job is not started"), "{e}");
}

#[test]
fn the_extern_steps_process_enters_the_jobs_device_cgroups() {
    let node = FakeNode::new(Some(held(&[1])));
    let mut plan = plan_step(&step(RawRequest::default(), None), &PluginArgs::default(), &node).unwrap();
    assert!(plan.confine);
    let dir = tempfile::tempdir().unwrap();
    let groups: Vec<String> = ["v1", "v2"].iter().map(|g| dir.path().join(g).display().to_string()).collect();
    for g in &groups {
        std::fs::create_dir(g).unwrap();
        std::fs::write(std::path::Path::new(g).join("cgroup.procs"), b"").unwrap();
    }
    // No group named (an older cderd): refused, for the caller to end the step.
    let e = confine_extern(&plan, &[4242], &node).unwrap_err();
    assert!(e.contains("named no device cgroup for the extern step"), "{e}");
    plan.cgroups = Some(groups.clone());
    assert!(confine_extern(&plan, &[], &node).unwrap_err().contains("no process to confine"));
    confine_extern(&plan, &[4242], &node).unwrap();
    for g in &groups {
        assert_eq!(std::fs::read_to_string(std::path::Path::new(g).join("cgroup.procs")).unwrap(), "4242");
    }
    // Where SLURM confines (or confine=off), nothing is moved.
    plan.confine = false;
    plan.cgroups = Some(vec!["relative".into()]);
    confine_extern(&plan, &[4242], &node).unwrap();
}

#[test]
fn the_prolog_records_slurms_gpus_by_file() {
    let mut node = FakeNode::new(None);
    let gres = crate::gres_conf::gres_devices("Name=gpu File=/dev/nvidia[0-3]\n", "gres.conf", None, "gpu").unwrap();
    node.gres = Ok(gres);
    let prolog = Prolog { job: job(), job_id: 7, uid: 1000, job_gpus: Some("1,3".into()), node_gres: None };
    let r = prolog_record(&prolog, &PluginArgs::default(), &node).unwrap();
    assert_eq!(r.alloc.device_files, Some(vec![vec!["/dev/nvidia1".to_string()], vec!["/dev/nvidia3".to_string()]]));
    assert_eq!((r.alloc.count, r.slurm_gpus.clone()), (2, vec![1, 3]));
    assert!(r.alloc.wait_ms.is_some());
    let none = prolog_record(&Prolog { job_gpus: None, ..prolog.clone() }, &PluginArgs::default(), &node).unwrap();
    assert_eq!((none.alloc.count, none.alloc.devices), (0, Some(vec![])));
    let bad = prolog_record(&Prolog { job_gpus: Some("x".into()), ..prolog.clone() }, &PluginArgs::default(), &node)
        .unwrap_err();
    assert!(bad.contains("is not an index list"), "{bad}");
    let beyond =
        prolog_record(&Prolog { job_gpus: Some("9".into()), ..prolog }, &PluginArgs::default(), &node).unwrap_err();
    assert!(beyond.contains("cannot tell which of cderd's devices are SLURM's GPU(s) [9]"), "{beyond}");
}

/// AMD's render nodes: the prolog names SLURM's choice by file, as for
/// NVIDIA; cderd maps the files to its own indices.
#[test]
fn the_prolog_records_render_nodes_by_file() {
    let mut node = FakeNode::new(None);
    let text = "NodeName=gn01 Name=gpu Type=mi250 File=/dev/dri/renderD[128-131] Flags=amd_gpu_env\n";
    node.gres = Ok(crate::gres_conf::gres_devices(text, "gres.conf", Some("gn01"), "gpu").unwrap());
    let prolog = Prolog { job: job(), job_id: 7, uid: 1000, job_gpus: Some("0,2".into()), node_gres: None };
    let r = prolog_record(&prolog, &PluginArgs::default(), &node).unwrap();
    assert_eq!(
        r.alloc.device_files,
        Some(vec![vec!["/dev/dri/renderD128".to_string()], vec!["/dev/dri/renderD130".to_string()]])
    );
    assert_eq!((r.alloc.count, r.alloc.devices.clone(), r.slurm_gpus), (2, None, vec![0, 2]));
}

/// With the controller's stamp, the prolog takes the shares and the GPUs
/// from it and SLURM_JOB_GPUS without asking slurmctld (the fake node
/// has no slurmctld: asking would fail); without it, or with a stamp
/// that says several records or is not cder's, it asks.
#[test]
fn the_controllers_stamp_spares_the_prolog_its_rpc() {
    let mut node = FakeNode::new(None);
    let text =
        "Name=gpu File=/dev/nvidia[0-1]\nName=shard Count=4 File=/dev/nvidia0\nName=shard Count=4 File=/dev/nvidia1\n";
    node.gres = Ok(crate::gres_conf::gres_devices(text, "gres.conf", None, "gpu").unwrap());
    node.shards = true;
    let stamped =
        |v: &str| Prolog { job: job(), job_id: 7, uid: 1000, job_gpus: Some("1".into()), node_gres: Some(v.into()) };
    let r = prolog_record(&stamped("gres/shard:3"), &PluginArgs::default(), &node).unwrap();
    assert_eq!((r.alloc.count, r.alloc.shares), (1, Some(3)));
    let r = prolog_record(&stamped("gres/gpu:1"), &PluginArgs::default(), &node).unwrap();
    assert_eq!((r.alloc.count, r.alloc.shares), (1, None));
    for asks in ["gres/gpu:1,gres/shard:2", "gres/shard:3 trailing", "gres/fpga:1"] {
        let e = prolog_record(&stamped(asks), &PluginArgs::default(), &node).unwrap_err();
        assert!(e.contains("asking slurmctld for the shares"), "{asks}: {e}");
    }
    assert!(node.logged.borrow().iter().any(|l| l.contains("is not cder's; asking slurmctld")), "{:?}", node.logged);

    // Several GPU types: one stamped record is the whole grant.
    let mut typed = FakeNode::new(None);
    let text = "Name=gpu Type=a100 File=/dev/nvidia0\nName=gpu Type=t4 File=/dev/nvidia1\n";
    typed.gres = Ok(crate::gres_conf::gres_devices(text, "gres.conf", None, "gpu").unwrap());
    let r = prolog_record(&stamped("gres/gpu:t4:1"), &PluginArgs::default(), &typed).unwrap();
    assert_eq!(r.slurm_gpus, vec![1]);
    assert!(typed.logged.borrow().is_empty(), "{:?}", typed.logged);
    // Two records: SLURM_JOB_GPUS holds the last only, so slurmctld is
    // asked (and, unreachable here, the prolog says so and keeps it).
    let r = prolog_record(&stamped("gres/gpu:a100:1,gres/gpu:t4:1"), &PluginArgs::default(), &typed).unwrap();
    assert_eq!(r.slurm_gpus, vec![1]);
    assert!(
        typed.logged.borrow().iter().any(|l| l.contains("asking slurmctld for the job's GPUs")),
        "{:?}",
        typed.logged
    );
}

#[test]
fn the_prolog_records_the_shares_slurmctld_granted() {
    let mut node = FakeNode::new(None);
    let text =
        "Name=gpu File=/dev/nvidia[0-1]\nName=shard Count=4 File=/dev/nvidia0\nName=shard Count=4 File=/dev/nvidia1\n";
    node.gres = Ok(crate::gres_conf::gres_devices(text, "gres.conf", None, "gpu").unwrap());
    node.shards = true;
    node.detail = Some("shard:3(IDX:1)".into());
    // The job's environment is no authority: only SLURM_JOB_GPUS (slurmd's) and slurmctld's count.
    let prolog = Prolog { job: job(), job_id: 7, uid: 1000, job_gpus: Some("1".into()), node_gres: None };
    let r = prolog_record(&prolog, &PluginArgs::default(), &node).unwrap();
    assert_eq!((r.alloc.count, r.alloc.shares), (1, Some(3)));
    assert_eq!(r.alloc.device_files, Some(vec![vec!["/dev/nvidia1".to_string()]]));
    node.detail = Some("gpu:1(IDX:1)".into());
    assert_eq!(prolog_record(&prolog, &PluginArgs::default(), &node).unwrap().alloc.shares, None);
    node.detail = None;
    let e = prolog_record(&prolog, &PluginArgs::default(), &node).unwrap_err();
    assert!(e.contains("asking slurmctld for the shares") && e.contains("nothing recorded"), "{e}");
    node.shards = false;
    assert_eq!(prolog_record(&prolog, &PluginArgs::default(), &node).unwrap().alloc.shares, None);
}

#[test]
fn slurmd_reads_gres_conf_once() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("slurm.conf");
    std::fs::write(dir.path().join("gres.conf"), "Name=gpu File=/dev/nvidia[0-1]\n").unwrap();
    let node = FakeNode::new(None);
    assert_eq!(read_gres(Some(&conf), None, &node).unwrap().len(), 2);
    std::fs::write(dir.path().join("gres.conf"), "AutoDetect=nvml\n").unwrap();
    assert_eq!(read_gres(Some(&conf), None, &node).unwrap(), vec![], "AutoDetect: SLURM's indices are cderd's");
    assert!(node.logged.borrow().iter().any(|l| l.contains("AutoDetect")));
    let once = Slurmd::default();
    once.gres.set(Ok(Vec::new())).unwrap();
    assert_eq!(once.gres(), Ok(Vec::new()), "the cached list, not the file");
}

#[test]
fn empty_env_hides_every_known_vendor() {
    let env = empty_env();
    for var in ["CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"] {
        assert_eq!(env.get(var), Some(""), "{var}");
    }
}

#[test]
fn a_config_without_registry_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cder.toml");
    std::fs::write(&path, "[node]\n").unwrap();
    let args = PluginArgs { config: Some(path.clone()), ..PluginArgs::default() };
    let e = vgpgpu::registry_config(&args).unwrap_err();
    assert!(e.contains(&path.display().to_string()) && e.contains("[registry]"), "{e}");
    let args = PluginArgs { config: Some(dir.path().join("missing.toml")), ..PluginArgs::default() };
    assert!(vgpgpu::registry_config(&args).unwrap_err().contains("missing.toml"));
}

#[test]
fn cder_config_in_the_environment_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("user.toml");
    std::fs::write(&user, "[registry]\nurl = \"http://user.example:1\"\n").unwrap();
    // The only test here that touches the environment.
    std::env::set_var(cder_model::config::CONFIG_ENV, &user);
    let got = vgpgpu::registry_config(&PluginArgs::default());
    std::env::remove_var(cder_model::config::CONFIG_ENV);
    match got {
        Ok(rc) => assert_ne!(rc.url, "http://user.example:1", "the plugin read $CDER_CONFIG"),
        Err(e) => assert!(e.contains(cder_model::DEFAULT_CONFIG_PATH) && !e.contains("user.toml"), "{e}"),
    }
}

#[test]
fn vgpgpu_beyond_the_licences_is_refused() {
    let node = FakeNode::new(None);
    let raw = crate::vgpgpu::RawVgpgpu { per_node: Some("2".into()), method: None, origin: "--vgpgpu-per-node" };
    let s = vgpgpu::VgpgpuStep { job: job(), job_id: Some(7), uid: Some(1000), raw, from_option: true };
    match vgpgpu::allocate(&s, &PluginArgs::default(), &node) {
        Some(TaskOutcome::Fail(m)) => {
            assert!(m.contains("--vgpgpu-per-node=2: SLURM granted slurm:7 0 vgpgpu licence(s)"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    let none = vgpgpu::VgpgpuStep { raw: crate::vgpgpu::RawVgpgpu::default(), ..s };
    assert_eq!(vgpgpu::allocate(&none, &PluginArgs::default(), &node), None);
}

#[test]
fn slurm_accounts_gpu_use_itself_only_where_it_can_measure_it() {
    use super::admin_comment::slurm_measures_gpu_use;
    let conf = "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageTRES=gres/gpu # GPUs\n\
                JobAcctGatherType=jobacct_gather/cgroup\n";
    let nvml = "AutoDetect=nvml\n";
    let all = |_: &str| true;
    let why = slurm_measures_gpu_use(0x18_0b_05, conf, nvml, all).unwrap();
    assert!(why.contains("AutoDetect=nvml (gpu_nvml.so)"), "{why}");
    assert!(slurm_measures_gpu_use(0x18_0b_05, conf, "AutoDetect=rsmi\n", all).is_some());
    // 22.05 has no such TRES; Debian's builds have no gpu_nvml.so; gpu/nvidia
    // and gpu/oneapi measure nothing; without slurmdbd or job accounting,
    // or with GPUs untracked, nothing is kept.
    assert_eq!(slurm_measures_gpu_use(0x16_05_08, conf, nvml, all), None);
    assert_eq!(slurm_measures_gpu_use(0x18_0b_05, conf, nvml, |_| false), None);
    assert_eq!(slurm_measures_gpu_use(0x18_0b_05, conf, "AutoDetect=nvidia\n", all), None);
    assert_eq!(slurm_measures_gpu_use(0x18_0b_05, conf, "AutoDetect=oneapi\n", all), None);
    assert_eq!(slurm_measures_gpu_use(0x18_0b_05, conf, "", all), None);
    let no_dbd = conf.replace("accounting_storage/slurmdbd", "accounting_storage/none");
    assert_eq!(slurm_measures_gpu_use(0x18_0b_05, &no_dbd, nvml, all), None);
    let no_gather = conf.replace("jobacct_gather/cgroup", "jobacct_gather/none");
    assert_eq!(slurm_measures_gpu_use(0x18_0b_05, &no_gather, nvml, all), None);
    let untracked = conf.replace("gres/gpu", "cpu,mem");
    assert_eq!(slurm_measures_gpu_use(0x18_0b_05, &untracked, nvml, all), None);
}

/// Inside SLURM's device cgroup, a task of a job holding no device of the
/// AMD type denies kfd in its SLURM group; a job holding one does not, and
/// where cder confines (its own groups deny kfd) nothing is written.
#[test]
fn kfd_is_denied_inside_slurms_cgroup_to_a_job_without_amd_devices() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cder.toml");
    // /dev/null stands for kfd: its number, 1:3, is what gets denied.
    std::fs::write(
        &config,
        "[[cder]]\nname = \"gpgpu\"\nvendor = \"amd\"\ndiscovery = \"static\"\nkfd_path = \"/dev/null\"\n",
    )
    .unwrap();
    let args = PluginArgs { config: Some(config), ..PluginArgs::default() };
    let denied =
        |node: &FakeNode| node.logged.borrow().iter().filter(|l| l.starts_with("DENIED")).cloned().collect::<Vec<_>>();

    let mut none = FakeNode::new(Some(held(&[])));
    none.slurm_cgroup = true;
    let plan = plan_step(&step(RawRequest::default(), None), &args, &none).unwrap();
    assert_eq!(plan.shared_denied.iter().map(|f| f.name()).collect::<Vec<_>>(), ["null of gpgpu"]);
    confine_task(&plan, &args, 42, &none).unwrap();
    assert_eq!(denied(&none), ["DENIED job_7 pid 42: 1:3"]);

    let mut amd = FakeNode::new(Some(held(&[1])));
    amd.slurm_cgroup = true;
    let plan = plan_step(&step(RawRequest::default(), Some("1")), &args, &amd).unwrap();
    assert!(plan.shared_denied.is_empty(), "{:?}", plan.shared_denied);
    confine_task(&plan, &args, 42, &amd).unwrap();
    assert!(denied(&amd).is_empty());

    // cder's own groups deny kfd by themselves.
    let own = FakeNode::new(Some(held(&[])));
    let plan = plan_step(&step(RawRequest::default(), None), &args, &own).unwrap();
    assert!(plan.shared_denied.is_empty() && plan.confine);

    // No cder.toml: nothing known to deny, said in the log.
    let missing = PluginArgs { config: Some(dir.path().join("none.toml")), ..PluginArgs::default() };
    let plan = plan_step(&step(RawRequest::default(), None), &missing, &none).unwrap();
    assert!(plan.shared_denied.is_empty());
    assert!(none.logged.borrow().iter().any(|l| l.contains("no shared device file (kfd) is fenced")));
}
