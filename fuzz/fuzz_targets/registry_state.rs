//! The registry's request bodies, past authentication, against a real
//! (fresh, SQLite) store: each input line is an operation letter and a
//! JSON body, applied in order as `cder-registryd` would — `r` register,
//! `u` unregister, `q` request, `x` release, `o` offline, `n` online.
//! Bodies are parsed as the service parses them (unknown fields refused)
//! and validated; the store must refuse what it cannot do with an error,
//! and after every sequence no backend may have two live owners and no
//! released job may hold one.
#![no_main]

use cder_model::RegistryPolicy;
use cder_registry::api::{BackendRequest, OfflineRequest, RegisterRequest, ReleaseRequest, UnregisterRequest};
use cder_registry::store::BackendLedger;
use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;

fn body<T: DeserializeOwned>(json: &[u8]) -> Option<T> {
    serde_json::from_slice(json).ok()
}

fuzz_target!(|data: &[u8]| {
    // tmpfs where there is one: the store syncs every transaction.
    let base = std::path::Path::new("/dev/shm");
    let dir = if base.is_dir() { tempfile::tempdir_in(base) } else { tempfile::tempdir() }.unwrap();
    let mut store = BackendLedger::open(&dir.path().join("registry.db"), 50_000).unwrap();
    let policy = cder_registry::policy::from_config(RegistryPolicy::default());
    for (now, line) in (1_000_000..).zip(data.split(|&b| b == b'\n').take(32)) {
        let Some((&op, json)) = line.split_first() else { continue };
        let _ = match op {
            b'r' => match body::<RegisterRequest>(json) {
                Some(r) if r.validate().is_ok() => store.register(&r, now).map(drop),
                _ => continue,
            },
            b'u' => match body::<UnregisterRequest>(json) {
                Some(r) => store.unregister(&r.uuid).map(drop),
                None => continue,
            },
            b'q' => match body::<BackendRequest>(json) {
                Some(r) if r.validate().is_ok() => store.request(&r, policy.as_ref(), now).map(drop),
                _ => continue,
            },
            b'x' => match body::<ReleaseRequest>(json) {
                Some(r) => store.release(&r.job, now).map(drop),
                None => continue,
            },
            b'o' | b'n' => match body::<OfflineRequest>(json) {
                Some(r) if r.validate().is_ok() => store.set_offline(&r, op == b'o').map(drop),
                _ => continue,
            },
            _ => continue,
        };
    }
    let status = store.status().unwrap();
    for (method, c) in &status.counts {
        assert!(c.in_use + c.free + c.offline >= c.total, "{method}: {c:?}");
    }
    let problems = store.check_invariants().unwrap();
    assert!(problems.is_empty(), "{problems:?}");
});
