//! APEL accelerator records (`APEL-accelerator-message` v0.1) for one month,
//! written into the dirq spool that APEL's `ssmsend` sends from.
//!
//! One record per job, device model and month: APEL's database keys its
//! accelerator rows by (month, year, associated record, site, model), so a
//! second record with the same key would replace the first. Within a record:
//! - `Count` is the devices' share of whole GPUs: 1 per GPU, for a MIG
//!   instance its compute slices over the GPU's (`3g.40gb` on an A100 is 3/7),
//!   and for shares of a GPU (`[node.sharing]`) the record's `fraction` of it
//!   (1 of 4 shares is 0.25).
//! - `AvailableDuration` is the seconds the devices were held inside the
//!   month, averaged over the devices by their share, so that
//!   `Count × AvailableDuration` is the GPU-seconds held.
//! - `ActiveDuration` is the same average of the seconds cderd's sampler saw
//!   the devices busy; when a device of the record was not sampled, it is
//!   left out (null), never copied from `AvailableDuration`.
//!
//! An allocation that crosses a month boundary is split: each month gets its
//! own seconds. The active seconds are the sampler's figure for that month
//! (it keeps one per job, device and month); rows sampled before it kept
//! months have one total, which is shared out in proportion to the held
//! seconds in each month.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use cder_model::JobKey;
use cder_protocol::AccountingRecord;
use serde::{Deserialize, Serialize};

/// The message type APEL's loader routes on.
pub const MESSAGE_TYPE: &str = "APEL-accelerator-message";
/// The only version APEL's schema accepts.
pub const MESSAGE_VERSION: &str = "0.1";
/// APEL's schema allows at most this many records in one message.
pub const MAX_RECORDS_PER_MESSAGE: usize = 1000;
/// FQAN of a user the map does not know: APEL refuses a null, `None` or
/// empty FQAN (it is mandatory), so such jobs are booked as local use.
pub const LOCAL_FQAN: &str = "local";

/// A calendar month in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Month {
    /// The year (2000 … 9999).
    pub year: i32,
    /// 1 … 12.
    pub month: u32,
}

impl std::str::FromStr for Month {
    type Err = String;
    fn from_str(s: &str) -> Result<Month, String> {
        let bad = || format!("{s:?} is not a month as YYYY-MM (2026-03)");
        let (y, m) = s.split_once('-').ok_or_else(bad)?;
        if y.len() != 4 || m.len() != 2 {
            return Err(bad());
        }
        let year: i32 = y.parse().map_err(|_| bad())?;
        let month: u32 = m.parse().map_err(|_| bad())?;
        if !(2000..=9999).contains(&year) || !(1..=12).contains(&month) {
            return Err(bad());
        }
        Ok(Month { year, month })
    }
}

impl Month {
    /// Unix seconds of its first second.
    pub fn start(self) -> i64 {
        days_from_civil(self.year, self.month) * 86_400
    }

    /// Unix seconds of the first second of the next month.
    pub fn end(self) -> i64 {
        let (y, m) = if self.month == 12 { (self.year + 1, 1) } else { (self.year, self.month + 1) };
        days_from_civil(y, m) * 86_400
    }
}

/// Days since 1970-01-01 of the first day of a month (Howard Hinnant's
/// proleptic Gregorian algorithm).
fn days_from_civil(year: i32, month: u32) -> i64 {
    let y = i64::from(year) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// What the record needs to know of a device beyond the accounting row.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// NVML's model name (`NVIDIA A100 80GB PCIe`, `… MIG 3g.40gb`).
    pub model: String,
    /// APEL's `Type`: `GPU` or the CDER type.
    pub kind: String,
    /// Cores of one device, when discovery knows them.
    pub cores: Option<u32>,
}

/// What cderd's sampler measured of one job on one device, over the whole
/// allocation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    /// Seconds the device was held while sampled.
    pub device_seconds: i64,
    /// Seconds it was busy (above the activity threshold).
    pub active_seconds: i64,
    /// Busy seconds per month, as the sampler counted them; `None` where it
    /// kept no months (rows older than that), and a month's `None` where it
    /// had no utilisation in that month.
    pub months: Option<BTreeMap<Month, Option<f64>>>,
}

