//! A scan's LDAP messages read straight from the bytes the server sent.
//!
//! ldap3's codec parses each message into a tree of tags, copies that tree,
//! and hands it through two channels and two adapters before phase 1 sees
//! it: 35 % of the I/O threads' time on 30,000 shares (`perf`). A scan only
//! needs its entries and its final result, so [`Message::parse`] reads one
//! BER message in a single bounds-checked pass, straight into an [`Entry`].
//! The request side stays ldap3's ([`search_request`] encodes with its
//! `lber` writer and filter parser).
//!
//! Everything here reads untrusted bytes: a length past the buffer, a tag
//! where another is due or a value that is not UTF-8 is an error or a
//! skipped attribute, never a panic (fuzzed by `fuzz/fuzz_targets/ldap_reply.rs`).

use crate::bdii::entry::{intern, Entry};
use ldap3::asn1::{
    write, ASNTag, Boolean, Enumerated, Integer, OctetString, Sequence, StructureTag, Tag, TagClass, PL,
};

/// RFC 2696's control, "simple paged results".
pub const PAGED_RESULTS_OID: &str = "1.2.840.113556.1.4.319";

/// Why a reply could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed LDAP message at byte {at}: {what}")]
pub struct WireError {
    /// Offset in the message.
    pub at: usize,
    /// What was wrong.
    pub what: &'static str,
}

/// A cursor over BER TLVs (RFC 4511 §5.1: definite lengths only).
#[derive(Clone)]
struct Ber<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Where `buf` starts in the message, for error offsets.
    base: usize,
}

impl<'a> Ber<'a> {
    fn new(buf: &'a [u8], base: usize) -> Ber<'a> {
        Ber { buf, pos: 0, base }
    }

    fn err(&self, what: &'static str) -> WireError {
        WireError { at: self.base + self.pos, what }
    }

    fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The next element's tag byte, without taking it.
    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    /// The next element: its tag byte and a reader over its contents.
    fn next(&mut self) -> Result<(u8, Ber<'a>), WireError> {
        let rest = &self.buf[self.pos..];
        match header(rest).map_err(|what| self.err(what))? {
            Some((tag, head, len)) if rest.len() - head >= len => {
                let start = self.pos + head;
                let inner = Ber::new(&self.buf[start..start + len], self.base + start);
                self.pos = start + len;
                Ok((tag, inner))
            }
            _ => Err(self.err("element runs past its enclosing one")),
        }
    }

    /// The next element, which must have this tag.
    fn expect(&mut self, tag: u8, what: &'static str) -> Result<Ber<'a>, WireError> {
        let at = self.pos;
        let (t, inner) = self.next()?;
        if t != tag {
            self.pos = at;
            return Err(self.err(what));
        }
        Ok(inner)
    }

    fn bytes(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// The contents as a two's-complement integer of at most 8 bytes.
    fn integer(&self) -> Result<i64, WireError> {
        let b = self.bytes();
        if b.is_empty() || b.len() > 8 {
            return Err(self.err("integer of no or more than 8 bytes"));
        }
        let first = if b[0] & 0x80 != 0 { -1i64 } else { 0 };
        Ok(b.iter().fold(first, |acc, &x| (acc << 8) | i64::from(x)))
    }
}

/// `(tag, header length, content length)` of the element at the start of
/// `buf`; `None` when `buf` does not yet hold the whole header.
fn header(buf: &[u8]) -> Result<Option<(u8, usize, usize)>, &'static str> {
    let Some(&tag) = buf.first() else { return Ok(None) };
    if tag & 0x1f == 0x1f {
        return Err("multi-byte tag (LDAP uses none)");
    }
    let Some(&first) = buf.get(1) else { return Ok(None) };
    if first < 0x80 {
        return Ok(Some((tag, 2, usize::from(first))));
    }
    let n = usize::from(first & 0x7f);
    if n == 0 {
        return Err("indefinite length (RFC 4511 forbids it)");
    }
    if n > 4 {
        return Err("length of more than 4 bytes");
    }
    let Some(digits) = buf.get(2..2 + n) else { return Ok(None) };
    Ok(Some((tag, 2 + n, digits.iter().fold(0usize, |acc, &d| (acc << 8) | usize::from(d)))))
}

/// The largest message a scan accepts: a GLUE entry is a few KiB, so a
/// larger announced length is a broken or hostile server, not a reason to
/// buffer gigabytes.
pub const MAX_MESSAGE: usize = 64 << 20;

/// The length of the first whole LDAPMessage in `buf`, `None` while it is
/// still incomplete.
pub fn message_len(buf: &[u8]) -> Result<Option<usize>, WireError> {
    if buf.first().is_some_and(|&t| t != 0x30) {
        return Err(WireError { at: 0, what: "an LDAPMessage is a SEQUENCE" });
    }
    match header(buf) {
        Ok(Some((_, _, len))) if len > MAX_MESSAGE => Err(WireError { at: 0, what: "message longer than 64 MiB" }),
        Ok(Some((_, head, len))) => Ok((buf.len() - head >= len).then_some(head + len)),
        Ok(None) => Ok(None),
        Err(what) => Err(WireError { at: 0, what }),
    }
}

/// The interned names of one search's attributes, by the bytes the server
/// spells them with: entries of a search repeat the same few names in the
/// same order, so the hint usually hits at once.
#[derive(Default)]
pub struct NameCache {
    names: Vec<(Vec<u8>, &'static str)>,
    hint: usize,
}

impl NameCache {
    /// Starts a new entry: its first name is most likely the previous entry's first.
    pub(crate) fn restart(&mut self) {
        self.hint = 0;
    }

    /// The interned, lower-cased name; `None` when it is not UTF-8.
    pub(crate) fn get(&mut self, raw: &[u8]) -> Option<&'static str> {
        if let Some((r, n)) = self.names.get(self.hint) {
            if r == raw {
                self.hint += 1;
                return Some(n);
            }
        }
        let i = match self.names.iter().position(|(r, _)| r == raw) {
            Some(i) => i,
            None => {
                self.names.push((raw.to_vec(), intern(std::str::from_utf8(raw).ok()?)));
                self.names.len() - 1
            }
        };
        self.hint = i + 1;
        Some(self.names[i].1)
    }
}

/// The end of a search (`SearchResultDone`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    /// RFC 4511 result code (0 success).
    pub rc: i64,
    /// `diagnosticMessage`.
    pub text: String,
    /// The paged-results cookie: empty when the last page has been sent.
    pub cookie: Vec<u8>,
}

/// One message of a search's reply, as a scan uses it.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A `SearchResultEntry`.
    Entry(Entry),
    /// A `SearchResultReference` (a BDII has none; a scan follows none).
    Reference,
    /// The `SearchResultDone`.
    Done(Done),
    /// An unsolicited notification (message ID 0), e.g. the server's notice
    /// of disconnection: its result code and text.
    Notice(Done),
    /// Any other operation (not part of a search's answer).
    Other(u8),
}

