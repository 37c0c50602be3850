//! No import circle, at the crate level or inside a crate.
//!
//! Crates: the workspace's dependency graph from `cargo metadata` (normal
//! and build dependencies; dev-dependencies may point back, as Cargo
//! allows) must have no cycle.
//!
//! Modules, per library crate: every file under its `src/` (not `src/bin/`)
//! is a module (`a.rs` and `a/mod.rs` are `a`, `a/b.rs` is `a::b`). Module A
//! imports module B when A's code outside its tests names a path
//! `crate::…`, `$crate::…` or `super::…` that resolves to B (the longest
//! prefix that is a module; one level of `{…}` groups is followed). Macro
//! bodies are code of the module that writes them, and a `#[macro_export]`
//! macro named at the crate root resolves to that module. A name the crate
//! root re-exports resolves to the module it comes from. The crate root is a
//! module of its own when lib.rs holds items beside `mod` and `pub use`
//! declarations: naming those items imports it, and their code's paths to
//! the crate's modules are its imports. A module naming its own sub-modules
//! is structure, not a dependency. Doc comments and everything from the
//! first `#[cfg(test)]` on are not read. The graph must have no cycle; the
//! test names every cycle it finds with one path for each of its edges.

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

/// The module paths (from the crate root) that `code` names with `crate::`,
/// `$crate::` or `super::`, before resolution to modules.
fn named_paths(code: &str, module: &str, is_mod_file: bool) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::").chain(code.match_indices("super::")) {
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
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
        out.extend(with_group(base, rest));
    }
    out
}

/// `prefix` followed by the path at the start of `rest`, one per item of a
/// `{…}` group.
fn with_group(mut prefix: Vec<String>, rest: &str) -> Vec<Vec<String>> {
    let (segs, after) = ident_chain(rest);
    prefix.extend(segs);
    let Some(group) = after.strip_prefix('{') else { return vec![prefix] };
    let group = &group[..group.find('}').unwrap_or(group.len())];
    let mut out = Vec::new();
    for item in group.split(',') {
        let (more, _) = ident_chain(item.trim());
        let mut p = prefix.clone();
        p.extend(more.into_iter().filter(|s| s != "self"));
        out.push(p);
    }
    out
}

/// Paths in the crate root's own code that start at one of its modules
/// without `crate::` (`sys::log(…)`, `use self::a::X`).
fn root_relative_paths(code: &str, top: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, c) in code.char_indices() {
        let before = code[..i].chars().last();
        if !(c.is_alphabetic() || c == '_')
            || before.is_some_and(|b| b.is_alphanumeric() || b == '_' || b == ':' || b == '$')
        {
            continue;
        }
        let rest = code[i..].strip_prefix("self::").unwrap_or(&code[i..]);
        let (segs, _) = ident_chain(rest);
        if segs.len() > 1 && top.contains(&segs[0]) {
            out.extend(with_group(Vec::new(), rest));
        }
    }
    out
}

/// `code` without its `mod x;` and `pub use …;` declarations: what is left of
/// a crate root is code whose references are imports.
fn without_structure(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while !rest.is_empty() {
        let line_end = rest.find('\n').map_or(rest.len(), |n| n + 1);
        let line = rest[..line_end].trim_start();
        let is_use = ["pub use ", "pub(crate) use "].iter().any(|k| line.starts_with(k));
        let is_mod = ["mod ", "pub mod ", "pub(crate) mod "].iter().any(|k| line.starts_with(k));
        let ends = rest.find(';').map_or(rest.len(), |n| n + 1);
        if is_use || (is_mod && !rest[..ends].contains('{')) {
            rest = &rest[ends..];
        } else {
            out.push_str(&rest[..line_end]);
            rest = &rest[line_end..];
        }
    }
    out
}

/// Whether a crate root holds items of its own, beside declaring modules and
/// re-exporting.
fn has_items(root_code: &str) -> bool {
    let kinds = [
        "fn ",
        "const ",
        "static ",
        "struct ",
        "enum ",
        "union ",
        "type ",
        "trait ",
        "impl",
        "macro_rules!",
        "unsafe ",
        "extern ",
    ];
    without_structure(root_code).lines().any(|line| {
        let mut line = line.trim_start();
        for vis in ["pub(crate) ", "pub(super) ", "pub "] {
            line = line.strip_prefix(vis).unwrap_or(line);
        }
        kinds.iter().any(|k| line.starts_with(k))
    })
}