/// Who a job's user is on the grid: the CE's mapping of its pool accounts
/// back to certificate subjects and VOMS attributes.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserMap {
    /// FQAN for users the map does not list [default: `local`].
    #[serde(default)]
    pub default_fqan: Option<String>,
    /// One entry per account or range of accounts.
    #[serde(default)]
    pub user: Vec<UserEntry>,
}

/// One mapped account (`uid`) or range of pool accounts (`uids`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    /// The local uid.
    #[serde(default)]
    pub uid: Option<u32>,
    /// A range of pool account uids, `FIRST-LAST`.
    #[serde(default)]
    pub uids: Option<String>,
    /// The VOMS FQAN (`/atlas/Role=production/Capability=NULL`).
    pub fqan: String,
    /// The certificate subject, when one person owns the account.
    #[serde(default)]
    pub global_user_name: Option<String>,
}

impl UserMap {
    /// Reads and checks a map; errors name the file, line and key.
    pub fn load(path: &Path) -> anyhow::Result<UserMap> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let map: UserMap = cder_model::config::from_toml(&text, path)?;
        for (n, u) in map.user.iter().enumerate() {
            let at = || format!("{}: user[{n}]", path.display());
            match (&u.uid, &u.uids) {
                (Some(_), None) => {}
                (None, Some(r)) => {
                    parse_range(r).map_err(|e| anyhow!("{}.uids: {e}", at()))?;
                }
                _ => return Err(anyhow!("{}: give exactly one of uid or uids", at())),
            }
            if u.fqan.trim().is_empty() || is_apel_null(&u.fqan) {
                return Err(anyhow!("{}.fqan: {:?} is what APEL reads as null; the FQAN is mandatory", at(), u.fqan));
            }
        }
        if let Some(f) = &map.default_fqan {
            if is_apel_null(f) {
                return Err(anyhow!("{}: default_fqan {f:?} is what APEL reads as null", path.display()));
            }
        }
        Ok(map)
    }

    /// (GlobalUserName, FQAN) of a uid.
    pub fn identity(&self, uid: u32) -> (Option<String>, String) {
        for u in &self.user {
            let hit = match (&u.uid, &u.uids) {
                (Some(id), _) => *id == uid,
                (None, Some(r)) => parse_range(r).is_ok_and(|(a, b)| (a..=b).contains(&uid)),
                (None, None) => false,
            };
            if hit {
                return (u.global_user_name.clone(), u.fqan.clone());
            }
        }
        (None, self.default_fqan.clone().unwrap_or_else(|| LOCAL_FQAN.to_string()))
    }
}

fn parse_range(r: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{r:?} is not a uid range FIRST-LAST (1001-1050)");
    let (a, b) = r.split_once('-').ok_or_else(bad)?;
    let (a, b): (u32, u32) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

/// The values APEL's `Record.checked` turns into null.
pub fn is_apel_null(s: &str) -> bool {
    matches!(s.trim().to_ascii_lowercase().as_str(), "" | "none" | "null")
}

/// One `APEL-accelerator-message` usage record, with APEL's field names.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AcceleratorRecord {
    /// Month of the measurement, 1 … 12.
    pub measurement_month: u32,
    /// Its year.
    pub measurement_year: i32,
    /// Always `job`: the record belongs to a batch job.
    pub associated_record_type: &'static str,
    /// The batch system's job id.
    pub associated_record: String,
    /// The owner's certificate subject, when the CE's mapping knows it.
    pub global_user_name: Option<String>,
    /// The VOMS FQAN (or the map's default, or `local`).
    #[serde(rename = "FQAN")]
    pub fqan: String,
    /// The GOCDB site name.
    pub site_name: String,
    /// Whole-GPU equivalents (3 decimals, as APEL stores it).
    pub count: f64,
    /// Cores of one device.
    pub cores: Option<u32>,
    /// `GPU`, or the CDER type for other accelerators.
    #[serde(rename = "Type")]
    pub kind: String,
    /// The device model.
    pub model: String,
    /// Seconds held inside the month (see the module's page).
    pub available_duration: i64,
    /// Seconds measured busy inside the month; null when not sampled.
    pub active_duration: Option<i64>,
}

