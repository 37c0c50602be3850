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
//! The mark tells the node what the scheduler counted, so the filter is its
//! only author: a mark written by hand is refused unless it repeats the
//! GRES count MAUI sees: otherwise a hand-written `other=cder:gpgpu:4` gets
//! four devices TORQUE never counted.
//!
//! `GPGPUPerNode` comes from `qsub -v`, a `#PBS -v` directive, or a
//! `#CDER GPGPUPerNode=N` line. The script is read as qsub reads it
//! (`Header::read`): as bytes, in any encoding, with directives until the
//! first executable line and `\` continuations. The command line overrides
//! the script. A script without a request passes through byte for byte.
//!
//! The work is one pass over the script plus one over its directives, so it
//! is linear in the script's size (`benches/submit_filter.rs`).

use std::fmt;
use std::ops::Range;

use cder_request::keys::GPGPU_PER_NODE;

use crate::limits::{mark_value, node_spec_gpus, MARK_PREFIX, MARK_RESOURCE};
use crate::settings::{Directive, TorqueSettings};

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
    /// The script qsub should submit.
    pub script: Vec<u8>,
    /// The device count per node the job asks for (`None`: no request).
    pub per_node: Option<u32>,
    /// Warnings for the user (directives qsub will not read …).
    pub notes: Vec<String>,
    /// Every `NAME=value` the job's variable list gets from the header's
    /// `-v` directives and `#CDER` lines, then the command line's `-v` (a
    /// later entry wins), for the vGPGPU hold ([`crate::hold::hold_script`]).
    pub variables: Vec<(String, String)>,
    /// The directive prefix qsub reads this job with (`#PBS`, `-C`,
    /// `PBS_DPREFIX`; empty when `-C ""` turned directives off).
    pub prefix: String,
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
    /// The token holding the value.
    token: usize,
    /// The option letters written in front of the value in the same word
    /// (`-l` of `-lnodes=1`, `-Vl` of `-Vlnodes=1`); `None` when the value
    /// is a word of its own.
    attached: Option<String>,
}

/// How a line's bytes became text, so that a rewritten line goes back in
/// the same encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Utf8,
    /// Anything else, read byte for byte as ISO 8859-1 (every byte is a
    /// character, so nothing is lost).
    Latin1,
}

fn decode(bytes: &[u8]) -> (String, Encoding) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_string(), Encoding::Utf8),
        Err(_) => (bytes.iter().map(|&b| char::from(b)).collect(), Encoding::Latin1),
    }
}

fn encode(text: &str, encoding: Encoding) -> Vec<u8> {
    match encoding {
        Encoding::Utf8 => text.as_bytes().to_vec(),
        // Decoded from Latin-1 plus ASCII edits: every char fits a byte.
        Encoding::Latin1 => text.chars().map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?')).collect(),
    }
}

/// A `#PBS` directive of the header: one logical line, possibly continued
/// over several physical lines with `\`.
#[derive(Debug, Clone)]
struct DirectiveLine {
    /// 1-based number of its first physical line.
    line: usize,
    /// Physical line indices (0-based) it spans.
    lines: Range<usize>,
    text: String,
    encoding: Encoding,
    tokens: Vec<Token>,
    opts: Vec<Opt>,
}

/// A `#CDER` line of the header.
#[derive(Debug, Clone)]
struct CderLine {
    line: usize,
    words: Vec<String>,
}

/// The script as qsub reads it.
struct Header<'a> {
    /// Physical lines, each with its line ending.
    lines: Vec<&'a [u8]>,
    directives: Vec<DirectiveLine>,
    cder: Vec<CderLine>,
    /// Index of the last physical line of the last directive or `#CDER` line.
    last_directive: Option<usize>,
    notes: Vec<String>,
}

/// Splits into lines, each keeping its `\n`.
fn split_lines(script: &[u8]) -> Vec<&[u8]> {
    script.split_inclusive(|&b| b == b'\n').collect()
}

/// The line without its ending (`\n` or `\r\n`).
fn content(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// C's `isspace` in the C locale, which qsub uses.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn skip_space(line: &[u8]) -> &[u8] {
    let n = line.iter().take_while(|&&b| is_c_space(b)).count();
    &line[n..]
}

/// qsub's `isexecutable()` (src/cmds/qsub_functions.c): a line starting
/// with `:` or `#!` is not; otherwise, after white space, any line that is
/// not empty and does not start with `#` is. Bytes, not characters: a
/// Latin-1 comment is a comment.
fn is_executable(line: &[u8]) -> bool {
    if line.starts_with(b":") || line.starts_with(b"#!") {
        return false;
    }
    matches!(skip_space(line).first(), Some(&b) if b != b'#')
}

/// qsub's `ispbsdir()`: after white space, the line starts with `prefix`
/// (nothing more is required of what follows). An empty prefix (`-C ""`)
/// turns directives off.
fn after_prefix<'l>(line: &'l [u8], prefix: &[u8]) -> Option<&'l [u8]> {
    if prefix.is_empty() {
        return None;
    }
    skip_space(line).strip_prefix(prefix)
}

