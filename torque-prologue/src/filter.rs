//! The qsub submit filter (`SUBMITFILTER` in `torque.cfg`).
//!
//! qsub pipes the job script to the filter's stdin, passes its own command
//! line as the filter's arguments, and submits what the filter writes on
//! stdout; a non-zero exit stops the submission, and the filter's stderr
//! reaches the user (TORQUE Administrator Guide, appendix J, "Job
//! submission filter").
//!
//! The filter turns the grid's LRMS-independent request `GPGPUPerNode=N`
//! (the seed thesis, section 3.3.2) into the site's directive:
//!
//! * `native`: TORQUE's node spec, `#PBS -l nodes=1:ppn=P:gpus=N`, or
//!   `:gpus=N` added to each part of the job's own `nodes=` request;
//! * `maui`: the consumable-resource patch's `#PBS -W x=GRES:gpus@N`, as in
//!   the thesis, plus `#PBS -l other=cder:gpgpu:N`, the mark the prologue
//!   reads (pbs_mom never sees `-W x=`).
//!
//! `GPGPUPerNode` comes from `qsub -v`, a `#PBS -v` directive, or a
//! `#CDER GPGPUPerNode=N` line. As qsub does, only the directives before the
//! first command count, and the command line overrides the script. A script
//! without a request passes through byte for byte.

use std::fmt;
use std::ops::Range;

use crate::limits::{mark_value, node_spec_gpus, MARK_RESOURCE};
use crate::settings::{Directive, TorqueSettings};

/// The job key the filter translates.
pub const PER_NODE_KEY: &str = "GPGPUPerNode";
/// The prefix of cder's own script lines.
pub const CDER_PREFIX: &str = "#CDER";
/// qsub's directive prefix unless `-C` or `PBS_DPREFIX` says otherwise.
pub const DEFAULT_PREFIX: &str = "#PBS";

/// qsub options that take an argument (TORQUE 2.5 … 6.1 getopt string).
const OPTS_WITH_ARG: &str = "aAbcCdDeFjJkKlLmMNoPpqrStTuvwW";

/// Why a submission is refused; shown to the user by qsub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection(pub String);

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The filtered script and what the filter decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filtered {
    pub script: Vec<u8>,
    /// The device count per node the job asks for (`None`: no request).
    pub per_node: Option<u32>,
    /// Warnings for the user (directives qsub will not read …).
    pub notes: Vec<String>,
}

/// Where a value came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    CommandLine,
    Line(usize),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::CommandLine => f.write_str("qsub command line"),
            Origin::Line(n) => write!(f, "job script line {n}"),
        }
    }
}

/// One word of a directive line, with its place in the line.
#[derive(Debug, Clone)]
struct Token {
    text: String,
    span: Range<usize>,
    quote: Option<char>,
}

/// One option of a directive line or the command line.
#[derive(Debug, Clone)]
struct Opt {
    letter: char,
    value: String,
    /// The token holding the value, and whether the letter is attached (`-lnodes=1`).
    token: usize,
    attached: bool,
}

/// A `#PBS` line of the header.
#[derive(Debug, Clone)]
struct DirectiveLine {
    line: usize,
    tokens: Vec<Token>,
    opts: Vec<Opt>,
}

/// Splits a directive's text into words: blanks separate, single and double
/// quotes group, and a word starting with `#` begins a trailing comment.
/// `base` is the text's offset in its line, so spans index the line.
fn tokenize(text: &str, base: usize) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if c == '#' {
            break;
        }
        let mut word = String::new();
        let mut quote: Option<char> = None;
        let mut end = start;
        while let Some(&(i, c)) = chars.peek() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => word.push(c),
                None if c.is_whitespace() => break,
                None if c == '"' || c == '\'' => quote = Some(c),
                None => word.push(c),
            }
            chars.next();
            end = i + c.len_utf8();
        }
        let first = text[start..].chars().next().filter(|c| *c == '"' || *c == '\'');
        tokens.push(Token { text: word, span: base + start..base + end, quote: first });
    }
    tokens
}

/// Reads options from `tokens` as qsub's getopt would.
fn options(tokens: &[Token]) -> Result<Vec<Opt>, String> {
    let mut opts = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i].text;
        let mut chars = t.chars();
        if chars.next() != Some('-') || t.len() < 2 || t == "--" {
            // An operand (the script name on the command line): qsub stops
            // reading options at the first one.
            break;
        }
        let letter = chars.next().unwrap_or('-');
        if OPTS_WITH_ARG.contains(letter) {
            let rest: String = chars.collect();
            if !rest.is_empty() {
                opts.push(Opt { letter, value: rest, token: i, attached: true });
            } else if let Some(next) = tokens.get(i + 1) {
                opts.push(Opt { letter, value: next.text.clone(), token: i + 1, attached: false });
                i += 1;
            } else {
                return Err(format!("option -{letter} needs a value"));
            }
        } else {
            opts.push(Opt { letter, value: String::new(), token: i, attached: false });
        }
        i += 1;
    }
    Ok(opts)
}

