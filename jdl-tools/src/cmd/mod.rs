//! The two-phase subcommands of the `cder-jdl` binary (`list-match`,
//! `submit`, `lrms-attrs`), one module each, with the phase-1 steps they
//! share. Each `run` returns the process exit code: 0 success, 1 runtime
//! failure (BDII down, no match, submit failed), 2 bad input or usage.

pub mod index;
pub mod list_match;
pub mod lrms_attrs;
pub mod submit;

use std::process::ExitCode;
use std::time::Duration;

use crate::bdii::{build_offers, Bdii, Fetched, Offers, QueryOptions, Strategies};
use crate::index::cache::Cache;
use crate::index::refresh::{open_fresh, Source};
use crate::listmatch::{list_match, MatchResult, RankPreset, Request};
use cder_classad::ast::ClassAd;
pub use index::IndexInfo;

/// A failure with its exit code and one-line message.
#[derive(Debug)]
pub struct Failure {
    /// 1 runtime, 2 input/usage.
    pub code: u8,
    /// What and where.
    pub message: String,
}

impl Failure {
    /// Bad input or usage (exit 2).
    pub fn input(message: impl Into<String>) -> Failure {
        Failure { code: 2, message: message.into() }
    }
    /// A runtime failure (exit 1).
    pub fn runtime(message: impl Into<String>) -> Failure {
        Failure { code: 1, message: message.into() }
    }
}

