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

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use ldap3::adapters::{Adapter, EntriesOnly, PagedResults};
use ldap3::{ldap_escape, LdapConn, LdapConnSettings, LdapError, Scope, SearchEntry};

/// The GLUE 2.0 suffix of a BDII.
pub const GLUE2_BASE: &str = "o=glue";
/// The GLUE 1.3 suffix of a BDII.
pub const GLUE13_BASE: &str = "o=grid";

/// One LDAP entry: its DN and its values by lower-cased attribute name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entry {
    /// Distinguished name.
    pub dn: String,
    /// Values by lower-cased attribute name, in the order the server sent them.
    pub attrs: HashMap<String, Vec<String>>,
}

impl Entry {
    /// An entry from `(name, value)` pairs (for tests and LDIF input).
    pub fn from_pairs<'a>(dn: &str, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Entry {
        let mut e = Entry { dn: dn.to_string(), attrs: HashMap::new() };
        for (k, v) in pairs {
            e.attrs.entry(k.to_ascii_lowercase()).or_default().push(v.to_string());
        }
        e
    }

    /// Every value of an attribute (case-insensitive name).
    pub fn all(&self, name: &str) -> &[String] {
        // Lower-case on the stack: offers of a whole grid make millions of these lookups.
        let mut buf = [0u8; 96];
        let found = if name.len() <= buf.len() {
            for (d, b) in buf.iter_mut().zip(name.bytes()) {
                *d = b.to_ascii_lowercase();
            }
            std::str::from_utf8(&buf[..name.len()]).ok().and_then(|k| self.attrs.get(k))
        } else {
            self.attrs.get(&name.to_ascii_lowercase())
        };
        found.map(Vec::as_slice).unwrap_or(&[])
    }

    /// The first value of an attribute.
    pub fn first(&self, name: &str) -> Option<&str> {
        self.all(name).first().map(String::as_str)
    }

    /// True when the entry has this objectClass (case-insensitive).
    pub fn is_a(&self, class: &str) -> bool {
        self.all("objectClass").iter().any(|c| c.eq_ignore_ascii_case(class))
    }
}

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

impl QueryOptions {
    /// Defaults for `url`: bases `o=glue` / `o=grid`, 5 s connect, 30 s read, pages of 1000.
    pub fn new(url: &str) -> QueryOptions {
        QueryOptions {
            url: url.to_string(),
            base: GLUE2_BASE.into(),
            base13: GLUE13_BASE.into(),
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(30),
            page_size: 1000,
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
}

/// A failed query, naming the BDII.
#[derive(Debug, thiserror::Error)]
pub enum BdiiError {
    /// Could not connect.
    #[error("{url}: BDII unreachable: {message}")]
    Unreachable {
        /// The BDII.
        url: String,
        /// Why.
        message: String,
    },
    /// Connected, but no answer in time.
    #[error("{url}: BDII timed out after {after:?} ({what})")]
    Timeout {
        /// The BDII.
        url: String,
        /// The timeout that expired.
        after: Duration,
        /// What was being waited for.
        what: String,
    },
    /// The server refused a search.
    #[error("{url}: search {filter} under {base} failed: {message}")]
    Search {
        /// The BDII.
        url: String,
        /// Base DN.
        base: String,
        /// The filter.
        filter: String,
        /// The server's or library's message.
        message: String,
    },
    /// The URL is not an LDAP URL.
    #[error("{url}: not an LDAP URL (expected ldap://host:port)")]
    BadUrl {
        /// What was given.
        url: String,
    },
}

/// Everything phase 1 fetched: the raw material of the offers.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// GLUE 2.0 ExecutionEnvironments, ComputingShares and
    /// ApplicationEnvironments that carry CDER data.
    pub carriers: Vec<Entry>,
    /// `GLUE2Extension` entries with the wanted keys.
    pub extensions: Vec<Entry>,
    /// ComputingManagers of the carriers.
    pub managers: Vec<Entry>,
    /// ComputingShares of the carriers' services.
    pub shares: Vec<Entry>,
    /// ComputingEndpoints of those services.
    pub endpoints: Vec<Entry>,
    /// MappingPolicies open to the job's VO (None: no VO given).
    pub policies: Option<Vec<Entry>>,
    /// GLUE 1.3 SubClusters with CDER tags.
    pub subclusters: Vec<Entry>,
    /// GLUE 1.3 CEs of those clusters.
    pub glue13_ces: Vec<Entry>,
    /// Searches made.
    pub queries: usize,
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
    let keys: Vec<String> = if wanted.keys.is_empty() { wanted.prefixes.iter().cloned().collect() } else { wanted.keys.iter().map(|k| format!("{k}=")).collect() };
    let mut any: Vec<String> = keys.iter().map(|k| format!("(GLUE2EntityOtherInfo={}*)", ldap_escape(k.as_str()))).collect();
    any.sort();
    any.dedup();
    let any = match any.len() {
        0 => "(GLUE2EntityOtherInfo=*)".to_string(),
        1 => any.remove(0),
        _ => format!("(|{})", any.concat()),
    };
    // Shares first: the largest class, searched on the caller's thread (whose malloc arena
    // grows cheaply; a helper thread's arena grows by many small mprotect calls).
    let mut out = vec![format!("(&(objectClass=GLUE2ComputingShare){any})"), format!("(&(objectClass=GLUE2ExecutionEnvironment){any})")];
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
        let mut any: Vec<String> = wanted.prefixes.iter().map(|p| format!("(GLUE2ExtensionKey={}*)", ldap_escape(p.as_str()))).collect();
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
        keys.insert("TotalVGPGPU".into());
        keys.insert("FreeVGPGPU".into());
    }
    format!("(&(objectClass=GLUE2Extension){})", any_of("GLUE2ExtensionKey", &keys).unwrap_or_default())
}

