//! LDIF content records as RFC 2849 writes them.
//!
//! Values that are not a SAFE-STRING (non-ASCII, a leading space, colon or
//! `<`, a trailing space, NUL/CR/LF) are written base64 (`attr:: …`); every
//! physical line is at most [`FOLD_WIDTH`] bytes, continued on lines that
//! start with one space. Entries keep the order they were built in, and an
//! entry's attributes keep theirs, so the same input gives the same bytes.

use std::fmt::Write as _;

/// Longest physical line written, continuation space included.
pub const FOLD_WIDTH: usize = 76;

/// One LDIF content record: a DN and its attribute values, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's distinguished name, written as the record's `dn:` line.
    pub dn: String,
    /// Attribute names and values in the order they are written; a name may repeat.
    pub attributes: Vec<(String, String)>,
}

impl Entry {
    /// An entry with no attributes yet.
    pub fn new(dn: impl Into<String>) -> Entry {
        Entry { dn: dn.into(), attributes: Vec::new() }
    }

    /// Appends one value of `name`.
    pub fn push(&mut self, name: &str, value: impl Into<String>) -> &mut Entry {
        self.attributes.push((name.to_string(), value.into()));
        self
    }

    /// The values of `name` (compared case-insensitively, as LDAP does).
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.attributes.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Writes `entries` as one LDIF document (no `version:` line, as GIP
/// providers print it), each record followed by an empty line.
pub fn write(entries: &[Entry]) -> String {
    let mut out = String::new();
    for entry in entries {
        write_line(&mut out, "dn", &entry.dn);
        for (name, value) in &entry.attributes {
            write_line(&mut out, name, value);
        }
        out.push('\n');
    }
    out
}

/// True when RFC 2849 lets `value` be written as is (SAFE-STRING), and it
/// does not end in a space (which the RFC says SHOULD be base64-encoded).
pub fn is_safe_string(value: &str) -> bool {
    let bytes = value.as_bytes();
    let Some(&first) = bytes.first() else { return true };
    let safe_char = |b: u8| b != 0 && b != b'\n' && b != b'\r' && b < 0x80;
    let safe_init = safe_char(first) && first != b' ' && first != b':' && first != b'<';
    safe_init && bytes.iter().all(|&b| safe_char(b)) && bytes.last() != Some(&b' ')
}

fn write_line(out: &mut String, name: &str, value: &str) {
    let line = if is_safe_string(value) {
        format!("{name}: {value}")
    } else {
        format!("{name}:: {}", base64(value.as_bytes()))
    };
    fold(out, &line);
}

/// Appends `line` (ASCII by construction) folded at [`FOLD_WIDTH`].
fn fold(out: &mut String, line: &str) {
    debug_assert!(line.is_ascii());
    let (first, mut rest) = line.split_at(line.len().min(FOLD_WIDTH));
    out.push_str(first);
    out.push('\n');
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(rest.len().min(FOLD_WIDTH - 1));
        let _ = writeln!(out, " {chunk}");
        rest = tail;
    }
}

/// Standard base64 with padding (RFC 4648 §4), as LDIF uses.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Reads LDIF written by [`write()`] (or by `ldapsearch -LLL`) back into
/// entries: unfolds lines, decodes base64, skips comments. Used by the tests
/// and the benchmark; it is not a general LDIF parser (no change records,
/// no `:<` URLs).
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut logical: Vec<String> = Vec::new();
    for line in text.lines() {
        if let Some(cont) = line.strip_prefix(' ') {
            match logical.last_mut() {
                Some(last) if !last.is_empty() => last.push_str(cont),
                _ => return Err(format!("continuation line without a line to continue: {line:?}")),
            }
        } else if !line.starts_with('#') {
            logical.push(line.to_string());
        }
    }
    let mut entries = Vec::new();
    let mut current: Option<Entry> = None;
    for line in logical {
        if line.is_empty() {
            entries.extend(current.take());
            continue;
        }
        let (name, value) = line.split_once(':').ok_or_else(|| format!("line without a colon: {line:?}"))?;
        let value = match value.strip_prefix(':') {
            Some(encoded) => {
                let bytes = unbase64(encoded.trim()).ok_or_else(|| format!("bad base64 in {name}: {encoded:?}"))?;
                String::from_utf8(bytes).map_err(|_| format!("{name}: base64 value is not UTF-8"))?
            }
            None => value.strip_prefix(' ').unwrap_or(value).to_string(),
        };
        match (&mut current, name.eq_ignore_ascii_case("dn")) {
            (None, true) => current = Some(Entry::new(value)),
            (None, false) if name.eq_ignore_ascii_case("version") => {}
            (None, false) => return Err(format!("attribute {name} before any dn")),
            (Some(_), true) => return Err(format!("dn {value:?} without an empty line before it")),
            (Some(entry), false) => {
                entry.push(name, value);
            }
        }
    }
    entries.extend(current);
    Ok(entries)
}

