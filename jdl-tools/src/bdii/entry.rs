//! One LDAP entry as phase 1 keeps it, and the DN arithmetic the joins use
//! (which service an entry belongs to, its parent). Both the retrieval
//! ([`crate::bdii::query`]) and the entity readers build on it.

use std::collections::HashSet;
use std::sync::{OnceLock, RwLock};

/// One LDAP entry: its DN and its values by attribute name.
///
/// Compact: a grid's fetch holds 10^4–10^5 of these, so the names are
/// interned (lower-cased, shared by every entry) and the values lie back to
/// back in one string per entry (a share has some 40 values: one
/// allocation each cost the scan a third of its decoding time).
#[derive(Clone, Default)]
pub struct Entry {
    /// Distinguished name.
    pub dn: String,
    /// Every value's text, back to back.
    text: String,
    /// Each value's `(start, end)` in `text`; an attribute's values are together.
    spans: Vec<(u32, u32)>,
    /// `(lower-cased interned name, its first span, its number of spans)`, in the order received.
    attrs: Vec<(&'static str, u32, u32)>,
}

/// The values of one attribute, in the order the server sent them.
#[derive(Clone, Copy, Default)]
pub struct Values<'a> {
    text: &'a str,
    spans: &'a [(u32, u32)],
}

impl<'a> Values<'a> {
    /// The values.
    pub fn iter(&self) -> ValuesIter<'a> {
        ValuesIter { text: self.text, spans: self.spans.iter() }
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The first one.
    pub fn first(&self) -> Option<&'a str> {
        self.iter().next()
    }

    /// Owned copies.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_string).collect()
    }
}

/// The values of an attribute, one by one.
#[derive(Clone)]
pub struct ValuesIter<'a> {
    text: &'a str,
    spans: std::slice::Iter<'a, (u32, u32)>,
}

impl<'a> Iterator for ValuesIter<'a> {
    type Item = &'a str;
    fn next(&mut self) -> Option<&'a str> {
        self.spans.next().map(|&(a, b)| &self.text[a as usize..b as usize])
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.spans.size_hint()
    }
}

impl<'a> DoubleEndedIterator for ValuesIter<'a> {
    fn next_back(&mut self) -> Option<&'a str> {
        self.spans.next_back().map(|&(a, b)| &self.text[a as usize..b as usize])
    }
}

impl ExactSizeIterator for ValuesIter<'_> {}

impl<'a> IntoIterator for Values<'a> {
    type Item = &'a str;
    type IntoIter = ValuesIter<'a>;
    fn into_iter(self) -> ValuesIter<'a> {
        self.iter()
    }
}

impl PartialEq for Values<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<S: AsRef<str>, const N: usize> PartialEq<[S; N]> for Values<'_> {
    fn eq(&self, other: &[S; N]) -> bool {
        self.len() == N && self.iter().zip(other).all(|(a, b)| a == b.as_ref())
    }
}

impl std::fmt::Debug for Values<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Entry");
        d.field("dn", &self.dn);
        for (name, values) in self.iter() {
            d.field(name, &values);
        }
        d.finish()
    }
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
            && self.iter().all(|(n, v)| other.get(n) == Some(v))
    }
}

impl Entry {
    /// An entry without attributes.
    pub fn new(dn: impl Into<String>) -> Entry {
        Entry { dn: dn.into(), ..Entry::default() }
    }

