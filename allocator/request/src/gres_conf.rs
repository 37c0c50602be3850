//! SLURM's gres.conf as records: what the SPANK plugin (the devices slurmd
//! lists) and cderd (the shards it offers) both read, split the one way.

/// The records of gres.conf `text`, each with the line it starts on: `#`
/// starts a comment, a trailing `\` continues a record on the next line (a
/// continuation left open at the end is no record). Each caller reads the
/// `Key=Value` words its own way.
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
}
