//! The metadata tree in memory: what the state machine applies commands to and what local
//! reads are served from. Applying is deterministic and depends only on the tree, so every
//! node that applies the same entries holds the same tree, and re-applying entries after a
//! crash (the store's copy may lag the log) converges to the same state.

use super::types::{Command, Path, Reply};
use crate::store::TreeChange;
use std::collections::BTreeMap;

/// Paths to values, ordered so a subtree is one range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    entries: BTreeMap<Path, Vec<u8>>,
}

impl Tree {
    /// A tree holding `entries`.
    pub fn from_entries(entries: impl IntoIterator<Item = (Path, Vec<u8>)>) -> Tree {
        Tree {
            entries: entries.into_iter().collect(),
        }
    }

    /// The value at `path`.
    pub fn get(&self, path: &[String]) -> Option<&Vec<u8>> {
        self.entries.get(path)
    }

    /// The values at `prefix` and below, in order.
    pub fn children<'a>(
        &'a self,
        prefix: &'a [String],
    ) -> impl Iterator<Item = (&'a Path, &'a Vec<u8>)> + 'a {
        self.entries
            .range::<[String], _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(move |(k, _)| k.starts_with(prefix))
    }

    /// Every entry, in order.
    pub fn entries(&self) -> impl Iterator<Item = (&Path, &Vec<u8>)> {
        self.entries.iter()
    }

    /// How many values the tree holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the tree holds no value.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Applies `cmd`, appending the changes made (for the store) to `changes` and what each
    /// leaf found to `reply`.
    pub fn apply(&mut self, cmd: &Command, changes: &mut Vec<TreeChange>, reply: &mut Reply) {
        match cmd {
            Command::Put { path, value } => {
                reply
                    .before
                    .push(self.entries.insert(path.clone(), value.clone()));
                changes.push(TreeChange::Put(path.clone(), value.clone()));
            }
            Command::Create { path, value } => {
                self.if_absent(path, value, &[], changes, reply);
            }
            Command::Delete { path } => {
                let before = self.entries.remove(path);
                if before.is_some() {
                    changes.push(TreeChange::Delete(path.clone()));
                }
                reply.before.push(before);
            }
            Command::DeleteTree { path } => {
                let doomed: Vec<Path> = self.children(path).map(|(k, _)| k.clone()).collect();
                let before = self.entries.get(path).cloned();
                for k in doomed {
                    self.entries.remove(&k);
                }
                changes.push(TreeChange::DeleteTree(path.clone()));
                reply.before.push(before);
            }
            Command::Batch(cmds) => {
                for c in cmds {
                    self.apply(c, changes, reply);
                }
            }
            Command::Each(cmds) => {
                for c in cmds {
                    let mut own = Reply::default();
                    self.apply(c, changes, &mut own);
                    reply.each.push(own);
                }
            }
            Command::IfAbsent { path, value, then } => {
                self.if_absent(path, value, then, changes, reply);
            }
            Command::IfPresent { path, then } => {
                let found = self.entries.get(path).cloned();
                let present = found.is_some();
                reply.before.push(found);
                if present {
                    for c in then {
                        self.apply(c, changes, reply);
                    }
                }
            }
            Command::IfEquals { path, value, then } => {
                let found = self.entries.get(path).cloned();
                let equal = found.as_ref() == Some(value);
                reply.before.push(found);
                if equal {
                    for c in then {
                        self.apply(c, changes, reply);
                    }
                }
            }
            Command::DeleteWhere { prefix, at, name } => {
                let doomed: Vec<Path> = self
                    .children(prefix)
                    .filter(|(k, _)| k.get(*at) == Some(name))
                    .map(|(k, _)| k.clone())
                    .collect();
                reply.before.push((!doomed.is_empty()).then(Vec::new));
                for k in doomed {
                    self.entries.remove(&k);
                    changes.push(TreeChange::Delete(k));
                }
            }
            Command::IfNoneBelow {
                prefix,
                at,
                name,
                then,
            } => self.if_below((prefix, *at, name), false, then, changes, reply),
            Command::IfAnyBelow {
                prefix,
                at,
                name,
                then,
            } => self.if_below((prefix, *at, name), true, then, changes, reply),
        }
    }

    /// Applies `then` when whether some path below `prefix` has `name` at index `at` is
    /// `wanted`; reports whether one had (Some) or not (None).
    fn if_below(
        &mut self,
        (prefix, at, name): (&[String], usize, &String),
        wanted: bool,
        then: &[Command],
        changes: &mut Vec<TreeChange>,
        reply: &mut Reply,
    ) {
        let found = self.children(prefix).any(|(k, _)| k.get(at) == Some(name));
        reply.before.push(found.then(Vec::new));
        if found == wanted {
            for c in then {
                self.apply(c, changes, reply);
            }
        }
    }

    /// Puts `value` at `path` and applies `then` when nothing is there; reports what was.
    fn if_absent(
        &mut self,
        path: &Path,
        value: &[u8],
        then: &[Command],
        changes: &mut Vec<TreeChange>,
        reply: &mut Reply,
    ) {
        if let Some(existing) = self.entries.get(path) {
            reply.before.push(Some(existing.clone()));
            return;
        }
        self.entries.insert(path.clone(), value.to_vec());
        changes.push(TreeChange::Put(path.clone(), value.to_vec()));
        reply.before.push(None);
        for c in then {
            self.apply(c, changes, reply);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(parts: &[&str]) -> Path {
        parts.iter().map(|s| s.to_string()).collect()
    }

    fn put(path: &[&str], v: &str) -> Command {
        Command::Put {
            path: p(path),
            value: v.into(),
        }
    }

    fn run(tree: &mut Tree, cmd: Command) -> Reply {
        let mut reply = Reply::default();
        tree.apply(&cmd, &mut Vec::new(), &mut reply);
        reply
    }

    #[test]
    fn create_keeps_the_first_value_and_reports_it() {
        let mut t = Tree::default();
        let create = |v: &str| Command::Create {
            path: p(&["q"]),
            value: v.into(),
        };
        assert_eq!(run(&mut t, create("a")).before, vec![None]);
        assert_eq!(run(&mut t, create("b")).before, vec![Some(b"a".to_vec())]);
        assert_eq!(t.get(&p(&["q"])), Some(&b"a".to_vec()));
    }

    #[test]
    fn each_command_of_a_shared_entry_gets_its_own_reply_in_order() {
        let mut t = Tree::default();
        let create = |v: &str| Command::Create {
            path: p(&["q"]),
            value: v.into(),
        };
        let guarded = Command::IfPresent {
            path: p(&["missing"]),
            then: vec![put(&["r"], "x")],
        };
        let reply = run(
            &mut t,
            Command::Each(vec![create("a"), guarded, create("b")]),
        );
        assert!(reply.before.is_empty());
        let each: Vec<_> = reply.each.into_iter().map(|r| r.before).collect();
        assert_eq!(
            each,
            vec![vec![None], vec![None], vec![Some(b"a".to_vec())]]
        );
        assert!(t.get(&p(&["r"])).is_none());
    }

    #[test]
    fn if_equals_applies_only_over_the_value_it_was_given() {
        let mut t = Tree::default();
        run(&mut t, put(&["q"], "v1"));
        let cas = |from: &str, to: &str| Command::IfEquals {
            path: p(&["q"]),
            value: from.into(),
            then: vec![put(&["q"], to)],
        };
        assert_eq!(
            run(&mut t, cas("v1", "v2")).before,
            vec![Some(b"v1".to_vec()), Some(b"v1".to_vec())]
        );
        // A writer that read v1 too finds v2 and changes nothing.
        assert_eq!(
            run(&mut t, cas("v1", "v3")).before,
            vec![Some(b"v2".to_vec())]
        );
        assert_eq!(t.get(&p(&["q"])), Some(&b"v2".to_vec()));
        assert_eq!(
            run(
                &mut t,
                Command::IfEquals {
                    path: p(&["gone"]),
                    value: "v".into(),
                    then: vec![put(&["gone"], "w")],
                }
            )
            .before,
            vec![None]
        );
        assert!(t.get(&p(&["gone"])).is_none());
    }

    #[test]
    fn if_absent_applies_its_commands_only_the_first_time() {
        let mut t = Tree::default();
        let seed = |user: &str| Command::IfAbsent {
            path: p(&["seeded"]),
            value: "node-a".into(),
            then: vec![put(&["users", user], "hash")],
        };
        assert_eq!(run(&mut t, seed("guest")).before, vec![None, None]);
        assert_eq!(
            run(&mut t, seed("other")).before,
            vec![Some(b"node-a".to_vec())]
        );
        assert_eq!(t.children(&p(&["users"])).count(), 1);
        assert!(t.get(&p(&["users", "other"])).is_none());
    }

    #[test]
    fn delete_tree_takes_the_subtree_and_nothing_that_only_shares_a_prefix_of_a_name() {
        let mut t = Tree::default();
        let reply = run(
            &mut t,
            Command::Batch(vec![
                put(&["v", "a"], "1"),
                put(&["v", "a", "q"], "2"),
                put(&["v", "ab"], "3"),
            ]),
        );
        assert_eq!(reply.before, vec![None, None, None]);
        assert_eq!(t.children(&p(&["v", "a"])).count(), 2);
        let reply = run(
            &mut t,
            Command::DeleteTree {
                path: p(&["v", "a"]),
            },
        );
        assert_eq!(reply.before, vec![Some(b"1".to_vec())]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(&p(&["v", "ab"])), Some(&b"3".to_vec()));
        assert_eq!(
            run(
                &mut t,
                Command::Delete {
                    path: p(&["v", "zz"])
                }
            )
            .before,
            vec![None]
        );
    }

    #[test]
    fn if_present_applies_only_under_an_existing_path_and_delete_where_matches_one_part() {
        let mut t = Tree::default();
        let guarded = |v: &str| Command::IfPresent {
            path: p(&["vhosts", v]),
            then: vec![put(&["vhosts", v, "policy", "p"], "{}")],
        };
        assert_eq!(run(&mut t, guarded("a")).before, vec![None]);
        assert!(t.is_empty());
        run(&mut t, put(&["vhosts", "a"], "{}"));
        assert_eq!(
            run(&mut t, guarded("a")).before,
            vec![Some(b"{}".to_vec()), None]
        );
        assert_eq!(t.len(), 2);
        for (user, vhost) in [("u1", "a"), ("u2", "a"), ("u2", "b"), ("a", "b")] {
            run(&mut t, put(&["permissions", user, vhost], "x"));
        }
        let mut changes = Vec::new();
        let mut reply = Reply::default();
        let cmd = Command::DeleteWhere {
            prefix: p(&["permissions"]),
            at: 2,
            name: "a".into(),
        };
        t.apply(&cmd, &mut changes, &mut reply);
        assert_eq!(reply.before, vec![Some(Vec::new())]);
        assert_eq!(
            changes,
            vec![
                TreeChange::Delete(p(&["permissions", "u1", "a"])),
                TreeChange::Delete(p(&["permissions", "u2", "a"])),
            ]
        );
        let root = p(&["permissions"]);
        let left: Vec<&Path> = t.children(&root).map(|(k, _)| k).collect();
        assert_eq!(
            left,
            vec![
                &p(&["permissions", "a", "b"]),
                &p(&["permissions", "u2", "b"])
            ]
        );
        assert_eq!(run(&mut t, cmd).before, vec![None]);
    }

    #[test]
    fn if_none_below_applies_only_when_no_path_has_the_part() {
        let mut t = Tree::default();
        run(&mut t, put(&["x", "ad"], "auto"));
        run(&mut t, put(&["b", "d1", "ad", "k"], ""));
        run(&mut t, put(&["b", "d2", "ad", "k"], ""));
        let unbind = |dest: &str| {
            Command::Batch(vec![
                Command::Delete {
                    path: p(&["b", dest, "ad", "k"]),
                },
                Command::IfNoneBelow {
                    prefix: p(&["b"]),
                    at: 2,
                    name: "ad".into(),
                    then: vec![Command::Delete {
                        path: p(&["x", "ad"]),
                    }],
                },
            ])
        };
        let first = run(&mut t, unbind("d1"));
        assert_eq!(first.before, vec![Some(Vec::new()), Some(Vec::new())]);
        assert!(t.get(&p(&["x", "ad"])).is_some(), "one binding is left");
        let last = run(&mut t, unbind("d2"));
        assert_eq!(
            last.before,
            vec![Some(Vec::new()), None, Some(b"auto".to_vec())]
        );
        assert!(t.get(&p(&["x", "ad"])).is_none(), "the last one took it");
        let any = |name: &str| Command::IfAnyBelow {
            prefix: p(&["b"]),
            at: 1,
            name: name.into(),
            then: vec![put(&["seen", name], "")],
        };
        run(&mut t, put(&["b", "d3", "ad", "k"], ""));
        assert_eq!(run(&mut t, any("d3")).before, vec![Some(Vec::new()), None]);
        assert_eq!(run(&mut t, any("d9")).before, vec![None]);
        assert!(t.get(&p(&["seen", "d3"])).is_some() && t.get(&p(&["seen", "d9"])).is_none());
    }

    #[test]
    fn replaying_a_suffix_over_a_later_state_converges() {
        let cmds = vec![
            Command::Create {
                path: p(&["a"]),
                value: "1".into(),
            },
            Command::Delete { path: p(&["a"]) },
            Command::Create {
                path: p(&["a"]),
                value: "2".into(),
            },
            put(&["b"], "x"),
            Command::DeleteTree { path: p(&["b"]) },
            Command::Create {
                path: p(&["b"]),
                value: "y".into(),
            },
        ];
        let mut full = Tree::default();
        for c in &cmds {
            run(&mut full, c.clone());
        }
        // A crash after applying k entries in memory but persisting fewer: replay from every
        // persisted point j <= k over the state after k.
        for k in 0..=cmds.len() {
            let mut ahead = Tree::default();
            for c in &cmds[..k] {
                run(&mut ahead, c.clone());
            }
            for j in 0..=k {
                let mut replayed = ahead.clone();
                for c in &cmds[j..] {
                    run(&mut replayed, c.clone());
                }
                assert_eq!(replayed, full, "applied {k}, persisted {j}");
            }
        }
    }
}
