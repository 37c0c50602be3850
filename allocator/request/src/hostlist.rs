//! SLURM-style host lists: `wn[01-16]`, `gpu[1-3,7],login1`, `r[1-2]n[01-02]`,
//! and the same syntax over file names (`/dev/nvidia[0-3]`) as gres.conf uses it.
//!
//! ```
//! use cder_request::hostlist::Hostlist;
//! assert_eq!(Hostlist::HOSTS.expand("wn[08-10],gpu1").unwrap(), ["wn08", "wn09", "wn10", "gpu1"]);
//! assert!(Hostlist::HOSTS.expand("wn[10-08]").is_err());
//! assert!(Hostlist::HOSTS.expand("/dev/nvidia0").is_err());
//! assert_eq!(Hostlist::names(4).expand("/dev/nvidia[0-1]").unwrap(), ["/dev/nvidia0", "/dev/nvidia1"]);
//! ```

use std::fmt;

/// Most names a list of expressions may expand to, all together, unless a
/// caller sets a smaller bound: a typo such as `[1-1000000]`, or ranges
/// multiplied as in `r[0-99999]n[0-99999]`, is an error, not a hang or an
/// exhausted memory.
pub const MAX_HOSTS: usize = 100_000;

/// Why an expression is refused; the text names the expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostlistError(pub String);

impl fmt::Display for HostlistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HostlistError {}

impl From<HostlistError> for String {
    fn from(e: HostlistError) -> String {
        e.0
    }
}

/// How a list is expanded: its bound and what its names may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hostlist {
    /// The most names all expressions together may expand to.
    pub max_names: usize,
    /// Each name must be a host name (letters, digits, `-`, `_`, `.`);
    /// off for lists of file names.
    pub host_names_only: bool,
}

impl Hostlist {
    /// Host names, at most [`MAX_HOSTS`] of them.
    pub const HOSTS: Hostlist = Hostlist { max_names: MAX_HOSTS, host_names_only: true };

    /// Any names without brackets or commas (file names too), at most `max_names`.
    pub const fn names(max_names: usize) -> Hostlist {
        Hostlist { max_names, host_names_only: false }
    }

    /// Expands every expression and returns the names in order.
    pub fn expand_all<S: AsRef<str>>(self, expressions: &[S]) -> Result<Vec<String>, HostlistError> {
        let mut out = Vec::new();
        for expression in expressions {
            self.expand_into(expression.as_ref(), &mut out).map_err(HostlistError)?;
        }
        Ok(out)
    }

    /// Expands one expression (commas outside brackets separate names).
    pub fn expand(self, expression: &str) -> Result<Vec<String>, HostlistError> {
        let mut out = Vec::new();
        self.expand_into(expression, &mut out).map_err(HostlistError)?;
        Ok(out)
    }

    fn expand_into(self, expression: &str, out: &mut Vec<String>) -> Result<(), String> {
        for part in split_top_level(expression)? {
            let part = part.trim();
            if part.is_empty() {
                return Err(format!("{expression:?} has an empty host name"));
            }
            self.expand_one(part, out).map_err(|m| format!("{expression:?}: {m}"))?;
        }
        Ok(())
    }

    fn expand_one(self, name: &str, out: &mut Vec<String>) -> Result<(), String> {
        let max = self.max_names;
        let Some(open) = name.find('[') else {
            let host_name = |n: &str| n.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if name.contains(']') || (self.host_names_only && !host_name(name)) {
                return Err(format!("{name:?} is not a host name"));
            }
            // Checked per name: nested ranges multiply before any range is done.
            if out.len() >= max {
                return Err(format!("names more than {max} hosts"));
            }
            out.push(name.to_string());
            return Ok(());
        };
        let close = open + name[open..].find(']').ok_or("unclosed bracket")?;
        let (prefix, ranges, rest) = (&name[..open], &name[open + 1..close], &name[close + 1..]);
        for range in ranges.split(',') {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            let width = lo.len();
            let parse =
                |s: &str| s.parse::<u64>().map_err(|_| format!("{range:?} is not a number or a range like 01-16"));
            let (a, b) = (parse(lo)?, parse(hi)?);
            if a > b {
                return Err(format!("range {range:?} runs backwards"));
            }
            if b - a > max as u64 {
                return Err(format!("range {range:?} names more than {max} hosts"));
            }
            for n in a..=b {
                self.expand_one(&format!("{prefix}{n:0width$}{rest}"), out)?;
            }
        }
        Ok(())
    }
}

/// The names of a list, split by [`crate::gres::split_top_level`] (the one
/// splitter of SLURM's lists); brackets do not nest.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    crate::gres::split_top_level(s, '[', ']', 1)
        .map(|parts| parts.into_iter().map(|(_, p)| p).collect())
        .map_err(|e| format!("{s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(s: &str) -> Result<Vec<String>, HostlistError> {
        Hostlist::HOSTS.expand(s)
    }

    #[test]
    fn expands_ranges_with_padding() {
        assert_eq!(expand("wn[01-03]").unwrap(), vec!["wn01", "wn02", "wn03"]);
        assert_eq!(expand("gpu[8-10,15],login1").unwrap(), vec!["gpu8", "gpu9", "gpu10", "gpu15", "login1"]);
        assert_eq!(expand("r[1-2]n[01-02]").unwrap(), vec!["r1n01", "r1n02", "r2n01", "r2n02"]);
        assert_eq!(expand("node-7.example.org").unwrap(), vec!["node-7.example.org"]);
    }

    #[test]
    fn rejects_malformed() {
        for bad in
            ["wn[01-", "wn]", "wn[a-b]", "wn[5-1]", "wn[[1]]", "a,,b", "two words", "wn[1-9999999]", "/dev/x", ""]
        {
            assert!(expand(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn host_count_is_bounded_over_nested_ranges_and_lists() {
        // Found by fuzzing (glue_config): 10^10 hosts from 21 bytes ran out of memory.
        let e = expand("r[0-99999]n[0-99999]").unwrap_err();
        assert!(e.0.contains("names more than 100000 hosts"), "{e}");
        assert_eq!(expand("r[1-100]n[001-1000]").unwrap().len(), 100_000);
        let many: Vec<String> = (0..3).map(|i| format!("h{i}x[0-49999]")).collect();
        let e = Hostlist::HOSTS.expand_all(&many).unwrap_err();
        assert!(e.0.starts_with("\"h2x[0-49999]\": names more than"), "{e}");
        assert_eq!(Hostlist::HOSTS.expand_all(&many[..2]).unwrap().len(), 100_000);
    }

    #[test]
    fn file_lists_take_any_name_and_their_own_bound() {
        let files = Hostlist::names(4096);
        assert_eq!(files.expand("/dev/nvidia[0-2]").unwrap(), ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]);
        assert_eq!(files.expand("/d/cap[21,39],/d/x").unwrap(), ["/d/cap21", "/d/cap39", "/d/x"]);
        assert_eq!(files.expand("n[0-4095]").unwrap().len(), 4096);
        for bad in ["n[1-", "n]1", "n[3-1]", "n[a-b]", "", "a,,b", "n[0-4096]", "n[0-99999]"] {
            assert!(files.expand(bad).is_err(), "{bad}");
        }
    }
}
