//! ClassAd Resource Offers from BDII entries (thesis Listing 3.9), one per
//! CE queue (and ExecutionEnvironment, when a queue spans several kinds of
//! node).
//!
//! GLUE 2.0: ExecutionEnvironment → ComputingManager → ComputingService →
//! ComputingEndpoint and ComputingShare, joined in memory through their
//! foreign keys. An offer carries the CDER keys (OtherInfo and Extensions,
//! typed), the GLUE 2.0 attributes of its share and EE under their own
//! names, the GLUE 1.3 names JDLs are written against (`GlueCEUniqueID`,
//! `GlueCEStateFreeCPUs`, …), and the vGPGPU counts of the service's
//! ApplicationEnvironments as `TotalVGPGPU_<method>` / `FreeVGPGPU_<method>`.
//!
//! Malformed CDER data (an OtherInfo without `=`, a key given twice, a
//! count that is not a number) makes the carrier unusable: it is skipped
//! with a warning, never trusted and never fatal.

use std::borrow::Cow;
use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BTreeMap, BTreeSet};

// The joins hash 10^4–10^5 DNs per query: foldhash (seeded per process) instead of SipHash.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use crate::bdii::carrier::{
    add_pair, check_carrier, check_cder_numbers, check_glue_numbers, CarrierRead, CarrierReads, Pairs, GLUE2_COUNTS,
};
pub use crate::bdii::carrier::{typed, typed_checked};
use crate::bdii::entry::Values;
pub use crate::bdii::glue13::glue2_sources;
use crate::bdii::glue13::{EE_COUNTS, EE_STRINGS, SHARE_COUNTS, SHARE_MINUTES, SHARE_STRINGS};
use crate::bdii::query::{entity_id, parent_dn, service_dn, Entry, Fetched};
use crate::bdii::spelling::{glue13_spelling, glue2_spelling};
use crate::parts::in_parts;
use cder_classad::ast::{ClassAd, Expr, Pos, Sym};
use cder_classad::value::Value;
use cder_request::keys;
use std::sync::Arc;

/// The CDER key prefix of GPGPUs (design.md: other types use their own).
pub const DEFAULT_PREFIX: &str = glue::GPGPU_PREFIX;

// The key names the GLUE provider publishes (one vocabulary, `cder_request::glue`).
use cder_request::glue::{self, VGPGPU_KEYS};

/// `GLUE2EndpointInterfaceName` of ARC's REST interface (A-REX, ARC 6+).
pub const ARC_REST_INTERFACE: &str = "org.nordugrid.arcrest";

/// One Resource Offer.
#[derive(Clone, Debug)]
pub struct Offer {
    /// The CE (`GlueCEUniqueID`), what phase 2 restricts the job to.
    pub ce_id: String,
    /// The batch queue.
    pub queue: Option<String>,
    /// The GLUE 2.0 share, or the GLUE 1.3 CE.
    pub share_id: Option<String>,
    /// The ExecutionEnvironment (GLUE 1.3: SubCluster).
    pub ee_id: Option<String>,
    /// `"GLUE2"` or `"GLUE1.3"`.
    pub schema: &'static str,
    /// The ClassAd.
    pub ad: ClassAd,
    /// What settles it per job and VO ([`Offer::traits`]); None for an offer
    /// read back from the index, which has settled them. Boxed: offers are
    /// sorted and moved whole, 10^4 of them per build.
    pub traits: Option<Box<OfferTraits>>,
}

impl Offer {
    /// What settles it per job and VO (an offer read back from the index: none, all settled).
    pub fn traits(&self) -> &OfferTraits {
        static SETTLED: std::sync::OnceLock<OfferTraits> = std::sync::OnceLock::new();
        self.traits.as_deref().unwrap_or_else(|| SETTLED.get_or_init(OfferTraits::default))
    }
}

/// Offers and the warnings met while building them.
#[derive(Clone, Debug, Default)]
pub struct Offers {
    /// The offers, in a stable order (CE id, then EE).
    pub offers: Vec<Offer>,
    /// One line per skipped entry.
    pub warnings: Vec<String>,
    /// CE IDs a share published that its ComputingService does not own:
    /// left out of the offers, shown by `--explain`.
    pub refused_claims: Vec<RefusedClaim>,
    /// Shares with CDER data left out because no MappingPolicy opens them
    /// to the job's VO, shown by `--explain`.
    pub closed_to_vo: Vec<ClosedShare>,
}

/// A share left out because it is not open to the job's VO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClosedShare {
    /// `GLUE2ShareID`.
    pub share_id: String,
    /// `GLUE2ComputingShareMappingQueue`, when published.
    pub queue: Option<String>,
    /// The share's DN.
    pub dn: String,
    /// The VO it is not open to.
    pub vo: String,
}

/// A share that named a CE ID its own service cannot vouch for (another
/// site's CE, or one several services claim and none owns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedClaim {
    /// The CE ID the share named.
    pub ce_id: String,
    /// The share's DN.
    pub share: String,
    /// Why it was left out.
    pub reason: String,
}

/// Where a GLUE 2.0 share's CE ID came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CeIdSource {
    /// Built from the service's own endpoint URL and the share's queue.
    Endpoint,
    /// `CREAMCEId=` OtherInfo: the share's word only.
    Published,
    /// The share's own ID.
    ShareId,
}

/// Whether the service under `key` owns `ce_id`: its host is the host of one
/// of the service's endpoint URLs, or it is the service's own ID.
fn service_owns(ce_id: &str, key: &str, svc: &Service) -> bool {
    // Compared in place, case folded: every offer of a grid asks this.
    fn host(s: &str) -> Option<&str> {
        host_port(s).map(|hp| hp.split(':').next().unwrap_or_default())
    }
    let by_endpoint = host(ce_id).is_some_and(|h| {
        !h.is_empty()
            && svc
                .endpoints
                .iter()
                .filter_map(|e| e.first("GLUE2EndpointURL"))
                .any(|u| host(u).is_some_and(|u| u.eq_ignore_ascii_case(h)))
    });
    let service_id = match key.split_once(':') {
        Some(("id", id)) => Some(id),
        Some(("dn", dn)) => dn.split_once('=').map(|(_, rest)| rest.split(',').next().unwrap_or_default().trim()),
        _ => None,
    };
    by_endpoint || service_id.is_some_and(|id| !id.is_empty() && id.eq_ignore_ascii_case(ce_id))
}

/// The `host:port` of a URL (or of a CE ID, `host:port/queue`).
fn host_port(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let hp = rest.split('/').next()?;
    (!hp.is_empty()).then_some(hp)
}

/// The offer attributes a job may look up (lower-cased, interned), from
/// [`Fetched::names`]; None: every attribute. Matching and ranking read
/// nothing else, so an offer is built with those alone (a grid has 10^4
/// offers of some 40 attributes each).
struct Keep(Option<Vec<&'static str>>);

impl Keep {
    fn of(fetched: &Fetched) -> Keep {
        Keep(fetched.names.as_ref().map(|names| names.iter().map(|n| crate::bdii::entry::intern(n)).collect()))
    }

    fn wants(&self, name: &str) -> bool {
        self.0.as_ref().is_none_or(|names| names.iter().any(|n| n.len() == name.len() && n.eq_ignore_ascii_case(name)))
    }
}

/// The attribute names of the ads one thread builds, each interned once
/// with a copy of its spelling of that thread's own: the shared interner's
/// lock and spellings, touched per attribute by two threads, cost more than
/// building the ads.
#[derive(Default)]
struct AdNames(HashMap<Box<str>, (Sym, Arc<str>)>);

impl AdNames {
    fn get(&mut self, name: &str) -> (Sym, Arc<str>) {
        if let Some((sym, spelled)) = self.0.get(name) {
            return (*sym, spelled.clone());
        }
        let named = (Sym::of(name), Arc::<str>::from(name));
        self.0.insert(name.into(), named.clone());
        named
    }
}

/// An offer's ClassAd under construction: only the attributes `keep` wants
/// (and the offer's own `Requirements`) go in.
struct Ad<'k> {
    ad: ClassAd,
    keep: &'k Keep,
    names: &'k mut AdNames,
}

impl<'k> Ad<'k> {
    fn new(keep: &'k Keep, names: &'k mut AdNames) -> Ad<'k> {
        Ad { ad: ClassAd::new(), keep, names }
    }

    fn wants(&self, name: &str) -> bool {
        self.keep.wants(name)
    }

    fn insert(&mut self, name: &str, v: Value) {
        let (sym, spelled) = self.names.get(name);
        self.ad.insert_sym(sym, spelled, Expr::Lit(v), Pos::default());
    }

    fn put(&mut self, name: &str, v: Value) {
        if name == keys::REQUIREMENTS || self.wants(name) {
            self.insert(name, v);
        }
    }

    fn put_str(&mut self, name: &str, v: &str) {
        if self.wants(name) {
            self.insert(name, Value::Str(v.into()));
        }
    }
}

/// Copies an entry's GLUE 2.0 attributes (typed; lists when multi-valued).
fn copy_glue2(ad: &mut Ad, e: &Entry) {
    let mut names: Vec<(&str, Values)> = match &ad.keep.0 {
        // The job's few names looked up, not every attribute of the entry matched against
        // them (an entry holds each name once).
        Some(keep) => keep.iter().filter(|n| n.starts_with("glue2")).map(|n| (*n, e.all(n))).collect(),
        None => e.iter().collect(),
    };
    names.sort_unstable_by_key(|(n, _)| *n);
    for (lname, vals) in names {
        if !lname.starts_with("glue2") || lname == "glue2entityotherinfo" {
            continue;
        }
        // LDAP names are case-insensitive; ClassAd names too, so the lower-case key is fine,
        // but keep GLUE's spelling for display by taking it from the schema name when known.
        let name = glue2_spelling(lname);
        match (vals.len(), vals.first()) {
            (1, Some(v)) => ad.put(&name, typed(v)),
            (0, _) | (_, None) => {}
            _ => ad.put(&name, Value::List(vals.iter().map(typed).collect::<Vec<_>>().into())),
        }
    }
}

fn int_of(e: &Entry, name: &str) -> Option<i64> {
    e.first(name).and_then(|v| v.trim().parse().ok())
}

/// GLUE 1.3 names from a GLUE 2.0 share, EE and manager.
fn glue13_names(ad: &mut Ad, share: Option<&Entry>, ee: Option<&Entry>, manager: Option<&Entry>) {
    let keep = ad.keep;
    if let Some(s) = share {
        for &(g13, g2) in SHARE_COUNTS.iter().filter(|(g13, _)| keep.wants(g13)) {
            if let Some(v) = int_of(s, g2) {
                ad.put(g13, Value::Int(v));
            }
        }
        // GLUE 2.0 times are seconds, GLUE 1.3 policy times minutes.
        for &(g13, g2) in SHARE_MINUTES.iter().filter(|(g13, _)| keep.wants(g13)) {
            if let Some(v) = int_of(s, g2) {
                ad.put(g13, Value::Int(v / 60));
            }
        }
        if let Some(state) =
            Some(s).filter(|_| ad.wants("GlueCEStateStatus")).and_then(|s| s.first("GLUE2ComputingShareServingState"))
        {
            let mut c = state.chars();
            let cap = c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default();
            ad.put_str("GlueCEStateStatus", &cap);
        }
        if let Some(q) =
            Some(s).filter(|_| ad.wants("GlueCEName")).and_then(|s| s.first("GLUE2ComputingShareMappingQueue"))
        {
            ad.put_str("GlueCEName", q);
        }
    }
    if let Some(e) = ee {
        for &(g13, g2) in EE_COUNTS.iter().filter(|(g13, _)| keep.wants(g13)) {
            if let Some(v) = int_of(e, g2) {
                ad.put(g13, Value::Int(v));
            }
        }
        for &(g13, g2) in EE_STRINGS.iter().filter(|(g13, _)| keep.wants(g13)) {
            if let Some(v) = e.first(g2) {
                ad.put_str(g13, v);
            }
        }
    }
    if let Some(m) = manager.filter(|_| keep.wants("GlueCEInfoLRMSType") || keep.wants("GLUE2ManagerProductName")) {
        if let Some(p) = m.first("GLUE2ManagerProductName") {
            if ad.wants("GlueCEInfoLRMSType") {
                ad.put_str("GlueCEInfoLRMSType", &p.to_ascii_lowercase());
            }
            ad.put_str("GLUE2ManagerProductName", p);
        }
    }
}

/// The GLUE 2.0 ID of a carrier entity.
fn id_of(e: &Entry) -> Option<&str> {
    e.first("GLUE2ResourceID").or_else(|| e.first("GLUE2ShareID")).or_else(|| e.first("GLUE2ApplicationEnvironmentID"))
}

/// Where an entity belongs: its ComputingService's DN (lower-cased) when
/// its DN is under one, as every BDII publishes; otherwise (entries built
/// by hand, flat trees) the service its foreign keys name.
fn service_key<'a>(e: &'a Entry, managers_by_id: &HashMap<&str, &'a Entry>) -> Option<ServiceRef<'a>> {
    if let Some(s) = service_dn(&e.dn) {
        return Some(ServiceRef::Dn(Caseless(s)));
    }
    let fk = |names: &[&str]| names.iter().find_map(|n| e.first(n)).map(ServiceRef::Id);
    if e.is_a("GLUE2ComputingManager") || e.first("GLUE2ManagerID").is_some() {
        return fk(&["GLUE2ComputingManagerComputingServiceForeignKey", "GLUE2ManagerServiceForeignKey"]);
    }
    if e.first("GLUE2ShareID").is_some() {
        return fk(&["GLUE2ShareServiceForeignKey", "GLUE2ComputingShareComputingServiceForeignKey"]);
    }
    if e.first("GLUE2EndpointID").is_some() {
        return fk(&["GLUE2EndpointServiceForeignKey", "GLUE2ComputingEndpointComputingServiceForeignKey"]);
    }
    let m = manager_fk(e).and_then(|id| managers_by_id.get(id))?;
    if service_dn(&m.dn).is_some() {
        return None;
    }
    service_key(m, managers_by_id)
}

