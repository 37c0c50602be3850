//! The refresher: reads the BDII off the request path, with the live path's
//! searches and joins, and replaces the snapshot of [`super::cache`].
//!
//! It re-reads only when the BDII has changed. A top or site BDII run by
//! Debian's `bdii-update` rewrites `Hostname=<host>,o=infosys`
//! (`objectClass: UpdateStats`: `TotalEntries`, `NewEntries`,
//! `ModifiedEntries`, `DeletedEntries`, `UpdateTime`, …) at the end of every
//! update cycle, so the entry's `modifyTimestamp` names the cycle. A snapshot taken in the cycle the BDII still shows is current:
//! the refresher only marks it checked. A BDII without UpdateStats is
//! re-read once the snapshot is older than a period.
//!
//! The stats are read before and after the fetch; when a cycle ended in
//! between, the fetch is made again (twice at most), so the cycle a
//! snapshot names is the one its data comes from.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::cache::{self, Cache, CacheError, SnapshotKey};
use super::{encode, snapshot_wanted, IndexBuild, IndexMeta, OfferIndex, UpdateStats};
use crate::bdii::query::Entry;
use crate::bdii::query::Search;
use crate::bdii::{Bdii, BdiiError, QueryOptions};

/// The stats suffix of a BDII.
pub const INFOSYS_BASE: &str = "o=infosys";

/// What to read: the BDII and how.
#[derive(Clone, Debug)]
pub struct Source {
    /// URL, bases, strategies, timeouts.
    pub query: QueryOptions,
    /// CDER key prefixes (`GPGPU`).
    pub prefixes: Vec<String>,
}

impl Source {
    /// The snapshot this source makes.
    pub fn key(&self) -> SnapshotKey {
        SnapshotKey {
            url: self.query.url.clone(),
            base: self.query.base.clone(),
            base13: self.query.base13.clone(),
            strategies: self.query.strategies,
            prefixes: self.prefixes.clone(),
        }
    }
}

/// When a refresh may leave the snapshot as it is.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Re-read even when the BDII shows the snapshot's cycle.
    pub force: bool,
    /// For a BDII without UpdateStats: re-read only a snapshot checked
    /// longer ago than this.
    pub period: Duration,
    /// How long to wait for another process's refresh of the same snapshot.
    pub lock_wait: Duration,
    /// Once the lock is ours: a snapshot checked more recently than this is
    /// left alone (another process refreshed it while this one waited).
    pub fresh_enough: Option<Duration>,
}

/// What a refresh did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Read the BDII and wrote a new snapshot.
    Written,
    /// The BDII still shows the snapshot's cycle: marked checked.
    Unchanged,
    /// Checked recently enough (by another process, or within the period of
    /// a BDII without UpdateStats): nothing done.
    Fresh,
}

/// A refresh's report.
#[derive(Clone, Debug)]
pub struct Report {
    /// The snapshot file.
    pub path: PathBuf,
    /// What was done.
    pub action: Action,
    /// Offers written (None unless written).
    pub offers: Option<usize>,
    /// Bytes written (None unless written).
    pub bytes: Option<u64>,
    /// The BDII's cycle now (None: it publishes no UpdateStats, or was not asked).
    pub stats: Option<UpdateStats>,
    /// Time spent waiting for another refresh's lock.
    pub waited: Duration,
    /// Time spent reading the BDII and building the offers.
    pub fetch: Duration,
    /// Time spent encoding and writing.
    pub write: Duration,
}

