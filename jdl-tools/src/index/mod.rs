//! The local index of the BDII's offers: phase 1 without LDAP on the request path.
//!
//! A refresher fetches the BDII once for every VO and every CDER key
//! ([`snapshot_wanted`]), builds every offer the live path could build
//! ([`crate::bdii::offers::every_offer`]: the live path's pipeline for every
//! VO, each offer with the traits that settle it per job) and writes them with
//! [`encode`] into one immutable file ([`snapshot`] has its layout). A query
//! maps the file ([`OfferIndex::load`]) and:
//!
//! 1. settles per job and VO what the live build settles while it builds:
//!    shares closed to the VO, offers of entities without the job's keys,
//!    VO shares one job cannot tell apart, contested CE IDs, GLUE 1.3 CEs
//!    published in GLUE 2.0 too;
//! 2. cuts the candidates with the Requirements' top-level clauses it can
//!    compile, through the sorted columns ([`plan`]);
//! 3. rebuilds only the survivors' ads, with the attributes the job may look
//!    up, one at a time, and matches and ranks them with the live path's
//!    code ([`crate::listmatch::best_per_ce`]: each CE keeps its best offer,
//!    and only those read their IDs from the string table;
//!    [`crate::listmatch::list_match`] over all of them when explaining).

pub mod cache;
pub mod plan;
pub mod refresh;
pub mod snapshot;
mod sys;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cder_classad::ast::{ClassAd, Expr};
use cder_classad::value::Value;
use cder_request::keys;

use crate::bdii::offers::{every_offer, ClosedShare, Offer, Offers, RefusedClaim};
use crate::bdii::query::{Fetched, Strategies, Wanted};
use crate::listmatch::{best_per_ce, list_match, list_match_best, ranked, MatchResult, RankPreset, Request};
use snapshot::{flag, tag, Bytes, Column, StrTable, HEADER_LEN, MAGIC, NONE, OFFER_LEN, STRING_BLOCK, VERSION};

/// The BDII's own record of its last update cycle (`o=infosys`, objectClass `UpdateStats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpdateStats {
    /// `Hostname`: the BDII that wrote it.
    pub hostname: String,
    /// `UpdateTime`.
    pub update_time: i64,
    /// `TotalEntries`.
    pub total_entries: i64,
    /// `NewEntries`.
    pub new_entries: i64,
    /// `ModifiedEntries`.
    pub modified_entries: i64,
    /// `DeletedEntries`.
    pub deleted_entries: i64,
    /// The entry's `modifyTimestamp` (LDAP generalized time), when read: changes every cycle.
    pub modify_timestamp: Option<String>,
}

/// Where a snapshot came from and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexMeta {
    /// The BDII read (`ldap://host:port`).
    pub bdii_url: String,
    /// GLUE 2.0 base DN searched.
    pub base: String,
    /// GLUE 1.3 base DN searched.
    pub base13: String,
    /// When the fetch began.
    pub fetched_at: SystemTime,
    /// The BDII's update cycle the data came from (None: the BDII publishes none).
    pub update_stats: Option<UpdateStats>,
    /// The publication strategies read.
    pub strategies: Strategies,
    /// The CDER key prefixes the offers were built with.
    pub prefixes: Vec<String>,
    /// LDAP searches the fetch made.
    pub queries: usize,
}

impl IndexMeta {
    /// Defaults for `bdii_url`: base DNs `o=glue`/`o=grid`, every strategy, the GPGPU prefix, now.
    pub fn new(bdii_url: &str) -> IndexMeta {
        IndexMeta {
            bdii_url: bdii_url.to_string(),
            base: crate::bdii::query::GLUE2_BASE.to_string(),
            base13: crate::bdii::query::GLUE13_BASE.to_string(),
            fetched_at: SystemTime::now(),
            update_stats: None,
            strategies: Strategies::default(),
            prefixes: vec![crate::bdii::offers::DEFAULT_PREFIX.to_string()],
            queries: 0,
        }
    }

    /// How old the data is at `now`.
    pub fn age(&self, now: SystemTime) -> Duration {
        now.duration_since(self.fetched_at).unwrap_or_default()
    }

    fn to_json(&self, warnings: &[String]) -> serde_json::Value {
        let secs = self.fetched_at.duration_since(UNIX_EPOCH).unwrap_or_default();
        serde_json::json!({
            "bdii_url": self.bdii_url,
            "base": self.base,
            "base13": self.base13,
            "fetched_at_ns": secs.as_nanos().to_string(),
            "update_stats": self.update_stats.as_ref().map(|u| serde_json::json!({
                "hostname": u.hostname,
                "update_time": u.update_time,
                "total_entries": u.total_entries,
                "new_entries": u.new_entries,
                "modified_entries": u.modified_entries,
                "deleted_entries": u.deleted_entries,
                "modify_timestamp": u.modify_timestamp,
            })),
            "strategies": {
                "attribute_extension": self.strategies.attribute_extension,
                "class_extension": self.strategies.class_extension,
                "glue13": self.strategies.glue13,
            },
            "prefixes": self.prefixes,
            "queries": self.queries,
            "warnings": warnings,
        })
    }

