//! Phase 1 retrieval: a few paged LDAP searches against a BDII, joined in
//! memory by [`crate::bdii::offers`].
//!
//! Foreign-key attributes are not indexed in a BDII (Debian's config indexes
//! the IDs and `objectClass`), so this module never asks one query per
//! entity: it fetches each class once, filtered by what the job needs, and
//! by IDs (indexed) where it can.
//!
//! Every value taken from the job (VO name, key names, vendor) is escaped
//! with RFC 4515 rules ([`ldap3::ldap_escape`]) before it enters a filter, so
//! `*`, `(`, `)`, `\` and NUL in a JDL cannot widen a query.

use std::collections::{BTreeMap, BTreeSet};

// Carrier DNs are hashed 10^4–10^5 times per query: foldhash (seeded per process), not SipHash.
use foldhash::{HashSet, HashSetExt};
use std::time::Duration;

use crate::bdii::carrier::{CarrierReads, EarlyRead};
use crate::bdii::entry::parent_rdn_attr;
pub use crate::bdii::entry::{entity_id, parent_dn, service_base, service_dn, Entry};
pub use crate::bdii::search::{BdiiError, Search};
use crate::bdii::search::{Tap, TAP_BATCH};
use crate::bdii::session::{tcp_address, Peer, Session, SessionPool};
use crate::bdii::wire::NameCache;
use ldap3::adapters::{Adapter, EntriesOnly, PagedResults};
use ldap3::{ldap_escape, tokio, Ldap, LdapConnAsync, LdapConnSettings, LdapError, Scope};

/// The GLUE 2.0 suffix of a BDII.
pub const GLUE2_BASE: &str = "o=glue";
/// The GLUE 1.3 suffix of a BDII.
pub const GLUE13_BASE: &str = "o=grid";

/// Which publication strategies to read.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Strategies {
    /// GLUE 2.0 `GLUE2EntityOtherInfo: Key=Value`.
    pub attribute_extension: bool,
    /// GLUE 2.0 `GLUE2Extension` children.
    pub class_extension: bool,
    /// GLUE 1.3 `GlueHostApplicationSoftwareRunTimeEnvironment` tags.
    pub glue13: bool,
}

impl Default for Strategies {
    fn default() -> Self {
        Strategies { attribute_extension: true, class_extension: true, glue13: true }
    }
}

/// Where and how to query.
#[derive(Clone, Debug)]
pub struct QueryOptions {
    /// `ldap://host:port`.
    pub url: String,
    /// GLUE 2.0 base DN.
    pub base: String,
    /// GLUE 1.3 base DN.
    pub base13: String,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Timeout for each answer from the server.
    pub timeout: Duration,
    /// Entries per page (RFC 2696 paged results).
    pub page_size: i32,
    /// Which strategies to read.
    pub strategies: Strategies,
}

/// Entries asked per page of a scan. Large: a server that caps pages (RFC 2696
/// lets it) sends fewer and paging goes on, but each page turn leaves slapd
/// idle until the page's last entries are read, and on loopback it often
/// costs a 200 ms stall (measured: 30,000 shares, pages of 1,000 against one
/// page, fetch p50 743 against 638 ms).
pub const PAGE_SIZE: i32 = 100_000;

impl QueryOptions {
    /// Defaults for `url`: bases `o=glue` / `o=grid`, 5 s connect, 30 s read, pages of [`PAGE_SIZE`].
    pub fn new(url: &str) -> QueryOptions {
        QueryOptions {
            url: url.to_string(),
            base: GLUE2_BASE.into(),
            base13: GLUE13_BASE.into(),
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(30),
            page_size: PAGE_SIZE,
            strategies: Strategies::default(),
        }
    }
}

/// What the job needs from the BDII.
#[derive(Clone, Debug, Default)]
pub struct Wanted {
    /// CDER keys the job's Requirements and Rank use (`GPGPUVendor`, …).
    /// Empty: every entity that carries any key of `prefixes`.
    pub keys: BTreeSet<String>,
    /// CDER key prefixes (`GPGPU`), for carriers when `keys` is empty.
    pub prefixes: BTreeSet<String>,
    /// The job's VirtualOrganisation: only shares open to it.
    pub vo: Option<String>,
    /// The job asks for virtual GPGPUs: fetch the ApplicationEnvironments' counts.
    pub vgpgpu: bool,
    /// Every offer attribute the job's Requirements and Rank may look up:
    /// only those GLUE attributes are fetched (with what the joins need).
    /// None: every attribute.
    pub names: Option<BTreeSet<String>>,
}

/// What the joins and the CE ids need of shares, EEs, AppEnvs, managers,
/// endpoints and policies, whatever the job asks.
const JOIN_ATTRS: &[&str] = &[
    "objectClass",
    "GLUE2EntityOtherInfo",
    "GLUE2ShareID",
    "GLUE2ShareServiceForeignKey",
    "GLUE2ShareEndpointForeignKey",
    "GLUE2ShareResourceForeignKey",
    "GLUE2ComputingShareComputingServiceForeignKey",
    "GLUE2ComputingShareComputingEndpointForeignKey",
    "GLUE2ComputingShareExecutionEnvironmentForeignKey",
    "GLUE2ComputingShareMappingQueue",
    "GLUE2ResourceID",
    "GLUE2ResourceManagerForeignKey",
    "GLUE2ExecutionEnvironmentComputingManagerForeignKey",
    "GLUE2ApplicationEnvironmentID",
    "GLUE2ApplicationEnvironmentAppName",
    "GLUE2ApplicationEnvironmentComputingManagerForeignKey",
    "GLUE2ManagerID",
    "GLUE2ManagerProductName",
    "GLUE2ManagerServiceForeignKey",
    "GLUE2ComputingManagerComputingServiceForeignKey",
    "GLUE2EndpointID",
    "GLUE2EndpointURL",
    "GLUE2EndpointServiceForeignKey",
    "GLUE2ComputingEndpointComputingServiceForeignKey",
    "GLUE2EndpointImplementationName",
    "GLUE2EndpointInterfaceName",
    "GLUE2EndpointHealthState",
    "GLUE2EndpointServingState",
    "GLUE2PolicyRule",
    "GLUE2MappingPolicyShareForeignKey",
];

/// The LDAP attributes to ask for GLUE 2.0 entities (empty: all).
pub fn glue2_attrs(wanted: &Wanted) -> Vec<String> {
    let Some(names) = &wanted.names else { return Vec::new() };
    let mut out: BTreeSet<String> = JOIN_ATTRS.iter().map(|a| a.to_string()).collect();
    for n in names {
        if n.len() > 5 && n.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("GLUE2")) {
            out.insert(n.clone());
        } else {
            out.extend(crate::bdii::glue13::glue2_sources(n).into_iter().map(str::to_string));
        }
    }
    out.into_iter().collect()
}

