//! `cder-jdl index refresh|show`: the local index of the BDII's GPU offers
//! that `list-match` and `submit` answer from, and what each answer says of it.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::cmd::{BdiiArgs, Failure};
use crate::index::cache;
use crate::index::refresh::{cycle, generalized_time, refresh, Action, Opened, Policy};
use crate::index::{OfferIndex, UpdateStats};

/// Arguments of `index`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub cmd: IndexCmd,
}

/// The `index` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum IndexCmd {
    /// Bring the snapshot of a BDII up to date (re-read only if the BDII has changed).
    #[command(
        long_about = "Bring the local snapshot of a BDII up to date, as the cder-index-refresh timer does. \
The BDII's o=infosys UpdateStats entry, which bdii-update rewrites at the end of every update cycle, says \
whether it has changed since the snapshot was read: if not, the snapshot is only marked checked; if so (or \
with --force), every GPU offer is read with the same searches and joins as list-match --live, for every VO \
and every CDER key, and the new snapshot replaces the old one by rename, so readers see the old file or the \
new one, never a part. A BDII without UpdateStats is re-read when the snapshot was checked more than --period \
seconds ago. One refresh of a snapshot runs at a time (a lock file beside it); another waits up to --timeout \
seconds. Prints one line: what was done, the BDII cycle, offers, size and times. Exit status 1 when the BDII \
fails or the snapshot cannot be written (a full disk leaves the old snapshot in place), 2 for a bad option.",
        after_long_help = "Examples:\n  cder-jdl index refresh --bdii ldap://bdii.example.org:2170\n  \
cder-jdl index refresh --index-dir /var/cache/cder --period 90     # the site timer\n  \
cder-jdl index refresh --force --bdii bdii.example.org:2170"
    )]
    Refresh {
        /// The BDII and where the snapshot goes.
        #[command(flatten)]
        source: BdiiArgs,
        /// Re-read the BDII even when its UpdateStats show the snapshot's cycle.
        #[arg(long)]
        force: bool,
        /// For a BDII without UpdateStats: re-read a snapshot checked more than this many
        /// seconds ago (else leave it).
        #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
        period: f64,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print what a snapshot holds: its BDII, age, BDII cycle, offers and size.
    #[command(
        long_about = "Print what the local snapshot of a BDII holds, without contacting the BDII: its file, \
the BDII it was read from, when it was read and last confirmed current (its age, what --max-age is compared \
with), the BDII update cycle it came from (UpdateStats: time, new, modified and deleted entries), the number \
of offers and the file's size. Exit status 1 when there is no snapshot or it cannot be read.",
        after_long_help = "Examples:\n  cder-jdl index show --bdii ldap://bdii.example.org:2170\n  \
CDER_INDEX_DIR=/var/cache/cder cder-jdl index show --json"
    )]
    Show {
        /// The BDII and where its snapshot is.
        #[command(flatten)]
        source: BdiiArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// What an answer from the index says of the snapshot.
#[derive(Clone, Debug)]
pub struct IndexInfo {
    /// The snapshot file.
    pub path: PathBuf,
    /// When it was read from the BDII.
    pub fetched_at: SystemTime,
    /// When a refresh last confirmed it (written, or the BDII's cycle unchanged).
    pub checked_at: SystemTime,
    /// The BDII's cycle it came from (None: the BDII publishes no UpdateStats).
    pub stats: Option<UpdateStats>,
    /// Offers in it.
    pub offers: usize,
    /// Its size in bytes.
    pub bytes: u64,
    /// The refresh made before this answer, if one was.
    pub refreshed: Option<Action>,
    /// Why it is older than --max-age: the refresh's failure.
    pub stale: Option<String>,
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn iso(t: SystemTime) -> String {
    let s = unix(t);
    let (days, rem) = (s / 86_400, s % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `12345` as `12,345`.
fn thousands(n: usize) -> String {
    let digits = n.to_string().into_bytes();
    let groups: Vec<&[u8]> = digits.rchunks(3).rev().collect();
    groups.iter().map(|g| String::from_utf8_lossy(g)).collect::<Vec<_>>().join(",")
}

impl IndexInfo {
    /// What an opened snapshot says of itself.
    pub fn of(o: &Opened) -> IndexInfo {
        IndexInfo::from_index(
            &o.index,
            o.path.clone(),
            o.checked_at,
            o.refreshed.as_ref().map(|r| r.action.clone()),
            o.stale.clone(),
        )
    }

    fn from_index(
        index: &OfferIndex,
        path: PathBuf,
        checked_at: SystemTime,
        refreshed: Option<Action>,
        stale: Option<String>,
    ) -> IndexInfo {
        let meta = index.meta();
        IndexInfo {
            bytes: std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0),
            path,
            fetched_at: meta.fetched_at,
            checked_at,
            stats: meta.update_stats.clone(),
            offers: index.len(),
            refreshed,
            stale,
        }
    }

    /// Seconds since a refresh last confirmed the snapshot.
    pub fn age(&self) -> u64 {
        cache::age(self.checked_at).as_secs()
    }

    /// The BDII cycle, as a time (`2026-11-26T09:10:02Z (UpdateStats)`).
    pub fn cycle(&self) -> String {
        match &self.stats {
            Some(s) => format!("{} (UpdateStats)", generalized_time(cycle(s))),
            None => format!("unknown (no UpdateStats; read {})", iso(self.fetched_at)),
        }
    }

    /// The line each answer prints on stderr (stdout stays as scripts read it).
    pub fn line(&self) -> String {
        let what = match self.refreshed {
            Some(Action::Written) => ", just read from the BDII",
            Some(Action::Unchanged) => ", BDII unchanged since",
            _ => "",
        };
        format!("# index: {} s old, BDII cycle {}, {} offers{what}", self.age(), self.cycle(), thousands(self.offers))
    }

    /// The same for `--json`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "path": self.path,
            "age_s": self.age(),
            "checked_at": iso(self.checked_at),
            "fetched_at": iso(self.fetched_at),
            "bdii_cycle": self.stats.as_ref().map(|s| generalized_time(cycle(s))),
            "update_stats": self.stats.as_ref().map(stats_json),
            "offers": self.offers,
            "bytes": self.bytes,
            "refreshed": self.refreshed.as_ref().map(action_name),
            "stale": self.stale,
        })
    }
}