/// `name=value` pairs of a `-l` or `-W` list.
fn pairs(list: &str) -> Vec<(String, String)> {
    list.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
            None => (p.trim().to_string(), String::new()),
        })
        .collect()
}

fn join_pairs(pairs: &[(String, String)]) -> String {
    pairs.iter().map(|(k, v)| if v.is_empty() { k.clone() } else { format!("{k}={v}") }).collect::<Vec<_>>().join(",")
}

/// A per-node count as the user wrote it.
fn per_node_value(text: &str, what: &str, origin: &Origin, settings: &TorqueSettings) -> Result<u32, Rejection> {
    let reject = |why: String| Rejection(format!("{origin}: {what}={text}: {why}"));
    if text.is_empty() {
        return Err(reject("no value (expected a whole number of devices per node)".into()));
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(reject("not a whole number of devices per node".into()));
    }
    let n: u32 = text.parse().map_err(|_| reject("far too large".into()))?;
    if n > settings.max_per_node {
        return Err(reject(format!("more than this site's limit of {} per node", settings.max_per_node)));
    }
    Ok(n)
}

/// Line endings and text of the script, kept byte for byte.
struct Lines<'a> {
    lines: Vec<&'a [u8]>,
}

impl<'a> Lines<'a> {
    fn split(script: &'a [u8]) -> Lines<'a> {
        let mut lines = Vec::new();
        let mut start = 0;
        for (i, b) in script.iter().enumerate() {
            if *b == b'\n' {
                lines.push(&script[start..=i]);
                start = i + 1;
            }
        }
        if start < script.len() {
            lines.push(&script[start..]);
        }
        Lines { lines }
    }
}

/// The content of a line without its ending.
fn content(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Whether qsub treats the line as executable (ending the directives):
/// anything but a blank line or a comment.
fn is_executable(text: &str) -> bool {
    let t = text.trim_start();
    !(t.is_empty() || t.starts_with('#'))
}

/// The text after `prefix` when `text` is a line in that prefix.
fn after_prefix<'t>(text: &'t str, prefix: &str) -> Option<(usize, &'t str)> {
    let lead = text.len() - text.trim_start().len();
    let rest = text[lead..].strip_prefix(prefix)?;
    if rest.is_empty() || rest.starts_with(char::is_whitespace) {
        Some((lead + prefix.len(), rest))
    } else {
        None
    }
}

/// Requotes a value the way the original word was written.
fn requote(value: &str, quote: Option<char>) -> String {
    match quote {
        Some(q) => format!("{q}{value}{q}"),
        None if value.contains(char::is_whitespace) => format!("\"{value}\""),
        None => value.to_string(),
    }
}

/// Runs the filter: `script` is qsub's stdin, `argv` its arguments
/// (without argv\[0\]), `env` the submitter's environment (for `-v NAME`
/// without a value and for `PBS_DPREFIX`).
pub fn filter(script: &[u8], argv: &[String], env: &dyn Fn(&str) -> Option<String>, settings: &TorqueSettings) -> Result<Filtered, Rejection> {
    let mut notes = Vec::new();

    // The command line.
    let cli_tokens: Vec<Token> = argv.iter().enumerate().map(|(i, a)| Token { text: a.clone(), span: i..i, quote: None }).collect();
    let cli = options(&cli_tokens).map_err(|e| Rejection(format!("qsub command line: {e}")))?;
    let prefix = cli
        .iter()
        .rev()
        .find(|o| o.letter == 'C')
        .map(|o| o.value.clone())
        .or_else(|| env("PBS_DPREFIX").filter(|p| !p.is_empty()))
        .unwrap_or_else(|| DEFAULT_PREFIX.to_string());

    let mut cli_count: Option<u32> = None;
    let mut cli_nodes: Option<String> = None;
    let mut cli_x: Option<String> = None;
    let mut cli_other: Option<String> = None;
    for o in &cli {
        match o.letter {
            'v' => {
                if let Some(n) = count_from_v(&o.value, &Origin::CommandLine, env, settings)? {
                    cli_count = Some(n);
                }
            }
            'l' => {
                for (k, v) in pairs(&o.value) {
                    match k.as_str() {
                        "nodes" => {
                            check_node_spec(&v, &Origin::CommandLine, settings)?;
                            cli_nodes = Some(v);
                        }
                        MARK_RESOURCE => cli_other = Some(v),
                        _ => {}
                    }
                }
            }
            'W' => {
                for (k, v) in pairs(&o.value) {
                    if k == "x" {
                        cli_x = Some(v);
                    }
                }
            }
            _ => {}
        }
    }

    // The script's header: directives until the first command.
    let lines = Lines::split(script);
    let mut directives: Vec<DirectiveLine> = Vec::new();
    let mut script_counts: Vec<(usize, u32)> = Vec::new();
    let mut last_directive: Option<usize> = None;
    let mut header = true;
    for (i, raw) in lines.lines.iter().enumerate() {
        let n = i + 1;
        let Ok(text) = std::str::from_utf8(content(raw)) else {
            header = false;
            continue;
        };
        if header && is_executable(text) {
            header = false;
        }
        let pbs = after_prefix(text, &prefix);
        let cder = after_prefix(text, CDER_PREFIX);
        if !header {
            let mentions = pbs.is_some_and(|(_, r)| r.contains(PER_NODE_KEY)) || cder.is_some();
            if mentions {
                notes.push(format!("job script line {n}: ignored: qsub reads no directives after the first command"));
            }
            continue;
        }
        if let Some((at, rest)) = pbs {
            let tokens = tokenize(rest, at);
            let opts = options(&tokens).map_err(|e| Rejection(format!("job script line {n}: {e}")))?;
            for o in &opts {
                match o.letter {
                    'v' => {
                        if let Some(c) = count_from_v(&o.value, &Origin::Line(n), env, settings)? {
                            script_counts.push((n, c));
                        }
                    }
                    'l' => {
                        for (k, v) in pairs(&o.value) {
                            if k == "nodes" {
                                check_node_spec(&v, &Origin::Line(n), settings)?;
                            }
                        }
                    }
                    _ => {}
                }
            }
            directives.push(DirectiveLine { line: n, tokens, opts });
            last_directive = Some(i);
        } else if let Some((_, rest)) = cder {
            for word in rest.split_whitespace() {
                let (k, v) = word.split_once('=').unwrap_or((word, ""));
                // vGPGPU keys are the hold's business (`crate::vgpgpu::hold_script`).
                if crate::vgpgpu::KEYS.contains(&k) {
                    continue;
                }
                if k != PER_NODE_KEY {
                    return Err(Rejection(format!("job script line {n}: {CDER_PREFIX} {word}: unknown key (expected {PER_NODE_KEY}=N)")));
                }
                script_counts.push((n, per_node_value(v, PER_NODE_KEY, &Origin::Line(n), settings)?));
            }
            last_directive = Some(i);
        }
    }
    if let Some(&(first_line, first)) = script_counts.first() {
        if let Some(&(line, other)) = script_counts.iter().find(|(_, c)| *c != first) {
            return Err(Rejection(format!(
                "job script line {line}: {PER_NODE_KEY}={other} contradicts {PER_NODE_KEY}={first} on line {first_line}"
            )));
        }
    }
    let per_node = cli_count.or(script_counts.first().map(|(_, c)| *c));
    let Some(n) = per_node.filter(|n| *n > 0) else {
        return Ok(Filtered { script: script.to_vec(), per_node, notes });
    };

    // Rewrites: (line index, new line text) and lines to insert.
    let mut rewrites: Vec<(usize, String)> = Vec::new();
    let mut inserts: Vec<String> = Vec::new();
    match settings.directive {
        Directive::Native => {
            if let Some(spec) = &cli_nodes {
                if node_spec_gpus(spec).unwrap_or_default().iter().any(|g| *g != Some(n)) {
                    return Err(Rejection(format!(
                        "qsub command line: -l nodes={spec} overrides the job script, so {PER_NODE_KEY}={n} cannot be added to it; ask there: -l nodes={}",
                        with_gpus(spec, n, &Origin::CommandLine)?
                    )));
                }
            } else {
                let mut found = false;
                for d in &directives {
                    let mut new_tokens: Vec<(usize, String)> = Vec::new();
                    for o in d.opts.iter().filter(|o| o.letter == 'l') {
                        let mut list = pairs(&o.value);
                        let mut changed = false;
                        for (_, v) in list.iter_mut().filter(|(k, _)| k == "nodes") {
                            found = true;
                            let new = with_gpus(v, n, &Origin::Line(d.line))?;
                            changed |= new != *v;
                            *v = new;
                        }
                        if changed {
                            new_tokens.push((o.token, option_token(o, &join_pairs(&list), &d.tokens[o.token])));
                        }
                    }
                    if !new_tokens.is_empty() {
                        rewrites.push((d.line - 1, rebuild(lines.lines[d.line - 1], &d.tokens, &new_tokens)));
                    }
                }
                if !found {
                    inserts.push(format!("{prefix} -l nodes=1:ppn={}:gpus={n}", settings.default_ppn));
                }
            }
        }
        Directive::Maui => {
            let gres = format!("GRES:{}@", settings.maui_gres);
            let want = format!("{gres}{n}");
            let check_x = |x: &str, origin: &Origin| -> Result<bool, Rejection> {
                for item in x.split(';') {
                    if let Some(m) = item.strip_prefix(&gres) {
                        if m != n.to_string() {
                            return Err(Rejection(format!("{origin}: x={x} asks for {item}, which contradicts {PER_NODE_KEY}={n}")));
                        }
                        return Ok(true);
                    }
                }
                Ok(false)
            };
            if let Some(x) = &cli_x {
                if !check_x(x, &Origin::CommandLine)? {
                    return Err(Rejection(format!(
                        "qsub command line: -W x={x} overrides the job script, so {PER_NODE_KEY}={n} cannot be added to it; ask there: -W x={x};{want}"
                    )));
                }
            } else {
                let mut found = false;
                for d in &directives {
                    let mut new_tokens: Vec<(usize, String)> = Vec::new();
                    for o in d.opts.iter().filter(|o| o.letter == 'W') {
                        let mut list = pairs(&o.value);
                        let mut changed = false;
                        for (_, v) in list.iter_mut().filter(|(k, _)| k == "x") {
                            found = true;
                            if !check_x(v, &Origin::Line(d.line))? {
                                v.push(';');
                                v.push_str(&want);
                                changed = true;
                            }
                        }
                        if changed {
                            new_tokens.push((o.token, option_token(o, &join_pairs(&list), &d.tokens[o.token])));
                        }
                    }
                    if !new_tokens.is_empty() {
                        rewrites.push((d.line - 1, rebuild(lines.lines[d.line - 1], &d.tokens, &new_tokens)));
                    }
                }
                if !found {
                    inserts.push(format!("{prefix} -W x={want}"));
                }
            }
            // The mark the prologue reads.
            let mark = mark_value(&settings.cder_type, n);
            let mut script_other: Option<(usize, String)> = None;
            for d in &directives {
                for o in d.opts.iter().filter(|o| o.letter == 'l') {
                    for (k, v) in pairs(&o.value) {
                        if k == MARK_RESOURCE {
                            script_other = Some((d.line, v));
                        }
                    }
                }
            }
            match (&cli_other, &script_other) {
                (Some(v), _) if *v != mark => {
                    return Err(Rejection(format!(
                        "qsub command line: -l {MARK_RESOURCE}={v}: cder needs {MARK_RESOURCE}={mark} to tell the node about {PER_NODE_KEY}={n}"
                    )))
                }
                (None, Some((line, v))) if *v != mark => {
                    return Err(Rejection(format!(
                        "job script line {line}: -l {MARK_RESOURCE}={v}: cder needs {MARK_RESOURCE}={mark} to tell the node about {PER_NODE_KEY}={n}"
                    )))
                }
                (None, None) => inserts.push(format!("{prefix} -l {MARK_RESOURCE}={mark}")),
                _ => {}
            }
        }
    }

    // Assemble: rewritten lines in place, new lines after the last directive.
    let crlf = lines.lines.first().is_some_and(|l| l.ends_with(b"\r\n"));
    let eol: &[u8] = if crlf { b"\r\n" } else { b"\n" };
    let insert_after = last_directive.or_else(|| lines.lines.first().filter(|l| l.starts_with(b"#!")).map(|_| 0));
    let mut out = Vec::with_capacity(script.len() + 128);
    let emit_inserts = |out: &mut Vec<u8>| {
        for line in &inserts {
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(eol);
        }
    };
    if insert_after.is_none() {
        emit_inserts(&mut out);
    }
    for (i, raw) in lines.lines.iter().enumerate() {
        match rewrites.iter().find(|(idx, _)| *idx == i) {
            Some((_, text)) => {
                out.extend_from_slice(text.as_bytes());
                out.extend_from_slice(&raw[content(raw).len()..]);
            }
            None => out.extend_from_slice(raw),
        }
        if insert_after == Some(i) {
            if !raw.ends_with(b"\n") && !inserts.is_empty() {
                out.extend_from_slice(eol);
            }
            emit_inserts(&mut out);
        }
    }
    Ok(Filtered { script: out, per_node, notes })
}

/// `GPGPUPerNode` from a `-v` list, if it is there.
fn count_from_v(list: &str, origin: &Origin, env: &dyn Fn(&str) -> Option<String>, settings: &TorqueSettings) -> Result<Option<u32>, Rejection> {
    let mut found = None;
    for item in list.split(',') {
        let (k, v) = match item.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim().to_string())),
            None => (item.trim(), None),
        };
        if k != PER_NODE_KEY {
            continue;
        }
        // `-v NAME` exports the submitter's own value of NAME.
        let Some(v) = v.or_else(|| env(PER_NODE_KEY)) else { continue };
        found = Some(per_node_value(&v, PER_NODE_KEY, origin, settings)?);
    }
    Ok(found)
}

