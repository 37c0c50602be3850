//! The snapshot file: one immutable, little-endian file a query maps and
//! reads in place.
//!
//! ```text
//! header   magic "CDERIDX\0", version u32, crc32 u32 (of every byte from 16 to the columns),
//!          file length u64, then (offset u64, length u64) of: meta, strings, offers, lists, names,
//!          string checks, column directory
//! meta     JSON: IndexMeta, the build's warnings
//! strings  count u32, end offsets u32[count], UTF-8 bytes   (CE ids, DNs, queues, VO and key names)
//! offers   one 64-byte record per offer, in list-match's order (CE id, schema, EE)
//! lists    u32 arena: each list is its length, then its items (string ids; vGPGPU counts)
//! names    count u32, string ids u32[count]: every VO and key name the lists hold, so a query
//!          finds its VO's and keys' ids without reading the whole string table
//! string checks  crc32 u32 per 4 KiB block (a page) of the strings section, checked when a query first
//!          reads a string of the block: a query touches only the strings of its survivors
//! columns  directory: count u32, per attribute: name, offset u64, length u64, crc32 u32;
//!          each column holds every offer's value of one attribute (absent, bool, int,
//!          real, string, list), and, for the candidate cut, its numbers sorted with
//!          their offers and its strings and list elements (lower-cased) with posting lists
//! ```
//!
//! A column is checked (crc32) when a query first uses it, a block of the
//! string table when a query first reads a string in it; the header's
//! checksum covers everything else, so a query reads only the columns its
//! job names and the strings of the offers it answers with.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use cder_classad::value::Value;

use crate::bdii::offers::{Offer, Offers};

/// `CDERIDX\0`.
pub const MAGIC: [u8; 8] = *b"CDERIDX\0";
/// Bumped whenever the layout changes: an older or newer file is refused, never misread.
pub const VERSION: u32 = 3;
/// Header size: magic, version, crc, file length, seven (offset, length) pairs.
pub const HEADER_LEN: usize = 8 + 4 + 4 + 8 + 7 * 16;
/// Bytes of the string table per checksum.
pub const STRING_BLOCK: usize = 4 << 10;
/// Bytes per offer record.
pub const OFFER_LEN: usize = 64;
/// "No string / no list".
pub const NONE: u32 = u32::MAX;

/// Value tags of a column slot and a list item.
pub mod tag {
    /// The offer has no such attribute.
    pub const ABSENT: u8 = 0;
    /// `false`.
    pub const FALSE: u8 = 1;
    /// `true`.
    pub const TRUE: u8 = 2;
    /// An integer (payload: i64).
    pub const INT: u8 = 3;
    /// A real (payload: f64 bits).
    pub const REAL: u8 = 4;
    /// A string (payload: the column's string id).
    pub const STR: u8 = 5;
    /// A list (payload: the column's list id).
    pub const LIST: u8 = 6;
    /// `undefined`.
    pub const UNDEFINED: u8 = 7;
    /// `error`.
    pub const ERROR: u8 = 8;
}

/// Offer record flags.
pub mod flag {
    /// GLUE 1.3 offer (else GLUE 2.0).
    pub const GLUE13: u8 = 1;
    /// The service owns the CE ID.
    pub const PROVEN: u8 = 2;
    /// GLUE 1.3: a tag starts or ends with a CDER prefix.
    pub const PREFIX_TAGGED: u8 = 4;
    /// GLUE 1.3: a tag publishes a vGPGPU count.
    pub const VGPGPU_TAGGED: u8 = 8;
    /// GLUE 2.0: a share's offer without its EEs, offered when the job's keys
    /// fetch the share but none of the EEs it names (their keys in `ee_keys`).
    pub const SHARE_ONLY: u8 = 16;
}