    /// An entry from `(name, value)` pairs (for tests and LDIF input).
    pub fn from_pairs<'a>(dn: &str, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Entry {
        let mut e = Entry::new(dn);
        for (k, v) in pairs {
            e.push(k, v.to_string());
        }
        e
    }

    fn values(&self, i: usize) -> Values<'_> {
        let (_, first, n) = self.attrs[i];
        // An attribute without values may point anywhere.
        let spans = if n == 0 { &[][..] } else { &self.spans[first as usize..(first + n) as usize] };
        Values { text: &self.text, spans }
    }

    fn get(&self, name: &str) -> Option<Values<'_>> {
        // Interned names are lower-case: compare bytes folded on one side only, the
        // last first (GLUE names share their first bytes).
        let b = name.as_bytes();
        let last = b.last()?.to_ascii_lowercase();
        self.attrs
            .iter()
            .position(|(n, ..)| {
                n.len() == b.len()
                    && n.as_bytes()[n.len() - 1] == last
                    && n.bytes().zip(b).all(|(x, y)| x == y.to_ascii_lowercase())
            })
            .map(|i| self.values(i))
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.attrs.iter().position(|(n, ..)| n.eq_ignore_ascii_case(name))
    }

    /// Every value of an attribute (case-insensitive name).
    pub fn all(&self, name: &str) -> Values<'_> {
        self.get(name).unwrap_or_default()
    }

    /// The first value of an attribute.
    pub fn first(&self, name: &str) -> Option<&str> {
        self.all(name).first()
    }

    /// True when the entry has this objectClass (case-insensitive).
    pub fn is_a(&self, class: &str) -> bool {
        self.all("objectClass").iter().any(|c| c.eq_ignore_ascii_case(class))
    }

    /// The attributes: lower-cased names and their values, in the order received.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, Values<'_>)> + '_ {
        (0..self.attrs.len()).map(|i| (self.attrs[i].0, self.values(i)))
    }

    /// The lower-cased attribute names, in the order received.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.attrs.iter().map(|(n, ..)| *n)
    }

    /// Adds a value to an attribute (created when absent).
    pub fn push(&mut self, name: &str, value: String) {
        self.extend(name, std::iter::once(value));
    }

    /// Adds values to an attribute (created, possibly empty, when absent).
    pub fn extend(&mut self, name: &str, values: impl IntoIterator<Item = String>) {
        let i = match self.position(name) {
            Some(i) => i,
            None => {
                self.attrs.push((intern(name), 0, 0));
                self.attrs.len() - 1
            }
        };
        for v in values {
            self.add_values(i, std::iter::once(v.as_str()));
        }
    }

    /// Adds values to the `i`th attribute, after its others. An
    /// attribute's values stay together: at the end of `spans` when they
    /// are there (always, as a reply is read), else spliced in.
    fn add_values<'v>(&mut self, i: usize, values: impl Iterator<Item = &'v str>) {
        let (_, first, n) = self.attrs[i];
        let end = self.spans.len();
        let at = if n == 0 { end } else { (first + n) as usize };
        let mut added = Vec::new();
        for v in values {
            let start = self.text.len() as u32;
            self.text.push_str(v);
            let span = (start, self.text.len() as u32);
            if at == end {
                self.spans.push(span);
            } else {
                added.push(span);
            }
        }
        let k = if at == end { self.spans.len() - end } else { added.len() };
        if at != end {
            self.spans.splice(at..at, added);
            for (j, a) in self.attrs.iter_mut().enumerate() {
                if j != i && a.2 > 0 && a.1 as usize >= at {
                    a.1 += k as u32;
                }
            }
        }
        self.attrs[i] = (self.attrs[i].0, at as u32 - n, n + k as u32);
    }

    /// Adds the values of an attribute whose name is already interned (as
    /// a reply is read: at the end).
    pub(crate) fn extend_interned<'v>(&mut self, name: &'static str, values: impl Iterator<Item = &'v str>) {
        let i = match self.attrs.iter().position(|(n, ..)| std::ptr::eq(*n, name)) {
            Some(i) => i,
            None => {
                self.attrs.push((name, 0, 0));
                self.attrs.len() - 1
            }
        };
        self.add_values(i, values);
    }

    /// Replaces an attribute's values.
    pub fn set(&mut self, name: &str, values: Vec<String>) {
        match self.position(name) {
            Some(i) => {
                self.clear_at(i);
                self.add_values(i, values.iter().map(String::as_str));
            }
            None => self.extend(name, values),
        }
    }

    /// Removes an attribute; its values, if it had any.
    pub fn remove(&mut self, name: &str) -> Option<Vec<String>> {
        let i = self.position(name)?;
        let values = self.values(i).to_vec();
        self.clear_at(i);
        self.attrs.remove(i);
        Some(values)
    }

    /// Takes the `i`th attribute's values away (their text stays, unused).
    fn clear_at(&mut self, i: usize) {
        let (name, first, n) = self.attrs[i];
        if n == 0 {
            return;
        }
        self.spans.drain(first as usize..(first + n) as usize);
        for a in self.attrs.iter_mut().filter(|a| a.2 > 0 && a.1 > first) {
            a.1 -= n;
        }
        self.attrs[i] = (name, 0, 0);
    }

    /// Room for `n` attributes and `text` bytes of values.
    pub(crate) fn with_capacity(dn: String, n: usize, text: usize) -> Entry {
        Entry { dn, text: String::with_capacity(text), spans: Vec::with_capacity(2 * n), attrs: Vec::with_capacity(n) }
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
    fn values_stay_with_their_attribute_through_every_change() {
        let mut e = Entry::from_pairs("x=1", [("a", "1"), ("b", "2"), ("c", "3"), ("b", "4")]);
        e.push("a", "5".into());
        e.extend("d", Vec::new());
        e.push("b", "6".into());
        assert_eq!(e.all("a"), ["1", "5"]);
        assert_eq!(e.all("b"), ["2", "4", "6"]);
        assert_eq!(e.all("c"), ["3"]);
        assert!(e.all("d").is_empty() && e.names().any(|n| n == "d"));
        e.push("d", "7".into());
        e.set("a", vec!["8".into(), "9".into()]);
        assert_eq!(e.remove("b"), Some(vec!["2".to_string(), "4".into(), "6".into()]));
        e.push("c", "10".into());
        assert_eq!(e.names().collect::<Vec<_>>(), ["a", "c", "d"]);
        assert_eq!(e, Entry::from_pairs("x=1", [("d", "7"), ("c", "3"), ("c", "10"), ("a", "8"), ("a", "9")]));
        assert_eq!(
            e.iter().map(|(n, v)| (n, v.to_vec().join(" "))).collect::<Vec<_>>(),
            [("a", "8 9".to_string()), ("c", "3 10".into()), ("d", "7".into())]
        );
        assert_eq!(e.all("c").iter().rev().collect::<Vec<_>>(), ["10", "3"]);
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
