//! SLURM's GRES text, read one way: what slurm.conf's `Gres=`, a job's
//! `tres_per_node`, `scontrol -d show node -o` (`Gres=`, `GresUsed=`) and
//! `scontrol show job -d` (`GRES=gpu:a100:2(IDX:0-1)`, `gres_detail_str`)
//! print, and the index lists slurmd hands a job (`SLURM_JOB_GPUS=0-1,3`).
//! The SLURM plugins, the GLUE provider and cderd all read these texts
//! through this module, so `gpu:4K` is 4096 devices to each of them, as it
//! is to SLURM.
//!
//! ```
//! use cder_request::gres::{self, Detail};
//! let items = gres::parse_list("gpu:a100:2(IDX:0-1),gpu:4K,shard").unwrap();
//! assert_eq!((items[0].name.as_str(), items[0].gres_type.as_deref(), items[0].count), ("gpu", Some("a100"), 2));
//! assert_eq!(items[0].detail, Some(Detail::Indices(vec![0, 1])));
//! assert_eq!(items[1].count, 4096);
//! assert_eq!(items[2].count, 1);
//! assert_eq!(gres::parse_index_list("0-1,3").unwrap(), [0, 1, 3]);
//! let e = gres::parse_list("gpu:tesla:2x").unwrap_err();
//! assert_eq!(e.to_string(), "column 11: \"2x\": not a count (digits, then at most one of SLURM's suffixes k, m, g, t, p, kb … pib)");
//! ```

/// Why a GRES text is refused: the 1-based column (in bytes, within the
/// text the function was given) where the offending token starts, the
/// token, and what is wrong with it. Callers add the file, line or key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {token:?}: {why}")]
pub struct GresError {
    /// 1-based byte column of the token in the text given.
    pub column: usize,
    /// The token at fault.
    pub token: String,
    /// What is wrong with it.
    pub why: String,
}

impl GresError {
    fn new(column0: usize, token: &str, why: impl Into<String>) -> GresError {
        GresError { column: column0 + 1, token: token.to_string(), why: why.into() }
    }

    /// The same error for a token found at byte `offset` of a larger text.
    fn shifted(mut self, offset: usize) -> GresError {
        self.column += offset;
        self
    }
}

/// The most indices one index list may name in all: more than any node has
/// devices, with room for lists that repeat themselves; a list such as
/// `0-4294967295` is refused rather than expanded.
pub const MAX_INDICES: usize = 1 << 16;

/// The widest one range of an index list may be (`a-b` with `b - a` at
/// most this), as slurmd's bitmaps of one node's devices are never wider.
pub const MAX_INDEX_RANGE: u32 = 4096;

/// SLURM's multiplier for a count's suffix, as its `suffix_mult` reads it
/// (case-insensitive): none is 1; `k`/`kib` 1024, `kb` 1000, and the same
/// for `m`, `g`, `t`, `p`. `None` for any other suffix.
pub fn suffix_mult(suffix: &str) -> Option<u64> {
    let s = suffix.to_ascii_lowercase();
    let (power, binary) = match s.as_str() {
        "" => return Some(1),
        "k" | "kib" => (1, true),
        "kb" => (1, false),
        "m" | "mib" => (2, true),
        "mb" => (2, false),
        "g" | "gib" => (3, true),
        "gb" => (3, false),
        "t" | "tib" => (4, true),
        "tb" => (4, false),
        "p" | "pib" => (5, true),
        "pb" => (5, false),
        _ => return None,
    };
    Some(if binary { 1024u64 } else { 1000u64 }.pow(power))
}

/// A count as SLURM writes it: digits, then at most one suffix
/// ([`suffix_mult`]): `2`, `4K` (4096), `1kb` (1000). Past `u64` (SLURM's
/// `NO_VAL64` and above) is refused, never wrapped.
pub fn parse_count(token: &str) -> Result<u64, GresError> {
    let bad = |why: &str| GresError::new(0, token, why);
    let digits_end = token.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(token.len());
    let not_count = "not a count (digits, then at most one of SLURM's suffixes k, m, g, t, p, kb … pib)";
    if digits_end == 0 {
        return Err(bad(not_count));
    }
    let mult = suffix_mult(&token[digits_end..]).ok_or_else(|| bad(not_count))?;
    let n: u64 = token[..digits_end].parse().map_err(|_| bad("count past 2^64"))?;
    n.checked_mul(mult).filter(|&c| c != u64::MAX).ok_or_else(|| bad("count past 2^64"))
}