/// Everything phase 1 fetched: the raw material of the offers.
#[derive(Clone, Debug, Default)]
pub struct Fetched {
    /// GLUE 2.0 ExecutionEnvironments, ComputingShares and
    /// ApplicationEnvironments that carry CDER data.
    pub carriers: Vec<Entry>,
    /// `GLUE2Extension` entries with the wanted keys.
    pub extensions: Vec<Entry>,
    /// ComputingManagers of the carriers.
    pub managers: Vec<Entry>,
    /// The other ComputingShares of services whose ExecutionEnvironments carry CDER data.
    pub shares: Vec<Entry>,
    /// ComputingEndpoints of those services.
    pub endpoints: Vec<Entry>,
    /// MappingPolicies open to the job's VO under the carriers' services (None: no VO given).
    pub policies: Option<Vec<Entry>>,
    /// GLUE 1.3 SubClusters with CDER tags.
    pub subclusters: Vec<Entry>,
    /// GLUE 1.3 CEs of those clusters.
    pub glue13_ces: Vec<Entry>,
    /// Searches made.
    pub queries: usize,
    /// The offer attributes the job may look up ([`Wanted::names`]; None: any).
    pub names: Option<BTreeSet<String>>,
    /// CDER pairs of `carriers` read while they streamed in (the build reads the rest).
    pub carrier_reads: CarrierReads,
}

/// `(|(attr=v1)(attr=v2)…)` with each value escaped; `None` for no values.
pub fn any_of(attr: &str, values: impl IntoIterator<Item = impl AsRef<str>>) -> Option<String> {
    let parts: Vec<String> = values.into_iter().map(|v| format!("({attr}={})", ldap_escape(v.as_ref()))).collect();
    match parts.len() {
        0 => None,
        1 => parts.into_iter().next(),
        _ => Some(format!("(|{})", parts.concat())),
    }
}

/// Attribute-Extension: carriers with an OtherInfo value starting `Key=`
/// for any wanted key (the schema gives OtherInfo a SUBSTR rule), one filter
/// per class of carrier so that they can be searched concurrently.
pub fn other_info_filters(wanted: &Wanted) -> Vec<String> {
    let keys: Vec<String> = if wanted.keys.is_empty() {
        wanted.prefixes.iter().cloned().collect()
    } else {
        wanted.keys.iter().map(|k| format!("{k}=")).collect()
    };
    let mut any: Vec<String> =
        keys.iter().map(|k| format!("(GLUE2EntityOtherInfo={}*)", ldap_escape(k.as_str()))).collect();
    any.sort();
    any.dedup();
    let any = match any.len() {
        0 => "(GLUE2EntityOtherInfo=*)".to_string(),
        1 => any.remove(0),
        _ => format!("(|{})", any.concat()),
    };
    // Shares first: the largest class, searched on the caller's thread (whose malloc arena
    // grows cheaply; a helper thread's arena grows by many small mprotect calls).
    let mut out = vec![
        format!("(&(objectClass=GLUE2ComputingShare){any})"),
        format!("(&(objectClass=GLUE2ExecutionEnvironment){any})"),
    ];
    // vGPGPU counts live on the methods' ApplicationEnvironments; a grid has many of
    // those (one per software tag), so they are scanned only for vGPGPU jobs.
    if wanted.vgpgpu {
        out.push("(&(objectClass=GLUE2ApplicationEnvironment)(GLUE2EntityOtherInfo=TotalVGPGPU=*))".to_string());
    }
    out
}

/// Class-Extension: the Extension objects of the wanted keys only.
pub fn extension_filter(wanted: &Wanted) -> String {
    let mut keys: BTreeSet<String> = wanted.keys.clone();
    if keys.is_empty() {
        let mut any: Vec<String> =
            wanted.prefixes.iter().map(|p| format!("(GLUE2ExtensionKey={}*)", ldap_escape(p.as_str()))).collect();
        if wanted.vgpgpu {
            any.push("(GLUE2ExtensionKey=TotalVGPGPU)(GLUE2ExtensionKey=FreeVGPGPU)".into());
        }
        return match any.len() {
            0 => "(&(objectClass=GLUE2Extension)(GLUE2ExtensionKey=*))".into(),
            1 => format!("(&(objectClass=GLUE2Extension){})", any[0]),
            _ => format!("(&(objectClass=GLUE2Extension)(|{}))", any.concat()),
        };
    }
    if wanted.vgpgpu {
        keys.extend(cder_request::glue::VGPGPU_KEYS.iter().map(|k| k.to_string()));
    }
    format!("(&(objectClass=GLUE2Extension){})", any_of("GLUE2ExtensionKey", &keys).unwrap_or_default())
}

/// Whether [`extension_filter`] fetches an Extension of `key` (`GLUE2ExtensionKey` is caseExact).
pub fn extension_key_wanted(wanted: &Wanted, key: &str) -> bool {
    if wanted.vgpgpu && cder_request::glue::VGPGPU_KEYS.contains(&key) {
        return true;
    }
    if wanted.keys.is_empty() {
        wanted.prefixes.is_empty() || wanted.prefixes.iter().any(|p| key.starts_with(p.as_str()))
    } else {
        wanted.keys.contains(key)
    }
}

/// GLUE 1.3: SubClusters tagged with a wanted `Key=` or a `<Vendor><PREFIX>` marker.
pub fn subcluster_filter(wanted: &Wanted) -> String {
    let rte = "GlueHostApplicationSoftwareRunTimeEnvironment";
    let mut any: Vec<String> = if wanted.keys.is_empty() {
        wanted
            .prefixes
            .iter()
            .map(|p| format!("({rte}={}*)", ldap_escape(p.as_str())))
            .chain(wanted.prefixes.iter().map(|p| format!("({rte}=*{})", ldap_escape(p.as_str()))))
            .collect()
    } else {
        wanted.keys.iter().map(|k| format!("({rte}={}=*)", ldap_escape(k.as_str()))).collect()
    };
    if wanted.vgpgpu {
        any.push(format!("({rte}=*TotalVGPGPU=*)"));
    }
    let any = match any.len() {
        0 => format!("({rte}=*)"),
        1 => any.remove(0),
        _ => format!("(|{})", any.concat()),
    };
    format!("(&(objectClass=GlueSubCluster){any})")
}

fn map_err(url: &str, timeout: Duration, what: &str, e: LdapError) -> BdiiError {
    match e {
        LdapError::Timeout { .. } => BdiiError::Timeout { url: url.into(), after: timeout, what: what.into() },
        LdapError::Io { source } if source.kind() == std::io::ErrorKind::TimedOut => {
            BdiiError::Timeout { url: url.into(), after: timeout, what: what.into() }
        }
        other => BdiiError::Unreachable { url: url.into(), message: other.to_string() },
    }
}

