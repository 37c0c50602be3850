//! cder-registryd under clients that hold connections open:
//! a real cder-registryd and a real munged. Hundreds of connections that
//! never finish their headers, and connections that announce a large body
//! and send one byte, must neither stop authenticated clients from being
//! served nor make the daemon grow threads; numbers from requests are
//! checked and refused naming the field. No timed assertion: a generous
//! client timeout (30 s) is the failure condition. Without munged: fails
//! under CI=true, skips (with a reason) otherwise.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use cder_model::VgpgpuMethod;
use cder_tests::munge::require_munge;
use cder_tests::vgpgpu::Registryd;

/// The registry's pid: the `cder-registryd` process started with this
/// test's config file.
fn pid_of(r: &Registryd) -> u32 {
    let config = r.config_path().display().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.first().is_some_and(|a| a.ends_with("cder-registryd")) && args.contains(&config) {
            return pid;
        }
    }
    panic!("no cder-registryd process with {config}");
}

/// `Threads:` of /proc/<pid>/status.
fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("Threads:")).unwrap().trim().parse().unwrap()
}

/// Open sockets of the process.
fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")))
        .count()
}

/// Polls `f` every 100 ms for up to 60 s; the last value.
fn eventually<T>(mut f: impl FnMut() -> T, ok: impl Fn(&T) -> bool) -> T {
    let mut last = None;
    let found = cder_testkit::wait_for_value(Duration::from_secs(60), Duration::from_millis(100), || {
        let v = f();
        if ok(&v) {
            return Some(v);
        }
        last = Some(v);
        None
    });
    found.or(last).expect("looked at least once")
}

fn connect(r: &Registryd, first: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", r.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(first).unwrap();
    s
}

/// Reads a reply's status and body from `s` (the server closes after it).
fn reply(s: &mut TcpStream) -> (u16, String) {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let r =
        cder_registry::client::parse_reply(&out).unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&out)));
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

/// Several authenticated calls, each within the client's 30 s timeout.
fn authenticated_calls_succeed(r: &Registryd, round: u32) {
    let c = r.client();
    for i in 0..5 {
        let s = c.status().unwrap_or_else(|e| panic!("status while connections are held: {e}; log:\n{}", r.log()));
        assert_eq!(s.counts_for(None).total, 4);
        let job = format!("slurm:{}", 100 * round + i).parse().unwrap();
        let a = c.request(&job, 1, "n1", VgpgpuMethod::Rcuda).unwrap();
        assert_eq!(a.backends.len(), 1);
        assert_eq!(c.release(&job).unwrap().released, 1);
    }
}

#[test]
fn held_connections_block_no_one_and_add_no_threads() {
    if !require_munge() {
        return;
    }
    // Deadlines far beyond the test: the connections stay held throughout.
    let r = Registryd::start("max_connections = 1000\nheader_timeout_s = 600\nbody_timeout_s = 600").unwrap();
    r.register_many("GPU", "n1", 4).unwrap();
    let pid = pid_of(&r);
    authenticated_calls_succeed(&r, 0);
    let base_threads = threads(pid);
    let base_sockets = sockets(pid);

    // 300 connections with partial headers.
    let partial: Vec<TcpStream> = (0..300).map(|_| connect(&r, b"GET /v1/status HTTP/1.1\r\nHost: x\r\n")).collect();
    // 8 that announce 60000 bytes of body and send one, without a
    // credential: refused before the body is read.
    let mut unauth: Vec<TcpStream> = (0..8)
        .map(|_| connect(&r, b"POST /v1/release HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n{"))
        .collect();
    for s in &mut unauth {
        let (status, body) = reply(s);
        assert_eq!(status, 401, "{body}");
    }
    // 8 with a valid credential for a 60000-byte body, which send one
    // byte of it and stall: held in the body phase, costing no worker.
    let frame = r#"{"job":"slurm:1","pad":""}"#.len();
    let big = format!("{{\"job\":\"slurm:1\",\"pad\":\"{}\"}}", "x".repeat(60_000 - frame));
    assert_eq!(big.len(), 60_000);
    let cred_body: Vec<TcpStream> = (0..8)
        .map(|_| {
            let cred = r.credential(None, "POST", "/v1/release", big.as_bytes()).unwrap();
            let head = format!("POST /v1/release HTTP/1.1\r\nHost: x\r\nAuthorization: MUNGE {cred}\r\nContent-Length: 60000\r\n\r\n{{");
            connect(&r, head.as_bytes())
        })
        .collect();

    // The registry really holds them all open…
    let held = eventually(|| sockets(pid), |n| *n >= base_sockets + 308);
    assert!(
        held >= base_sockets + 308,
        "the registry holds {held} sockets, expected at least {} (connections dropped?)",
        base_sockets + 308
    );
    // …and still serves authenticated clients, with no thread per connection.
    authenticated_calls_succeed(&r, 1);
    let during = threads(pid);
    let workers = 8; // cder-registryd's default --threads
    assert!(during <= base_threads + workers, "threads grew from {base_threads} to {during} with 316 held connections");
    assert!(during < 40, "{during} threads");
    eprintln!(
        "threads: {base_threads} idle, {during} with 316 connections held; sockets: {base_sockets} idle, {held} held"
    );

    drop(partial);
    drop(unauth);
    drop(cred_body);
    let after = eventually(|| sockets(pid), |n| *n <= base_sockets);
    assert!(after <= base_sockets, "{after} sockets left after the clients closed (was {base_sockets})");
    let t = eventually(|| threads(pid), |t| *t <= base_threads);
    assert!(t <= base_threads, "{t} threads after the clients closed (was {base_threads})");
    authenticated_calls_succeed(&r, 2);
    assert!(r.log().lines().all(|l| !l.contains("panic")), "{}", r.log());
}

