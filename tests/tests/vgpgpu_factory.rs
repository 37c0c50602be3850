//! cder-vgpgpu-factory against a real cder-registryd and munged. The
//! launcher starts `cder-test-vgpgpu-backend`, a small TCP server per
//! device standing in for an rCUDA/VCL server in a container (no container
//! runtime or GPU on test machines); two "nodes" are the loopback
//! addresses 127.0.0.2 and 127.0.0.3.

use cder_model::VgpgpuMethod;
use cder_registry::api::QueryName;
use cder_tests::munge::require_munge;
use cder_tests::vgpgpu::{banner, binary, factory_once, kill_backends, node_config, Registryd};

struct Cleanup(std::path::PathBuf);
impl Drop for Cleanup {
    fn drop(&mut self) {
        kill_backends(&self.0);
    }
}

#[test]
fn factory_starts_reuses_and_retires_backends() {
    if !require_munge() {
        return;
    }
    let r = Registryd::start("").unwrap();
    let _cleanup = Cleanup(r.dir().to_path_buf());
    let backend = binary("cder-tests", "cder-test-vgpgpu-backend").unwrap();
    let a = node_config(&r, &backend, "127.0.0.2", "nvidia", &[(0, "GPU-aaaa-0"), (1, "GPU-aaaa-1")]).unwrap();
    let b = node_config(&r, &backend, "127.0.0.3", "amd", &[(0, "ignored-on-amd")]).unwrap();

    let (code, out, err) = factory_once(&a).unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 reused, 2 started"), "{out}{err}");
    let (code, out, err) = factory_once(&b).unwrap();
    assert_eq!((code, out.contains("1 started")), (0, true), "{out}{err}");

    let c = r.client();
    let status = c.status().unwrap();
    assert_eq!(status.backends.len(), 3);
    // NVIDIA: the hardware UUID; AMD: host plus device.
    let uuids: Vec<&str> = status.backends.iter().map(|b| b.uuid.as_str()).collect();
    assert_eq!(uuids, ["GPU-aaaa-0", "GPU-aaaa-1", "127.0.0.3:gpgpu0"]);
    assert_eq!(c.query(QueryName::Total, Some(VgpgpuMethod::Rcuda)).unwrap(), 2, "rCUDA is NVIDIA-only");
    assert_eq!(c.query(QueryName::Total, Some(VgpgpuMethod::Vcl)).unwrap(), 3);
    // Each backend serves its registered endpoint, pinned to its own device.
    for s in &status.backends {
        let line = banner(&s.host, s.port).unwrap();
        assert!(line.contains(&format!("uuid={}", s.uuid)) && line.contains(&format!("device={}", s.device)), "{line}");
    }

    // A restarted factory reuses the running backends (same endpoints).
    let (code, out, err) = factory_once(&a).unwrap();
    assert_eq!((code, out.contains("2 reused, 0 started")), (0, true), "{out}{err}");
    assert_eq!(c.status().unwrap().backends, status.backends);

    // GPU 1 disappears from node a: unregistered and its backend stopped.
    let gone = status.backends.iter().find(|b| b.uuid == "GPU-aaaa-1").unwrap().clone();
    let a = node_config(&r, &backend, "127.0.0.2", "nvidia", &[(0, "GPU-aaaa-0")]).unwrap();
    let (code, out, err) = factory_once(&a).unwrap();
    assert_eq!((code, out.contains("1 reused, 0 started, 0 failed, 1 unregistered")), (0, true), "{out}{err}");
    assert_eq!(c.query(QueryName::Total, None).unwrap(), 2);
    let stopped =
        cder_testkit::wait_for_value(std::time::Duration::from_secs(10), std::time::Duration::from_millis(100), || {
            banner(&gone.host, gone.port).is_err().then_some(())
        });
    assert!(stopped.is_some(), "the stop command did not stop {}:{}", gone.host, gone.port);
    // It comes back: same UUID, same endpoint, a fresh backend.
    let a = node_config(&r, &backend, "127.0.0.2", "nvidia", &[(0, "GPU-aaaa-0"), (1, "GPU-aaaa-1")]).unwrap();
    let (code, out, err) = factory_once(&a).unwrap();
    assert_eq!((code, out.contains("1 reused, 1 started")), (0, true), "{out}{err}");
    let back = c.status().unwrap().backends.into_iter().find(|b| b.uuid == "GPU-aaaa-1").unwrap();
    assert_eq!((back.host, back.port), (gone.host, gone.port));
}

#[test]
fn factory_refuses_bad_config() {
    if !require_munge() {
        return;
    }
    let r = Registryd::start("").unwrap();
    let path = r.dir().join("bad.toml");
    let base = std::fs::read_to_string(r.config_path()).unwrap();
    std::fs::write(&path, format!("{base}\n[registry.factory]\nlauncher = [\"run\", \"{{gpu}}\"]\n")).unwrap();
    let (code, _, err) = factory_once(&path).unwrap();
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("registry.factory.launcher") && err.contains("{gpu}"), "{err}");
    std::fs::write(&path, base).unwrap();
    let (code, _, err) = factory_once(&path).unwrap();
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("[registry.factory]"), "{err}");
}