/// Interns strings into the file's string table.
#[derive(Default)]
struct Strings {
    ids: HashMap<String, u32>,
    list: Vec<String>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let i = self.list.len() as u32;
        self.ids.insert(s.to_string(), i);
        self.list.push(s.to_string());
        i
    }

    fn opt(&mut self, s: Option<&str>) -> u32 {
        s.map_or(NONE, |s| self.id(s))
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn pad8(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(8) {
        out.push(0);
    }
}

/// One attribute's values over every offer, as it is written.
#[derive(Default)]
struct ColumnBuilder {
    spelling: String,
    tags: Vec<u8>,
    payload: Vec<u64>,
    strings: Vec<String>,
    string_ids: HashMap<String, u32>,
    /// Each list: its items as (tag, payload).
    lists: Vec<Vec<(u8, u64)>>,
}

impl ColumnBuilder {
    fn new(spelling: &str, n: usize) -> ColumnBuilder {
        ColumnBuilder {
            spelling: spelling.to_string(),
            tags: vec![tag::ABSENT; n],
            payload: vec![0; n],
            ..Default::default()
        }
    }

    fn string(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i as u64;
        }
        let i = self.strings.len() as u32;
        self.string_ids.insert(s.to_string(), i);
        self.strings.push(s.to_string());
        i as u64
    }

    fn scalar(&mut self, v: &Value) -> (u8, u64) {
        match v {
            Value::Undefined => (tag::UNDEFINED, 0),
            Value::Bool(false) => (tag::FALSE, 0),
            Value::Bool(true) => (tag::TRUE, 0),
            Value::Int(i) => (tag::INT, *i as u64),
            Value::Real(r) => (tag::REAL, r.to_bits()),
            Value::Str(s) => (tag::STR, self.string(s)),
            Value::List(items) => {
                let items: Vec<(u8, u64)> = items.iter().map(|x| self.scalar(x)).collect();
                self.lists.push(items);
                (tag::LIST, (self.lists.len() - 1) as u64)
            }
            // Offers hold literals only; anything else would not survive a round trip.
            Value::Error | Value::Ad(_) => (tag::ERROR, 0),
        }
    }

    fn set(&mut self, offer: usize, v: &Value) {
        let (t, p) = self.scalar(v);
        self.tags[offer] = t;
        self.payload[offer] = p;
    }

    fn number(&self, t: u8, p: u64) -> Option<f64> {
        match t {
            tag::FALSE => Some(0.0),
            tag::TRUE => Some(1.0),
            tag::INT => Some(p as i64 as f64),
            tag::REAL => Some(f64::from_bits(p)),
            _ => None,
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        let n = self.tags.len();
        put_u32(out, n as u32);
        out.extend_from_slice(&self.tags);
        pad8(out);
        for p in &self.payload {
            put_u64(out, *p);
        }
        write_strings(out, self.strings.iter().map(String::as_str));
        put_u32(out, self.lists.len() as u32);
        let mut end = 0u32;
        for l in &self.lists {
            end += l.len() as u32;
            put_u32(out, end);
        }
        for l in &self.lists {
            for (t, p) in l {
                put_u32(out, *t as u32);
                put_u64(out, *p);
            }
        }
        // Candidate cut: numbers (booleans count as 0 and 1, as ClassAd comparisons take them) sorted.
        let mut nums: Vec<(f64, u32)> = (0..n)
            .filter_map(|i| self.number(self.tags[i], self.payload[i]).map(|x| (x, i as u32)))
            .filter(|(x, _)| !x.is_nan())
            .collect();
        nums.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        put_u32(out, nums.len() as u32);
        for (x, _) in &nums {
            put_u64(out, x.to_bits());
        }
        for (_, i) in &nums {
            put_u32(out, *i);
        }
        // Strings, lower-cased (ClassAd `==` and `<` ignore ASCII case), with their offers.
        let mut strs: BTreeMap<Vec<u8>, BTreeSet<u32>> = BTreeMap::new();
        let mut elems: BTreeMap<Vec<u8>, BTreeSet<u32>> = BTreeMap::new();
        for i in 0..n {
            match self.tags[i] {
                tag::STR => {
                    let s = self.strings[self.payload[i] as usize].as_bytes().to_ascii_lowercase();
                    strs.entry(s).or_default().insert(i as u32);
                }
                tag::LIST => {
                    for (t, p) in &self.lists[self.payload[i] as usize] {
                        if *t == tag::STR {
                            let s = self.strings[*p as usize].as_bytes().to_ascii_lowercase();
                            elems.entry(s).or_default().insert(i as u32);
                        }
                    }
                }
                _ => {}
            }
        }
        write_postings(out, &strs);
        write_postings(out, &elems);
    }
}

fn write_strings<'a>(out: &mut Vec<u8>, strings: impl Iterator<Item = &'a str> + Clone) {
    let all: Vec<&str> = strings.collect();
    put_u32(out, all.len() as u32);
    let mut end = 0u32;
    for s in &all {
        end += s.len() as u32;
        put_u32(out, end);
    }
    for s in &all {
        out.extend_from_slice(s.as_bytes());
    }
    pad8(out);
}