/// The manager an EE or ApplicationEnvironment names.
fn manager_fk(e: &Entry) -> Option<&str> {
    e.first("GLUE2ExecutionEnvironmentComputingManagerForeignKey")
        .or_else(|| e.first("GLUE2ResourceManagerForeignKey"))
        .or_else(|| e.first("GLUE2ApplicationEnvironmentComputingManagerForeignKey"))
}

/// A DN as LDAP compares it (ASCII case folded), hashed and compared without
/// a lower-cased copy: a grid's fetch has 10^4–10^5 of them.
#[derive(Clone, Copy, Debug)]
struct Caseless<'a>(&'a str);

impl PartialEq for Caseless<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0.eq_ignore_ascii_case(other.0)
    }
}

impl Eq for Caseless<'_> {}

impl std::hash::Hash for Caseless<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut folded = [0u8; 64];
        for chunk in self.0.as_bytes().chunks(folded.len()) {
            for (f, b) in folded.iter_mut().zip(chunk) {
                *f = b.to_ascii_lowercase();
            }
            state.write(&folded[..chunk.len()]);
        }
        state.write_u8(0xff);
    }
}

/// Which ComputingService an entity belongs to: the service's DN when its
/// own DN is under one, else the service ID its foreign keys name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum ServiceRef<'a> {
    Dn(Caseless<'a>),
    Id(&'a str),
}

impl ServiceRef<'_> {
    /// `dn:<lower-cased DN>` or `id:<ID>`: how offers and the index name the service.
    fn key(&self) -> String {
        match self {
            ServiceRef::Dn(dn) => format!("dn:{}", dn.0.to_ascii_lowercase()),
            ServiceRef::Id(id) => format!("id:{id}"),
        }
    }
}

/// A carrier of CDER data (an EE, share or AppEnv with CDER keys).
struct Carrier<'a> {
    entry: &'a Entry,
    /// Its GLUE2 ID.
    id: &'a str,
    service: Option<ServiceRef<'a>>,
    /// Its CDER pairs (OtherInfo and Extensions); None: unusable, skipped with a warning.
    pairs: Option<Cow<'a, Pairs<&'a str>>>,
    /// The range checks of `pairs`, when made already (no Extension can add to them).
    checked: Option<Result<(), String>>,
    /// Its share ID, when it is a ComputingShare.
    share_id: Option<&'a str>,
    /// An ExecutionEnvironment; an ApplicationEnvironment.
    ee: bool,
    app_env: bool,
}

/// What the build needs of one carrier entry, read on the threads of
/// [`read_carriers`] (every fact that needs the entry's own memory, read in
/// one visit: 10^4–10^5 entries do not fit in a cache).
struct CarrierFacts<'a> {
    read: CarrierRead<'a>,
    id: Option<&'a str>,
    service: Option<ServiceRef<'a>>,
    /// Its share ID, when it is a ComputingShare.
    share_id: Option<&'a str>,
    dn: HashedDn<'a>,
    ee: bool,
    app_env: bool,
}

/// Reads every carrier, in order, on a few threads: its OtherInfo, ID,
/// service, classes and hashed DN (10^4–10^5 carriers; the OtherInfo alone
/// was a third of building the offers). Pairs that
/// [`Bdii::fetch`](crate::bdii::Bdii::fetch) read already are taken from `early`.
fn read_carriers<'a>(
    carriers: &'a [Entry],
    early: &'a CarrierReads,
    prefixes: &[String],
    check: bool,
    managers_by_id: &HashMap<&str, &'a Entry>,
    dns: &DnHashes,
) -> Vec<CarrierFacts<'a>> {
    let early = early.usable(prefixes, check);
    let read = |at: usize, c: &'a Entry| {
        let read = early.and_then(|early| early.get(at, c)).unwrap_or_else(|| CarrierRead::of(c, prefixes, check));
        CarrierFacts {
            read,
            id: id_of(c),
            service: service_key(c, managers_by_id),
            share_id: c.is_a("GLUE2ComputingShare").then(|| c.first("GLUE2ShareID")).flatten(),
            dn: dns.of(&c.dn),
            ee: c.is_a("GLUE2ExecutionEnvironment"),
            app_env: c.is_a("GLUE2ApplicationEnvironment"),
        }
    };
    in_parts(carriers, |start, part| part.iter().enumerate().map(|(i, c)| read(start + i, c)).collect::<Vec<_>>())
        .into_iter()
        .flatten()
        .collect()
}

/// A DN with its [`Caseless`] hash worked out beforehand, on the threads
/// that read the carriers: filing 10^4–10^5 of them in one map on one
/// thread is then a probe each, not a hash of some 150 bytes.
#[derive(Clone, Copy, Debug)]
struct HashedDn<'a> {
    hash: u64,
    dn: Caseless<'a>,
}

impl PartialEq for HashedDn<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.dn == other.dn
    }
}

impl Eq for HashedDn<'_> {}

impl std::hash::Hash for HashedDn<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// How DNs are hashed for one build (seeded per process, as foldhash's maps are).
#[derive(Default)]
struct DnHashes(foldhash::fast::RandomState);

impl DnHashes {
    fn of<'a>(&self, dn: &'a str) -> HashedDn<'a> {
        use std::hash::BuildHasher;
        HashedDn { hash: self.0.hash_one(Caseless(dn)), dn: Caseless(dn) }
    }
}

/// Hands a [`HashedDn`]'s hash to the map as it is.
#[derive(Default)]
struct PassThrough(u64);

impl std::hash::Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only [`HashedDn`] is hashed with this: a u64.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Carriers by DN, each DN hashed before it is filed ([`HashedDn`]).
type ByDn<'a> = std::collections::HashMap<HashedDn<'a>, usize, std::hash::BuildHasherDefault<PassThrough>>;

/// Who offers are built for: a job of one VO (None: a job that names
/// none), or every VO at once (the index's refresh, which settles each job's
/// VO when it answers). A share closed to the job's VO is left out before it
/// is built, and says nothing (warnings included) but that it is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Audience<'v> {
    /// A job of this VO.
    Vo(Option<&'v str>),
    /// Every VO.
    EveryVo,
}

/// The carriers of a fetch, one per DN, their CDER pairs merged from
/// OtherInfo and Extensions and checked (stage 1 of the pipeline).
struct Carriers<'a> {
    list: Vec<Carrier<'a>>,
    by_dn: ByDn<'a>,
    /// How `by_dn`'s DNs were hashed.
    dns: DnHashes,
}

impl<'a> Carriers<'a> {
    /// Reads and files every carrier of `fetched`; an unusable one keeps its slot,
    /// its pairs None, and a warning says why.
    fn read(fetched: &'a Fetched, prefixes: &[String], grid: &Grid<'a>, warnings: &mut Vec<String>) -> Carriers<'a> {
        let mut list: Vec<Carrier> = Vec::with_capacity(fetched.carriers.len());
        let dns = DnHashes::default();
        let mut by_dn: ByDn = ByDn::with_capacity_and_hasher(fetched.carriers.len(), Default::default());
        let check = fetched.extensions.is_empty();
        let facts =
            read_carriers(&fetched.carriers, &fetched.carrier_reads, prefixes, check, &grid.managers_by_id, &dns);
        for (c, f) in fetched.carriers.iter().zip(facts) {
            let Some(id) = f.id else {
                warnings.push(format!("{}: skipped: no GLUE2 ID", c.dn));
                continue;
            };
            // One carrier per DN: the first entry wins.
            match by_dn.entry(f.dn) {
                MapEntry::Occupied(_) => continue,
                MapEntry::Vacant(slot) => slot.insert(list.len()),
            };
            let pairs = f
                .read
                .pairs
                .map_err(|why| warnings.push(format!("{}: skipped: malformed OtherInfo: {why}", c.dn)))
                .ok();
            let (service, checked, share_id, ee, app_env) = (f.service, f.read.checked, f.share_id, f.ee, f.app_env);
            list.push(Carrier { entry: c, id, service, pairs, checked, share_id, ee, app_env });
        }
        let mut carriers = Carriers { list, by_dn, dns };
        carriers.add_extensions(&fetched.extensions, prefixes, warnings);
        carriers.check(prefixes, warnings);
        carriers
    }

    /// The carrier filed under `dn`.
    fn at_dn(&self, dn: &str) -> Option<&Carrier<'a>> {
        self.by_dn.get(&self.dns.of(dn)).map(|&i| &self.list[i])
    }

    /// Extensions: a key set twice on one entity with different values is malformed;
    /// the same key and value in OtherInfo and an Extension (hybrid publishing) is not.
    fn add_extensions(&mut self, extensions: &'a [Entry], prefixes: &[String], warnings: &mut Vec<String>) {
        if extensions.is_empty() {
            return;
        }
        // Carriers by (service, ID) and by ID alone, for Extensions not placed under their entity.
        let mut by_service_id: HashMap<(Option<ServiceRef>, &str), Vec<usize>> = HashMap::new();
        by_service_id.reserve(2 * self.list.len());
        for (i, c) in self.list.iter().enumerate() {
            by_service_id.entry((c.service, c.id)).or_default().push(i);
            by_service_id.entry((None, c.id)).or_default().push(i);
        }
        // By carrier, merged in the carriers' order.
        let mut from_ext: BTreeMap<usize, Pairs<&str>> = BTreeMap::new();
        for x in extensions {
            let (Some(k), Some(v)) = (x.first("GLUE2ExtensionKey"), x.first("GLUE2ExtensionValue")) else {
                warnings.push(format!("{}: skipped: Extension without key or value", x.dn));
                continue;
            };
            let parent = parent_dn(&x.dn).and_then(|p| self.by_dn.get(&self.dns.of(p)).copied());
            let service = service_dn(&x.dn).map(|s| ServiceRef::Dn(Caseless(s)));
            for fk in x.all("GLUE2ExtensionEntityForeignKey") {
                // The entity above the Extension; else the one of that ID in its service; else,
                // for an Extension outside any service, the only one of that ID anywhere (one
                // inside a service speaks only for that service's entities).
                let unique =
                    |key: &(Option<ServiceRef>, &str)| by_service_id.get(key).filter(|v| v.len() == 1).map(|v| v[0]);
                let target = parent
                    .filter(|&p| self.list[p].id == fk)
                    .or_else(|| unique(&(service, fk)))
                    .or_else(|| unique(&(None, fk)).filter(|_| service.is_none()));
                let Some(target) = target.filter(|&t| self.list[t].pairs.is_some()) else { continue };
                if let Err(why) = add_pair(from_ext.entry(target).or_default(), k, v, prefixes) {
                    warnings
                        .push(format!("{}: skipped: malformed Extension of {fk}: GLUE2ExtensionValue: {why}", x.dn));
                    self.list[target].pairs = None;
                }
            }
        }
        for (t, pairs) in from_ext {
            let carrier = &mut self.list[t];
            let Some(slot) = carrier.pairs.as_mut().map(Cow::to_mut) else { continue };
            for (k, v) in pairs {
                if let Some(old) = slot.get(k) {
                    if old.identical(&v) != Some(true) {
                        let dn = &carrier.entry.dn;
                        warnings.push(format!("{dn}: skipped: {k} is {old} in OtherInfo but {v} in an Extension"));
                        carrier.pairs = None;
                        break;
                    }
                }
                slot.insert(k, v);
            }
        }
    }

    /// The range checks of every carrier's pairs (made early when no Extension could add to them).
    fn check(&mut self, prefixes: &[String], warnings: &mut Vec<String>) {
        for c in &mut self.list {
            let Some(pairs) = &c.pairs else { continue };
            let checked = c.checked.take().unwrap_or_else(|| check_carrier(c.entry, pairs, prefixes));
            if let Err(why) = checked {
                warnings.push(format!("{}: skipped: {why}", c.entry.dn));
                c.pairs = None;
            }
        }
    }
}

/// The managers of a fetch by ID: what [`service_key`] follows for entities
/// outside any service's DN tree.
struct Grid<'a> {
    managers_by_id: HashMap<&'a str, &'a Entry>,
}

impl<'a> Grid<'a> {
    fn of(fetched: &'a Fetched) -> Grid<'a> {
        Grid { managers_by_id: fetched.managers.iter().filter_map(|m| Some((m.first("GLUE2ManagerID")?, m))).collect() }
    }
}

/// A share met in a fetch, with its own CDER pairs (when it carries keys) and its service.
#[derive(Clone, Copy)]
struct PlacedShare<'c> {
    entry: &'c Entry,
    id: &'c str,
    pairs: Option<&'c Pairs<&'c str>>,
    service: usize,
}

/// Services, managers, endpoints, EEs, AppEnvs and MappingPolicies joined
/// under each service's DN tree, and the shares placed in them (stage 2).
struct Joined<'c> {
    services: Services<'c>,
    /// The CDER pairs of each offered EE, by the entry itself: an EE is one
    /// entry per DN, and offers of a grid look them up 10^4 times.
    ee_pairs: HashMap<usize, &'c Pairs<&'c str>>,
    /// Policies outside any service: the VOs that open each share ID anywhere.
    open_anywhere: BTreeMap<&'c str, BTreeSet<&'c str>>,
    /// Whether the fetch read MappingPolicies at all (none read: every share is open).
    policies: bool,
    shares: Vec<PlacedShare<'c>>,
    /// `<prefix>Vendor` with its prefix: a vendor's offers name it in their RTE list (`NvidiaGPGPU`).
    vendors: Vec<(String, &'c str)>,
}

/// The address of an entry, what [`Joined::ee_pairs`] and the share-blind key use.
fn addr(e: &Entry) -> usize {
    std::ptr::from_ref(e) as usize
}