/// The names a crate root re-exports (`pub use a::X;`, `pub use a::{X, Y as Z};`,
/// `pub use dep as d;`), each with the path it names.
fn root_reexports(root_code: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for (i, _) in root_code.match_indices("pub use ") {
        let decl = &root_code[i + "pub use ".len()..];
        let decl = &decl[..decl.find(';').unwrap_or(decl.len())];
        let decl = decl.strip_prefix("crate::").or_else(|| decl.strip_prefix("self::")).unwrap_or(decl);
        let (head, after) = ident_chain(decl);
        let items: Vec<(Vec<String>, &str)> = match after.trim_start().strip_prefix('{') {
            Some(group) => {
                group.trim_end().trim_end_matches('}').split(',').map(|item| ident_chain(item.trim())).collect()
            }
            None => vec![(Vec::new(), after)],
        };
        for (more, alias) in items {
            let mut path = head.clone();
            path.extend(more);
            let name = alias.trim().strip_prefix("as ").map(|a| a.trim().to_string()).or_else(|| path.last().cloned());
            if let Some(name) = name.filter(|n| !n.is_empty() && n != "*") {
                out.insert(name, path);
            }
        }
    }
    out
}

/// `#[macro_export]` macros sit at the crate root but are written in a module: each name with that module.
fn exported_macros(modules: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (module, code) in modules {
        for (i, _) in code.match_indices("#[macro_export]") {
            if let Some(at) = code[i..].find("macro_rules!") {
                let (name, _) = ident_chain(code[i + at + "macro_rules!".len()..].trim_start());
                if let Some(name) = name.first() {
                    out.insert(name.clone(), module.clone());
                }
            }
        }
    }
    out
}

fn code_of(text: &str) -> String {
    let text = &text[..text.find("#[cfg(test)]").unwrap_or(text.len())];
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// Module A → module B for each import of B's items by A's code. A crate
/// root whose file holds items of its own (not only `mod` and `pub use`) is
/// a module like the others: naming its items is an import of it, and its
/// code's references to its modules are imports of them. Macro bodies count
/// as code of the module that writes them.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    module_edges(src).into_iter().map(|(m, to)| (m, to.into_keys().collect())).collect()
}

/// [`module_graph`] with, for each edge, one path that makes it.
fn module_edges(src: &Path) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let paths: BTreeMap<String, PathBuf> = files.iter().map(|f| (module_of(src, f), f.clone())).collect();
    let code: BTreeMap<String, String> =
        paths.iter().map(|(m, f)| (m.clone(), code_of(&std::fs::read_to_string(f).unwrap()))).collect();
    let root_code = code.get("").cloned().unwrap_or_default();
    let root_items = has_items(&root_code);
    let reexports = root_reexports(&root_code);
    let macros = exported_macros(&code);
    let top: BTreeSet<String> = paths.keys().filter(|m| !m.is_empty() && !m.contains("::")).cloned().collect();
    let resolve = |path: &[String]| -> Option<String> {
        let target =
            (0..=path.len()).rev().map(|n| path[..n].join("::")).find(|p| paths.contains_key(p)).unwrap_or_default();
        if !target.is_empty() || path.is_empty() {
            return Some(target).filter(|t| !t.is_empty());
        }
        if let Some(module) = macros.get(&path[0]) {
            return Some(module.clone());
        }
        if let Some(origin) = reexports.get(&path[0]) {
            let origin = (0..=origin.len()).rev().map(|n| origin[..n].join("::")).find(|p| paths.contains_key(p));
            return origin.filter(|o| !o.is_empty());
        }
        root_items.then(String::new)
    };
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (module, file) in &paths {
        let is_root = module.is_empty();
        let is_mod_file = file.file_name().is_some_and(|n| n == "mod.rs" || n == "lib.rs");
        let edges = graph.entry(module.clone()).or_default();
        let mut named = Vec::new();
        if is_root {
            if root_items {
                let own = without_structure(&code[module]);
                named = named_paths(&own, module, is_mod_file);
                named.extend(root_relative_paths(&own, &top));
            }
        } else {
            named = named_paths(&code[module], module, is_mod_file);
        }
        for path in named {
            let Some(target) = resolve(&path) else { continue };
            let own_part = !is_root && target.starts_with(&format!("{module}::"));
            if &target == module || own_part {
                continue;
            }
            edges.entry(target).or_insert_with(|| format!("crate::{}", path.join("::")));
        }
    }
    graph
}