fn unbase64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = text.as_bytes();
    if bytes.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = n << 6 | value(c)?;
        }
        n <<= 6 * pad as u32;
        out.extend_from_slice(&n.to_be_bytes()[1..4 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded);
            assert_eq!(unbase64(encoded).unwrap(), plain.as_bytes());
        }
    }

    #[test]
    fn unsafe_values_are_base64() {
        assert!(is_safe_string("GPGPUVendor=Nvidia"));
        assert!(is_safe_string(""));
        assert!(!is_safe_string(" leading space"));
        assert!(!is_safe_string(":colon"));
        assert!(!is_safe_string("<url"));
        assert!(!is_safe_string("trailing "));
        assert!(!is_safe_string("Tesla™"));
        assert!(!is_safe_string("two\nlines"));
        let mut e = Entry::new("GLUE2ResourceID=x,o=glue");
        e.push("GLUE2EntityOtherInfo", "GPGPUModel=Tesla™");
        let text = write(&[e]);
        assert!(text.contains("GLUE2EntityOtherInfo:: R1BHUFVNb2RlbD1UZXNsYeKEog==\n"), "{text}");
    }

    #[test]
    fn long_lines_fold_at_76_and_round_trip() {
        let mut e = Entry::new("GLUE2ResourceID=a-rather-long-execution-environment-identifier,GLUE2ServiceID=ce.example.org_ComputingElement,GLUE2GroupID=resource,o=glue");
        let long = "x".repeat(300);
        e.push("GLUE2EntityOtherInfo", long.clone());
        e.push("GLUE2EntityName", "é".repeat(80));
        let text = write(std::slice::from_ref(&e));
        for line in text.lines() {
            assert!(line.len() <= FOLD_WIDTH, "{} bytes: {line}", line.len());
        }
        assert!(text.lines().filter(|l| l.starts_with(' ')).count() >= 5);
        let back = parse(&text).unwrap();
        assert_eq!(back, vec![e]);
    }

    #[test]
    fn output_is_deterministic_and_ordered() {
        let mut a = Entry::new("o=glue");
        a.push("objectClass", "organization").push("o", "glue");
        let mut b = Entry::new("GLUE2GroupID=resource,o=glue");
        b.push("objectClass", "GLUE2Group").push("GLUE2GroupID", "resource");
        let text = write(&[a.clone(), b.clone()]);
        assert_eq!(text, "dn: o=glue\nobjectClass: organization\no: glue\n\ndn: GLUE2GroupID=resource,o=glue\nobjectClass: GLUE2Group\nGLUE2GroupID: resource\n\n");
        assert_eq!(write(&[a, b]), text);
    }

    #[test]
    fn parse_rejects_garbage() {
        assert!(parse(" continuation first").is_err());
        assert!(parse("objectClass: x\n").is_err());
        assert!(parse("dn: a\nno colon here\n").is_err());
        assert!(parse("dn: a\nx:: !!!!\n").is_err());
    }
}