impl<'c> Joined<'c> {
    fn join<'a: 'c>(
        fetched: &'a Fetched,
        prefixes: &'c [String],
        carriers: &'c Carriers<'a>,
        grid: &Grid<'a>,
    ) -> Joined<'c> {
        let mut joined = Joined {
            vendors: prefixes.iter().map(|p| (format!("{p}Vendor"), p.as_str())).collect(),
            services: Services::default(),
            ee_pairs: HashMap::new(),
            open_anywhere: BTreeMap::new(),
            policies: fetched.policies.is_some(),
            shares: Vec::new(),
        };
        joined.add_services(fetched, carriers, grid);
        joined.add_policies(fetched.policies.as_deref().unwrap_or_default());
        joined.shares = joined.place_shares(fetched, carriers, grid);
        for svc in &mut joined.services.list {
            svc.ees.sort_by_key(|&(id, _)| id);
            svc.endpoints.sort_by(|a, b| a.first("GLUE2EndpointID").cmp(&b.first("GLUE2EndpointID")));
            svc.shared_vgpgpu = svc.vgpgpu.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            svc.shared_apps = svc.apps.iter().cloned().collect();
        }
        joined
    }

    /// Managers, endpoints, and the EEs and AppEnvs with CDER data, by service.
    fn add_services<'a: 'c>(&mut self, fetched: &'a Fetched, carriers: &'c Carriers<'a>, grid: &Grid<'a>) {
        let services = &mut self.services;
        for m in &fetched.managers {
            if let Some(key) = service_key(m, &grid.managers_by_id) {
                services.slot(key).managers.push(m);
            }
        }
        for e in &fetched.endpoints {
            if let Some(key) = service_key(e, &grid.managers_by_id) {
                services.slot(key).endpoints.push(e);
            }
        }
        // In DN order (ties of EE IDs keep it).
        let mut placed: Vec<&Carrier> =
            carriers.list.iter().filter(|c| c.pairs.is_some() && c.service.is_some() && (c.ee || c.app_env)).collect();
        placed.sort_by_cached_key(|c| c.entry.dn.to_ascii_lowercase());
        for c in placed {
            let (Some(pairs), Some(key), e) = (&c.pairs, c.service, c.entry) else { continue };
            // An EE or AppEnv counts only under a manager the BDII publishes.
            if !e.is_a("GLUE2ComputingShare") && services.get(key).is_none_or(|s| s.managers.is_empty()) {
                continue;
            }
            let svc = services.slot(key);
            if e.is_a("GLUE2ExecutionEnvironment") && pairs.keys().any(|k| !VGPGPU_KEYS.contains(k)) {
                svc.ees.push((id_of(e), e));
                self.ee_pairs.insert(addr(e), pairs);
            }
            if e.is_a("GLUE2ApplicationEnvironment") {
                let id = id_of(e).unwrap_or_default();
                let method = e.first("GLUE2ApplicationEnvironmentAppName").unwrap_or(id).to_string();
                svc.apps.insert(method.clone());
                for (k, v) in &**pairs {
                    if VGPGPU_KEYS.contains(k) {
                        svc.vgpgpu.insert(format!("{k}_{method}"), v.clone());
                    }
                }
            }
        }
    }

    /// Policies: under their share (DN tree), else by the share IDs they name in their
    /// service; a policy outside any service opens shares of that ID anywhere.
    fn add_policies(&mut self, policies: &'c [Entry]) {
        for p in policies {
            let vos: Vec<&str> = p.all("GLUE2PolicyRule").iter().filter_map(|r| r.strip_prefix("VO:")).collect();
            let open_to = match service_dn(&p.dn) {
                Some(s) => &mut self.services.slot(ServiceRef::Dn(Caseless(s))).open_to,
                None => &mut self.open_anywhere,
            };
            for share in p.all("GLUE2MappingPolicyShareForeignKey") {
                open_to.entry(share).or_default().extend(vos.iter().copied());
            }
        }
    }

    /// Each share with its carrier and service, read on a few threads, then met in
    /// order here (this makes the services' slots; a service's shares usually come
    /// together), so that the offers can then be built on several threads.
    fn place_shares<'a: 'c>(
        &mut self,
        fetched: &'a Fetched,
        carriers: &'c Carriers<'a>,
        grid: &Grid<'a>,
    ) -> Vec<PlacedShare<'c>> {
        let read = if fetched.shares.is_empty() && carriers.list.len() == fetched.carriers.len() {
            // Every carrier kept, each DN once (a fetch of keys on shares): the
            // shares are the carriers that are shares, each its own carrier, its service known.
            in_parts(&carriers.list, |_, part| {
                part.iter()
                    .filter(|c| c.pairs.is_some())
                    .filter_map(|c| Some((c.entry, c.share_id?, c.pairs.as_deref(), c.service?)))
                    .collect::<Vec<_>>()
            })
        } else {
            let mut shares: Vec<&Entry> = Vec::new();
            let mut seen: HashSet<Caseless> = HashSet::with_capacity(fetched.shares.len() + fetched.carriers.len());
            for s in fetched.shares.iter().chain(fetched.carriers.iter().filter(|c| c.is_a("GLUE2ComputingShare"))) {
                if seen.insert(Caseless(&s.dn)) {
                    shares.push(s);
                }
            }
            in_parts(&shares, |_, part| {
                part.iter()
                    .filter_map(|&share| {
                        let share_id = share.first("GLUE2ShareID")?;
                        let carrier = carriers.at_dn(&share.dn);
                        if carrier.is_some_and(|c| c.pairs.is_none()) {
                            return None;
                        }
                        let pairs = carrier.and_then(|c| c.pairs.as_deref());
                        Some((share, share_id, pairs, service_key(share, &grid.managers_by_id)?))
                    })
                    .collect::<Vec<_>>()
            })
        };
        let mut placed = Vec::with_capacity(read.iter().map(Vec::len).sum());
        let mut last: Option<(ServiceRef, usize)> = None;
        for (entry, id, pairs, key) in read.into_iter().flatten() {
            let service = match last {
                Some((k, i)) if k == key => i,
                _ => self.services.index(key),
            };
            last = Some((key, service));
            placed.push(PlacedShare { entry, id, pairs, service });
        }
        placed
    }

    /// The CDER prefix of a `<prefix>Vendor` key.
    fn vendor_prefix(&self, key: &str) -> Option<&str> {
        self.vendors.iter().find(|(k, _)| k == key).map(|&(_, p)| p)
    }

    /// Whether a job of `audience` may use the share (what its MappingPolicies open).
    fn open(&self, svc: &Service, share_id: &str, audience: Audience) -> bool {
        let vo = match audience {
            Audience::EveryVo => return true,
            Audience::Vo(vo) => vo,
        };
        let opens = |vos: Option<&BTreeSet<&str>>| vos.is_some_and(|vos| vo.is_none_or(|vo| vos.contains(vo)));
        !self.policies || opens(svc.open_to.get(share_id)) || opens(self.open_anywhere.get(share_id))
    }

    /// The VOs that open the share, in its service or anywhere.
    fn open_to<'s>(&'s self, svc: &'s Service<'s>, share_id: &str) -> impl Iterator<Item = &'s str> + 's {
        let vos = svc.open_to.get(share_id).into_iter().chain(self.open_anywhere.get(share_id));
        vos.flatten().copied()
    }
}
/// The services of a fetch, each met once by its [`ServiceRef`].
#[derive(Default)]
struct Services<'a> {
    by_ref: HashMap<ServiceRef<'a>, usize>,
    list: Vec<Service<'a>>,
}

impl<'a> Services<'a> {
    fn index(&mut self, r: ServiceRef<'a>) -> usize {
        let list = &mut self.list;
        *self.by_ref.entry(r).or_insert_with(|| {
            list.push(Service { key: r.key().into(), ..Service::default() });
            list.len() - 1
        })
    }

    fn slot(&mut self, r: ServiceRef<'a>) -> &mut Service<'a> {
        let i = self.index(r);
        &mut self.list[i]
    }

    fn get(&self, r: ServiceRef<'a>) -> Option<&Service<'a>> {
        self.by_ref.get(&r).map(|&i| &self.list[i])
    }
}

/// Everything known about one ComputingService.
#[derive(Default)]
struct Service<'a> {
    /// `dn:…` or `id:…` ([`ServiceRef::key`]).
    key: Arc<str>,
    managers: Vec<&'a Entry>,
    endpoints: Vec<&'a Entry>,
    /// EEs with CDER data.
    ees: Vec<(Option<&'a str>, &'a Entry)>,
    /// `TotalVGPGPU_<method>` / `FreeVGPGPU_<method>`.
    vgpgpu: BTreeMap<String, Value>,
    /// vGPGPU methods (RTE tags).
    apps: BTreeSet<String>,
    /// Per share ID its MappingPolicies name, the VOs they open it to.
    open_to: BTreeMap<&'a str, BTreeSet<&'a str>>,
    /// `vgpgpu` and `apps` as every offer of the service shares them.
    shared_vgpgpu: Arc<[(String, Value)]>,
    shared_apps: Arc<[String]>,
}

impl Service<'_> {
    /// The manager an EE names, else the service's first.
    fn manager_of(&self, e: &Entry) -> Option<&Entry> {
        let fk = manager_fk(e);
        self.managers
            .iter()
            .find(|m| m.first("GLUE2ManagerID").is_some_and(|id| Some(id) == fk))
            .or_else(|| self.managers.first())
            .copied()
    }
}

/// What settles an offer per job and VO beside its ad: what the live path
/// decides for one job (and [`build_offers`] settles), and what the local
/// index records so that one build over every VO and every CDER key answers
/// as the live path's build for one job and one VO would (`crate::index`).
/// Parts many offers share are shared, not copied.
#[derive(Clone, Debug, Default)]
pub struct OfferTraits {
    /// The ComputingService the offer belongs to (`dn:…` or `id:…`); GLUE 1.3: empty.
    pub service: Arc<str>,
    /// Whether that service owns the offer's CE ID (its endpoint names the host).
    pub proven: bool,
    /// The share's (GLUE 1.3: the GlueCE's) DN, for refused claims.
    pub share_dn: Arc<str>,
    /// The VOs whose MappingPolicy rules (`VO:<name>`) open the share; GLUE
    /// 1.3: the CE's `GlueCEAccessControlBaseRule` `VO:` names.
    pub open_to: Arc<BTreeSet<String>>,
    /// The EE's DN, lower-cased: offers of one CE and EE are built once for a
    /// job that names nothing of the share.
    pub ee_dn: Option<Arc<str>>,
    /// The CDER keys of the EE (GLUE 1.3: the SubCluster's tag keys).
    pub ee_keys: Arc<BTreeSet<String>>,
    /// The CDER keys of the share itself (None: the share carries none).
    pub share_keys: Option<Arc<BTreeSet<String>>>,
    /// GLUE 1.3: a tag starts or ends with a CDER prefix (`GPGPU…`, `NvidiaGPGPU`).
    pub prefix_tagged: bool,
    /// GLUE 1.3: a tag publishes a vGPGPU count (`rCUDATotalVGPGPU=8`).
    pub vgpgpu_tagged: bool,
    /// GLUE 2.0: the offer of a share that carries CDER keys, without the EEs
    /// it names: what the live build makes when the job's keys fetch the
    /// share and none of those EEs (`ee_keys`: all their keys).
    pub share_only: bool,
    /// GLUE 2.0: the service's vGPGPU counts (`TotalVGPGPU_rCUDA`), added for vGPGPU jobs.
    pub vgpgpu: Arc<[(String, Value)]>,
    /// GLUE 2.0: the service's vGPGPU methods, added to the RTE list for vGPGPU jobs.
    pub apps: Arc<[String]>,
    /// Why the share's claim to its CE ID is refused (the offer is never
    /// shown; the claim is, when the share is open to the job's VO).
    pub refused: Option<String>,
    /// The order the build meets the offer in (refused claims are listed in it).
    pub seq: usize,
}

/// What a run of shares gave: their offers and what was said of them, in
/// the shares' order.
#[derive(Default)]
struct ShareOffers {
    warnings: Vec<String>,
    closed: Vec<ClosedShare>,
    offers: Vec<BuiltOffer>,
}

/// One offer of a share, with the share-blind key `(CE ID, EE)` that dedupes it, when it has one.
struct BuiltOffer {
    offer: Offer,
    blind: Option<(String, usize)>,
}

/// What one build thread keeps across its shares: the interned names of the
/// ads, and the traits every offer of one EE or key set shares.
#[derive(Default)]
struct PartCache<'c> {
    names: AdNames,
    key_sets: HashMap<Vec<&'c str>, Arc<BTreeSet<String>>>,
    scratch: Vec<&'c str>,
    ees: HashMap<usize, (Arc<str>, Arc<BTreeSet<String>>)>,
    /// First-wins share-blind keys within the part; the merge settles them across parts.
    built: HashSet<(String, usize)>,
}

impl<'c> PartCache<'c> {
    /// The keys of `pairs` as one shared set.
    fn keys(&mut self, pairs: impl IntoIterator<Item = &'c Pairs<&'c str>>) -> Arc<BTreeSet<String>> {
        self.shared(pairs.into_iter().flat_map(|p| p.keys().copied()))
    }

    /// `items` as one shared set: most carriers of a grid have the same keys,
    /// most shares are open to the same VOs, so a set is made once per
    /// thread, not once per offer.
    fn shared(&mut self, items: impl IntoIterator<Item = &'c str>) -> Arc<BTreeSet<String>> {
        self.scratch.clear();
        self.scratch.extend(items);
        self.scratch.sort_unstable();
        self.scratch.dedup();
        if let Some(set) = self.key_sets.get(self.scratch.as_slice()) {
            return set.clone();
        }
        let set: Arc<BTreeSet<String>> = Arc::new(self.scratch.iter().map(|k| k.to_string()).collect());
        self.key_sets.insert(self.scratch.clone(), set.clone());
        set
    }