/// True when `token` reads as a count ([`parse_count`]): how SLURM tells
/// `gpu:2` (a count) from `gpu:tesla` and `gpu:1g.10gb` (types).
fn is_count(token: &str) -> bool {
    parse_count(token).is_ok()
}

/// What SLURM prints in parentheses after a GRES item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detail {
    /// `(IDX:0-1,3)`: the device positions (gres.conf order) held, sorted.
    Indices(Vec<u32>),
    /// `(IDX:N/A)`: none of that type held.
    NoIndices,
    /// `(CNT:4)`: a count without device positions.
    Count(u64),
    /// `(S:0-1)`: the sockets the devices are bound to, as printed.
    Sockets(String),
    /// Anything else (a shared GRES's `(0/2,1/2)`), as printed.
    Other(String),
}

/// One GRES item: `gpu:a100:2(IDX:0-1)` is name `gpu`, type `a100`, count
/// 2 and the positions 0 and 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresItem {
    /// The GRES name (`gpu`, `shard`, `fpga`).
    pub name: String,
    /// The GRES type (`a100`, `1g.10gb`), when given.
    pub gres_type: Option<String>,
    /// How many (1 when not written).
    pub count: u64,
    /// What followed in parentheses, if anything.
    pub detail: Option<Detail>,
}

/// The pieces of `text` between the commas outside `open`…`close` pairs,
/// each with its byte offset: the one splitter of SLURM's lists (GRES items
/// around `(IDX:0,2)`, host names around `[1-3,7]`). Pairs nest at most
/// `max_depth` deep; an unbalanced or deeper pair is an error at its column.
pub fn split_top_level(text: &str, open: char, close: char, max_depth: usize) -> Result<Vec<(usize, &str)>, GresError> {
    let mut parts = Vec::new();
    let (mut depth, mut start, mut opened_at) = (0usize, 0, 0);
    for (i, c) in text.char_indices() {
        if c == open {
            if depth == max_depth {
                return Err(GresError::new(i, &text[i..], format!("{open}{close} nested deeper than {max_depth}")));
            }
            if depth == 0 {
                opened_at = i;
            }
            depth += 1;
        } else if c == close {
            depth = depth
                .checked_sub(1)
                .ok_or_else(|| GresError::new(i, &text[i..], format!("{close} without its {open}")))?;
        } else if c == ',' && depth == 0 {
            parts.push((start, &text[start..i]));
            start = i + 1;
        }
    }
    if depth != 0 {
        return Err(GresError::new(opened_at, &text[opened_at..], format!("{open} never closed")));
    }
    parts.push((start, &text[start..]));
    Ok(parts)
}

/// A GRES list (`gpu:tesla:2(S:0-1),fpga:1`, `gpu:1(IDX:0,2)`): the items
/// between commas outside parentheses. Empty text and SLURM's `(null)` are
/// no items.
pub fn parse_list(text: &str) -> Result<Vec<GresItem>, GresError> {
    if text.is_empty() || text == "(null)" {
        return Ok(Vec::new());
    }
    split_top_level(text, '(', ')', 1)?
        .into_iter()
        .map(|(at, item)| parse_item(item).map_err(|e| e.shifted(at)))
        .collect()
}

