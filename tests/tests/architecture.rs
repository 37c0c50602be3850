//! No import circle, at the crate level or inside a crate.
//!
//! Crates: the workspace's dependency graph from `cargo metadata` (normal
//! and build dependencies; dev-dependencies may point back, as Cargo
//! allows) must have no cycle.
//!
//! Modules, per crate: every target of every package that is a crate of
//! its own — libraries, cdylibs, binaries (`src/main.rs` and `src/bin/*`)
//! and build scripts; not tests, benches or examples — is read as Rust
//! with `syn`, from its root file along its `mod` declarations (a file, a
//! `#[path]` file or an inline `mod x { … }`). A module is named by its
//! path from the root (`a::b`; the root is `crate`). Module A imports
//! module B when A's code names B or an item B defines: every leaf of
//! every `use` tree (nested groups, `self`, `super`, `crate`, renames,
//! globs); every path in A's code (types, expressions, patterns, macro
//! calls) of two segments or more, or of one naming what a `use` brought
//! in; and paths of two segments or more in macro arguments,
//! `macro_rules!` bodies (`$crate::…`) and attribute strings
//! (`serde(with = "crate::…")`). A path is followed through `use`
//! declarations and glob imports at every level to the module that defines
//! the item, so naming a re-export imports the module behind it; a
//! `#[macro_export]` macro is defined by the module that writes it. Paths
//! into other crates end the walk. A module naming its own sub-modules is
//! structure, not a dependency; so are the crate root's `mod` and
//! re-exporting (`pub use`) declarations, while the rest of the root's code
//! imports like any module's. Doc comments and `#[cfg(test)]` items are
//! not read. The graph must have no cycle; the test names every cycle it
//! finds with one path for each of its edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::visit::Visit;

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

/// One module of a crate: the names it declares and the paths its code names.
#[derive(Default)]
struct Module {
    /// `a::b`; "" for the crate root.
    name: String,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// Items written here: functions, types, traits, constants, statics.
    defined: BTreeSet<String>,
    /// Names a `use` brings in, each with the path it names, as written here.
    imports: BTreeMap<String, Vec<String>>,
    /// The paths of `use …::*`.
    globs: Vec<Vec<String>>,
    /// Every path this module's code names, as written: the imports.
    named: Vec<Vec<String>>,
}

/// A crate's modules, the root first.
struct Crate {
    modules: Vec<Module>,
    /// `#[macro_export]` macros, named at the root, each with the module that writes it.
    macros: BTreeMap<String, usize>,
}

/// What a name means in a module.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Found {
    /// A module.
    Module(usize),
    /// An item that this module defines.
    Item(usize),
}

/// What a module's namespace says about a name.
enum Lookup {
    Here(Found),
    /// Imported from another crate (or the standard library).
    Elsewhere,
    /// Not declared: made by a macro, say.
    Unknown,
}

/// Reads one source file of the crate being loaded: from disk, or a test's sources.
type Read<'a> = &'a dyn Fn(&Path) -> Option<String>;

fn parse_file(path: &Path, read: Read) -> Result<syn::File, String> {
    let text = read(path).ok_or_else(|| format!("{}: cannot be read", path.display()))?;
    syn::parse_file(&text).map_err(|e| {
        let at = e.span().start();
        format!("{}:{}:{}: {e}", path.display(), at.line, at.column + 1)
    })
}

/// Whether `#[cfg(…)]` among `attrs` holds only under `cfg(test)`: such items are the tests'.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    /// `Some(false)` where the predicate is false without `test`; `None` where other cfgs decide.
    fn without_test(meta: &syn::Meta) -> Option<bool> {
        match meta {
            syn::Meta::Path(p) if p.is_ident("test") => Some(false),
            syn::Meta::List(list) => {
                let nested =
                    Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated.parse2(list.tokens.clone()).ok()?;
                let values: Vec<Option<bool>> = nested.iter().map(without_test).collect();
                if list.path.is_ident("all") {
                    if values.contains(&Some(false)) {
                        Some(false)
                    } else if values.iter().all(|v| *v == Some(true)) {
                        Some(true)
                    } else {
                        None
                    }
                } else if list.path.is_ident("any") {
                    if values.contains(&Some(true)) {
                        Some(true)
                    } else if values.iter().all(|v| *v == Some(false)) {
                        Some(false)
                    } else {
                        None
                    }
                } else if list.path.is_ident("not") {
                    values.first().copied().flatten().map(|v| !v)
                } else {
                    None
                }
            }
            _ => None,
        }
    }
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.parse_args::<syn::Meta>().is_ok_and(|m| without_test(&m) == Some(false)))
}