    fn from_json(v: &serde_json::Value) -> Option<(IndexMeta, Vec<String>)> {
        let s = |k: &str| v.get(k)?.as_str().map(str::to_string);
        let ns: u128 = s("fetched_at_ns")?.parse().ok()?;
        let st = v.get("strategies")?;
        let b = |k: &str| st.get(k).and_then(serde_json::Value::as_bool);
        let update_stats = match v.get("update_stats")? {
            serde_json::Value::Null => None,
            u => {
                let i = |k: &str| u.get(k).and_then(serde_json::Value::as_i64);
                Some(UpdateStats {
                    hostname: u.get("hostname")?.as_str()?.to_string(),
                    update_time: i("update_time")?,
                    total_entries: i("total_entries")?,
                    new_entries: i("new_entries")?,
                    modified_entries: i("modified_entries")?,
                    deleted_entries: i("deleted_entries")?,
                    modify_timestamp: u.get("modify_timestamp").and_then(|t| t.as_str()).map(str::to_string),
                })
            }
        };
        let strings = |k: &str| -> Option<Vec<String>> {
            v.get(k)?.as_array()?.iter().map(|x| x.as_str().map(str::to_string)).collect()
        };
        let meta = IndexMeta {
            bdii_url: s("bdii_url")?,
            base: s("base")?,
            base13: s("base13")?,
            fetched_at: UNIX_EPOCH + Duration::new((ns / 1_000_000_000) as u64, (ns % 1_000_000_000) as u32),
            update_stats,
            strategies: Strategies {
                attribute_extension: b("attribute_extension")?,
                class_extension: b("class_extension")?,
                glue13: b("glue13")?,
            },
            prefixes: strings("prefixes")?,
            queries: v.get("queries")?.as_u64()? as usize,
        };
        Some((meta, strings("warnings")?))
    }
}

/// A snapshot file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Could not open, read or map it.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not a cder index file.
    #[error("{path}: not a cder offer index (bad magic)")]
    BadMagic {
        /// The file.
        path: PathBuf,
    },
    /// Written by another version of cder.
    #[error("{path}: offer index format version {found}, this cder reads version {expected} (refresh it)")]
    Version {
        /// The file.
        path: PathBuf,
        /// The file's version.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// Shorter than it says it is.
    #[error("{path}: offer index truncated ({what})")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// What did not fit.
        what: String,
    },
    /// A checksum or a structure does not hold.
    #[error("{path}: offer index corrupt ({what})")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where.
        what: String,
    },
}

/// What the refresher asks the BDII for: every carrier of any key of
/// `prefixes`, vGPGPU counts, every attribute, and the MappingPolicies and
/// GLUE 1.3 CEs of every VO (an empty VO: `VO:*`).
pub fn snapshot_wanted(prefixes: &[String]) -> Wanted {
    Wanted {
        keys: BTreeSet::new(),
        prefixes: prefixes.iter().cloned().collect(),
        vo: Some(String::new()),
        vgpgpu: true,
        names: None,
    }
}

/// The offers of a fetch, as the index encodes them.
pub struct IndexBuild {
    /// The offers, every attribute, in list-match's order, each with what
    /// settles it per job and VO, and the build's warnings.
    pub offers: Offers,
}

impl IndexBuild {
    /// Builds every offer of `fetched` (fetched with [`snapshot_wanted`]).
    pub fn new(fetched: &Fetched, prefixes: &[String]) -> IndexBuild {
        IndexBuild { offers: every_offer(fetched, prefixes) }
    }
}

/// The file's bytes for `build` (write them to a temp file and rename it into place).
pub fn encode(build: &IndexBuild, meta: &IndexMeta) -> Vec<u8> {
    let meta_json = meta.to_json(&build.offers.warnings).to_string();
    snapshot::encode(&build.offers, meta_json.as_bytes())
}

/// [`IndexBuild::new`] with `meta.prefixes`, then [`encode`].
pub fn encode_fetched(fetched: &Fetched, meta: &IndexMeta) -> Vec<u8> {
    encode(&IndexBuild::new(fetched, &meta.prefixes), meta)
}

impl std::fmt::Debug for OfferIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfferIndex").field("path", &self.path).field("offers", &self.n).finish_non_exhaustive()
    }
}

enum Data {
    Map(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            Data::Map(m) => m,
            Data::Owned(v) => v,
        }
    }
}

