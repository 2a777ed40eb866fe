//! The library's layers hold (issue 18; the table is `docs/architecture.md`'s). Each layer is a
//! crate of its own or a part of one, all in `shared/` (`base`, `outside`, `store` below `domain`;
//! `faces` above it), which the compiler holds: none of them depends on a crate above it, and a
//! face cannot reach the store (`AppState`'s is the domain's alone). What it cannot see is
//! checked here, inside `domain`: every module of `shared/domain/src` sits in one layer of the
//! table, its imports
//! (`use crate::…`, `super::…`, `self::…`, a child module's name, and `crate::…` paths in code and
//! in macros) go only to its own layer or below, and the import graph between files has no cycle
//! (a module naming its own ancestors, `super::…`, is not an import: a child uses what its parent
//! declares). A path into a crate below (re-exported at the root: `crate::time`, `crate::store`)
//! goes down by construction. Test code (`#[cfg(test)]` items and modules) is left out: a test
//! may reach anything. Function length is clippy's (`too_many_lines`, the workspace's lints).
//!
//! The checker reads sources with `syn`; its own tests feed it a small library with a cycle and
//! an upward import and assert that it names both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// A module's path inside the crate, `order::ledger`; the crate root is `""`.
type ModulePath = String;

/// The sources of a library: each module's path and its text (test modules excluded).
type Sources = BTreeMap<ModulePath, String>;

/// One layer of the table: its number (bottom up), name and the module paths it names.
#[derive(Debug)]
struct Layer {
    number: usize,
    name: String,
    modules: Vec<ModulePath>,
}

/// What the checker found: each a sentence naming the modules.
#[derive(Debug, Default)]
struct Findings {
    upward: Vec<String>,
    cycles: Vec<String>,
    unplaced: Vec<String>,
    root_paths: Vec<String>,
}

impl Findings {
    fn is_empty(&self) -> bool {
        self.upward.is_empty()
            && self.cycles.is_empty()
            && self.unplaced.is_empty()
            && self.root_paths.is_empty()
    }
}

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The layer table of `architecture` (markdown): the rows whose first cell is `N. name`, the
/// second cell's `` `module` `` names.
fn layers(architecture: &str) -> Vec<Layer> {
    let mut layers = Vec::new();
    for line in architecture.lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        if cells.len() < 2 {
            continue;
        }
        let first = cells[0].trim();
        let Some((number, name)) = first.split_once(". ") else {
            continue;
        };
        let Ok(number) = number.parse() else { continue };
        let modules = cells[1]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        layers.push(Layer {
            number,
            name: name.trim().to_owned(),
            modules,
        });
    }
    layers
}

/// Whether `attrs` carry `#[cfg(test)]`.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

/// Whether `item` is test code (`#[cfg(test)]` on it).
fn is_test_item(item: &syn::Item) -> bool {
    let attrs = match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => return false,
    };
    is_test(attrs)
}

/// Every `.rs` file under `dir`, at any depth.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// A file's syntax tree and its name relative to the repository.
fn parsed(path: &Path) -> (syn::File, String) {
    let text = std::fs::read_to_string(path).unwrap();
    let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let name = path
        .strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string();
    (file, name)
}