    /// An EE's lower-cased DN and its keys.
    fn ee(&mut self, e: &Entry, pairs: Option<&'c Pairs<&'c str>>) -> (Arc<str>, Arc<BTreeSet<String>>) {
        if let Some(known) = self.ees.get(&addr(e)) {
            return known.clone();
        }
        let known = (Arc::from(e.dn.to_ascii_lowercase()), self.keys(pairs));
        self.ees.insert(addr(e), known.clone());
        known
    }
}

/// A share about to be offered: what every offer of it shares.
struct ShareDraft<'c> {
    share: PlacedShare<'c>,
    svc: &'c Service<'c>,
    /// The EEs it offers (none: the share alone).
    ees: Vec<&'c Entry>,
    queue: Option<&'c str>,
    endpoint: Option<&'c Entry>,
    manager: Option<&'c Entry>,
    ce_id: String,
    /// Whether its service owns `ce_id`.
    proven: bool,
    /// Why its claim to `ce_id` is refused.
    refused: Option<String>,
    /// Its DN and the VOs that open it, shared by its offers' traits.
    /// Made once an offer of the share is built (VO shares a job cannot tell apart are not).
    dn: Option<Arc<str>>,
    open_to: Option<Arc<BTreeSet<String>>>,
}

impl<'c> Joined<'c> {
    /// Stage 3: every offer of every placed share, built on a few threads and
    /// merged in the shares' order; VO shares a job cannot tell apart built once.
    fn offers(&self, keep: &Keep, audience: Audience, blind: bool, out: &mut Offers) {
        let parts = in_parts(&self.shares, |_, part| {
            let mut got = ShareOffers::default();
            let mut cache = PartCache::default();
            for &share in part {
                let Some(mut d) = self.draft(share, audience, &mut got) else { continue };
                self.offers_of(&mut d, keep, blind, &mut cache, &mut got);
            }
            got
        });
        let mut built: HashSet<(String, usize)> = HashSet::new();
        for part in parts {
            out.warnings.extend(part.warnings);
            out.closed_to_vo.extend(part.closed);
            for b in part.offers {
                if b.blind.is_some_and(|key| !built.insert(key)) {
                    continue;
                }
                let mut offer = b.offer;
                if let Some(t) = offer.traits.as_mut() {
                    t.seq = out.offers.len();
                }
                out.offers.push(offer);
            }
        }
    }

    /// What every offer of `share` shares, or None when it has none to give (or
    /// is closed to `audience`, or unusable: then `got` says so).
    fn draft<'s>(
        &'s self,
        share: PlacedShare<'s>,
        audience: Audience,
        got: &mut ShareOffers,
    ) -> Option<ShareDraft<'s>> {
        let (e, svc) = (share.entry, &self.services.list[share.service]);
        // A share names one or two EEs and endpoints: looked up in place, not collected.
        let (ee_fks, resource_fks) =
            (e.all("GLUE2ComputingShareExecutionEnvironmentForeignKey"), e.all("GLUE2ShareResourceForeignKey"));
        let named = |id: &str| ee_fks.iter().chain(resource_fks.iter()).any(|n| n == id);
        let names_none = ee_fks.is_empty() && resource_fks.is_empty();
        let ees: Vec<&Entry> =
            svc.ees.iter().filter(|(id, _)| names_none || id.is_some_and(named)).map(|&(_, e)| e).collect();
        if ees.is_empty() && share.pairs.is_none() {
            return None;
        }
        if !self.open(svc, share.id, audience) {
            // A share that would be offered, but not to this VO: `--explain` says so.
            if let Audience::Vo(Some(vo)) = audience {
                got.closed.push(ClosedShare {
                    share_id: share.id.to_string(),
                    queue: e.first("GLUE2ComputingShareMappingQueue").map(str::to_string),
                    dn: e.dn.clone(),
                    vo: vo.to_string(),
                });
            }
            return None;
        }
        if share.pairs.is_none() {
            // A share offering an EE's devices: its own numbers are read too.
            if let Err(why) = check_glue_numbers(e, GLUE2_COUNTS) {
                got.warnings.push(format!("{}: skipped: {why}", e.dn));
                return None;
            }
        }
        let queue = e.first("GLUE2ComputingShareMappingQueue");
        let (endpoint_fks, computing_endpoint_fks) =
            (e.all("GLUE2ShareEndpointForeignKey"), e.all("GLUE2ComputingShareComputingEndpointForeignKey"));
        let named_endpoint = |id: &str| endpoint_fks.iter().chain(computing_endpoint_fks.iter()).any(|n| n == id);
        let endpoint = svc
            .endpoints
            .iter()
            .find(|e| e.first("GLUE2EndpointID").is_some_and(named_endpoint))
            .or_else(|| svc.endpoints.first())
            .copied();
        let manager = ees.first().and_then(|e| svc.manager_of(e)).or_else(|| svc.managers.first().copied());
        let (ce_id, source) = ce_unique_id(e, endpoint, manager, queue, &svc.endpoints);
        // Phase 2 restricts a job to CE IDs: an offer without one can never be chosen.
        if ce_id.trim().is_empty() {
            got.warnings
                .push(format!("{}: skipped: no CE ID (CREAMCEId, endpoint URL and queue, or GLUE2ShareID)", e.dn));
            return None;
        }
        // A share speaks only for its own service's CEs: another site could
        // otherwise divert jobs to its queue, or fake a CE's GPUs.
        let proven = source == CeIdSource::Endpoint || service_owns(&ce_id, &svc.key, svc);
        let host_form = ce_id.contains(':') || ce_id.contains('/');
        let refused = (!proven && (source == CeIdSource::Published || host_form)).then(|| {
            format!(
                "published by a share of another service ({}): the CE's host is none of that service's endpoints",
                svc.key.split_once(':').map_or(&*svc.key, |(_, k)| k)
            )
        });
        Some(ShareDraft { share, svc, ees, queue, endpoint, manager, ce_id, proven, refused, dn: None, open_to: None })
    }

    /// The offers of one share: one per EE it offers (else the share alone),
    /// and, when the share carries keys of its own, the share without its EEs
    /// too (what a job whose keys fetch the share and none of its EEs is offered).
    fn offers_of<'s>(
        &'s self,
        d: &mut ShareDraft<'s>,
        keep: &Keep,
        blind: bool,
        cache: &mut PartCache<'s>,
        got: &mut ShareOffers,
    ) {
        let mut targets: Vec<Option<&Entry>> = d.ees.iter().map(|e| Some(*e)).collect();
        if targets.is_empty() || d.share.pairs.is_some() {
            targets.push(None);
        }
        for ee in targets {
            let blind = ee
                .filter(|_| blind && d.share.pairs.is_none() && d.refused.is_none())
                .map(|e| (d.ce_id.clone(), addr(e)));
            if blind.as_ref().is_some_and(|key| !cache.built.insert(key.clone())) {
                continue;
            }
            if d.dn.is_none() {
                d.dn = Some(Arc::from(d.share.entry.dn.as_str()));
                d.open_to = Some(cache.shared(self.open_to(d.svc, d.share.id)));
            }
            let ad = self.ad_of(d, ee, keep, &mut cache.names);
            let traits = Some(Box::new(self.traits_of(d, ee, cache)));
            let offer = Offer {
                ce_id: d.ce_id.clone(),
                queue: d.queue.map(str::to_string),
                share_id: Some(d.share.id.to_string()),
                ee_id: ee.and_then(entity_id),
                schema: "GLUE2",
                ad,
                traits,
            };
            got.offers.push(BuiltOffer { offer, blind });
        }
    }

    /// The ad of a share and one of its EEs (None: the share alone).
    fn ad_of(&self, d: &ShareDraft, ee: Option<&Entry>, keep: &Keep, names: &mut AdNames) -> ClassAd {
        let share = d.share.entry;
        let mut ad = Ad::new(keep, names);
        ad.put_str("MyType", "Machine");
        ad.put_str("Name", &d.ce_id);
        ad.put_str("GlueCEUniqueID", &d.ce_id);
        if let Some(hp) = host_port(&d.ce_id).filter(|_| ad.wants("GlueCEInfoHostName")) {
            ad.put_str("GlueCEInfoHostName", hp.split(':').next().unwrap_or(hp));
        }
        copy_glue2(&mut ad, share);
        if let Some(e) = ee {
            copy_glue2(&mut ad, e);
        }
        if let Some(ep) = d.endpoint {
            for a in [
                "GLUE2EndpointURL",
                "GLUE2EndpointImplementationName",
                "GLUE2EndpointInterfaceName",
                "GLUE2EndpointHealthState",
            ] {
                if let Some(v) = ep.first(a) {
                    ad.put_str(a, v);
                }
            }
        }
        glue13_names(&mut ad, Some(share), ee, ee.and_then(|e| d.svc.manager_of(e)).or(d.manager));
        let mut rte: Vec<String> = Vec::new();
        let ee_pairs = ee.and_then(|e| self.ee_pairs.get(&addr(e)).copied());
        for pairs in ee_pairs.into_iter().chain(d.share.pairs) {
            for (&k, v) in pairs {
                if VGPGPU_KEYS.contains(&k) {
                    continue;
                }
                if ad.wants(k) {
                    ad.put(k, v.clone());
                }
                if let (Some(p), Value::Str(vendor)) = (self.vendor_prefix(k), v) {
                    rte.push(format!("{vendor}{p}"));
                }
            }
        }
        if ad.wants(RTE) {
            rte.dedup();
            ad.put(RTE, Value::List(rte.into_iter().map(|s| Value::Str(s.into())).collect::<Vec<_>>().into()));
        }
        ad.put(keys::REQUIREMENTS, Value::Bool(true));
        ad.ad
    }

    /// What settles an offer of `d` per job and VO.
    fn traits_of<'s>(&'s self, d: &ShareDraft<'s>, ee: Option<&Entry>, cache: &mut PartCache<'s>) -> OfferTraits {
        let share_only = ee.is_none() && !d.ees.is_empty();
        let (ee_dn, ee_keys) = match ee {
            Some(e) => {
                let (dn, keys) = cache.ee(e, self.ee_pairs.get(&addr(e)).copied());
                (Some(dn), keys)
            }
            // The share alone stands for EEs whose keys the job's fetch did not ask for.
            None => (None, cache.keys(d.ees.iter().filter_map(|e| self.ee_pairs.get(&addr(e)).copied()))),
        };
        OfferTraits {
            service: d.svc.key.clone(),
            proven: d.proven,
            share_dn: d.dn.clone().unwrap_or_default(),
            open_to: d.open_to.clone().unwrap_or_default(),
            ee_dn,
            ee_keys,
            share_keys: d.share.pairs.map(|p| cache.keys([p])),
            share_only,
            vgpgpu: d.svc.shared_vgpgpu.clone(),
            apps: d.svc.shared_apps.clone(),
            refused: d.refused.clone(),
            ..OfferTraits::default()
        }
    }
}

/// Stages 1 to 3: every GLUE 2.0 offer of `fetched` that `audience` may use,
/// undecided: each with the [`OfferTraits`] that settle it per job and VO.
fn glue2_offers(fetched: &Fetched, prefixes: &[String], audience: Audience) -> Offers {
    let mut out = Offers::default();
    let keep = Keep::of(fetched);
    let grid = Grid::of(fetched);
    let carriers = Carriers::read(fetched, prefixes, &grid, &mut out.warnings);
    let joined = Joined::join(fetched, prefixes, &carriers, &grid);
    // Offers that differ only in what the job never looks at are built once: the
    // VO shares of a queue offering the same EE, when the job names nothing of the
    // share or its endpoint. The first (the one list-match would report) is kept.
    let blind = fetched.names.as_ref().is_some_and(share_blind);
    joined.offers(&keep, audience, blind, &mut out);
    out
}

/// Builds the offers of a fetch for a job of `vo`. `prefixes`: the CDER key prefixes (`GPGPU`).
///
/// Joins follow the DN tree: a share, the EEs it names, their manager,
/// Extensions and the MappingPolicies are matched within one
/// ComputingService, because real top-level BDIIs reuse IDs across sites.
pub fn build_offers(fetched: &Fetched, prefixes: &[String], vo: Option<&str>) -> Offers {
    let mut out = glue2_offers(fetched, prefixes, Audience::Vo(vo));
    settle(&mut out, vo, &Keep::of(fetched));
    // Every GLUE 1.3 offer is a GlueCE's: the GLUE 2.0 CE IDs are gathered only when there are some.
    if !fetched.glue13_ces.is_empty() {
        let glue2_ces: BTreeSet<String> = out.offers.iter().map(|o| o.ce_id.clone()).collect();
        glue13_offers(fetched, prefixes, &glue2_ces, &mut out);
    }
    sort_offers(&mut out.offers);
    out
}

/// Every offer of a fetch made for every VO and CDER key ([`snapshot_wanted`](crate::index::snapshot_wanted)),
/// with what [`build_offers`] decides per job and VO left undecided and
/// recorded in each offer's [`OfferTraits`]: which VOs open each share, the
/// keys of its EE and share, the vGPGPU counts, and the claims that contested
/// CE IDs and GLUE 1.3 duplicates are settled by. What the index encodes.
pub fn every_offer(fetched: &Fetched, prefixes: &[String]) -> Offers {
    let mut out = glue2_offers(fetched, prefixes, Audience::EveryVo);
    glue13_offers(fetched, prefixes, &BTreeSet::new(), &mut out);
    sort_offers(&mut out.offers);
    out
}

/// list-match's order: CE ID, schema, EE.
fn sort_offers(offers: &mut [Offer]) {
    offers.sort_by(|a, b| (a.ce_id.as_str(), a.schema, &a.ee_id).cmp(&(b.ce_id.as_str(), b.schema, &b.ee_id)));
}