/// A loaded snapshot.
pub struct OfferIndex {
    path: PathBuf,
    data: Data,
    meta: IndexMeta,
    warnings: Vec<String>,
    n: usize,
    /// The string table's offset and length.
    strings: (usize, usize),
    /// Where its blocks' checksums lie, and whether each block's held (checked once, when first read).
    string_checks: (usize, Vec<OnceLock<bool>>),
    offers_at: usize,
    lists: (usize, usize),
    /// The VO and key names of the lists: (string id, name).
    names: Vec<(u32, String)>,
    /// Lower-cased attribute name → where its column lies.
    columns: HashMap<String, ColumnAt>,
}

/// A column's place in the file, and whether its checksum held (checked once, when first used).
struct ColumnAt {
    spelling: String,
    at: usize,
    len: usize,
    crc: u32,
    checked: OnceLock<bool>,
}

/// A query's answer.
#[derive(Clone, Debug, Default)]
pub struct IndexAnswer {
    /// Matches (and exclusions, when explaining): `matches[k].offer` indexes `offers.offers`.
    pub result: MatchResult,
    /// The offers with the attributes the job may look up: each matching CE's
    /// best offer (every visible offer when explaining); the snapshot's
    /// warnings; the claims refused for this VO.
    pub offers: Offers,
    /// Offers the live path would have built for this job and VO.
    pub visible: usize,
    /// Of those, the candidates left by the compiled clauses.
    pub candidates: usize,
}

/// One offer's fixed-size record.
struct Rec {
    ce: u32,
    service: u32,
    share_dn: u32,
    ee_dn: u32,
    queue: u32,
    share_id: u32,
    ee_id: u32,
    open_to: u32,
    ee_keys: u32,
    share_keys: u32,
    apps: u32,
    vgpgpu: u32,
    refused: u32,
    seq: u32,
    flags: u8,
}

impl OfferIndex {
    /// Maps and checks the snapshot at `path`.
    pub fn load(path: &Path) -> Result<OfferIndex, IndexError> {
        let io = |source| IndexError::Io { path: path.to_path_buf(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let data = if len == 0 { Data::Owned(Vec::new()) } else { Data::Map(sys::map(&file).map_err(io)?) };
        OfferIndex::parse(path.to_path_buf(), data)
    }

    /// Reads a snapshot held in memory; `name` names it in errors.
    pub fn from_bytes(bytes: Vec<u8>, name: &Path) -> Result<OfferIndex, IndexError> {
        OfferIndex::parse(name.to_path_buf(), Data::Owned(bytes))
    }

    fn parse(path: PathBuf, data: Data) -> Result<OfferIndex, IndexError> {
        let b = Bytes(data.bytes());
        let corrupt = |what: &str| IndexError::Corrupt { path: path.clone(), what: what.to_string() };
        let [(meta_at, meta_len), (strings_at, strings_len), (offers_at, offers_len), lists, names, string_checks, (dir_at, _)] =
            check_header(b, &path)?;
        let meta_json: serde_json::Value =
            serde_json::from_slice(&b.0[meta_at..meta_at + meta_len]).map_err(|e| corrupt(&format!("meta: {e}")))?;
        let (meta, warnings) = IndexMeta::from_json(&meta_json).ok_or_else(|| corrupt("meta: missing fields"))?;
        if !offers_len.is_multiple_of(OFFER_LEN) {
            return Err(corrupt("offer table"));
        }
        let n = offers_len / OFFER_LEN;
        if !lists.1.is_multiple_of(4) {
            return Err(corrupt("lists"));
        }
        let count = b.u32(names.0).ok_or_else(|| corrupt("names"))? as usize;
        if names.1 < 4 + count * 4 {
            return Err(corrupt("names"));
        }
        let name_ids: Vec<u32> =
            (0..count).map(|k| b.u32(names.0 + 4 + k * 4)).collect::<Option<_>>().ok_or_else(|| corrupt("names"))?;
        let columns = read_columns(b, dir_at, &corrupt)?;
        let blocks = strings_len.div_ceil(STRING_BLOCK);
        let mut index = OfferIndex {
            path,
            data,
            meta,
            warnings,
            n,
            strings: (strings_at, strings_len),
            string_checks: (string_checks.0, (0..blocks).map(|_| OnceLock::new()).collect()),
            offers_at,
            lists,
            names: Vec::new(),
            columns,
        };
        // The table's count and its last end, checked before the table is read.
        index.check_strings(0, 4)?;
        let count = index.bytes().u32(strings_at).unwrap_or_default() as usize;
        if count > 0 {
            index.check_strings(4 + (count - 1) * 4, 4 + count * 4)?;
        }
        StrTable::read(index.bytes(), strings_at).ok_or_else(|| index.corrupt("string table"))?;
        for id in name_ids {
            let name = index.string(id)?.ok_or_else(|| index.corrupt("names"))?.to_string();
            index.names.push((id, name));
        }
        Ok(index)
    }

    /// Where the snapshot came from.
    pub fn meta(&self) -> &IndexMeta {
        &self.meta
    }

    /// The warnings of the build (entries skipped as malformed).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Offers in the file (every VO's).
    pub fn len(&self) -> usize {
        self.n
    }

    /// True when the snapshot holds no offer.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The file (or the name given to [`OfferIndex::from_bytes`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn corrupt(&self, what: impl Into<String>) -> IndexError {
        IndexError::Corrupt { path: self.path.clone(), what: what.into() }
    }

    fn bytes(&self) -> Bytes<'_> {
        Bytes(self.data.bytes())
    }