/// One GRES item, `name[:type][:count][(detail)]`. As SLURM's TRES parser
/// reads it, the last part after a `:` is the count when it reads as one
/// ([`parse_count`]) and otherwise a type of count 1 (`gpu:tesla`,
/// `gpu:1g.10gb`); a third part must be a count.
pub fn parse_item(item: &str) -> Result<GresItem, GresError> {
    let (head, detail) = match item.find('(') {
        None => (item, None),
        Some(open) => {
            let inner = item[open + 1..]
                .strip_suffix(')')
                .ok_or_else(|| GresError::new(open, &item[open..], "text after the closing )"))?;
            (&item[..open], Some(parse_detail(inner).map_err(|e| e.shifted(open + 1))?))
        }
    };
    let parts: Vec<&str> = head.split(':').collect();
    let offset = |k: usize| parts[..k].iter().map(|p| p.len() + 1).sum::<usize>();
    let name = parts[0];
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)) {
        return Err(GresError::new(0, head, "not a GRES name (letters, digits, _ - .)"));
    }
    let word = |k: usize| {
        let p = parts[k];
        if p.is_empty() || p.bytes().any(|b| b.is_ascii_whitespace() || b"=,()[]".contains(&b)) {
            Err(GresError::new(offset(k), p, "not a GRES type or count"))
        } else {
            Ok(p)
        }
    };
    let count_at = |k: usize| parse_count(word(k)?).map_err(|e| e.shifted(offset(k)));
    let (gres_type, count) = match parts.len() {
        1 => (None, 1),
        2 if is_count(parts[1]) => (None, count_at(1)?),
        2 => (Some(word(1)?), 1),
        3 => (Some(word(1)?), count_at(2)?),
        _ => return Err(GresError::new(offset(3), parts[3], "a GRES item is name[:type][:count]")),
    };
    Ok(GresItem { name: name.to_string(), gres_type: gres_type.map(str::to_string), count, detail })
}

fn parse_detail(inner: &str) -> Result<Detail, GresError> {
    if let Some(list) = inner.strip_prefix("IDX:") {
        if list == "N/A" {
            return Ok(Detail::NoIndices);
        }
        return parse_index_list(list).map(Detail::Indices).map_err(|e| e.shifted(4));
    }
    if let Some(n) = inner.strip_prefix("CNT:") {
        return parse_count(n).map(Detail::Count).map_err(|e| e.shifted(4));
    }
    if let Some(sockets) = inner.strip_prefix("S:") {
        return Ok(Detail::Sockets(sockets.to_string()));
    }
    Ok(Detail::Other(inner.to_string()))
}

/// An index list (`0-1,3`, `2,0`): every index named, sorted, without
/// duplicates; empty text is none. A range runs forwards and spans at most
/// [`MAX_INDEX_RANGE`]; at most [`MAX_INDICES`] indices in all. A malformed
/// list is an error, never "no devices".
pub fn parse_index_list(text: &str) -> Result<Vec<u32>, GresError> {
    let mut out = Vec::new();
    if text.trim().is_empty() {
        return Ok(out);
    }
    let mut at = 0;
    for item in text.split(',') {
        let (a, b) = item.split_once('-').unwrap_or((item, item));
        let index =
            |s: &str| s.trim().parse::<u32>().map_err(|_| GresError::new(at, item, "not an index or a range like 0-3"));
        let (a, b) = (index(a)?, index(b)?);
        if b < a {
            return Err(GresError::new(at, item, "range runs backwards"));
        }
        if b - a > MAX_INDEX_RANGE {
            return Err(GresError::new(at, item, format!("range wider than {MAX_INDEX_RANGE}")));
        }
        if out.len() + (b - a) as usize >= MAX_INDICES {
            return Err(GresError::new(at, item, format!("more than {MAX_INDICES} indices")));
        }
        out.extend(a..=b);
        at += item.len() + 1;
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// One GRES entry of a TRES list, as [`tres_entries`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TresEntry<'a> {
    /// 1-based byte column of the entry in the list.
    pub column: usize,
    /// The GRES name as written, up to its first `:` or `=`: what a
    /// malformed entry still names.
    pub name: &'a str,
    /// The entry read as a GRES item.
    pub item: Result<GresItem, GresError>,
}

/// The GRES entries of a TRES list (`tres_per_node`, `tres_per_task`,
/// `CfgTRES=`): `gres:gpu:2` (up to 22.05), `gres/gpu:tesla:2` (23.02 on),
/// `gres/gpu=1` and `gres/gpu:a100=2` (24.05 on); entries separated by `,`
/// or `;`. Entries that are not GRES (`cpu=2`, `mem=1M`) are left out. Each
/// entry carries its own result, so a caller decides what a malformed one
/// means to it.
pub fn tres_entries(text: &str) -> Vec<TresEntry<'_>> {
    let mut out = Vec::new();
    let mut at = 0;
    for raw in text.split([',', ';']) {
        let lead = raw.len() - raw.trim_start().len();
        let entry = raw.trim();
        let column = at + lead;
        at += raw.len() + 1;
        let Some(body) = strip_gres_prefix(entry) else { continue };
        let skip = entry.len() - body.len();
        let name = &body[..body.find([':', '=']).unwrap_or(body.len())];
        let item = match body.rsplit_once('=') {
            Some((spec, count)) => tres_count_form(spec, count),
            None => parse_item(body),
        };
        out.push(TresEntry { column: column + 1, name, item: item.map_err(|e| e.shifted(column + skip)) });
    }
    out
}