#[test]
fn deadlines_and_the_connection_bound_drop_idle_clients() {
    if !require_munge() {
        return;
    }
    let mut r = Registryd::start("max_connections = 50\nheader_timeout_s = 1\nbody_timeout_s = 1").unwrap();
    r.register_many("GPU", "n1", 4).unwrap();
    let pid = pid_of(&r);
    // 200 idle clients against a bound of 50: the oldest are dropped for
    // newcomers, so an authenticated client still gets in.
    let mut idle: Vec<TcpStream> = (0..200).map(|_| connect(&r, b"GET /v1/status HTTP/1.1\r\n")).collect();
    authenticated_calls_succeed(&r, 0);
    let held = sockets(pid);
    assert!(held <= 50 + 1, "{held} sockets held with max_connections = 50");
    // Those still held are closed at the header deadline: every read ends
    // (EOF, a 408, or a reset) well before the client's 30 s timeout.
    for s in &mut idle {
        let mut buf = Vec::new();
        match s.read_to_end(&mut buf) {
            Ok(_) => assert!(buf.is_empty() || buf.starts_with(b"HTTP/1.1 408"), "{:?}", String::from_utf8_lossy(&buf)),
            Err(e) => assert!(
                e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut,
                "still held: {e}"
            ),
        }
    }
    // An authenticated body that stalls past body_timeout_s gets a 408.
    let body = br#"{"job":"slurm:7"}"#;
    let cred = r.credential(None, "POST", "/v1/release", body).unwrap();
    let head =
        format!("POST /v1/release HTTP/1.1\r\nAuthorization: MUNGE {cred}\r\nContent-Length: {}\r\n\r\n{{", body.len());
    let mut s = connect(&r, head.as_bytes());
    let (status, text) = reply(&mut s);
    assert_eq!(status, 408, "{text}");
    assert!(text.contains("body"), "{text}");
    assert!(r.is_running());
    authenticated_calls_succeed(&r, 1);
}

#[test]
fn the_credential_is_checked_before_the_body_is_read() {
    if !require_munge() {
        return;
    }
    let r = Registryd::start("").unwrap();
    r.register_many("GPU", "n1", 4).unwrap();
    // A valid credential for a short body, with a Content-Length that does
    // not match it: refused at once, though the body never comes.
    let short = br#"{"job":"slurm:1"}"#;
    let cred = r.credential(None, "POST", "/v1/release", short).unwrap();
    let head = format!("POST /v1/release HTTP/1.1\r\nAuthorization: MUNGE {cred}\r\nContent-Length: 60000\r\n\r\n");
    let (status, text) = reply(&mut connect(&r, head.as_bytes()));
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("another request"), "{text}");
    // curl's `Expect: 100-continue`: the go-ahead comes only after the
    // credential is checked, then the request is served.
    let cred = r.credential(None, "POST", "/v1/release", short).unwrap();
    let head = format!("POST /v1/release HTTP/1.1\r\nAuthorization: MUNGE {cred}\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n", short.len());
    let mut s = connect(&r, head.as_bytes());
    let mut go = [0u8; 25];
    s.read_exact(&mut go).unwrap();
    assert_eq!(&go, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(short).unwrap();
    let (status, text) = reply(&mut s);
    assert_eq!(status, 200, "{text}");
    // Without a valid credential there is no go-ahead: a 401 instead.
    let head = format!("POST /v1/release HTTP/1.1\r\nAuthorization: MUNGE MUNGE:AAAA:\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n", short.len());
    let (status, _) = reply(&mut connect(&r, head.as_bytes()));
    assert_eq!(status, 401);
}