/// Searches in flight at once on ldap3's one connection (`ldapi://`):
/// enough to keep slapd's threads busy, below its `conn_max_pending` (100)
/// for anonymous sessions.
const IN_FLIGHT: usize = 64;

/// A search started by [`Bdii::spawn_all`].
pub struct Pending(tokio::task::JoinHandle<Result<Vec<Entry>, BdiiError>>);

/// A connection to one BDII, with its timeouts. Independent searches run at
/// once ([`Bdii::search_all`]), so slapd works on them in parallel.
pub struct Bdii {
    rt: tokio::runtime::Runtime,
    transport: Transport,
    opts: QueryOptions,
    queries: usize,
    /// Permits for searches in flight, shared by every spawn: slapd closes a
    /// connection that has more than `conn_max_pending` of them waiting.
    gate: std::sync::Arc<tokio::sync::Semaphore>,
}

/// How the searches reach the BDII.
enum Transport {
    /// `ldap://`: sessions read by [`crate::bdii::wire`] (one pass from the
    /// socket's bytes into each entry).
    Wire(std::sync::Arc<SessionPool>),
    /// Any other URL ldap3 takes (`ldapi://`): ldap3's client, the searches
    /// pipelined on one connection.
    Ldap3(Ldap),
}

async fn run_search(
    mut ldap: Ldap,
    url: String,
    timeout: Duration,
    page_size: i32,
    s: Search,
    tap: Option<(usize, Tap)>,
) -> Result<Vec<Entry>, BdiiError> {
    let started = std::time::Instant::now();
    let what = format!("search {}", s.filter);
    let mut adapters: Vec<Box<dyn Adapter<'static, String, Vec<String>>>> = vec![Box::new(EntriesOnly::new())];
    if s.paged {
        adapters.push(Box::new(PagedResults::new(page_size)));
    }
    let attrs = if s.attrs.is_empty() { vec!["*".to_string()] } else { s.attrs.clone() };
    let mut stream = ldap
        .with_timeout(timeout)
        .streaming_search_with(adapters, &s.base, s.scope, &s.filter, attrs)
        .await
        .map_err(|e| map_err(&url, timeout, &what, e))?;
    let mut out = Vec::new();
    let mut names = NameCache::default();
    loop {
        match stream.next().await {
            Ok(Some(raw)) => {
                if let Some(e) = decode_entry(raw.0, &mut names) {
                    out.push(e);
                    if let Some((at, tap)) = tap.as_ref().filter(|_| out.len() >= TAP_BATCH) {
                        let _ = tap.send((*at, std::mem::take(&mut out)));
                    }
                }
            }
            Ok(None) => break,
            Err(e) => return Err(map_err(&url, timeout, &what, e)),
        }
    }
    if let Some((at, tap)) = tap.as_ref().filter(|_| !out.is_empty()) {
        let _ = tap.send((*at, std::mem::take(&mut out)));
    }
    let res = stream.finish().await;
    tracing::debug!(base = s.base, scope = ?s.scope, filter = s.filter, attrs = s.attrs.join(" "), paged = s.paged, entries = out.len(), elapsed_ms = started.elapsed().as_secs_f64() * 1e3, "search");
    // 32 noSuchObject: the base is absent (e.g. no GLUE 1.3 tree): nothing found.
    if res.rc != 0 && res.rc != 32 {
        return Err(BdiiError::Search {
            url,
            base: s.base,
            filter: s.filter,
            message: format!("result code {} {}", res.rc, res.text),
        });
    }
    Ok(out)
}

/// An entry from the tag tree ldap3's client hands over (`ldapi://` only;
/// `ldap://` replies are read by [`crate::bdii::wire`]). As ldap3's
/// `SearchEntry` does, an attribute with a value that is not UTF-8 (none in
/// GLUE) is left out; a malformed entry is skipped.
fn decode_entry(tag: ldap3::asn1::StructureTag, names: &mut NameCache) -> Option<Entry> {
    names.restart();
    let mut parts = tag.match_id(4)?.expect_constructed()?.into_iter();
    let dn = String::from_utf8(parts.next()?.expect_primitive()?).ok()?;
    let attrs = parts.next()?.expect_constructed()?;
    let mut e = Entry::with_capacity(dn, attrs.len(), 0);
    for a in attrs {
        let mut pa = a.expect_constructed()?.into_iter();
        let name = pa.next()?.expect_primitive()?;
        let Some(name) = names.get(&name) else { continue };
        let vals = pa.next()?.expect_constructed()?;
        let values: Option<Vec<String>> =
            vals.into_iter().map(|v| v.expect_primitive().and_then(|b| String::from_utf8(b).ok())).collect();
        if let Some(values) = values {
            e.extend_interned(name, values.iter().map(String::as_str));
        }
    }
    Some(e)
}

impl Bdii {
    /// Connects (anonymous, as BDIIs are read).
    pub fn connect(opts: &QueryOptions) -> Result<Bdii, BdiiError> {
        if !(opts.url.starts_with("ldap://") || opts.url.starts_with("ldapi://")) {
            return Err(BdiiError::BadUrl { url: opts.url.clone() });
        }
        // Two workers: the big scans' answers are decoded on them while this
        // thread joins the results, and two searches' entries decode at once.
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(|e| {
            BdiiError::Unreachable { url: opts.url.clone(), message: format!("cannot start the I/O runtime: {e}") }
        })?;
        let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        if let Some(address) = tcp_address(&opts.url) {
            let address = address.map_err(|()| BdiiError::BadUrl { url: opts.url.clone() })?;
            let peer = Peer {
                url: opts.url.clone(),
                address,
                connect_timeout: opts.connect_timeout,
                timeout: opts.timeout,
                page_size: opts.page_size,
            };
            let first = rt.block_on(Session::open(&peer))?;
            let transport = Transport::Wire(std::sync::Arc::new(SessionPool::new(peer, first)));
            return Ok(Bdii { rt, transport, opts: opts.clone(), queries: 0, gate });
        }
        let settings = LdapConnSettings::new().set_conn_timeout(opts.connect_timeout);
        let (conn, ldap) = rt.block_on(LdapConnAsync::with_settings(settings, &opts.url)).map_err(|e| match e {
            LdapError::UrlParsing { .. } => BdiiError::BadUrl { url: opts.url.clone() },
            e => map_err(&opts.url, opts.connect_timeout, "connecting", e),
        })?;
        // The connection's reader runs on the runtime's workers.
        rt.spawn(async move {
            if let Err(e) = conn.drive().await {
                tracing::debug!("LDAP connection ended: {e}");
            }
        });
        Ok(Bdii { rt, transport: Transport::Ldap3(ldap), opts: opts.clone(), queries: 0, gate })
    }

