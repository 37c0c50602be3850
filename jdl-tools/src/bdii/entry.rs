//! One LDAP entry as phase 1 keeps it, and the DN arithmetic the joins use
//! (which service an entry belongs to, its parent). Both the retrieval
//! ([`crate::bdii::query`]) and the entity readers build on it.

use std::collections::HashSet;
use std::sync::{OnceLock, RwLock};

/// One LDAP entry: its DN and its values by attribute name.
///
/// Compact: a grid's snapshot holds 10^4–10^5 of these, so the names are
/// interned (lower-cased, shared by every entry) and the values are the
/// buffers the server's answer was decoded into.
#[derive(Clone, Debug, Default)]
pub struct Entry {
    /// Distinguished name.
    pub dn: String,
    /// `(lower-cased interned name, values in the order the server sent them)`.
    attrs: Vec<(&'static str, Vec<String>)>,
}

/// The one shared, lower-cased copy of an attribute name (the schema's few
/// hundred names; never freed).
pub fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<RwLock<HashSet<&'static str>>> = OnceLock::new();
    let names = NAMES.get_or_init(Default::default);
    let lower = name.to_ascii_lowercase();
    if let Some(n) = names.read().unwrap_or_else(|e| e.into_inner()).get(lower.as_str()) {
        return n;
    }
    let mut w = names.write().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = w.get(lower.as_str()) {
        return n;
    }
    let n: &'static str = Box::leak(lower.into_boxed_str());
    w.insert(n);
    n
}

impl PartialEq for Entry {
    /// Same DN and the same values per attribute, whatever order the attributes came in.
    fn eq(&self, other: &Entry) -> bool {
        self.dn == other.dn
            && self.attrs.len() == other.attrs.len()
            && self.attrs.iter().all(|(n, v)| other.get(n) == Some(v))
    }
}

impl Entry {
    /// An entry without attributes.
    pub fn new(dn: impl Into<String>) -> Entry {
        Entry { dn: dn.into(), attrs: Vec::new() }
    }

    /// An entry from `(name, value)` pairs (for tests and LDIF input).
    pub fn from_pairs<'a>(dn: &str, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Entry {
        let mut e = Entry::new(dn);
        for (k, v) in pairs {
            e.push(k, v.to_string());
        }
        e
    }

    fn get(&self, name: &str) -> Option<&Vec<String>> {
        // Interned names are lower-case: compare bytes folded on one side only.
        let b = name.as_bytes();
        self.attrs
            .iter()
            .find(|(n, _)| n.len() == b.len() && n.bytes().zip(b).all(|(x, y)| x == y.to_ascii_lowercase()))
            .map(|(_, v)| v)
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.attrs.iter().position(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// Every value of an attribute (case-insensitive name).
    pub fn all(&self, name: &str) -> &[String] {
        self.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The first value of an attribute.
    pub fn first(&self, name: &str) -> Option<&str> {
        self.all(name).first().map(String::as_str)
    }

    /// True when the entry has this objectClass (case-insensitive).
    pub fn is_a(&self, class: &str) -> bool {
        self.all("objectClass").iter().any(|c| c.eq_ignore_ascii_case(class))
    }

    /// The attributes: lower-cased names and their values, in the order received.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &[String])> + '_ {
        self.attrs.iter().map(|(n, v)| (*n, v.as_slice()))
    }

    /// The lower-cased attribute names, in the order received.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.attrs.iter().map(|(n, _)| *n)
    }

    /// Adds a value to an attribute (created when absent).
    pub fn push(&mut self, name: &str, value: String) {
        self.extend(name, std::iter::once(value));
    }

    /// Adds values to an attribute (created, possibly empty, when absent).
    pub fn extend(&mut self, name: &str, values: impl IntoIterator<Item = String>) {
        match self.position(name) {
            Some(i) => self.attrs[i].1.extend(values),
            None => self.attrs.push((intern(name), values.into_iter().collect())),
        }
    }

    /// Adds the values of an attribute whose name is already interned.
    pub(crate) fn extend_interned(&mut self, name: &'static str, values: Vec<String>) {
        match self.attrs.iter().position(|(n, _)| std::ptr::eq(*n, name)) {
            Some(i) => self.attrs[i].1.extend(values),
            None => self.attrs.push((name, values)),
        }
    }

    /// Replaces an attribute's values.
    pub fn set(&mut self, name: &str, values: Vec<String>) {
        match self.position(name) {
            Some(i) => self.attrs[i].1 = values,
            None => self.attrs.push((intern(name), values)),
        }
    }

    /// Removes an attribute; its values, if it had any.
    pub fn remove(&mut self, name: &str) -> Option<Vec<String>> {
        self.position(name).map(|i| self.attrs.remove(i).1)
    }

    /// Room for `n` attributes.
    pub(crate) fn with_capacity(dn: String, n: usize) -> Entry {
        Entry { dn, attrs: Vec::with_capacity(n) }
    }
}