/// `name[:type]=count`, the form 24.05 and later write: the count after
/// `=` must be one, and the part before it holds no count of its own.
fn tres_count_form(spec: &str, count: &str) -> Result<GresItem, GresError> {
    let n = parse_count(count).map_err(|e| e.shifted(spec.len() + 1))?;
    let (name, gres_type) = match spec.split_once(':') {
        None => (spec, None),
        Some((name, t)) => (name, Some(t)),
    };
    let mut item = parse_item(name)?;
    if item.detail.is_some() {
        return Err(GresError::new(0, spec, "a TRES entry is gres/name[:type]=count"));
    }
    if let Some(t) = gres_type {
        if t.is_empty() || t.bytes().any(|b| b.is_ascii_whitespace() || b"=,()[]:".contains(&b)) {
            return Err(GresError::new(name.len() + 1, t, "not a GRES type"));
        }
    }
    item.gres_type = gres_type.map(str::to_string);
    item.count = n;
    Ok(item)
}

/// The GRES part of a TRES name: `gres/gpu…` or `gres:gpu…` (SLURM compares
/// the `gres` case-insensitively).
pub fn strip_gres_prefix(entry: &str) -> Option<&str> {
    let (head, rest) = (entry.get(..5)?, &entry[5..]);
    (head.eq_ignore_ascii_case("gres/") || head.eq_ignore_ascii_case("gres:")).then_some(rest)
}

/// One line of `scontrol -o show …`: `Key=value` fields separated by
/// blanks, in the order printed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScontrolLine<'a> {
    /// (key, value, 1-based byte column of the key).
    pub fields: Vec<(&'a str, &'a str, usize)>,
}