    /// One paged subtree search; returns every entry.
    pub fn search(&mut self, base: &str, filter: &str, attrs: &[&str]) -> Result<Vec<Entry>, BdiiError> {
        let mut r = self.search_all(vec![Search::scan(base, filter.to_string(), attrs)])?;
        Ok(r.pop().unwrap_or_default())
    }

    /// Runs independent searches at once (on `ldap://`, at most
    /// [`crate::bdii::session::WIRE_SESSIONS`] under services; on ldap3's
    /// connection, at most `IN_FLIGHT` = 64 pipelined); results in the order
    /// given. The first error wins.
    pub fn search_all(&mut self, searches: Vec<Search>) -> Result<Vec<Vec<Entry>>, BdiiError> {
        let handles = self.spawn_all(searches);
        self.join_all(handles)
    }

    /// Starts searches; they progress on the runtime's workers while the
    /// caller goes on, so a slow scan overlaps the work that does not depend
    /// on it.
    ///
    /// slapd keeps one paged-results state per connection (a second paged
    /// search interleaved on it invalidates the first one's cookie), so each
    /// paged scan runs on a connection of its own; the rest share a few
    /// ([`crate::bdii::session::SessionPool`], or ldap3's one connection).
    pub fn spawn_all(&mut self, searches: Vec<Search>) -> Vec<Pending> {
        self.spawn_tapped(searches, None)
    }

    /// [`Bdii::spawn_all`], each entry sent to `tap` as it arrives, with the
    /// search's position, and not kept for the search's result (the channel
    /// closes when every search has ended).
    fn spawn_tapped(&mut self, searches: Vec<Search>, tap: Option<Tap>) -> Vec<Pending> {
        self.queries += searches.len();
        let (url, timeout, page, connect_timeout) =
            (self.opts.url.clone(), self.opts.timeout, self.opts.page_size, self.opts.connect_timeout);
        let gate = self.gate.clone();
        searches
            .into_iter()
            .enumerate()
            .map(|(at, s)| {
                let tap = tap.clone().map(|t| (at, t));
                let main = match &self.transport {
                    Transport::Wire(pool) => return Pending(self.rt.spawn(pool.clone().run(s, tap))),
                    Transport::Ldap3(ldap) => ldap.clone(),
                };
                let (url, gate) = (url.clone(), gate.clone());
                Pending(self.rt.spawn(async move {
                    let ldap = if s.paged {
                        let settings = LdapConnSettings::new().set_conn_timeout(connect_timeout);
                        let (conn, own) = LdapConnAsync::with_settings(settings, &url)
                            .await
                            .map_err(|e| map_err(&url, connect_timeout, "connecting", e))?;
                        tokio::spawn(async move {
                            if let Err(e) = conn.drive().await {
                                tracing::debug!("LDAP connection ended: {e}");
                            }
                        });
                        own
                    } else {
                        main
                    };
                    let _permit = gate.acquire_owned().await;
                    run_search(ldap, url, timeout, page, s, tap).await
                }))
            })
            .collect()
    }

    /// Waits for searches started by [`Bdii::spawn_all`]; results in order, the first error wins.
    pub fn join_all(&mut self, pending: Vec<Pending>) -> Result<Vec<Vec<Entry>>, BdiiError> {
        let url = self.opts.url.clone();
        self.rt.block_on(async move {
            let mut out = Vec::with_capacity(pending.len());
            for p in pending {
                out.push(p.0.await.unwrap_or_else(|e| {
                    Err(BdiiError::Unreachable { url: url.clone(), message: format!("search task failed: {e}") })
                })?);
            }
            Ok(out)
        })
    }

    /// Phase-1 retrieval: everything [`crate::bdii::offers::build_offers`] needs.
    ///
    /// The plan (stock BDII index config: IDs and `objectClass` only):
    /// 1. the discovery scans, all at once: carriers of OtherInfo keys
    ///    (ComputingShares, ExecutionEnvironments, and for vGPGPU jobs
    ///    ApplicationEnvironments), the Extensions of the wanted keys, the
    ///    GLUE 1.3 SubClusters;
    /// 2. carriers named only by an Extension's foreign key, by their
    ///    indexed IDs;
    /// 3. per ComputingService that holds a carrier, one subtree search
    ///    under the service's DN (slapd's DN index limits it to that
    ///    service's few hundred entries) for its manager, endpoints, the
    ///    shares an EE's devices serve, the entities its Extensions
    ///    extend and the MappingPolicies of the job's VO; per GLUE 1.3
    ///    site, its GlueCEs one level under the site's node. All at once.
    ///
    /// Stage 3 does not wait for stage 1: the carrier scans hand their
    /// entries over as they arrive, and a service is asked as soon as a scan
    /// has moved past it (entries come in the database's order, a service's
    /// together), on the plan seen so far. Once the scans end, the exact plan
    /// is made as above; a service whose early plan differs is asked again.
    ///
    /// No filter ORs values of an unindexed attribute over a whole tree.
    pub fn fetch(&mut self, wanted: &Wanted) -> Result<Fetched, BdiiError> {
        let plan = FetchPlan::new(&self.opts, wanted);
        let mut fetched = Fetched::default();
        // 1. Discovery. The OtherInfo scan of ComputingShares (and of
        // ApplicationEnvironments) is by far the slowest search — every share of
        // the grid is read — so it runs while everything found by the others is
        // followed up.
        let oi = if plan.strategies.attribute_extension { other_info_filters(wanted) } else { Vec::new() };
        let (slow_filters, fast_filters): (Vec<String>, Vec<String>) =
            oi.into_iter().partition(|f| !f.starts_with("(&(objectClass=GLUE2ExecutionEnvironment)"));
        let (tap, slow_entries) = tokio::sync::mpsc::unbounded_channel();
        let slow = self.spawn_tapped(
            slow_filters.iter().map(|f| Search::scan(&plan.base, f.clone(), &plan.attrs)).collect(),
            Some(tap),
        );
        let mut found = self.discover(&plan, &fast_filters)?;
        let (mut carrier_dns, mut plans) = found.file(&plan, fast_filters.len(), &mut fetched);
        if plan.strategies.class_extension {
            self.fetch_extended(&plan, &mut fetched, &mut carrier_dns, &mut plans)?;
        }
        // 3. Per service and per GLUE 1.3 site, all at once.
        let glue13_searches = glue13_searches(&plan, &fetched.subclusters);
        let mut seen: HashSet<String> = carrier_dns.clone();
        let mut policies = Vec::new();
        fetched.glue13_ces = self.services(
            &plans,
            found.early.asked,
            plan.glue2,
            plan.policy.as_deref(),
            &plan.attrs,
            glue13_searches,
            &mut seen,
            &mut fetched,
            &mut policies,
        )?;
        let done: BTreeSet<String> = plans.into_keys().collect();
        let scanned = SlowScan { pending: slow, entries: slow_entries, done };
        self.follow_slow_scan(&plan, scanned, &mut carrier_dns, &mut seen, &mut fetched, &mut policies)?;
        // A carrier also fetched as another EE's share is kept once, as a carrier.
        fetched.shares.retain(|sh| !carrier_dns.contains(&sh.dn.to_ascii_lowercase()));
        if plan.glue2 && wanted.vo.is_some() {
            fetched.policies = Some(policies);
        }
        fetched.queries = self.queries;
        fetched.names = wanted.names.clone();
        Ok(fetched)
    }

