//! SLURM-style host lists: `wn[01-16]`, `gpu[1-3,7],login1`, `r[1-2]n[01-02]`.

/// Most hosts a list of expressions may name, all together (a typo such as
/// `[1-1000000]`, or ranges multiplied as in `r[0-99999]n[0-99999]`, should
/// be an error, not a hang or an exhausted memory).
pub const MAX_HOSTS: usize = 100_000;

/// Expands every expression and returns the host names in order.
pub fn expand_all(expressions: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for expression in expressions {
        expand_into(expression, &mut out)?;
    }
    Ok(out)
}

/// Expands one expression (commas outside brackets separate hosts).
///
/// ```
/// use cder_glue_provider::hostlist::expand;
/// assert_eq!(expand("wn[08-10],gpu1").unwrap(), ["wn08", "wn09", "wn10", "gpu1"]);
/// assert!(expand("wn[10-08]").is_err());
/// ```
pub fn expand(expression: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    expand_into(expression, &mut out)?;
    Ok(out)
}

fn expand_into(expression: &str, out: &mut Vec<String>) -> Result<(), String> {
    for part in split_top_level(expression)? {
        let part = part.trim();
        if part.is_empty() {
            return Err(format!("{expression:?} has an empty host name"));
        }
        expand_one(part, out).map_err(|m| format!("{expression:?}: {m}"))?;
    }
    Ok(())
}

fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("{s:?} has unbalanced or nested brackets"));
        }
    }
    if depth != 0 {
        return Err(format!("{s:?} has an unclosed bracket"));
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn expand_one(host: &str, out: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = host.find('[') else {
        if host.contains(']') || !host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
            return Err(format!("{host:?} is not a host name"));
        }
        // Checked per host: nested ranges multiply before any range is done.
        if out.len() >= MAX_HOSTS {
            return Err(format!("names more than {MAX_HOSTS} hosts"));
        }
        out.push(host.to_string());
        return Ok(());
    };
    let close = open + host[open..].find(']').ok_or("unclosed bracket")?;
    let (prefix, ranges, rest) = (&host[..open], &host[open + 1..close], &host[close + 1..]);
    for range in ranges.split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let width = lo.len();
        let parse = |s: &str| s.parse::<u64>().map_err(|_| format!("{range:?} is not a number or a range like 01-16"));
        let (a, b) = (parse(lo)?, parse(hi)?);
        if a > b {
            return Err(format!("range {range:?} runs backwards"));
        }
        if b - a > MAX_HOSTS as u64 {
            return Err(format!("range {range:?} names more than {MAX_HOSTS} hosts"));
        }
        for n in a..=b {
            expand_one(&format!("{prefix}{n:0width$}{rest}"), out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_ranges_with_padding() {
        assert_eq!(expand("wn[01-03]").unwrap(), vec!["wn01", "wn02", "wn03"]);
        assert_eq!(expand("gpu[8-10,15],login1").unwrap(), vec!["gpu8", "gpu9", "gpu10", "gpu15", "login1"]);
        assert_eq!(expand("r[1-2]n[01-02]").unwrap(), vec!["r1n01", "r1n02", "r2n01", "r2n02"]);
        assert_eq!(expand("node-7.example.org").unwrap(), vec!["node-7.example.org"]);
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["wn[01-", "wn]", "wn[a-b]", "wn[5-1]", "wn[[1]]", "a,,b", "two words", "wn[1-9999999]"] {
            assert!(expand(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn host_count_is_bounded_over_nested_ranges_and_lists() {
        // Found by fuzzing (glue_config): 10^10 hosts from 21 bytes ran out of memory.
        let e = expand("r[0-99999]n[0-99999]").unwrap_err();
        assert!(e.contains("names more than 100000 hosts"), "{e}");
        assert_eq!(expand("r[1-100]n[001-1000]").unwrap().len(), 100_000);
        let many: Vec<String> = (0..3).map(|i| format!("h{i}x[0-49999]")).collect();
        let e = expand_all(&many).unwrap_err();
        assert!(e.starts_with("\"h2x[0-49999]\": names more than"), "{e}");
        assert_eq!(expand_all(&many[..2]).unwrap().len(), 100_000);
    }
}
