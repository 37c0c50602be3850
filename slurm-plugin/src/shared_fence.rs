//! Shared device files inside SLURM's own device cgroup. SLURM's
//! `ConstrainDevices` fences the files gres.conf names and knows nothing
//! of a file every GPU of a vendor shares (AMD's `/dev/kfd`): it leaves it
//! open to every job. Where SLURM confines, cder never moves a job's
//! processes; it adds a deny rule for such a file to the job's SLURM group
//! instead, for a job holding no device of the file's types. On cgroup v1 a
//! rule written to the job's group reaches its step and task groups too
//! (the kernel propagates a parent's exceptions to its children).

use std::path::{Path, PathBuf};

use cder_model::{DeviceNumber, SharedFile};

/// The shared files of cder.toml's types that a job holding devices of
/// `held` types may not open.
pub fn denied<'a>(shared: &[SharedFile], held: impl Iterator<Item = &'a str> + Clone) -> Vec<SharedFile> {
    shared.iter().filter(|f| !f.opened_by(held.clone())).cloned().collect()
}

/// The v1 `devices` mount of `/proc/self/mountinfo`'s text (the
/// hierarchy's root only, not a namespaced sub-view).
pub fn devices_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let fields: Vec<&str> = before.split(' ').collect();
        let tail: Vec<&str> = after.split(' ').collect();
        let devices = fields.len() >= 5
            && fields[3] == "/"
            && tail.len() >= 3
            && tail[0] == "cgroup"
            && tail[2].split(',').any(|o| o == "devices");
        devices.then(|| PathBuf::from(fields[4]))
    })
}

/// The job's group in the v1 `devices` hierarchy, from the task's
/// `/proc/<pid>/cgroup` text: its `devices` path cut after the `job_<id>`
/// component SLURM names it by (`/slurm/uid_1000/job_42/step_0/task_0` →
/// `/slurm/uid_1000/job_42`). `Err` says why there is none.
pub fn job_group(proc_cgroup: &str, job_id: &str) -> Result<PathBuf, String> {
    let path = proc_cgroup
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers.split(',').any(|c| c == "devices").then_some(path)
        })
        .ok_or("the task is in no cgroup v1 devices group (SLURM's cgroup/v2 fences with its own BPF program, to which cder adds nothing)")?;
    let component = format!("job_{job_id}");
    let mut out = PathBuf::from("/");
    for part in Path::new(path).components().skip(1) {
        out.push(part);
        if part.as_os_str() == component.as_str() {
            return Ok(out);
        }
    }
    Err(format!("the task's devices group {path} is not under SLURM's {component}"))
}

/// Denies `numbers` (read, write, mknod) in the job's SLURM devices group
/// of task `pid`; returns the group. Runs as root in the task, before exec.
pub fn deny_in_slurm_group(job_id: &str, pid: u32, numbers: &[DeviceNumber]) -> Result<PathBuf, String> {
    use std::io::Write;
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let mount = devices_mount(&mountinfo).ok_or("no cgroup v1 devices controller is mounted")?;
    let cgroup_file = format!("/proc/{pid}/cgroup");
    let text = std::fs::read_to_string(&cgroup_file).map_err(|e| format!("{cgroup_file}: {e}"))?;
    let relative = job_group(&text, job_id)?;
    let group = mount.join(relative.strip_prefix("/").unwrap_or(&relative));
    let rules = group.join("devices.deny");
    for n in numbers {
        // One rule per write(2), as the kernel reads them.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&rules)
            .and_then(|mut f| f.write_all(format!("c {n} rwm").as_bytes()))
            .map_err(|e| format!("denying {n} in {}: {e}", rules.display()))?;
    }
    Ok(group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jobs_group_as_slurm_22_05_names_it() {
        let text = "12:devices:/slurm/uid_65534/job_4510100/step_batch/task_0\n11:freezer:/slurm/uid_65534/job_4510100/step_batch\n0::/\n";
        assert_eq!(job_group(text, "4510100").unwrap(), Path::new("/slurm/uid_65534/job_4510100"));
        // Another job's number in the path is not this job's group.
        let e = job_group(text, "45101").unwrap_err();
        assert!(e.contains("not under SLURM's job_45101"), "{e}");
        let e = job_group("0::/system.slice/slurmd.service\n", "7").unwrap_err();
        assert!(e.contains("cgroup/v2"), "{e}");
        // Controllers mounted together (`devices,freezer`) are one line.
        assert_eq!(
            job_group("4:devices,freezer:/slurm_n1/uid_0/job_7/step_0\n", "7").unwrap(),
            Path::new("/slurm_n1/uid_0/job_7")
        );
    }

    #[test]
    fn the_devices_mount() {
        let text = "\
30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu
31 25 0:27 /sub /mnt/x rw,relatime shared:10 - cgroup cgroup rw,devices
32 25 0:28 / /sys/fs/cgroup/devices rw,relatime shared:11 - cgroup cgroup rw,devices
";
        assert_eq!(devices_mount(text).as_deref(), Some(Path::new("/sys/fs/cgroup/devices")));
        assert_eq!(devices_mount("32 25 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"), None);
    }

    #[test]
    fn only_jobs_without_a_device_of_the_types_are_denied() {
        let kfd = SharedFile {
            path: "/dev/kfd".into(),
            types: ["mi250".to_string(), "mi100".to_string()].into(),
            proc_devices: "/proc/devices".into(),
        };
        let shared = [kfd];
        assert_eq!(denied(&shared, ["mi100"].into_iter()).len(), 0);
        assert_eq!(denied(&shared, ["gpgpu"].into_iter()).len(), 1);
        assert_eq!(denied(&shared, [].into_iter()).len(), 1);
    }
}