/// Whether a job that looks up only `names` sees no difference between the
/// VO shares of one queue offering the same EE (nothing of the share or its endpoint).
pub fn share_blind(names: &BTreeSet<String>) -> bool {
    names.iter().all(|n| {
        let l = n.to_ascii_lowercase();
        let ee_only = ["glue2executionenvironment", "glue2resource", "glue2manager"].iter().any(|p| l.starts_with(p));
        let from_share = [SHARE_COUNTS, SHARE_MINUTES, SHARE_STRINGS]
            .iter()
            .any(|t| t.iter().any(|(g13, _)| g13.eq_ignore_ascii_case(n)));
        (ee_only || !l.starts_with("glue2")) && !from_share
    })
}

/// The `GlueCEUniqueID` of a GLUE 2.0 share: CREAM publishes it as
/// `CREAMCEId=` OtherInfo; otherwise `host:port/cream-<lrms>-<queue>` from
/// the endpoint, as CREAM forms it; else the share ID.
fn ce_unique_id(
    share: &Entry,
    endpoint: Option<&Entry>,
    manager: Option<&Entry>,
    queue: Option<&str>,
    endpoints: &[&Entry],
) -> (String, CeIdSource) {
    if let Some(id) = share.all("GLUE2EntityOtherInfo").iter().find_map(|v| v.strip_prefix("CREAMCEId=")) {
        return (id.to_string(), CeIdSource::Published);
    }
    // An ARC CE is named by its REST endpoint's URL: what `arcsub -C` takes (docs/arc.md).
    if let Some(url) = endpoints
        .iter()
        .find(|e| e.first("GLUE2EndpointInterfaceName") == Some(ARC_REST_INTERFACE))
        .and_then(|e| e.first("GLUE2EndpointURL"))
    {
        return (url.to_string(), CeIdSource::Endpoint);
    }
    if let (Some(hp), Some(q)) = (endpoint.and_then(|e| e.first("GLUE2EndpointURL")).and_then(host_port), queue) {
        let lrms = manager.and_then(|m| m.first("GLUE2ManagerProductName")).unwrap_or("lrms").to_ascii_lowercase();
        return (format!("{hp}/cream-{lrms}-{q}"), CeIdSource::Endpoint);
    }
    (share.first("GLUE2ShareID").unwrap_or_default().to_string(), CeIdSource::ShareId)
}

/// The RTE list of an offer.
const RTE: &str = "GlueHostApplicationSoftwareRunTimeEnvironment";
/// The VOs a GLUE 1.3 CE admits; a GLUE 2.0 offer gets the job's own.
const ACCESS_RULE: &str = "GlueCEAccessControlBaseRule";

/// Stage 4 of the live path: what [`OfferTraits`] leave undecided, settled for
/// a job of `vo` (the index settles the same per job when it answers):
/// refused claims shown instead of offered, the share-alone offers dropped
/// (the live fetch has the EEs they stand for), contested CE IDs, and the
/// service's vGPGPU counts and methods and the job's VO added to the ads.
fn settle(out: &mut Offers, vo: Option<&str>, keep: &Keep) {
    let mut refused: HashSet<(String, Arc<str>)> = HashSet::new();
    let mut claims = Vec::new();
    out.offers.retain(|o| match &o.traits().refused {
        Some(reason) => {
            if refused.insert((o.ce_id.clone(), o.traits().share_dn.clone())) {
                let share = o.traits().share_dn.to_string();
                claims.push(RefusedClaim { ce_id: o.ce_id.clone(), share, reason: reason.clone() });
            }
            false
        }
        None => !o.traits().share_only,
    });
    out.refused_claims.extend(claims);
    refuse_contested(out);
    let access = vo
        .filter(|_| keep.wants(ACCESS_RULE))
        .map(|vo| Expr::Lit(Value::List(vec![Value::Str(format!("VO:{vo}").into())].into())));
    for o in &mut out.offers {
        add_job_view(o, access.as_ref(), keep);
    }
}

/// The service's vGPGPU counts and methods, and the job's VO's `access` rule,
/// on a GLUE 2.0 offer's ad (only what `keep` wants).
fn add_job_view(o: &mut Offer, access: Option<&Expr>, keep: &Keep) {
    let Some(t) = o.traits.as_deref() else { return };
    for (k, v) in t.vgpgpu.iter().filter(|(k, _)| keep.wants(k)) {
        o.ad.insert(k, Expr::Lit(v.clone()));
    }
    if !t.apps.is_empty() {
        if let Some(Expr::Lit(Value::List(rte))) = o.ad.lookup(RTE) {
            let mut items = rte.to_vec();
            items.extend(t.apps.iter().map(|a| Value::Str(a.as_str().into())));
            items.dedup_by(|a, b| a.identical(b) == Some(true));
            o.ad.insert(RTE, Expr::Lit(Value::List(items.into())));
        }
    }
    if let Some(rule) = access {
        o.ad.insert(ACCESS_RULE, rule.clone());
    }
}

/// A CE ID offered under several services is kept only from the services
/// that own it; when none does, every claim is left out (and explained).
fn refuse_contested(out: &mut Offers) {
    // Per CE ID, the first service met offering it, and whether another one does too.
    let mut services_of: HashMap<&str, (&Arc<str>, bool)> = HashMap::with_capacity(out.offers.len());
    for o in &out.offers {
        let seen = services_of.entry(o.ce_id.as_str()).or_insert((&o.traits().service, false));
        seen.1 |= seen.0 != &o.traits().service;
    }
    let contested: BTreeSet<String> =
        services_of.iter().filter(|(_, (_, several))| *several).map(|(id, _)| id.to_string()).collect();
    if contested.is_empty() {
        return;
    }
    let mut refused: BTreeSet<(String, Arc<str>)> = BTreeSet::new();
    let offers = std::mem::take(&mut out.offers);
    for offer in offers {
        if !contested.contains(&offer.ce_id) || offer.traits().proven {
            out.offers.push(offer);
        } else if refused.insert((offer.ce_id.clone(), offer.traits().share_dn.clone())) {
            out.refused_claims.push(RefusedClaim {
                ce_id: offer.ce_id.clone(),
                share: offer.traits().share_dn.to_string(),
                reason: "published by several services, and this share's service does not own it".into(),
            });
        }
    }
}

/// Stage 3 for GLUE 1.3 (Tagged-Environment): one offer per GlueCE and
/// SubCluster, but for the CEs of `glue2_ces` (a site publishing both
/// schemas: its GLUE 2.0 offer wins).
fn glue13_offers(fetched: &Fetched, prefixes: &[String], glue2_ces: &BTreeSet<String>, out: &mut Offers) {
    // Every GLUE 1.3 offer is a GlueCE's.
    if fetched.glue13_ces.is_empty() {
        return;
    }
    let keep = Keep::of(fetched);
    let mut names = AdNames::default();
    let mut subs_of_cluster: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for sc in &fetched.subclusters {
        for k in sc.all("GlueChunkKey") {
            if let Some(c) = k.strip_prefix("GlueClusterUniqueID=") {
                subs_of_cluster.entry(c).or_default().push(sc);
            }
        }
    }
    for ce in &fetched.glue13_ces {
        let Some(ce_id) = ce.first("GlueCEUniqueID").filter(|id| !id.trim().is_empty()) else {
            out.warnings.push(format!("{}: skipped: no GlueCEUniqueID", ce.dn));
            continue;
        };
        if glue2_ces.contains(ce_id) {
            continue;
        }
        let clusters: Vec<&str> =
            ce.all("GlueForeignKey").iter().filter_map(|k| k.strip_prefix("GlueClusterUniqueID=")).collect();
        for sc in clusters.iter().flat_map(|c| subs_of_cluster.get(c).into_iter().flatten()) {
            let (pairs, tags) = match glue13_tags(sc, prefixes) {
                Ok(read) => read,
                Err(why) => {
                    out.warnings.push(format!("{}: skipped: malformed tag: {why}", sc.dn));
                    continue;
                }
            };
            if let Some((e, why)) =
                [ce, *sc].into_iter().find_map(|e| check_glue_numbers(e, &[]).err().map(|why| (e, why)))
            {
                out.warnings.push(format!("{}: skipped: {why}", e.dn));
                continue;
            }
            let mut ad = Ad::new(&keep, &mut names);
            glue13_ad(&mut ad, ce_id, ce, sc, pairs, tags);
            let traits = Some(Box::new(OfferTraits { seq: out.offers.len(), ..glue13_traits(ce, sc, prefixes) }));
            out.offers.push(Offer {
                ce_id: ce_id.to_string(),
                queue: ce.first("GlueCEName").map(str::to_string),
                share_id: Some(ce_id.to_string()),
                ee_id: sc.first("GlueSubClusterUniqueID").map(str::to_string),
                schema: "GLUE1.3",
                ad: ad.ad,
                traits,
            });
        }
    }
}

/// A SubCluster's CDER tags (`GPGPUVendor=Nvidia`; `rCUDATotalVGPGPU=8` as
/// `TotalVGPGPU_rCUDA`), range-checked, and every tag as a list item.
fn glue13_tags(sc: &Entry, prefixes: &[String]) -> Result<(Pairs<String>, Vec<Value>), String> {
    let mut pairs = Pairs::default();
    let mut tags = Vec::new();
    for tag in sc.all("GlueHostApplicationSoftwareRunTimeEnvironment") {
        tags.push(Value::Str(tag.into()));
        let Some((k, v)) = tag.split_once('=') else { continue };
        let key = VGPGPU_KEYS
            .iter()
            .find_map(|vk| k.strip_suffix(vk).filter(|m| !m.is_empty()).map(|m| format!("{vk}_{m}")))
            .unwrap_or_else(|| k.to_string());
        if key.contains('_') && VGPGPU_KEYS.iter().any(|vk| key.starts_with(vk)) {
            match typed_checked(v) {
                Ok(n @ Value::Int(0..)) => {
                    pairs.insert(key.clone(), n).map_or(Ok(()), |_| Err(format!("{key} is given twice")))
                }
                Ok(Value::Int(_)) => Err(format!("{k}={v:?} is out of range (negative)")),
                Ok(Value::Real(_)) => Err(format!("{k}={v:?} is not a whole number")),
                Ok(_) => Err(format!("{k}={v:?} is not a number")),
                Err(why) => Err(format!("{k}={why}")),
            }
        } else {
            add_pair(&mut pairs, &key, v, prefixes)
        }?;
    }
    check_cder_numbers(&pairs, prefixes)?;
    Ok((pairs, tags))
}

/// The ad of a GlueCE and one of its SubClusters: their GLUE 1.3 attributes, the tags and the CDER keys.
fn glue13_ad(ad: &mut Ad, ce_id: &str, ce: &Entry, sc: &Entry, pairs: Pairs<String>, tags: Vec<Value>) {
    ad.put_str("MyType", "Machine");
    ad.put_str("Name", ce_id);
    for e in [ce, sc] {
        let mut names: Vec<(&str, Values)> = e.iter().filter(|(n, _)| ad.wants(n)).collect();
        names.sort_unstable_by_key(|(n, _)| *n);
        for (lname, vals) in names {
            if !lname.starts_with("glue") || lname == "gluehostapplicationsoftwareruntimeenvironment" {
                continue;
            }
            let name = glue13_spelling(lname);
            if lname == "glueceaccesscontrolbaserule" || vals.len() > 1 {
                ad.put(&name, Value::List(vals.iter().map(typed).collect::<Vec<_>>().into()));
            } else if let Some(v) = vals.first() {
                ad.put(&name, typed(v));
            }
        }
    }
    ad.put_str("GlueCEUniqueID", ce_id);
    ad.put(RTE, Value::List(tags.into()));
    for (k, v) in pairs {
        ad.put(&k, v);
    }
    ad.put(keys::REQUIREMENTS, Value::Bool(true));
}