impl<'a> ScontrolLine<'a> {
    /// Splits one line. A word starts a field when it begins with
    /// `Key=` (a key of letters, digits, `_`, `/`, `:`); any other word
    /// continues the value before it, so `OS=Linux 6.1.0 #1 SMP` and
    /// `Reason=Not responding [root@…]` keep their blanks. Values are
    /// slices of `line`.
    pub fn parse(line: &'a str) -> ScontrolLine<'a> {
        let mut fields: Vec<(&'a str, &'a str, usize)> = Vec::new();
        let mut value_start = 0;
        let mut pos = 0;
        for word in line.split_ascii_whitespace() {
            // The word starts after the blanks that follow the last one.
            let rest = &line[pos..];
            let start = pos + rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_whitespace()).len();
            let end = start + word.len();
            pos = end;
            match word.split_once('=') {
                Some((key, _))
                    if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b"_/:".contains(&b)) =>
                {
                    fields.push((key, &line[start + key.len() + 1..end], start + 1));
                    value_start = start + key.len() + 1;
                }
                _ => {
                    if let Some(last) = fields.last_mut() {
                        last.1 = &line[value_start..end];
                    }
                }
            }
        }
        ScontrolLine { fields }
    }

    /// The value of `key`'s first field: scontrol prints the facts before
    /// the free texts (`Reason=`, `Comment=`), so a free text that spells
    /// `State=IDLE` cannot replace the node's own.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.fields.iter().find(|(k, _, _)| *k == key).map(|(_, v, _)| *v)
    }

    /// The 1-based column of `key`'s first field, for messages.
    pub fn column(&self, key: &str) -> Option<usize> {
        self.fields.iter().find(|(k, _, _)| *k == key).map(|(_, _, c)| *c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(s: &str) -> (String, Option<String>, u64) {
        let i = parse_item(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        (i.name, i.gres_type, i.count)
    }

    #[test]
    fn counts_take_slurms_suffixes() {
        assert_eq!(parse_count("4K"), Ok(4096));
        assert_eq!(parse_count("4k"), Ok(4096));
        assert_eq!(parse_count("2KiB"), Ok(2048));
        assert_eq!(parse_count("1kb"), Ok(1000));
        assert_eq!(parse_count("3M"), Ok(3 << 20));
        assert_eq!(parse_count("1G"), Ok(1 << 30));
        assert_eq!(parse_count("1T"), Ok(1 << 40));
        assert_eq!(parse_count("1p"), Ok(1 << 50));
        assert_eq!(parse_count("2pb"), Ok(2_000_000_000_000_000));
        assert_eq!(parse_count("0"), Ok(0));
        for bad in ["", "K", "4x", "4KK", "-1", " 4", "4 ", "18446744073709551616", "16384P", "18446744073709551615"] {
            assert!(parse_count(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn items_name_type_count_as_slurm_reads_them() {
        assert_eq!(item("gpu"), ("gpu".into(), None, 1));
        assert_eq!(item("gpu:2"), ("gpu".into(), None, 2));
        assert_eq!(item("gpu:tesla"), ("gpu".into(), Some("tesla".into()), 1));
        // A type that starts with a digit is still a type when it is no count.
        assert_eq!(item("gpu:1g.10gb"), ("gpu".into(), Some("1g.10gb".into()), 1));
        assert_eq!(item("gpu:1g.10gb:4"), ("gpu".into(), Some("1g.10gb".into()), 4));
        assert_eq!(item("gpu:4K"), ("gpu".into(), None, 4096));
        assert_eq!(item("mps:a100:1G"), ("mps".into(), Some("a100".into()), 1 << 30));
        for bad in [":2", "", "gpu:", "gpu::2", "gpu:a:b", "gpu:a:b:2", "g pu:2", "gpu:2(IDX:0", "gpu(IDX:0)x"] {
            assert!(parse_item(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn lists_and_details() {
        let l = parse_list("gpu:a100:2(IDX:0-1),gpu:v100:1(IDX:N/A),gpu:2(IDX:0,2-3),mps:100(CNT:100)").unwrap();
        assert_eq!(l.len(), 4);
        assert_eq!(l[0].detail, Some(Detail::Indices(vec![0, 1])));
        assert_eq!(l[1].detail, Some(Detail::NoIndices));
        assert_eq!(l[2].detail, Some(Detail::Indices(vec![0, 2, 3])));
        assert_eq!(l[3].detail, Some(Detail::Count(100)));
        let s = parse_list("gpu:tesla:2(S:0-1),fpga:1").unwrap();
        assert_eq!(s[0].detail, Some(Detail::Sockets("0-1".into())));
        assert_eq!(s[1].count, 1);
        assert!(parse_list("(null)").unwrap().is_empty());
        assert!(parse_list("").unwrap().is_empty());
        assert_eq!(parse_list("shard:0(0/2,0/2)").unwrap()[0].detail, Some(Detail::Other("0/2,0/2".into())));
    }

    #[test]
    fn errors_name_the_column_and_token() {
        let e = parse_list("gpu:1(IDX:0),gpu:tesla:x").unwrap_err();
        assert_eq!((e.column, e.token.as_str()), (24, "x"), "{e}");
        let e = parse_list("gpu:2(IDX:0-x)").unwrap_err();
        assert_eq!((e.column, e.token.as_str()), (11, "0-x"), "{e}");
        let e = parse_list("gpu:2)(,fpga").unwrap_err();
        assert_eq!(e.column, 6, "{e}");
        let e = parse_list("gpu:2((IDX:0))").unwrap_err();
        assert!(e.why.contains("nested"), "{e}");
        let e = parse_list("gpu:2(IDX:0").unwrap_err();
        assert_eq!((e.column, e.why.as_str()), (6, "( never closed"), "{e}");
    }

    #[test]
    fn index_lists() {
        assert_eq!(parse_index_list("2,0,3").unwrap(), [0, 2, 3]);
        assert_eq!(parse_index_list("1-3").unwrap(), [1, 2, 3]);
        assert_eq!(parse_index_list("0-1,1").unwrap(), [0, 1]);
        assert_eq!(parse_index_list("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_index_list("0-4096").unwrap().len(), 4097);
        for bad in ["0,x", "3-1", "0-4097", "1,,2", "-1", "0-", "N/A"] {
            assert!(parse_index_list(bad).is_err(), "{bad:?}");
        }
        let many = vec!["0-4096"; 16].join(",");
        assert!(parse_index_list(&many).unwrap_err().why.contains("more than 65536"));
        assert_eq!(parse_index_list("1,0-x").unwrap_err().column, 3);
    }

    #[test]
    fn tres_forms_of_every_release() {
        let got = |t: &str| -> Vec<(String, Option<String>, u64)> {
            tres_entries(t)
                .into_iter()
                .map(|e| {
                    let i = e.item.unwrap_or_else(|err| panic!("{t}: {err}"));
                    (i.name, i.gres_type, i.count)
                })
                .collect()
        };
        assert_eq!(
            got("gres:gpu:tesla:2,gres/fpga,cpu=2"),
            [("gpu".into(), Some("tesla".into()), 2), ("fpga".into(), None, 1)]
        );
        assert_eq!(got("cpu=2,gres/gpu=1"), [("gpu".into(), None, 1)]);
        assert_eq!(got("gres/gpu:a100=2;mem=1M"), [("gpu".into(), Some("a100".into()), 2)]);
        assert_eq!(got("cpu=1,mem=1M,billing=1,gres/gpu=4K"), [("gpu".into(), None, 4096)]);
        assert_eq!(got("GRES/gpu:0"), [("gpu".into(), None, 0)]);
        assert!(got("").is_empty());
        let bad = tres_entries("cpu=1,gres/gpu=x");
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].name, "gpu");
        assert_eq!(bad[0].column, 7);
        assert_eq!(bad[0].item.as_ref().unwrap_err().column, 16);
        assert!(tres_entries("gres/gpu:a:b=2")[0].item.is_err());
        assert!(tres_entries("gres/gpu(IDX:0)=2")[0].item.is_err());
    }

    #[test]
    fn the_splitter_is_the_hostlists_too() {
        let parts: Vec<&str> = split_top_level("a[1,2],b", '[', ']', 1).unwrap().into_iter().map(|p| p.1).collect();
        assert_eq!(parts, ["a[1,2]", "b"]);
        assert_eq!(split_top_level("a,b", '(', ')', 1).unwrap(), [(0, "a"), (2, "b")]);
        assert!(split_top_level("a]", '[', ']', 1).is_err());
    }

    #[test]
    fn scontrol_lines_keep_blanks_in_free_text_and_the_first_key_wins() {
        let line = "NodeName=n1 Gres=gpu:4 OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01) State=IDLE CfgTRES=cpu=1,gres/gpu=4 AllocTRES= Reason=maint State=DOWN [root@2024-01-01T00:00:00]";
        let l = ScontrolLine::parse(line);
        assert_eq!(l.get("NodeName"), Some("n1"));
        assert_eq!(l.get("OS"), Some("Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)"));
        assert_eq!(l.get("State"), Some("IDLE"));
        assert_eq!(l.get("CfgTRES"), Some("cpu=1,gres/gpu=4"));
        assert_eq!(l.get("AllocTRES"), Some(""));
        assert_eq!(l.get("Reason"), Some("maint"));
        assert_eq!(l.column("Gres"), Some(13));
        assert_eq!(l.get("Missing"), None);
        let r = ScontrolLine::parse("JobId=7 JobName=two words Comment=a  b");
        assert_eq!(r.get("JobName"), Some("two words"));
        assert_eq!(r.get("Comment"), Some("a  b"));
        assert!(ScontrolLine::parse("").fields.is_empty());
        assert!(ScontrolLine::parse("no fields here").fields.is_empty());
    }

    /// What a real SLURM 22.05 printed in the cluster tests (`glue_slurm`,
    /// `slurm_mig`; `CDER_GRES_CAPTURE` keeps them), read as the provider and
    /// the plugins read it.
    mod slurm_22_05 {
        use super::*;

        const SHOW_NODE_D_O: &str = include_str!("../testdata/slurm-22.05/show_node_d_o.txt");
        const SHOW_JOB_D: &str = include_str!("../testdata/slurm-22.05/show_job_d.txt");
        const SHOW_JOB_D_O: &str = include_str!("../testdata/slurm-22.05/show_job_d_o.txt");

        #[test]
        fn show_node_detailed_one_line() {
            let lines: Vec<ScontrolLine> = SHOW_NODE_D_O.lines().map(ScontrolLine::parse).collect();
            assert_eq!(lines.len(), 2);
            let [node1, node2] = [&lines[0], &lines[1]];
            assert_eq!((node1.get("NodeName"), node2.get("NodeName")), (Some("node1"), Some("node2")));
            let gpus = |l: &ScontrolLine, key: &str| -> u64 {
                parse_list(l.get(key).unwrap()).unwrap().iter().filter(|i| i.name == "gpu").map(|i| i.count).sum()
            };
            assert_eq!((gpus(node1, "Gres"), gpus(node1, "GresUsed")), (4, 1));
            assert_eq!((gpus(node2, "Gres"), gpus(node2, "GresUsed")), (2, 0));
            assert_eq!(node1.get("State"), Some("MIXED"));
            assert_eq!(node2.get("State"), Some("UNKNOWN+NOT_RESPONDING"));
            assert_eq!(node1.get("OS"), Some("Linux 6.18.44-fc-v769 #1 SMP PREEMPT_DYNAMIC @0"));
            assert_eq!(node1.get("CfgTRES"), Some("cpu=8,mem=1000M,billing=8"));
            assert_eq!(node2.get("AllocTRES"), Some(""));
            assert_eq!(node1.get("GresDrain"), Some("N/A"));
            for l in &lines {
                for key in ["CPUTot", "Sockets", "CPUAlloc"] {
                    assert!(l.get(key).unwrap().parse::<u32>().is_ok(), "{key}");
                }
            }
        }

        /// MIG profiles as typed GRES (`slurm_mig`): a range of one type, and
        /// one job of two types, each with its own index list.
        #[test]
        fn show_job_detailed_of_typed_gres() {
            let of = |text: &str, key: &str| -> String {
                text.lines().find_map(|l| ScontrolLine::parse(l).get(key)).unwrap().to_string()
            };
            let range = include_str!("../testdata/slurm-22.05/show_job_d_mig_range.txt");
            let d = parse_list(&of(range, "GRES")).unwrap();
            assert_eq!((d[0].gres_type.as_deref(), d[0].count), (Some("1g.10gb"), 2));
            assert_eq!(d[0].detail, Some(Detail::Indices(vec![0, 1])));
            let two = include_str!("../testdata/slurm-22.05/show_job_d_mig_two_types.txt");
            let d = parse_list(&of(two, "GRES")).unwrap();
            let got: Vec<_> = d.iter().map(|i| (i.gres_type.as_deref(), i.count, i.detail.clone())).collect();
            assert_eq!(
                got,
                [
                    (Some("1g.10gb"), 1, Some(Detail::Indices(vec![2]))),
                    (Some("2g.20gb"), 1, Some(Detail::Indices(vec![3])))
                ]
            );
            let tres: Vec<_> = tres_entries(&of(two, "TresPerNode")).into_iter().map(|e| e.item.unwrap()).collect();
            let types: Vec<_> = tres.iter().map(|i| (i.gres_type.as_deref(), i.count)).collect();
            assert_eq!(types, [(Some("1g.10gb"), 1), (Some("2g.20gb"), 1)]);
            let job_gres = parse_list(&of(two, "JOB_GRES")).unwrap();
            assert_eq!(job_gres.iter().map(|i| i.count).sum::<u64>(), 2);
        }

        #[test]
        fn show_job_detailed_in_both_layouts() {
            for text in [SHOW_JOB_D, SHOW_JOB_D_O] {
                let fields: Vec<ScontrolLine> = text.lines().map(ScontrolLine::parse).collect();
                let get = |key: &str| fields.iter().find_map(|l| l.get(key)).unwrap_or_else(|| panic!("{key}"));
                let detail = parse_list(get("GRES")).unwrap();
                assert_eq!(detail.len(), 1);
                assert_eq!((detail[0].name.as_str(), detail[0].count), ("gpu", 1));
                assert_eq!(detail[0].detail, Some(Detail::Indices(vec![0])));
                let job_gres = parse_list(get("JOB_GRES")).unwrap();
                assert_eq!((job_gres[0].name.as_str(), job_gres[0].count, &job_gres[0].detail), ("gpu", 1, &None));
                let tres: Vec<_> = tres_entries(get("TresPerNode")).into_iter().map(|e| e.item.unwrap()).collect();
                assert_eq!((tres.len(), tres[0].name.as_str(), tres[0].count), (1, "gpu", 1));
                assert!(tres_entries(get("TRES")).is_empty(), "cpu=1,node=1,billing=1 holds no GRES");
                assert_eq!(get("NodeList"), "node1");
                assert_eq!(get("AllocNode:Sid"), "vm:6011");
            }
        }
    }
}