    /// Stage 1 but the slow scan: the EEs' OtherInfo and the Extensions
    /// stream, each service asked as soon as a scan has moved past it (on the
    /// plan seen so far); GLUE 2.1's accelerators and GLUE 1.3's SubClusters
    /// are read beside them.
    fn discover(&mut self, plan: &FetchPlan, fast_filters: &[String]) -> Result<Discovered, BdiiError> {
        let base = &plan.base;
        let mut streamed: Vec<Search> =
            fast_filters.iter().map(|f| Search::scan(base, f.clone(), &plan.attrs)).collect();
        if plan.strategies.class_extension {
            streamed.push(Search::scan(base, extension_filter(plan.wanted), EXT_ATTRS));
        }
        let (tap, mut streamed_entries) = tokio::sync::mpsc::unbounded_channel();
        let streaming = self.spawn_tapped(streamed, Some(tap));
        let mut first: Vec<Search> = Vec::new();
        if plan.strategies.class_extension {
            first.push(Search::scan(base, crate::bdii::glue21::FILTER.to_string(), crate::bdii::glue21::ATTRIBUTES));
        }
        if plan.strategies.glue13 {
            first.push(Search::scan(&plan.base13, subcluster_filter(plan.wanted), &[] as &[&str]));
        }
        let first = self.spawn_all(first);
        let mut early = EarlyAsks { current: vec![None; streaming.len()], ..Default::default() };
        let mut found: Vec<Vec<Entry>> = vec![Vec::new(); streaming.len()];
        while let Some((at, batch)) = self.rt.block_on(streamed_entries.recv()) {
            for e in batch {
                let service = if at < fast_filters.len() {
                    note_carrier(&mut early.plans, &e);
                    // Copied only when the scan moves on to another service.
                    let base = service_base(&e.dn);
                    (early.current[at].as_deref() != Some(base)).then(|| base.to_string())
                } else {
                    note_extension(&mut early.plans, &e, |_| true)
                        .filter(|service| early.current[at].as_ref() != Some(service))
                };
                // The scan has moved past a service: ask it, on the plan seen so far.
                if let Some(done) = service.filter(|_| plan.glue2).and_then(|s| early.current[at].replace(s)) {
                    let sent = &early.plans[&done];
                    if early.asked.get(&done).is_none_or(|(asked, _)| asked != sent) {
                        let search = self.service_searches(
                            std::iter::once((done.as_str(), sent)),
                            plan.policy.as_deref(),
                            &plan.attrs,
                        );
                        let pending = self.spawn_all(search).pop().expect("one search per plan");
                        early.asked.insert(done, (sent.clone(), pending));
                    }
                }
                found[at].push(e);
            }
        }
        // The streamed searches' own results are empty (tapped); joined for their errors.
        self.join_all(streaming)?;
        let first = self.join_all(first)?;
        Ok(Discovered { streamed: found, first, early })
    }

    /// Stage 2: an Extension usually sits under the entity it extends: its parent's RDN
    /// says the class, the service above it where to look. Otherwise every
    /// carrier class is asked by ID (indexed).
    fn fetch_extended(
        &mut self,
        plan: &FetchPlan,
        fetched: &mut Fetched,
        carrier_dns: &mut HashSet<String>,
        plans: &mut BTreeMap<String, ServicePlan>,
    ) -> Result<(), BdiiError> {
        let known: BTreeSet<String> = fetched.carriers.iter().filter_map(entity_id).collect();
        let mut loose: [BTreeSet<String>; 3] = Default::default();
        for x in &fetched.extensions {
            let is_carrier = |parent: &str| carrier_dns.contains(&parent.to_ascii_lowercase());
            if note_extension(plans, x, |parent| !is_carrier(parent)).is_some() {
                continue;
            }
            for id in x.all("GLUE2ExtensionEntityForeignKey").iter().filter(|id| !known.contains(*id)) {
                loose.iter_mut().for_each(|m| {
                    m.insert(id.to_string());
                });
            }
        }
        let mut by_id = Vec::new();
        for ((class, attr), ids) in CARRIERS.iter().zip(&loose) {
            let ids: Vec<&String> = ids.iter().collect();
            for chunk in ids.chunks(500) {
                if let Some(any) = any_of(attr, chunk.iter().map(|s| s.as_str())) {
                    by_id.push(Search::scan(&plan.base, format!("(&(objectClass={class}){any})"), &plan.attrs));
                }
            }
        }
        for e in self.search_all(by_id)?.into_iter().flatten() {
            if carrier_dns.insert(e.dn.to_ascii_lowercase()) {
                note_carrier(plans, &e);
                fetched.carriers.push(e);
            }
        }
        Ok(())
    }

    /// The slow scan's carriers: their services, where not asked already,
    /// each asked as soon as its first carrier streams in, beside the scan
    /// (which takes most of the time), not after it. A service whose plan
    /// grows later is asked again; the last answer is the one kept.
    fn follow_slow_scan(
        &mut self,
        plan: &FetchPlan,
        scan: SlowScan,
        carrier_dns: &mut HashSet<String>,
        seen: &mut HashSet<String>,
        fetched: &mut Fetched,
        policies: &mut Vec<Entry>,
    ) -> Result<(), BdiiError> {
        let SlowScan { pending: slow, entries: mut slow_entries, done } = scan;
        let mut late: BTreeMap<String, ServicePlan> = BTreeMap::new();
        let mut asked: BTreeMap<String, (ServicePlan, Pending)> = BTreeMap::new();
        // Per slow search, its entries in the order it returned them.
        let mut found: Vec<Vec<(Entry, Option<EarlyRead>)>> = vec![Vec::new(); slow.len()];
        // Their CDER pairs are read here, while each batch is in cache: this thread
        // would only wait for the scan, and the build would read them all again after it.
        let mut reads =
            CarrierReads::new(plan.wanted.prefixes.iter().cloned().collect(), fetched.extensions.is_empty());
        while let Some((at, batch)) = self.rt.block_on(slow_entries.recv()) {
            for e in batch {
                let service = service_base(&e.dn);
                if !done.contains(service) {
                    let sent = note_carrier(&mut late, &e);
                    if asked.get(service).is_none_or(|(before, _)| before != sent) {
                        let search = self.service_searches(
                            std::iter::once((service, sent)),
                            plan.policy.as_deref(),
                            &plan.attrs,
                        );
                        let pending = self.spawn_all(search).pop().expect("one search per plan");
                        asked.insert(service.to_string(), (sent.clone(), pending));
                    }
                }
                let read = reads.read(&e);
                found[at].push((e, read));
            }
        }
        // The searches' own results are empty (tapped); joined for their errors.
        self.join_all(slow)?;
        for (e, read) in found.into_iter().flatten() {
            if carrier_dns.insert(e.dn.to_ascii_lowercase()) {
                reads.file(fetched.carriers.len(), read);
                fetched.carriers.push(e);
            }
        }
        fetched.carrier_reads = reads;
        if plan.glue2 && !asked.is_empty() {
            let (plans, pending): (BTreeMap<String, ServicePlan>, Vec<Pending>) =
                asked.into_iter().map(|(service, (plan, pending))| ((service, plan), pending)).unzip();
            let results = self.join_all(pending)?;
            absorb_services(&plans, results, seen, fetched, policies);
        }
        Ok(())
    }

