//! A fake `nvidia-cuda-mps-control` for tests, invoked as the real one:
//! `-d` starts the control daemon in the background, listening in
//! `CUDA_MPS_PIPE_DIRECTORY`; without `-d`, each line of stdin is a command
//! sent to that daemon and its answer is printed. Answers follow what the
//! real daemon printed on an H100 (driver 580): percentages as `25.0`,
//! nothing for the pinned-memory commands, server pids for
//! `get_server_list` (none here: no CUDA client ever connects to a fake).
//! The daemon appends every command to `CUDA_MPS_LOG_DIRECTORY/control.log`
//! as the real one does (`[time Control pid] Cmd:…`), for a test to read.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn pipe_dir() -> PathBuf {
    std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").map_or_else(|| PathBuf::from("/tmp/nvidia-mps"), PathBuf::from)
}

fn log_dir() -> PathBuf {
    std::env::var_os("CUDA_MPS_LOG_DIRECTORY").map_or_else(|| PathBuf::from("/var/log/nvidia-mps"), PathBuf::from)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("-d") => daemonize(),
        Some("--serve") => serve(),
        Some(other) => {
            eprintln!("fake-mps-control: unknown option {other}");
            ExitCode::from(2)
        }
        None => client(),
    }
}

fn daemonize() -> ExitCode {
    let control = pipe_dir().join("control");
    if UnixStream::connect(&control).is_ok() {
        eprintln!("An instance of this daemon is already running");
        return ExitCode::FAILURE;
    }
    let _ = std::fs::remove_file(&control);
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("fake-mps-control: {e}");
            return ExitCode::FAILURE;
        }
    };
    let spawned =
        Command::new(exe).arg("--serve").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
    if let Err(e) = spawned {
        eprintln!("fake-mps-control: cannot start the daemon: {e}");
        return ExitCode::FAILURE;
    }
    // The real -d returns once the daemon is up.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if UnixStream::connect(&control).is_ok() {
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("fake-mps-control: the daemon did not come up in {}", pipe_dir().display());
    ExitCode::FAILURE
}

fn log(line: &str) {
    let _ = std::fs::create_dir_all(log_dir());
    let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let entry = format!("[{}.{:03} Control {}] {line}\n", t.as_secs(), t.subsec_millis(), std::process::id());
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log_dir().join("control.log")) {
        let _ = f.write_all(entry.as_bytes());
    }
}

/// The daemon's settings.
#[derive(Default)]
struct State {
    thread_percent: Option<f64>,
    pinned: BTreeMap<String, String>,
}

fn answer(state: &mut State, command: &str) -> (String, bool) {
    let words: Vec<&str> = command.split_whitespace().collect();
    let percent = |s: &str| s.parse::<f64>().ok().filter(|p| (0.0..=100.0).contains(p));
    match words.as_slice() {
        ["get_default_active_thread_percentage"] => (format!("{:.1}", state.thread_percent.unwrap_or(100.0)), false),
        ["set_default_active_thread_percentage", p] => match percent(p) {
            Some(p) => {
                state.thread_percent = Some(p);
                (format!("{p:.1}"), false)
            }
            None => ("Invalid percentage".into(), false),
        },
        ["set_default_device_pinned_mem_limit", dev, value] => {
            state.pinned.insert(dev.to_string(), value.to_string());
            (String::new(), false)
        }
        ["get_default_device_pinned_mem_limit", ..] => (String::new(), false),
        ["get_server_list"] => (String::new(), false),
        ["quit"] => (String::new(), true),
        _ => (format!("Unrecognized command {command}"), false),
    }
}

fn serve() -> ExitCode {
    let dir = pipe_dir();
    let control = dir.join("control");
    let listener = match UnixListener::bind(&control) {
        Ok(l) => l,
        Err(e) => {
            log(&format!("cannot listen on {}: {e}", control.display()));
            return ExitCode::FAILURE;
        }
    };
    // Any local user may connect, as to the real daemon started by root:
    // only the pipe directory's permissions keep others out.
    let _ = std::fs::set_permissions(&control, std::os::unix::fs::PermissionsExt::from_mode(0o777));
    let _ = listener.set_nonblocking(true);
    log(&format!(
        "Starting control daemon CUDA_VISIBLE_DEVICES={}",
        std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default()
    ));
    let mut state = State::default();
    loop {
        match listener.accept() {
            Ok((mut stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let mut line = String::new();
                let _ = std::io::BufReader::new(&stream).read_line(&mut line);
                let command = line.trim();
                // `-d` looks for a running daemon by connecting: no command.
                if command.is_empty() {
                    continue;
                }
                log(&format!("Cmd:{command}"));
                let (reply, quit) = answer(&mut state, command);
                if !reply.is_empty() {
                    log(&reply);
                }
                let _ = stream.write_all(reply.as_bytes());
                drop(stream);
                if quit {
                    log("Exit with status 0");
                    let _ = std::fs::remove_file(&control);
                    return ExitCode::SUCCESS;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // A test that removed its directories ends its daemon.
                if !Path::new(&control).exists() {
                    return ExitCode::SUCCESS;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn client() -> ExitCode {
    let control = pipe_dir().join("control");
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let command = line.trim();
        if command.is_empty() {
            continue;
        }
        let Ok(mut stream) = UnixStream::connect(&control) else {
            println!("Cannot find MPS control daemon process");
            return ExitCode::FAILURE;
        };
        let _ = stream.write_all(format!("{command}\n").as_bytes());
        let mut reply = String::new();
        let _ = stream.read_to_string(&mut reply);
        if !reply.is_empty() {
            println!("{reply}");
        }
    }
    ExitCode::SUCCESS
}
