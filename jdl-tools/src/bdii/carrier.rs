//! A carrier's CDER pairs: the `key=value` OtherInfo of an entity with
//! CDER keys, typed and range-checked. Malformed CDER data (an OtherInfo
//! without `=`, a key given twice, a count that is not a number) makes the
//! carrier unusable: the build skips it with the reason said here.
//!
//! [`CarrierReads`] are those reads made early, by the fetch, while the
//! scan that finds the carriers streams in.

use std::borrow::Cow;
use std::sync::{OnceLock, RwLock};

use foldhash::{HashMap, HashSet};

use crate::bdii::entry::{Entry, Values};
use crate::bdii::spelling::glue2_spelling;
use cder_classad::value::Value;
use cder_request::glue::{self, NUMERIC_SUFFIXES, VGPGPU_KEYS};

/// Types a published value: integer, real, boolean, else string.
pub fn typed(value: &str) -> Value {
    let v = value.trim();
    if let Ok(i) = v.parse::<i64>() {
        return Value::Int(i);
    }
    // Only plain decimal notation: Rust would also read "inf" and "NaN".
    if v.bytes().any(|b| b.is_ascii_digit()) && v.bytes().all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)) {
        if let Ok(r) = v.parse::<f64>() {
            if r.is_finite() {
                return Value::Real(r);
            }
        }
    }
    if v.eq_ignore_ascii_case("true") {
        return Value::Bool(true);
    }
    if v.eq_ignore_ascii_case("false") {
        return Value::Bool(false);
    }
    Value::Str(value.into())
}

/// Key suffixes that count things: whole numbers, never negative.
const COUNT_SUFFIXES: [&str; 11] = glue::WHOLE_NUMBER_SUFFIXES;

/// Instance counts whose sum cder relies on (free + used + offline devices).
const SUMMED_SUFFIXES: &[&str] = &["FreeInstances", "UsedInstances", "OfflineInstances"];

/// True for `[+-]digits`: a value the publisher meant as an integer.
fn integer_like(v: &str) -> bool {
    let d = v.strip_prefix(['+', '-']).unwrap_or(v);
    !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
}

/// Types a value read from a BDII entry, refusing integers that do not fit
/// in a ClassAd integer (i64) rather than reading them as something else.
pub fn typed_checked(value: &str) -> Result<Value, String> {
    let v = value.trim();
    if integer_like(v) {
        // Parsed once: most published values are integers.
        return v
            .parse::<i64>()
            .map(Value::Int)
            .map_err(|_| format!("{value:?} is out of range (not a 64-bit integer)"));
    }
    Ok(typed(value))
}

/// The numbers of an entry's GLUE attributes, as offers will copy them:
/// Err names the first attribute whose integer overflows, or that cder
/// reads as a count or a time and is negative.
pub(crate) fn check_glue_numbers(e: &Entry, read_as_counts: &[&str]) -> Result<(), String> {
    // Cheap when all is well (every offer's share and EE pass here); the
    // first bad attribute by name when not, so the warning is stable.
    let mut bad: Option<(&str, &str)> = None;
    for (lname, vals) in e.iter() {
        if !lname.starts_with("glue") {
            continue;
        }
        for v in vals {
            let t = v.trim();
            if integer_like(t) && t.parse::<i64>().is_err() && bad.is_none_or(|(n, _)| lname < n) {
                bad = Some((lname, v));
            }
        }
    }
    if let Some((name, v)) = bad {
        return Err(format!("{}: {v:?} is out of range (not a 64-bit integer)", glue2_spelling(name)));
    }
    for name in read_as_counts {
        if let Some(v) = e.first(name) {
            if v.trim().parse::<i64>().is_ok_and(|n| n < 0) {
                return Err(format!("{name}: {v:?} is out of range (negative)"));
            }
        }
    }
    Ok(())
}