/// Every module file under `src` (a crate's `src`), by module path, with its text; the files of
/// modules declared `#[cfg(test)] mod x;` are left out.
fn read_sources(src: &Path) -> Sources {
    let mut sources = Sources::new();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).unwrap().with_extension("");
        let mut parts: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
            parts.pop();
        }
        sources.insert(parts.join("::"), std::fs::read_to_string(&file).unwrap());
    }
    let tests: BTreeSet<ModulePath> = sources
        .iter()
        .flat_map(|(module, text)| {
            let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{module}: {e}"));
            file.items
                .into_iter()
                .filter_map(|item| match item {
                    syn::Item::Mod(m) if is_test(&m.attrs) => Some(join(module, &m.ident)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .collect();
    sources.retain(|module, _| !tests.iter().any(|t| module == t || within(module, t)));
    sources
}

fn join(module: &str, child: &syn::Ident) -> ModulePath {
    if module.is_empty() {
        child.to_string()
    } else {
        format!("{module}::{child}")
    }
}

/// Whether `module` is `ancestor` or inside it.
fn within(module: &str, ancestor: &str) -> bool {
    module == ancestor
        || ancestor.is_empty()
        || module
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with("::"))
}

/// Collects the paths a file names, as segments, leaving test items out.
#[derive(Default)]
struct Paths(Vec<Vec<String>>);

impl Paths {
    fn use_tree(&mut self, prefix: &[String], tree: &syn::UseTree) {
        let mut at = prefix.to_vec();
        match tree {
            syn::UseTree::Path(p) => {
                at.push(p.ident.to_string());
                self.use_tree(&at, &p.tree);
            }
            syn::UseTree::Name(n) => {
                at.push(n.ident.to_string());
                self.0.push(at);
            }
            syn::UseTree::Rename(r) => {
                at.push(r.ident.to_string());
                self.0.push(at);
            }
            syn::UseTree::Glob(_) => self.0.push(at),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    /// `crate :: a :: b`, `super :: x`, `self :: y` sequences in a macro's tokens.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if ["crate", "super", "self"].contains(&&*id.to_string()) => {
                    let mut path = vec![id.to_string()];
                    let mut j = i + 1;
                    loop {
                        let colons = matches!(
                            (trees.get(j), trees.get(j + 1)),
                            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
                                if a.as_char() == ':' && b.as_char() == ':'
                        );
                        let Some(TokenTree::Ident(next)) = trees.get(j + 2) else {
                            break;
                        };
                        if !colons {
                            break;
                        }
                        path.push(next.to_string());
                        j += 3;
                    }
                    if path.len() > 1 {
                        self.0.push(path);
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'a> Visit<'a> for Paths {
    fn visit_item(&mut self, item: &'a syn::Item) {
        if !is_test_item(item) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'a syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, item: &'a syn::ItemUse) {
        self.use_tree(&[], &item.tree);
    }

    fn visit_path(&mut self, path: &'a syn::Path) {
        self.0
            .push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'a syn::Macro) {
        self.tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }
}

/// The names the crate root re-exports from crates below it (`pub use base::{time, …};`,
/// `pub use store;`): modules of lower layers that are not files of this crate.
fn below(sources: &Sources) -> BTreeSet<String> {
    let root = syn::parse_file(sources.get("").map_or("", String::as_str)).unwrap();
    let mut paths = Paths::default();
    for item in &root.items {
        if let syn::Item::Use(import) = item {
            paths.use_tree(&[], &import.tree);
        }
    }
    paths
        .0
        .into_iter()
        .filter(|p| !["crate", "self", "super"].contains(&p[0].as_str()))
        .filter(|p| !sources.contains_key(&p[0]))
        .filter_map(|p| p.last().cloned())
        .collect()
}

/// The module a path named in `module` reaches (the longest known module its resolved segments
/// start with), or `None` for a path outside the crate or into a crate below (`below`).
/// `Some("")` is the crate root.
fn resolve(
    sources: &Sources,
    below: &BTreeSet<String>,
    module: &str,
    path: &[String],
) -> Option<ModulePath> {
    let mut at: Vec<&str> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").collect()
    };
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            at.clear();
            rest = &rest[1..];
            if rest.first().is_some_and(|name| below.contains(name)) {
                return None;
            }
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                at.pop();
                rest = &rest[1..];
            }
        }
        Some(child) if sources.contains_key(&format!("{module}::{child}")) => {}
        _ => return None,
    }
    if rest.is_empty() && path.len() == 1 {
        // `pub(crate)`, `pub(super)`: a visibility, not an import.
        return None;
    }
    let mut full: Vec<&str> = at;
    full.extend(rest.iter().map(String::as_str));
    (0..=full.len())
        .rev()
        .map(|n| full[..n].join("::"))
        .find(|candidate| sources.contains_key(candidate))
}

/// The import graph: each module's imports of other modules (itself left out), with the crate
/// root's paths (`crate::Item`) listed apart.
fn graph(sources: &Sources) -> (BTreeMap<ModulePath, BTreeSet<ModulePath>>, Vec<String>) {
    let mut edges = BTreeMap::new();
    let mut root_paths = Vec::new();
    let below = below(sources);
    for (module, text) in sources {
        let file = syn::parse_file(text).unwrap_or_else(|e| panic!("{module}: {e}"));
        let mut paths = Paths::default();
        paths.visit_file(&file);
        let mut targets = BTreeSet::new();
        for path in &paths.0 {
            match resolve(sources, &below, module, path) {
                Some(target) if target.is_empty() && !module.is_empty() => {
                    root_paths.push(format!("{module} names `{}`", path.join("::")));
                }
                Some(target) if target != *module => {
                    targets.insert(target);
                }
                _ => {}
            }
        }
        edges.insert(module.clone(), targets);
    }
    (edges, root_paths)
}

/// The graph's cycles (strongly connected components of more than one module), each with one
/// circle through it, `a → b → a`.
fn cycles(edges: &BTreeMap<ModulePath, BTreeSet<ModulePath>>) -> Vec<Vec<ModulePath>> {
    // Reachability, then components: the graph is small (tens of modules).
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(at) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&ModulePath, BTreeSet<ModulePath>> =
        edges.keys().map(|m| (m, reach(m))).collect();
    let mut placed = BTreeSet::new();
    let mut found = Vec::new();
    for module in edges.keys() {
        if placed.contains(module) || !reached[module].contains(module) {
            continue;
        }
        let component: Vec<ModulePath> = edges
            .keys()
            .filter(|other| reached[module].contains(*other) && reached[*other].contains(module))
            .cloned()
            .collect();
        placed.extend(component.iter().cloned());
        found.push(circle(edges, module, &component));
    }
    found
}

/// One shortest circle from `start` back to it inside `component` (breadth first).
fn circle(
    edges: &BTreeMap<ModulePath, BTreeSet<ModulePath>>,
    start: &str,
    component: &[ModulePath],
) -> Vec<ModulePath> {
    let mut parent: BTreeMap<ModulePath, ModulePath> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.to_owned()]);
    while let Some(at) = queue.pop_front() {
        for next in edges.get(&at).into_iter().flatten() {
            if !component.contains(next) {
                continue;
            }
            if next == start {
                let mut path = vec![at.clone()];
                while let Some(p) = parent.get(path.last().unwrap()) {
                    path.push(p.clone());
                }
                path.reverse();
                path.push(start.to_owned());
                return path;
            }
            if !parent.contains_key(next) && next != start {
                parent.insert(next.clone(), at.clone());
                queue.push_back(next.clone());
            }
        }
    }
    vec![start.to_owned()]
}

/// The layer of `module`: the table's entry naming it or its nearest ancestor.
fn layer_of<'l>(layers: &'l [Layer], module: &str) -> Option<&'l Layer> {
    layers
        .iter()
        .flat_map(|l| l.modules.iter().map(move |m| (l, m)))
        .filter(|(_, m)| within(module, m) && !m.is_empty())
        .max_by_key(|(_, m)| m.len())
        .map(|(l, _)| l)
}