impl Message {
    /// Reads one whole LDAPMessage (as framed by [`message_len`]): its
    /// message ID and what it says. As ldap3's `SearchEntry` does, an
    /// attribute with a value that is not UTF-8 (none in GLUE) is left out.
    pub fn parse(msg: &[u8], names: &mut NameCache) -> Result<(i64, Message), WireError> {
        let mut outer = Ber::new(msg, 0);
        let mut m = outer.expect(0x30, "an LDAPMessage is a SEQUENCE")?;
        if !outer.is_empty() {
            return Err(outer.err("bytes after the LDAPMessage"));
        }
        let id = m.expect(0x02, "messageID is an INTEGER")?.integer()?;
        let (op, body) = m.next()?;
        let message = match op {
            // [APPLICATION 4] SearchResultEntry
            0x64 => Message::Entry(entry(body, names)?),
            // [APPLICATION 19] SearchResultReference
            0x73 => Message::Reference,
            // [APPLICATION 5] SearchResultDone
            0x65 => {
                let (rc, text) = result(body)?;
                Message::Done(Done { rc, text, cookie: paged_cookie(&mut m)? })
            }
            // [APPLICATION 24] ExtendedResponse: unsolicited when its ID is 0
            0x78 if id == 0 => {
                let (rc, text) = result(body)?;
                Message::Notice(Done { rc, text, cookie: Vec::new() })
            }
            other => Message::Other(other),
        };
        Ok((id, message))
    }
}

fn utf8(b: &[u8]) -> Option<String> {
    std::str::from_utf8(b).ok().map(str::to_owned)
}

