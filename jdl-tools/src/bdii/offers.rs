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
use crate::bdii::query::{entity_id, parent_dn, service_dn, Entry, Snapshot};
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
/// [`Snapshot::names`]; None: every attribute. Matching and ranking read
/// nothing else, so an offer is built with those alone (a grid has 10^4
/// offers of some 40 attributes each).
struct Keep(Option<Vec<&'static str>>);

impl Keep {
    fn of(snap: &Snapshot) -> Keep {
        Keep(snap.names.as_ref().map(|names| names.iter().map(|n| crate::bdii::entry::intern(n)).collect()))
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
/// a lower-cased copy: a grid's snapshot has 10^4–10^5 of them.
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

/// What a run of shares gave: their offers and what was said of them, in
/// the shares' order.
#[derive(Default)]
struct ShareOffers<'a> {
    warnings: Vec<String>,
    closed: Vec<ClosedShare>,
    refused: Vec<RefusedClaim>,
    offers: Vec<BuiltOffer<'a>>,
}

/// One offer of a share, with what the merge of the parts needs.
struct BuiltOffer<'a> {
    offer: Offer,
    /// The share-blind key `(CE ID, EE)` that dedupes it, when it has one.
    blind: Option<(String, usize)>,
    /// Its service, whether that service owns its CE ID, the share's DN.
    claim: (usize, bool, &'a str),
    /// For the index: its traits (`seq` set when merged).
    traits: Option<OfferTraits>,
}

/// The services of a snapshot, each met once by its [`ServiceRef`].
#[derive(Default)]
struct Services<'a> {
    by_ref: HashMap<ServiceRef<'a>, usize>,
    list: Vec<Service<'a>>,
}

impl<'a> Services<'a> {
    fn index(&mut self, r: ServiceRef<'a>) -> usize {
        let list = &mut self.list;
        *self.by_ref.entry(r).or_insert_with(|| {
            list.push(Service { key: r.key(), ..Service::default() });
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
    key: String,
    managers: Vec<&'a Entry>,
    endpoints: Vec<&'a Entry>,
    /// EEs with CDER data.
    ees: Vec<(Option<&'a str>, &'a Entry)>,
    /// `TotalVGPGPU_<method>` / `FreeVGPGPU_<method>`.
    vgpgpu: BTreeMap<String, Value>,
    /// vGPGPU methods (RTE tags).
    apps: BTreeSet<String>,
    /// Share IDs open to the job's VO.
    open: BTreeSet<String>,
    /// Per share ID, the VOs whose MappingPolicies open it (index builds).
    open_to: BTreeMap<String, BTreeSet<String>>,
}

/// What the local index keeps of an offer beside its ad, so that one build
/// over every VO and every CDER key answers as the live path's build for one
/// job and one VO would (`crate::index`).
#[derive(Clone, Debug, Default)]
pub struct OfferTraits {
    /// The ComputingService the offer belongs to (`dn:…` or `id:…`); GLUE 1.3: empty.
    pub service: String,
    /// Whether that service owns the offer's CE ID (its endpoint names the host).
    pub proven: bool,
    /// The share's (GLUE 1.3: the GlueCE's) DN, for refused claims.
    pub share_dn: String,
    /// The VOs whose MappingPolicy rules (`VO:<name>`) open the share; GLUE
    /// 1.3: the CE's `GlueCEAccessControlBaseRule` `VO:` names.
    pub open_to: BTreeSet<String>,
    /// The EE's DN, lower-cased: offers of one CE and EE are built once for a
    /// job that names nothing of the share.
    pub ee_dn: Option<String>,
    /// The CDER keys of the EE (GLUE 1.3: the SubCluster's tag keys).
    pub ee_keys: BTreeSet<String>,
    /// The CDER keys of the share itself (None: the share carries none).
    pub share_keys: Option<BTreeSet<String>>,
    /// GLUE 1.3: a tag starts or ends with a CDER prefix (`GPGPU…`, `NvidiaGPGPU`).
    pub prefix_tagged: bool,
    /// GLUE 1.3: a tag publishes a vGPGPU count (`rCUDATotalVGPGPU=8`).
    pub vgpgpu_tagged: bool,
    /// GLUE 2.0: the offer of a share that carries CDER keys, without the EEs
    /// it names: what the live build makes when the job's keys fetch the
    /// share and none of those EEs (`ee_keys`: all their keys).
    pub share_only: bool,
    /// GLUE 2.0: the service's vGPGPU counts (`TotalVGPGPU_rCUDA`), added for vGPGPU jobs.
    pub vgpgpu: Vec<(String, Value)>,
    /// GLUE 2.0: the service's vGPGPU methods, added to the RTE list for vGPGPU jobs.
    pub apps: Vec<String>,
    /// Why the share's claim to its CE ID is refused (the offer is never
    /// shown; the claim is, when the share is open to the job's VO).
    pub refused: Option<String>,
    /// The order the live build meets the offer in (refused claims are listed in it).
    pub seq: usize,
}

/// Builds the offers of a snapshot. `prefixes`: the CDER key prefixes (`GPGPU`).
///
/// Joins follow the DN tree: a share, the EEs it names, their manager,
/// Extensions and the MappingPolicies are matched within one
/// ComputingService, because real top-level BDIIs reuse IDs across sites.
pub fn build_offers(snap: &Snapshot, prefixes: &[String], vo: Option<&str>) -> Offers {
    build(snap, prefixes, vo, None)
}

/// Every offer of a snapshot fetched for every VO and CDER key, with what
/// [`build_offers`] would decide per job and VO left undecided and recorded
/// in the [`OfferTraits`] (same order as the offers): which VOs open each
/// share, the keys of its EE and share, the vGPGPU counts, and the claims
/// that contested CE IDs and GLUE 1.3 duplicates are settled by. Every
/// attribute is kept; `snap.names` is ignored.
pub fn build_offers_for_index(snap: &Snapshot, prefixes: &[String]) -> (Offers, Vec<OfferTraits>) {
    let mut traits = Vec::new();
    let mut out = build(snap, prefixes, None, Some(&mut traits));
    let mut both: Vec<(Offer, OfferTraits)> = std::mem::take(&mut out.offers).into_iter().zip(traits).collect();
    both.sort_by(|(a, _), (b, _)| (a.ce_id.as_str(), a.schema, &a.ee_id).cmp(&(b.ce_id.as_str(), b.schema, &b.ee_id)));
    let (offers, traits) = both.into_iter().unzip();
    out.offers = offers;
    (out, traits)
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

/// [`build_offers`]; with `index`, the index's build (see [`build_offers_for_index`]).
fn build(snap: &Snapshot, prefixes: &[String], vo: Option<&str>, mut index: Option<&mut Vec<OfferTraits>>) -> Offers {
    let mut out = Offers::default();
    let keep = if index.is_some() { Keep(None) } else { Keep::of(snap) };
    let vendor_keys: Vec<String> = prefixes.iter().map(|p| format!("{p}Vendor")).collect();
    let managers_by_id: HashMap<&str, &Entry> =
        snap.managers.iter().filter_map(|m| Some((m.first("GLUE2ManagerID")?, m))).collect();
    // One carrier per DN (the first entry wins), with its CDER pairs; an unusable
    // carrier keeps its slot, its pairs None, and a warning says why.
    let mut carriers: Vec<Carrier> = Vec::with_capacity(snap.carriers.len());
    let dns = DnHashes::default();
    let mut by_dn: ByDn = ByDn::with_capacity_and_hasher(snap.carriers.len(), Default::default());
    let facts =
        read_carriers(&snap.carriers, &snap.carrier_reads, prefixes, snap.extensions.is_empty(), &managers_by_id, &dns);
    for (c, f) in snap.carriers.iter().zip(facts) {
        let Some(id) = f.id else {
            out.warnings.push(format!("{}: skipped: no GLUE2 ID", c.dn));
            continue;
        };
        match by_dn.entry(f.dn) {
            MapEntry::Occupied(_) => continue,
            MapEntry::Vacant(slot) => slot.insert(carriers.len()),
        };
        let pairs = f
            .read
            .pairs
            .map_err(|why| out.warnings.push(format!("{}: skipped: malformed OtherInfo: {why}", c.dn)))
            .ok();
        let (service, checked, share_id, ee, app_env) = (f.service, f.read.checked, f.share_id, f.ee, f.app_env);
        carriers.push(Carrier { entry: c, id, service, pairs, checked, share_id, ee, app_env });
    }
    // Carriers by (service, ID) and by ID alone, for Extensions not placed under their entity.
    let mut by_service_id: HashMap<(Option<ServiceRef>, &str), Vec<usize>> = HashMap::new();
    if !snap.extensions.is_empty() {
        by_service_id.reserve(2 * carriers.len());
        for (i, c) in carriers.iter().enumerate() {
            by_service_id.entry((c.service, c.id)).or_default().push(i);
            by_service_id.entry((None, c.id)).or_default().push(i);
        }
    }
    // Extensions: a key set twice on one entity with different values is malformed;
    // the same key and value in OtherInfo and an Extension (hybrid publishing) is not.
    // By carrier, merged in the carriers' order.
    let mut from_ext: BTreeMap<usize, Pairs<&str>> = BTreeMap::new();
    for x in &snap.extensions {
        let (Some(k), Some(v)) = (x.first("GLUE2ExtensionKey"), x.first("GLUE2ExtensionValue")) else {
            out.warnings.push(format!("{}: skipped: Extension without key or value", x.dn));
            continue;
        };
        let parent = parent_dn(&x.dn).and_then(|p| by_dn.get(&dns.of(p)).copied());
        let service = service_dn(&x.dn).map(|s| ServiceRef::Dn(Caseless(s)));
        for fk in x.all("GLUE2ExtensionEntityForeignKey") {
            // The entity above the Extension; else the one of that ID in its service; else,
            // for an Extension outside any service, the only one of that ID anywhere (one
            // inside a service speaks only for that service's entities).
            let unique =
                |key: &(Option<ServiceRef>, &str)| by_service_id.get(key).filter(|v| v.len() == 1).map(|v| v[0]);
            let target = parent
                .filter(|&p| carriers[p].id == fk)
                .or_else(|| unique(&(service, fk)))
                .or_else(|| unique(&(None, fk)).filter(|_| service.is_none()));
            let Some(target) = target else { continue };
            if carriers[target].pairs.is_none() {
                continue;
            }
            if let Err(why) = add_pair(from_ext.entry(target).or_default(), k, v, prefixes) {
                out.warnings
                    .push(format!("{}: skipped: malformed Extension of {fk}: GLUE2ExtensionValue: {why}", x.dn));
                carriers[target].pairs = None;
            }
        }
    }
    for (t, pairs) in from_ext {
        let carrier = &mut carriers[t];
        let Some(slot) = carrier.pairs.as_mut().map(Cow::to_mut) else { continue };
        for (k, v) in pairs {
            if let Some(old) = slot.get(k) {
                if old.identical(&v) != Some(true) {
                    out.warnings.push(format!(
                        "{}: skipped: {k} is {old} in OtherInfo but {v} in an Extension",
                        carrier.entry.dn
                    ));
                    carrier.pairs = None;
                    break;
                }
            }
            slot.insert(k, v);
        }
    }
    for c in &mut carriers {
        let Some(pairs) = &c.pairs else { continue };
        let checked = c.checked.take().unwrap_or_else(|| check_carrier(c.entry, pairs, prefixes));
        if let Err(why) = checked {
            out.warnings.push(format!("{}: skipped: {why}", c.entry.dn));
            c.pairs = None;
        }
    }

    let mut services = Services::default();
    // The CDER pairs of each offered EE, by the entry itself: an EE is one
    // entry per DN (`by_dn`), and offers of a grid look them up 10^4 times.
    let mut ee_pairs: HashMap<usize, &Pairs<&str>> = HashMap::new();
    for m in &snap.managers {
        if let Some(key) = service_key(m, &managers_by_id) {
            services.slot(key).managers.push(m);
        }
    }
    for e in &snap.endpoints {
        if let Some(key) = service_key(e, &managers_by_id) {
            services.slot(key).endpoints.push(e);
        }
    }
    // EEs and AppEnvs with CDER data, by service, in DN order (ties of EE IDs keep it).
    let mut placed: Vec<&Carrier> =
        carriers.iter().filter(|c| c.pairs.is_some() && c.service.is_some() && (c.ee || c.app_env)).collect();
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
            ee_pairs.insert(std::ptr::from_ref(e) as usize, pairs);
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
    for svc in &mut services.list {
        svc.ees.sort_by_key(|&(id, _)| id);
        svc.endpoints.sort_by(|a, b| a.first("GLUE2EndpointID").cmp(&b.first("GLUE2EndpointID")));
    }
    // Policies: under their share (DN tree), else by the share IDs they name in their
    // service; a policy outside any service opens shares of that ID anywhere.
    let mut open_anywhere: BTreeSet<&str> = BTreeSet::new();
    // Policies outside any service (index builds), by share ID.
    let mut anywhere_open_to: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    if let Some(ps) = &snap.policies {
        if index.is_some() {
            for p in ps {
                let vos: Vec<&str> = p.all("GLUE2PolicyRule").iter().filter_map(|r| r.strip_prefix("VO:")).collect();
                let open_to = match service_dn(&p.dn) {
                    Some(s) => &mut services.slot(ServiceRef::Dn(Caseless(s))).open_to,
                    None => &mut anywhere_open_to,
                };
                for share in p.all("GLUE2MappingPolicyShareForeignKey") {
                    open_to.entry(share.to_string()).or_default().extend(vos.iter().map(|v| v.to_string()));
                }
            }
        }
        for p in ps.iter().filter(|p| {
            index.is_none()
                && vo.is_none_or(|vo| {
                    p.all("GLUE2PolicyRule").iter().any(|r| r.strip_prefix("VO:").is_some_and(|v| v == vo))
                })
        }) {
            match service_dn(&p.dn) {
                Some(s) => {
                    let svc = services.slot(ServiceRef::Dn(Caseless(s)));
                    svc.open.extend(p.all("GLUE2MappingPolicyShareForeignKey").iter().map(str::to_string));
                }
                None => open_anywhere.extend(p.all("GLUE2MappingPolicyShareForeignKey").iter()),
            }
        }
    }

    // Each share with its carrier and service, read on a few threads, then met in order
    // here (this makes the services' slots; a service's shares usually come together), so
    // that the offers can then be built on several threads.
    let read = if snap.shares.is_empty() && carriers.len() == snap.carriers.len() {
        // Every carrier kept, each DN once (a fetch's snapshot of keys on shares): the
        // shares are the carriers that are shares, each its own carrier, its service known.
        in_parts(&carriers, |_, part| {
            part.iter()
                .filter(|c| c.pairs.is_some())
                .filter_map(|c| Some((c.entry, c.share_id?, Some(c), c.service?)))
                .collect::<Vec<_>>()
        })
    } else {
        let mut shares: Vec<&Entry> = Vec::new();
        let mut seen: HashSet<Caseless> = HashSet::with_capacity(snap.shares.len() + snap.carriers.len());
        for s in snap.shares.iter().chain(snap.carriers.iter().filter(|c| c.is_a("GLUE2ComputingShare"))) {
            if seen.insert(Caseless(&s.dn)) {
                shares.push(s);
            }
        }
        in_parts(&shares, |_, part| {
            part.iter()
                .filter_map(|&share| {
                    let share_id = share.first("GLUE2ShareID")?;
                    let carrier = by_dn.get(&dns.of(&share.dn)).map(|&i| &carriers[i]);
                    if carrier.is_some_and(|c| c.pairs.is_none()) {
                        return None;
                    }
                    Some((share, share_id, carrier, service_key(share, &managers_by_id)?))
                })
                .collect::<Vec<_>>()
        })
    };
    let mut placed_shares: Vec<(&Entry, &str, Option<&Carrier>, usize)> =
        Vec::with_capacity(read.iter().map(Vec::len).sum());
    let mut last: Option<(ServiceRef, usize)> = None;
    for (share, share_id, carrier, key) in read.into_iter().flatten() {
        let service = match last {
            Some((k, i)) if k == key => i,
            _ => services.index(key),
        };
        last = Some((key, service));
        placed_shares.push((share, share_id, carrier, service));
    }
    // Offers that differ only in what the job never looks at are built once: the
    // VO shares of a queue offering the same EE, when the job names nothing of the
    // share or its endpoint. The first (the one list-match would report) is kept.
    let share_blind = index.is_none() && snap.names.as_ref().is_some_and(share_blind);
    let for_index = index.is_some();
    let (services, ee_pairs, keep) = (&services, &ee_pairs, &keep);
    // Per GLUE 2.0 offer: its service, whether that service owns its CE ID, the share.
    let mut claims: Vec<(usize, bool, &str)> = Vec::new();
    let mut built: HashSet<(String, usize)> = HashSet::new();
    let parts = in_parts(&placed_shares, |_, part| {
        let mut got = ShareOffers::default();
        let mut names = AdNames::default();
        // First-wins within the part; the merge below settles it across parts.
        let mut built: HashSet<(String, usize)> = HashSet::new();
        for &(share, share_id, carrier, service) in part {
            let svc = &services.list[service];
            let share_cder = carrier.and_then(|c| c.pairs.as_deref());
            // A share names one or two EEs and endpoints: looked up in place, not collected.
            let (ee_fks, resource_fks) = (
                share.all("GLUE2ComputingShareExecutionEnvironmentForeignKey"),
                share.all("GLUE2ShareResourceForeignKey"),
            );
            let named = |id: &str| ee_fks.iter().chain(resource_fks.iter()).any(|n| n == id);
            let names_none = ee_fks.is_empty() && resource_fks.is_empty();
            let ees: Vec<&Entry> =
                svc.ees.iter().filter(|(id, _)| names_none || id.is_some_and(named)).map(|&(_, e)| e).collect();
            if ees.is_empty() && share_cder.is_none() {
                continue;
            }
            if !for_index
                && snap.policies.is_some()
                && !svc.open.contains(share_id)
                && !open_anywhere.contains(share_id)
            {
                // A share that would be offered, but not to this VO: `--explain` says so.
                if let Some(vo) = vo {
                    got.closed.push(ClosedShare {
                        share_id: share_id.to_string(),
                        queue: share.first("GLUE2ComputingShareMappingQueue").map(str::to_string),
                        dn: share.dn.clone(),
                        vo: vo.to_string(),
                    });
                }
                continue;
            }
            if share_cder.is_none() {
                // A share offering an EE's devices: its own numbers are read too.
                if let Err(why) = check_glue_numbers(share, GLUE2_COUNTS) {
                    got.warnings.push(format!("{}: skipped: {why}", share.dn));
                    continue;
                }
            }
            let queue = share.first("GLUE2ComputingShareMappingQueue");
            let (endpoint_fks, computing_endpoint_fks) = (
                share.all("GLUE2ShareEndpointForeignKey"),
                share.all("GLUE2ComputingShareComputingEndpointForeignKey"),
            );
            let named_endpoint = |id: &str| endpoint_fks.iter().chain(computing_endpoint_fks.iter()).any(|n| n == id);
            let endpoint = svc
                .endpoints
                .iter()
                .find(|e| e.first("GLUE2EndpointID").is_some_and(named_endpoint))
                .or_else(|| svc.endpoints.first())
                .copied();
            let manager_of = |e: &Entry| -> Option<&Entry> {
                let fk = manager_fk(e);
                svc.managers
                    .iter()
                    .find(|m| m.first("GLUE2ManagerID").is_some_and(|id| Some(id) == fk))
                    .or_else(|| svc.managers.first())
                    .copied()
            };
            let manager = ees.first().and_then(|e| manager_of(e)).or_else(|| svc.managers.first().copied());
            let (ce_id, source) = ce_unique_id(share, endpoint, manager, queue, &svc.endpoints);
            // Phase 2 restricts a job to CE IDs: an offer without one can never be chosen.
            if ce_id.trim().is_empty() {
                got.warnings.push(format!(
                    "{}: skipped: no CE ID (CREAMCEId, endpoint URL and queue, or GLUE2ShareID)",
                    share.dn
                ));
                continue;
            }
            // A share speaks only for its own service's CEs: another site could
            // otherwise divert jobs to its queue, or fake a CE's GPUs.
            let proven = source == CeIdSource::Endpoint || service_owns(&ce_id, &svc.key, svc);
            let host_form = ce_id.contains(':') || ce_id.contains('/');
            let mut refused = None;
            if !proven && (source == CeIdSource::Published || host_form) {
                let claim = RefusedClaim {
                    ce_id: ce_id.clone(),
                    share: share.dn.clone(),
                    reason: format!(
                        "published by a share of another service ({}): the CE's host is none of that service's endpoints",
                        svc.key.split_once(':').map_or(svc.key.as_str(), |(_, k)| k)
                    ),
                };
                // The index keeps the claim and settles it per VO, as this build would.
                if !for_index {
                    got.refused.push(claim);
                    continue;
                }
                refused = Some(claim.reason);
            }
            let mut targets: Vec<Option<&Entry>> =
                if ees.is_empty() { vec![None] } else { ees.iter().map(|e| Some(*e)).collect() };
            // The index also keeps the share's offer without its EEs, for jobs whose
            // keys fetch the share but none of them.
            let share_only = for_index && share_cder.is_some() && !ees.is_empty();
            if share_only {
                targets.push(None);
            }
            for ee in targets {
                let blind = ee
                    .filter(|_| share_blind && share_cder.is_none())
                    .map(|e| (ce_id.clone(), std::ptr::from_ref(e) as usize));
                if blind.as_ref().is_some_and(|key| !built.insert(key.clone())) {
                    continue;
                }
                let mut ad = Ad::new(keep, &mut names);
                ad.put_str("MyType", "Machine");
                ad.put_str("Name", &ce_id);
                ad.put_str("GlueCEUniqueID", &ce_id);
                if let Some(hp) = host_port(&ce_id).filter(|_| ad.wants("GlueCEInfoHostName")) {
                    ad.put_str("GlueCEInfoHostName", hp.split(':').next().unwrap_or(hp));
                }
                copy_glue2(&mut ad, share);
                if let Some(e) = ee {
                    copy_glue2(&mut ad, e);
                }
                if let Some(ep) = endpoint {
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
                glue13_names(&mut ad, Some(share), ee, ee.and_then(manager_of).or(manager));
                let mut rte: Vec<String> = Vec::new();
                let mut add_cder = |ad: &mut Ad, pairs: &Pairs<&str>| {
                    for (&k, v) in pairs {
                        if VGPGPU_KEYS.contains(&k) {
                            continue;
                        }
                        if ad.wants(k) {
                            ad.put(k, v.clone());
                        }
                        if let Some(p) = vendor_keys.iter().position(|vk| vk == k).map(|i| &prefixes[i]) {
                            if let Value::Str(vendor) = v {
                                rte.push(format!("{vendor}{p}"));
                            }
                        }
                    }
                };
                if let Some(pairs) = ee.and_then(|e| ee_pairs.get(&(std::ptr::from_ref(e) as usize))) {
                    add_cder(&mut ad, pairs);
                }
                if let Some(pairs) = share_cder {
                    add_cder(&mut ad, pairs);
                }
                if !for_index {
                    for (k, v) in &svc.vgpgpu {
                        ad.put(k, v.clone());
                    }
                }
                if ad.wants("GlueHostApplicationSoftwareRunTimeEnvironment") {
                    if !for_index {
                        rte.extend(svc.apps.iter().cloned());
                    }
                    rte.dedup();
                    ad.put(
                        "GlueHostApplicationSoftwareRunTimeEnvironment",
                        Value::List(rte.into_iter().map(|s| Value::Str(s.into())).collect::<Vec<_>>().into()),
                    );
                }
                if let Some(vo) = vo.filter(|_| ad.wants("GlueCEAccessControlBaseRule")) {
                    ad.put(
                        "GlueCEAccessControlBaseRule",
                        Value::List(vec![Value::Str(format!("VO:{vo}").into())].into()),
                    );
                }
                ad.put(keys::REQUIREMENTS, Value::Bool(true));
                let offer = Offer {
                    ce_id: ce_id.clone(),
                    queue: queue.map(str::to_string),
                    share_id: Some(share_id.to_string()),
                    ee_id: ee.and_then(entity_id),
                    schema: "GLUE2",
                    ad: ad.ad,
                };
                let traits = for_index.then(|| {
                    let mut open_to: BTreeSet<String> = svc.open_to.get(share_id).cloned().unwrap_or_default();
                    open_to.extend(anywhere_open_to.get(share_id).into_iter().flatten().cloned());
                    OfferTraits {
                        service: svc.key.clone(),
                        proven,
                        share_dn: share.dn.clone(),
                        open_to,
                        ee_dn: ee.map(|e| e.dn.to_ascii_lowercase()),
                        ee_keys: match ee {
                            Some(e) => ee_pairs
                                .get(&(std::ptr::from_ref(e) as usize))
                                .map(|p| p.keys().map(|k| k.to_string()).collect()),
                            None if share_only => Some(
                                ees.iter()
                                    .filter_map(|e| ee_pairs.get(&(std::ptr::from_ref(*e) as usize)))
                                    .flat_map(|p| p.keys().map(|k| k.to_string()))
                                    .collect(),
                            ),
                            None => None,
                        }
                        .unwrap_or_default(),
                        share_only: share_only && ee.is_none(),
                        share_keys: share_cder.map(|p| p.keys().map(|k| k.to_string()).collect()),
                        vgpgpu: svc.vgpgpu.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                        apps: svc.apps.iter().cloned().collect(),
                        refused: refused.clone(),
                        ..OfferTraits::default()
                    }
                });
                got.offers.push(BuiltOffer { offer, blind, claim: (service, proven, &share.dn), traits });
            }
        }
        got
    });
    for part in parts {
        out.warnings.extend(part.warnings);
        out.closed_to_vo.extend(part.closed);
        out.refused_claims.extend(part.refused);
        for b in part.offers {
            if b.blind.is_some_and(|key| !built.insert(key)) {
                continue;
            }
            out.offers.push(b.offer);
            claims.push(b.claim);
            if let (Some(traits), Some(mut t)) = (index.as_deref_mut(), b.traits) {
                t.seq = traits.len();
                traits.push(t);
            }
        }
    }
    if index.is_none() {
        refuse_contested(&mut out, &claims);
    }
    let for_index = index.is_some();
    glue13_offers(snap, prefixes, &mut out, index);
    // The index's build sorts its offers with their traits (zipped in push order).
    if for_index {
        return out;
    }
    out.offers.sort_by(|a, b| (a.ce_id.as_str(), a.schema, &a.ee_id).cmp(&(b.ce_id.as_str(), b.schema, &b.ee_id)));
    out
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

/// A CE ID offered under several services is kept only from the services
/// that own it; when none does, every claim is left out (and explained).
fn refuse_contested(out: &mut Offers, claims: &[(usize, bool, &str)]) {
    // Per CE ID, the first service met offering it, and whether another one does too.
    let mut services_of: HashMap<&str, (usize, bool)> = HashMap::with_capacity(out.offers.len());
    for (offer, (service, _, _)) in out.offers.iter().zip(claims) {
        let seen = services_of.entry(offer.ce_id.as_str()).or_insert((*service, false));
        seen.1 |= seen.0 != *service;
    }
    let contested: BTreeSet<String> =
        services_of.iter().filter(|(_, (_, several))| *several).map(|(id, _)| id.to_string()).collect();
    if contested.is_empty() {
        return;
    }
    let mut refused: BTreeSet<(String, String)> = BTreeSet::new();
    let offers = std::mem::take(&mut out.offers);
    for (offer, (_, proven, share)) in offers.into_iter().zip(claims) {
        if !contested.contains(&offer.ce_id) || *proven {
            out.offers.push(offer);
        } else if refused.insert((offer.ce_id.clone(), share.to_string())) {
            out.refused_claims.push(RefusedClaim {
                ce_id: offer.ce_id.clone(),
                share: share.to_string(),
                reason: "published by several services, and this share's service does not own it".into(),
            });
        }
    }
}

/// GLUE 1.3 (Tagged-Environment): one offer per GlueCE and SubCluster.
fn glue13_offers(snap: &Snapshot, prefixes: &[String], out: &mut Offers, mut index: Option<&mut Vec<OfferTraits>>) {
    // Every GLUE 1.3 offer is a GlueCE's.
    if snap.glue13_ces.is_empty() {
        return;
    }
    let keep = if index.is_some() { Keep(None) } else { Keep::of(snap) };
    let mut names = AdNames::default();
    let glue2_ces: BTreeSet<String> = out.offers.iter().filter(|_| index.is_none()).map(|o| o.ce_id.clone()).collect();
    let mut subs_of_cluster: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for sc in &snap.subclusters {
        for k in sc.all("GlueChunkKey") {
            if let Some(c) = k.strip_prefix("GlueClusterUniqueID=") {
                subs_of_cluster.entry(c).or_default().push(sc);
            }
        }
    }
    for ce in &snap.glue13_ces {
        let Some(ce_id) = ce.first("GlueCEUniqueID").filter(|id| !id.trim().is_empty()) else {
            out.warnings.push(format!("{}: skipped: no GlueCEUniqueID", ce.dn));
            continue;
        };
        // A site publishing both schemas: its GLUE 2.0 offer wins.
        if glue2_ces.contains(ce_id) {
            continue;
        }
        let clusters: Vec<&str> =
            ce.all("GlueForeignKey").iter().filter_map(|k| k.strip_prefix("GlueClusterUniqueID=")).collect();
        for sc in clusters.iter().flat_map(|c| subs_of_cluster.get(c).into_iter().flatten()) {
            let mut pairs = Pairs::default();
            let mut tags = Vec::new();
            let mut broken = None;
            for tag in sc.all("GlueHostApplicationSoftwareRunTimeEnvironment") {
                tags.push(Value::Str(tag.into()));
                let Some((k, v)) = tag.split_once('=') else { continue };
                // `rCUDATotalVGPGPU=8` → `TotalVGPGPU_rCUDA`.
                let key = VGPGPU_KEYS
                    .iter()
                    .find_map(|vk| k.strip_suffix(vk).filter(|m| !m.is_empty()).map(|m| format!("{vk}_{m}")))
                    .unwrap_or_else(|| k.to_string());
                let res = if key.contains('_') && VGPGPU_KEYS.iter().any(|vk| key.starts_with(vk)) {
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
                };
                if let Err(why) = res {
                    broken = Some(why);
                    break;
                }
            }
            if broken.is_none() {
                broken = check_cder_numbers(&pairs, prefixes).err();
            }
            if let Some(why) = broken {
                out.warnings.push(format!("{}: skipped: malformed tag: {why}", sc.dn));
                continue;
            }
            if let Some((e, why)) =
                [ce, *sc].into_iter().find_map(|e| check_glue_numbers(e, &[]).err().map(|why| (e, why)))
            {
                out.warnings.push(format!("{}: skipped: {why}", e.dn));
                continue;
            }
            let mut ad = Ad::new(&keep, &mut names);
            ad.put_str("MyType", "Machine");
            ad.put_str("Name", ce_id);
            for e in [ce, *sc] {
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
            ad.put("GlueHostApplicationSoftwareRunTimeEnvironment", Value::List(tags.into()));
            for (k, v) in pairs {
                ad.put(&k, v);
            }
            ad.put(keys::REQUIREMENTS, Value::Bool(true));
            if let Some(traits) = index.as_deref_mut() {
                let tags = sc.all("GlueHostApplicationSoftwareRunTimeEnvironment");
                let affix = |t: &str, p: &str| {
                    let (t, p) = (t.as_bytes(), p.as_bytes());
                    t.len() >= p.len()
                        && (t[..p.len()].eq_ignore_ascii_case(p) || t[t.len() - p.len()..].eq_ignore_ascii_case(p))
                };
                traits.push(OfferTraits {
                    share_dn: ce.dn.clone(),
                    open_to: ce
                        .all("GlueCEAccessControlBaseRule")
                        .iter()
                        .filter_map(|r| {
                            r.get(..3).filter(|p| p.eq_ignore_ascii_case("VO:")).map(|_| r[3..].to_string())
                        })
                        .collect(),
                    ee_keys: tags.iter().filter_map(|t| t.split_once('=')).map(|(k, _)| k.to_string()).collect(),
                    prefix_tagged: tags.iter().any(|t| prefixes.iter().any(|p| affix(t, p))),
                    vgpgpu_tagged: tags.iter().any(|t| t.to_ascii_lowercase().contains("totalvgpgpu=")),
                    seq: traits.len(),
                    ..OfferTraits::default()
                });
            }
            out.offers.push(Offer {
                ce_id: ce_id.to_string(),
                queue: ce.first("GlueCEName").map(str::to_string),
                share_id: Some(ce_id.to_string()),
                ee_id: sc.first("GlueSubClusterUniqueID").map(str::to_string),
                schema: "GLUE1.3",
                ad: ad.ad,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefixes() -> Vec<String> {
        vec![DEFAULT_PREFIX.to_string()]
    }

    fn site(other_info: &[&str]) -> Snapshot {
        let mut ee = vec![
            ("objectClass", "GLUE2ExecutionEnvironment"),
            ("GLUE2ResourceID", "ee1"),
            ("GLUE2ExecutionEnvironmentComputingManagerForeignKey", "m1"),
            ("GLUE2ExecutionEnvironmentMainMemorySize", "65536"),
        ];
        ee.extend(other_info.iter().map(|v| ("GLUE2EntityOtherInfo", *v)));
        Snapshot {
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
    fn site_with_hostile_share(hostile_ce_id: &str) -> Snapshot {
        let gpu = ["GPGPUVendor=Nvidia", "GPGPUMainMemorySize=4800"];
        let mut snap = site(&gpu);
        snap.shares[0].push("GLUE2EntityOtherInfo", "CREAMCEId=ce1.example.org:8443/cream-slurm-gpu".into());
        let mut ee2 = vec![
            ("objectClass", "GLUE2ExecutionEnvironment"),
            ("GLUE2ResourceID", "ee2"),
            ("GLUE2ExecutionEnvironmentComputingManagerForeignKey", "m2"),
        ];
        ee2.extend(gpu.iter().map(|v| ("GLUE2EntityOtherInfo", *v)));
        snap.carriers.push(Entry::from_pairs("GLUE2ResourceID=ee2,o=glue", ee2));
        snap.managers.push(Entry::from_pairs(
            "GLUE2ManagerID=m2,o=glue",
            [
                ("objectClass", "GLUE2ComputingManager"),
                ("GLUE2ManagerID", "m2"),
                ("GLUE2ComputingManagerComputingServiceForeignKey", "s2"),
                ("GLUE2ManagerProductName", "SLURM"),
            ],
        ));
        let claim = format!("CREAMCEId={hostile_ce_id}");
        snap.shares.push(Entry::from_pairs(
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
        snap.endpoints.push(Entry::from_pairs(
            "GLUE2EndpointID=e2,o=glue",
            [
                ("GLUE2EndpointID", "e2"),
                ("GLUE2EndpointURL", "https://evil.example.net:8443/ce-cream/services"),
                ("GLUE2EndpointServiceForeignKey", "s2"),
            ],
        ));
        snap
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
        let mut snap = site(&["GPGPUVendor=Nvidia"]);
        snap.endpoints.push(Entry::from_pairs(
            "GLUE2EndpointID=e-rest,o=glue",
            [
                ("GLUE2EndpointID", "e-rest"),
                ("GLUE2EndpointURL", "https://arc.example.org:8443/arex"),
                ("GLUE2EndpointInterfaceName", ARC_REST_INTERFACE),
                ("GLUE2EndpointServiceForeignKey", "s1"),
            ],
        ));
        let o = build_offers(&snap, &prefixes(), None);
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
        let mut snap = site_with_hostile_share("x");
        for sh in &mut snap.shares {
            sh.remove("glue2entityotherinfo");
            sh.remove("glue2computingsharemappingqueue");
            sh.set("glue2shareid", vec!["shared-id".into()]);
        }
        let o = build_offers(&snap, &prefixes(), None);
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
    fn a_share_without_any_ce_id_gives_no_offer() {
        // Found by the bdii_offers fuzz target: no endpoint URL, no CREAMCEId
        // and an empty GLUE2ShareID made an offer whose CE ID was "".
        let mut snap = site(&["GPGPUVendor=Nvidia"]);
        snap.endpoints.clear();
        snap.shares = vec![Entry::from_pairs(
            "GLUE2ShareID=,o=glue",
            [
                ("objectClass", "GLUE2ComputingShare"),
                ("GLUE2ShareID", ""),
                ("GLUE2ShareServiceForeignKey", "s1"),
                ("GLUE2ComputingShareMappingQueue", "gpu"),
            ],
        )];
        let o = build_offers(&snap, &prefixes(), None);
        assert!(
            o.offers.iter().all(|offer| !offer.ce_id.is_empty()),
            "{:?}",
            o.offers.iter().map(|x| &x.ce_id).collect::<Vec<_>>()
        );
        assert!(o.offers.is_empty(), "{:?}", o.offers.len());
    }

    /// Keys on shares: the shares of a fetch's snapshot (each DN once) are read
    /// from its carriers; a snapshot with a DN twice is read the general way, and
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
        let unique = Snapshot {
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
        let mut snap = site(&info);
        let mut reads = CarrierReads::new(prefixes(), true);
        let read = reads.read(&snap.carriers[0]);
        assert!(read.is_none(), "read early with {} keys", info.len());
        reads.file(0, read);
        snap.carrier_reads = reads;
        let o = build_offers(&snap, &prefixes(), None);
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
                let mut snap = site(info);
                let mut reads = CarrierReads::new(with, snap.extensions.is_empty());
                let read = reads.read(&snap.carriers[0]);
                assert!(read.is_some(), "{info:?} not read early");
                reads.file(at, read);
                snap.carrier_reads = reads;
                if at == 1 {
                    // Filed for a carrier that is another entry: a copy of the first.
                    snap.carriers.push(snap.carriers[0].clone());
                    snap.carriers.swap(0, 1);
                    let mut again = plain.clone();
                    again.carriers.push(again.carriers[0].clone());
                    assert_eq!(
                        format!("{:?}", build_offers(&snap, &prefixes(), None)),
                        format!("{:?}", build_offers(&again, &prefixes(), None))
                    );
                    continue;
                }
                assert_eq!(format!("{:?}", build_offers(&snap, &prefixes(), None)), expected, "{info:?}");
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
        let mut snap = site(&["GPGPUVendor=Nvidia"]);
        snap.policies = Some(vec![Entry::from_pairs(
            "GLUE2PolicyID=p,o=glue",
            [("GLUE2PolicyRule", "VO:atlas"), ("GLUE2MappingPolicyShareForeignKey", "q1")],
        )]);
        assert_eq!(build_offers(&snap, &prefixes(), Some("atlas")).offers.len(), 1);
        assert!(build_offers(&snap, &prefixes(), Some("atlas")).closed_to_vo.is_empty());
        snap.policies = Some(vec![]);
        let o = build_offers(&snap, &prefixes(), Some("cms"));
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
        let mut snap = site(&["GPGPUVendor=Nvidia"]);
        snap.extensions = vec![Entry::from_pairs(
            "GLUE2ExtensionLocalID=GPGPUTotalInstances,GLUE2ResourceID=ee1,o=glue",
            [
                ("GLUE2ExtensionKey", "GPGPUTotalInstances"),
                ("GLUE2ExtensionValue", huge),
                ("GLUE2ExtensionEntityForeignKey", "ee1"),
            ],
        )];
        let o = build_offers(&snap, &prefixes(), None);
        assert!(o.offers.is_empty());
        assert!(
            o.warnings[0].starts_with("GLUE2ExtensionLocalID=GPGPUTotalInstances,GLUE2ResourceID=ee1,o=glue: skipped:")
                && o.warnings[0].contains("GLUE2ExtensionValue"),
            "{:?}",
            o.warnings
        );
        // GLUE 2.0 numbers the offer reads: the share's free slots, the EE's memory.
        let mut snap = site(&["GPGPUVendor=Nvidia"]);
        snap.shares[0].set("glue2computingsharefreeslots", vec![huge.into()]);
        let o = build_offers(&snap, &prefixes(), None);
        assert!(o.offers.is_empty());
        assert_eq!(o.warnings, [format!("GLUE2ShareID=q1,o=glue: skipped: GLUE2ComputingShareFreeSlots: \"{huge}\" is out of range (not a 64-bit integer)")]);
        let mut snap = site(&["GPGPUVendor=Nvidia"]);
        snap.carriers[0].set("glue2executionenvironmentmainmemorysize", vec!["-1".into()]);
        let o = build_offers(&snap, &prefixes(), None);
        assert!(o.offers.is_empty());
        assert!(
            o.warnings[0].starts_with("GLUE2ResourceID=ee1,o=glue: skipped: GLUE2ExecutionEnvironmentMainMemorySize"),
            "{:?}",
            o.warnings
        );
        // GLUE 1.3 tags.
        let snap = Snapshot {
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
        let o = build_offers(&snap, &prefixes(), None);
        assert!(o.offers.is_empty());
        assert!(
            o.warnings[0].starts_with("GlueSubClusterUniqueID=sc,") && o.warnings[0].contains("rCUDATotalVGPGPU"),
            "{:?}",
            o.warnings
        );
    }

    #[test]
    fn offers_differing_only_in_what_the_job_ignores_are_built_once() {
        let mut snap = site(&["GPGPUVendor=Nvidia"]);
        let mut second = snap.shares[0].clone();
        second.dn = "GLUE2ShareID=q2,o=glue".into();
        second.set("glue2shareid", vec!["q2".into()]);
        second.set("glue2computingsharefreeslots", vec!["99".into()]);
        snap.shares.push(second);
        let count = |names: Option<&[&str]>| {
            let mut s = snap.clone();
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
        let mut snap = site(&["GPGPUVendor=Nvidia", "GPGPUMainMemorySize=4096"]);
        let full = build_offers(&snap, &prefixes(), None).offers;
        snap.names = Some(["GPGPUMainMemorySize".to_string(), "GlueCEStateFreeCPUs".to_string()].into());
        let slim = build_offers(&snap, &prefixes(), None).offers;
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