fn write_postings(out: &mut Vec<u8>, map: &BTreeMap<Vec<u8>, BTreeSet<u32>>) {
    put_u32(out, map.len() as u32);
    let mut end = 0u32;
    for k in map.keys() {
        end += k.len() as u32;
        put_u32(out, end);
    }
    let mut pend = 0u32;
    for v in map.values() {
        pend += v.len() as u32;
        put_u32(out, pend);
    }
    for k in map.keys() {
        out.extend_from_slice(k);
    }
    pad8(out);
    for v in map.values() {
        for i in v {
            put_u32(out, *i);
        }
    }
    pad8(out);
}

/// Writes the file's bytes: `offers` as [`crate::bdii::offers::every_offer`] gives them, each with its traits.
pub(crate) fn encode(offers: &Offers, meta_json: &[u8]) -> Vec<u8> {
    let mut enc = Encoder { strings: hot_strings(offers), ..Encoder::default() };
    let n = offers.offers.len();
    enc.records.reserve(n * OFFER_LEN);
    for (i, o) in offers.offers.iter().enumerate() {
        enc.record(o);
        for (name, expr) in o.ad.iter() {
            let cder_classad::ast::Expr::Lit(v) = expr else { continue };
            let col = enc.columns.entry(name.to_ascii_lowercase()).or_insert_with(|| ColumnBuilder::new(name, n));
            col.set(i, v);
        }
    }
    enc.layout(meta_json)
}

/// The strings a query reads (names, and the IDs of the offers it answers with), interned
/// first, the DNs after: a query maps only the table's first pages, not a page per offer it
/// answers with.
fn hot_strings(offers: &Offers) -> Strings {
    let mut strings = Strings::default();
    for o in &offers.offers {
        let t = o.traits();
        let names = t.open_to.iter().chain(t.ee_keys.iter()).chain(t.share_keys.iter().flat_map(|k| k.iter()));
        for s in names.chain(t.apps.iter()).chain(t.vgpgpu.iter().map(|(k, _)| k)) {
            strings.id(s);
        }
        strings.id(&o.ce_id);
        for s in [&o.queue, &o.share_id, &o.ee_id] {
            strings.opt(s.as_deref());
        }
    }
    strings
}

/// The file's sections as they are built, offer by offer.
#[derive(Default)]
struct Encoder {
    strings: Strings,
    /// The u32 arena of lists.
    lists: Vec<u32>,
    /// Equal lists are stored once: most offers of a grid list the same keys and VOs.
    stored: HashMap<Vec<u32>, u32>,
    records: Vec<u8>,
    /// VO and key names: the only strings a query looks up by value.
    names: BTreeSet<u32>,
    columns: BTreeMap<String, ColumnBuilder>,
}

impl Encoder {
    fn list(&mut self, items: Vec<u32>) -> u32 {
        let lists = &mut self.lists;
        *self.stored.entry(items).or_insert_with_key(|items| {
            let at = lists.len() as u32;
            lists.push(items.len() as u32);
            lists.extend(items);
            at
        })
    }

    fn ids(&mut self, set: &BTreeSet<String>) -> Vec<u32> {
        set.iter().map(|s| self.strings.id(s)).collect()
    }

    /// An offer's record: its IDs, its traits' strings and lists, its flags.
    fn record(&mut self, o: &Offer) {
        let t = o.traits();
        let open_to = self.ids(&t.open_to);
        let ee_keys = self.ids(&t.ee_keys);
        let share_keys = t.share_keys.as_ref().map(|k| self.ids(k));
        self.names.extend(open_to.iter().chain(&ee_keys).chain(share_keys.iter().flatten()));
        let apps: Vec<u32> = t.apps.iter().map(|a| self.strings.id(a)).collect();
        let mut vg: Vec<u32> = Vec::new();
        for (k, v) in t.vgpgpu.iter() {
            let (tg, p) = match v {
                Value::Int(x) => (tag::INT, *x as u64),
                Value::Real(r) => (tag::REAL, r.to_bits()),
                _ => continue,
            };
            vg.extend([self.strings.id(k), tg as u32, p as u32, (p >> 32) as u32]);
        }
        let strings = &mut self.strings;
        let ids = [
            strings.id(&o.ce_id),
            strings.id(&t.service),
            strings.id(&t.share_dn),
            strings.opt(t.ee_dn.as_deref()),
            strings.opt(o.queue.as_deref()),
            strings.opt(o.share_id.as_deref()),
            strings.opt(o.ee_id.as_deref()),
        ];
        let lists = [self.list(open_to), self.list(ee_keys), share_keys.map_or(NONE, |k| self.list(k))];
        let (apps, vg) = (self.list(apps), self.list(vg));
        let tail = [apps, vg, self.strings.opt(t.refused.as_deref()), t.seq as u32];
        for f in ids.into_iter().chain(lists).chain(tail) {
            put_u32(&mut self.records, f);
        }
        let flags = [
            (o.schema != "GLUE2", flag::GLUE13),
            (t.proven, flag::PROVEN),
            (t.prefix_tagged, flag::PREFIX_TAGGED),
            (t.vgpgpu_tagged, flag::VGPGPU_TAGGED),
            (t.share_only, flag::SHARE_ONLY),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0u8, |all, (_, f)| all | f);
        self.records.extend_from_slice(&[flags, 0, 0, 0, 0, 0, 0, 0]);
    }