    /// Stage 3 for `plans` (plus `extra` searches, whose entries are returned):
    /// one search per service; managers, endpoints, shares, policies and the
    /// entities Extensions extend (as carriers) go into `fetched`.
    #[allow(clippy::too_many_arguments)]
    fn services(
        &mut self,
        plans: &BTreeMap<String, ServicePlan>,
        mut asked: BTreeMap<String, (ServicePlan, Pending)>,
        glue2: bool,
        policy: Option<&str>,
        attrs: &[String],
        extra: Vec<Search>,
        seen: &mut HashSet<String>,
        fetched: &mut Fetched,
        policies: &mut Vec<Entry>,
    ) -> Result<Vec<Entry>, BdiiError> {
        let mut pending = Vec::new();
        if glue2 {
            for (service, plan) in plans {
                // Asked already while the scans streamed, with this very plan: that answer stands.
                match asked.remove(service) {
                    Some((sent, p)) if &sent == plan => pending.push(p),
                    _ => pending.extend(self.spawn_all(self.service_searches(
                        std::iter::once((service.as_str(), plan)),
                        policy,
                        attrs,
                    ))),
                }
            }
        }
        let n = pending.len();
        pending.extend(self.spawn_all(extra));
        let mut results = self.join_all(pending)?;
        let rest = results.split_off(n);
        absorb_services(plans, results, seen, fetched, policies);
        Ok(rest.into_iter().flatten().collect())
    }

    /// One search per service plan: managers, endpoints, shares and (CREAM)
    /// EEs are the service's children; MappingPolicies sit under their shares.
    fn service_searches<'a>(
        &self,
        plans: impl Iterator<Item = (&'a str, &'a ServicePlan)>,
        policy: Option<&str>,
        attrs: &[String],
    ) -> Vec<Search> {
        plans
            .map(|(service, plan)| {
                let scope = if plan.deep || policy.is_some() { Scope::Subtree } else { Scope::OneLevel };
                Search::under(service, scope, plan.filter(policy), attrs)
            })
            .collect()
    }
}

/// The attributes an Extension search reads.
const EXT_ATTRS: &[&str] = &["GLUE2ExtensionKey", "GLUE2ExtensionValue", "GLUE2ExtensionEntityForeignKey"];

/// What one fetch asks for, worked out once from the options and the job.
struct FetchPlan<'w> {
    wanted: &'w Wanted,
    base: String,
    base13: String,
    strategies: Strategies,
    /// Whether a GLUE 2.0 strategy is read at all.
    glue2: bool,
    /// The GLUE 2.0 attributes every search reads.
    attrs: Vec<String>,
    /// The job's VO's MappingPolicies, by prefix (unindexed substring: the
    /// service's entries only, not the VO's whole index entry); the exact rule
    /// is checked in memory.
    policy: Option<String>,
}

