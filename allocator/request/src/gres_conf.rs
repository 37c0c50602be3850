//! SLURM's gres.conf as records: what the SPANK plugin (the devices slurmd
//! lists) and cderd (the shards it offers) both read, split the one way.
//!
//! ```
//! let recs = cder_request::gres_conf::parse("# GPUs\nNodeName=n[1-4] name=gpu Type=a100 \\\n  File=/dev/nvidia[0-3] Cores=0-7\n").unwrap();
//! assert_eq!(recs.len(), 1);
//! assert_eq!(recs[0].line, 2);
//! assert_eq!(recs[0].get("Name"), Some("gpu"));
//! assert_eq!(recs[0].get("file"), Some("/dev/nvidia[0-3]"));
//! ```

/// The records of gres.conf `text`, each with the line it starts on: `#`
/// starts a comment, a trailing `\` continues a record on the next line (a
/// continuation left open at the end is no record). [`parse`] splits each
/// into its fields.
pub fn records(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut logical = String::new();
    let mut first = 0;
    for (n, raw) in text.lines().enumerate() {
        let raw = raw.split('#').next().unwrap_or("");
        if logical.is_empty() {
            first = n + 1;
        }
        if let Some(head) = raw.trim_end().strip_suffix('\\') {
            logical.push_str(head);
            logical.push(' ');
            continue;
        }
        logical.push_str(raw);
        out.push((first, std::mem::take(&mut logical)));
    }
    out
}

/// One gres.conf record with its `Key=Value` fields in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The line it starts on (1-based).
    pub line: usize,
    /// (key, value) as written.
    pub fields: Vec<(String, String)>,
}

impl Record {
    /// The value of `key`, compared case-insensitively as slurmd's config
    /// parser does; where a record repeats a key, the last one counts.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.iter().rev().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.as_str())
    }

    /// The key as written of the last field that is one of `keys`, with its
    /// value (`File=` or its alias `Files=`).
    pub fn get_any(&self, keys: &[&str]) -> Option<(&str, &str)> {
        self.fields
            .iter()
            .rev()
            .find(|(k, _)| keys.iter().any(|w| k.eq_ignore_ascii_case(w)))
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// True when the record's `Name=` is `gres`, case-insensitively as
    /// slurmd matches gres.conf names to `GresTypes`.
    pub fn names(&self, gres: &str) -> bool {
        self.get("name").is_some_and(|n| n.eq_ignore_ascii_case(gres))
    }
}

/// A gres.conf word that is no `Key=Value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {word:?}: expected Key=Value")]
pub struct RecordError {
    /// The record's first line.
    pub line: usize,
    /// The word.
    pub word: String,
}

/// The non-empty records of gres.conf `text` with their fields; a word
/// without `=` (or with an empty key) is an error naming its line.
pub fn parse(text: &str) -> Result<Vec<Record>, RecordError> {
    let mut out = Vec::new();
    for (line, record) in records(text) {
        let mut fields = Vec::new();
        for word in record.split_whitespace() {
            match word.split_once('=') {
                Some((k, v)) if !k.is_empty() => fields.push((k.to_string(), v.to_string())),
                _ => return Err(RecordError { line, word: word.to_string() }),
            }
        }
        if !fields.is_empty() {
            out.push(Record { line, fields });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_go_and_continued_records_keep_their_first_line() {
        let text = "# gres.conf\nName=gpu File=/dev/nvidia0 # the first\nName=shard \\\n  Count=4 \\\n File=/dev/nvidia0\nName=gpu \\";
        let r = records(text);
        assert_eq!(r.len(), 3, "{r:?}");
        assert_eq!(r[0], (1, String::new()));
        assert_eq!(r[1], (2, "Name=gpu File=/dev/nvidia0 ".to_string()));
        assert_eq!(r[2].0, 3);
        assert_eq!(r[2].1.split_whitespace().collect::<Vec<_>>(), ["Name=shard", "Count=4", "File=/dev/nvidia0"]);
    }

    #[test]
    fn fields_are_case_insensitive_and_the_last_repeat_wins() {
        let recs = parse("\n# x\nNAME=GPU file=/a FILE=/b\nNodeName=n[1-2] AutoDetect=off\n").unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!((recs[0].line, recs[1].line), (3, 4));
        assert!(recs[0].names("gpu"));
        assert!(!recs[0].names("shard"));
        assert_eq!(recs[0].get("File"), Some("/b"));
        assert_eq!(recs[0].get_any(&["files", "file"]), Some(("FILE", "/b")));
        assert_eq!(recs[1].get("nodename"), Some("n[1-2]"));
        let e = parse("Name=gpu\nName=gpu bogus\n").unwrap_err();
        assert_eq!(e, RecordError { line: 2, word: "bogus".into() });
        assert_eq!(e.to_string(), "line 2: \"bogus\": expected Key=Value");
        assert!(parse("=x\n").is_err());
    }
}