/// A MIG instance's share of its GPU: its compute slices (`3g.40gb` → 3)
/// over the GPU's (4 on an A30, 7 on the A100, H100, H200 and B200).
/// A whole device counts 1.
pub fn device_share(model: &str) -> f64 {
    let Some((gpu, profile)) = model.rsplit_once(" MIG ") else { return 1.0 };
    let slices = profile.trim().split_once('g').and_then(|(n, _)| n.parse::<u32>().ok());
    let total = if gpu.split_whitespace().any(|w| w.eq_ignore_ascii_case("A30")) { 4 } else { 7 };
    match slices {
        Some(n) if (1..=total).contains(&n) => f64::from(n) / f64::from(total),
        _ => 1.0,
    }
}

/// Everything the month's records are made from.
pub struct Inputs<'a> {
    /// The GOCDB site name.
    pub site: &'a str,
    /// The month reported.
    pub month: Month,
    /// Now, for allocations still held.
    pub now: i64,
    /// cderd's accounting rows overlapping the month.
    pub records: &'a [AccountingRecord],
    /// By device UUID.
    pub devices: &'a HashMap<String, DeviceInfo>,
    /// By job and device UUID; absent when the sampler did not see it.
    pub measured: &'a HashMap<(JobKey, String), Measured>,
    /// The CE's mapping of local users.
    pub users: &'a UserMap,
}

/// A device's busy seconds in the month being reported.
#[derive(Clone, Copy)]
enum Active {
    /// The sampler's own figure for the month (`None`: no utilisation).
    Month(Option<f64>),
    /// A share of the allocation's total.
    Share(f64),
}

#[derive(Default)]
struct Group {
    uid: u32,
    kind: String,
    cores: Option<u32>,
    /// Per device: (share, held seconds in the month, active seconds in the month if measured).
    devices: BTreeMap<String, (f64, i64, Option<f64>)>,
}

/// The month's records, one per job and model, in job order.
pub fn records(input: &Inputs<'_>) -> Vec<AcceleratorRecord> {
    let (from, to) = (input.month.start(), input.month.end());
    let mut groups: BTreeMap<(String, String), (JobKey, Group)> = BTreeMap::new();
    for r in input.records {
        let end = r.end.unwrap_or(input.now).max(r.start);
        let held = (end.min(to) - r.start.max(from)).max(0);
        if held == 0 {
            continue;
        }
        let info = input.devices.get(&r.uuid).cloned().unwrap_or(DeviceInfo {
            model: "unknown".into(),
            kind: r.cder_type.clone(),
            cores: None,
        });
        let measured = input.measured.get(&(r.job.clone(), r.uuid.clone()));
        let active = measured.map(|m| match &m.months {
            // The month's own figure, set (not added) per device below: a
            // job requeued onto the device has several rows but one count.
            Some(months) => Active::Month(months.get(&input.month).copied().unwrap_or(Some(0.0))),
            // One total: shared out by the seconds held in this month.
            None => {
                let whole = m.device_seconds.max(held).max(1);
                Active::Share(m.active_seconds.clamp(0, whole) as f64 * held as f64 / whole as f64)
            }
        });
        let key = (r.job.to_string(), info.model.clone());
        let (_, g) = groups.entry(key).or_insert_with(|| {
            (r.job.clone(), Group { uid: r.uid, kind: info.kind.clone(), cores: info.cores, ..Group::default() })
        });
        // A MIG instance's part of its GPU, times the part of the device
        // the job's shares were.
        let share = device_share(&info.model) * r.fraction;
        let entry = g.devices.entry(r.uuid.clone()).or_insert((share, 0, Some(0.0)));
        entry.1 += held;
        entry.2 = match (entry.2, active) {
            (Some(a), Some(Active::Share(b))) => Some(a + b),
            (Some(_), Some(Active::Month(b))) => b,
            _ => None,
        };
    }
    // A sample counts in the month it was taken in, so a month's first
    // sample may cover up to a period of the month before: never more busy
    // time than was held.
    for (_, g) in groups.values_mut() {
        for d in g.devices.values_mut() {
            d.2 = d.2.map(|a| a.min(d.1 as f64));
        }
    }
    let mut out = Vec::new();
    for ((_, model), (job, g)) in groups {
        let count: f64 = g.devices.values().map(|d| d.0).sum();
        let held: f64 = g.devices.values().map(|d| d.0 * d.1 as f64).sum();
        let active: Option<f64> = g.devices.values().map(|d| d.2.map(|a| d.0 * a)).sum();
        let (global_user_name, fqan) = input.users.identity(g.uid);
        out.push(AcceleratorRecord {
            measurement_month: input.month.month,
            measurement_year: input.month.year,
            associated_record_type: "job",
            associated_record: job.id().to_string(),
            global_user_name,
            fqan,
            site_name: input.site.to_string(),
            count: (count * 1000.0).round() / 1000.0,
            cores: g.cores,
            kind: g.kind,
            model,
            available_duration: (held / count).round() as i64,
            active_duration: active.map(|a| (a / count).round() as i64),
        });
    }
    out
}

