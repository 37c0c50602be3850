//! `cder-test-vgpgpu-backend HOST PORT UUID PIDFILE`: a stand-in for an
//! rCUDA/VCL server in a container, for tests and the demo (neither GPUs
//! nor container runtimes are on test machines). It listens on HOST:PORT
//! and answers every connection with one line naming itself and the
//! device it is pinned to (`CUDA_VISIBLE_DEVICES` / `GPU_DEVICE_ORDINAL`).

use std::io::Write;
use std::net::TcpListener;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [host, port, uuid, pidfile] = args.as_slice() else {
        eprintln!("usage: cder-test-vgpgpu-backend HOST PORT UUID PIDFILE");
        return ExitCode::from(2);
    };
    let listener = match TcpListener::bind(format!("{host}:{port}")) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cder-test-vgpgpu-backend: {host}:{port}: {e}");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = std::fs::write(pidfile, format!("{}\n", std::process::id())) {
        eprintln!("cder-test-vgpgpu-backend: {pidfile}: {e}");
        return ExitCode::from(1);
    }
    let device =
        std::env::var("CUDA_VISIBLE_DEVICES").or_else(|_| std::env::var("GPU_DEVICE_ORDINAL")).unwrap_or_default();
    let banner = format!("vgpgpu-backend uuid={uuid} host={host} port={port} device={device}\n");
    for stream in listener.incoming().flatten() {
        let mut s = stream;
        let _ = s.write_all(banner.as_bytes());
    }
    ExitCode::SUCCESS
}