/// Rejects a node spec whose `gpus=` is not a count.
fn check_node_spec(spec: &str, origin: &Origin, settings: &TorqueSettings) -> Result<(), Rejection> {
    for part in spec.split('+') {
        for field in part.split(':') {
            if let Some(v) = field.strip_prefix("gpus=") {
                per_node_value(v, "nodes …:gpus", origin, settings)?;
            }
        }
    }
    node_spec_gpus(spec).map(|_| ()).map_err(|e| Rejection(format!("{origin}: {e}")))
}

/// `spec` with `:gpus=n` on every part; a part asking for another count is
/// a contradiction.
fn with_gpus(spec: &str, n: u32, origin: &Origin) -> Result<String, Rejection> {
    let gpus = node_spec_gpus(spec).map_err(|e| Rejection(format!("{origin}: {e}")))?;
    let mut parts = Vec::new();
    for (part, g) in spec.split('+').zip(gpus) {
        match g {
            Some(m) if m == n => parts.push(part.to_string()),
            Some(m) => {
                return Err(Rejection(format!("{origin}: nodes={spec} asks for gpus={m}, which contradicts {PER_NODE_KEY}={n}")));
            }
            None => parts.push(format!("{part}:gpus={n}")),
        }
    }
    Ok(parts.join("+"))
}