#[test]
fn out_of_range_numbers_are_refused_naming_the_field() {
    if !require_munge() {
        return;
    }
    let r = Registryd::start("").unwrap();
    r.register_many("GPU", "n1", 2).unwrap();
    let cases: [(&str, &str, &str); 8] = [
        ("/v1/request", r#"{"job":"slurm:1","count":99999999999,"node":"n1","method":"rCUDA"}"#, "count"),
        ("/v1/request", r#"{"job":"slurm:1","count":-1,"node":"n1","method":"rCUDA"}"#, "count"),
        ("/v1/request", r#"{"job":"slurm:1","count":0,"node":"n1","method":"rCUDA"}"#, "count"),
        ("/v1/request", r#"{"job":"slurm:1","count":4097,"node":"n1","method":"rCUDA"}"#, "count"),
        ("/v1/request", r#"{"job":"slurm:1","count":1,"node":"n1","method":"rCUDA","uid":4294967296}"#, "uid"),
        ("/v1/request", r#"{"job":"slurm:1","count":1,"node":"n1","method":"rCUDA","uid":4294967295}"#, "uid"),
        ("/v1/register", r#"{"uuid":"u","vendor":"v","device":-3,"host":"h","methods":["VCL"]}"#, "device"),
        ("/v1/register", r#"{"uuid":"u","vendor":"v","device":70000,"host":"h","methods":["VCL"]}"#, "device"),
    ];
    for (path, body, field) in cases {
        let cred = r.credential(None, "POST", path, body.as_bytes()).unwrap();
        let (status, text) = r.raw("POST", path, Some(&format!("MUNGE {cred}")), body.as_bytes()).unwrap();
        assert_eq!(status, 400, "{body}: {text}");
        let e: cder_registry::ApiError = serde_json::from_str(&text).unwrap();
        assert!(e.message.starts_with(&format!("{field}:")), "{body}: the error does not name {field}: {}", e.message);
    }
    // Content-Length itself.
    for (value, want) in [("abc", 400), ("-1", 400), ("99999999999999999999999", 413)] {
        let head = format!("POST /v1/release HTTP/1.1\r\nContent-Length: {value}\r\n\r\n");
        let (status, text) = reply(&mut connect(&r, head.as_bytes()));
        assert_eq!(status, want, "{value}: {text}");
        assert!(text.contains("Content-Length"), "{text}");
    }
    assert_eq!(r.client().status().unwrap().counts_for(None).free, 2, "nothing out of range changed state");
}

/// One uid opening as many authenticated connections as the registry has
/// slots (512, the default `max_connections`) and stalling every body does
/// not stop another uid: the registry holds `max_connections_per_uid` of
/// them and refuses the rest (429) as soon as they are authenticated.
#[test]
fn one_uid_stalling_every_slot_does_not_stop_another_uid() {
    if !require_munge() {
        return;
    }
    let defaults = cder_model::RegistryConfig::default();
    let (slots, share) = (defaults.max_connections, defaults.max_connections_per_uid);
    assert!(share < slots, "the default share ({share}) leaves room for others");
    // The stalled bodies would be held for the whole test without the share.
    let r = Registryd::start("header_timeout_s = 600\nbody_timeout_s = 600").unwrap();
    r.register_many("GPU", "n1", 4).unwrap();
    let body = br#"{"job":"slurm:1"}"#;
    let creds: Vec<String> =
        (0..slots).map(|_| r.credential(Some("nobody"), "POST", "/v1/release", body).unwrap()).collect();
    let mut held: Vec<(TcpStream, Vec<u8>, bool)> = creds
        .iter()
        .map(|cred| {
            let head = format!(
                "POST /v1/release HTTP/1.1\r\nHost: x\r\nAuthorization: MUNGE {cred}\r\nContent-Length: {}\r\n\r\n{{",
                body.len()
            );
            (connect(&r, head.as_bytes()), Vec::new(), false)
        })
        .collect();
    // Root, another uid, is served within the client's 30 s timeout.
    authenticated_calls_succeed(&r, 0);
    // Every stalled connection beyond the share is refused, naming the key;
    // the share is held (its bodies never come).
    for (s, _, _) in &held {
        s.set_nonblocking(true).unwrap();
    }
    let refused = eventually(
        || {
            for (s, buf, eof) in held.iter_mut().filter(|(_, _, eof)| !*eof) {
                let mut chunk = [0u8; 4096];
                loop {
                    match s.read(&mut chunk) {
                        Ok(0) => {
                            *eof = true;
                            break;
                        }
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        Err(_) => break,
                    }
                }
            }
            held.iter().filter(|(_, _, eof)| *eof).count()
        },
        |n| *n >= slots - share,
    );
    assert_eq!(
        refused,
        slots - share,
        "{refused} of {slots} stalled connections closed, expected all but the share of {share}"
    );
    for (_, buf, _) in held.iter().filter(|(_, _, eof)| *eof) {
        let r = cder_registry::client::parse_reply(buf)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(buf)));
        let text = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 429, "{text}");
        assert!(text.contains("max_connections_per_uid"), "{text}");
    }
    authenticated_calls_succeed(&r, 1);
    assert!(r.log().lines().all(|l| !l.contains("panic")), "{}", r.log());
}