/// The value of `#[path = "…"]` among `attrs`.
fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find(|a| a.path().is_ident("path")).and_then(|a| match &a.meta {
        syn::Meta::NameValue(nv) => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// One leaf of a `use` tree: the name it brings in (none for `as _`) and
/// its path; or a glob's path.
enum UseLeaf {
    Name(Option<String>, Vec<String>),
    Glob(Vec<String>),
}

fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<UseLeaf>) {
    let leaf = |prefix: &[String], ident: &syn::Ident| {
        let mut path = prefix.to_vec();
        if ident != "self" {
            path.push(ident.to_string());
        }
        path
    };
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let path = leaf(prefix, &n.ident);
            out.push(UseLeaf::Name(path.last().cloned(), path));
        }
        syn::UseTree::Rename(r) => {
            let name = Some(r.rename.to_string()).filter(|n| n != "_");
            out.push(UseLeaf::Name(name, leaf(prefix, &r.ident)));
        }
        syn::UseTree::Glob(_) => out.push(UseLeaf::Glob(prefix.clone())),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_leaves(tree, prefix, out);
            }
        }
    }
}

/// The paths a token stream names: a macro's arguments, a `macro_rules!`
/// body (`$crate::a::f`), an attribute's arguments (with the paths written
/// in its strings when `strings`). Chains of two segments or more, groups
/// after `::` read as `use` trees.
fn token_paths(tokens: TokenStream, strings: bool, out: &mut Vec<Vec<String>>) {
    let tts: Vec<TokenTree> = tokens.into_iter().collect();
    let punct = |i: usize, c: char| matches!(tts.get(i), Some(TokenTree::Punct(p)) if p.as_char() == c);
    // `::` at i: a joint ':' then ':'.
    let path_sep = |i: usize| {
        matches!(tts.get(i), Some(TokenTree::Punct(p)) if p.as_char() == ':' && p.spacing() == Spacing::Joint)
            && punct(i + 1, ':')
    };
    let mut i = 0;
    while i < tts.len() {
        match &tts[i] {
            TokenTree::Group(g) => {
                token_paths(g.stream(), strings, out);
                i += 1;
            }
            TokenTree::Literal(lit) if strings => {
                if let Ok(syn::Lit::Str(s)) = syn::parse_str::<syn::Lit>(&lit.to_string()) {
                    if let Ok(path) = syn::parse_str::<syn::Path>(&s.value()) {
                        if path.leading_colon.is_none() && path.segments.len() > 1 {
                            out.push(path.segments.iter().map(|s| s.ident.to_string()).collect());
                        }
                    }
                }
                i += 1;
            }
            TokenTree::Ident(ident) => {
                // The middle of a chain (`a::b`, `x.b`), or a macro variable (`$name`).
                let continues = (i >= 2 && path_sep(i - 2)) || (i >= 1 && punct(i - 1, '.'));
                let dollar = i >= 1 && punct(i - 1, '$');
                if continues || (dollar && ident != "crate") {
                    i += 1;
                    continue;
                }
                let mut segs = vec![if dollar { "$crate".to_string() } else { ident.to_string() }];
                let mut j = i + 1;
                while path_sep(j) {
                    match tts.get(j + 2) {
                        Some(TokenTree::Ident(next)) => {
                            segs.push(next.to_string());
                            j += 3;
                        }
                        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => {
                            let trees = Punctuated::<syn::UseTree, syn::Token![,]>::parse_terminated.parse2(g.stream());
                            let mut leaves = Vec::new();
                            for tree in trees.iter().flatten() {
                                use_leaves(tree, &mut segs.clone(), &mut leaves);
                            }
                            for leaf in leaves {
                                match leaf {
                                    UseLeaf::Name(_, path) | UseLeaf::Glob(path) => out.push(path),
                                }
                            }
                            j += 3;
                            break;
                        }
                        _ => break,
                    }
                }
                if segs.len() > 1 {
                    out.push(segs);
                }
                i = j;
            }
            _ => i += 1,
        }
    }
}