/// The new text of the word holding option `o`'s value.
fn option_token(o: &Opt, value: &str, original: &Token) -> String {
    if o.attached {
        requote(&format!("-{}{value}", o.letter), original.quote)
    } else {
        requote(value, original.quote)
    }
}

/// The line's text with some words replaced, everything else kept.
fn rebuild(raw: &[u8], tokens: &[Token], replace: &[(usize, String)]) -> String {
    let text = String::from_utf8_lossy(content(raw)).into_owned();
    let mut out = String::new();
    let mut at = 0;
    for (i, t) in tokens.iter().enumerate() {
        if let Some((_, new)) = replace.iter().find(|(idx, _)| *idx == i) {
            out.push_str(&text[at..t.span.start]);
            out.push_str(new);
            at = t.span.end;
        }
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_keeps_spans_and_quotes() {
        let t = tokenize(r#" -l "nodes=1:ppn=2" -N 'my job' # note"#, 0);
        let texts: Vec<&str> = t.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(texts, ["-l", "nodes=1:ppn=2", "-N", "my job"]);
        assert_eq!(t[1].quote, Some('"'));
        assert_eq!(t[3].quote, Some('\''));
        assert_eq!(&r#" -l "nodes=1:ppn=2" -N 'my job' # note"#[t[1].span.clone()], "\"nodes=1:ppn=2\"");
    }

    #[test]
    fn getopt_forms() {
        let toks = tokenize("-lnodes=1 -V -l walltime=1:00:00 -I script.sh -l x", 0);
        let o = options(&toks).unwrap();
        let got: Vec<(char, &str, bool)> = o.iter().map(|o| (o.letter, o.value.as_str(), o.attached)).collect();
        assert_eq!(got, [('l', "nodes=1", true), ('V', "", false), ('l', "walltime=1:00:00", false), ('I', "", false)]);
        assert!(options(&tokenize("-N", 0)).is_err());
    }

    #[test]
    fn node_specs_gain_gpus() {
        let o = Origin::Line(1);
        assert_eq!(with_gpus("1:ppn=4", 2, &o).unwrap(), "1:ppn=4:gpus=2");
        assert_eq!(with_gpus("2:ppn=8+1:ppn=2:gpus=2", 2, &o).unwrap(), "2:ppn=8:gpus=2+1:ppn=2:gpus=2");
        assert!(with_gpus("1:ppn=4:gpus=1", 2, &o).is_err());
    }
}