/// Prints a failure and turns it into an exit code.
pub fn finish(r: Result<(), Failure>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("cder-jdl: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

/// Logs to stderr (`CDER_LOG` sets the level; warnings by default).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CDER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .with_env_filter(filter)
        .try_init();
}

/// Where the BDII is and how it is read: `list-match`, `submit` and `index refresh` share these.
#[derive(clap::Args, Debug, Clone)]
pub struct BdiiArgs {
    /// The BDII: ldap://host:port (host:port accepted; of a comma-separated list, the first).
    #[arg(long, env = "LCG_GFAL_INFOSYS", value_name = "URL")]
    pub bdii: Option<String>,
    /// GLUE 2.0 base DN.
    #[arg(long, default_value = "o=glue", value_name = "DN")]
    pub base: String,
    /// GLUE 1.3 base DN.
    #[arg(long, default_value = "o=grid", value_name = "DN")]
    pub base13: String,
    /// Publication strategies to read (repeatable): attribute-extension, class-extension,
    /// tagged-environment. Default: all.
    #[arg(long = "strategy", value_name = "STRATEGY", value_delimiter = ',', value_parser = ["attribute-extension", "class-extension", "tagged-environment"])]
    pub strategies: Vec<String>,
    /// CDER key prefixes (repeatable).
    #[arg(long = "prefix", value_name = "PREFIX", default_value = cder_request::glue::GPGPU_PREFIX)]
    pub prefixes: Vec<String>,
    /// Seconds to wait for the BDII's TCP connection.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    pub connect_timeout: f64,
    /// Seconds to wait for each answer from the BDII (and, with the index, for a refresh
    /// another process is running).
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub timeout: f64,
    /// Directory of the index snapshots. Default: $XDG_CACHE_HOME/cder (~/.cache/cder), the
    /// user's own; a site's shared copy is e.g. /var/cache/cder, kept by the
    /// cder-index-refresh timer.
    #[arg(long, env = crate::index::cache::INDEX_DIR_ENV, value_name = "DIR")]
    pub index_dir: Option<std::path::PathBuf>,
}

impl BdiiArgs {
    /// The BDII URL and how to read it.
    pub fn source(&self) -> Result<Source, Failure> {
        let raw = self
            .bdii
            .as_deref()
            .ok_or_else(|| Failure::input("no BDII: give --bdii ldap://host:port or set LCG_GFAL_INFOSYS"))?;
        let url = bdii_url(raw);
        // A URL that cannot name a BDII is the user's mistake (exit 2), not the BDII's failure.
        let usable = url.starts_with("ldapi://") || crate::bdii::session::tcp_address(&url).is_some_and(|a| a.is_ok());
        if !usable {
            return Err(Failure::input(format!("{url}: not an LDAP URL (expected ldap://host:port)")));
        }
        let mut opts = QueryOptions::new(&url);
        opts.base = self.base.clone();
        opts.base13 = self.base13.clone();
        opts.connect_timeout = seconds(self.connect_timeout, "connect-timeout")?;
        opts.timeout = seconds(self.timeout, "timeout")?;
        if !self.strategies.is_empty() {
            let has = |s: &str| self.strategies.iter().any(|x| x == s);
            opts.strategies = Strategies {
                attribute_extension: has("attribute-extension"),
                class_extension: has("class-extension"),
                glue13: has("tagged-environment"),
            };
        }
        Ok(Source { query: opts, prefixes: self.prefixes.clone() })
    }

    /// The snapshot directory: --index-dir, $CDER_INDEX_DIR, or the user's cache.
    pub fn cache(&self) -> Result<Cache, Failure> {
        Cache::resolve(self.index_dir.as_deref()).map_err(|e| Failure::runtime(e.to_string()))
    }
}

/// The phase-1 options `list-match` and `submit` share.
#[derive(clap::Args, Debug, Clone)]
pub struct Phase1Args {
    /// The BDII and how it is read.
    #[command(flatten)]
    pub source: BdiiArgs,
    /// Virtual Organisation (default: the JDL's VirtualOrganisation): only shares open to it.
    #[arg(long, value_name = "VO")]
    pub vo: Option<String>,
    /// Rank preset instead of the JDL's Rank: gpgpu-free-ratio (Free/Total) or gpgpu-max-free
    /// (Free/Total × Free/max Total).
    #[arg(long, value_name = "PRESET", value_parser = ["gpgpu-free-ratio", "gpgpu-max-free"])]
    pub rank: Option<String>,
    /// Ask the BDII directly instead of answering from the local index.
    #[arg(long)]
    pub live: bool,
    /// Seconds an index snapshot may be old: an older one is refreshed first (re-read only if
    /// the BDII has finished an update cycle since). 0: check the BDII every time.
    #[arg(long, env = "CDER_INDEX_MAX_AGE", default_value_t = 300.0, value_name = "SECONDS")]
    pub max_age: f64,
    /// When a snapshot older than --max-age cannot be refreshed (BDII down), exit 1 instead of
    /// answering from it with a warning.
    #[arg(long)]
    pub strict: bool,
}

/// Phase 1's outcome.
pub struct Phase1 {
    /// The job.
    pub job: ClassAd,
    /// The request built from it.
    pub request: Request,
    /// The offers: from the BDII all of them, from the index those
    /// evaluated (each [`crate::listmatch::Match::offer`] points into them).
    pub offers: Offers,
    /// How many offers the job was matched against.
    pub offer_count: usize,
    /// Matches (and, when explaining, exclusions).
    pub result: MatchResult,
    /// The BDII URL used.
    pub url: String,
    /// LDAP searches made (0 from the index).
    pub queries: usize,
    /// The snapshot answered from (None: `--live`).
    pub index: Option<IndexInfo>,
    /// The connection and what it fetched, kept so that [`Phase1::exit`]
    /// can leave them to the process's end instead of freeing them.
    _retained: Option<(Bdii, Fetched)>,
}

impl Phase1 {
    /// Says on stderr where the answer's data came from: the snapshot's age
    /// and BDII cycle, and a warning when it is older than asked.
    pub fn report_source(&self) {
        if let Some(i) = &self.index {
            if let Some(why) = &i.stale {
                eprintln!(
                    "cder-jdl: warning: answering from an index {} s old: it could not be refreshed: {why}",
                    i.age()
                );
            }
            eprintln!("{}", i.line());
        }
    }

    /// Gives everything up at the end of a command: the process is about to
    /// exit, and freeing 10^4–10^5 entries and offers one by one (and joining
    /// the I/O threads) would only delay it; the system reclaims the memory.
    pub fn exit(self) {
        std::mem::forget(self);
    }
}

/// Normalises `LCG_GFAL_INFOSYS`-style values to an LDAP URL.
pub fn bdii_url(raw: &str) -> String {
    let first = raw.split(',').next().unwrap_or(raw).trim();
    if first.contains("://") {
        first.to_string()
    } else {
        format!("ldap://{first}")
    }
}

/// Reads and parses a JDL (`-` for standard input).
pub fn read_job(path: &str) -> Result<ClassAd, Failure> {
    let text = if path == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| Failure::input(format!("-: cannot read standard input: {e}")))?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|e| Failure::input(format!("{path}: cannot read: {e}")))?
    };
    cder_classad::parser::parse_classad(&text).map_err(|e| Failure::input(format!("{path}:{e}")))
}

