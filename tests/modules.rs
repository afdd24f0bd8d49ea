//! No import cycles between modules (issue #16, DESIGN.md "Habits"). Every source file under
//! `src/` is parsed (syn) and every path it names (`use` trees, paths in code and types, and
//! `crate::`/`super::`/`self::` paths inside macro invocations) is resolved to the module it
//! points into. A reference from module `a::b::c` to `a::d::e` is an edge `b -> d` among the
//! children of `a`: siblings may depend on each other in one direction only, at every level
//! (a child naming its parent, or a parent its child, is nesting, not a cycle). The test fails
//! with each cycle and the files that make its edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use syn::visit::Visit;

type ModPath = Vec<String>;

/// One source file: its module path and text.
struct Source {
    module: ModPath,
    file: String,
    text: String,
}

fn read_sources(root: &Path) -> Vec<Source> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<Source>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).expect("src dir").flatten().collect();
        entries.sort_by_key(|e| e.path());
        for e in entries {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap_or(&p).to_path_buf();
            if p.is_dir() {
                // Binaries are crates of their own.
                if rel != Path::new("bin") {
                    walk(&p, root, out);
                }
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let mut module: ModPath = rel
                .with_extension("")
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            if module == ["lib"] {
                module.clear();
            }
            if module == ["main"] {
                continue;
            }
            out.push(Source {
                module,
                file: format!("src/{}", rel.display()),
                text: std::fs::read_to_string(&p).expect("read source"),
            });
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

/// Collects the module paths of a file: inline modules and every path it names, as written.
struct Collector {
    /// Module the visitor is in (the file's, plus inline `mod x { }` around it).
    current: ModPath,
    /// Inline modules found.
    inline: Vec<ModPath>,
    /// (module the path appears in, the path's segments as written).
    refs: Vec<(ModPath, Vec<String>)>,
}

impl Collector {
    fn add(&mut self, segs: Vec<String>) {
        if !segs.is_empty() {
            self.refs.push((self.current.clone(), segs));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut segs = prefix.clone();
                segs.push(n.ident.to_string());
                self.add(segs);
            }
            syn::UseTree::Rename(r) => {
                let mut segs = prefix.clone();
                segs.push(r.ident.to_string());
                self.add(segs);
            }
            syn::UseTree::Glob(_) => self.add(prefix.clone()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    /// `crate::a::b`, `super::x`, `self::y` inside a macro's tokens (format args, select!).
    fn macro_tokens(&mut self, tokens: proc_macro2::TokenStream) {
        let mut flat = Vec::new();
        flatten(tokens, &mut flat);
        let mut i = 0;
        while i < flat.len() {
            if matches!(flat[i].as_str(), "crate" | "super" | "self") {
                let mut segs = vec![flat[i].clone()];
                let mut j = i + 1;
                while flat.get(j).is_some_and(|t| t == "::") {
                    match flat.get(j + 1) {
                        Some(t) if t.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                            segs.push(t.clone());
                            j += 2;
                        }
                        _ => break,
                    }
                }
                if segs.len() > 1 {
                    self.add(segs);
                }
                i = j;
            } else {
                i += 1;
            }
        }
    }
}

/// Tokens as strings, with `::` joined into one.
fn flatten(tokens: proc_macro2::TokenStream, out: &mut Vec<String>) {
    let mut colon = false;
    for t in tokens {
        match t {
            proc_macro2::TokenTree::Group(g) => {
                colon = false;
                flatten(g.stream(), out);
            }
            proc_macro2::TokenTree::Punct(p) if p.as_char() == ':' => {
                if colon {
                    out.pop();
                    out.push("::".into());
                    colon = false;
                } else {
                    out.push(":".into());
                    colon = true;
                }
            }
            other => {
                colon = false;
                out.push(other.to_string());
            }
        }
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.current.push(m.ident.to_string());
            self.inline.push(self.current.clone());
            syn::visit::visit_item_mod(self, m);
            self.current.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.add(p.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.macro_tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

/// Resolves a path as written in `from` to the module it points into (None: outside the crate
/// or not relative to it).
fn resolve(from: &ModPath, segs: &[String], modules: &BTreeSet<ModPath>) -> Option<ModPath> {
    let mut abs = match segs.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("self") | Some("super") => from.clone(),
        _ => return None,
    };
    let mut rest = if segs[0] == "crate" { &segs[1..] } else { segs };
    while let Some(first) = rest.first() {
        match first.as_str() {
            "self" => {}
            "super" => {
                abs.pop()?;
            }
            _ => break,
        }
        rest = &rest[1..];
    }
    let mut target = abs.clone();
    for s in rest {
        let mut next = target.clone();
        next.push(s.clone());
        if !modules.contains(&next) {
            break;
        }
        target = next;
    }
    Some(target)
}

/// Edges between sibling modules: parent -> (from child -> to child -> files).
type Graph = BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, BTreeSet<String>>>>;

fn graph(sources: &[Source]) -> Graph {
    let mut modules: BTreeSet<ModPath> = sources.iter().map(|s| s.module.clone()).collect();
    let mut collected = Vec::new();
    for s in sources {
        let file = syn::parse_file(&s.text).unwrap_or_else(|e| panic!("{}: {e}", s.file));
        let mut c = Collector {
            current: s.module.clone(),
            inline: Vec::new(),
            refs: Vec::new(),
        };
        c.visit_file(&file);
        modules.extend(c.inline.iter().cloned());
        collected.push((s.file.clone(), c.refs));
    }
    let mut g = Graph::new();
    for (file, refs) in collected {
        for (from, segs) in refs {
            let Some(to) = resolve(&from, &segs, &modules) else {
                continue;
            };
            let k = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if k < from.len() && k < to.len() {
                g.entry(from[..k].to_vec())
                    .or_default()
                    .entry(from[k].clone())
                    .or_default()
                    .entry(to[k].clone())
                    .or_default()
                    .insert(file.clone());
            }
        }
    }
    g
}

/// Strongly connected components of more than one node (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(next) = t.edges.get(v) {
            for w in next.keys() {
                let w = w.as_str();
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// Every cycle, described with the files behind each of its edges.
fn report(g: &Graph) -> Vec<String> {
    let mut found = Vec::new();
    for (parent, edges) in g {
        for comp in cycles(edges) {
            let mut text = format!(
                "cycle among the children of `crate{}`: {}",
                parent.iter().map(|p| format!("::{p}")).collect::<String>(),
                comp.join(", ")
            );
            for a in &comp {
                for (b, files) in &edges[a] {
                    if comp.contains(b) {
                        let files: Vec<_> = files.iter().map(String::as_str).collect();
                        text.push_str(&format!("\n    {a} -> {b}  ({})", files.join(", ")));
                    }
                }
            }
            found.push(text);
        }
    }
    found
}

fn source(module: &[&str], text: &str) -> Source {
    Source {
        module: module.iter().map(|s| s.to_string()).collect(),
        file: format!("src/{}.rs", module.join("/")),
        text: text.into(),
    }
}

#[test]
fn the_module_graph_has_no_cycles() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&read_sources(&root));
    // The parser sees the real dependencies (a checker that finds no edges proves nothing).
    let top = &g[&Vec::new()];
    for (from, to) in [
        ("broker", "vhost"),
        ("vhost", "queue"),
        ("queue", "store"),
        ("amqp", "vhost"),
    ] {
        assert!(
            top.get(from).is_some_and(|e| e.contains_key(to)),
            "expected edge {from} -> {to}"
        );
    }
    assert!(g[&vec!["amqp".to_string()]]["connection"].contains_key("methods"));
    let found = report(&g);
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn the_checker_finds_cycles_through_uses_paths_and_macros() {
    // Two top-level modules naming each other: one by `use`, one by a path in a macro.
    let g = graph(&[
        source(&["a"], "use crate::b::Thing; fn f() {}"),
        source(&["b"], "fn g() { println!(\"{}\", crate::a::X); }"),
        source(&["c"], "fn h() { let _ = super::a::Y; }"),
    ]);
    let found = report(&g);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("a, b"), "{}", found[0]);
    // Siblings inside a module, through `super::` and a grouped use; the parent naming its
    // children and a child naming its parent are not cycles.
    let g = graph(&[
        source(&["m"], "mod x; mod y; use x::A; fn f(_: y::B) {}"),
        source(&["m", "x"], "use super::{y::B, C}; struct A;"),
        source(&["m", "y"], "fn f() -> super::x::A { todo!() } struct B;"),
    ]);
    let found = report(&g);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("crate::m`: x, y"), "{}", found[0]);
    // A one-way chain is fine.
    let g = graph(&[
        source(&["a"], "use crate::b::B;"),
        source(&["b"], "use crate::c::C;"),
        source(&["c"], "pub struct C;"),
    ]);
    assert!(report(&g).is_empty());
}