fn action_name(a: &Action) -> &'static str {
    match a {
        Action::Written => "written",
        Action::Unchanged => "unchanged",
        Action::Fresh => "fresh",
    }
}

fn stats_json(s: &UpdateStats) -> serde_json::Value {
    serde_json::json!({
        "hostname": s.hostname,
        "modify_timestamp": s.modify_timestamp,
        "time": generalized_time(cycle(s)),
        "total_entries": s.total_entries,
        "new_entries": s.new_entries,
        "modified_entries": s.modified_entries,
        "deleted_entries": s.deleted_entries,
        "update_time_s": s.update_time,
    })
}

fn seconds0(v: f64, what: &str) -> Result<Duration, Failure> {
    if !(v.is_finite() && (0.0..=31_536_000.0).contains(&v)) {
        return Err(Failure::input(format!("--{what}: {v} is not a number of seconds in [0, 31536000]")));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Runs `index`.
pub fn run(args: &Args) -> Result<(), Failure> {
    match &args.cmd {
        IndexCmd::Refresh { source, force, period, json } => {
            let period = seconds0(*period, "period")?;
            let src = source.source()?;
            let cache = source.cache()?;
            let policy = Policy { force: *force, period, lock_wait: src.query.timeout, fresh_enough: None };
            let r = refresh(&cache, &src, &policy).map_err(|e| Failure::runtime(e.to_string()))?;
            let cycle = r.stats.as_ref().map_or_else(
                || "no UpdateStats".to_string(),
                |s| {
                    format!(
                        "BDII cycle {} (new {}, modified {}, deleted {})",
                        generalized_time(cycle(s)),
                        s.new_entries,
                        s.modified_entries,
                        s.deleted_entries
                    )
                },
            );
            if *json {
                println!(
                    "{}",
                    serde_json::json!({
                        "path": r.path,
                        "bdii": src.query.url,
                        "action": action_name(&r.action),
                        "offers": r.offers,
                        "bytes": r.bytes,
                        "update_stats": r.stats.as_ref().map(stats_json),
                        "waited_s": r.waited.as_secs_f64(),
                        "fetch_s": r.fetch.as_secs_f64(),
                        "write_s": r.write.as_secs_f64(),
                    })
                );
            } else {
                match r.action {
                    Action::Written => println!(
                        "{}: written: {} offers, {} bytes, {cycle}; read in {:.3} s, written in {:.3} s{}",
                        r.path.display(),
                        thousands(r.offers.unwrap_or(0)),
                        r.bytes.unwrap_or(0),
                        r.fetch.as_secs_f64(),
                        r.write.as_secs_f64(),
                        waited(r.waited)
                    ),
                    Action::Unchanged => {
                        println!("{}: unchanged ({cycle} is the snapshot's){}", r.path.display(), waited(r.waited))
                    }
                    Action::Fresh => println!(
                        "{}: fresh (checked less than --period ago; {cycle}){}",
                        r.path.display(),
                        waited(r.waited)
                    ),
                }
            }
            Ok(())
        }
        IndexCmd::Show { source, json } => {
            let src = source.source()?;
            let cache = source.cache()?;
            let path = cache.snapshot_path(&src.key());
            let checked = cache::checked_at(&path)
                .ok_or_else(|| Failure::runtime(format!("{}: no index of {} here", path.display(), src.query.url)))?;
            let index = OfferIndex::load(&path).map_err(|e| Failure::runtime(format!("{}: {e}", path.display())))?;
            let info = IndexInfo::from_index(&index, path.clone(), checked, None, None);
            if *json {
                let mut v = info.json();
                v["bdii"] = serde_json::json!(index.meta().bdii_url);
                println!("{v}");
            } else {
                println!("file:         {}", path.display());
                println!("BDII:         {}", index.meta().bdii_url);
                println!("read:         {}", iso(info.fetched_at));
                println!("checked:      {} ({} s ago)", iso(info.checked_at), info.age());
                println!("BDII cycle:   {}", info.cycle());
                if let Some(s) = &info.stats {
                    println!("              {}", serde_json::to_string(&stats_json(s)).unwrap_or_default());
                }
                println!("offers:       {}", thousands(info.offers));
                println!("size:         {} bytes", info.bytes);
            }
            Ok(())
        }
    }
}

fn waited(d: Duration) -> String {
    if d >= Duration::from_millis(50) {
        format!(" (waited {:.1} s for another refresh)", d.as_secs_f64())
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_counts_print_plainly() {
        assert_eq!(iso(SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_685_402)), "2026-11-26T09:30:02Z");
        assert_eq!(iso(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(thousands(12345), "12,345");
        assert_eq!(thousands(100), "100");
        assert_eq!(thousands(1_000_000), "1,000,000");
    }
}
