//! cder-registryd under faults, on real components: its state directory
//! on a file system that fills up (a 2 MiB tmpfs), and munged stopped and
//! started again. In both the registry refuses with a message that says
//! what is wrong, keeps serving, and recovers by itself once the fault is
//! gone — no restart of the registry.

use cder_model::{JobKey, VgpgpuMethod};
use cder_registry::ApiErrorCode;
use cder_testkit::{require_tmpfs, Tmpfs};
use cder_tests::munge::require_munge;
use cder_tests::vgpgpu::Registryd;

fn job(n: u32) -> JobKey {
    format!("slurm:{n}").parse().unwrap()
}

/// Every backend with its holder, as the registry reports it.
fn holders(c: &cder_registry::RegistryClient) -> Vec<(String, Option<String>)> {
    c.status().unwrap().backends.into_iter().map(|b| (b.uuid, b.job.map(|j| j.to_string()))).collect()
}

#[test]
fn registry_on_a_full_disk_refuses_keeps_serving_and_recovers() {
    if !require_munge() || !require_tmpfs() {
        return;
    }
    let disk = Tmpfs::mount(2 << 20).unwrap();
    refuses_keeps_serving_and_recovers(
        &disk.path().join("registry"),
        || disk.fill(),
        || disk.unfill(),
        "database or disk is full; nothing was changed",
    );
}

fn refuses_keeps_serving_and_recovers(
    state: &std::path::Path,
    fill: impl Fn() -> Result<u64, String>,
    unfill: impl Fn() -> Result<(), String>,
    expected: &str,
) {
    let db = state.join("registry.db");
    let mut r = Registryd::start_in(Some(state), "").unwrap();
    r.register_many("GPU-full", "node0", 8).unwrap();
    let c = r.client();
    c.request(&job(1), 1, "wn01", VgpgpuMethod::Rcuda).unwrap();
    assert!(fill().unwrap() > 0);

    // The WAL may hold a few more commits; the job history grows with
    // every request and release, so a refusal must come.
    let mut refused = None;
    for n in 2..2000 {
        let before = holders(&c);
        match c.request(&job(n), 1, "wn01", VgpgpuMethod::Rcuda) {
            Ok(_) => {
                if let Err(e) = c.release(&job(n)) {
                    refused = Some((n, e, true, before));
                    break;
                }
            }
            Err(e) => {
                refused = Some((n, e, false, before));
                break;
            }
        }
    }
    let (n, err, release, before) = refused.expect("no request was refused on a full disk");
    eprintln!("refused at job {n} ({}): {err}", if release { "release" } else { "request" });
    assert_eq!(err.code(), Some(ApiErrorCode::Internal), "{err}");
    let text = err.to_string();
    assert!(text.contains("(500)") && text.contains(expected), "{text}");
    assert!(text.contains(&format!("database {}: ", db.display())), "{text}");
    if !release {
        assert_eq!(holders(&c), before, "a refused request changed the ledger");
    }
    // Still serving, job 1 still holds its backend.
    assert!(r.is_running(), "the registry died on a full disk: {}", r.log());
    assert_eq!(c.status().unwrap().counts_for(None).in_use, if release { 2 } else { 1 });

    unfill().unwrap();
    if release {
        c.release(&job(n)).unwrap();
    }
    let a = c.request(&job(99_999), 2, "wn02", VgpgpuMethod::Vcl).unwrap();
    assert_eq!(a.backends.len(), 2);
    let live = holders(&c);
    assert_eq!(live.iter().filter(|(_, j)| j.as_deref() == Some("slurm:99999")).count(), 2, "{live:?}");
    assert!(live.iter().any(|(_, j)| j.as_deref() == Some("slurm:1")), "{live:?}");
    // And it is on disk: a kill -9 and restart keep it.
    r.restart().unwrap();
    assert_eq!(r.client().status().unwrap().counts_for(None).in_use, 3);
    drop(r);
}

#[test]
fn registry_refuses_naming_munge_while_munged_is_down_and_recovers_by_itself() {
    if !require_munge() {
        return;
    }
    let mut r = Registryd::start("").unwrap();
    r.register_many("GPU-munge", "node0", 2).unwrap();
    // A credential made while munged runs, sent while it does not: the
    // registry cannot check it and says why.
    let body = br#"{"job":"slurm:7","count":1,"node":"wn01","method":"rCUDA"}"#;
    let cred = r.credential(None, "POST", "/v1/request", body).unwrap();
    r.munged.stop();
    let (status, reply) = r.raw("POST", "/v1/request", Some(&format!("MUNGE {cred}")), body).unwrap();
    assert_eq!(status, 503, "{reply}");
    assert!(reply.contains("\"unavailable\"") && reply.contains("MUNGE: munged does not answer at"), "{reply}");
    assert!(reply.contains(&r.munged.socket().display().to_string()), "{reply}");
    // A client on this host cannot even make a credential: its error names MUNGE.
    let e = r.client().status().unwrap_err();
    assert!(e.to_string().starts_with("MUNGE: "), "{e}");
    assert!(r.is_running(), "{}", r.log());

    // munged back on the same socket: served again, no registry restart.
    r.munged.restart().unwrap();
    let (status, reply) = r.raw("POST", "/v1/request", Some(&format!("MUNGE {cred}")), body).unwrap();
    assert_eq!(status, 200, "the same credential, checked now: {reply}");
    assert!(reply.contains("slurm:7"), "{reply}");
    assert_eq!(r.client().status().unwrap().counts_for(None).in_use, 1);
    assert!(r.is_running());
}