    /// The file: header, sections, the column directory, then the columns.
    fn layout(self, meta_json: &[u8]) -> Vec<u8> {
        let Encoder { strings, lists, records, names, columns, .. } = self;
        let mut out = vec![0u8; HEADER_LEN];
        pad8(&mut out);
        let mut sections: Vec<(u64, u64)> = Vec::new();
        let mut section = |out: &mut Vec<u8>, body: &dyn Fn(&mut Vec<u8>)| {
            let at = out.len();
            body(out);
            sections.push((at as u64, (out.len() - at) as u64));
            pad8(out);
        };
        section(&mut out, &|o| o.extend_from_slice(meta_json));
        let mut table = Vec::new();
        write_strings(&mut table, strings.list.iter().map(String::as_str));
        section(&mut out, &|o| o.extend_from_slice(&table));
        section(&mut out, &|o| o.extend_from_slice(&records));
        section(&mut out, &|o| lists.iter().for_each(|x| put_u32(o, *x)));
        section(&mut out, &|o| {
            put_u32(o, names.len() as u32);
            names.iter().for_each(|x| put_u32(o, *x));
        });
        section(&mut out, &|o| table.chunks(STRING_BLOCK).for_each(|b| put_u32(o, crc32fast::hash(b))));
        // The directory, then the columns it points at.
        let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
        for (lower, col) in &columns {
            let mut b = Vec::new();
            col.write(&mut b);
            blobs.push((lower.clone(), b));
        }
        let dir_len: usize = 4 + columns.values().map(|c| 2 + c.spelling.len() + 20).sum::<usize>();
        let dir_at = out.len();
        let mut at = (dir_at + dir_len).div_ceil(8) * 8;
        let mut dir = Vec::with_capacity(dir_len);
        put_u32(&mut dir, blobs.len() as u32);
        let mut placed = Vec::new();
        for ((_, col), (_, b)) in columns.iter().zip(&blobs) {
            dir.extend_from_slice(&(col.spelling.len() as u16).to_le_bytes());
            dir.extend_from_slice(col.spelling.as_bytes());
            put_u64(&mut dir, at as u64);
            put_u64(&mut dir, b.len() as u64);
            put_u32(&mut dir, crc32fast::hash(b));
            placed.push(at);
            at = (at + b.len()).div_ceil(8) * 8;
        }
        out.extend_from_slice(&dir);
        sections.push((dir_at as u64, dir.len() as u64));
        let hot_end = out.len();
        pad8(&mut out);
        for ((_, b), at) in blobs.iter().zip(placed) {
            out.resize(at, 0);
            out.extend_from_slice(b);
        }
        pad8(&mut out);
        // Header.
        let len = out.len() as u64;
        let mut h = Vec::with_capacity(HEADER_LEN);
        h.extend_from_slice(&MAGIC);
        put_u32(&mut h, VERSION);
        put_u32(&mut h, 0);
        put_u64(&mut h, len);
        for (o, l) in &sections {
            put_u64(&mut h, *o);
            put_u64(&mut h, *l);
        }
        out[..HEADER_LEN].copy_from_slice(&h);
        // The string table is left to its blocks' own checksums.
        let (table_at, table_len) = (sections[1].0 as usize, sections[1].1 as usize);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&out[16..table_at]);
        crc.update(&out[table_at + table_len..hot_end]);
        let crc = crc.finalize();
        out[12..16].copy_from_slice(&crc.to_le_bytes());
        out
    }
}

/// Reads little-endian numbers at byte offsets of a slice; None when out of bounds.
#[derive(Clone, Copy)]
pub(crate) struct Bytes<'a>(pub &'a [u8]);