fn entry(mut body: Ber<'_>, names: &mut NameCache) -> Result<Entry, WireError> {
    names.restart();
    let dn_at = body.pos;
    let dn = utf8(body.expect(0x04, "objectName is an OCTET STRING")?.bytes())
        .ok_or(WireError { at: body.base + dn_at, what: "objectName is not UTF-8" })?;
    let mut attrs = body.expect(0x30, "attributes is a SEQUENCE")?;
    // One allocation for all the values' text: its size read first.
    let (mut names_seen, mut text) = (0, 0);
    let mut sizing = attrs.clone();
    while !sizing.is_empty() {
        let mut pa = sizing.expect(0x30, "a PartialAttribute is a SEQUENCE")?;
        pa.expect(0x04, "an attribute's type is an OCTET STRING")?;
        let mut vals = pa.expect(0x31, "an attribute's vals is a SET")?;
        while !vals.is_empty() {
            text += vals.expect(0x04, "a value is an OCTET STRING")?.bytes().len();
        }
        names_seen += 1;
    }
    let mut e = Entry::with_capacity(dn, names_seen, text);
    while !attrs.is_empty() {
        let mut pa = attrs.expect(0x30, "a PartialAttribute is a SEQUENCE")?;
        let name = pa.expect(0x04, "an attribute's type is an OCTET STRING")?.bytes();
        let vals = pa.expect(0x31, "an attribute's vals is a SET")?;
        // Read once to check the framing and the text, then taken.
        let mut all_utf8 = true;
        let mut check = vals.clone();
        while !check.is_empty() {
            all_utf8 &= std::str::from_utf8(check.expect(0x04, "a value is an OCTET STRING")?.bytes()).is_ok();
        }
        if let (true, Some(name)) = (all_utf8, names.get(name)) {
            let mut take = vals;
            let values = std::iter::from_fn(|| {
                let v = take.next().ok()?.1.bytes();
                // Checked above.
                std::str::from_utf8(v).ok()
            });
            e.extend_interned(name, values);
        }
    }
    Ok(e)
}

/// An LDAPResult's code and diagnostic message.
fn result(mut body: Ber<'_>) -> Result<(i64, String), WireError> {
    let rc = body.expect(0x0a, "resultCode is an ENUMERATED")?.integer()?;
    body.expect(0x04, "matchedDN is an OCTET STRING")?;
    let text = body.expect(0x04, "diagnosticMessage is an OCTET STRING")?;
    Ok((rc, String::from_utf8_lossy(text.bytes()).into_owned()))
}

/// The cookie of the paged-results control among a message's `[0] Controls`
/// (empty when there is none).
fn paged_cookie(m: &mut Ber<'_>) -> Result<Vec<u8>, WireError> {
    if m.peek() != Some(0xa0) {
        return Ok(Vec::new());
    }
    let mut controls = m.expect(0xa0, "controls")?;
    while !controls.is_empty() {
        let mut c = controls.expect(0x30, "a Control is a SEQUENCE")?;
        let oid = c.expect(0x04, "controlType is an OCTET STRING")?;
        if oid.bytes() != PAGED_RESULTS_OID.as_bytes() {
            continue;
        }
        if c.peek() == Some(0x01) {
            c.next()?;
        }
        let value = c.expect(0x04, "the paged-results controlValue is an OCTET STRING")?;
        let mut value = Ber::new(value.bytes(), value.base);
        let mut v = value.expect(0x30, "the paged-results value is a SEQUENCE")?;
        v.expect(0x02, "the paged-results size is an INTEGER")?;
        return Ok(v.expect(0x04, "the paged-results cookie is an OCTET STRING")?.bytes().to_vec());
    }
    Ok(Vec::new())
}

/// A whole `SearchRequest` message, with the paged-results control when
/// `page` is given (`(size, cookie)`); `None` when the filter does not parse.
pub fn search_request(
    id: i32,
    base: &str,
    scope: i64,
    filter: &str,
    attrs: &[String],
    page: Option<(i32, &[u8])>,
) -> Option<Vec<u8>> {
    let octets = |b: &[u8]| Tag::OctetString(OctetString { inner: b.to_vec(), ..Default::default() });
    let request = Tag::Sequence(Sequence {
        id: 3,
        class: TagClass::Application,
        inner: vec![
            octets(base.as_bytes()),
            Tag::Enumerated(Enumerated { inner: scope, ..Default::default() }),
            // derefAliases: never (a BDII has no aliases)
            Tag::Enumerated(Enumerated { inner: 0, ..Default::default() }),
            Tag::Integer(Integer { inner: 0, ..Default::default() }),
            Tag::Integer(Integer { inner: 0, ..Default::default() }),
            Tag::Boolean(Boolean { inner: false, ..Default::default() }),
            ldap3::parse_filter(filter).ok()?,
            Tag::Sequence(Sequence {
                inner: attrs.iter().map(|a| octets(a.as_bytes())).collect(),
                ..Default::default()
            }),
        ],
    });
    let mut message = vec![Tag::Integer(Integer { inner: i64::from(id), ..Default::default() }), request];
    if let Some((size, cookie)) = page {
        let value = encode(Tag::Sequence(Sequence {
            inner: vec![Tag::Integer(Integer { inner: i64::from(size), ..Default::default() }), octets(cookie)],
            ..Default::default()
        }));
        let control = Tag::Sequence(Sequence {
            inner: vec![octets(PAGED_RESULTS_OID.as_bytes()), octets(&value)],
            ..Default::default()
        });
        message.push(Tag::StructureTag(StructureTag {
            id: 0,
            class: TagClass::Context,
            payload: PL::C(vec![control.into_structure()]),
        }));
    }
    Some(encode(Tag::Sequence(Sequence { inner: message, ..Default::default() })))
}