/// Range checks on a carrier's CDER pairs, whichever way they were
/// published: counts are whole and non-negative, measures non-negative,
/// and the instance counts can be summed without overflow.
pub(crate) fn check_cder_numbers<K: std::borrow::Borrow<str>>(
    pairs: &Pairs<K>,
    prefixes: &[String],
) -> Result<(), String> {
    for (k, v) in pairs {
        let k: &str = k.borrow();
        let count = VGPGPU_KEYS.contains(&k)
            || prefixes.iter().any(|p| k.strip_prefix(p.as_str()).is_some_and(|r| COUNT_SUFFIXES.contains(&r)));
        let measure = must_be_number(k, prefixes);
        match v {
            Value::Int(n) if (count || measure) && *n < 0 => return Err(format!("{k}={n} is out of range (negative)")),
            Value::Real(r) if count => return Err(format!("{k}={r} is not a whole number")),
            Value::Real(r) if measure && *r < 0.0 => return Err(format!("{k}={r} is out of range (negative)")),
            _ => {}
        }
    }
    let mut key = String::new();
    for p in prefixes {
        let mut sum: i64 = 0;
        for s in SUMMED_SUFFIXES {
            key.clear();
            key.push_str(p);
            key.push_str(s);
            if let Some(Value::Int(n)) = pairs.get(key.as_str()) {
                sum = sum
                    .checked_add(*n)
                    .ok_or_else(|| format!("{key}: the sum of {p}{} overflows", SUMMED_SUFFIXES.join(" + ")))?;
            }
        }
    }
    Ok(())
}

/// A carrier's CDER pairs in key order: a sorted vector, not a B-tree (a
/// carrier has a dozen or two, and 10^4–10^5 carriers are read per query:
/// one allocation each instead of a tree's nodes).
#[derive(Clone, Debug)]
pub(crate) struct Pairs<K>(pub(crate) Vec<(K, Value)>);

impl<K> Default for Pairs<K> {
    fn default() -> Self {
        Pairs(Vec::new())
    }
}

impl<K: std::borrow::Borrow<str>> Pairs<K> {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Pairs(Vec::with_capacity(n))
    }

    pub(crate) fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    /// Sets a key's value; the old value, if the key was there.
    pub(crate) fn insert(&mut self, key: K, value: Value) -> Option<Value> {
        match self.find(key.borrow()) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> + '_ {
        self.0.iter().map(|(k, _)| k)
    }
}

impl<'p, K> IntoIterator for &'p Pairs<K> {
    type Item = (&'p K, &'p Value);
    type IntoIter = std::iter::Map<std::slice::Iter<'p, (K, Value)>, fn(&'p (K, Value)) -> (&'p K, &'p Value)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl<K> IntoIterator for Pairs<K> {
    type Item = (K, Value);
    type IntoIter = std::vec::IntoIter<(K, Value)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

fn is_cder_key(key: &str, prefixes: &[String]) -> bool {
    VGPGPU_KEYS.contains(&key) || prefixes.iter().any(|p| key.len() > p.len() && key.starts_with(p.as_str()))
}

fn must_be_number(key: &str, prefixes: &[String]) -> bool {
    VGPGPU_KEYS.contains(&key)
        || prefixes.iter().any(|p| key.strip_prefix(p.as_str()).is_some_and(|rest| NUMERIC_SUFFIXES.contains(&rest)))
}

/// Checks one `key`/`value` pair and adds it to `into`; Err says why the carrier is unusable.
pub(crate) fn add_pair<'k, K: std::borrow::Borrow<str> + From<&'k str>>(
    into: &mut Pairs<K>,
    key: &'k str,
    value: &str,
    prefixes: &[String],
) -> Result<(), String> {
    if !is_cder_key(key, prefixes) {
        return Ok(());
    }
    let v = typed_checked(value).map_err(|why| format!("{key}={why}"))?;
    if must_be_number(key, prefixes) && !matches!(v, Value::Int(_) | Value::Real(_)) {
        return Err(format!("{key}={value:?} is not a number"));
    }
    if into.insert(K::from(key), v).is_some() {
        return Err(format!("{key} is given twice"));
    }
    Ok(())
}

/// The CDER pairs of one carrier's OtherInfo. Any OtherInfo without `=`
/// on a carrier is malformed (a carrier is an entity with CDER keys).
fn other_info_pairs<'a>(e: &'a Entry, prefixes: &[String]) -> Result<Pairs<&'a str>, String> {
    // 10^4–10^5 carriers per query, nearly all well formed: read in one pass
    // and sorted once; any fault is then found again value by value, so that
    // the warning names the first one in the entry's order.
    let other_info = e.all("GLUE2EntityOtherInfo");
    let mut pairs = Vec::with_capacity(other_info.len());
    for v in other_info {
        let Some((k, val)) = v.split_once('=') else {
            return other_info_fault(other_info, prefixes);
        };
        let (k, val) = (k.trim(), val.trim());
        if !is_cder_key(k, prefixes) {
            continue;
        }
        match typed_checked(val) {
            Ok(v) if matches!(v, Value::Int(_) | Value::Real(_)) || !must_be_number(k, prefixes) => pairs.push((k, v)),
            _ => return other_info_fault(other_info, prefixes),
        }
    }
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    if pairs.windows(2).any(|w| w[0].0 == w[1].0) {
        return other_info_fault(other_info, prefixes);
    }
    Ok(Pairs(pairs))
}