fn check(sources: &Sources, layers: &[Layer]) -> Findings {
    let (edges, root_paths) = graph(sources);
    let mut findings = Findings {
        root_paths,
        ..Findings::default()
    };
    for (module, targets) in &edges {
        if module.is_empty() {
            continue;
        }
        let Some(from) = layer_of(layers, module) else {
            findings
                .unplaced
                .push(format!("{module} is in no layer of the table"));
            continue;
        };
        for target in targets {
            let Some(to) = layer_of(layers, target) else {
                continue;
            };
            if to.number > from.number {
                findings.upward.push(format!(
                    "{module} ({}. {}) imports {target} ({}. {})",
                    from.number, from.name, to.number, to.name
                ));
            }
        }
    }
    // A module's own ancestors (`super::…`) are its context, not an import, for cycles: a
    // child names what its parent declares. (For layers they count: a lower child may not
    // reach into a higher parent.)
    let edges_without_root = edges
        .into_iter()
        .filter(|(m, _)| !m.is_empty())
        .map(|(m, targets)| {
            let targets = targets.into_iter().filter(|t| !within(&m, t)).collect();
            (m, targets)
        })
        .collect::<BTreeMap<_, _>>();
    findings.cycles = cycles(&edges_without_root)
        .into_iter()
        .map(|c| c.join(" → "))
        .collect();
    findings
}

#[test]
fn the_library_imports_only_downward_and_has_no_cycle() {
    let architecture = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let layers = layers(&architecture);
    assert!(layers.len() >= 4, "the layer table: {layers:?}");
    let sources = read_sources(&root().join("shared/domain/src"));
    let findings = check(&sources, &layers);
    for layer in &layers {
        let count = sources
            .keys()
            .filter(|m| !m.is_empty())
            .filter(|m| layer_of(&layers, m).is_some_and(|l| l.number == layer.number))
            .count();
        if count == 0 {
            println!("layer {}. {}: a crate of its own", layer.number, layer.name);
        } else {
            println!(
                "layer {}. {}: {count} module files",
                layer.number, layer.name
            );
        }
    }
    println!(
        "{} module files, {} cycles, {} upward imports",
        sources.len() - 1,
        findings.cycles.len(),
        findings.upward.len()
    );
    assert!(
        findings.is_empty(),
        "the layers of docs/architecture.md do not hold:\n{}",
        [
            &findings.unplaced,
            &findings.root_paths,
            &findings.upward,
            &findings.cycles
        ]
        .iter()
        .flat_map(|v| v.iter())
        .map(|line| format!("  {line}"))
        .collect::<Vec<_>>()
        .join("\n")
    );
}