impl<'w> FetchPlan<'w> {
    fn new(opts: &QueryOptions, wanted: &'w Wanted) -> FetchPlan<'w> {
        let strategies = opts.strategies;
        let policy = wanted.vo.as_ref().map(|vo| {
            format!("(&(GLUE2MappingPolicyShareForeignKey=*)(GLUE2PolicyRule=VO:{}*))", ldap_escape(vo.as_str()))
        });
        FetchPlan {
            wanted,
            base: opts.base.clone(),
            base13: opts.base13.clone(),
            strategies,
            glue2: strategies.attribute_extension || strategies.class_extension,
            attrs: glue2_attrs(wanted),
            policy,
        }
    }
}

/// What [`Bdii::discover`] found: per streamed scan its entries, the other
/// scans' results, and the services asked while the scans streamed.
struct Discovered {
    streamed: Vec<Vec<Entry>>,
    first: Vec<Vec<Entry>>,
    early: EarlyAsks,
}

impl Discovered {
    /// Files the carriers (each DN once), the Extensions and the SubClusters
    /// found into `fetched`: the carriers' DNs and their services' plans.
    fn file(
        &mut self,
        plan: &FetchPlan,
        carrier_scans: usize,
        fetched: &mut Fetched,
    ) -> (HashSet<String>, BTreeMap<String, ServicePlan>) {
        let mut carrier_dns: HashSet<String> = HashSet::with_capacity(self.streamed.iter().map(Vec::len).sum());
        let mut plans: BTreeMap<String, ServicePlan> = BTreeMap::new();
        let mut found = std::mem::take(&mut self.streamed).into_iter();
        for e in found.by_ref().take(carrier_scans).flatten() {
            if carrier_dns.insert(e.dn.to_ascii_lowercase()) {
                note_carrier(&mut plans, &e);
                fetched.carriers.push(e);
            }
        }
        let mut results = std::mem::take(&mut self.first).into_iter();
        if plan.strategies.class_extension {
            fetched.extensions = found.next().unwrap_or_default();
            // GLUE 2.1 accelerator entities read as the Extensions they stand for.
            // That scan reads every accelerator entity: keep, as the Extension search
            // above does, only the keys the job uses, so that an EE or share is a
            // carrier for the same jobs whichever way its site publishes.
            let published = fetched.extensions.len();
            crate::bdii::glue21::add_extensions(&mut fetched.extensions, results.next().unwrap_or_default());
            let accelerators = fetched.extensions.split_off(published);
            fetched.extensions.extend(
                accelerators
                    .into_iter()
                    .filter(|x| x.first("GLUE2ExtensionKey").is_some_and(|k| extension_key_wanted(plan.wanted, k))),
            );
        }
        if plan.strategies.glue13 {
            fetched.subclusters = results.next().unwrap_or_default();
        }
        (carrier_dns, plans)
    }
}

/// The slow scan under way, and the services asked already (not asked again for its carriers).
struct SlowScan {
    pending: Vec<Pending>,
    entries: tokio::sync::mpsc::UnboundedReceiver<(usize, Vec<Entry>)>,
    done: BTreeSet<String>,
}

/// Stage 3 for GLUE 1.3: per site, its GlueCEs of the SubClusters' clusters
/// (siblings of their GlueCluster, the SubCluster's parent), of the job's VO.
fn glue13_searches(plan: &FetchPlan, subclusters: &[Entry]) -> Vec<Search> {
    let mut searches = Vec::new();
    if !plan.strategies.glue13 {
        return searches;
    }
    let mut vo_filter = String::new();
    // An empty VO (the local index's fetch) asks every VO's CEs.
    if let Some(vo) = plan.wanted.vo.as_ref().filter(|vo| !vo.is_empty()) {
        vo_filter = format!("(GlueCEAccessControlBaseRule=VO:{})", ldap_escape(vo.as_str()));
    }
    let base13 = &plan.base13;
    let mut sites: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for sc in subclusters {
        let under_cluster = parent_rdn_attr(&sc.dn).is_some_and(|a| a.eq_ignore_ascii_case("GlueClusterUniqueID"));
        let site = parent_dn(&sc.dn).and_then(parent_dn).filter(|_| under_cluster).map(str::to_string);
        for c in sc.all("GlueChunkKey").iter().filter_map(|k| k.strip_prefix("GlueClusterUniqueID=")) {
            sites.entry(site.clone().unwrap_or_else(|| base13.clone())).or_default().insert(c.to_string());
        }
    }
    for (site, clusters) in &sites {
        let scope = if site.eq_ignore_ascii_case(base13) { Scope::Subtree } else { Scope::OneLevel };
        for chunk in clusters.iter().collect::<Vec<_>>().chunks(500) {
            let fk =
                any_of("GlueForeignKey", chunk.iter().map(|c| format!("GlueClusterUniqueID={c}"))).unwrap_or_default();
            let filter = format!("(&(objectClass=GlueCE){fk}{vo_filter})");
            searches.push(Search::under(site, scope, filter, &[] as &[&str]));
        }
    }
    searches
}

/// Files the answers of [`Bdii::service_searches`] (in `plans` order) into
/// `fetched`: managers, endpoints, shares, policies, and the entities
/// Extensions extend (as carriers).
fn absorb_services(
    plans: &BTreeMap<String, ServicePlan>,
    results: Vec<Vec<Entry>>,
    seen: &mut HashSet<String>,
    fetched: &mut Fetched,
    policies: &mut Vec<Entry>,
) {
    for (plan, entries) in plans.values().zip(results) {
        for e in entries {
            if !seen.insert(e.dn.to_ascii_lowercase()) {
                continue;
            }
            if e.is_a("GLUE2ComputingManager") {
                fetched.managers.push(e);
            } else if e.is_a("GLUE2ComputingEndpoint") {
                fetched.endpoints.push(e);
            } else if e.is_a("GLUE2MappingPolicy") {
                policies.push(e);
            } else if entity_id(&e).is_some_and(|id| plan.ids.iter().any(|ids| ids.contains(&id))) {
                // An entity its Extensions extend: a carrier.
                fetched.carriers.push(e);
            } else if e.is_a("GLUE2ComputingShare") {
                fetched.shares.push(e);
            }
        }
    }
}

/// Service searches sent while the carrier scans stream, each with the plan it was sent with.
#[derive(Default)]
struct EarlyAsks {
    /// The plans seen so far.
    plans: BTreeMap<String, ServicePlan>,
    asked: BTreeMap<String, (ServicePlan, Pending)>,
    /// Per streamed scan, the service of its last entry: asked once the scan moves on.
    current: Vec<Option<String>>,
}

/// What an Extension's service must be asked for: the entity it extends (by
/// its parent's RDN: an EE, share or AppEnv), unless `wanted(parent DN)`
/// says that entity is fetched already. The service, when the parent's
/// class says where to look.
fn note_extension(
    plans: &mut BTreeMap<String, ServicePlan>,
    x: &Entry,
    wanted: impl Fn(&str) -> bool,
) -> Option<String> {
    let class = parent_rdn_attr(&x.dn).and_then(|p| CARRIERS.iter().position(|(_, a)| p.eq_ignore_ascii_case(a)))?;
    let parent = parent_dn(&x.dn).unwrap_or_default();
    let service = service_base(&x.dn).to_string();
    if !wanted(parent) {
        return Some(service);
    }
    for id in x.all("GLUE2ExtensionEntityForeignKey") {
        let plan = plans.entry(service.clone()).or_default();
        plan.deep |= !parent_dn(parent).is_some_and(|p| p.eq_ignore_ascii_case(&service));
        plan.ids[class].insert(id.to_string());
        if class == 0 {
            plan.offered.insert(id.to_string());
        }
    }
    Some(service)
}

/// What a carrier's service must be asked for; that service's plan.
fn note_carrier<'p>(plans: &'p mut BTreeMap<String, ServicePlan>, e: &Entry) -> &'p ServicePlan {
    let service = service_base(&e.dn);
    // The service's DN is copied once, when its first carrier is met.
    if !plans.contains_key(service) {
        plans.insert(service.to_string(), ServicePlan::default());
    }
    let plan = plans.get_mut(service).expect("inserted above");
    plan.deep |= !parent_dn(&e.dn).is_some_and(|p| p.eq_ignore_ascii_case(service));
    if e.is_a("GLUE2ExecutionEnvironment") {
        plan.offered.extend(entity_id(e));
    }
    plan
}

/// Carrier classes, their ID attribute, in [`ServicePlan::ids`] order.
const CARRIERS: [(&str, &str); 3] = [
    ("GLUE2ExecutionEnvironment", "GLUE2ResourceID"),
    ("GLUE2ComputingShare", "GLUE2ShareID"),
    ("GLUE2ApplicationEnvironment", "GLUE2ApplicationEnvironmentID"),
];

/// What one ComputingService's subtree search asks for.
#[derive(Clone, Debug, Default, PartialEq)]
struct ServicePlan {
    /// The service's EEs that carry CDER data: the shares that name one of
    /// them, or name no EE at all, offer them.
    offered: BTreeSet<String>,
    /// Entities (by [`CARRIERS`] class) that Extensions extend, not yet fetched.
    ids: [BTreeSet<String>; 3],
    /// Some entity of interest sits deeper than one level under the service
    /// (an EE under its manager, as ARC publishes): search the subtree.
    deep: bool,
}