fn seconds(v: f64, what: &str) -> Result<Duration, Failure> {
    if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
        return Err(Failure::input(format!("--{what}: {v} is not a number of seconds in (0, 86400]")));
    }
    Ok(Duration::from_secs_f64(v))
}

fn max_age(v: f64) -> Result<Duration, Failure> {
    if !(v.is_finite() && (0.0..=31_536_000.0).contains(&v)) {
        return Err(Failure::input(format!("--max-age: {v} is not a number of seconds in [0, 31536000]")));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Runs phase 1 for the job at `path`: from the local index, or with
/// `--live` from the BDII itself.
pub fn phase1(args: &Phase1Args, path: &str, explain: bool) -> Result<Phase1, Failure> {
    let job = read_job(path)?;
    let preset = args.rank.as_deref().and_then(RankPreset::parse);
    let request = Request::new(&job, preset).map_err(|e| {
        let pos = job.attribute(&e.key).map(|a| format!("{}:", a.pos)).unwrap_or_default();
        Failure::input(format!("{path}:{pos} {e}"))
    })?;
    let source = args.source.source()?;
    let max_age = max_age(args.max_age)?;
    if args.live {
        live(args, source, job, request, explain)
    } else {
        from_index(args, source, max_age, job, request, explain)
    }
}

fn live(args: &Phase1Args, source: Source, job: ClassAd, request: Request, explain: bool) -> Result<Phase1, Failure> {
    let url = source.query.url.clone();
    let wanted = request.wanted(&source.prefixes, args.vo.as_deref());
    let started = std::time::Instant::now();
    let mut bdii = Bdii::connect(&source.query).map_err(|e| Failure::runtime(e.to_string()))?;
    let fetched = bdii.fetch(&wanted).map_err(|e| Failure::runtime(e.to_string()))?;
    let fetch_time = started.elapsed();
    let offers = build_offers(&fetched, &source.prefixes, wanted.vo.as_deref());
    tracing::debug!(
        queries = fetched.queries,
        offers = offers.offers.len(),
        fetch_ms = fetch_time.as_secs_f64() * 1e3,
        offers_ms = (started.elapsed() - fetch_time).as_secs_f64() * 1e3,
        "phase 1"
    );
    for w in &offers.warnings {
        tracing::warn!("{url}: {w}");
    }
    let result = list_match(&request, &offers.offers, explain);
    let queries = fetched.queries;
    let offer_count = offers.offers.len();
    Ok(Phase1 {
        job,
        request,
        offers,
        offer_count,
        result,
        url,
        queries,
        index: None,
        _retained: Some((bdii, fetched)),
    })
}

fn from_index(
    args: &Phase1Args,
    source: Source,
    max_age: Duration,
    job: ClassAd,
    request: Request,
    explain: bool,
) -> Result<Phase1, Failure> {
    let url = source.query.url.clone();
    let cache = args.source.cache()?;
    let vo = request.wanted(&source.prefixes, args.vo.as_deref()).vo;
    let started = std::time::Instant::now();
    let opened = open_fresh(&cache, &source, max_age, args.strict, source.query.timeout)
        .map_err(|e| Failure::runtime(e.to_string()))?;
    let opened_in = started.elapsed();
    let answer = opened
        .index
        .list_match(&request, vo.as_deref(), explain)
        .map_err(|e| Failure::runtime(format!("{e} (refresh it: cder-jdl index refresh --force)")))?;
    tracing::debug!(
        path = %opened.path.display(),
        visible = answer.visible,
        candidates = answer.candidates,
        open_ms = opened_in.as_secs_f64() * 1e3,
        match_ms = (started.elapsed() - opened_in).as_secs_f64() * 1e3,
        "phase 1 from the index"
    );
    for w in &answer.offers.warnings {
        tracing::warn!("{url}: {w}");
    }
    let (result, offers, offer_count) = (answer.result, answer.offers, answer.visible);
    let info = IndexInfo::of(&opened);
    // The map stays until the process ends (Phase1::exit).
    std::mem::forget(opened);
    Ok(Phase1 { job, request, offers, offer_count, result, url, queries: 0, index: Some(info), _retained: None })
}

/// The no-match explanation: one line per CE left out and why.
pub fn explain_text(p: &Phase1) -> String {
    let mut s = String::new();
    if p.offer_count == 0 {
        s.push_str(&format!("no CE in {} publishes the CDER keys this job uses\n", p.url));
    }
    for e in &p.result.excluded {
        s.push_str(&format!(" - {}\n", printable(&e.ce_id)));
        for r in &e.reasons {
            s.push_str(&format!("     {}\n", printable(r)));
        }
    }
    for c in &p.offers.closed_to_vo {
        let queue = c.queue.as_deref().map(|q| format!(" (queue {})", printable(q))).unwrap_or_default();
        s.push_str(&format!(
            " - share {}{queue}\n     not open to VO {}: no MappingPolicy with GLUE2PolicyRule VO:{}\n",
            printable(&c.share_id),
            printable(&c.vo),
            printable(&c.vo)
        ));
    }
    for c in &p.offers.refused_claims {
        s.push_str(&format!(
            " - {} (claimed by {})\n     {}\n",
            printable(&c.ce_id),
            printable(&c.share),
            printable(&c.reason)
        ));
    }
    s
}

/// `text` with every control character escaped (`\n`, `\u{1b}`): a CE ID
/// or reason comes from whoever publishes in the BDII, and a raw newline
/// would fake a result line.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return text.into();
    }
    text.chars()
        .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
        .collect::<String>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdii_urls_in_glite_forms() {
        assert_eq!(bdii_url("bdii.example.org:2170"), "ldap://bdii.example.org:2170");
        assert_eq!(bdii_url("bdii1:2170, bdii2:2170"), "ldap://bdii1:2170");
        assert_eq!(bdii_url("ldap://bdii:2170"), "ldap://bdii:2170");
    }

    #[test]
    fn printed_fields_cannot_fake_lines() {
        assert_eq!(printable("ce1:8443/cream-slurm-gpu"), "ce1:8443/cream-slurm-gpu");
        assert_eq!(printable("evil\n - ce2:8443/x  1.0\r\u{1b}[2J"), "evil\\n - ce2:8443/x  1.0\\r\\u{1b}[2J");
        assert!(!printable("a\tb\u{85}c").chars().any(char::is_control));
    }

    #[test]
    fn timeouts_must_be_positive_seconds() {
        assert!(seconds(0.0, "timeout").is_err());
        assert!(seconds(f64::NAN, "timeout").is_err());
        assert_eq!(seconds(1.5, "timeout").unwrap(), Duration::from_millis(1500));
    }
}
