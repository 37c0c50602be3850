//! `cder-registryd`'s request handling as the HTTP server hands it over:
//! method, URL (path and query) and the `Authorization` header, then the
//! body. The input is `METHOD URL\nAUTH\nBODY`. munged is not running here,
//! so every credential is refused: what is fuzzed is the routing, the
//! header and credential checks in front of it, and the answer to each.
//! Every request must get a 4xx JSON error, never a panic (a 500).
//! The bodies behind authentication are fuzzed by `registry_state`.
#![no_main]

use std::sync::OnceLock;

use cder_model::RegistryConfig;
use cder_registry::service::Registry;
use libfuzzer_sys::fuzz_target;

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<(tempfile::TempDir, Registry)> = OnceLock::new();
    &REGISTRY
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let config = RegistryConfig {
                state_dir: dir.path().join("state"),
                munge_socket: Some(dir.path().join("no-munged")),
                ..RegistryConfig::default()
            };
            let registry = Registry::open(&config).unwrap();
            (dir, registry)
        })
        .1
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |&b| b == b'\n');
    let (Some(request_line), auth, body) = (parts.next(), parts.next(), parts.next().unwrap_or(b"")) else { return };
    let Ok(request_line) = std::str::from_utf8(request_line) else { return };
    let (method, url) = request_line.split_once(' ').unwrap_or((request_line, "/"));
    let auth = auth.and_then(|a| std::str::from_utf8(a).ok());
    let (status, json) = registry().handle(method, url, auth, body);
    // No munged runs here: a request that reaches MUNGE is 503 `unavailable`, never a 5xx of another kind.
    assert!(
        (400..500).contains(&status) || (status == 503 && json.contains("\"unavailable\"")),
        "{method} {url}: status {status}: {json}"
    );
    let reply: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("reply is not JSON ({e}): {json}"));
    assert!(reply.get("code").is_some_and(|c| c.is_string()), "error without a code: {json}");
});
