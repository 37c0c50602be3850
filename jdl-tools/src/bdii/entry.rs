//! One LDAP entry as phase 1 keeps it, and the DN arithmetic the joins use
//! (which service an entry belongs to, its parent). Both the retrieval
//! ([`crate::bdii::query`]) and the entity readers build on it.

use std::collections::HashMap;

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

/// The DN of the ComputingService an entry belongs to: the nearest
/// ancestor (or self) whose RDN is a `GLUE2ServiceID` (CREAM's DIT puts
/// shares, EEs and managers right under it, ARC's EEs under the manager).
/// An entry outside any service: its parent, so that its siblings are found.
pub fn service_base(dn: &str) -> String {
    match service_dn(dn) {
        Some(s) => s.to_string(),
        None => parent_dn(dn).unwrap_or(dn).to_string(),
    }
}

/// The `GLUE2ServiceID=…` suffix of a DN, if it has one.
pub fn service_dn(dn: &str) -> Option<&str> {
    let mut start = 0;
    loop {
        let rest = &dn[start..];
        if rest.trim_start().len() >= 14 && rest.trim_start()[..14].eq_ignore_ascii_case("GLUE2ServiceID") && rest.trim_start()[14..].trim_start().starts_with('=') {
            return Some(rest.trim_start());
        }
        start += next_rdn(rest)?;
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
    e.first("GLUE2ResourceID").or_else(|| e.first("GLUE2ShareID")).or_else(|| e.first("GLUE2ApplicationEnvironmentID")).map(str::to_string)
}