/// A small library: `low` (layer 1) and `high` (layer 2), with `low::a` reaching up to `high`
/// in a macro and `high` reaching `low::a`: one upward import and one cycle.
#[test]
fn the_checker_names_an_upward_import_and_a_cycle() {
    let layers =
        layers("| layer | modules |\n|---|---|\n| 1. low | `low` |\n| 2. high | `high` |\n");
    let mut sources = Sources::new();
    sources.insert(String::new(), "pub mod low; pub mod high;".into());
    sources.insert("low".into(), "pub mod a; pub mod b;".into());
    sources.insert(
        "low::a".into(),
        "pub fn f() { tracing::info!(\"{}\", crate::high::g()); }".into(),
    );
    sources.insert(
        "low::b".into(),
        "use super::a; pub fn h() { a::f() }".into(),
    );
    sources.insert(
        "high".into(),
        "use crate::{low::{a::f, b}}; pub fn g() -> u8 { f(); b::h(); 1 }\n\
         #[cfg(test)] mod tests { use crate::low::a; }"
            .into(),
    );
    let findings = check(&sources, &layers);
    assert_eq!(
        findings.upward,
        ["low::a (1. low) imports high (2. high)"],
        "{findings:?}"
    );
    assert_eq!(findings.cycles, ["high → low::a → high"], "{findings:?}");
    assert!(findings.unplaced.is_empty() && findings.root_paths.is_empty());
    // Without the upward call, nothing is found.
    sources.insert("low::a".into(), "pub fn f() {}".into());
    assert!(check(&sources, &layers).is_empty());
}

/// A module the table does not place, and a path to an item of the crate root, are named; a
/// path into a crate below, re-exported at the root, is neither.
#[test]
fn the_checker_names_a_module_in_no_layer_and_a_path_through_the_root() {
    let layers = layers("| 1. only | `only` |\n");
    let mut sources = Sources::new();
    sources.insert(
        String::new(),
        "pub mod only; pub mod stray; pub use only::X; pub use lower::{thing};".into(),
    );
    sources.insert(
        "only".into(),
        "pub struct X; fn f(_: crate::X) {} fn h(_: crate::thing::Y) {}".into(),
    );
    sources.insert("stray".into(), "pub fn g() {}".into());
    let findings = check(&sources, &layers);
    assert_eq!(findings.unplaced, ["stray is in no layer of the table"]);
    assert_eq!(findings.root_paths, ["only names `crate::X`"]);
}

/// Where a source touches the store: a `.store` field (the `AppState`'s handle) or a method
/// called on a value named `store`, but the methods `allowed`.
struct StoreCalls<'a> {
    allowed: &'a [&'a str],
    found: Vec<String>,
}

impl<'a> Visit<'a> for StoreCalls<'_> {
    fn visit_item(&mut self, item: &'a syn::Item) {
        if !is_test_item(item) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_expr_field(&mut self, field: &'a syn::ExprField) {
        if matches!(&field.member, syn::Member::Named(name) if name == "store") {
            use quote::ToTokens;
            self.found.push(field.to_token_stream().to_string());
        }
        syn::visit::visit_expr_field(self, field);
    }

    fn visit_expr_method_call(&mut self, call: &'a syn::ExprMethodCall) {
        if let syn::Expr::Path(p) = &*call.receiver
            && p.path.is_ident("store")
            && !self.allowed.contains(&call.method.to_string().as_str())
        {
            self.found.push(format!("store.{}(…)", call.method));
        }
        syn::visit::visit_expr_method_call(self, call);
    }
}

/// The store calls of each `.rs` file under `dir`, by path.
fn store_calls(dir: &Path, allowed: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for path in rust_files(dir) {
        let (file, name) = parsed(&path);
        let mut calls = StoreCalls {
            allowed,
            found: Vec::new(),
        };
        calls.visit_file(&file);
        out.extend(calls.found.into_iter().map(|c| format!("{name}: {c}")));
    }
    out
}

