//! `[node.batch]` under the real cderd binary, against stand-ins for the
//! batch system's commands: TORQUE's `pbsnodes` (no
//! pbs_server is packaged, so its tests run on fakes, as the glue
//! provider's do) and an `scontrol` that keeps the node's state in files or
//! never answers. The real SLURM releases are
//! `cder-tests --test cluster slurm_drain::`.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cder_protocol::AllocRequest;
use common::{Node, Options};

/// Writes an executable shell script.
fn script(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A stand-in for TORQUE's `pbsnodes` keeping node `wn1`'s state and note
/// in files of `dir` (`state`, `note`), every call appended to `calls`;
/// while `dir/hang` exists it never answers.
fn fake_pbsnodes(dir: &Path) -> PathBuf {
    let d = dir.display();
    std::fs::write(dir.join("state"), "free\n").unwrap();
    std::fs::write(dir.join("note"), "").unwrap();
    let path = dir.join("pbsnodes");
    script(
        &path,
        &format!(
            r#"#!/bin/sh
d='{d}'
echo "$*" >> "$d/calls"
[ -e "$d/hang" ] && exec sleep 6001
case "$1" in
  -x) [ "$2" = wn1 ] || {{ echo "pbsnodes: Unknown node  MSG=cannot locate specified node" >&2; exit 1; }}
      n=''; [ -s "$d/note" ] && n="<note>$(sed 's/&/\&amp;/g; s/</\&lt;/g' "$d/note")</note>"
      echo "<Data><Node><name>wn1</name><state>$(cat "$d/state")</state><np>8</np>$n<ntype>cluster</ntype></Node></Data>"
      exit 0 ;;
  -o) [ "$2" = -N ] && [ "$4" = wn1 ] || exit 2; printf '%s' "$3" > "$d/note"; echo offline > "$d/state"; exit 0 ;;
  -c) [ "$2" = -N ] && [ "$4" = wn1 ] || exit 2; printf '%s' "$3" > "$d/note"; echo free > "$d/state"; exit 0 ;;
esac
exit 2
"#
        ),
    );
    path
}

/// A stand-in for `scontrol` keeping node `wn1`'s state and reason in
/// files of `dir`, as SLURM prints them; while `dir/hang` exists it never
/// answers.
fn fake_scontrol(dir: &Path, state: &str, reason: &str) -> PathBuf {
    let d = dir.display();
    std::fs::write(dir.join("state"), state).unwrap();
    std::fs::write(dir.join("reason"), reason).unwrap();
    let path = dir.join("scontrol");
    script(
        &path,
        &format!(
            r#"#!/bin/sh
d='{d}'
echo "$*" >> "$d/calls"
[ -e "$d/hang" ] && exec sleep 6001
if [ "$1 $2 $3" = "-o show node" ]; then
  [ "$4" = wn1 ] || {{ echo "Node $4 not found" >&2; exit 1; }}
  r=''; [ -s "$d/reason" ] && r=" Reason=$(cat "$d/reason") [root@2025-01-01T00:00:00]"
  echo "NodeName=wn1 Arch=x86_64 OS=Linux 6.1 #1 SMP State=$(cat "$d/state") ThreadsPerCore=1 CurrentWatts=0$r"
  exit 0
fi
[ "$1" = update ] || exit 2
for a in "$@"; do case "$a" in State=*) st="${{a#State=}}" ;; Reason=*) reason="${{a#Reason=}}" ;; esac; done
case "$st" in
  DRAIN) printf 'IDLE+DRAIN' > "$d/state"; printf '%s' "$reason" > "$d/reason" ;;
  UNDRAIN) printf 'IDLE' > "$d/state"; : > "$d/reason" ;;
  *) exit 2 ;;
esac
"#
        ),
    );
    path
}

fn batch_node(n: u32, batch: &str) -> Node {
    Node::with(
        n,
        Options {
            enforcement: Some(format!("nvml_exclusive_process = false\n[node.batch]\nnode_name = \"wn1\"\n{batch}")),
            rust_log: Some("info".into()),
            ..Options::default()
        },
    )
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default().trim_end().to_string()
}

fn wait_files(dir: &Path, node: &Node, what: &str, ok: impl Fn(&str, &str) -> bool, files: (&str, &str)) {
    let seen = cder_testkit::wait_for_value(Duration::from_secs(60), Duration::from_millis(100), || {
        ok(&read(dir, files.0), &read(dir, files.1)).then_some(())
    });
    assert!(
        seen.is_some(),
        "{what}: {} {:?} {} {:?}; calls:\n{}\ncderd:\n{}",
        files.0,
        read(dir, files.0),
        files.1,
        read(dir, files.1),
        read(dir, "calls"),
        node.log()
    );
}

fn wait_log(node: &Node, needle: &str) {
    let seen = cder_testkit::wait_for_value(Duration::from_secs(60), Duration::from_millis(100), || {
        node.log().contains(needle).then_some(())
    });
    assert!(seen.is_some(), "cderd never logged {needle:?}:\n{}", node.log());
}