/// The DN of the ComputingService an entry belongs to: the nearest
/// ancestor (or self) whose RDN is a `GLUE2ServiceID` (CREAM's DIT puts
/// shares, EEs and managers right under it, ARC's EEs under the manager).
/// An entry outside any service: its parent, so that its siblings are found.
pub fn service_base(dn: &str) -> &str {
    match service_dn(dn) {
        Some(s) => s,
        None => parent_dn(dn).unwrap_or(dn),
    }
}

/// The `GLUE2ServiceID=…` suffix of a DN, if it has one.
pub fn service_dn(dn: &str) -> Option<&str> {
    let mut start = 0;
    loop {
        let raw = &dn[start..];
        let rest = raw.trim_start();
        // `get`, not indexing: byte 14 may fall inside a non-ASCII character.
        if rest.get(..14).is_some_and(|name| name.eq_ignore_ascii_case("GLUE2ServiceID"))
            && rest[14..].trim_start().starts_with('=')
        {
            return Some(rest);
        }
        start += next_rdn(raw)?;
    }
}

/// Offset of the next RDN after the first, ignoring escaped commas.
fn next_rdn(dn: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in dn.char_indices() {
        if c == ',' && !escaped {
            return Some(i + 1);
        }
        escaped = c == '\\' && !escaped;
    }
    None
}

/// The parent DN.
pub fn parent_dn(dn: &str) -> Option<&str> {
    next_rdn(dn).map(|i| dn[i..].trim_start())
}

/// The attribute type of a DN's second RDN (`GLUE2ShareID` in
/// `GLUE2ExtensionLocalID=k,GLUE2ShareID=s,…`), ignoring escaped commas.
pub(crate) fn parent_rdn_attr(dn: &str) -> Option<String> {
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
    e.first("GLUE2ResourceID")
        .or_else(|| e.first("GLUE2ShareID"))
        .or_else(|| e.first("GLUE2ApplicationEnvironmentID"))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_dn_survives_non_ascii_rdns() {
        // A fuzzer's DN: byte 14 of the first RDN falls inside 'Û'.
        let dn = "GLUE2PolicyID\u{db}pgpu_policy,GLUE2ShareID=s, GLUE2ServiceID=ce,o=glue";
        assert_eq!(service_dn(dn), Some("GLUE2ServiceID=ce,o=glue"));
        assert_eq!(service_dn("GLUE2PolicyIDÛ,o=glue"), None);
        assert_eq!(service_base("GLUE2ShareID=s,GLUE2ServiceID=ce,o=glue"), "GLUE2ServiceID=ce,o=glue");
    }

    #[test]
    fn names_are_case_insensitive_and_shared() {
        let mut e = Entry::from_pairs(
            "GLUE2ShareID=q,o=glue",
            [("objectClass", "GLUE2Share"), ("OBJECTCLASS", "GLUE2ComputingShare"), ("GLUE2ShareID", "q")],
        );
        assert_eq!(e.all("objectclass"), ["GLUE2Share", "GLUE2ComputingShare"]);
        assert!(e.is_a("glue2computingshare"));
        assert_eq!(e.first("glue2shareid"), Some("q"));
        assert_eq!(e.names().collect::<Vec<_>>(), ["objectclass", "glue2shareid"]);
        assert!(std::ptr::eq(intern("GLUE2ShareID"), e.names().nth(1).unwrap()));
        e.set("GLUE2ShareID", vec!["r".into()]);
        assert_eq!(e.first("GLUE2ShareID"), Some("r"));
        assert_eq!(e.remove("glue2shareid"), Some(vec!["r".to_string()]));
        assert!(e.all("GLUE2ShareID").is_empty());
        assert_eq!(e.first("GLUE2ShareI"), None);
    }

    #[test]
    fn equal_entries_whatever_the_attribute_order() {
        let a = Entry::from_pairs("x=1", [("a", "1"), ("b", "2")]);
        let b = Entry::from_pairs("x=1", [("B", "2"), ("A", "1")]);
        assert_eq!(a, b);
        assert_ne!(a, Entry::from_pairs("x=1", [("a", "1"), ("b", "3")]));
        assert_ne!(a, Entry::from_pairs("x=1", [("a", "1")]));
    }
}