impl<'a> Bytes<'a> {
    pub fn u8(&self, at: usize) -> Option<u8> {
        self.0.get(at).copied()
    }
    pub fn u16(&self, at: usize) -> Option<u16> {
        Some(u16::from_le_bytes(self.0.get(at..at + 2)?.try_into().ok()?))
    }
    pub fn u32(&self, at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(self.0.get(at..at + 4)?.try_into().ok()?))
    }
    pub fn u64(&self, at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(self.0.get(at..at + 8)?.try_into().ok()?))
    }
    pub fn slice(&self, at: usize, len: usize) -> Option<&'a [u8]> {
        self.0.get(at..at.checked_add(len)?)
    }
}

/// A string table (`count`, end offsets, bytes) read in place.
#[derive(Clone, Copy)]
pub(crate) struct StrTable<'a> {
    ends: Bytes<'a>,
    bytes: &'a [u8],
    pub count: usize,
}

impl<'a> StrTable<'a> {
    /// The table at `at`, and the offset just past it (8-aligned).
    pub fn read(b: Bytes<'a>, at: usize) -> Option<(StrTable<'a>, usize)> {
        let count = b.u32(at)? as usize;
        let ends = Bytes(b.slice(at + 4, count.checked_mul(4)?)?);
        let total = if count == 0 { 0 } else { ends.u32((count - 1) * 4)? as usize };
        let bytes = b.slice(at + 4 + count * 4, total)?;
        let next = (at + 4 + count * 4 + total).div_ceil(8) * 8;
        Some((StrTable { ends, bytes, count }, next))
    }

    pub fn bytes(&self, i: usize) -> Option<&'a [u8]> {
        let (start, end) = self.span(i)?;
        self.bytes.get(start..end)
    }

    /// Where string `i` lies in the table's bytes.
    pub fn span(&self, i: usize) -> Option<(usize, usize)> {
        if i >= self.count {
            return None;
        }
        let start = if i == 0 { 0 } else { self.ends.u32((i - 1) * 4)? as usize };
        Some((start, self.ends.u32(i * 4)? as usize))
    }

    pub fn get(&self, i: usize) -> Option<&'a str> {
        std::str::from_utf8(self.bytes(i)?).ok()
    }
}

/// A posting map (sorted lower-cased strings → offers) read in place.
#[derive(Clone, Copy)]
pub(crate) struct Postings<'a> {
    keys: StrTableNoPad<'a>,
    pends: Bytes<'a>,
    offers: Bytes<'a>,
}

#[derive(Clone, Copy)]
struct StrTableNoPad<'a> {
    ends: Bytes<'a>,
    bytes: &'a [u8],
    count: usize,
}

impl<'a> StrTableNoPad<'a> {
    fn bytes(&self, i: usize) -> Option<&'a [u8]> {
        let start = if i == 0 { 0 } else { self.ends.u32((i - 1) * 4)? as usize };
        let end = self.ends.u32(i * 4)? as usize;
        self.bytes.get(start..end)
    }
}

impl<'a> Postings<'a> {
    fn read(b: Bytes<'a>, at: usize) -> Option<(Postings<'a>, usize)> {
        let count = b.u32(at)? as usize;
        let ends = Bytes(b.slice(at + 4, count.checked_mul(4)?)?);
        let pends = Bytes(b.slice(at + 4 + count * 4, count * 4)?);
        let total = if count == 0 { 0 } else { ends.u32((count - 1) * 4)? as usize };
        let bytes = b.slice(at + 4 + count * 8, total)?;
        let offers_at = (at + 4 + count * 8 + total).div_ceil(8) * 8;
        let n = if count == 0 { 0 } else { pends.u32((count - 1) * 4)? as usize };
        let offers = Bytes(b.slice(offers_at, n.checked_mul(4)?)?);
        Some((
            Postings { keys: StrTableNoPad { ends, bytes, count }, pends, offers },
            (offers_at + n * 4).div_ceil(8) * 8,
        ))
    }

    /// The number of distinct keys.
    pub fn len(&self) -> usize {
        self.keys.count
    }