/// A failed refresh.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// The BDII failed (unreachable, slow, refused a search); names the URL.
    #[error(transparent)]
    Bdii(#[from] BdiiError),
    /// The cache failed (full disk, permissions, lock held too long); names the file.
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// The stats entry of `bdii`, if it keeps one (`o=infosys` absent or empty:
/// None). Of several hosts' entries, the latest.
pub fn read_update_stats(bdii: &mut Bdii) -> Result<Option<UpdateStats>, BdiiError> {
    let attrs = ["*", "modifyTimestamp", "createTimestamp"];
    let found = bdii.search_all(vec![Search::under(
        INFOSYS_BASE,
        ldap3::Scope::OneLevel,
        "(objectClass=UpdateStats)".into(),
        &attrs,
    )])?;
    let mut all: Vec<UpdateStats> = found.into_iter().flatten().filter_map(|e| update_stats(&e)).collect();
    all.sort_by(|a, b| cycle(a).cmp(cycle(b)));
    Ok(all.pop())
}

/// An UpdateStats entry's figures and cycle; None without a cycle stamp
/// (`modifyTimestamp`, which slapd sets on every rewrite).
pub fn update_stats(e: &Entry) -> Option<UpdateStats> {
    let n = |k: &str| e.first(k).and_then(|v| v.trim().parse::<i64>().ok()).unwrap_or(0);
    let stamp = e.first("modifyTimestamp").or_else(|| e.first("createTimestamp"))?.to_string();
    Some(UpdateStats {
        hostname: e.first("Hostname").unwrap_or_default().to_string(),
        update_time: n("UpdateTime"),
        total_entries: n("TotalEntries"),
        new_entries: n("NewEntries"),
        modified_entries: n("ModifiedEntries"),
        deleted_entries: n("DeletedEntries"),
        modify_timestamp: Some(stamp),
    })
}

/// The cycle an UpdateStats names: its entry's modification time.
pub fn cycle(s: &UpdateStats) -> &str {
    s.modify_timestamp.as_deref().unwrap_or_default()
}

/// `20261126091002Z` (LDAP GeneralizedTime, also the head of an entryCSN)
/// as `2026-11-26T09:10:02Z`; anything else as it is.
pub fn generalized_time(t: &str) -> String {
    let d: Vec<char> = t.chars().take(14).collect();
    if d.len() == 14 && d.iter().all(char::is_ascii_digit) {
        let s = |a: usize, b: usize| d[a..b].iter().collect::<String>();
        format!("{}-{}-{}T{}:{}:{}Z", s(0, 4), s(4, 6), s(6, 8), s(8, 10), s(10, 12), s(12, 14))
    } else {
        t.to_string()
    }
}

/// Refreshes the snapshot of `source` in `cache` under its lock.
pub fn refresh(cache: &Cache, source: &Source, policy: &Policy) -> Result<Report, RefreshError> {
    cache.create_dir()?;
    let path = cache.snapshot_path(&source.key());
    let lock = cache::lock(&path, policy.lock_wait)?;
    let mut report = Report {
        path: path.clone(),
        action: Action::Fresh,
        offers: None,
        bytes: None,
        stats: None,
        waited: lock.waited,
        fetch: Duration::ZERO,
        write: Duration::ZERO,
    };
    let checked = cache::checked_at(&path);
    if let (Some(limit), Some(t)) = (policy.fresh_enough, checked) {
        if cache::age(t) <= limit && !policy.force {
            tracing::debug!(path = %path.display(), "index refreshed by another process meanwhile");
            return Ok(report);
        }
    }
    let started = Instant::now();
    let mut bdii = Bdii::connect(&source.query)?;
    let mut before = read_update_stats(&mut bdii)?;
    if !policy.force {
        if let Some(t) = checked {
            let old = OfferIndex::load(&path).ok().and_then(|i| i.meta().update_stats.clone());
            match (&before, old) {
                (Some(now), Some(old)) if cycle(now) == cycle(&old) => {
                    cache::mark_checked(&path)?;
                    report.action = Action::Unchanged;
                    report.stats = before;
                    return Ok(report);
                }
                (None, _) if cache::age(t) < policy.period => {
                    return Ok(report);
                }
                _ => {}
            }
        }
    }
    let wanted = snapshot_wanted(&source.prefixes);
    let mut fetched_at = SystemTime::now();
    let mut fetched = bdii.fetch(&wanted)?;
    for _ in 0..2 {
        let after = read_update_stats(&mut bdii)?;
        if after.as_ref().map(cycle) == before.as_ref().map(cycle) {
            break;
        }
        tracing::info!(url = source.query.url, "the BDII finished a cycle during the read; reading again");
        before = after;
        fetched_at = SystemTime::now();
        fetched = bdii.fetch(&wanted)?;
    }
    let offers = IndexBuild::new(&fetched, &source.prefixes);
    report.fetch = started.elapsed();
    let meta = IndexMeta {
        bdii_url: source.query.url.clone(),
        base: source.query.base.clone(),
        base13: source.query.base13.clone(),
        fetched_at,
        update_stats: before.clone(),
        strategies: source.query.strategies,
        prefixes: source.prefixes.clone(),
        queries: fetched.queries,
    };
    let written = Instant::now();
    let bytes = encode(&offers, &meta);
    cache::write_atomic(&path, &bytes)?;
    report.write = written.elapsed();
    report.action = Action::Written;
    report.offers = Some(offers.offers.offers.len());
    report.bytes = Some(bytes.len() as u64);
    report.stats = before;
    // The process may exit next: dropping the connection and offers is all it would do.
    std::mem::forget((offers, fetched, bdii));
    drop(lock);
    Ok(report)
}

/// A snapshot opened for an answer, with how it came to be used.
pub struct Opened {
    /// The index.
    pub index: OfferIndex,
    /// Its file.
    pub path: PathBuf,
    /// When a refresh last confirmed it.
    pub checked_at: SystemTime,
    /// The refresh made first, if one was.
    pub refreshed: Option<Report>,
    /// Why the snapshot is older than asked: the refresh's failure.
    pub stale: Option<String>,
}

/// Why no snapshot could answer.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No snapshot, and none could be made.
    #[error("no index of {url} in {dir} and none could be made: {cause}")]
    NoSnapshot {
        /// The BDII.
        url: String,
        /// The cache directory.
        dir: PathBuf,
        /// The refresh's failure.
        cause: Box<RefreshError>,
    },
    /// The snapshot is older than allowed, refreshing failed, and strict.
    #[error("the index {path} is {age} s old (--max-age {max_age} s) and could not be refreshed: {cause}")]
    Stale {
        /// The snapshot.
        path: PathBuf,
        /// Its age in seconds.
        age: u64,
        /// The maximum age in seconds.
        max_age: u64,
        /// The refresh's failure.
        cause: Box<RefreshError>,
    },
    /// The snapshot file is unreadable or corrupt.
    #[error("{message} (cder-jdl index refresh --force rewrites it)")]
    Corrupt {
        /// The snapshot.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The snapshot of `source` no older than `max_age`: used as it is when
/// checked recently enough, else refreshed first (waiting for a refresh
/// another process runs). When the refresh fails, the old snapshot answers
/// with `stale` set, unless `strict`.
pub fn open_fresh(
    cache: &Cache,
    source: &Source,
    max_age: Duration,
    strict: bool,
    lock_wait: Duration,
) -> Result<Opened, OpenError> {
    let path = cache.snapshot_path(&source.key());
    let mut refreshed = None;
    let mut stale = None;
    let fresh = cache::checked_at(&path).is_some_and(|t| cache::age(t) <= max_age);
    if !fresh {
        let policy = Policy { force: false, period: max_age, lock_wait, fresh_enough: Some(max_age) };
        match refresh(cache, source, &policy) {
            Ok(r) => refreshed = Some(r),
            Err(cause) => match cache::checked_at(&path) {
                None => {
                    return Err(OpenError::NoSnapshot {
                        url: source.query.url.clone(),
                        dir: cache.dir().into(),
                        cause: Box::new(cause),
                    })
                }
                Some(t) if strict => {
                    let age = cache::age(t).as_secs();
                    return Err(OpenError::Stale { path, age, max_age: max_age.as_secs(), cause: Box::new(cause) });
                }
                Some(_) => stale = Some(cause.to_string()),
            },
        }
    }
    let index = match load(&path) {
        Ok(index) => index,
        Err(unreadable) => {
            // Another format version (cder was upgraded) or a damaged file:
            // made anew, as if there were none.
            tracing::warn!("{unreadable}; reading the BDII again");
            let policy = Policy { force: true, period: max_age, lock_wait, fresh_enough: None };
            match refresh(cache, source, &policy) {
                Ok(r) => {
                    refreshed = Some(r);
                    stale = None;
                    load(&path)?
                }
                Err(cause) => {
                    return Err(OpenError::NoSnapshot {
                        url: source.query.url.clone(),
                        dir: cache.dir().into(),
                        cause: Box::new(cause),
                    })
                }
            }
        }
    };
    // The time is read after opening: a refresh that replaced the file since
    // only makes the answer's data newer than it says.
    let checked_at = cache::checked_at(&path).unwrap_or(SystemTime::UNIX_EPOCH);
    Ok(Opened { index, path, checked_at, refreshed, stale })
}

fn load(path: &Path) -> Result<OfferIndex, OpenError> {
    // The index's errors name the file already.
    OfferIndex::load(path).map_err(|e| OpenError::Corrupt { path: path.into(), message: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycle_times_read_as_iso_8601() {
        assert_eq!(generalized_time("20261126091002Z"), "2026-11-26T09:10:02Z");
        assert_eq!(generalized_time("20261126091002.123456Z#000000#000#000000"), "2026-11-26T09:10:02Z");
        assert_eq!(generalized_time("yesterday"), "yesterday");
    }

    #[test]
    fn stats_entries_need_a_stamp() {
        let e = Entry::from_pairs(
            "Hostname=bdii.example.org,o=infosys",
            [
                ("objectClass", "UpdateStats"),
                ("Hostname", "bdii.example.org"),
                ("ModifiedEntries", "12"),
                ("NewEntries", "0"),
                ("modifyTimestamp", "20261126091002Z"),
            ],
        );
        let s = update_stats(&e).unwrap();
        assert_eq!(cycle(&s), "20261126091002Z");
        assert_eq!((s.modified_entries, s.new_entries, s.deleted_entries), (12, 0, 0));
        let bare = Entry::from_pairs("Hostname=x,o=infosys", [("objectClass", "UpdateStats")]);
        assert!(update_stats(&bare).is_none());
    }
}