/// The JSON messages carrying `records`, at most
/// [`MAX_RECORDS_PER_MESSAGE`] each.
pub fn messages(records: &[AcceleratorRecord]) -> Vec<String> {
    #[derive(Serialize)]
    #[serde(rename_all = "PascalCase")]
    struct Message<'a> {
        #[serde(rename = "Type")]
        kind: &'static str,
        version: &'static str,
        usage_records: &'a [AcceleratorRecord],
    }
    records
        .chunks(MAX_RECORDS_PER_MESSAGE)
        .map(|chunk| {
            serde_json::to_string(&Message { kind: MESSAGE_TYPE, version: MESSAGE_VERSION, usage_records: chunk })
                .unwrap_or_default()
        })
        .collect()
}

/// Adds `message` to the dirq `QueueSimple` at `spool` as python-dirq
/// writes it, so that ssmsend picks it up: the file is written as
/// `DIR/<%08x time/60*60>/<name>.tmp`, then hard-linked to its final name
/// `%08x%05x%01x` (seconds, microseconds, a hex digit of the pid) and the
/// temporary name removed. Returns the element's path.
pub fn spool_add(spool: &Path, message: &str) -> anyhow::Result<PathBuf> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = now.as_secs();
    let dir = spool.join(format!("{:08x}", secs - secs % 60));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let rnd = std::process::id() % 16;
    let name = |t: std::time::Duration| format!("{:08x}{:05x}{:01x}", t.as_secs(), t.subsec_micros(), rnd);
    let tmp = dir.join(format!("{}.tmp", name(now)));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    file.write_all(message.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    drop(file);
    loop {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let path = dir.join(name(t));
        match std::fs::hard_link(&tmp, &path) {
            Ok(()) => {
                std::fs::remove_file(&tmp).with_context(|| format!("removing {}", tmp.display()))?;
                return Ok(path);
            }
            // Another element took this microsecond: dirq tries the next name.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("linking {} to {}", tmp.display(), path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(job: &str, uuid: &str, start: i64, end: Option<i64>) -> AccountingRecord {
        AccountingRecord {
            job: job.parse().unwrap(),
            uid: 1001,
            cder_type: "gpgpu".into(),
            index: 0,
            uuid: uuid.into(),
            start,
            end,
            device_seconds: end.unwrap_or(0) - start,
            shares: None,
            shares_total: None,
            fraction: 1.0,
            after_release: None,
        }
    }

    fn shared(job: &str, uuid: &str, start: i64, end: i64, shares: u32) -> AccountingRecord {
        AccountingRecord {
            shares: Some(shares),
            shares_total: Some(4),
            fraction: f64::from(shares) / 4.0,
            ..rec(job, uuid, start, Some(end))
        }
    }

    fn gpu(model: &str) -> DeviceInfo {
        DeviceInfo { model: model.into(), kind: "GPU".into(), cores: Some(6912) }
    }

    #[test]
    fn months_are_utc_calendar_months() {
        let m: Month = "2026-03".parse().unwrap();
        assert_eq!(m.start(), 1_772_323_200); // 2026-03-01T00:00:00Z
        assert_eq!(m.end(), 1_775_001_600); // 2026-04-01T00:00:00Z
        let dec: Month = "2024-12".parse().unwrap();
        assert_eq!(dec.end(), 1_735_689_600); // 2025-01-01
        let feb: Month = "2024-02".parse().unwrap();
        assert_eq!(feb.end() - feb.start(), 29 * 86_400);
        for bad in ["2026-13", "2026-3", "26-03", "1999-01", "2026/03", ""] {
            assert!(bad.parse::<Month>().is_err(), "{bad}");
        }
    }

    #[test]
    fn mig_instances_count_their_share_of_slices() {
        assert_eq!(device_share("NVIDIA A100 80GB PCIe"), 1.0);
        assert_eq!(device_share("NVIDIA A100 80GB PCIe MIG 3g.40gb"), 3.0 / 7.0);
        assert_eq!(device_share("NVIDIA H100 80GB HBM3 MIG 1g.10gb"), 1.0 / 7.0);
        assert_eq!(device_share("NVIDIA A30 MIG 2g.12gb"), 0.5);
        assert_eq!(device_share("NVIDIA A100 MIG nonsense"), 1.0);
    }

    #[test]
    fn an_allocation_across_a_month_boundary_is_split() {
        let march: Month = "2026-03".parse().unwrap();
        let april: Month = "2026-04".parse().unwrap();
        let b = march.end();
        let rows = [rec("slurm:7", "GPU-a", b - 3600, Some(b + 7200))];
        let devices = HashMap::from([("GPU-a".to_string(), gpu("NVIDIA A100"))]);
        let measured = HashMap::from([(
            ("slurm:7".parse().unwrap(), "GPU-a".to_string()),
            Measured { device_seconds: 10_800, active_seconds: 5400, months: None },
        )]);
        let users = UserMap::default();
        let at = |month| {
            records(&Inputs {
                site: "CESGA",
                month,
                now: b + 9000,
                records: &rows,
                devices: &devices,
                measured: &measured,
                users: &users,
            })
        };
        let (m, a) = (at(march), at(april));
        assert_eq!((m.len(), a.len()), (1, 1));
        assert_eq!((m[0].available_duration, a[0].available_duration), (3600, 7200));
        assert_eq!((m[0].active_duration, a[0].active_duration), (Some(1800), Some(3600)));
        assert_eq!((m[0].measurement_month, a[0].measurement_month), (3, 4));
        assert_eq!(m[0].associated_record, "7");
        assert_eq!(m[0].fqan, LOCAL_FQAN);
        assert_eq!(m[0].global_user_name, None);
    }

    #[test]
    fn each_month_gets_the_active_seconds_measured_in_it() {
        let march: Month = "2026-03".parse().unwrap();
        let april: Month = "2026-04".parse().unwrap();
        let b = march.end();
        // Held an hour in March, busy all of it; two hours in April, busy a
        // quarter of an hour. Shared by time, March would get 1500 s.
        let rows = [rec("slurm:8", "GPU-a", b - 3600, Some(b + 7200))];
        let devices = HashMap::from([("GPU-a".to_string(), gpu("NVIDIA A100"))]);
        let months = BTreeMap::from([(march, Some(3590.0)), (april, Some(910.0))]);
        let measured = HashMap::from([(
            ("slurm:8".parse().unwrap(), "GPU-a".to_string()),
            Measured { device_seconds: 10_800, active_seconds: 4500, months: Some(months) },
        )]);
        let users = UserMap::default();
        let at = |month| {
            records(&Inputs {
                site: "S",
                month,
                now: b + 9000,
                records: &rows,
                devices: &devices,
                measured: &measured,
                users: &users,
            })
        };
        let (m, a) = (at(march), at(april));
        assert_eq!((m[0].available_duration, a[0].available_duration), (3600, 7200));
        assert_eq!((m[0].active_duration, a[0].active_duration), (Some(3590), Some(910)));

        // A month the sampler counted nothing busy in is 0, not a share; one
        // it had no utilisation in is null; a month's figure never exceeds
        // the seconds held in it.
        let months = BTreeMap::from([(march, Some(3700.0)), (april, None)]);
        let measured = HashMap::from([(
            ("slurm:8".parse().unwrap(), "GPU-a".to_string()),
            Measured { device_seconds: 10_800, active_seconds: 3700, months: Some(months) },
        )]);
        let at = |month| {
            records(&Inputs {
                site: "S",
                month,
                now: b + 9000,
                records: &rows,
                devices: &devices,
                measured: &measured,
                users: &users,
            })
        };
        assert_eq!(at(march)[0].active_duration, Some(3600));
        assert_eq!(at(april)[0].active_duration, None);
        let only_march = BTreeMap::from([(march, Some(100.0))]);
        let measured = HashMap::from([(
            ("slurm:8".parse().unwrap(), "GPU-a".to_string()),
            Measured { device_seconds: 10_800, active_seconds: 100, months: Some(only_march) },
        )]);
        let out = records(&Inputs {
            site: "S",
            month: april,
            now: b + 9000,
            records: &rows,
            devices: &devices,
            measured: &measured,
            users: &users,
        });
        assert_eq!(out[0].active_duration, Some(0));
    }

    #[test]
    fn one_record_per_job_and_model_with_shares() {
        let month: Month = "2026-05".parse().unwrap();
        let s = month.start();
        let rows = [
            rec("slurm:1", "GPU-a", s + 100, Some(s + 1100)),
            rec("slurm:1", "GPU-b", s + 100, Some(s + 1100)),
            rec("slurm:2", "MIG-1", s, Some(s + 700)),
            rec("slurm:2", "MIG-2", s, Some(s + 700)),
        ];
        let devices = HashMap::from([
            ("GPU-a".to_string(), gpu("NVIDIA A100")),
            ("GPU-b".to_string(), gpu("NVIDIA A100")),
            ("MIG-1".to_string(), gpu("NVIDIA A100 MIG 1g.10gb")),
            ("MIG-2".to_string(), gpu("NVIDIA A100 MIG 1g.10gb")),
        ]);
        // Only one of slurm:2's instances was sampled: its record says nothing
        // about activity rather than half of it.
        let measured = HashMap::from([
            (
                ("slurm:1".parse().unwrap(), "GPU-a".to_string()),
                Measured { device_seconds: 1000, active_seconds: 800, months: None },
            ),
            (
                ("slurm:1".parse().unwrap(), "GPU-b".to_string()),
                Measured { device_seconds: 1000, active_seconds: 400, months: None },
            ),
            (
                ("slurm:2".parse().unwrap(), "MIG-1".to_string()),
                Measured { device_seconds: 700, active_seconds: 700, months: None },
            ),
        ]);
        let users: UserMap = cder_model::config::from_toml(
            "[[user]]\nuids = \"1000-1005\"\nfqan = \"/atlas/Role=production/Capability=NULL\"\nglobal_user_name = \"/DC=ch/CN=A B\"\n",
            Path::new("users.toml"),
        )
        .unwrap();
        let out = records(&Inputs {
            site: "SITE",
            month,
            now: s + 5000,
            records: &rows,
            devices: &devices,
            measured: &measured,
            users: &users,
        });
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].count, out[0].available_duration, out[0].active_duration), (2.0, 1000, Some(600)));
        assert_eq!((out[1].count, out[1].available_duration, out[1].active_duration), (0.286, 700, None));
        assert_eq!(out[1].fqan, "/atlas/Role=production/Capability=NULL");
        assert_eq!(out[1].global_user_name.as_deref(), Some("/DC=ch/CN=A B"));
        let json: serde_json::Value = serde_json::from_str(&messages(&out)[0]).unwrap();
        assert_eq!(json["Type"], MESSAGE_TYPE);
        assert_eq!(json["UsageRecords"][0]["FQAN"], "/atlas/Role=production/Capability=NULL");
        assert_eq!(json["UsageRecords"][1]["ActiveDuration"], serde_json::Value::Null);
    }

    #[test]
    fn shares_of_a_gpu_count_their_fraction() {
        let month: Month = "2026-05".parse().unwrap();
        let s = month.start();
        // Four 1-of-4 sharers and one job holding all 4 shares of another GPU.
        let mut rows: Vec<AccountingRecord> =
            (1..=4).map(|j| shared(&format!("slurm:{j}"), "GPU-a", s, s + 800, 1)).collect();
        rows.push(shared("slurm:5", "GPU-b", s, s + 600, 4));
        let devices =
            HashMap::from([("GPU-a".to_string(), gpu("NVIDIA A100")), ("GPU-b".to_string(), gpu("NVIDIA A100"))]);
        let measured = HashMap::from([(
            ("slurm:1".parse().unwrap(), "GPU-a".to_string()),
            Measured { device_seconds: 800, active_seconds: 400, months: None },
        )]);
        let users = UserMap::default();
        let out = records(&Inputs {
            site: "S",
            month,
            now: s + 5000,
            records: &rows,
            devices: &devices,
            measured: &measured,
            users: &users,
        });
        let got: Vec<_> = out
            .iter()
            .map(|r| (r.associated_record.as_str(), r.count, r.available_duration, r.active_duration))
            .collect();
        assert_eq!(
            got,
            [
                ("1", 0.25, 800, Some(400)),
                ("2", 0.25, 800, None),
                ("3", 0.25, 800, None),
                ("4", 0.25, 800, None),
                ("5", 1.0, 600, None)
            ]
        );
        // Count × AvailableDuration is the GPU-seconds: the four sharers of
        // GPU-a together held it as long as one whole-GPU job would have.
        let gpu_seconds: f64 = out[..4].iter().map(|r| r.count * r.available_duration as f64).sum();
        assert_eq!(gpu_seconds, 800.0);
    }

    #[test]
    fn messages_hold_at_most_a_thousand_records() {
        let one = AcceleratorRecord {
            measurement_month: 1,
            measurement_year: 2026,
            associated_record_type: "job",
            associated_record: "1".into(),
            global_user_name: None,
            fqan: "local".into(),
            site_name: "S".into(),
            count: 1.0,
            cores: None,
            kind: "GPU".into(),
            model: "M".into(),
            available_duration: 1,
            active_duration: Some(0),
        };
        let msgs = messages(&vec![one; 2001]);
        assert_eq!(msgs.len(), 3);
    }

    #[test]
    fn spool_elements_are_named_as_dirq_names_them() {
        let d = tempfile::tempdir().unwrap();
        let p = spool_add(d.path(), "{}").unwrap();
        let dir = p.parent().unwrap().file_name().unwrap().to_str().unwrap().to_string();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        assert!(dir.len() == 8 && dir.bytes().all(|b| b.is_ascii_hexdigit()), "{dir}");
        assert!(name.len() == 14 && name.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "{name}");
        assert_eq!(u64::from_str_radix(&dir, 16).unwrap() % 60, 0);
        assert_eq!(std::fs::read_dir(p.parent().unwrap()).unwrap().count(), 1, "the temporary file is gone");
    }

    #[test]
    fn user_maps_refuse_what_apel_reads_as_null() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("users.toml");
        std::fs::write(&f, "[[user]]\nuid = 5\nfqan = \"None\"\n").unwrap();
        let e = UserMap::load(&f).unwrap_err().to_string();
        assert!(e.contains("user[0].fqan"), "{e}");
        std::fs::write(&f, "[[user]]\nuid = 5\nuids = \"1-2\"\nfqan = \"/x\"\n").unwrap();
        assert!(UserMap::load(&f).is_err());
        std::fs::write(&f, "[[user]]\nuid = 5\nfqan = \"/x\"\nbogus = 1\n").unwrap();
        let e = format!("{:#}", UserMap::load(&f).unwrap_err());
        assert!(e.contains("users.toml") && e.contains("bogus"), "{e}");
    }
}