    /// The key at rank `i`.
    pub fn key(&self, i: usize) -> Option<&'a [u8]> {
        self.keys.bytes(i)
    }

    /// The first rank whose key is not less than `probe` (lower-cased by the caller).
    pub fn lower_bound(&self, probe: &[u8]) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid)? < probe {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Some(lo)
    }

    /// The offers of the keys of ranks `from..to`.
    pub fn offers(&self, from: usize, to: usize, mut f: impl FnMut(u32)) -> Option<()> {
        if from >= to {
            return Some(());
        }
        let start = if from == 0 { 0 } else { self.pends.u32((from - 1) * 4)? as usize };
        let end = self.pends.u32((to - 1) * 4)? as usize;
        for k in start..end {
            f(self.offers.u32(k * 4)?);
        }
        Some(())
    }
}

/// One attribute's column, read in place.
#[derive(Clone, Copy)]
pub(crate) struct Column<'a> {
    pub spelling: &'a str,
    n: usize,
    tags: &'a [u8],
    payload: Bytes<'a>,
    strings: StrTable<'a>,
    list_ends: Bytes<'a>,
    list_items: Bytes<'a>,
    nlists: usize,
    pub nums: Bytes<'a>,
    pub num_offers: Bytes<'a>,
    pub nnums: usize,
    pub strs: Postings<'a>,
    pub elems: Postings<'a>,
}

impl<'a> Column<'a> {
    /// Reads a column blob of `n` offers; None when it does not hold together.
    pub fn read(spelling: &'a str, blob: &'a [u8], n: usize) -> Option<Column<'a>> {
        let b = Bytes(blob);
        if b.u32(0)? as usize != n {
            return None;
        }
        let tags = b.slice(4, n)?;
        let payload_at = (4 + n).div_ceil(8) * 8;
        let payload = Bytes(b.slice(payload_at, n.checked_mul(8)?)?);
        let (strings, at) = StrTable::read(b, payload_at + n * 8)?;
        let nlists = b.u32(at)? as usize;
        let list_ends = Bytes(b.slice(at + 4, nlists.checked_mul(4)?)?);
        let nitems = if nlists == 0 { 0 } else { list_ends.u32((nlists - 1) * 4)? as usize };
        let list_items = Bytes(b.slice(at + 4 + nlists * 4, nitems.checked_mul(12)?)?);
        let at = at + 4 + nlists * 4 + nitems * 12;
        let nnums = b.u32(at)? as usize;
        let nums = Bytes(b.slice(at + 4, nnums.checked_mul(8)?)?);
        let num_offers = Bytes(b.slice(at + 4 + nnums * 8, nnums * 4)?);
        let (strs, at) = Postings::read(b, at + 4 + nnums * 12)?;
        let (elems, _) = Postings::read(b, at)?;
        Some(Column {
            spelling,
            n,
            tags,
            payload,
            strings,
            list_ends,
            list_items,
            nlists,
            nums,
            num_offers,
            nnums,
            strs,
            elems,
        })
    }

    /// The number at sorted rank `i`.
    pub fn num(&self, i: usize) -> Option<f64> {
        Some(f64::from_bits(self.nums.u64(i * 8)?))
    }

    fn scalar(&self, t: u8, p: u64) -> Option<Value> {
        Some(match t {
            tag::UNDEFINED => Value::Undefined,
            tag::ERROR => Value::Error,
            tag::FALSE => Value::Bool(false),
            tag::TRUE => Value::Bool(true),
            tag::INT => Value::Int(p as i64),
            tag::REAL => Value::Real(f64::from_bits(p)),
            tag::STR => Value::Str(self.strings.get(usize::try_from(p).ok()?)?.into()),
            tag::LIST => {
                let l = usize::try_from(p).ok()?;
                if l >= self.nlists {
                    return None;
                }
                let start = if l == 0 { 0 } else { self.list_ends.u32((l - 1) * 4)? as usize };
                let end = self.list_ends.u32(l * 4)? as usize;
                let mut items = Vec::with_capacity(end.saturating_sub(start));
                for k in start..end {
                    let t = self.list_items.u32(k * 12)? as u8;
                    let p = self.list_items.u64(k * 12 + 4)?;
                    if t == tag::LIST {
                        return None;
                    }
                    items.push(self.scalar(t, p)?);
                }
                Value::List(items.into())
            }
            _ => return None,
        })
    }

    /// Offer `i`'s value: Ok(None) when absent, Err(()) when the column is corrupt.
    pub fn value(&self, i: usize) -> Result<Option<Value>, ()> {
        if i >= self.n {
            return Err(());
        }
        match self.tags[i] {
            tag::ABSENT => Ok(None),
            t => self.scalar(t, self.payload.u64(i * 8).ok_or(())?).map(Some).ok_or(()),
        }
    }
}