/// Collects the paths of one module's code, skipping what is the tests'
/// and what is structure.
#[derive(Default)]
struct Paths(Vec<Vec<String>>);

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        match item {
            // Modules are read on their own; `extern crate` names another crate.
            syn::Item::Mod(_) | syn::Item::ExternCrate(_) => {}
            _ if test_only(item_attrs(item)) => {}
            syn::Item::Use(u) => {
                // A `use` inside a function body: an import, in no namespace of the module's.
                if u.leading_colon.is_none() {
                    let mut leaves = Vec::new();
                    use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
                    self.0.extend(leaves.into_iter().map(|leaf| match leaf {
                        UseLeaf::Name(_, path) | UseLeaf::Glob(path) => path,
                    }));
                }
            }
            _ => syn::visit::visit_item(self, item),
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return syn::visit::visit_impl_item(self, item),
        };
        if !test_only(attrs) {
            syn::visit::visit_impl_item(self, item);
        }
    }

    fn visit_field(&mut self, field: &'ast syn::Field) {
        if !test_only(&field.attrs) {
            syn::visit::visit_field(self, field);
        }
    }

    fn visit_variant(&mut self, variant: &'ast syn::Variant) {
        if !test_only(&variant.attrs) {
            syn::visit::visit_variant(self, variant);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        // One segment too: a name a `use` brought in (see `Crate::edges`).
        if path.leading_colon.is_none() {
            self.0.push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        token_paths(mac.tokens.clone(), false, &mut self.0);
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        // Doc comments name paths for readers (intra-doc links), not the compiler.
        if attr.path().is_ident("doc") {
            return;
        }
        if let syn::Meta::List(list) = &attr.meta {
            token_paths(list.tokens.clone(), true, &mut self.0);
        }
    }

    // `pub(in crate::a)` says who may see an item: structure.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}
}

impl Crate {
    /// The crate whose root file is `root`, its modules found along its `mod` declarations.
    fn load(root: &Path, read: Read) -> Result<Crate, String> {
        let mut krate = Crate { modules: vec![Module::default()], macros: BTreeMap::new() };
        let file = parse_file(root, read)?;
        let dir = root.parent().unwrap_or(Path::new("")).to_path_buf();
        krate.add_items(0, &file.items, root, &dir, &dir, read)?;
        Ok(krate)
    }

    /// Adds `items`, written in `file`, to module `at`. `file_dir` is where a
    /// `#[path]` here is relative to, `children` where `mod x;` finds `x`.
    fn add_items(
        &mut self,
        at: usize,
        items: &[syn::Item],
        file: &Path,
        file_dir: &Path,
        children: &Path,
        read: Read,
    ) -> Result<(), String> {
        for item in items {
            let mut paths = Paths::default();
            match item {
                syn::Item::Mod(m) if !test_only(&m.attrs) => {
                    let name = m.ident.to_string();
                    let id = match self.modules[at].children.get(&name) {
                        Some(&id) => id,
                        None => {
                            let parent = &self.modules[at].name;
                            let full = if parent.is_empty() { name.clone() } else { format!("{parent}::{name}") };
                            self.modules.push(Module { name: full, parent: Some(at), ..Module::default() });
                            let id = self.modules.len() - 1;
                            self.modules[at].children.insert(name.clone(), id);
                            id
                        }
                    };
                    if let Some((_, inline)) = &m.content {
                        let dir = children.join(path_attr(&m.attrs).unwrap_or(name));
                        self.add_items(id, inline, file, &dir, &dir, read)?;
                        continue;
                    }
                    // A `#[path]` file's modules sit beside it, as a mod.rs's do.
                    let (path, mod_rs) = match path_attr(&m.attrs) {
                        Some(p) => (file_dir.join(p), true),
                        None if read(&children.join(format!("{name}.rs"))).is_some() => {
                            (children.join(format!("{name}.rs")), false)
                        }
                        None => (children.join(&name).join("mod.rs"), true),
                    };
                    let parsed =
                        parse_file(&path, read).map_err(|e| format!("{e} (`mod {name};` in {})", file.display()))?;
                    let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
                    let sub = if mod_rs { dir.clone() } else { path.with_extension("") };
                    self.add_items(id, &parsed.items, &path, &dir, &sub, read)?;
                    continue;
                }
                syn::Item::Use(u) if !test_only(&u.attrs) && u.leading_colon.is_none() => {
                    let mut leaves = Vec::new();
                    use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
                    // The root's re-exports are its structure; anywhere else a `use` is an import.
                    let structure = at == 0 && !matches!(u.vis, syn::Visibility::Inherited);
                    let module = &mut self.modules[at];
                    for leaf in leaves {
                        let path = match leaf {
                            UseLeaf::Name(name, path) => {
                                if let Some(name) = name {
                                    module.imports.insert(name, path.clone());
                                }
                                path
                            }
                            UseLeaf::Glob(path) => {
                                module.globs.push(path.clone());
                                path
                            }
                        };
                        if !structure {
                            module.named.push(path);
                        }
                    }
                    continue;
                }
                syn::Item::Macro(m) if !test_only(&m.attrs) => {
                    if let Some(ident) = &m.ident {
                        if m.attrs.iter().any(|a| a.path().is_ident("macro_export")) {
                            self.macros.insert(ident.to_string(), at);
                        }
                        // `macro_rules!` bodies are code of the module that writes them.
                        token_paths(m.mac.tokens.clone(), false, &mut paths.0);
                    } else {
                        paths.visit_item(item);
                    }
                }
                syn::Item::ForeignMod(f) if !test_only(&f.attrs) => {
                    for foreign in &f.items {
                        let ident = match foreign {
                            syn::ForeignItem::Fn(f) => &f.sig.ident,
                            syn::ForeignItem::Static(s) => &s.ident,
                            syn::ForeignItem::Type(t) => &t.ident,
                            _ => continue,
                        };
                        self.modules[at].defined.insert(ident.to_string());
                    }
                    paths.visit_item(item);
                }
                _ => {
                    let ident = match item {
                        syn::Item::Const(i) => Some(&i.ident),
                        syn::Item::Enum(i) => Some(&i.ident),
                        syn::Item::Fn(i) => Some(&i.sig.ident),
                        syn::Item::Static(i) => Some(&i.ident),
                        syn::Item::Struct(i) => Some(&i.ident),
                        syn::Item::Trait(i) => Some(&i.ident),
                        syn::Item::TraitAlias(i) => Some(&i.ident),
                        syn::Item::Type(i) => Some(&i.ident),
                        syn::Item::Union(i) => Some(&i.ident),
                        _ => None,
                    };
                    if let Some(ident) = ident.filter(|_| !test_only(item_attrs(item))) {
                        self.modules[at].defined.insert(ident.to_string());
                    }
                    paths.visit_item(item);
                }
            }
            self.modules[at].named.extend(paths.0);
        }
        Ok(())
    }

    /// What `name` means in module `at`.
    fn lookup(&self, at: usize, name: &str, depth: usize) -> Lookup {
        let module = &self.modules[at];
        if let Some(&child) = module.children.get(name) {
            return Lookup::Here(Found::Module(child));
        }
        if module.defined.contains(name) {
            return Lookup::Here(Found::Item(at));
        }
        if let Some(path) = module.imports.get(name) {
            return match self.resolve(at, path, depth + 1) {
                Some(found) => Lookup::Here(found),
                None => Lookup::Elsewhere,
            };
        }
        if at == 0 {
            if let Some(&writer) = self.macros.get(name) {
                return Lookup::Here(Found::Item(writer));
            }
        }
        for glob in &module.globs {
            if let Some(Found::Module(from)) = self.resolve(at, glob, depth + 1) {
                if from != at && depth < 32 {
                    if let Lookup::Here(found) = self.lookup(from, name, depth + 1) {
                        return Lookup::Here(found);
                    }
                }
            }
        }
        Lookup::Unknown
    }

    /// The module `path`, written in module `at`, reaches: the module it
    /// names or the one that defines its item; `None` for another crate's.
    fn resolve(&self, at: usize, path: &[String], depth: usize) -> Option<Found> {
        // A circle of `use`s (which rustc refuses) ends here rather than looping.
        if depth > 32 || path.is_empty() {
            return None;
        }
        let (mut cur, mut rest) = (at, path);
        match path[0].as_str() {
            "crate" | "$crate" => (cur, rest) = (0, &path[1..]),
            "self" => rest = &path[1..],
            "super" => {
                while rest.first().is_some_and(|s| s == "super") {
                    cur = self.modules[cur].parent?;
                    rest = &rest[1..];
                }
            }
            first => match self.lookup(at, first, depth) {
                Lookup::Here(Found::Module(m)) => (cur, rest) = (m, &path[1..]),
                Lookup::Here(item) => return Some(item),
                Lookup::Elsewhere | Lookup::Unknown => return None,
            },
        }
        for seg in rest {
            match self.lookup(cur, seg, depth) {
                Lookup::Here(Found::Module(m)) => cur = m,
                Lookup::Here(item) => return Some(item),
                Lookup::Elsewhere => return None,
                // Declared by no item we can see (a macro's, say): the module is what the path reaches.
                Lookup::Unknown => return Some(Found::Item(cur)),
            }
        }
        Some(Found::Module(cur))
    }

    fn within(&self, mut module: usize, ancestor: usize) -> bool {
        while let Some(parent) = self.modules[module].parent {
            if parent == ancestor {
                return true;
            }
            module = parent;
        }
        false
    }

    /// `path`, written in module `at`, from the crate root: `crate::a::f`.
    fn absolute(&self, at: usize, path: &[String]) -> String {
        let (mut cur, mut rest) = (at, path);
        match path[0].as_str() {
            "crate" | "$crate" => (cur, rest) = (0, &path[1..]),
            "self" => rest = &path[1..],
            "super" => {
                while rest.first().is_some_and(|s| s == "super") {
                    cur = self.modules[cur].parent.unwrap_or(0);
                    rest = &rest[1..];
                }
            }
            _ => {}
        }
        let base = &self.modules[cur].name;
        let mut out = String::from("crate");
        for seg in base.split("::").filter(|s| !s.is_empty()).map(str::to_string).chain(rest.iter().cloned()) {
            out.push_str("::");
            out.push_str(&seg);
        }
        out
    }

    /// Module A → module B, each edge with one path that makes it.
    fn edges(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (id, module) in self.modules.iter().enumerate() {
            let edges = graph.entry(module.name.clone()).or_default();
            for path in &module.named {
                // A one-segment path names a local, a generic or an item
                // written here, or a name a `use` brought in: only the last
                // is an import (the crate root's `pub use`d names that its
                // own code uses, say).
                if path.len() == 1 && !module.imports.contains_key(&path[0]) {
                    continue;
                }
                let target = match self.resolve(id, path, 0) {
                    Some(Found::Module(t) | Found::Item(t)) => t,
                    None => continue,
                };
                if target == id || (id != 0 && self.within(target, id)) {
                    continue;
                }
                edges.entry(self.modules[target].name.clone()).or_insert_with(|| self.absolute(id, path));
            }
        }
        graph
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        _ => &[],
    }
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

/// The module edges of a crate held in memory: `files` are (path, source), the first its root.
fn edges_of(files: &[(&str, &str)]) -> BTreeMap<String, BTreeMap<String, String>> {
    let sources: BTreeMap<PathBuf, String> = files.iter().map(|(p, s)| (PathBuf::from(p), s.to_string())).collect();
    let read = |p: &Path| sources.get(p).cloned();
    Crate::load(Path::new(files[0].0), &read).unwrap().edges()
}

fn graph_of(files: &[(&str, &str)]) -> BTreeMap<String, BTreeSet<String>> {
    edges_of(files).into_iter().map(|(m, to)| (m, to.into_keys().collect())).collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn cycle(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[test]
fn the_rule_finds_a_circle_and_ignores_structure() {
    let graph = graph_of(&[
        ("src/lib.rs", "pub mod a; pub mod b;\npub use a::X;\n"),
        ("src/a/mod.rs", "pub mod c;\npub use c::Y;\nuse crate::b::Z;\npub struct X;\n"),
        ("src/a/c.rs", "use super::super::b::{self, W};\n/// [`crate::a`]\npub struct Y;\n"),
        (
            "src/b.rs",
            "use crate::{a::c::Y, Root};\npub struct Z;\npub struct W;\n#[cfg(test)]\nuse crate::a::X;\n#[cfg(all(test, unix))]\nfn t() { crate::a::X; }\n",
        ),
    ]);
    assert_eq!(graph["a"], set(&["b"]));
    assert_eq!(graph["a::c"], set(&["b"]));
    // `Root` is declared nowhere: the path reaches the root, which declares nothing else.
    assert_eq!(graph["b"], set(&["", "a::c"]));
    assert_eq!(graph[""], set(&[]));
    assert_eq!(cycles(&graph), vec![cycle(&["b", "a::c", "b"])]);
}

#[test]
fn macro_bodies_and_arguments_are_code_of_the_module_that_writes_them() {
    let files = [
        ("src/lib.rs", "pub mod a;\npub mod b;\npub mod c;\npub mod d;\n"),
        ("src/a.rs", "#[macro_export]\nmacro_rules! export {\n    () => { $crate::b::run(); };\n}\n"),
        ("src/b.rs", "pub fn run() {}\ncrate::export!();\n"),
        ("src/c.rs", "macro_rules! local {\n    () => { crate::b::run() };\n}\n"),
        ("src/d.rs", "pub fn f() { println!(\"{:?}\", crate::c::K); }\n"),
    ];
    let graph = graph_of(&files);
    assert_eq!(graph["a"], set(&["b"]));
    assert_eq!(graph["b"], set(&["a"]));
    assert_eq!(graph["c"], set(&["b"]));
    assert_eq!(graph["d"], set(&["c"]));
    let found = cycles(&graph);
    assert_eq!(found, vec![cycle(&["a", "b", "a"])]);
    assert_eq!(describe(&found[0], &edges_of(&files)), "a -(crate::b::run)-> b -(crate::export)-> a");
}

#[test]
fn a_crate_root_with_items_is_a_module() {
    let root = "pub mod a;\npub mod b;\nmod c;\npub use b::{Shared, Other as Renamed};\npub use dep as ffi;\n\npub fn helper() -> a::Part {\n    a::Part\n}\n";
    let files = [
        ("src/lib.rs", root),
        ("src/a.rs", "pub struct Part;\npub fn g() {\n    crate::helper();\n}\n"),
        ("src/b.rs", "pub struct Shared;\npub struct Other;\n"),
        ("src/c.rs", "use crate::{Renamed, ffi::Raw};\nuse super::Shared;\n"),
    ];
    let graph = graph_of(&files);
    assert_eq!(graph[""], set(&["a"]));
    assert_eq!(graph["a"], set(&[""]));
    assert_eq!(graph["c"], set(&["b"]));
    let found = cycles(&graph);
    assert_eq!(found, vec![cycle(&["", "a", ""])]);
    assert_eq!(describe(&found[0], &edges_of(&files)), "crate -(crate::a::Part)-> a -(crate::helper)-> crate");

    // The root's code naming what it re-exports imports the module behind it.
    let graph = graph_of(&[
        ("src/lib.rs", "pub mod b;\npub use b::Shared;\npub fn helper() -> Shared {\n    Shared\n}\n"),
        ("src/b.rs", "pub struct Shared;\npub fn g() {\n    crate::helper();\n}\n"),
    ]);
    assert_eq!(graph[""], set(&["b"]));
    assert_eq!(cycles(&graph), vec![cycle(&["", "b", ""])]);

    // Declaring modules and re-exporting makes the root no module of its own.
    let graph = graph_of(&[
        ("src/lib.rs", "pub mod a;\npub mod b;\nmod c;\npub use b::{\n    Shared,\n    Other as Renamed,\n};\n"),
        ("src/a.rs", "pub struct Part;\npub fn g() -> crate::Renamed {\n    crate::b::Other\n}\n"),
        ("src/b.rs", "pub struct Shared;\npub struct Other;\n"),
        ("src/c.rs", "use crate::{Renamed, a::Part};\n"),
    ]);
    assert_eq!(graph[""], set(&[]));
    assert_eq!(graph["a"], set(&["b"]));
    assert_eq!(graph["c"], set(&["a", "b"]));
    assert!(cycles(&graph).is_empty());
}

/// `b` names `a::X`, which `a/mod.rs` re-exports from `a::x`, and `a::x`
/// calls into `b`: the circle is `b → a::x → b`, whether the re-export is
/// by name, by glob, or twice over.
#[test]
fn a_re_export_in_a_sub_module_hides_no_circle() {
    for reexport in ["mod x;\npub use x::X;\n", "mod x;\npub use self::x::*;\n", "mod x;\nmod y;\npub use y::X;\n"] {
        let files = [
            ("src/lib.rs", "pub mod a;\npub mod b;\n"),
            ("src/a/mod.rs", reexport),
            ("src/a/x.rs", "pub struct X;\npub fn f() {\n    crate::b::g();\n}\n"),
            ("src/a/y.rs", "pub use super::x::X;\n"),
            ("src/b.rs", "use crate::a::X;\npub fn g() -> Option<X> {\n    None\n}\n"),
        ];
        let graph = graph_of(&files);
        assert_eq!(graph["b"], set(&["a::x"]), "{reexport}");
        assert_eq!(cycles(&graph), vec![cycle(&["a::x", "b", "a::x"])], "{reexport}");
        assert_eq!(
            describe(&cycles(&graph)[0], &edges_of(&files)),
            "a::x -(crate::b::g)-> b -(crate::a::X)-> a::x",
            "{reexport}"
        );
    }
}

/// A binary's `main.rs` (or `src/bin/x.rs`) is a crate root like lib.rs.
#[test]
fn a_binary_crates_circle_is_found() {
    let graph = graph_of(&[
        ("src/main.rs", "mod cli;\nmod run;\nfn main() {\n    cli::parse();\n}\n"),
        ("src/cli.rs", "use crate::run::go;\npub fn parse() {\n    go();\n}\n"),
        ("src/run.rs", "pub fn go() {\n    super::cli::parse();\n}\n"),
    ]);
    assert_eq!(graph[""], set(&["cli"]));
    assert_eq!(cycles(&graph), vec![cycle(&["cli", "run", "cli"])]);

    // A `src/bin/` program's modules sit beside it.
    let graph = graph_of(&[
        ("src/bin/tool.rs", "mod args;\nmod plan;\nfn main() {}\n"),
        ("src/bin/args.rs", "pub fn read() -> crate::plan::Plan {\n    crate::plan::Plan\n}\n"),
        ("src/bin/plan.rs", "pub struct Plan;\npub fn redo() {\n    crate::args::read();\n}\n"),
    ]);
    assert_eq!(cycles(&graph), vec![cycle(&["args", "plan", "args"])]);
}

/// Every item of `use a::{b::{c, D}, e}` is seen, not only those before the first `}`.
#[test]
fn nested_import_groups_are_read_to_their_last_item() {
    let graph = graph_of(&[
        ("src/lib.rs", "pub mod a;\npub mod z;\n"),
        ("src/a/mod.rs", "pub mod b;\npub mod e;\n"),
        ("src/a/b.rs", "pub fn c() {}\npub struct D;\n"),
        ("src/a/e.rs", "pub fn f() {\n    crate::z::Z;\n}\n"),
        ("src/z.rs", "use crate::a::{b::{c, D}, e};\npub struct Z;\n"),
    ]);
    assert_eq!(graph["z"], set(&["a::b", "a::e"]));
    assert_eq!(cycles(&graph), vec![cycle(&["a::e", "z", "a::e"])]);
}

/// `#[path]` files and inline modules are modules like the others.
#[test]
fn path_attributes_and_inline_modules_are_followed() {
    let graph = graph_of(&[
        (
            "src/lib.rs",
            "#[path = \"other/imp_.rs\"]\nmod imp;\nmod inline {\n    pub fn f() {\n        crate::imp::g();\n    }\n    pub mod deeper;\n}\n",
        ),
        ("src/other/imp_.rs", "pub fn g() {\n    crate::inline::deeper::h();\n}\n"),
        ("src/inline/deeper.rs", "pub fn h() {}\n"),
    ]);
    assert_eq!(graph["inline"], set(&["imp"]));
    assert_eq!(graph["imp"], set(&["inline::deeper"]));
    assert!(cycles(&graph).is_empty());
}

/// A crate of the workspace: its package, target name and kind, root file.
struct Target {
    package: String,
    name: String,
    kind: String,
    root: PathBuf,
}

/// Every target that is a crate of its own: libraries, cdylibs, binaries,
/// build scripts (not tests, benches, examples).
fn crate_targets() -> Vec<Target> {
    let meta = metadata();
    let mut out = Vec::new();
    for package in meta["packages"].as_array().unwrap() {
        for target in package["targets"].as_array().unwrap() {
            let kinds: Vec<&str> = target["kind"].as_array().unwrap().iter().filter_map(|k| k.as_str()).collect();
            let Some(kind) = kinds.iter().find(|k| {
                matches!(**k, "lib" | "rlib" | "dylib" | "cdylib" | "staticlib" | "proc-macro" | "bin" | "custom-build")
            }) else {
                continue;
            };
            out.push(Target {
                package: package["name"].as_str().unwrap().to_string(),
                name: target["name"].as_str().unwrap().to_string(),
                kind: kind.to_string(),
                root: PathBuf::from(target["src_path"].as_str().unwrap()),
            });
        }
    }
    out
}

#[test]
fn no_module_imports_in_a_circle() {
    let targets = crate_targets();
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let mut report = Vec::new();
    let mut modules = 0;
    for target in &targets {
        let krate =
            Crate::load(&target.root, &read).unwrap_or_else(|e| panic!("{} ({}): {e}", target.package, target.name));
        modules += krate.modules.len();
        let edges = krate.edges();
        let graph = edges.iter().map(|(m, to)| (m.clone(), to.keys().cloned().collect())).collect();
        for cycle in cycles(&graph) {
            report.push(format!("{} ({} {}): {}", target.package, target.kind, target.name, describe(&cycle, &edges)));
        }
    }
    // The binary-only crate and the `src/bin/` programs are read, not only libraries.
    let read_kind = |name: &str, kind: &str| targets.iter().any(|t| t.name == name && t.kind == kind);
    assert!(read_kind("cderctl", "bin"), "cderctl's binary was not read");
    assert!(targets.iter().any(|t| t.kind == "bin" && t.root.parent().is_some_and(|d| d.ends_with("src/bin"))));
    assert!(targets.iter().filter(|t| t.kind != "bin" && t.kind != "custom-build").count() >= 10);
    assert!(modules >= 200, "only {modules} modules read");
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