/// The first fault of an OtherInfo list, met value by value as
/// [`add_pair`] meets them.
fn other_info_fault<'a>(other_info: Values<'a>, prefixes: &[String]) -> Result<Pairs<&'a str>, String> {
    let mut out = Pairs::with_capacity(other_info.len());
    for v in other_info {
        let Some((k, val)) = v.split_once('=') else {
            return Err(format!("OtherInfo {v:?} has no '='"));
        };
        add_pair(&mut out, k.trim(), val.trim(), prefixes)?;
    }
    Ok(out)
}

/// GLUE 2.0 attributes cder reads as counts or times (GLUE 1.3 names).
pub(crate) const GLUE2_COUNTS: &[&str] = &[
    "GLUE2ComputingShareFreeSlots",
    "GLUE2ComputingShareRunningJobs",
    "GLUE2ComputingShareWaitingJobs",
    "GLUE2ComputingShareTotalJobs",
    "GLUE2ComputingShareEstimatedAverageWaitingTime",
    "GLUE2ComputingShareEstimatedWorstWaitingTime",
    "GLUE2ComputingShareMaxSlotsPerJob",
    "GLUE2ComputingShareMaxWallTime",
    "GLUE2ComputingShareMaxCPUTime",
    "GLUE2ExecutionEnvironmentMainMemorySize",
    "GLUE2ExecutionEnvironmentVirtualMemorySize",
    "GLUE2ExecutionEnvironmentLogicalCPUs",
    "GLUE2ExecutionEnvironmentPhysicalCPUs",
    "GLUE2ExecutionEnvironmentCPUClockSpeed",
];

/// A carrier's CDER pairs as its OtherInfo publishes them, and (`checked`)
/// their range checks when no Extension can add to them.
pub(crate) struct CarrierRead<'a> {
    /// Borrowed from an early read, or read by the build.
    pub(crate) pairs: Result<Cow<'a, Pairs<&'a str>>, String>,
    pub(crate) checked: Option<Result<(), String>>,
}

