//! `cder-torque-monitor`: garbage-collects finished jobs' backends and
//! releases held vGPGPU jobs, in order, once the registry has their backends.

use std::process::Command;

use cder_model::{JobKey, Lrms, VgpgpuMethod};
use cder_registry_client::api::{BackendRequest, QueryName};
use cder_registry_client::RegistryClient;

use crate::vgpgpu::keys::MONITOR_NODE;
use crate::vgpgpu::qstat::{parse_qstat_x, QstatJob};

/// What one iteration did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Iteration {
    /// Jobs whose backends were garbage-collected.
    pub collected: Vec<String>,
    /// Jobs released from hold (in order).
    pub released: Vec<String>,
    /// The first held job that did not fit, if any.
    pub waiting: Option<String>,
}

/// The monitor: registry client and the TORQUE commands it runs.
pub struct Monitor {
    /// The cluster registry's client.
    pub client: RegistryClient,
    /// The `qstat` command (name or path).
    pub qstat: String,
    /// The `qrls` command (name or path).
    pub qrls: String,
}

impl Monitor {
    fn qstat_x(&self) -> Result<Vec<QstatJob>, String> {
        let out = Command::new(&self.qstat).arg("-x").output().map_err(|e| format!("{}: {e}", self.qstat))?;
        if !out.status.success() {
            return Err(format!(
                "{} -x failed ({}): {}",
                self.qstat,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        parse_qstat_x(&String::from_utf8_lossy(&out.stdout))
    }

    /// One pass: garbage collection, then releases in submission order.
    /// If qstat fails nothing is collected or released.
    pub fn iterate(&self) -> Result<Iteration, String> {
        let jobs = self.qstat_x()?;
        let mut it = Iteration::default();
        // 1. Backends of finished (C) or vanished torque jobs go back.
        let status = self.client.status().map_err(|e| e.to_string())?;
        let mut holders: Vec<JobKey> =
            status.backends.iter().filter_map(|b| b.job.clone()).filter(|j| j.lrms() == Lrms::Torque).collect();
        holders.sort();
        holders.dedup();
        for job in holders {
            let live = jobs.iter().any(|q| q.id == job.id() && q.state != "C");
            if !live {
                let r = self.client.release(&job).map_err(|e| e.to_string())?;
                eprintln!("cder-torque-monitor: {job} finished; released {} backend(s)", r.released);
                it.collected.push(job.id().to_string());
            }
        }
        // 2. Held vGPGPU jobs, oldest first, one at a time.
        let mut held: Vec<(&QstatJob, u32, VgpgpuMethod)> = Vec::new();
        for q in jobs.iter().filter(|q| q.state == "H" && q.hold_types.contains('u')) {
            match q.need() {
                Ok(Some((n, m))) => held.push((q, n, m)),
                Ok(None) => {}
                Err(e) => eprintln!("cder-torque-monitor: {e}; left on hold"),
            }
        }
        held.sort_by_key(|(q, _, _)| (q.qtime, q.sequence(), q.id.clone()));
        for (q, need, method) in held {
            let key = q.key()?;
            let free = self.client.query(QueryName::Free, Some(method)).map_err(|e| e.to_string())?;
            // A job that already holds its backends (a monitor restarted
            // between request and qrls) needs nothing more.
            let holds = status.backends.iter().filter(|b| b.job.as_ref() == Some(&key)).count() as u64;
            if holds < u64::from(need) && free < u64::from(need) {
                it.waiting = Some(q.id.clone());
                break;
            }
            // The owner may then read the allocation from inside the job.
            let uid = q.euser.as_deref().and_then(|u| crate::sys::user_by_name(u).ok()).map(|ids| ids.uid);
            let request = BackendRequest {
                job: key.clone(),
                count: need,
                node: MONITOR_NODE.to_string(),
                method,
                uid,
                job_limit: None,
            };
            match self.client.request_for(&request) {
                Ok(_) => {}
                Err(e) if e.code() == Some(cder_registry_client::ApiErrorCode::Insufficient) => {
                    it.waiting = Some(q.id.clone());
                    break;
                }
                Err(e) => return Err(format!("{key}: {e}")),
            }
            let out = Command::new(&self.qrls).arg(&q.id).output().map_err(|e| format!("{}: {e}", self.qrls))?;
            if !out.status.success() {
                // The job may have been deleted meanwhile: give its backends back.
                let _ = self.client.release(&key);
                eprintln!(
                    "cder-torque-monitor: qrls {} failed ({}): {}; backends returned",
                    q.id,
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                continue;
            }
            eprintln!("cder-torque-monitor: {}: {need} {method} backend(s) requested, released from hold", q.id);
            it.released.push(q.id.clone());
        }
        Ok(it)
    }
}