/// What settles a GLUE 1.3 offer per job and VO: the CE's `VO:` rules and the SubCluster's tags.
fn glue13_traits(ce: &Entry, sc: &Entry, prefixes: &[String]) -> OfferTraits {
    let tags = sc.all("GlueHostApplicationSoftwareRunTimeEnvironment");
    let affix = |t: &str, p: &str| {
        let (t, p) = (t.as_bytes(), p.as_bytes());
        t.len() >= p.len() && (t[..p.len()].eq_ignore_ascii_case(p) || t[t.len() - p.len()..].eq_ignore_ascii_case(p))
    };
    let rules = ce.all("GlueCEAccessControlBaseRule");
    let open_to =
        rules.iter().filter_map(|r| r.get(..3).filter(|p| p.eq_ignore_ascii_case("VO:")).map(|_| r[3..].to_string()));
    OfferTraits {
        share_dn: Arc::from(ce.dn.as_str()),
        open_to: Arc::new(open_to.collect()),
        ee_keys: Arc::new(tags.iter().filter_map(|t| t.split_once('=')).map(|(k, _)| k.to_string()).collect()),
        prefix_tagged: tags.iter().any(|t| prefixes.iter().any(|p| affix(t, p))),
        vgpgpu_tagged: tags.iter().any(|t| t.to_ascii_lowercase().contains("totalvgpgpu=")),
        ..OfferTraits::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefixes() -> Vec<String> {
        vec![DEFAULT_PREFIX.to_string()]
    }

    fn site(other_info: &[&str]) -> Fetched {
        let mut ee = vec![
            ("objectClass", "GLUE2ExecutionEnvironment"),
            ("GLUE2ResourceID", "ee1"),
            ("GLUE2ExecutionEnvironmentComputingManagerForeignKey", "m1"),
            ("GLUE2ExecutionEnvironmentMainMemorySize", "65536"),
        ];
        ee.extend(other_info.iter().map(|v| ("GLUE2EntityOtherInfo", *v)));
        Fetched {
            carriers: vec![Entry::from_pairs("GLUE2ResourceID=ee1,o=glue", ee)],
            managers: vec![Entry::from_pairs(
                "GLUE2ManagerID=m1,o=glue",
                [
                    ("objectClass", "GLUE2ComputingManager"),
                    ("GLUE2ManagerID", "m1"),
                    ("GLUE2ComputingManagerComputingServiceForeignKey", "s1"),
                    ("GLUE2ManagerProductName", "SLURM"),
                ],
            )],
            shares: vec![Entry::from_pairs(
                "GLUE2ShareID=q1,o=glue",
                [
                    ("objectClass", "GLUE2ComputingShare"),
                    ("GLUE2ShareID", "q1"),
                    ("GLUE2ShareServiceForeignKey", "s1"),
                    ("GLUE2ComputingShareMappingQueue", "gpu"),
                    ("GLUE2ComputingShareFreeSlots", "12"),
                    ("GLUE2ComputingShareEstimatedAverageWaitingTime", "300"),
                    ("GLUE2ComputingShareMaxWallTime", "7200"),
                ],
            )],
            endpoints: vec![Entry::from_pairs(
                "GLUE2EndpointID=e1,o=glue",
                [
                    ("GLUE2EndpointID", "e1"),
                    ("GLUE2EndpointURL", "https://ce1.example.org:8443/ce-cream/services"),
                    ("GLUE2EndpointServiceForeignKey", "s1"),
                ],
            )],
            ..Default::default()
        }
    }

    /// `site()` plus a second service that publishes a share naming the first
    /// service's CE ID (and its own queue), and a GPU EE of its own.
    fn site_with_hostile_share(hostile_ce_id: &str) -> Fetched {
        let gpu = ["GPGPUVendor=Nvidia", "GPGPUMainMemorySize=4800"];
        let mut fetched = site(&gpu);
        fetched.shares[0].push("GLUE2EntityOtherInfo", "CREAMCEId=ce1.example.org:8443/cream-slurm-gpu".into());
        let mut ee2 = vec![
            ("objectClass", "GLUE2ExecutionEnvironment"),
            ("GLUE2ResourceID", "ee2"),
            ("GLUE2ExecutionEnvironmentComputingManagerForeignKey", "m2"),
        ];
        ee2.extend(gpu.iter().map(|v| ("GLUE2EntityOtherInfo", *v)));
        fetched.carriers.push(Entry::from_pairs("GLUE2ResourceID=ee2,o=glue", ee2));
        fetched.managers.push(Entry::from_pairs(
            "GLUE2ManagerID=m2,o=glue",
            [
                ("objectClass", "GLUE2ComputingManager"),
                ("GLUE2ManagerID", "m2"),
                ("GLUE2ComputingManagerComputingServiceForeignKey", "s2"),
                ("GLUE2ManagerProductName", "SLURM"),
            ],
        ));
        let claim = format!("CREAMCEId={hostile_ce_id}");
        fetched.shares.push(Entry::from_pairs(
            "GLUE2ShareID=q2,o=glue",
            [
                ("objectClass", "GLUE2ComputingShare"),
                ("GLUE2ShareID", "q2"),
                ("GLUE2ShareServiceForeignKey", "s2"),
                ("GLUE2ComputingShareMappingQueue", "evil_partition"),
                ("GLUE2ComputingShareEstimatedAverageWaitingTime", "0"),
                ("GLUE2EntityOtherInfo", claim.as_str()),
            ],
        ));
        fetched.endpoints.push(Entry::from_pairs(
            "GLUE2EndpointID=e2,o=glue",
            [
                ("GLUE2EndpointID", "e2"),
                ("GLUE2EndpointURL", "https://evil.example.net:8443/ce-cream/services"),
                ("GLUE2EndpointServiceForeignKey", "s2"),
            ],
        ));
        fetched
    }

    fn policy(vo: &str, share: &str) -> Entry {
        let rule = format!("VO:{vo}");
        Entry::from_pairs(
            &format!("GLUE2PolicyID={vo}_{share},o=glue"),
            [("GLUE2PolicyRule", rule.as_str()), ("GLUE2MappingPolicyShareForeignKey", share)],
        )
    }

    fn joined<R>(fetched: &Fetched, then: impl FnOnce(&Joined, Vec<String>) -> R) -> R {
        let grid = Grid::of(fetched);
        let mut warnings = Vec::new();
        let prefixes = prefixes();
        let carriers = Carriers::read(fetched, &prefixes, &grid, &mut warnings);
        then(&Joined::join(fetched, &prefixes, &carriers, &grid), warnings)
    }

    /// Stage 1: one carrier per DN (the first entry wins), an Extension's key
    /// merged into its entity's pairs; one that contradicts OtherInfo makes the
    /// entity unusable, with a warning naming it.
    #[test]
    fn carriers_are_read_once_per_dn_with_their_extensions() {
        let mut fetched = site(&["GPGPUVendor=Nvidia", "GPGPUPerNode=2"]);
        let mut again = fetched.carriers[0].clone();
        again.set("glue2entityotherinfo", vec!["GPGPUVendor=AMD".into()]);
        fetched.carriers.push(again);
        let ext = |v: &str| {
            Entry::from_pairs(
                "GLUE2ExtensionLocalID=x,GLUE2ResourceID=ee1,o=glue",
                [
                    ("GLUE2ExtensionKey", "GPGPUMainMemorySize"),
                    ("GLUE2ExtensionValue", v),
                    ("GLUE2ExtensionEntityForeignKey", "ee1"),
                ],
            )
        };
        fetched.extensions = vec![ext("4096")];
        let mut warnings = Vec::new();
        let grid = Grid::of(&fetched);
        let c = Carriers::read(&fetched, &prefixes(), &grid, &mut warnings);
        assert_eq!(c.list.len(), 1, "{warnings:?}");
        let pairs = c.list[0].pairs.as_deref().expect("usable");
        assert!(matches!(pairs.get("GPGPUVendor"), Some(Value::Str(v)) if &**v == "Nvidia"), "the first entry wins");
        assert!(matches!(pairs.get("GPGPUMainMemorySize"), Some(Value::Int(4096))), "the Extension's key");
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(c.at_dn("glue2resourceid=EE1,o=glue").is_some(), "DNs compare as LDAP does");
        // The same key in OtherInfo and an Extension, with two values.
        fetched.carriers[0].push("GLUE2EntityOtherInfo", "GPGPUMainMemorySize=8192".into());
        let grid = Grid::of(&fetched);
        let c = Carriers::read(&fetched, &prefixes(), &grid, &mut warnings);
        assert!(c.list[0].pairs.is_none());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("GLUE2ResourceID=ee1,o=glue: skipped: GPGPUMainMemorySize"), "{warnings:?}");
    }

    /// Stage 2: a service gathers its manager, endpoint and EEs; an EE whose
    /// manager is unknown belongs to no service; MappingPolicies open a share
    /// to their VOs (to any job when the job names no VO), and none is closed
    /// to every VO at once.
    #[test]
    fn services_join_their_managers_endpoints_ees_and_policies() {
        let mut fetched = site(&["GPGPUVendor=Nvidia"]);
        let stray = [("GLUE2ResourceID", "ee9"), ("GLUE2ExecutionEnvironmentComputingManagerForeignKey", "m9")];
        let mut stray = Entry::from_pairs("GLUE2ResourceID=ee9,o=glue", stray);
        stray.push("objectClass", "GLUE2ExecutionEnvironment".into());
        stray.push("GLUE2EntityOtherInfo", "GPGPUVendor=Nvidia".into());
        fetched.carriers.push(stray);
        fetched.policies = Some(vec![policy("atlas", "q1")]);
        joined(&fetched, |j, warnings| {
            assert!(warnings.is_empty(), "{warnings:?}");
            assert_eq!(j.shares.len(), 1);
            let svc = &j.services.list[j.shares[0].service];
            assert_eq!(&*svc.key, "id:s1");
            assert_eq!((svc.managers.len(), svc.endpoints.len(), svc.ees.len()), (1, 1, 1));
            assert_eq!(svc.ees[0].0, Some("ee1"));
            assert!(j.open(svc, "q1", Audience::Vo(Some("atlas"))));
            assert!(!j.open(svc, "q1", Audience::Vo(Some("cms"))));
            assert!(j.open(svc, "q1", Audience::Vo(None)), "a policy names it");
            assert!(!j.open(svc, "q2", Audience::Vo(None)), "no policy names it");
            assert!(j.open(svc, "q2", Audience::EveryVo));
            assert_eq!(j.open_to(svc, "q1").collect::<Vec<_>>(), ["atlas"]);
        });
    }

    /// Stage 3: every VO's build keeps a refused claim as an offer that says
    /// why; one VO's build leaves out the shares closed to it, and says so.
    #[test]
    fn offers_are_built_for_their_audience_with_their_traits() {
        let mut fetched = site_with_hostile_share("ce1.example.org:8443/cream-slurm-gpu");
        fetched.policies = Some(vec![policy("atlas", "q1"), policy("cms", "q2")]);
        joined(&fetched, |j, _| {
            let mut every = Offers::default();
            j.offers(&Keep(None), Audience::EveryVo, false, &mut every);
            assert_eq!(every.offers.len(), 2, "{:?}", every.offers);
            assert!(every.closed_to_vo.is_empty() && every.refused_claims.is_empty());
            let by_share = |id: &str| every.offers.iter().find(|o| o.share_id.as_deref() == Some(id)).unwrap();
            let (own, hostile) = (by_share("q1"), by_share("q2"));
            assert!(own.traits().proven && own.traits().refused.is_none());
            assert!(!hostile.traits().proven);
            assert!(hostile.traits().refused.as_deref().is_some_and(|r| r.contains("s2")), "{:?}", hostile.traits());
            assert_eq!((*own.traits().open_to).clone(), BTreeSet::from(["atlas".to_string()]));
            assert_eq!(&*hostile.traits().share_dn, "GLUE2ShareID=q2,o=glue");
            assert_eq!([own.traits().seq, hostile.traits().seq], [0, 1]);
            assert_eq!(own.traits().ee_keys.iter().collect::<Vec<_>>(), ["GPGPUMainMemorySize", "GPGPUVendor"]);
            let mut atlas = Offers::default();
            j.offers(&Keep(None), Audience::Vo(Some("atlas")), false, &mut atlas);
            assert_eq!(atlas.offers.iter().map(|o| o.share_id.as_deref()).collect::<Vec<_>>(), [Some("q1")]);
            assert_eq!(atlas.closed_to_vo.len(), 1);
            assert_eq!((atlas.closed_to_vo[0].share_id.as_str(), atlas.closed_to_vo[0].vo.as_str()), ("q2", "atlas"));
        });
    }

    /// A share with keys of its own and EEs it names: every VO's build also
    /// offers the share alone (for jobs whose keys fetch it and none of its
    /// EEs); one job's build, whose fetch had those EEs, does not.
    #[test]
    fn a_share_with_keys_is_also_offered_alone_to_the_index() {
        let mut fetched = site(&["GPGPUVendor=Nvidia"]);
        let mut share = fetched.shares.remove(0);
        share.push("GLUE2EntityOtherInfo", "GPGPUPerNode=2".into());
        fetched.carriers.push(share);
        let every = every_offer(&fetched, &prefixes());
        let alone: Vec<&Offer> = every.offers.iter().filter(|o| o.traits().share_only).collect();
        assert_eq!((every.offers.len(), alone.len()), (2, 1), "{:?}", every.offers);
        assert_eq!(alone[0].ee_id, None);
        assert_eq!(alone[0].traits().ee_keys.iter().collect::<Vec<_>>(), ["GPGPUVendor"]);
        assert_eq!(
            alone[0].traits().share_keys.as_deref().map(|k| k.iter().collect::<Vec<_>>()),
            Some(vec![&"GPGPUPerNode".to_string()])
        );
        let live = build_offers(&fetched, &prefixes(), None);
        assert_eq!(live.offers.len(), 1);
        assert_eq!(live.offers[0].ee_id.as_deref(), Some("ee1"));
    }

    fn settled(ce: &str, service: &str, share: &str, edit: impl FnOnce(&mut OfferTraits)) -> Offer {
        let mut traits =
            OfferTraits { service: service.into(), share_dn: share.into(), proven: true, ..Default::default() };
        edit(&mut traits);
        let mut ad = ClassAd::new();
        ad.insert(RTE, Expr::Lit(Value::List(vec![Value::Str("NvidiaGPGPU".into())].into())));
        Offer {
            ce_id: ce.into(),
            queue: None,
            share_id: None,
            ee_id: None,
            schema: "GLUE2",
            ad,
            traits: Some(Box::new(traits)),
        }
    }

    /// Stage 4: settling for a job shows refused claims (once per share)
    /// instead of their offers, drops the shares offered alone, refuses the
    /// unproven claims of a contested CE ID, and adds the service's vGPGPU
    /// counts and methods and the job's VO to what the job may look up.
    #[test]
    fn settling_for_a_job_refuses_claims_and_adds_what_the_job_sees() {
        let offers = || Offers {
            offers: vec![
                settled("a", "dn:s1", "S1", |_| {}),
                settled("b", "dn:s3", "S3", |t| t.refused = Some("not its own".into())),
                settled("b", "dn:s3", "S3", |t| t.refused = Some("not its own".into())),
                settled("a", "dn:s2", "S2", |t| t.proven = false),
                settled("c", "dn:s1", "S1", |t| t.share_only = true),
                settled("d", "dn:s4", "S4", |t| {
                    t.vgpgpu = vec![("TotalVGPGPU_rCUDA".to_string(), Value::Int(8))].into();
                    t.apps = vec!["rCUDA".to_string()].into();
                }),
            ],
            ..Offers::default()
        };
        let mut out = offers();
        settle(&mut out, Some("atlas"), &Keep(None));
        assert_eq!(out.offers.iter().map(|o| o.ce_id.as_str()).collect::<Vec<_>>(), ["a", "d"]);
        let claims: Vec<(&str, &str)> =
            out.refused_claims.iter().map(|c| (c.ce_id.as_str(), c.share.as_str())).collect();
        assert_eq!(claims, [("b", "S3"), ("a", "S2")]);
        assert!(out.refused_claims[1].reason.contains("several services"), "{:?}", out.refused_claims);
        let d = &out.offers[1].ad;
        assert_eq!(d.eval_attr("TotalVGPGPU_rCUDA").to_string(), "8");
        assert_eq!(d.eval_attr(RTE).to_string(), "{ \"NvidiaGPGPU\",\"rCUDA\" }");
        assert_eq!(d.eval_attr(ACCESS_RULE).to_string(), "{ \"VO:atlas\" }");
        // Only what the job may look up is added.
        let mut out = offers();
        settle(&mut out, Some("atlas"), &Keep(Some(vec!["gpgpuvendor"])));
        assert!(
            out.offers[1].ad.lookup("TotalVGPGPU_rCUDA").is_none() && out.offers[1].ad.lookup(ACCESS_RULE).is_none()
        );
        // The methods join an RTE list only where the ad has one (the job may look it up).
        let mut out = offers();
        out.offers.iter_mut().for_each(|o| o.ad = ClassAd::new());
        settle(&mut out, None, &Keep(None));
        assert!(out.offers[1].ad.lookup(RTE).is_none() && out.offers[1].ad.lookup(ACCESS_RULE).is_none());
        assert_eq!(out.offers[1].ad.eval_attr("TotalVGPGPU_rCUDA").to_string(), "8");
    }

    /// GLUE 1.3: a SubCluster's tags read (vGPGPU counts renamed, ranges
    /// checked); a CE offered in GLUE 2.0 too is left to that offer.
    #[test]
    fn glue13_tags_are_read_and_a_glue2_ce_wins() {
        let sc = |tags: &[&str]| {
            let mut e = Entry::from_pairs(
                "GlueSubClusterUniqueID=sc,GlueClusterUniqueID=c,mds-vo-name=resource,o=grid",
                [("GlueSubClusterUniqueID", "sc"), ("GlueChunkKey", "GlueClusterUniqueID=c")],
            );
            tags.iter().for_each(|t| e.push("GlueHostApplicationSoftwareRunTimeEnvironment", t.to_string()));
            e
        };
        let (pairs, tags) =
            glue13_tags(&sc(&["GPGPUVendor=Nvidia", "rCUDATotalVGPGPU=8", "SOME_TAG"]), &prefixes()).unwrap();
        assert_eq!(tags.len(), 3);
        assert!(matches!(pairs.get("TotalVGPGPU_rCUDA"), Some(Value::Int(8))));
        assert!(matches!(pairs.get("GPGPUVendor"), Some(Value::Str(_))));
        let bad = glue13_tags(&sc(&["rCUDATotalVGPGPU=-1"]), &prefixes()).unwrap_err();
        assert!(bad.contains("negative"), "{bad}");
        let fetched = Fetched {
            subclusters: vec![sc(&["GPGPUVendor=Nvidia", "rCUDATotalVGPGPU=8"])],
            glue13_ces: vec![Entry::from_pairs(
                "GlueCEUniqueID=ce,mds-vo-name=resource,o=grid",
                [
                    ("GlueCEUniqueID", "ce"),
                    ("GlueForeignKey", "GlueClusterUniqueID=c"),
                    ("GlueCEAccessControlBaseRule", "VO:atlas"),
                ],
            )],
            ..Default::default()
        };
        let mut out = Offers::default();
        glue13_offers(&fetched, &prefixes(), &BTreeSet::new(), &mut out);
        assert_eq!(out.offers.len(), 1, "{:?}", out.warnings);
        let t = out.offers[0].traits();
        assert!(t.prefix_tagged && t.vgpgpu_tagged);
        assert_eq!((*t.open_to).clone(), BTreeSet::from(["atlas".to_string()]));
        let mut out = Offers::default();
        glue13_offers(&fetched, &prefixes(), &BTreeSet::from(["ce".to_string()]), &mut out);
        assert!(out.offers.is_empty());
    }

    #[test]
    fn a_share_cannot_speak_for_another_services_ce() {
        let o = build_offers(&site_with_hostile_share("ce1.example.org:8443/cream-slurm-gpu"), &prefixes(), None);
        let ce1: Vec<&Offer> = o.offers.iter().filter(|x| x.ce_id == "ce1.example.org:8443/cream-slurm-gpu").collect();
        assert_eq!(ce1.len(), 1, "{:?}", o.offers.iter().map(|x| (&x.ce_id, &x.queue)).collect::<Vec<_>>());
        assert_eq!(ce1[0].queue.as_deref(), Some("gpu"), "the queue comes from the owner's share");
        assert_eq!(o.refused_claims.len(), 1, "{:?}", o.refused_claims);
        assert_eq!(o.refused_claims[0].share, "GLUE2ShareID=q2,o=glue");
        assert!(o.refused_claims[0].reason.contains("s2"), "{}", o.refused_claims[0].reason);
        // The hostile service's own CE (its host) is still offered.
        let own = build_offers(
            &site_with_hostile_share("evil.example.net:8443/cream-slurm-evil_partition"),
            &prefixes(),
            None,
        );
        assert!(own.refused_claims.is_empty(), "{:?}", own.refused_claims);
        assert!(own.offers.iter().any(|x| x.ce_id == "evil.example.net:8443/cream-slurm-evil_partition"));
        assert!(own
            .offers
            .iter()
            .any(|x| x.ce_id == "ce1.example.org:8443/cream-slurm-gpu" && x.queue.as_deref() == Some("gpu")));
    }

    #[test]
    fn an_arc_ce_is_named_by_its_rest_endpoint() {
        let mut fetched = site(&["GPGPUVendor=Nvidia"]);
        fetched.endpoints.push(Entry::from_pairs(
            "GLUE2EndpointID=e-rest,o=glue",
            [
                ("GLUE2EndpointID", "e-rest"),
                ("GLUE2EndpointURL", "https://arc.example.org:8443/arex"),
                ("GLUE2EndpointInterfaceName", ARC_REST_INTERFACE),
                ("GLUE2EndpointServiceForeignKey", "s1"),
            ],
        ));
        let o = build_offers(&fetched, &prefixes(), None);
        assert_eq!(
            o.offers.iter().map(|x| x.ce_id.as_str()).collect::<Vec<_>>(),
            ["https://arc.example.org:8443/arex"]
        );
        // Without the REST endpoint the CREAM form stays.
        let o = build_offers(&site(&["GPGPUVendor=Nvidia"]), &prefixes(), None);
        assert_eq!(o.offers[0].ce_id, "ce1.example.org:8443/cream-slurm-gpu");
    }

    #[test]
    fn a_ce_id_claimed_by_two_services_that_neither_owns_is_left_out() {
        // Both shares fall back to the share ID "shared-id": no endpoint proves either.
        let mut fetched = site_with_hostile_share("x");
        for sh in &mut fetched.shares {
            sh.remove("glue2entityotherinfo");
            sh.remove("glue2computingsharemappingqueue");
            sh.set("glue2shareid", vec!["shared-id".into()]);
        }
        let o = build_offers(&fetched, &prefixes(), None);
        assert!(
            o.offers.iter().all(|x| x.ce_id != "shared-id"),
            "{:?}",
            o.offers.iter().map(|x| &x.ce_id).collect::<Vec<_>>()
        );
        assert_eq!(o.refused_claims.len(), 2, "{:?}", o.refused_claims);
    }

    #[test]
    fn an_offer_joins_ee_manager_service_share_and_endpoint() {
        let o = build_offers(
            &site(&[
                "GPGPUVendor=Nvidia",
                "GPGPUMainMemorySize=4800",
                "GPGPUCUDAComputeCapability=3.5",
                "GPGPUECCSupport=true",
            ]),
            &prefixes(),
            None,
        );
        assert!(o.warnings.is_empty(), "{:?}", o.warnings);
        assert_eq!(o.offers.len(), 1);
        let offer = &o.offers[0];
        assert_eq!(offer.ce_id, "ce1.example.org:8443/cream-slurm-gpu");
        let ad = &offer.ad;
        assert!(matches!(ad.eval_attr("GPGPUMainMemorySize"), Value::Int(4800)));
        assert!(matches!(ad.eval_attr("GPGPUCUDAComputeCapability"), Value::Real(r) if r == 3.5));
        assert!(matches!(ad.eval_attr("GPGPUECCSupport"), Value::Bool(true)));
        assert!(matches!(ad.eval_attr("GlueCEStateFreeCPUs"), Value::Int(12)));
        assert!(matches!(ad.eval_attr("GLUE2ComputingShareFreeSlots"), Value::Int(12)));
        assert!(matches!(ad.eval_attr("GlueCEStateEstimatedResponseTime"), Value::Int(300)));
        assert!(matches!(ad.eval_attr("GlueCEPolicyMaxWallClockTime"), Value::Int(120)));
        assert!(matches!(ad.eval_attr("GlueHostMainMemoryRAMSize"), Value::Int(65536)));
        assert_eq!(ad.eval_attr("GlueCEInfoLRMSType").to_string(), "\"slurm\"");
        assert_eq!(ad.eval_attr("GlueHostApplicationSoftwareRunTimeEnvironment").to_string(), "{ \"NvidiaGPGPU\" }");
    }

    #[test]
    fn an_amd_or_intel_offer_carries_the_published_vendor_and_architecture() {
        for (vendor, architecture) in [("AMD", "gfx90a"), ("Intel", "Xe-HPC")] {
            let o = build_offers(
                &site(&[
                    &format!("GPGPUVendor={vendor}"),
                    "GPGPUMainMemorySize=65536",
                    &format!("GPGPUArchitecture={architecture}"),
                ]),
                &prefixes(),
                None,
            );
            assert!(o.warnings.is_empty(), "{:?}", o.warnings);
            let ad = &o.offers[0].ad;
            assert_eq!(ad.eval_attr("GPGPUVendor").to_string(), format!("\"{vendor}\""));
            assert_eq!(ad.eval_attr("GPGPUArchitecture").to_string(), format!("\"{architecture}\""));
            assert!(matches!(ad.eval_attr("GPGPUCUDAComputeCapability"), Value::Undefined), "{vendor}");
            assert_eq!(
                ad.eval_attr("GlueHostApplicationSoftwareRunTimeEnvironment").to_string(),
                format!("{{ \"{vendor}GPGPU\" }}")
            );
        }
    }

    #[test]
    fn a_share_without_any_ce_id_gives_no_offer() {
        // Found by the bdii_offers fuzz target: no endpoint URL, no CREAMCEId
        // and an empty GLUE2ShareID made an offer whose CE ID was "".
        let mut fetched = site(&["GPGPUVendor=Nvidia"]);
        fetched.endpoints.clear();
        fetched.shares = vec![Entry::from_pairs(
            "GLUE2ShareID=,o=glue",
            [
                ("objectClass", "GLUE2ComputingShare"),
                ("GLUE2ShareID", ""),
                ("GLUE2ShareServiceForeignKey", "s1"),
                ("GLUE2ComputingShareMappingQueue", "gpu"),
            ],
        )];
        let o = build_offers(&fetched, &prefixes(), None);
        assert!(
            o.offers.iter().all(|offer| !offer.ce_id.is_empty()),
            "{:?}",
            o.offers.iter().map(|x| &x.ce_id).collect::<Vec<_>>()
        );
        assert!(o.offers.is_empty(), "{:?}", o.offers.len());
    }

    /// Keys on shares: the shares of a fetch (each DN once) are read
    /// from its carriers; a fetch with a DN twice is read the general way, and
    /// both give the same offers and warnings.
    #[test]
    fn shares_carrying_keys_build_alike_whichever_way_they_are_met() {
        let service = |n: u32| format!("GLUE2ServiceID=ce{n},GLUE2GroupID=resource,o=glue");
        let share = |n: u32, q: &str, info: &[&str]| {
            let mut attrs = vec![
                ("objectClass", "GLUE2ComputingShare".to_string()),
                ("GLUE2ShareID", format!("{q}_ce{n}")),
                ("GLUE2ComputingShareMappingQueue", q.to_string()),
                ("GLUE2EntityOtherInfo", format!("CREAMCEId=ce{n}.example.org:8443/cream-slurm-{q}")),
            ];
            attrs.extend(info.iter().map(|v| ("GLUE2EntityOtherInfo", v.to_string())));
            let dn = format!("GLUE2ShareID={q}_ce{n},{}", service(n));
            Entry::from_pairs(&dn, attrs.iter().map(|(k, v)| (*k, v.as_str())))
        };
        let endpoint = |n: u32| {
            Entry::from_pairs(
                &format!("GLUE2EndpointID=e{n},{}", service(n)),
                [
                    ("GLUE2EndpointID", format!("e{n}").as_str()),
                    ("GLUE2EndpointURL", &format!("https://ce{n}.example.org:8443/ce-cream/services")),
                ],
            )
        };
        let unique = Fetched {
            carriers: vec![
                share(1, "q1", &["GPGPUVendor=Nvidia", "GPGPUPerNode=2"]),
                share(1, "q2", &["GPGPUVendor=Nvidia", "GPGPUPerNode=2", "GPGPUPerNode=4"]),
                share(2, "q1", &["GPGPUVendor=AMD", "GPGPUMainMemorySize=65536"]),
            ],
            endpoints: vec![endpoint(1), endpoint(2)],
            ..Default::default()
        };
        let mut twice = unique.clone();
        twice.carriers.push(unique.carriers[0].clone());
        let (a, b) = (build_offers(&unique, &prefixes(), None), build_offers(&twice, &prefixes(), None));
        assert_eq!(a.offers.len(), 2, "{:?}", a.offers);
        assert_eq!(a.warnings.len(), 1, "{:?}", a.warnings);
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }

    /// Early reads keep a bounded number of distinct keys: a carrier with
    /// keys past the bound is left to the build, which gives the same offer.
    #[test]
    fn carriers_with_keys_past_the_early_bound_are_read_by_the_build() {
        let info: Vec<String> = (0..crate::bdii::carrier::MAX_KEYS + 8)
            .map(|i| format!("GPGPUBoundTest{i}=1"))
            .chain(["GPGPUVendor=Nvidia".to_string()])
            .collect();
        let info: Vec<&str> = info.iter().map(String::as_str).collect();
        // The keys the other tests read early are kept first: tests share the bound.
        for k in ["GPGPUVendor", "GPGPUPerNode", "GPGPUMainMemorySize", "GPGPUModel", "GPGPUTotalInstances"] {
            assert!(crate::bdii::carrier::cder_key(k).is_some());
        }
        let plain = site(&info);
        let mut fetched = site(&info);
        let mut reads = CarrierReads::new(prefixes(), true);
        let read = reads.read(&fetched.carriers[0]);
        assert!(read.is_none(), "read early with {} keys", info.len());
        reads.file(0, read);
        fetched.carrier_reads = reads;
        let o = build_offers(&fetched, &prefixes(), None);
        assert_eq!(o.offers.len(), 1, "{:?}", o.warnings);
        assert_eq!(format!("{o:?}"), format!("{:?}", build_offers(&plain, &prefixes(), None)));
    }

    /// The first fault in the entry's order is the one named, whatever comes after it.
    #[test]
    fn the_first_fault_of_an_other_info_list_is_named() {
        let o = build_offers(
            &site(&["GPGPUPerNode=2", "GPGPUPerNode=4", "GPGPUMainMemorySize=lots", "GPGPUVendor"]),
            &prefixes(),
            None,
        );
        assert_eq!(o.warnings.len(), 1, "{:?}", o.warnings);
        assert!(o.warnings[0].ends_with("GPGPUPerNode is given twice"), "{:?}", o.warnings);
        let o =
            build_offers(&site(&["GPGPUMainMemorySize=lots", "GPGPUPerNode=2", "GPGPUPerNode=4"]), &prefixes(), None);
        assert!(o.warnings[0].ends_with("GPGPUMainMemorySize=\"lots\" is not a number"), "{:?}", o.warnings);
    }

    /// Carriers read while the scan streamed build the same offers, with the
    /// same warnings, as carriers read by the build; a read filed for another
    /// entry, or made with other prefixes, is not taken.
    #[test]
    fn carriers_read_early_build_what_the_build_would() {
        for info in [
            &["GPGPUVendor=Nvidia", "GPGPUPerNode=2", "GPGPUMainMemorySize=16384", "GPGPUModel=Tesla K80"][..],
            &["GPGPUVendor=Nvidia", "GPGPUPerNode=2", "GPGPUPerNode=4"],
            &["GPGPUVendor=Nvidia", "GPGPUTotalInstances=-1"],
            &["GPGPUVendor=Nvidia", "GPGPUMainMemorySize=lots"],
            &["GPGPUVendor"],
        ] {
            let plain = site(info);
            let expected = format!("{:?}", build_offers(&plain, &prefixes(), None));
            for (with, at) in [(prefixes(), 0), (prefixes(), 1), (vec!["NPU".to_string()], 0)] {
                let mut fetched = site(info);
                let mut reads = CarrierReads::new(with, fetched.extensions.is_empty());
                let read = reads.read(&fetched.carriers[0]);
                assert!(read.is_some(), "{info:?} not read early");
                reads.file(at, read);
                fetched.carrier_reads = reads;
                if at == 1 {
                    // Filed for a carrier that is another entry: a copy of the first.
                    fetched.carriers.push(fetched.carriers[0].clone());
                    fetched.carriers.swap(0, 1);
                    let mut again = plain.clone();
                    again.carriers.push(again.carriers[0].clone());
                    assert_eq!(
                        format!("{:?}", build_offers(&fetched, &prefixes(), None)),
                        format!("{:?}", build_offers(&again, &prefixes(), None))
                    );
                    continue;
                }
                assert_eq!(format!("{:?}", build_offers(&fetched, &prefixes(), None)), expected, "{info:?}");
            }
        }
    }

    #[test]
    fn malformed_other_info_skips_the_entry_with_a_warning() {
        for bad in [
            &["GPGPUVendor"][..],
            &["GPGPUPerNode=2", "GPGPUPerNode=4"],
            &["GPGPUMainMemorySize=lots"],
            &["GPGPUTotalInstances=1e999x"],
        ] {
            let mut info = vec!["GPGPUVendor=Nvidia"];
            info.retain(|v| !bad.iter().any(|b| b.starts_with("GPGPUVendor") && v.starts_with("GPGPUVendor")));
            info.extend_from_slice(bad);
            let o = build_offers(&site(&info), &prefixes(), None);
            assert!(o.offers.is_empty(), "{bad:?} gave {:?}", o.offers);
            assert_eq!(o.warnings.len(), 1, "{bad:?}: {:?}", o.warnings);
            assert!(o.warnings[0].contains("GLUE2ResourceID=ee1"), "{:?}", o.warnings);
        }
    }

    #[test]
    fn shares_closed_to_the_vo_are_left_out() {
        let mut fetched = site(&["GPGPUVendor=Nvidia"]);
        fetched.policies = Some(vec![Entry::from_pairs(
            "GLUE2PolicyID=p,o=glue",
            [("GLUE2PolicyRule", "VO:atlas"), ("GLUE2MappingPolicyShareForeignKey", "q1")],
        )]);
        assert_eq!(build_offers(&fetched, &prefixes(), Some("atlas")).offers.len(), 1);
        assert!(build_offers(&fetched, &prefixes(), Some("atlas")).closed_to_vo.is_empty());
        fetched.policies = Some(vec![]);
        let o = build_offers(&fetched, &prefixes(), Some("cms"));
        assert_eq!(o.offers.len(), 0);
        assert_eq!(o.closed_to_vo.len(), 1, "{:?}", o.closed_to_vo);
        assert_eq!((o.closed_to_vo[0].share_id.as_str(), o.closed_to_vo[0].vo.as_str()), ("q1", "cms"));
    }

    #[test]
    fn numbers_out_of_range_skip_the_entry_with_a_warning_naming_dn_and_attribute() {
        let huge = "99999999999999999999";
        let max = i64::MAX.to_string();
        // CDER counts: overflow, negative, fractional, and a sum that overflows.
        for (info, attr) in [
            (vec![format!("GPGPUTotalInstances={huge}")], "GPGPUTotalInstances"),
            (vec!["GPGPUFreeInstances=-1".to_string()], "GPGPUFreeInstances"),
            (vec!["GPGPUPerNode=1.5".to_string()], "GPGPUPerNode"),
            (vec!["GPGPUMainMemorySize=-4800".to_string()], "GPGPUMainMemorySize"),
            (vec![format!("GPGPUFreeInstances={max}"), "GPGPUUsedInstances=1".to_string()], "GPGPUUsedInstances"),
        ] {
            let mut all = vec!["GPGPUVendor=Nvidia".to_string()];
            all.extend(info.iter().cloned());
            let refs: Vec<&str> = all.iter().map(String::as_str).collect();
            let o = build_offers(&site(&refs), &prefixes(), None);
            assert!(o.offers.is_empty(), "{info:?} gave {:?}", o.offers);
            assert_eq!(o.warnings.len(), 1, "{info:?}: {:?}", o.warnings);
            assert!(o.warnings[0].starts_with("GLUE2ResourceID=ee1,o=glue: skipped: "), "{:?}", o.warnings);
            assert!(o.warnings[0].contains(attr), "{info:?}: {:?}", o.warnings);
        }
        // The largest count that fits is fine.
        let ok = build_offers(&site(&["GPGPUVendor=Nvidia", &format!("GPGPUTotalInstances={max}")]), &prefixes(), None);
        assert_eq!(ok.offers.len(), 1, "{:?}", ok.warnings);
        // The same in an Extension: its DN and the value attribute are named.
        let mut fetched = site(&["GPGPUVendor=Nvidia"]);
        fetched.extensions = vec![Entry::from_pairs(
            "GLUE2ExtensionLocalID=GPGPUTotalInstances,GLUE2ResourceID=ee1,o=glue",
            [
                ("GLUE2ExtensionKey", "GPGPUTotalInstances"),
                ("GLUE2ExtensionValue", huge),
                ("GLUE2ExtensionEntityForeignKey", "ee1"),
            ],
        )];
        let o = build_offers(&fetched, &prefixes(), None);
        assert!(o.offers.is_empty());
        assert!(
            o.warnings[0].starts_with("GLUE2ExtensionLocalID=GPGPUTotalInstances,GLUE2ResourceID=ee1,o=glue: skipped:")
                && o.warnings[0].contains("GLUE2ExtensionValue"),
            "{:?}",
            o.warnings
        );
        // GLUE 2.0 numbers the offer reads: the share's free slots, the EE's memory.
        let mut fetched = site(&["GPGPUVendor=Nvidia"]);
        fetched.shares[0].set("glue2computingsharefreeslots", vec![huge.into()]);
        let o = build_offers(&fetched, &prefixes(), None);
        assert!(o.offers.is_empty());
        assert_eq!(o.warnings, [format!("GLUE2ShareID=q1,o=glue: skipped: GLUE2ComputingShareFreeSlots: \"{huge}\" is out of range (not a 64-bit integer)")]);
        let mut fetched = site(&["GPGPUVendor=Nvidia"]);
        fetched.carriers[0].set("glue2executionenvironmentmainmemorysize", vec!["-1".into()]);
        let o = build_offers(&fetched, &prefixes(), None);
        assert!(o.offers.is_empty());
        assert!(
            o.warnings[0].starts_with("GLUE2ResourceID=ee1,o=glue: skipped: GLUE2ExecutionEnvironmentMainMemorySize"),
            "{:?}",
            o.warnings
        );
        // GLUE 1.3 tags.
        let fetched = Fetched {
            subclusters: vec![Entry::from_pairs(
                "GlueSubClusterUniqueID=sc,GlueClusterUniqueID=c,mds-vo-name=resource,o=grid",
                [
                    ("GlueSubClusterUniqueID", "sc"),
                    ("GlueChunkKey", "GlueClusterUniqueID=c"),
                    ("GlueHostApplicationSoftwareRunTimeEnvironment", "GPGPUVendor=Nvidia"),
                    ("GlueHostApplicationSoftwareRunTimeEnvironment", "rCUDATotalVGPGPU=99999999999999999999"),
                ],
            )],
            glue13_ces: vec![Entry::from_pairs(
                "GlueCEUniqueID=ce,mds-vo-name=resource,o=grid",
                [("GlueCEUniqueID", "ce"), ("GlueForeignKey", "GlueClusterUniqueID=c")],
            )],
            ..Default::default()
        };
        let o = build_offers(&fetched, &prefixes(), None);
        assert!(o.offers.is_empty());
        assert!(
            o.warnings[0].starts_with("GlueSubClusterUniqueID=sc,") && o.warnings[0].contains("rCUDATotalVGPGPU"),
            "{:?}",
            o.warnings
        );
    }

    #[test]
    fn offers_differing_only_in_what_the_job_ignores_are_built_once() {
        let mut fetched = site(&["GPGPUVendor=Nvidia"]);
        let mut second = fetched.shares[0].clone();
        second.dn = "GLUE2ShareID=q2,o=glue".into();
        second.set("glue2shareid", vec!["q2".into()]);
        second.set("glue2computingsharefreeslots", vec!["99".into()]);
        fetched.shares.push(second);
        let count = |names: Option<&[&str]>| {
            let mut s = fetched.clone();
            s.names = names.map(|n| n.iter().map(|x| x.to_string()).collect());
            build_offers(&s, &prefixes(), None).offers
        };
        // Two shares of queue "gpu" offer the same EE: one offer when the job looks at neither share.
        let blind =
            count(Some(&["GPGPUVendor", "GLUE2ExecutionEnvironmentMainMemorySize", "GlueHostMainMemoryRAMSize"]));
        assert_eq!(blind.len(), 1);
        assert_eq!(blind[0].share_id.as_deref(), Some("q1"), "the first share, the one list-match would report");
        assert_eq!(count(Some(&["GPGPUVendor", "GLUE2ComputingShareFreeSlots"])).len(), 2);
        assert_eq!(count(Some(&["GPGPUVendor", "GlueCEStateFreeCPUs"])).len(), 2);
        assert_eq!(count(None).len(), 2);
    }

    #[test]
    fn offers_carry_only_what_the_job_may_look_up_and_match_alike() {
        let mut fetched = site(&["GPGPUVendor=Nvidia", "GPGPUMainMemorySize=4096"]);
        let full = build_offers(&fetched, &prefixes(), None).offers;
        fetched.names = Some(["GPGPUMainMemorySize".to_string(), "GlueCEStateFreeCPUs".to_string()].into());
        let slim = build_offers(&fetched, &prefixes(), None).offers;
        assert_eq!(full.len(), 1);
        assert_eq!(slim.len(), 1);
        assert!(full[0].ad.len() > 10, "{}", full[0].ad);
        let names: Vec<&str> = slim[0].ad.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["GlueCEStateFreeCPUs", "GPGPUMainMemorySize", "Requirements"]);
        for n in ["GPGPUMainMemorySize", "GlueCEStateFreeCPUs", "Requirements"] {
            assert_eq!(slim[0].ad.eval_attr(n).to_string(), full[0].ad.eval_attr(n).to_string(), "{n}");
        }
        assert_eq!(
            (&slim[0].ce_id, &slim[0].share_id, &slim[0].ee_id),
            (&full[0].ce_id, &full[0].share_id, &full[0].ee_id)
        );
    }

    #[test]
    fn values_are_typed() {
        assert!(matches!(typed("42"), Value::Int(42)));
        assert!(matches!(typed("2.1"), Value::Real(r) if r == 2.1));
        assert!(matches!(typed("TRUE"), Value::Bool(true)));
        assert!(matches!(typed("Tesla K20m"), Value::Str(_)));
        assert!(matches!(typed("e5"), Value::Str(_)));
    }
}