/// `#CDER` lines are cder's own: the prefix then white space or the end.
fn after_cder_prefix(line: &[u8]) -> Option<&[u8]> {
    let rest = skip_space(line).strip_prefix(CDER_PREFIX.as_bytes())?;
    (rest.is_empty() || is_c_space(rest[0])).then_some(rest)
}

impl<'a> Header<'a> {
    /// Reads the directives as qsub's `get_script()` does: each line (CRLF
    /// read as LF) is a directive when it starts with the prefix, until the
    /// first executable line; a directive ending in `\` continues on the
    /// next line. Only the first physical line of a directive has its CR
    /// dropped, as in qsub. Linear in the script's size.
    fn read(script: &'a [u8], prefix: &str) -> Result<Header<'a>, Rejection> {
        let lines = split_lines(script);
        let mut header = Header {
            lines: Vec::new(),
            directives: Vec::new(),
            cder: Vec::new(),
            last_directive: None,
            notes: Vec::new(),
        };
        let prefix = prefix.as_bytes();
        let mut exec = false;
        let mut i = 0;
        while i < lines.len() {
            let first = content(lines[i]);
            let n = i + 1;
            if exec {
                let mentions = after_prefix(first, prefix).is_some_and(|r| contains(r, GPGPU_PER_NODE.as_bytes()))
                    || after_cder_prefix(first).is_some();
                if mentions {
                    header.notes.push(format!(
                        "job script line {n}: ignored: qsub reads no directives after the first command"
                    ));
                }
                i += 1;
                continue;
            }
            if let Some(rest) = after_prefix(first, prefix) {
                let offset = first.len() - rest.len();
                let mut logical: Vec<u8> = first.to_vec();
                let mut end = i;
                // qsub: `*(in + strlen(in) - 2) == '\\'` and a newline after it.
                let continues = |raw: &[u8], ending_ok: bool| ending_ok && raw.ends_with(b"\\");
                let mut more = continues(first, lines[i].ends_with(b"\n"));
                while more {
                    logical.pop();
                    end += 1;
                    let Some(next) = lines.get(end) else {
                        return Err(Rejection(format!(
                            "job script line {n}: the directive continues (\\) past the end of the script; qsub rejects it"
                        )));
                    };
                    // Continuation lines keep their CR, as qsub's fgets leaves it.
                    let next_content = next.strip_suffix(b"\n").unwrap_or(next);
                    logical.extend_from_slice(next_content);
                    more = continues(next_content, next.ends_with(b"\n"));
                }
                if end > i && logical.ends_with(b"\r") {
                    // The CR of the last continuation line: its ending is kept apart.
                    logical.pop();
                }
                let (text, encoding) = decode(&logical);
                // A byte offset of the original; the decoded text of a
                // Latin-1 line has wider characters.
                let offset = match encoding {
                    Encoding::Utf8 => offset,
                    Encoding::Latin1 => text.char_indices().nth(offset).map_or(text.len(), |(b, _)| b),
                };
                let tokens = tokenize(&text[offset..], offset);
                let opts = options(&tokens).map_err(|e| Rejection(format!("job script line {n}: {e}")))?;
                header.directives.push(DirectiveLine { line: n, lines: i..end + 1, text, encoding, tokens, opts });
                header.last_directive = Some(end);
                i = end + 1;
                continue;
            }
            if let Some(rest) = after_cder_prefix(first) {
                let (text, _) = decode(rest);
                header.cder.push(CderLine { line: n, words: text.split_whitespace().map(str::to_string).collect() });
                header.last_directive = Some(i);
            } else if is_executable(first) {
                exec = true;
            }
            i += 1;
        }
        header.lines = lines;
        Ok(header)
    }

    /// Every option of the directives, with the line it is on.
    fn options(&self) -> impl Iterator<Item = (&DirectiveLine, &Opt)> {
        self.directives.iter().flat_map(|d| d.opts.iter().map(move |o| (d, o)))
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
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

/// Reads options from `tokens` as qsub's (GNU) getopt does: words that
/// are not options are skipped over (getopt permutes them to the end),
/// `--` ends the options, and several letters may share one word (`-Vl x`).
fn options(tokens: &[Token]) -> Result<Vec<Opt>, String> {
    let mut opts = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i].text;
        if t == "--" {
            break;
        }
        if !t.starts_with('-') || t.len() < 2 {
            i += 1;
            continue;
        }
        let mut taken_next = false;
        for (at, letter) in t.char_indices().skip(1) {
            if !OPTS_WITH_ARG.contains(letter) {
                opts.push(Opt { letter, value: String::new(), token: i, attached: None });
                continue;
            }
            let rest = &t[at + letter.len_utf8()..];
            if !rest.is_empty() {
                opts.push(Opt {
                    letter,
                    value: rest.to_string(),
                    token: i,
                    attached: Some(t[..at + letter.len_utf8()].to_string()),
                });
            } else if let Some(next) = tokens.get(i + 1) {
                opts.push(Opt { letter, value: next.text.clone(), token: i + 1, attached: None });
                taken_next = true;
            } else {
                return Err(format!("option -{letter} needs a value"));
            }
            break;
        }
        i += if taken_next { 2 } else { 1 };
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
/// `shown` is the request as the message quotes it (`GPGPUPerNode=two`).
fn per_node_value(text: &str, shown: &str, origin: &Origin, settings: &TorqueSettings) -> Result<u32, Rejection> {
    let reject = |why: String| Rejection(format!("{origin}: {shown}: {why}"));
    if text.is_empty() {
        return Err(reject("no value (expected a whole number of devices per node)".into()));
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(reject("not a whole number of devices per node".into()));
    }
    // The one count rule every door shares (cder_request): 1 to MAX_COUNT.
    let n = cder_request::parse_count(text).map_err(|e| match e {
        cder_request::CountError::TooLarge => reject(format!("far too large ({e})")),
        other => reject(other.to_string()),
    })?;
    if n > settings.max_per_node {
        return Err(reject(format!("more than this site's limit of {} per node", settings.max_per_node)));
    }
    Ok(n)
}

/// Requotes a value the way the original word was written.
fn requote(value: &str, quote: Option<char>) -> String {
    match quote {
        Some(q) => format!("{q}{value}{q}"),
        None if value.contains(char::is_whitespace) => format!("\"{value}\""),
        None => value.to_string(),
    }
}

/// What the command line says about devices. qsub lets it override the
/// script's directives.
#[derive(Debug, Default)]
struct CommandLine {
    prefix: String,
    count: Option<u32>,
    nodes: Option<String>,
    x: Option<String>,
    other: Option<String>,
    gres: Option<String>,
    variables: Vec<(String, String)>,
}

impl CommandLine {
    fn read(
        argv: &[String],
        env: &dyn Fn(&str) -> Option<String>,
        settings: &TorqueSettings,
    ) -> Result<CommandLine, Rejection> {
        let tokens: Vec<Token> =
            argv.iter().enumerate().map(|(i, a)| Token { text: a.clone(), span: i..i, quote: None }).collect();
        let opts = options(&tokens).map_err(|e| Rejection(format!("qsub command line: {e}")))?;
        // `-C` wins over PBS_DPREFIX; an empty `-C ""` turns directives off.
        let prefix = opts
            .iter()
            .rev()
            .find(|o| o.letter == 'C')
            .map(|o| o.value.clone())
            .or_else(|| env("PBS_DPREFIX").filter(|p| !p.is_empty()))
            .unwrap_or_else(|| DEFAULT_PREFIX.to_string());
        let mut cli = CommandLine { prefix, ..CommandLine::default() };
        for o in &opts {
            match o.letter {
                'v' => {
                    variables_from_v(&o.value, env, &mut cli.variables);
                    if let Some(n) = count_from_v(&o.value, &Origin::CommandLine, env, settings)? {
                        cli.count = Some(n);
                    }
                }
                'l' => {
                    for (k, v) in pairs(&o.value) {
                        match k.as_str() {
                            "nodes" => {
                                check_node_spec(&v, &Origin::CommandLine, settings)?;
                                cli.nodes = Some(v);
                            }
                            MARK_RESOURCE => cli.other = Some(v),
                            "gres" => cli.gres = Some(v),
                            _ => {}
                        }
                    }
                }
                'W' => {
                    for (k, v) in pairs(&o.value) {
                        if k == "x" {
                            cli.x = Some(v);
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(cli)
    }
}

/// The device request of the header: `GPGPUPerNode` values by line, the
/// script's variables, and the checks every directive must pass.
struct ScriptRequest {
    counts: Vec<(usize, u32)>,
    variables: Vec<(String, String)>,
}

fn read_script_request(
    header: &Header<'_>,
    env: &dyn Fn(&str) -> Option<String>,
    settings: &TorqueSettings,
) -> Result<ScriptRequest, Rejection> {
    let mut request = ScriptRequest { counts: Vec::new(), variables: Vec::new() };
    for (d, o) in header.options() {
        let origin = Origin::Line(d.line);
        match o.letter {
            'v' => {
                variables_from_v(&o.value, env, &mut request.variables);
                if let Some(c) = count_from_v(&o.value, &origin, env, settings)? {
                    request.counts.push((d.line, c));
                }
            }
            'l' => {
                for (k, v) in pairs(&o.value) {
                    if k == "nodes" {
                        check_node_spec(&v, &origin, settings)?;
                    }
                }
            }
            _ => {}
        }
    }
    for c in &header.cder {
        for word in &c.words {
            let (k, v) = word.split_once('=').unwrap_or((word, ""));
            // vGPGPU keys are the hold's business (`crate::hold::hold_script`).
            if crate::vgpgpu::keys::KEYS.contains(&k) {
                request.variables.push((k.to_string(), v.to_string()));
                continue;
            }
            if k != GPGPU_PER_NODE {
                return Err(Rejection(format!(
                    "job script line {}: {CDER_PREFIX} {word}: unknown key (expected {GPGPU_PER_NODE}=N)",
                    c.line
                )));
            }
            request.variables.push((k.to_string(), v.to_string()));
            request
                .counts
                .push((c.line, per_node_value(v, &format!("{GPGPU_PER_NODE}={v}"), &Origin::Line(c.line), settings)?));
        }
    }
    // Directives are read in order, `#CDER` lines after: sort by line for messages.
    request.counts.sort_by_key(|(line, _)| *line);
    if let Some(&(first_line, first)) = request.counts.first() {
        if let Some(&(line, other)) = request.counts.iter().find(|(_, c)| *c != first) {
            return Err(Rejection(format!(
                "job script line {line}: {GPGPU_PER_NODE}={other} contradicts {GPGPU_PER_NODE}={first} on line {first_line}"
            )));
        }
    }
    Ok(request)
}

/// New text for some directives (by index in `Header::directives`) and new
/// lines to add after the last directive.
#[derive(Debug, Default)]
struct Edits {
    rewrites: Vec<Option<String>>,
    inserts: Vec<String>,
}

impl Edits {
    fn new(header: &Header<'_>) -> Edits {
        Edits { rewrites: vec![None; header.directives.len()], inserts: Vec::new() }
    }
}

/// Runs the filter: `script` is qsub's stdin, `argv` its arguments
/// (without argv\[0\]), `env` the submitter's environment (for `-v NAME`
/// without a value and for `PBS_DPREFIX`).
///
/// Steps: the command line (`CommandLine::read`), the script's header as
/// qsub reads it (`Header::read`), the request it makes
/// (`read_script_request`), the site's directive (`native` / `maui`), and
/// the script written back with the edits (`assemble`).
pub fn filter(
    script: &[u8],
    argv: &[String],
    env: &dyn Fn(&str) -> Option<String>,
    settings: &TorqueSettings,
) -> Result<Filtered, Rejection> {
    let cli = CommandLine::read(argv, env, settings)?;
    let header = Header::read(script, &cli.prefix)?;
    refuse_ce_refusals(&header)?;
    let request = read_script_request(&header, env, settings)?;
    let mut variables = request.variables;
    variables.extend(cli.variables.iter().cloned());
    let notes = header.notes.clone();

    let script_count = request.counts.first().map(|(_, c)| *c);
    let asked = cli.count.or(script_count);
    let (per_node, edits) = match settings.directive {
        Directive::Native => native(&header, &cli, asked, settings)?,
        Directive::Maui => maui(&header, &cli, asked, settings)?,
    };
    if cli.prefix.is_empty() && !edits.inserts.is_empty() {
        return Err(Rejection(format!(
            "qsub command line: -C \"\" turns directives off, so {GPGPU_PER_NODE} cannot be written into the job script; ask on the command line"
        )));
    }
    if edits.rewrites.iter().all(Option::is_none) && edits.inserts.is_empty() {
        return Ok(Filtered { script: script.to_vec(), per_node, notes, variables, prefix: cli.prefix });
    }
    Ok(Filtered { script: assemble(script, &header, &edits), per_node, notes, variables, prefix: cli.prefix })
}

/// A BLAH drop-in that could not honour a job's attribute writes
/// `-l cder_bad_attribute_<KEY>=1` (BLAH ignores its exit status): the job
/// is refused here, naming the attribute, whatever TORQUE would make of an
/// unknown resource.
fn refuse_ce_refusals(header: &Header<'_>) -> Result<(), Rejection> {
    for (d, o) in header.options().filter(|(_, o)| o.letter == 'l') {
        for (k, _) in pairs(&o.value) {
            if let Some(key) = k.strip_prefix(cder_request::lrms::PBS_REFUSAL_PREFIX) {
                return Err(Rejection(format!(
                    "job script line {}: the CE could not honour the job's {key} (its BLAH drop-in wrote -l {k}); see the CE's cder-jdl lrms-attrs for why",
                    d.line
                )));
            }
        }
    }
    Ok(())
}

/// `directive = "native"`: TORQUE counts `nodes=…:gpus=`; the request
/// (`asked`) is written there. Returns the count and the edits.
fn native(
    header: &Header<'_>,
    cli: &CommandLine,
    asked: Option<u32>,
    settings: &TorqueSettings,
) -> Result<(Option<u32>, Edits), Rejection> {
    refuse_marks_native(header, cli, settings)?;
    match asked.filter(|n| *n > 0) {
        Some(n) => Ok((asked, native_edits(header, cli, n, settings)?)),
        None => Ok((asked, Edits::new(header))),
    }
}

/// `directive = "maui"`: MAUI counts `x=GRES:<maui_gres>@N`; the count is
/// the request (`asked`) or, without one, the GRES the job already gives
/// MAUI, and the two must agree. Returns the count and the edits.
fn maui(
    header: &Header<'_>,
    cli: &CommandLine,
    asked: Option<u32>,
    settings: &TorqueSettings,
) -> Result<(Option<u32>, Edits), Rejection> {
    let counted = maui_counted(header, cli, settings)?;
    let n = match (asked, &counted) {
        (Some(a), Some((origin, c))) if a != *c => {
            return Err(Rejection(format!(
                "{origin}: x=GRES:{}@{c} asks MAUI for {c} per node, which contradicts {GPGPU_PER_NODE}={a}",
                settings.maui_gres
            )));
        }
        (Some(a), _) => a,
        (None, Some((_, c))) => *c,
        (None, None) => 0,
    };
    let per_node = asked.or(counted.map(|(_, c)| c));
    if n == 0 {
        refuse_marks_maui(header, cli, None, settings)?;
        return Ok((per_node, Edits::new(header)));
    }
    Ok((per_node, maui_edits(header, cli, n, settings)?))
}

/// Every `-l other=cder:…` the job carries, with where it is.
fn hand_marks(header: &Header<'_>, cli: &CommandLine) -> Vec<(Origin, String)> {
    let mut found = Vec::new();
    if let Some(v) = &cli.other {
        found.push((Origin::CommandLine, v.clone()));
    }
    for (d, o) in header.options().filter(|(_, o)| o.letter == 'l') {
        for (k, v) in pairs(&o.value) {
            if k == MARK_RESOURCE {
                found.push((Origin::Line(d.line), v));
            }
        }
    }
    found.retain(|(_, v)| v.split(':').next() == Some(MARK_PREFIX));
    found
}

/// Native TORQUE counts only `nodes=…:gpus=`: a cder mark or a `gres=` of
/// the device's names is never honoured there, so one written by hand is a
/// mistake (or an attempt to get devices the scheduler never counted) and
/// is refused.
fn refuse_marks_native(header: &Header<'_>, cli: &CommandLine, settings: &TorqueSettings) -> Result<(), Rejection> {
    let mut found =
        hand_marks(header, cli).into_iter().map(|(o, v)| (o, format!("{MARK_RESOURCE}={v}"))).collect::<Vec<_>>();
    let device_gres = |v: &str| {
        v.split('+').any(|item| settings.gres_names.iter().any(|g| item.split(':').next() == Some(g.as_str())))
    };
    if let Some(v) = cli.gres.as_deref().filter(|v| device_gres(v)) {
        found.push((Origin::CommandLine, format!("gres={v}")));
    }
    for (d, o) in header.options().filter(|(_, o)| o.letter == 'l') {
        for (k, v) in pairs(&o.value) {
            if k == "gres" && device_gres(&v) {
                found.push((Origin::Line(d.line), format!("gres={v}")));
            }
        }
    }
    if let Some((origin, what)) = found.into_iter().next() {
        return Err(Rejection(format!(
            "{origin}: -l {what}: TORQUE does not count devices asked for this way, and cder does not honour it; ask with -l nodes=N:ppn=P:gpus=G or {GPGPU_PER_NODE}=G"
        )));
    }
    Ok(())
}

/// In MAUI mode a mark must repeat exactly the GRES count the job gives
/// MAUI (`want`, the mark the filter itself writes); without a request none
/// is allowed.
fn refuse_marks_maui(
    header: &Header<'_>,
    cli: &CommandLine,
    want: Option<&str>,
    settings: &TorqueSettings,
) -> Result<(), Rejection> {
    for (origin, v) in hand_marks(header, cli) {
        if Some(v.as_str()) != want {
            let asked = match want {
                Some(w) => format!("the job's request needs {MARK_RESOURCE}={w}"),
                None => format!("the job asks MAUI for no {} (x=GRES:{}@N)", settings.cder_type, settings.maui_gres),
            };
            return Err(Rejection(format!(
                "{origin}: -l {MARK_RESOURCE}={v}: cder's mark is written by the submit filter from the GRES count MAUI sees, and {asked}; ask with {GPGPU_PER_NODE}=N or -W x=GRES:{}@N",
                settings.maui_gres
            )));
        }
    }
    Ok(())
}

/// The GRES count MAUI sees: `x=GRES:<maui_gres>@N` of the command line,
/// else of the script (the command line overrides `-W x=` as a whole).
fn maui_counted(
    header: &Header<'_>,
    cli: &CommandLine,
    settings: &TorqueSettings,
) -> Result<Option<(Origin, u32)>, Rejection> {
    let gres = format!("GRES:{}@", settings.maui_gres);
    // Every item is checked: MAUI reads them all, so one within the limit
    // must not hide another above it, nor may two items disagree.
    let bare = format!("GRES:{}", settings.maui_gres);
    let find = |x: &str, origin: Origin| -> Result<Option<(Origin, u32)>, Rejection> {
        let mut found: Option<(Origin, u32)> = None;
        for item in x.split(';').map(str::trim) {
            let n = if let Some(m) = item.strip_prefix(&gres) {
                per_node_value(m, &format!("x={x}"), &origin, settings)?
            } else if item == bare {
                // MAUI counts a GRES without @N as one.
                1
            } else {
                continue;
            };
            if let Some((_, before)) = &found {
                if *before != n {
                    return Err(Rejection(format!(
                        "{origin}: x={x}: asks MAUI for {before} and for {n} {} per node",
                        settings.maui_gres
                    )));
                }
            }
            found = Some((origin.clone(), n));
        }
        Ok(found)
    };
    if let Some(x) = &cli.x {
        return find(x, Origin::CommandLine);
    }
    let mut found = None;
    for (d, o) in header.options().filter(|(_, o)| o.letter == 'W') {
        for (k, v) in pairs(&o.value) {
            if k == "x" {
                if let Some(f) = find(&v, Origin::Line(d.line))? {
                    found = Some(f);
                }
            }
        }
    }
    Ok(found)
}

/// `directive = "native"`: `:gpus=n` on every part of the job's `nodes=`
/// requests, or a new `nodes=` line.
fn native_edits(header: &Header<'_>, cli: &CommandLine, n: u32, settings: &TorqueSettings) -> Result<Edits, Rejection> {
    let mut edits = Edits::new(header);
    if let Some(spec) = &cli.nodes {
        if node_spec_gpus(spec).unwrap_or_default().iter().any(|g| *g != Some(n)) {
            return Err(Rejection(format!(
                "qsub command line: -l nodes={spec} overrides the job script, so {GPGPU_PER_NODE}={n} cannot be added to it; ask there: -l nodes={}",
                with_gpus(spec, n, &Origin::CommandLine)?
            )));
        }
        return Ok(edits);
    }
    let mut found = false;
    for (i, d) in header.directives.iter().enumerate() {
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
            edits.rewrites[i] = Some(rebuild(&d.text, &d.tokens, &new_tokens));
        }
    }
    if !found {
        edits.inserts.push(format!("{} -l nodes=1:ppn={}:gpus={n}", header_prefix(&cli.prefix), settings.default_ppn));
    }
    Ok(edits)
}

/// `directive = "maui"`: `GRES:<name>@n` in the job's `-W x=`, or a new
/// `-W x=` line, and the mark for the prologue.
fn maui_edits(header: &Header<'_>, cli: &CommandLine, n: u32, settings: &TorqueSettings) -> Result<Edits, Rejection> {
    let mut edits = Edits::new(header);
    let prefix = header_prefix(&cli.prefix);
    let gres = format!("GRES:{}@", settings.maui_gres);
    let want = format!("{gres}{n}");
    let has_gres = |x: &str| x.split(';').any(|item| item.trim().starts_with(&gres));
    if let Some(x) = &cli.x {
        if !has_gres(x) {
            return Err(Rejection(format!(
                "qsub command line: -W x={x} overrides the job script, so {GPGPU_PER_NODE}={n} cannot be added to it; ask there: -W x={x};{want}"
            )));
        }
    } else {
        let mut found = false;
        for (i, d) in header.directives.iter().enumerate() {
            let mut new_tokens: Vec<(usize, String)> = Vec::new();
            for o in d.opts.iter().filter(|o| o.letter == 'W') {
                let mut list = pairs(&o.value);
                let mut changed = false;
                for (_, v) in list.iter_mut().filter(|(k, _)| k == "x") {
                    found = true;
                    if !has_gres(v) {
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
                edits.rewrites[i] = Some(rebuild(&d.text, &d.tokens, &new_tokens));
            }
        }
        if !found {
            edits.inserts.push(format!("{prefix} -W x={want}"));
        }
    }
    // The mark the prologue reads: the filter's own, or one that repeats it.
    let mark = mark_value(&settings.cder_type, n);
    refuse_marks_maui(header, cli, Some(&mark), settings)?;
    let script_other = header
        .options()
        .filter(|(_, o)| o.letter == 'l')
        .flat_map(|(d, o)| {
            pairs(&o.value).into_iter().filter(|(k, _)| k == MARK_RESOURCE).map(move |(_, v)| (d.line, v))
        })
        .last();
    match (&cli.other, &script_other) {
        (Some(v), _) if *v != mark => {
            return Err(Rejection(format!(
                "qsub command line: -l {MARK_RESOURCE}={v}: cder needs {MARK_RESOURCE}={mark} to tell the node about {GPGPU_PER_NODE}={n}"
            )))
        }
        (None, Some((line, v))) if *v != mark => {
            return Err(Rejection(format!(
                "job script line {line}: -l {MARK_RESOURCE}={v}: cder needs {MARK_RESOURCE}={mark} to tell the node about {GPGPU_PER_NODE}={n}"
            )))
        }
        (None, None) => edits.inserts.push(format!("{prefix} -l {MARK_RESOURCE}={mark}")),
        _ => {}
    }
    Ok(edits)
}

/// The prefix new directive lines are written with (`filter` refuses to
/// add lines when `-C ""` turned directives off).
fn header_prefix(prefix: &str) -> &str {
    if prefix.is_empty() {
        DEFAULT_PREFIX
    } else {
        prefix
    }
}

/// Writes the script with the edits: rewritten directives in place (a
/// continued directive becomes one line), new lines after the last
/// directive (or after `#!`, or first). One pass.
fn assemble(script: &[u8], header: &Header<'_>, edits: &Edits) -> Vec<u8> {
    let lines = &header.lines;
    let crlf = lines.first().is_some_and(|l| l.ends_with(b"\r\n"));
    let eol: &[u8] = if crlf { b"\r\n" } else { b"\n" };
    let insert_after = header.last_directive.or_else(|| lines.first().filter(|l| l.starts_with(b"#!")).map(|_| 0));
    let mut out = Vec::with_capacity(script.len() + 128);
    let emit_inserts = |out: &mut Vec<u8>| {
        for line in &edits.inserts {
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(eol);
        }
    };
    if insert_after.is_none() {
        emit_inserts(&mut out);
    }
    // Rewritten directives by their first physical line.
    let mut by_line: Vec<Option<(usize, &str, Encoding)>> = vec![None; lines.len()];
    for (d, text) in header.directives.iter().zip(&edits.rewrites) {
        if let Some(text) = text {
            by_line[d.lines.start] = Some((d.lines.end, text.as_str(), d.encoding));
        }
    }
    let mut i = 0;
    while i < lines.len() {
        let last = match by_line[i] {
            Some((end, text, encoding)) => {
                let d_end = end - 1;
                out.extend_from_slice(&encode(text, encoding));
                let raw = lines[d_end];
                out.extend_from_slice(&raw[content(raw).len()..]);
                d_end
            }
            None => {
                out.extend_from_slice(lines[i]);
                i
            }
        };
        if insert_after.is_some_and(|a| a >= i && a <= last) {
            if !lines[last].ends_with(b"\n") && !edits.inserts.is_empty() {
                out.extend_from_slice(eol);
            }
            emit_inserts(&mut out);
        }
        i = last + 1;
    }
    out
}

/// Adds the items of a `-v` list to `vars` (`NAME` alone takes the
/// submitter's value, as qsub does).
fn variables_from_v(list: &str, env: &dyn Fn(&str) -> Option<String>, vars: &mut Vec<(String, String)>) {
    for item in list.split(',') {
        match item.split_once('=') {
            Some((k, v)) => vars.push((k.trim().to_string(), v.trim().trim_matches('"').to_string())),
            None => {
                if let Some(v) = env(item.trim()) {
                    vars.push((item.trim().to_string(), v));
                }
            }
        }
    }
}

/// `GPGPUPerNode` from a `-v` list, if it is there.
fn count_from_v(
    list: &str,
    origin: &Origin,
    env: &dyn Fn(&str) -> Option<String>,
    settings: &TorqueSettings,
) -> Result<Option<u32>, Rejection> {
    let mut found = None;
    for item in list.split(',') {
        let (k, v) = match item.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim().to_string())),
            None => (item.trim(), None),
        };
        if k != GPGPU_PER_NODE {
            continue;
        }
        // `-v NAME` exports the submitter's own value of NAME.
        let Some(v) = v.or_else(|| env(GPGPU_PER_NODE)) else { continue };
        found = Some(per_node_value(&v, &format!("{GPGPU_PER_NODE}={v}"), origin, settings)?);
    }
    Ok(found)
}

/// Rejects a node spec whose `gpus=` is not a count or is over the limit.
fn check_node_spec(spec: &str, origin: &Origin, settings: &TorqueSettings) -> Result<(), Rejection> {
    for part in spec.split('+') {
        for field in part.split(':') {
            if let Some(v) = field.strip_prefix("gpus=") {
                per_node_value(v, &format!("nodes …:gpus={v}"), origin, settings)?;
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
                return Err(Rejection(format!(
                    "{origin}: nodes={spec} asks for gpus={m}, which contradicts {GPGPU_PER_NODE}={n}"
                )));
            }
            None => parts.push(format!("{part}:gpus={n}")),
        }
    }
    Ok(parts.join("+"))
}

/// The new text of the word holding option `o`'s value.
fn option_token(o: &Opt, value: &str, original: &Token) -> String {
    match &o.attached {
        Some(head) => requote(&format!("{head}{value}"), original.quote),
        None => requote(value, original.quote),
    }
}

/// The line's text with some words replaced, everything else kept.
fn rebuild(text: &str, tokens: &[Token], replace: &[(usize, String)]) -> String {
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
        let toks = tokenize("-lnodes=1 -V -l walltime=1:00:00 -I script.sh -l x -Vlmem=1gb -- -l y", 0);
        let o = options(&toks).unwrap();
        let got: Vec<(char, &str, Option<&str>)> =
            o.iter().map(|o| (o.letter, o.value.as_str(), o.attached.as_deref())).collect();
        assert_eq!(
            got,
            [
                ('l', "nodes=1", Some("-l")),
                ('V', "", None),
                ('l', "walltime=1:00:00", None),
                ('I', "", None),
                // GNU getopt reads past the operand `script.sh`.
                ('l', "x", None),
                ('V', "", None),
                ('l', "mem=1gb", Some("-Vl")),
            ]
        );
        assert!(options(&tokenize("-N", 0)).is_err());
    }

    #[test]
    fn qsub_line_classes() {
        assert!(is_executable(b"echo"));
        assert!(is_executable(b"  ./a"));
        assert!(!is_executable(b"# caf\xe9"));
        assert!(is_executable(b"caf\xe9"));
        assert!(!is_executable(b":  comment"));
        assert!(!is_executable(b"#!/bin/sh"));
        assert!(!is_executable(b" \t\x0b\x0c\r"));
        assert_eq!(after_prefix(b"  #PBS -l x", b"#PBS"), Some(&b" -l x"[..]));
        assert_eq!(after_prefix(b"#PBS -l x", b""), None);
    }

    #[test]
    fn continued_directives_are_one_and_latin1_survives() {
        let script =
            b"#!/bin/sh\n# r\xe9sum\xe9\n#PBS -N caf\xe9 -l \\\nnodes=1:ppn=2\n#PBS -v GPGPUPerNode=2\n./run\n";
        let out = filter(script, &[], &|_| None, &TorqueSettings::default()).unwrap();
        assert_eq!(out.per_node, Some(2));
        assert_eq!(
            out.script,
            b"#!/bin/sh\n# r\xe9sum\xe9\n#PBS -N caf\xe9 -l nodes=1:ppn=2:gpus=2\n#PBS -v GPGPUPerNode=2\n./run\n"
                .to_vec()
        );
        let err = filter(b"#PBS -l \\\n", &[], &|_| None, &TorqueSettings::default()).unwrap_err();
        assert!(err.0.contains("past the end"), "{err}");
    }

    #[test]
    fn node_specs_gain_gpus() {
        let o = Origin::Line(1);
        assert_eq!(with_gpus("1:ppn=4", 2, &o).unwrap(), "1:ppn=4:gpus=2");
        assert_eq!(with_gpus("2:ppn=8+1:ppn=2:gpus=2", 2, &o).unwrap(), "2:ppn=8:gpus=2+1:ppn=2:gpus=2");
        assert!(with_gpus("1:ppn=4:gpus=1", 2, &o).is_err());
    }

    #[test]
    fn every_maui_gres_item_is_checked() {
        let maui = TorqueSettings { directive: crate::settings::Directive::Maui, ..TorqueSettings::default() };
        let w = |v: &str| vec!["-W".to_string(), v.to_string()];
        for (script, argv, want) in [
            (&b"#PBS -W x=GRES:gpus@2;GRES:gpus@99\n./run\n"[..], vec![], "limit of 64"),
            (&b"#PBS -W x=GRES:gpus@99\n./run\n"[..], vec![], "limit of 64"),
            (&b"./run\n"[..], w("x=GRES:gpus@2;GRES:gpus@99"), "limit of 64"),
            (&b"./run\n"[..], w("x=GRES:gpus@99"), "limit of 64"),
            (&b"#PBS -W x=GRES:gpus@2;GRES:gpus@3\n./run\n"[..], vec![], "for 2 and for 3"),
            (&b"#PBS -W x=GRES:gpus@2;GRES:gpus\n./run\n"[..], vec![], "for 2 and for 1"),
        ] {
            let err = filter(script, &argv, &|_| None, &maui).unwrap_err();
            assert!(err.0.contains(want), "{:?} {argv:?}: {err}", String::from_utf8_lossy(script));
        }
        let ok = filter(b"#PBS -W x=GRES:gpus@2;GRES:gpus@2\n./run\n", &[], &|_| None, &maui).unwrap();
        assert_eq!(ok.per_node, Some(2));
        let one = filter(b"#PBS -W x=GRES:gpus\n./run\n", &[], &|_| None, &maui).unwrap();
        assert_eq!(one.per_node, Some(1), "MAUI counts a bare GRES as one");
        // What lrms-attrs writes in MAUI mode passes as it is.
        let blah = b"#PBS -l nodes=1\n#PBS -W x=GRES:gpus@2\n#PBS -l other=cder:gpgpu:2\n./run\n";
        let out = filter(blah, &[], &|_| None, &maui).unwrap();
        assert_eq!(out.per_node, Some(2));
        assert_eq!(out.script, blah.to_vec());
    }

    #[test]
    fn a_ce_refusal_stops_the_job_naming_the_attribute() {
        let script = b"#!/bin/sh\n#PBS -l nodes=1\n#PBS -l cder_bad_attribute_GPGPUPerNode=1\n./run\n";
        for settings in [
            TorqueSettings::default(),
            TorqueSettings { directive: crate::settings::Directive::Maui, ..TorqueSettings::default() },
        ] {
            let err = filter(script, &[], &|_| None, &settings).unwrap_err();
            assert!(err.0.contains("line 3") && err.0.contains("GPGPUPerNode"), "{err}");
        }
    }
}