/// Only the domain calls the store (issue 18, point 3): not the functions, not the operator
/// CLI (`svcctl`; but `store.table()` and `store.client()` for creating the table, the store's
/// own administration), not the library's layers above the domain.
#[test]
fn only_the_domain_calls_the_store() {
    let architecture = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let layers = layers(&architecture);
    let domain = layers
        .iter()
        .find(|l| l.name == "domain")
        .expect("a `domain` layer in docs/architecture.md");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root().join("functions")).unwrap() {
        found.extend(store_calls(&entry.unwrap().path().join("src"), &[]));
    }
    found.extend(store_calls(&root().join("infra/src"), &["table", "client"]));
    let sources = read_sources(&root().join("shared/domain/src"));
    for (module, text) in &sources {
        if layer_of(&layers, module).is_some_and(|l| l.number > domain.number) {
            let file = syn::parse_file(text).unwrap();
            let mut calls = StoreCalls {
                allowed: &[],
                found: Vec::new(),
            };
            calls.visit_file(&file);
            found.extend(
                calls
                    .found
                    .into_iter()
                    .map(|c| format!("shared {module}: {c}")),
            );
        }
    }
    assert!(
        found.is_empty(),
        "the store is called outside the domain:\n  {}",
        found.join("\n  ")
    );
}

/// The longest a function of the library or a function crate may be, lines from `fn` to its
/// closing brace (`docs/architecture.md`, "Functions a reader can hold").
const MAX_FUNCTION_LINES: usize = 80;

/// The functions of a file longer than [`MAX_FUNCTION_LINES`], tests aside.
struct LongFunctions {
    file: String,
    found: Vec<String>,
}

impl LongFunctions {
    /// Measures `sig` and `block` from `fn` to the closing brace (doc comments aside).
    fn measure(&mut self, sig: &syn::Signature, block: &syn::Block) {
        let (start, end) = (
            sig.fn_token.span.start(),
            block.brace_token.span.close().end(),
        );
        let (name, lines) = (&sig.ident, end.line - start.line + 1);
        if lines > MAX_FUNCTION_LINES {
            let (file, line) = (&self.file, start.line);
            self.found
                .push(format!("{file}:{line} {name}: {lines} lines"));
        }
    }
}

impl<'ast> Visit<'ast> for LongFunctions {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !is_test(&item.attrs) {
            syn::visit::visit_item_mod(self, item);
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !item.attrs.iter().any(|a| a.path().is_ident("test")) && !is_test(&item.attrs) {
            self.measure(&item.sig, &item.block);
            syn::visit::visit_item_fn(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        self.measure(&item.sig, &item.block);
        syn::visit::visit_impl_item_fn(self, item);
    }
}

/// The sources of the library (every crate in `shared/`) and of the functions.
fn library_and_function_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for folder in ["shared", "functions"] {
        for entry in std::fs::read_dir(root().join(folder)).unwrap() {
            files.extend(rust_files(&entry.unwrap().path().join("src")));
        }
    }
    files.sort();
    files
}

/// No function in `shared/` or `functions/` is longer than [`MAX_FUNCTION_LINES`] (tests
/// aside): what `docs/architecture.md` promises a reader.
#[test]
fn functions_a_reader_can_hold() {
    let mut found = Vec::new();
    for path in library_and_function_files() {
        let (file, name) = parsed(&path);
        let mut long = LongFunctions {
            file: name,
            found: Vec::new(),
        };
        long.visit_file(&file);
        found.extend(long.found);
    }
    assert!(
        found.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_measure_names_a_long_function_and_leaves_tests_and_docs_out() {
    let body = "    let _ = 1;\n".repeat(MAX_FUNCTION_LINES - 1);
    let docs = "/// A line.\n".repeat(10);
    let source = format!(
        "{docs}fn held() {{\n{}}}\n\nfn long() {{\n{body}}}\n\n\
         #[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{body}}}\n}}\n",
        "    let _ = 1;\n".repeat(MAX_FUNCTION_LINES - 2)
    );
    let mut long = LongFunctions {
        file: "x.rs".into(),
        found: Vec::new(),
    };
    long.visit_file(&syn::parse_file(&source).unwrap());
    let lines = MAX_FUNCTION_LINES + 1;
    assert_eq!(
        long.found,
        [format!(
            "x.rs:{} long: {lines} lines",
            12 + MAX_FUNCTION_LINES
        )]
    );
}

/// The most lines a file of the library, the faces or the functions may have, its tests
/// included (`docs/architecture.md`, "Files a reader can hold").
const MAX_FILE_LINES: usize = 900;

/// No file in `shared/` or `functions/` is longer than [`MAX_FILE_LINES`]: a longer one holds
/// two things, to be split by what they are.
#[test]
fn files_a_reader_can_hold() {
    let long: Vec<String> = library_and_function_files()
        .into_iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            let name = path.strip_prefix(root()).unwrap().display().to_string();
            (lines > MAX_FILE_LINES).then(|| format!("{name}: {lines} lines"))
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines:\n  {}",
        long.join("\n  ")
    );
}