/// A module cycle as `a -(crate::b::f)-> b -(…)-> a`, the crate root named `crate`.
fn describe(cycle: &[String], edges: &BTreeMap<String, BTreeMap<String, String>>) -> String {
    let name = |m: &str| if m.is_empty() { "crate".to_string() } else { m.to_string() };
    let mut out = name(&cycle[0]);
    for pair in cycle.windows(2) {
        out.push_str(&format!(" -({})-> {}", edges[&pair[0]][&pair[1]], name(&pair[1])));
    }
    out
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
fn macro_bodies_are_code_of_the_module_that_writes_them() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod c;\n").unwrap();
    std::fs::write(src.join("a.rs"), "#[macro_export]\nmacro_rules! export {\n    () => { $crate::b::run(); };\n}\n")
        .unwrap();
    std::fs::write(src.join("b.rs"), "pub fn run() {}\ncrate::export!();\n").unwrap();
    std::fs::write(src.join("c.rs"), "macro_rules! local {\n    () => { crate::b::run() };\n}\n").unwrap();
    let graph = module_graph(src);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_string()]));
    assert_eq!(graph["b"], BTreeSet::from(["a".to_string()]));
    assert_eq!(graph["c"], BTreeSet::from(["b".to_string()]));
    let found = cycles(&graph);
    assert_eq!(found, vec![vec!["a".to_string(), "b".to_string(), "a".to_string()]]);
    let edges = module_edges(src);
    assert_eq!(describe(&found[0], &edges), "a -(crate::b::run)-> b -(crate::export)-> a");
}

#[test]
fn a_crate_root_with_items_is_a_module() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let root = "pub mod a;\npub mod b;\nmod c;\npub use b::{Shared, Other as Renamed};\npub use dep as ffi;\n\npub fn helper() -> a::Part {\n    a::Part\n}\n";
    std::fs::write(src.join("lib.rs"), root).unwrap();
    std::fs::write(src.join("a.rs"), "pub struct Part;\npub fn g() {\n    crate::helper();\n}\n").unwrap();
    std::fs::write(src.join("b.rs"), "pub struct Shared;\npub struct Other;\n").unwrap();
    std::fs::write(src.join("c.rs"), "use crate::{Renamed, ffi::Raw};\nuse super::Shared;\n").unwrap();
    let graph = module_graph(src);
    assert_eq!(graph[""], BTreeSet::from(["a".to_string()]));
    assert_eq!(graph["a"], BTreeSet::from(["".to_string()]));
    assert_eq!(graph["c"], BTreeSet::from(["b".to_string()]));
    let found = cycles(&graph);
    assert_eq!(found, vec![vec!["".to_string(), "a".to_string(), "".to_string()]]);
    assert_eq!(describe(&found[0], &module_edges(src)), "crate -(crate::a::Part)-> a -(crate::helper)-> crate");

    // Declaring modules and re-exporting makes the root no module of its own.
    std::fs::write(
        src.join("lib.rs"),
        "pub mod a;\npub mod b;\nmod c;\npub use b::{\n    Shared,\n    Other as Renamed,\n};\n",
    )
    .unwrap();
    let graph = module_graph(src);
    assert_eq!(graph[""], BTreeSet::new());
    assert_eq!(graph["a"], BTreeSet::new());
    assert!(cycles(&graph).is_empty());
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
            let edges = module_edges(src);
            let graph = edges.iter().map(|(m, to)| (m.clone(), to.keys().cloned().collect())).collect();
            for cycle in cycles(&graph) {
                report.push(format!("{}: {}", package["name"].as_str().unwrap(), describe(&cycle, &edges)));
            }
        }
    }
    assert!(crates >= 10, "only {crates} library crates found");
    assert!(report.is_empty(), "import circles:\n{}", report.join("\n"));
}

#[test]
fn no_crate_depends_on_itself_through_others() {
    let meta = metadata();
    let names: BTreeSet<String> =
        meta["packages"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_string()).collect();
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
    assert!(
        graph.get("cder-registry").is_some_and(|d| d.contains("cder-ledger") && !d.contains("cderd")),
        "{:?}",
        graph.get("cder-registry")
    );
    let found = cycles(&graph);
    assert!(found.is_empty(), "crate circles: {found:?}");
}