impl ServicePlan {
    fn filter(&self, policy: Option<&str>) -> String {
        // Presence of an ID attribute, not objectClass: slapd then takes the candidates from
        // the service's subtree alone, where an indexed objectClass term would make it read
        // that class's whole index entry (10^4 IDs) once per service.
        let mut any = String::from("(GLUE2ManagerID=*)(GLUE2EndpointID=*)");
        // The foreign keys are unindexed, but the scope is one service's entries.
        match self.offered.len() {
            0 => {}
            1..=32 => {
                let named = |id: &String| {
                    format!(
                        "(GLUE2ComputingShareExecutionEnvironmentForeignKey={0})(GLUE2ShareResourceForeignKey={0})",
                        ldap_escape(id.as_str())
                    )
                };
                let ees: String = self.offered.iter().map(named).collect();
                any.push_str(&format!(
                    "(&(GLUE2ShareID=*)(|{ees}(&(!(GLUE2ComputingShareExecutionEnvironmentForeignKey=*))(!(GLUE2ShareResourceForeignKey=*)))))"
                ));
            }
            _ => any.push_str("(GLUE2ShareID=*)"),
        }
        for ((class, attr), ids) in CARRIERS.iter().zip(&self.ids) {
            if ids.is_empty() {
                continue;
            }
            // A few IDs (indexed: small index entries); many: the whole class of this one service.
            let _ = class;
            match ids.len() {
                1..=32 => any.push_str(&any_of(attr, ids).unwrap_or_default()),
                _ => any.push_str(&format!("({attr}=*)")),
            }
        }
        if let Some(p) = policy {
            any.push_str(p);
        }
        format!("(|{any})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(keys: &[&str]) -> Wanted {
        Wanted {
            keys: keys.iter().map(|s| s.to_string()).collect(),
            prefixes: ["GPGPU".to_string()].into(),
            ..Default::default()
        }
    }

    #[test]
    fn other_info_filter_uses_substrings_of_the_keys() {
        let f = other_info_filters(&wanted(&["GPGPUVendor", "GPGPUMainMemorySize"]));
        assert_eq!(
            f,
            [
                "(&(objectClass=GLUE2ComputingShare)(|(GLUE2EntityOtherInfo=GPGPUMainMemorySize=*)(GLUE2EntityOtherInfo=GPGPUVendor=*)))",
                "(&(objectClass=GLUE2ExecutionEnvironment)(|(GLUE2EntityOtherInfo=GPGPUMainMemorySize=*)(GLUE2EntityOtherInfo=GPGPUVendor=*)))"
            ]
        );
        let mut v = wanted(&["GPGPUVendor"]);
        v.vgpgpu = true;
        let f = other_info_filters(&v);
        assert_eq!(f[2], "(&(objectClass=GLUE2ApplicationEnvironment)(GLUE2EntityOtherInfo=TotalVGPGPU=*))");
    }

    #[test]
    fn metacharacters_in_job_values_are_escaped() {
        let mut w = wanted(&["GPGPU*)(objectClass=*"]);
        w.vo = Some("*)(x=\\\0".into());
        let f = other_info_filters(&w).concat();
        assert!(f.contains("GPGPU\\2a\\29\\28objectClass=\\2a=*"), "{f}");
        assert_eq!(any_of("GLUE2PolicyRule", ["VO:*)(\\\0"]).unwrap(), "(GLUE2PolicyRule=VO:\\2a\\29\\28\\5c\\00)");
        let e = extension_filter(&w);
        assert!(e.contains("(GLUE2ExtensionKey=GPGPU\\2a\\29\\28objectClass=\\2a)"), "{e}");
        // Parentheses stay balanced whatever the job wrote.
        for f in [f, e, subcluster_filter(&w)] {
            let opens = f.matches('(').count();
            assert_eq!(opens, f.matches(')').count(), "{f}");
        }
    }

    #[test]
    fn entries_decode_from_the_ber_with_shared_names() {
        use ldap3::asn1::{StructureTag, TagClass, PL};
        let prim = |b: &[u8]| StructureTag { class: TagClass::Universal, id: 4, payload: PL::P(b.to_vec()) };
        let cons = |id: u64, v: Vec<StructureTag>| StructureTag { class: TagClass::Universal, id, payload: PL::C(v) };
        let attr =
            |name: &[u8], vals: &[&[u8]]| cons(16, vec![prim(name), cons(17, vals.iter().map(|v| prim(v)).collect())]);
        let entry = |attrs: Vec<StructureTag>| StructureTag {
            class: TagClass::Application,
            id: 4,
            payload: PL::C(vec![prim(b"GLUE2ShareID=q,o=glue"), cons(16, attrs)]),
        };
        let mut names = NameCache::default();
        let e = decode_entry(
            entry(vec![
                attr(b"objectClass", &[b"GLUE2Share", b"GLUE2ComputingShare"]),
                attr(b"GLUE2EntityOtherInfo", &[b"A=1", b"\xff\xfe"]),
                attr(b"GLUE2ShareID", &[b"q"]),
            ]),
            &mut names,
        )
        .unwrap();
        assert_eq!(e.dn, "GLUE2ShareID=q,o=glue");
        assert!(e.is_a("GLUE2ComputingShare"));
        // As ldap3's SearchEntry: an attribute with a value that is not UTF-8 is left out.
        assert_eq!(e.names().collect::<Vec<_>>(), ["objectclass", "glue2shareid"]);
        let again = decode_entry(
            entry(vec![attr(b"objectClass", &[b"GLUE2Share"]), attr(b"GLUE2ShareID", &[b"r"])]),
            &mut names,
        )
        .unwrap();
        assert!(std::ptr::eq(e.names().next().unwrap(), again.names().next().unwrap()));
        assert_eq!(again.first("glue2shareid"), Some("r"));
        // Not a SearchResultEntry: skipped.
        assert!(decode_entry(prim(b"x"), &mut names).is_none());
    }

    #[test]
    fn parent_rdn_of_an_extension() {
        assert_eq!(
            parent_rdn_attr("GLUE2ExtensionLocalID=K,GLUE2ShareID=s,GLUE2ServiceID=x,o=glue").as_deref(),
            Some("GLUE2ShareID")
        );
        assert_eq!(
            parent_rdn_attr("GLUE2ExtensionLocalID=a\\,b,GLUE2ResourceID=e,o=glue").as_deref(),
            Some("GLUE2ResourceID")
        );
        assert_eq!(parent_rdn_attr("o=glue"), None);
    }

    #[test]
    fn extension_filter_fetches_only_the_requirement_keys() {
        let f = extension_filter(&wanted(&["GPGPUFreeInstances"]));
        assert_eq!(f, "(&(objectClass=GLUE2Extension)(GLUE2ExtensionKey=GPGPUFreeInstances))");
        let w = wanted(&["GPGPUFreeInstances"]);
        assert!(extension_key_wanted(&w, "GPGPUFreeInstances"));
        assert!(!extension_key_wanted(&w, "GPGPUVendor") && !extension_key_wanted(&w, "gpgpufreeinstances"));
        let any = wanted(&[]);
        assert!(extension_key_wanted(&any, "GPGPUVendor") && !extension_key_wanted(&any, "FPGAVendor"));
    }
}
