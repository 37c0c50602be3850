//! No import circle, at the crate level or inside a crate (issue 13).
//!
//! Crates: the workspace's dependency graph from `cargo metadata` (normal
//! and build dependencies; dev-dependencies may point back, as Cargo
//! allows) must have no cycle.
//!
//! Modules, per library crate: every file under its `src/` (not `src/bin/`)
//! is a module (`a.rs` and `a/mod.rs` are `a`, `a/b.rs` is `a::b`). Module A
//! imports module B when A's code outside its tests names a path
//! `crate::…` or `super::…` that resolves to B (the longest prefix that is a
//! module; one level of `{…}` groups is followed). Two kinds of reference
//! are not imports: to the crate root (lib.rs only declares modules and
//! re-exports), and from a module to its own sub-modules (a parent naming
//! its parts is structure, not a dependency). Doc comments, `$crate::`
//! in macro bodies and everything from the first `#[cfg(test)]` on are not
//! read. The graph must have no cycle; the test names every cycle it finds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let out = Command::new(cargo)
        .args(["metadata", "--no-deps", "--offline", "--format-version", "1"])
        .current_dir(&root)
        .output()
        .expect("running cargo metadata");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("cargo metadata JSON")
}

/// Every cycle of `graph`, each once, as a path that ends where it starts.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            found.push(cycle);
            return;
        }
        if done.contains(node) {
            return;
        }
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, stack, done, found);
        }
        stack.pop();
        done.insert(node.to_string());
    }
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(node, graph, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "bin") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `a::b` for `src/a/b.rs` and `src/a/b/mod.rs`; "" for the crate root.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts.join("::")
}

fn ident_chain(text: &str) -> (Vec<String>, &str) {
    let mut segs = Vec::new();
    let mut rest = text;
    loop {
        let len = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if len == 0 {
            break;
        }
        segs.push(rest[..len].to_string());
        rest = &rest[len..];
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    (segs, rest)
}

/// The module paths (from the crate root) that `code` names with `crate::`
/// or `super::`, before resolution to modules.
fn named_paths(code: &str, module: &str, is_mod_file: bool) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::").chain(code.match_indices("super::")) {
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c == '$' || c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut base: Vec<String> = Vec::new();
        let mut rest = &code[i..];
        if let Some(r) = rest.strip_prefix("crate::") {
            rest = r;
        } else {
            // A file's `super` is its parent module; `a/mod.rs` is `a` itself.
            base = module.split("::").filter(|s| !s.is_empty()).map(String::from).collect();
            if !is_mod_file || !base.is_empty() {
                base.pop();
            }
            while let Some(r) = rest.strip_prefix("super::") {
                rest = r;
                if rest.starts_with("super::") {
                    base.pop();
                }
            }
        }
        let (segs, after) = ident_chain(rest);
        let mut prefix = base.clone();
        prefix.extend(segs);
        if let Some(group) = after.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let (more, _) = ident_chain(item.trim());
                let mut p = prefix.clone();
                p.extend(more.into_iter().filter(|s| s != "self"));
                out.push(p);
            }
        } else {
            out.push(prefix);
        }
    }
    out
}

fn code_of(text: &str) -> String {
    let text = &text[..text.find("#[cfg(test)]").unwrap_or(text.len())];
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<String, PathBuf> = files.iter().map(|f| (module_of(src, f), f.clone())).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &modules {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let is_mod_file = file.file_name().is_some_and(|n| n == "mod.rs" || n == "lib.rs");
        let edges = graph.entry(module.clone()).or_default();
        for path in named_paths(&code, module, is_mod_file) {
            let target = (0..=path.len()).rev().map(|n| path[..n].join("::")).find(|p| modules.contains_key(p)).unwrap_or_default();
            let own_part = module.is_empty() || target.starts_with(&format!("{module}::"));
            if target.is_empty() || &target == module || own_part {
                continue;
            }
            edges.insert(target);
        }
    }
    graph
}

#[test]
fn the_rule_finds_a_circle_and_ignores_structure() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod a; pub mod b;\npub use a::X;\n").unwrap();
    std::fs::write(src.join("a/mod.rs"), "pub mod c;\npub use c::Y;\nuse crate::b::Z;\n").unwrap();
    std::fs::write(src.join("a/c.rs"), "use super::super::b::{self, W};\n/// [`crate::a`]\n").unwrap();
    std::fs::write(src.join("b.rs"), "use crate::{a::c::Y, Root};\n#[cfg(test)]\nuse crate::a::X;\n").unwrap();
    let graph = module_graph(src);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(graph["a::c"], BTreeSet::from(["b".to_string()]));
    assert_eq!(graph["b"], BTreeSet::from(["a::c".to_string()]));
    assert_eq!(graph[""], BTreeSet::new());
    let found = cycles(&graph);
    assert_eq!(found, vec![vec!["b".to_string(), "a::c".to_string(), "b".to_string()]]);
}

#[test]
fn no_module_imports_in_a_circle() {
    let meta = metadata();
    let mut report = Vec::new();
    let mut crates = 0;
    for package in meta["packages"].as_array().unwrap() {
        for target in package["targets"].as_array().unwrap() {
            let kinds: Vec<&str> = target["kind"].as_array().unwrap().iter().filter_map(|k| k.as_str()).collect();
            if !kinds.iter().any(|k| matches!(*k, "lib" | "rlib" | "cdylib" | "staticlib")) {
                continue;
            }
            let src = Path::new(target["src_path"].as_str().unwrap()).parent().unwrap();
            crates += 1;
            for cycle in cycles(&module_graph(src)) {
                report.push(format!("{}: {}", package["name"].as_str().unwrap(), cycle.join(" -> ")));
            }
        }
    }
    assert!(crates >= 10, "only {crates} library crates found");
    assert!(report.is_empty(), "import circles:\n{}", report.join("\n"));
}

#[test]
fn no_crate_depends_on_itself_through_others() {
    let meta = metadata();
    let names: BTreeSet<String> = meta["packages"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_string()).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for package in meta["packages"].as_array().unwrap() {
        let edges = graph.entry(package["name"].as_str().unwrap().to_string()).or_default();
        for dep in package["dependencies"].as_array().unwrap() {
            let name = dep["name"].as_str().unwrap();
            if dep["kind"].as_str() != Some("dev") && names.contains(name) {
                edges.insert(name.to_string());
            }
        }
    }
    assert!(graph.get("cder-registry").is_some_and(|d| d.contains("cder-ledger") && !d.contains("cderd")), "{:?}", graph.get("cder-registry"));
    let found = cycles(&graph);
    assert!(found.is_empty(), "crate circles: {found:?}");
}