/// `UnbindRequest`: the polite end of a scan's own connection.
pub fn unbind_request(id: i32) -> Vec<u8> {
    encode(Tag::Sequence(Sequence {
        inner: vec![
            Tag::Integer(Integer { inner: i64::from(id), ..Default::default() }),
            Tag::StructureTag(StructureTag { id: 2, class: TagClass::Application, payload: PL::P(Vec::new()) }),
        ],
        ..Default::default()
    }))
}

fn encode(tag: Tag) -> Vec<u8> {
    let mut buf = bytes::BytesMut::new();
    // Writing into memory cannot fail.
    write::encode_into(&mut buf, tag.into_structure()).expect("BER into memory");
    buf.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match content.len() {
            n if n < 0x80 => out.push(n as u8),
            n if n < 0x100 => out.extend([0x81, n as u8]),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend_from_slice(content);
        out
    }

    fn message(id: u8, op: Vec<u8>, controls: Option<Vec<u8>>) -> Vec<u8> {
        let mut body = tlv(0x02, &[id]);
        body.extend(op);
        body.extend(controls.unwrap_or_default());
        tlv(0x30, &body)
    }

    fn attribute(name: &str, values: &[&[u8]]) -> Vec<u8> {
        let mut body = tlv(0x04, name.as_bytes());
        body.extend(tlv(0x31, &values.iter().flat_map(|v| tlv(0x04, v)).collect::<Vec<_>>()));
        tlv(0x30, &body)
    }

    fn search_entry(dn: &str, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut body = tlv(0x04, dn.as_bytes());
        body.extend(tlv(0x30, &attrs.concat()));
        tlv(0x64, &body)
    }

    fn done(rc: u8, text: &str) -> Vec<u8> {
        tlv(0x65, &[tlv(0x0a, &[rc]), tlv(0x04, b""), tlv(0x04, text.as_bytes())].concat())
    }

    #[test]
    fn an_entry_is_read_with_shared_names_and_non_utf8_attributes_left_out() {
        let long = "v".repeat(300);
        let msg = message(
            7,
            search_entry(
                "GLUE2ShareID=q,o=glue",
                &[
                    attribute("objectClass", &[b"GLUE2Share", b"GLUE2ComputingShare"]),
                    attribute("GLUE2EntityOtherInfo", &[b"A=1", b"\xff\xfe"]),
                    attribute("GLUE2ShareID", &[long.as_bytes()]),
                ],
            ),
            None,
        );
        assert_eq!(message_len(&msg), Ok(Some(msg.len())));
        assert_eq!(message_len(&msg[..msg.len() - 1]), Ok(None));
        assert_eq!(message_len(&msg[..1]), Ok(None));
        let mut names = NameCache::default();
        let (id, m) = Message::parse(&msg, &mut names).unwrap();
        assert_eq!(id, 7);
        let Message::Entry(e) = m else { panic!("{m:?}") };
        assert_eq!(e.dn, "GLUE2ShareID=q,o=glue");
        assert!(e.is_a("GLUE2ComputingShare"));
        assert_eq!(e.names().collect::<Vec<_>>(), ["objectclass", "glue2shareid"]);
        assert_eq!(e.first("GLUE2ShareID"), Some(long.as_str()));
        let again = message(8, search_entry("x=1", &[attribute("objectClass", &[b"GLUE2Share"])]), None);
        let Message::Entry(again) = Message::parse(&again, &mut names).unwrap().1 else { panic!() };
        assert!(std::ptr::eq(e.names().next().unwrap(), again.names().next().unwrap()));
    }

    #[test]
    fn done_carries_its_code_text_and_paged_cookie() {
        let value = tlv(0x30, &[tlv(0x02, &[0]), tlv(0x04, b"\x01\x02cookie")].concat());
        let control = |oid: &str| tlv(0x30, &[tlv(0x04, oid.as_bytes()), tlv(0x01, &[0]), tlv(0x04, &value)].concat());
        let controls = tlv(0xa0, &[control("1.2.3"), control(PAGED_RESULTS_OID)].concat());
        let msg = message(3, done(0, ""), Some(controls));
        let (id, m) = Message::parse(&msg, &mut NameCache::default()).unwrap();
        assert_eq!(id, 3);
        assert_eq!(m, Message::Done(Done { rc: 0, text: String::new(), cookie: b"\x01\x02cookie".to_vec() }));
        let msg = message(3, done(32, "no such object"), None);
        let m = Message::parse(&msg, &mut NameCache::default()).unwrap().1;
        assert_eq!(m, Message::Done(Done { rc: 32, text: "no such object".into(), cookie: Vec::new() }));
        // The server's notice of disconnection.
        let notice = tlv(0x78, &[tlv(0x0a, &[52]), tlv(0x04, b""), tlv(0x04, b"going away")].concat());
        let m = Message::parse(&message(0, notice, None), &mut NameCache::default()).unwrap().1;
        assert_eq!(m, Message::Notice(Done { rc: 52, text: "going away".into(), cookie: Vec::new() }));
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        let good = message(1, search_entry("a=b", &[attribute("x", &[b"y"])]), None);
        let mut names = NameCache::default();
        // Every truncation and every single-byte change either parses or errs.
        for cut in 0..good.len() {
            assert!(Message::parse(&good[..cut], &mut names).is_err(), "cut at {cut}");
        }
        for i in 0..good.len() {
            for b in [0x00, 0x7f, 0x80, 0x84, 0x85, 0xff] {
                let mut bad = good.clone();
                bad[i] = b;
                let _ = message_len(&bad);
                let _ = Message::parse(&bad, &mut names);
            }
        }
        assert_eq!(message_len(b"\x04\x00"), Err(WireError { at: 0, what: "an LDAPMessage is a SEQUENCE" }));
        assert!(message_len(b"\x30\x80").is_err(), "indefinite length");
        assert!(message_len(b"\x30\x85\x01\x01\x01\x01\x01").is_err(), "5-byte length");
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(Message::parse(&trailing, &mut names).is_err());
        assert!(message_len(b"\x30\x84\x10\x00\x00\x00").is_err(), "256 MiB announced");
        assert_eq!(message_len(b"\x30\x84\x00\x00\x10\x00"), Ok(None), "4 KiB announced, not yet here");
        let mut bad_dn = message(1, tlv(0x64, &[tlv(0x04, b"\xff"), tlv(0x30, b"")].concat()), None);
        assert!(Message::parse(&bad_dn, &mut names).unwrap_err().what.contains("UTF-8"));
        bad_dn[2] = 0x01; // the message ID's tag
        assert!(Message::parse(&bad_dn, &mut names).is_err());
    }

    #[test]
    fn requests_round_trip_through_the_reader() {
        let attrs = vec!["objectClass".to_string(), "GLUE2ShareID".to_string()];
        let req =
            search_request(5, "o=glue", 2, "(&(objectClass=GLUE2Share)(x=a*))", &attrs, Some((100, b"ck"))).unwrap();
        assert_eq!(message_len(&req), Ok(Some(req.len())));
        let mut outer = Ber::new(&req, 0);
        let mut m = outer.expect(0x30, "").unwrap();
        assert_eq!(m.expect(0x02, "").unwrap().integer(), Ok(5));
        let mut s = m.expect(0x63, "SearchRequest").unwrap();
        assert_eq!(s.expect(0x04, "").unwrap().bytes(), b"o=glue");
        assert_eq!(s.expect(0x0a, "").unwrap().integer(), Ok(2));
        assert_eq!(paged_cookie(&mut m).unwrap(), b"ck");
        assert!(search_request(1, "o=glue", 2, "(unbalanced", &attrs, None).is_none());
        assert_eq!(unbind_request(9), [0x30, 0x05, 0x02, 0x01, 0x09, 0x42, 0x00]);
    }
}