/// GLUE 1.3: SubClusters tagged with a wanted `Key=` or a `<Vendor><PREFIX>` marker.
pub fn subcluster_filter(wanted: &Wanted) -> String {
    let rte = "GlueHostApplicationSoftwareRunTimeEnvironment";
    let mut any: Vec<String> = if wanted.keys.is_empty() {
        wanted.prefixes.iter().map(|p| format!("({rte}={}*)", ldap_escape(p.as_str()))).chain(wanted.prefixes.iter().map(|p| format!("({rte}=*{})", ldap_escape(p.as_str())))).collect()
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

/// A connection to one BDII, with its timeouts.
pub struct Bdii {
    conn: LdapConn,
    opts: QueryOptions,
    queries: usize,
}

impl Bdii {
    /// Connects (anonymous, as BDIIs are read).
    pub fn connect(opts: &QueryOptions) -> Result<Bdii, BdiiError> {
        if !(opts.url.starts_with("ldap://") || opts.url.starts_with("ldapi://")) {
            return Err(BdiiError::BadUrl { url: opts.url.clone() });
        }
        let settings = LdapConnSettings::new().set_conn_timeout(opts.connect_timeout);
        let conn = LdapConn::with_settings(settings, &opts.url).map_err(|e| match e {
            LdapError::UrlParsing { .. } => BdiiError::BadUrl { url: opts.url.clone() },
            e => map_err(&opts.url, opts.connect_timeout, "connecting", e),
        })?;
        Ok(Bdii { conn, opts: opts.clone(), queries: 0 })
    }

    /// One paged subtree search; returns every entry.
    pub fn search(&mut self, base: &str, filter: &str, attrs: &[&str]) -> Result<Vec<Entry>, BdiiError> {
        self.queries += 1;
        let started = std::time::Instant::now();
        let url = self.opts.url.clone();
        let t = self.opts.timeout;
        let search_err = |message: String| BdiiError::Search { url: url.clone(), base: base.into(), filter: filter.into(), message };
        let adapters: Vec<Box<dyn Adapter<'_, &str, Vec<&str>>>> =
            vec![Box::new(EntriesOnly::new()), Box::new(PagedResults::new(self.opts.page_size))];
        let mut stream = self
            .conn
            .with_timeout(t)
            .streaming_search_with(adapters, base, Scope::Subtree, filter, attrs.to_vec())
            .map_err(|e| map_err(&url, t, &format!("search {filter}"), e))?;
        let mut out = Vec::new();
        loop {
            match stream.next() {
                Ok(Some(raw)) => {
                    let se = SearchEntry::construct(raw);
                    let mut attrs: HashMap<String, Vec<String>> = HashMap::with_capacity(se.attrs.len());
                    for (k, v) in se.attrs {
                        attrs.entry(k.to_ascii_lowercase()).or_default().extend(v);
                    }
                    // Values that are not UTF-8 (none in GLUE) come as bin_attrs and are dropped.
                    out.push(Entry { dn: se.dn, attrs });
                }
                Ok(None) => break,
                Err(e) => return Err(map_err(&url, t, &format!("search {filter}"), e)),
            }
        }
        let res = stream.result();
        tracing::debug!(base, filter, entries = out.len(), elapsed_ms = started.elapsed().as_secs_f64() * 1e3, "search");
        // 32 noSuchObject: the base is absent (e.g. no GLUE 1.3 tree): nothing found.
        if res.rc != 0 && res.rc != 32 {
            return Err(search_err(format!("result code {} {}", res.rc, res.text)));
        }
        Ok(out)
    }

    /// Runs independent searches under `base` at once, the first on this
    /// connection and each other on a connection of its own; results in order.
    pub fn search_concurrently(&mut self, base: &str, searches: &[(String, &[&str])]) -> Result<Vec<Vec<Entry>>, BdiiError> {
        let Some(((f0, a0), rest)) = searches.split_first() else { return Ok(Vec::new()) };
        let opts = self.opts.clone();
        let (head, others) = std::thread::scope(|sc| {
            let handles: Vec<_> = rest
                .iter()
                .map(|(f, a)| {
                    let opts = &opts;
                    sc.spawn(move || -> Result<Vec<Entry>, BdiiError> { Bdii::connect(opts)?.search(base, f, a) })
                })
                .collect();
            let head = self.search(base, f0, a0);
            let others: Vec<Result<Vec<Entry>, BdiiError>> = handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(BdiiError::Unreachable { url: opts.url.clone(), message: "search thread panicked".into() })))
                .collect();
            (head, others)
        });
        self.queries += rest.len();
        let mut out = vec![head?];
        for r in others {
            out.push(r?);
        }
        Ok(out)
    }

    /// Searches in chunks of IDs, since a filter of 10^4 alternatives is slow to parse.
    fn search_ids(&mut self, base: &str, class: &str, attr: &str, ids: &BTreeSet<String>, attrs: &[&str]) -> Result<Vec<Entry>, BdiiError> {
        let ids: Vec<&String> = ids.iter().collect();
        let searches: Vec<(String, &[&str])> = ids
            .chunks(500)
            .filter_map(|chunk| any_of(attr, chunk.iter().map(|s| s.as_str())))
            .map(|any| (format!("(&(objectClass={class}){any})"), attrs))
            .collect();
        // Indexed lookups: a few connections in parallel keep slapd's threads busy.
        let mut out = Vec::new();
        for batch in searches.chunks(4) {
            for r in self.search_concurrently(base, batch)? {
                out.extend(r);
            }
        }
        Ok(out)
    }

    /// Phase-1 retrieval: everything [`crate::bdii::offers::build_offers`] needs.
    pub fn fetch(&mut self, wanted: &Wanted) -> Result<Snapshot, BdiiError> {
        let base = self.opts.base.clone();
        let s = self.opts.strategies;
        let mut snap = Snapshot::default();
        let mut carrier_dns: BTreeSet<String> = BTreeSet::new();
        // The first searches are independent full scans of their class: run them concurrently.
        const EXT_ATTRS: &[&str] = &["GLUE2ExtensionKey", "GLUE2ExtensionValue", "GLUE2ExtensionEntityForeignKey"];
        let mut first: Vec<(String, &[&str])> = Vec::new();
        if s.attribute_extension {
            first.extend(other_info_filters(wanted).into_iter().map(|f| (f, &[][..])));
        }
        if s.class_extension {
            first.push((extension_filter(wanted), EXT_ATTRS));
        }
        let mut results = self.search_concurrently(&base, &first)?.into_iter();
        if s.attribute_extension {
            for _ in other_info_filters(wanted) {
                for e in results.next().unwrap_or_default() {
                    if carrier_dns.insert(e.dn.clone()) {
                        snap.carriers.push(e);
                    }
                }
            }
        }
        if s.class_extension {
            snap.extensions = results.next().unwrap_or_default();
            let known: BTreeSet<String> = snap.carriers.iter().filter_map(entity_id).collect();
            // An Extension usually sits under the entity it extends: its parent's RDN says
            // which class to look in; otherwise every carrier class is asked.
            const CLASSES: [(&str, &str); 3] = [
                ("GLUE2ExecutionEnvironment", "GLUE2ResourceID"),
                ("GLUE2ComputingShare", "GLUE2ShareID"),
                ("GLUE2ApplicationEnvironment", "GLUE2ApplicationEnvironmentID"),
            ];
            let mut missing: [BTreeSet<String>; 3] = Default::default();
            for x in &snap.extensions {
                let parent = parent_rdn_attr(&x.dn);
                for id in x.all("GLUE2ExtensionEntityForeignKey").iter().filter(|id| !known.contains(*id)) {
                    match CLASSES.iter().position(|(_, a)| parent.as_deref().is_some_and(|p| p.eq_ignore_ascii_case(a))) {
                        Some(i) => {
                            missing[i].insert(id.clone());
                        }
                        None => missing.iter_mut().for_each(|m| {
                            m.insert(id.clone());
                        }),
                    }
                }
            }
            for ((class, attr), ids) in CLASSES.iter().zip(&missing) {
                for e in self.search_ids(&base, class, attr, ids, &[])? {
                    if carrier_dns.insert(e.dn.clone()) {
                        snap.carriers.push(e);
                    }
                }
            }
        }
        if s.attribute_extension || s.class_extension {
            let manager_ids: BTreeSet<String> = snap
                .carriers
                .iter()
                .flat_map(|c| {
                    c.all("GLUE2ExecutionEnvironmentComputingManagerForeignKey")
                        .iter()
                        .chain(c.all("GLUE2ResourceManagerForeignKey"))
                        .chain(c.all("GLUE2ApplicationEnvironmentComputingManagerForeignKey"))
                        .cloned()
                        .collect::<Vec<_>>()
                })
                .collect();
            snap.managers = self.search_ids(&base, "GLUE2ComputingManager", "GLUE2ManagerID", &manager_ids, &[])?;
            // The queues of services whose CDERs are published on ExecutionEnvironments;
            // shares that carry CDER data themselves are already here.
            let ee_services: BTreeSet<String> = snap
                .managers
                .iter()
                .flat_map(|m| m.all("GLUE2ComputingManagerComputingServiceForeignKey").iter().chain(m.all("GLUE2ManagerServiceForeignKey")).cloned().collect::<Vec<_>>())
                .collect();
            let mut services = ee_services.clone();
            for c in snap.carriers.iter().filter(|c| c.is_a("GLUE2ComputingShare")) {
                services.extend(c.all("GLUE2ShareServiceForeignKey").iter().cloned());
                services.extend(c.all("GLUE2ComputingShareComputingServiceForeignKey").iter().cloned());
            }
            // Foreign keys are unindexed: one search per class (per 500 keys), never one per service.
            for chunk in ee_services.iter().collect::<Vec<_>>().chunks(500) {
                let fk = any_of("GLUE2ShareServiceForeignKey", chunk.iter().map(|s| s.as_str())).unwrap_or_default();
                snap.shares.extend(self.search(&base, &format!("(&(objectClass=GLUE2ComputingShare){fk})"), &[])?);
            }
            // Endpoints: by the IDs the shares name (indexed), and by service only for
            // services none of whose shares names one (an unindexed scan).
            const ENDPOINT_ATTRS: [&str; 7] = [
                "GLUE2EndpointID",
                "GLUE2EndpointURL",
                "GLUE2EndpointServiceForeignKey",
                "GLUE2EndpointImplementationName",
                "GLUE2EndpointInterfaceName",
                "GLUE2EndpointHealthState",
                "GLUE2EndpointServingState",
            ];
            let all_shares = snap.shares.iter().chain(snap.carriers.iter().filter(|c| c.is_a("GLUE2ComputingShare")));
            let mut named: BTreeSet<String> = BTreeSet::new();
            let mut served: BTreeSet<String> = BTreeSet::new();
            for sh in all_shares {
                let ids: Vec<&String> = sh.all("GLUE2ShareEndpointForeignKey").iter().chain(sh.all("GLUE2ComputingShareComputingEndpointForeignKey")).collect();
                if !ids.is_empty() {
                    named.extend(ids.into_iter().cloned());
                    served.extend(sh.all("GLUE2ShareServiceForeignKey").iter().cloned());
                }
            }
            snap.endpoints = self.search_ids(&base, "GLUE2ComputingEndpoint", "GLUE2EndpointID", &named, &ENDPOINT_ATTRS)?;
            served.extend(snap.endpoints.iter().flat_map(|e| e.all("GLUE2EndpointServiceForeignKey").iter().cloned()));
            let rest: Vec<&String> = services.iter().filter(|s| !served.contains(*s)).collect();
            for chunk in rest.chunks(500) {
                let fk = any_of("GLUE2EndpointServiceForeignKey", chunk.iter().map(|s| s.as_str())).unwrap_or_default();
                snap.endpoints.extend(self.search(&base, &format!("(&(objectClass=GLUE2ComputingEndpoint){fk})"), &ENDPOINT_ATTRS)?);
            }
            if let Some(vo) = &wanted.vo {
                let f = format!("(&(objectClass=GLUE2MappingPolicy)(GLUE2PolicyRule=VO:{}))", ldap_escape(vo.as_str()));
                snap.policies = Some(self.search(&base, &f, &["GLUE2PolicyRule", "GLUE2MappingPolicyShareForeignKey"])?);
            }
        }
        if s.glue13 {
            let base13 = self.opts.base13.clone();
            snap.subclusters = self.search(&base13, &subcluster_filter(wanted), &[])?;
            let clusters: BTreeSet<String> = snap
                .subclusters
                .iter()
                .flat_map(|sc| sc.all("GlueChunkKey").iter().filter_map(|k| k.strip_prefix("GlueClusterUniqueID=")).map(str::to_string).collect::<Vec<_>>())
                .collect();
            let mut vo_filter = String::new();
            if let Some(vo) = &wanted.vo {
                vo_filter = format!("(GlueCEAccessControlBaseRule=VO:{})", ldap_escape(vo.as_str()));
            }
            for chunk in clusters.iter().collect::<Vec<_>>().chunks(500) {
                let fk = any_of("GlueForeignKey", chunk.iter().map(|c| format!("GlueClusterUniqueID={c}"))).unwrap_or_default();
                snap.glue13_ces.extend(self.search(&base13, &format!("(&(objectClass=GlueCE){fk}{vo_filter})"), &[])?);
            }
        }
        snap.queries = self.queries;
        Ok(snap)
    }
}

