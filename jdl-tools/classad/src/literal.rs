//! How literal reals and strings are written in ClassAd syntax: the lowest
//! layer of the engine, used by both the syntax tree's and the values' printers.

thread_local! {
    /// Set while printing for `string()` / `strcat()`, which show reals as HTCondor unparses them.
    static HTCONDOR_REALS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with reals printed as HTCondor's `string()` shows them.
pub fn with_htcondor_reals<T>(f: impl FnOnce() -> T) -> T {
    HTCONDOR_REALS.with(|c| c.set(true));
    let out = f();
    HTCONDOR_REALS.with(|c| c.set(false));
    out
}

/// A real in printed ClassAd syntax: shortest exact form, or HTCondor's
/// `%.15E` inside [`crate::value::unparse_htcondor`].
pub fn display_real(r: f64) -> String {
    if HTCONDOR_REALS.with(|c| c.get()) {
        real_to_string(r)
    } else {
        format_real(r)
    }
}

/// Formats a real so that it reads back as a real (`1.0`, `1e+20`, `0.1`).
pub fn format_real(r: f64) -> String {
    if r.is_nan() {
        return "real(\"NaN\")".into();
    }
    if r.is_infinite() {
        return if r > 0.0 { "real(\"INF\")".into() } else { "real(\"-INF\")".into() };
    }
    let s = format!("{r:?}");
    if s.contains(['.', 'e', 'E']) {
        s
    } else {
        format!("{s}.0")
    }
}

/// HTCondor's `string(real)`: C's `%.15E` (`1.500000000000000E+00`), zero as `0.0`.
pub fn real_to_string(r: f64) -> String {
    if r == 0.0 {
        return if r.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    if !r.is_finite() {
        return format_real(r);
    }
    let s = format!("{r:.15E}");
    // Rust writes `1.5E0`; C writes `1.5E+00`.
    match s.split_once('E') {
        Some((m, e)) => {
            let (sign, digits) = match e.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', e),
            };
            format!("{m}E{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// Writes a string literal with ClassAd escapes.
pub fn quote_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('"');
}