    fn strings(&self) -> StrTable<'_> {
        // Checked in `parse`.
        StrTable::read(self.bytes(), self.strings.0).map(|(t, _)| t).expect("string table checked at load")
    }

    /// Checks the blocks of the string table that bytes `from..to` of it lie in.
    fn check_strings(&self, from: usize, to: usize) -> Result<(), IndexError> {
        let (at, len) = self.strings;
        if to > len || from >= to {
            return Err(self.corrupt("string table"));
        }
        let (checks, seen) = &self.string_checks;
        let first = from / STRING_BLOCK;
        for (k, once) in seen.iter().enumerate().take((to - 1) / STRING_BLOCK + 1).skip(first) {
            let ok = once.get_or_init(|| {
                let block = &self.data.bytes()[at + k * STRING_BLOCK..at + len.min((k + 1) * STRING_BLOCK)];
                self.bytes().u32(checks + k * 4) == Some(crc32fast::hash(block))
            });
            if !ok {
                return Err(self.corrupt("string table: checksum mismatch"));
            }
        }
        Ok(())
    }

    fn string(&self, id: u32) -> Result<Option<&str>, IndexError> {
        if id == NONE {
            return Ok(None);
        }
        let table = self.strings();
        let i = id as usize;
        let bad = || self.corrupt(format!("string {id}"));
        if i >= table.count {
            return Err(bad());
        }
        // Its end offset and the one before it, then its bytes.
        self.check_strings(4 + i.saturating_sub(1) * 4, 4 + (i + 1) * 4)?;
        let (start, end) = table.span(i).ok_or_else(bad)?;
        let bytes_at = 4 + table.count * 4;
        if end > start {
            self.check_strings(bytes_at + start, bytes_at + end)?;
        }
        table.get(i).map(Some).ok_or_else(bad)
    }

    fn rec(&self, i: usize) -> Result<Rec, IndexError> {
        let b = self.bytes();
        let at = self.offers_at + i * OFFER_LEN;
        let f = |k: usize| b.u32(at + k * 4);
        (|| {
            Some(Rec {
                ce: f(0)?,
                service: f(1)?,
                share_dn: f(2)?,
                ee_dn: f(3)?,
                queue: f(4)?,
                share_id: f(5)?,
                ee_id: f(6)?,
                open_to: f(7)?,
                ee_keys: f(8)?,
                share_keys: f(9)?,
                apps: f(10)?,
                vgpgpu: f(11)?,
                refused: f(12)?,
                seq: f(13)?,
                flags: b.u8(at + 56)?,
            })
        })()
        .ok_or_else(|| self.corrupt(format!("offer {i}")))
    }

    /// The items of list `at` of the arena.
    fn list(&self, at: u32) -> Result<Vec<u32>, IndexError> {
        Ok(self.items(at)?.collect())
    }

    /// The items of list `at` of the arena, read in place.
    fn items(&self, at: u32) -> Result<impl Iterator<Item = u32> + '_, IndexError> {
        let arena = &self.data.bytes()[self.lists.0..self.lists.0 + self.lists.1];
        let items: &[u8] = if at == NONE {
            &[]
        } else {
            let at = at as usize * 4;
            let n = Bytes(arena).u32(at).ok_or_else(|| self.corrupt("list"))? as usize;
            Bytes(arena).slice(at + 4, n * 4).ok_or_else(|| self.corrupt("list"))?
        };
        Ok(items.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
    }

    /// The ids of the VO and key names that `hit` takes.
    fn name_ids(&self, hit: impl Fn(&str) -> bool) -> Vec<u32> {
        self.names.iter().filter(|(_, s)| hit(s)).map(|(id, _)| *id).collect()
    }

    fn strings_of(&self, at: u32) -> Result<Vec<&str>, IndexError> {
        self.list(at)?.into_iter().map(|id| self.string(id).map(|s| s.unwrap_or_default())).collect()
    }

    /// The column of attribute `name` (any case), checked.
    pub(crate) fn column(&self, name: &str) -> Result<Option<Column<'_>>, IndexError> {
        let Some(c) = self.columns.get(&name.to_ascii_lowercase()) else { return Ok(None) };
        let blob = &self.data.bytes()[c.at..c.at + c.len];
        if !*c.checked.get_or_init(|| crc32fast::hash(blob) == c.crc) {
            return Err(self.corrupt(format!("column {}: checksum mismatch", c.spelling)));
        }
        Column::read(&c.spelling, blob, self.n).map(Some).ok_or_else(|| self.corrupt(format!("column {}", c.spelling)))
    }

    /// Every attribute name in the snapshot, as spelled.
    pub fn attribute_names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.columns.values().map(|c| c.spelling.as_str()).collect();
        v.sort_unstable();
        v
    }

    /// Offer `i` with every attribute, as stored (VO-independent: no
    /// `GlueCEAccessControlBaseRule` on GLUE 2.0 offers, no vGPGPU counts).
    pub fn offer(&self, i: usize) -> Result<Offer, IndexError> {
        if i >= self.n {
            return Err(self.corrupt(format!("no offer {i}")));
        }
        let mut cols = Vec::new();
        for name in self.attribute_names() {
            cols.extend(self.column(name)?);
        }
        self.build_offer(i, &cols, None)
    }

    /// Rebuilds offer `i` from `cols`; `job`: the request's per-job additions.
    fn build_offer(&self, i: usize, cols: &[Column<'_>], job: Option<&JobView>) -> Result<Offer, IndexError> {
        let r = self.rec(i)?;
        let ad = self.build_ad(i, &r, cols, job)?;
        self.offer_of(&r, ad)
    }

    /// Offer `i`'s ad (record `r`) from `cols`, with `job`'s additions.
    fn build_ad(&self, i: usize, r: &Rec, cols: &[Column<'_>], job: Option<&JobView>) -> Result<ClassAd, IndexError> {
        let mut ad = ClassAd::new();
        let mut requirements = None;
        for c in cols {
            let v = c.value(i).map_err(|()| self.corrupt(format!("column {}: offer {i}", c.spelling)))?;
            let Some(v) = v else { continue };
            if c.spelling.eq_ignore_ascii_case(keys::REQUIREMENTS) {
                requirements = Some(v);
                continue;
            }
            let v = match job {
                Some(j) if j.vgpgpu && c.spelling.eq_ignore_ascii_case(RTE) && r.flags & flag::GLUE13 == 0 => {
                    let mut items: Vec<Value> = match v {
                        Value::List(l) => l.to_vec(),
                        other => vec![other],
                    };
                    items.extend(self.strings_of(r.apps)?.into_iter().map(|a| Value::Str(a.into())));
                    items.dedup_by(|a, b| a.identical(b) == Some(true));
                    Value::List(items.into())
                }
                _ => v,
            };
            ad.insert(c.spelling, Expr::Lit(v));
        }
        if let Some(j) = job {
            if r.flags & flag::GLUE13 == 0 {
                if j.vgpgpu {
                    let items = self.list(r.vgpgpu)?;
                    for q in items.chunks(4) {
                        let [name, t, lo, hi] = q else { return Err(self.corrupt("vGPGPU counts")) };
                        let name = self.string(*name)?.unwrap_or_default();
                        let p = (*lo as u64) | ((*hi as u64) << 32);
                        let v =
                            if *t as u8 == tag::INT { Value::Int(p as i64) } else { Value::Real(f64::from_bits(p)) };
                        if j.wants(name) {
                            ad.insert(name, Expr::Lit(v));
                        }
                    }
                }
                if let Some(vo) = j.vo.as_deref().filter(|_| j.wants(ACCESS_RULE)) {
                    ad.insert(ACCESS_RULE, Expr::Lit(Value::List(vec![Value::Str(format!("VO:{vo}").into())].into())));
                }
            }
        }
        if let Some(v) = requirements {
            ad.insert(keys::REQUIREMENTS, Expr::Lit(v));
        }
        Ok(ad)
    }

    /// The offer of record `r` with its `ad`: its IDs read from the string table.
    fn offer_of(&self, r: &Rec, ad: ClassAd) -> Result<Offer, IndexError> {
        Ok(Offer {
            ce_id: self.string(r.ce)?.unwrap_or_default().to_string(),
            queue: self.string(r.queue)?.map(str::to_string),
            share_id: self.string(r.share_id)?.map(str::to_string),
            ee_id: self.string(r.ee_id)?.map(str::to_string),
            schema: if r.flags & flag::GLUE13 != 0 { "GLUE1.3" } else { "GLUE2" },
            ad,
            traits: None,
        })
    }

    /// The offers the live path would build for `request` and `vo` (the
    /// job's VirtualOrganisation when None), in its order, and the claims it
    /// would refuse.
    fn visible(&self, w: &Wanted) -> Result<Visible, IndexError> {
        let (mut keep, closed) = self.built_for(w)?;
        // Below, the records are read again from the map, not held: 60 bytes an offer.
        let mut claims = self.refused_claims(&mut keep)?;
        self.refuse_contested(&mut keep, &mut claims)?;
        self.drop_glue13_twins(&mut keep)?;
        let n = self.n;
        let vo = w.vo.clone().unwrap_or_default();
        let closed = closed
            .into_iter()
            .map(|(dn, id, queue)| {
                Ok(ClosedShare {
                    share_id: self.string(id)?.unwrap_or_default().to_string(),
                    queue: self.string(queue)?.map(str::to_string),
                    dn: self.string(dn)?.unwrap_or_default().to_string(),
                    vo: vo.clone(),
                })
            })
            .collect::<Result<_, IndexError>>()?;
        Ok(((0..n).filter(|&i| keep[i]).collect(), claims, closed))
    }

    /// Which offers the live build would make for the job's keys and VO
    /// (VO shares one job cannot tell apart kept once), and the shares it
    /// would meet and leave out as not open to the VO (DN, ID and queue ids).
    fn built_for(&self, w: &Wanted) -> Result<(Vec<bool>, Vec<ClosedIds>), IndexError> {
        let n = self.n;
        let vgpgpu = w.vgpgpu;
        let keys: &BTreeSet<String> = &w.keys;
        // String ids are interned: compare ids, not strings. Lists hold only the file's VO and key names.
        let key_ids = self.name_ids(|s| keys.contains(s));
        let key_ids_ci = self.name_ids(|s| keys.iter().any(|k| k.eq_ignore_ascii_case(s)));
        let vo_ids: Option<(Vec<u32>, Vec<u32>)> =
            w.vo.as_ref()
                .map(|vo| (self.name_ids(|s| s == vo.as_str()), self.name_ids(|s| s.eq_ignore_ascii_case(vo))));
        let blind = w.names.as_ref().is_some_and(crate::bdii::offers::share_blind);
        let mut keep = vec![false; n];
        let mut built: BTreeSet<(u32, u32)> = BTreeSet::new();
        // Shares the live build would meet and leave out as not open to the VO.
        let mut closed: Vec<(u32, u32, u32)> = Vec::new();
        let ids = self.strings().count;
        for (i, k) in keep.iter_mut().enumerate() {
            let r = self.rec(i)?;
            if r.ce as usize >= ids {
                return Err(self.corrupt(format!("offer {i}: CE id")));
            }
            let glue13 = r.flags & flag::GLUE13 != 0;
            let not_open = match &vo_ids {
                Some((exact, ci)) => {
                    let ids = if glue13 { ci } else { exact };
                    !self.items(r.open_to)?.any(|id| ids.contains(&id))
                }
                None => false,
            };
            let fetched = |list: u32, ids: &[u32]| -> Result<bool, IndexError> {
                Ok(!ids.is_empty() && self.items(list)?.any(|id| ids.contains(&id)))
            };
            let share_fetched = r.share_keys != NONE && (keys.is_empty() || fetched(r.share_keys, &key_ids)?);
            let exists = if glue13 {
                let tagged =
                    if keys.is_empty() { r.flags & flag::PREFIX_TAGGED != 0 } else { fetched(r.ee_keys, &key_ids_ci)? };
                tagged || (vgpgpu && r.flags & flag::VGPGPU_TAGGED != 0)
            } else if r.flags & flag::SHARE_ONLY != 0 {
                // The live fetch has the share, and none of its EEs to offer with it.
                !keys.is_empty() && share_fetched && !fetched(r.ee_keys, &key_ids)?
            } else if r.ee_dn != NONE {
                // An EE is offered only when fetched: a carrier of one of the job's keys.
                keys.is_empty() || fetched(r.ee_keys, &key_ids)?
            } else {
                share_fetched
            };
            if not_open {
                if exists && !glue13 && !closed.iter().any(|c| c.0 == r.share_dn) {
                    closed.push((r.share_dn, r.share_id, r.queue));
                }
                continue;
            }
            if exists && !glue13 && blind && !share_fetched && r.ee_dn != NONE && r.refused == NONE {
                *k = built.insert((r.ce, r.ee_dn));
            } else {
                *k = exists;
            }
        }
        Ok((keep, closed))
    }

    /// Claims refused outright, in the order the live build meets them (their offers left out).
    fn refused_claims(&self, keep: &mut [bool]) -> Result<Vec<RefusedClaim>, IndexError> {
        // Claims refused outright, in the order the live build meets them.
        let mut refused: Vec<(u32, RefusedClaim)> = Vec::new();
        let mut seen: BTreeSet<(u32, u32)> = BTreeSet::new();
        for (i, kept) in keep.iter_mut().enumerate() {
            if !*kept {
                continue;
            }
            let r = self.rec(i)?;
            if r.refused != NONE {
                *kept = false;
                if seen.insert((r.ce, r.share_dn)) {
                    refused.push((
                        r.seq,
                        RefusedClaim {
                            ce_id: self.string(r.ce)?.unwrap_or_default().to_string(),
                            share: self.string(r.share_dn)?.unwrap_or_default().to_string(),
                            reason: self.string(r.refused)?.unwrap_or_default().to_string(),
                        },
                    ));
                }
            }
        }
        refused.sort_by_key(|(seq, _)| *seq);
        Ok(refused.into_iter().map(|(_, c)| c).collect())
    }

    /// Contested CE IDs: offered under several services, kept from those that own them.
    fn refuse_contested(&self, keep: &mut [bool], claims: &mut Vec<RefusedClaim>) -> Result<(), IndexError> {
        let n = self.n;
        // Per CE ID: its first service, and whether another one offers it too.
        // A dense table by string id (each record's CE id was checked against the table above).
        let ids = self.strings().count;
        let mut services_of: Vec<(u32, bool)> = vec![(NONE, false); ids];
        for i in (0..n).filter(|&i| keep[i]) {
            let r = self.rec(i)?;
            if r.flags & flag::GLUE13 == 0 {
                let e = &mut services_of[r.ce as usize];
                if e.0 == NONE {
                    e.0 = r.service;
                }
                e.1 |= e.0 != r.service;
            }
        }
        let mut order: Vec<(u32, usize)> = Vec::new();
        for i in (0..n).filter(|&i| keep[i]) {
            let r = self.rec(i)?;
            if r.flags & flag::GLUE13 == 0 && services_of[r.ce as usize].1 {
                order.push((r.seq, i));
            }
        }
        order.sort_unstable();
        let mut contested_refused: BTreeSet<(u32, u32)> = BTreeSet::new();
        for (_, i) in order {
            let r = self.rec(i)?;
            if r.flags & flag::PROVEN == 0 {
                keep[i] = false;
                if contested_refused.insert((r.ce, r.share_dn)) {
                    claims.push(RefusedClaim {
                        ce_id: self.string(r.ce)?.unwrap_or_default().to_string(),
                        share: self.string(r.share_dn)?.unwrap_or_default().to_string(),
                        reason: "published by several services, and this share's service does not own it".into(),
                    });
                }
            }
        }
        Ok(())
    }

    /// A CE published in both schemas gets its GLUE 2.0 offer.
    fn drop_glue13_twins(&self, keep: &mut [bool]) -> Result<(), IndexError> {
        let (n, ids) = (self.n, self.strings().count);
        let mut glue2 = vec![false; ids];
        let mut glue13 = Vec::new();
        for i in (0..n).filter(|&i| keep[i]) {
            let r = self.rec(i)?;
            if r.flags & flag::GLUE13 == 0 {
                glue2[r.ce as usize] = true;
            } else {
                glue13.push((i, r.ce));
            }
        }
        for (i, ce) in glue13 {
            if glue2[ce as usize] {
                keep[i] = false;
            }
        }
        Ok(())
    }

    /// Phase 1 from the snapshot: what [`list_match`] gives over the offers
    /// the live path builds for `request` and `vo` (default: the job's
    /// VirtualOrganisation) from the same BDII data.
    pub fn list_match(&self, request: &Request, vo: Option<&str>, explain: bool) -> Result<IndexAnswer, IndexError> {
        let w = request.wanted(&self.meta.prefixes, vo);
        let (visible, refused_claims, closed_to_vo) = self.visible(&w)?;
        let candidates = if explain { visible.clone() } else { plan::Plan::new(request, self).cut(self, &visible)? };
        let job = JobView { names: w.names.clone(), vo: w.vo.clone(), vgpgpu: w.vgpgpu };
        let mut cols = Vec::new();
        match &w.names {
            Some(names) => {
                let mut seen = BTreeSet::new();
                for n in names.iter().map(String::as_str).chain([keys::REQUIREMENTS]) {
                    if seen.insert(n.to_ascii_lowercase()) {
                        cols.extend(self.column(n)?);
                    }
                }
            }
            None => {
                for name in self.attribute_names() {
                    cols.extend(self.column(name)?);
                }
            }
        }
        let (result, offers) = if explain {
            let offers: Vec<Offer> =
                candidates.iter().map(|&i| self.build_offer(i, &cols, Some(&job))).collect::<Result<_, _>>()?;
            (list_match(request, &offers, true), offers)
        } else if matches!(request.preset, Some(RankPreset::GpgpuMaxFree)) {
            list_match_best(request, candidates.iter().map(|&i| self.build_offer(i, &cols, Some(&job))))?
        } else {
            // Each survivor's ad lives only until it is matched, known by its CE's string id: a
            // CE keeps its best offer, and only those read their IDs from the string table.
            let ads = candidates.iter().map(|&i| {
                let r = self.rec(i)?;
                let ad = self.build_ad(i, &r, &cols, Some(&job))?;
                Ok((r.ce, (i, ad)))
            });
            let best = best_per_ce(request, ads, |(_, ad)| ad)?;
            ranked(best.into_iter().map(|(rank, (i, ad))| Ok((rank, self.offer_of(&self.rec(i)?, ad)?))))?
        };
        Ok(IndexAnswer {
            result,
            offers: Offers { offers, warnings: self.warnings.clone(), refused_claims, closed_to_vo },
            visible: visible.len(),
            candidates: candidates.len(),
        })
    }
}

/// Checks a snapshot's header (magic, version, length, the checksum of
/// everything but the string table and the columns), and gives its seven sections' (offset, length).
fn check_header(b: Bytes, path: &Path) -> Result<[(usize, usize); 7], IndexError> {
    let path = path.to_path_buf();
    let truncated = |what: &str| IndexError::Truncated { path: path.clone(), what: what.to_string() };
    let corrupt = |what: &str| IndexError::Corrupt { path: path.clone(), what: what.to_string() };
    if b.0.len() < 12 {
        return Err(if b.0.len() >= 8 && b.0[..8] != MAGIC || b.0.is_empty() {
            if b.0.is_empty() {
                truncated("empty file")
            } else {
                IndexError::BadMagic { path }
            }
        } else {
            truncated("header")
        });
    }
    if b.0[..8] != MAGIC {
        return Err(IndexError::BadMagic { path });
    }
    let version = b.u32(8).unwrap_or_default();
    if version != VERSION {
        return Err(IndexError::Version { path, found: version, expected: VERSION });
    }
    if b.0.len() < HEADER_LEN {
        return Err(truncated("header"));
    }
    let file_len = b.u64(16).unwrap_or_default();
    if (b.0.len() as u64) < file_len {
        return Err(truncated(&format!("{} of {file_len} bytes", b.0.len())));
    }
    if (b.0.len() as u64) > file_len {
        return Err(corrupt(&format!("{} bytes, the header says {file_len}", b.0.len())));
    }
    let section = |i: usize| -> Result<(usize, usize), IndexError> {
        let at = b.u64(24 + i * 16).unwrap_or(u64::MAX) as usize;
        let len = b.u64(32 + i * 16).unwrap_or(u64::MAX) as usize;
        b.slice(at, len).ok_or_else(|| corrupt("section out of bounds"))?;
        Ok((at, len))
    };
    let sections = [section(0)?, section(1)?, section(2)?, section(3)?, section(4)?, section(5)?, section(6)?];
    let ((strings_at, strings_len), (dir_at, dir_len)) = (sections[1], sections[6]);
    let crc = b.u32(12).unwrap_or_default();
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&b.0[16..strings_at]);
    hasher.update(b.0.get(strings_at + strings_len..dir_at + dir_len).ok_or_else(|| corrupt("sections"))?);
    if hasher.finalize() != crc {
        return Err(corrupt("checksum mismatch"));
    }
    if sections[5].1 != strings_len.div_ceil(STRING_BLOCK) * 4 {
        return Err(corrupt("string checks"));
    }
    Ok(sections)
}