/// The attribute type of a DN's second RDN (`GLUE2ShareID` in
/// `GLUE2ExtensionLocalID=k,GLUE2ShareID=s,…`), ignoring escaped commas.
fn parent_rdn_attr(dn: &str) -> Option<String> {
    let mut escaped = false;
    let mut commas = dn.char_indices().filter(|&(_, c)| {
        let hit = c == ',' && !escaped;
        escaped = c == '\\' && !escaped;
        hit
    });
    let start = commas.next()?.0 + 1;
    let rest = &dn[start..];
    Some(rest.split('=').next()?.trim().to_string())
}

/// The ID of a GLUE 2.0 carrier entity.
pub fn entity_id(e: &Entry) -> Option<String> {
    e.first("GLUE2ResourceID").or_else(|| e.first("GLUE2ShareID")).or_else(|| e.first("GLUE2ApplicationEnvironmentID")).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(keys: &[&str]) -> Wanted {
        Wanted { keys: keys.iter().map(|s| s.to_string()).collect(), prefixes: ["GPGPU".to_string()].into(), ..Default::default() }
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
    fn parent_rdn_of_an_extension() {
        assert_eq!(parent_rdn_attr("GLUE2ExtensionLocalID=K,GLUE2ShareID=s,GLUE2ServiceID=x,o=glue").as_deref(), Some("GLUE2ShareID"));
        assert_eq!(parent_rdn_attr("GLUE2ExtensionLocalID=a\\,b,GLUE2ResourceID=e,o=glue").as_deref(), Some("GLUE2ResourceID"));
        assert_eq!(parent_rdn_attr("o=glue"), None);
    }

    #[test]
    fn extension_filter_fetches_only_the_requirement_keys() {
        let f = extension_filter(&wanted(&["GPGPUFreeInstances"]));
        assert_eq!(f, "(&(objectClass=GLUE2Extension)(GLUE2ExtensionKey=GPGPUFreeInstances))");
    }
}
