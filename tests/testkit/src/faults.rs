//! Faults a production node sees, injected into real processes: a process
//! killed or frozen, a device file removed, a GPU lost or gone from the
//! fake NVML, the wall clock jumping (libfaketime). Each is one small
//! function, so that a test of one fault and a campaign mixing them inject
//! them the same way. The batch system's own daemons are restarted through
//! their harness (`cder_tests::slurm::SlurmCluster::restart_slurmctld` …).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian's libfaketime (package `faketime`), the thread-safe build.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// Checks that libfaketime is installed (see [`crate::missing`] for what
/// happens when it is not).
pub fn require_faketime() -> bool {
    crate::require(
        Path::new(LIBFAKETIME).exists(),
        &format!("{LIBFAKETIME} (install faketime with deploy/install-deps.sh)"),
    )
}

/// Sends `signal` (`"KILL"`, `"STOP"`, `"CONT"`, `"TERM"`) to `pid` with
/// kill(1); an error names the pid and what kill said.
pub fn signal(pid: u32, signal: &str) -> Result<(), String> {
    let out = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .output()
        .map_err(|e| format!("running kill: {e}"))?;
    if !out.status.success() {
        return Err(format!("kill -{signal} {pid}: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

/// A process frozen with SIGSTOP: the kernel still queues connections to
/// its listening sockets, but it reads none. Thawed (SIGCONT) when dropped,
/// unless it was killed meanwhile.
pub struct Frozen {
    pid: u32,
}

impl Frozen {
    /// Freezes `pid`.
    pub fn new(pid: u32) -> Result<Frozen, String> {
        signal(pid, "STOP")?;
        Ok(Frozen { pid })
    }

    /// The frozen process.
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = signal(self.pid, "CONT");
    }
}

/// Removes a device file, as udev or an operator's mistake does while a job
/// holds it; returns what was there (its metadata), for the test's message.
pub fn remove_device_file(path: &Path) -> Result<std::fs::Metadata, String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::remove_file(path).map_err(|e| format!("removing {}: {e}", path.display()))?;
    Ok(meta)
}

/// Marks a GPU lost in the fake NVML's control file (`CDER_FAKE_NVML_EVENTS`):
/// from now on every NVML call on it answers `GPU_IS_LOST`, as for a GPU
/// fallen off the bus.
pub fn lose_gpu(events: &Path, uuid: &str) -> Result<(), String> {
    let line = serde_json::json!({ "uuid": uuid, "lost": true });
    append_line(events, &line.to_string())
}

/// Takes a GPU out of the fake NVML's machine description (`CDER_FAKE_NVML`),
/// as after a reboot without it: NVML then numbers the GPUs after it one
/// lower. MIG entries of the GPUs after it follow their GPU.
pub fn drop_gpu(machine: &Path, uuid: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(machine).map_err(|e| format!("{}: {e}", machine.display()))?;
    let mut json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", machine.display()))?;
    let devices =
        json["devices"].as_array_mut().ok_or_else(|| format!("{}: no \"devices\" list", machine.display()))?;
    let gone = devices
        .iter()
        .position(|d| d["uuid"] == uuid)
        .ok_or_else(|| format!("{}: no GPU {uuid}", machine.display()))?;
    devices.remove(gone);
    if let Some(mig) = json.get_mut("mig").and_then(|m| m.as_array_mut()) {
        mig.retain(|m| m["device"].as_u64() != Some(gone as u64));
        for m in mig.iter_mut() {
            if let Some(d) = m["device"].as_u64().filter(|d| *d > gone as u64) {
                m["device"] = (d - 1).into();
            }
        }
    }
    std::fs::write(machine, json.to_string()).map_err(|e| format!("{}: {e}", machine.display()))
}

fn append_line(path: &Path, line: &str) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    writeln!(f, "{line}").map_err(|e| format!("{}: {e}", path.display()))
}

/// A wall clock a test moves under a running process: libfaketime preloaded
/// with its offset read from a file at every call (`FAKETIME_NO_CACHE`), so
/// [`WallClock::jump`] takes effect at once. Only `CLOCK_REALTIME` (and
/// `time`, `gettimeofday`) moves; the monotonic clock stays true
/// (`FAKETIME_DONT_FAKE_MONOTONIC`), as it does when NTP or an operator
/// steps a real node's clock.
pub struct WallClock {
    file: PathBuf,
    offset: i64,
}

impl WallClock {
    /// A clock with no offset yet, its control file in `dir`.
    pub fn new(dir: &Path) -> Result<WallClock, String> {
        let clock = WallClock { file: dir.join("faketime-offset"), offset: 0 };
        clock.write()?;
        Ok(clock)
    }

    /// The variables that put a process (and its children) on this clock.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        [
            ("LD_PRELOAD", LIBFAKETIME.as_ref()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.as_os_str()),
            ("FAKETIME_NO_CACHE", "1".as_ref()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".as_ref()),
        ]
        .into_iter()
        .map(|(k, v): (&str, &std::ffi::OsStr)| (k.into(), v.to_owned()))
        .collect()
    }

    /// Moves the clock by `seconds` (negative: backwards) from where it is.
    pub fn jump(&mut self, seconds: i64) -> Result<(), String> {
        self.offset += seconds;
        self.write()
    }

    /// The total offset from the true wall clock, in seconds.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    fn write(&self) -> Result<(), String> {
        // A relative offset: a sign, then seconds.
        let text = format!("{:+}\n", self.offset);
        // Written beside and renamed: a reader never sees half a line.
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &self.file).map_err(|e| format!("{}: {e}", self.file.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_gpu_leaves_the_others_in_order_and_their_mig_entries_follow() {
        let dir = tempfile::tempdir().unwrap();
        let machine = dir.path().join("nvml.json");
        std::fs::write(
            &machine,
            r#"{"devices":[{"uuid":"GPU-a"},{"uuid":"GPU-b"},{"uuid":"GPU-c"}],"mig":[{"device":1},{"device":2}]}"#,
        )
        .unwrap();
        drop_gpu(&machine, "GPU-b").unwrap();
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&machine).unwrap()).unwrap();
        assert_eq!(json["devices"].as_array().unwrap().len(), 2);
        assert_eq!(json["devices"][1]["uuid"], "GPU-c");
        assert_eq!(json["mig"], serde_json::json!([{"device": 1}]));
        assert!(drop_gpu(&machine, "GPU-b").unwrap_err().contains("no GPU GPU-b"));
    }

    #[test]
    fn the_clock_file_holds_the_running_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut clock = WallClock::new(dir.path()).unwrap();
        clock.jump(-7200).unwrap();
        clock.jump(100).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("faketime-offset")).unwrap(), "-7100\n");
        assert!(clock.env().iter().any(|(k, v)| k == "FAKETIME_NO_CACHE" && v == "1"));
        assert_eq!(clock.offset(), -7100);
    }
}