impl<'a> CarrierRead<'a> {
    /// Reads a carrier's OtherInfo, and (`check`) range-checks it.
    pub(crate) fn of(e: &'a Entry, prefixes: &[String], check: bool) -> CarrierRead<'a> {
        let pairs = other_info_pairs(e, prefixes);
        let checked = pairs.as_ref().ok().filter(|_| check).map(|p| check_carrier(e, p, prefixes));
        CarrierRead { pairs: pairs.map(Cow::Owned), checked }
    }
}

/// The range checks of a carrier: its CDER pairs and its own GLUE numbers.
pub(crate) fn check_carrier(e: &Entry, pairs: &Pairs<&str>, prefixes: &[String]) -> Result<(), String> {
    check_cder_numbers(pairs, prefixes).and_then(|()| check_glue_numbers(e, GLUE2_COUNTS))
}

/// Carriers' CDER pairs read by [`Bdii::fetch`](crate::bdii::Bdii::fetch)
/// while their scan streamed in: the thread that waits on the scan reads each
/// batch while it is still in cache, and the build borrows these reads
/// instead of walking 10^4–10^5 entries again after the scan.
#[derive(Clone, Debug, Default)]
pub struct CarrierReads {
    /// What they were read with: a build with other prefixes or checks reads anew.
    prefixes: Vec<String>,
    check: bool,
    /// The shared copy of each key met ([`cder_key`]), without the lock.
    keys: HashMap<Box<str>, &'static str>,
    /// Per carrier of the fetch, in its order (None or missing: not read).
    reads: Vec<Option<EarlyRead>>,
}

/// One carrier read early.
#[derive(Clone, Debug)]
pub struct EarlyRead {
    /// The carrier's DN (address and length), so that a read never passes for another entry's.
    dn: (usize, usize),
    pairs: Result<Pairs<&'static str>, String>,
    checked: Option<Result<(), String>>,
}

/// At most this many distinct CDER keys are kept for early reads: a BDII
/// that publishes more has the carriers with the others read by the build.
pub(crate) const MAX_KEYS: usize = 4096;

/// The one shared copy of a CDER key (`GPGPUVendor`; a grid publishes a few
/// dozen), never freed, so that early reads outlive nothing; None past [`MAX_KEYS`].
pub(crate) fn cder_key(k: &str) -> Option<&'static str> {
    static KEYS: OnceLock<RwLock<HashSet<&'static str>>> = OnceLock::new();
    let keys = KEYS.get_or_init(Default::default);
    if let Some(k) = keys.read().unwrap_or_else(|e| e.into_inner()).get(k) {
        return Some(k);
    }
    let mut w = keys.write().unwrap_or_else(|e| e.into_inner());
    if let Some(k) = w.get(k) {
        return Some(k);
    }
    if w.len() >= MAX_KEYS {
        return None;
    }
    let k: &'static str = Box::leak(k.into());
    w.insert(k);
    Some(k)
}

impl CarrierReads {
    /// Reads for a build with these `prefixes`; `check`: range-check the
    /// carriers too (no Extension can add to their pairs).
    pub fn new(prefixes: Vec<String>, check: bool) -> CarrierReads {
        CarrierReads { prefixes, check, ..CarrierReads::default() }
    }

    /// Reads one carrier, to be [`filed`](Self::file) once its place is known
    /// (None: one of its keys is past [`MAX_KEYS`]; the build reads it).
    pub fn read(&mut self, e: &Entry) -> Option<EarlyRead> {
        let CarrierRead { pairs, checked } = CarrierRead::of(e, &self.prefixes, self.check);
        let pairs = match pairs {
            Ok(p) => {
                Ok(Pairs(p.into_owned().into_iter().map(|(k, v)| Some((self.key(k)?, v))).collect::<Option<Vec<_>>>()?))
            }
            Err(why) => Err(why),
        };
        Some(EarlyRead { dn: (e.dn.as_ptr() as usize, e.dn.len()), pairs, checked })
    }

    fn key(&mut self, k: &str) -> Option<&'static str> {
        if let Some(&shared) = self.keys.get(k) {
            return Some(shared);
        }
        let shared = cder_key(k)?;
        self.keys.insert(k.into(), shared);
        Some(shared)
    }

    /// Files `read` as the read of the fetch's carrier number `at`.
    pub fn file(&mut self, at: usize, read: Option<EarlyRead>) {
        if self.reads.len() <= at {
            self.reads.resize_with(at + 1, || None);
        }
        self.reads[at] = read;
    }

    /// These reads, when made as a build with `prefixes` and `check` would make them.
    pub(crate) fn usable(&self, prefixes: &[String], check: bool) -> Option<&CarrierReads> {
        (!self.reads.is_empty() && self.check == check && self.prefixes == prefixes).then_some(self)
    }

    /// The read of carrier `at`, when it was read and `e` is still that entry.
    pub(crate) fn get<'a>(&'a self, at: usize, e: &Entry) -> Option<CarrierRead<'a>> {
        let read = self.reads.get(at)?.as_ref().filter(|r| r.dn == (e.dn.as_ptr() as usize, e.dn.len()))?;
        let pairs = match &read.pairs {
            Ok(pairs) => Ok(Cow::Borrowed(pairs)),
            Err(why) => Err(why.clone()),
        };
        Some(CarrierRead { pairs, checked: read.checked.clone() })
    }
}