/// The column directory at `dir_at`: each column's place, checked to lie in the file.
fn read_columns(
    b: Bytes,
    dir_at: usize,
    corrupt: &dyn Fn(&str) -> IndexError,
) -> Result<HashMap<String, ColumnAt>, IndexError> {
    let mut columns = HashMap::new();
    let count = b.u32(dir_at).ok_or_else(|| corrupt("column directory"))? as usize;
    let mut at = dir_at + 4;
    for _ in 0..count {
        let l = b.u16(at).ok_or_else(|| corrupt("column directory"))? as usize;
        let name = b
            .slice(at + 2, l)
            .and_then(|s| std::str::from_utf8(s).ok())
            .ok_or_else(|| corrupt("column directory"))?
            .to_string();
        at += 2 + l;
        let (off, len, crc) = (|| Some((b.u64(at)? as usize, b.u64(at + 8)? as usize, b.u32(at + 16)?)))()
            .ok_or_else(|| corrupt("column directory"))?;
        b.slice(off, len).ok_or_else(|| corrupt(&format!("column {name} out of bounds")))?;
        at += 20;
        columns.insert(
            name.to_ascii_lowercase(),
            ColumnAt { spelling: name, at: off, len, crc, checked: OnceLock::new() },
        );
    }
    Ok(columns)
}

/// A share closed to the job's VO: the string ids of its DN, ID and queue.
type ClosedIds = (u32, u32, u32);

/// What [`OfferIndex::visible`] finds: the offers the live path would build,
/// the claims it would refuse, and the shares it would leave out for the VO.
type Visible = (Vec<usize>, Vec<RefusedClaim>, Vec<ClosedShare>);

const RTE: &str = "GlueHostApplicationSoftwareRunTimeEnvironment";
const ACCESS_RULE: &str = "GlueCEAccessControlBaseRule";

/// What a job adds to the stored ads.
struct JobView {
    names: Option<BTreeSet<String>>,
    vo: Option<String>,
    vgpgpu: bool,
}

impl JobView {
    fn wants(&self, name: &str) -> bool {
        self.names.as_ref().is_none_or(|n| n.iter().any(|x| x.eq_ignore_ascii_case(name)))
    }
}

#[cfg(test)]
mod tests;