/// TORQUE gets the equivalent: `pbsnodes -o -N "cder: …"` while a device
/// is kept out, `pbsnodes -c -N ""` once it is back; a node an admin put
/// offline (a note not cder's) is left as it is either way.
#[test]
fn torque_nodes_go_offline_with_a_note_and_only_cders_own_come_back() {
    let fakes = tempfile::tempdir().unwrap();
    let pbsnodes = fake_pbsnodes(fakes.path());
    let node = batch_node(2, &format!("drain_node = \"torque\"\npbsnodes = {pbsnodes:?}\ntimeout_s = 5"));
    let dir = fakes.path();
    wait_log(&node, "a device kept out of the pool drains this node in TORQUE");
    let mut c = node.client();
    c.drain("gpgpu:1", "fan \"loud\"").unwrap();
    let want = format!("cder: gpgpu:1 ({}) kept out: drained (fan _loud_)", node.devices[1].display());
    wait_files(dir, &node, "offline with cder's note", |s, n| s == "offline" && n == want, ("state", "note"));
    assert!(read(dir, "calls").contains(&format!("-o -N {want} wn1")), "{}", read(dir, "calls"));
    c.resume("gpgpu:1").unwrap();
    wait_files(dir, &node, "back, note cleared", |s, n| s == "free" && n.is_empty(), ("state", "note"));
    wait_log(&node, "returned the node to TORQUE");
    // An admin's offline node: cder neither rewrites its note nor clears it.
    let before = read(dir, "calls").lines().count();
    std::fs::write(dir.join("state"), "offline").unwrap();
    std::fs::write(dir.join("note"), "admin: disk").unwrap();
    c.drain("gpgpu:0", "second").unwrap();
    wait_log(&node, "TORQUE has drained the node already, not cder (reason: admin: disk)");
    c.resume("gpgpu:0").unwrap();
    wait_log(&node, "TORQUE has the node drained, not by cder (reason: admin: disk)");
    assert_eq!((read(dir, "state"), read(dir, "note")), ("offline".to_string(), "admin: disk".to_string()));
    let calls = read(dir, "calls");
    let since: Vec<&str> = calls.lines().skip(before).collect();
    assert!(since.iter().all(|c| c.starts_with("-x ")), "cder changed a node it had not put offline: {since:?}");
}

/// scontrol (slurmctld) that never answers costs no request anything: the
/// drain runs on a thread of its own, off the ledger lock, each call killed
/// at `timeout_s`, and is tried again until it lands.
#[test]
fn a_batch_system_that_never_answers_holds_no_request_and_is_tried_again() {
    let fakes = tempfile::tempdir().unwrap();
    let dir = fakes.path();
    let scontrol = fake_scontrol(dir, "IDLE", "");
    std::fs::write(dir.join("hang"), "").unwrap();
    let node = batch_node(2, &format!("drain_node = \"slurm\"\nscontrol = {scontrol:?}\ntimeout_s = 1"));
    let mut c = node.client();
    let t = Instant::now();
    c.drain("gpgpu:0", "fan").unwrap();
    let request =
        |job: &str| AllocRequest { devices: Some(vec![1]), ..AllocRequest::new(job.parse().unwrap(), 4321, 1) };
    c.alloc(&request("slurm:1")).unwrap();
    c.release(&"slurm:1".parse().unwrap()).unwrap();
    c.status().unwrap();
    assert!(t.elapsed() < Duration::from_secs(1), "requests waited for scontrol: {:?}\n{}", t.elapsed(), node.log());
    wait_log(&node, "killed after 1 s without an answer");
    // Every scontrol that hung was killed, not left behind.
    let hung = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .filter(|c| c.starts_with(b"sleep\x006001\x00"))
            .count()
    };
    let all_ended = cder_testkit::wait_for_value(Duration::from_secs(10), Duration::from_millis(100), || {
        (hung() == 0).then_some(())
    });
    assert!(all_ended.is_some(), "{} scontrol still hang after their deadline", hung());
    // slurmctld answers again: the drain lands.
    std::fs::remove_file(dir.join("hang")).unwrap();
    let want = format!("cder: gpgpu:0 ({}) kept out: drained (fan)", node.devices[0].display());
    wait_files(dir, &node, "drained once scontrol answers", |s, r| s == "IDLE+DRAIN" && r == want, ("state", "reason"));
}

/// A drain of cder's left from before a restart, with nothing kept out any
/// more, is returned at start; an admin's is not.
#[test]
fn after_a_restart_only_cders_own_drain_is_returned() {
    let fakes = tempfile::tempdir().unwrap();
    let dir = fakes.path();
    let scontrol = fake_scontrol(dir, "IDLE+DRAIN", "admin: memory test");
    let mut node = batch_node(1, &format!("drain_node = \"slurm\"\nscontrol = {scontrol:?}\ntimeout_s = 5"));
    wait_log(&node, "SLURM has the node drained, not by cder (reason: admin: memory test): left as it is");
    node.kill();
    std::fs::write(dir.join("reason"), "cder: gpgpu:0 (/dev/nvidia0) kept out: drained (old)").unwrap();
    node.start();
    wait_files(dir, &node, "returned", |s, r| s == "IDLE" && r.is_empty(), ("state", "reason"));
    assert!(read(dir, "calls").contains("update NodeName=wn1 State=UNDRAIN"), "{}", read(dir, "calls"));
}
