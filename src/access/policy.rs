//! The policy language: statements of effect, principals, actions and
//! resources (the seed's YAML, with principals and deny), parsed with the
//! position of every mistake, and evaluated with deny beating allow.

use crate::error::{Error, Result};
use crate::relpath::RelPath;
use serde::Deserialize;

/// What may be done. `dataset:*` names them all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Create,
    Read,
    Versions,
    Commit,
    Tag,
    Admin,
    /// Expire versions (`forget`).
    Forget,
    /// Erase a path from versions.
    Erase,
    /// Put and release legal holds.
    Hold,
    /// Set retention rules.
    Retention,
}

impl Action {
    pub const ALL: [Action; 10] = [
        Action::Create,
        Action::Read,
        Action::Versions,
        Action::Commit,
        Action::Tag,
        Action::Admin,
        Action::Forget,
        Action::Erase,
        Action::Hold,
        Action::Retention,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Action::Create => "dataset:create",
            Action::Read => "dataset:read",
            Action::Versions => "dataset:versions",
            Action::Commit => "dataset:commit",
            Action::Tag => "dataset:tag",
            Action::Admin => "dataset:admin",
            Action::Forget => "dataset:forget",
            Action::Erase => "dataset:erase",
            Action::Hold => "dataset:hold",
            Action::Retention => "dataset:retention",
        }
    }

    pub fn parse(s: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == s)
    }

    fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// The resource that `dataset:admin` over every dataset (setting the
/// policy, gc) is checked against.
pub const ALL_DATASETS: &str = "datasets/*";

/// Most statements, and most patterns in one statement.
const MAX_STATEMENTS: usize = 10_000;
const MAX_PATTERNS: usize = 1_000;
/// Longest policy text.
pub const MAX_POLICY_BYTES: usize = 256 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    Allow,
    Deny,
}

/// An action as written: `dataset:read`, or `dataset:*` for all.
#[derive(Clone, Copy, Debug)]
struct Actions(u16);

impl<'de> Deserialize<'de> for Actions {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "dataset:*" || s == "*" {
            return Ok(Actions(u16::MAX));
        }
        Action::parse(&s).map(|a| Actions(a.bit())).ok_or_else(|| {
            let known: Vec<_> = Action::ALL.iter().map(|a| a.name()).collect();
            serde::de::Error::custom(format!(
                "unknown action {s:?} (known: {}, or dataset:*)",
                known.join(", ")
            ))
        })
    }
}

/// Who a statement is for: `user:NAME`, `group:NAME`, `key:NAME`,
/// `token:SUBJECT`, `claim:NAME=VALUE`, or `*` for everyone; `*` inside a
/// name matches any run of characters.
#[derive(Clone, Debug)]
struct Principal(String);

const PRINCIPAL_KINDS: [&str; 5] = ["user:", "group:", "key:", "token:", "claim:"];

impl<'de> Deserialize<'de> for Principal {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let ok = s == "*"
            || PRINCIPAL_KINDS
                .iter()
                .any(|k| s.strip_prefix(k).is_some_and(|rest| !rest.is_empty()));
        if !ok || (s.starts_with("claim:") && !s.contains('=')) {
            return Err(serde::de::Error::custom(format!(
                "unknown principal {s:?} (user:NAME, group:NAME, key:NAME, token:SUBJECT, claim:NAME=VALUE or *)"
            )));
        }
        Ok(Principal(s))
    }
}

/// A resource pattern: `datasets/NAME`, `datasets/NAME/versions/vN` (or a
/// tag), `datasets/NAME/versions/vN/files/PATH`, with `*` wildcards.
#[derive(Clone, Debug)]
struct Resource(String);

impl<'de> Deserialize<'de> for Resource {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "*" || s.starts_with("datasets/") {
            Ok(Resource(s))
        } else {
            Err(serde::de::Error::custom(format!(
                "resource {s:?} does not start with datasets/ (datasets/NAME, datasets/NAME/versions/vN, datasets/NAME/versions/*/files/PATH)"
            )))
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireStatement {
    name: String,
    effect: Effect,
    #[serde(default)]
    principals: Option<Vec<Principal>>,
    actions: Vec<Actions>,
    resources: Vec<Resource>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WirePolicy {
    policies: Vec<WireStatement>,
}

#[derive(Clone, Debug)]
pub struct Statement {
    pub name: String,
    pub effect: Effect,
    /// None: everyone.
    principals: Option<Vec<Glob>>,
    actions: u16,
    resources: Vec<Glob>,
}

impl Statement {
    fn applies_to(&self, who: &Who) -> bool {
        match &self.principals {
            None => true,
            Some(ps) => ps
                .iter()
                .any(|p| who.principals.iter().any(|w| p.matches(w))),
        }
    }

    fn covers(&self, resource: &Target<'_>) -> bool {
        self.resources
            .iter()
            .any(|r| resource.aliases.iter().any(|a| r.matches(a)))
    }
}

/// A parsed, checked policy.
#[derive(Clone, Debug)]
pub struct Policy {
    statements: Vec<Statement>,
}

/// Who asks: their principals (`user:alice`, `group:analysts`, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Who {
    pub principals: Vec<String>,
}

/// What is asked about: a resource under each of its names (a version is
/// `vN` and each of its tags).
pub struct Target<'a> {
    pub aliases: &'a [String],
}

/// The answer, with the statement that gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The deciding statement and its effect; None: no statement matched
    /// (denied by default).
    pub by: Option<(String, Effect)>,
}

impl Decision {
    /// One line for people: which statement decided, or that none did.
    pub fn explain(&self) -> String {
        match &self.by {
            Some((name, Effect::Deny)) => format!("deny: statement {name:?} denies it"),
            Some((name, Effect::Allow)) => format!("allow: statement {name:?} allows it"),
            None => "deny: no statement allows it (denied by default)".into(),
        }
    }
}

/// A policy parse or check failure at a line and column (1-based).
fn at(line: usize, column: usize, message: impl Into<String>) -> Error {
    Error::Policy {
        line,
        column,
        message: message.into(),
    }
}

impl Policy {
    /// Parses and checks policy text. Refused: YAML that does not parse,
    /// unknown fields, actions or principals, empty lists, and a policy that
    /// lets nobody administer it.
    pub fn parse(text: &str) -> Result<Policy> {
        let policy = Policy::parse_narrowing(text)?;
        policy.check_admin().map_err(|m| at(1, 1, m))?;
        Ok(policy)
    }

    /// Parses and checks a policy that only narrows another (a gateway's
    /// `--policy`): as `parse`, but it need leave nobody an admin.
    pub fn parse_narrowing(text: &str) -> Result<Policy> {
        if text.len() > MAX_POLICY_BYTES {
            return Err(at(
                1,
                1,
                format!("a policy holds at most {MAX_POLICY_BYTES} bytes"),
            ));
        }
        let wire: WirePolicy = yaml_serde::from_str(text).map_err(|e| {
            let (line, column) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
            // The message without its own " at line L column C".
            let msg = e.to_string();
            let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
            at(line, column, msg)
        })?;
        if wire.policies.len() > MAX_STATEMENTS {
            return Err(at(1, 1, format!("more than {MAX_STATEMENTS} statements")));
        }
        let mut statements = Vec::with_capacity(wire.policies.len());
        for w in wire.policies {
            let (line, column) = statement_position(text, &w.name);
            let empty = |what: &str| {
                at(
                    line,
                    column,
                    format!("statement {:?}: {what} is empty", w.name),
                )
            };
            if w.name.is_empty() {
                return Err(at(line, column, "a statement without a name"));
            }
            if statements.iter().any(|s: &Statement| s.name == w.name) {
                return Err(at(
                    line,
                    column,
                    format!("two statements named {:?}", w.name),
                ));
            }
            if w.actions.is_empty() {
                return Err(empty("actions"));
            }
            if w.resources.is_empty() {
                return Err(empty("resources"));
            }
            if w.principals.as_ref().is_some_and(Vec::is_empty) {
                return Err(empty("principals"));
            }
            let longest = w
                .resources
                .len()
                .max(w.principals.as_ref().map_or(0, Vec::len));
            if longest > MAX_PATTERNS {
                return Err(at(
                    line,
                    column,
                    format!("statement {:?}: more than {MAX_PATTERNS} patterns", w.name),
                ));
            }
            statements.push(Statement {
                name: w.name,
                effect: w.effect,
                principals: w
                    .principals
                    .map(|ps| ps.iter().map(|p| Glob::new(&p.0)).collect()),
                actions: w.actions.iter().fold(0, |acc, a| acc | a.0),
                resources: w.resources.iter().map(|r| Glob::new(&r.0)).collect(),
            });
        }
        Ok(Policy { statements })
    }

    /// Some principal must keep `dataset:admin` over every dataset, or no
    /// one could ever change the policy again. Principals are taken as
    /// written (a deny of a group a user is in is not known here).
    fn check_admin(&self) -> std::result::Result<(), String> {
        let all = [ALL_DATASETS.to_string()];
        let target = Target { aliases: &all };
        let denies = self.about(Action::Admin, &target, Effect::Deny);
        let kept = self
            .about(Action::Admin, &target, Effect::Allow)
            .into_iter()
            .flat_map(|s| match &s.principals {
                Some(ps) => ps.iter().map(|p| p.text.clone()).collect(),
                None => vec!["*".to_string()],
            })
            .any(|p| {
                !denies.iter().any(|d| match &d.principals {
                    None => true,
                    Some(ps) => ps.iter().any(|x| x.text == "*" || x.matches(&p)),
                })
            });
        if kept {
            Ok(())
        } else {
            Err(format!(
                "this policy would lock out every admin: no principal is left with dataset:admin on {ALL_DATASETS} (add a statement that allows it to someone)"
            ))
        }
    }

    /// The statements of `effect` about `action` on `target`, for anyone.
    fn about(&self, action: Action, target: &Target<'_>, effect: Effect) -> Vec<&Statement> {
        self.statements
            .iter()
            .filter(|s| s.effect == effect && s.actions & action.bit() != 0 && s.covers(target))
            .collect()
    }

    /// The statements that can apply to `who`, for deciding many requests
    /// of one caller quickly (kept as for everyone: decide only for `who`
    /// with it).
    pub fn for_who(&self, who: &Who) -> Policy {
        Policy {
            statements: self
                .statements
                .iter()
                .filter(|s| s.applies_to(who))
                .map(|s| Statement {
                    principals: None,
                    ..s.clone()
                })
                .collect(),
        }
    }

    /// Every principal its statements name without a wildcard, and `*`
    /// (everyone): the principals a report asks about.
    pub fn principals(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .statements
            .iter()
            .flat_map(|s| s.principals.iter().flatten())
            .map(|g| g.text.clone())
            .filter(|t| !t.contains('*'))
            .collect();
        out.sort();
        out.dedup();
        out.push("*".into());
        out
    }

    /// Whether `who` may do `action` on the resource named by any of
    /// `aliases`: a matching deny wins, then a matching allow; else denied.
    pub fn decide(&self, who: &Who, action: Action, aliases: &[String]) -> Decision {
        let r = Target { aliases };
        let mut allow = None;
        for s in &self.statements {
            if s.actions & action.bit() == 0 || !s.applies_to(who) || !s.covers(&r) {
                continue;
            }
            match s.effect {
                Effect::Deny => {
                    return Decision {
                        allowed: false,
                        by: Some((s.name.clone(), Effect::Deny)),
                    };
                }
                Effect::Allow if allow.is_none() => allow = Some(s.name.clone()),
                Effect::Allow => {}
            }
        }
        Decision {
            allowed: allow.is_some(),
            by: allow.map(|n| (n, Effect::Allow)),
        }
    }

    /// Whether `path` of a version (named `versions`, as
    /// `super::version_resources` makes them) exists for `who`: the version
    /// and the path may be seen, and no deny of reading names a path that
    /// covers it. The one rule the mount and the gateway both apply: what
    /// it hides is neither listed nor found, as if it were not there.
    pub fn sees_path(&self, who: &Who, versions: &[String], path: &RelPath, dir: bool) -> bool {
        let paths = super::path_resources(versions, path, dir);
        let mut all = versions.to_vec();
        all.extend(paths.iter().cloned());
        self.decide(who, Action::Versions, &all).allowed
            && !self.denies_path(who, Action::Read, &paths)
    }

    /// Whether the policy may hide some path of `dataset` from `who` (a
    /// deny of reading that names paths, `denies_path`, applies to it
    /// there): then what a version's figures count (files added, changed,
    /// removed, bytes) would tell of what it hides, and they are withheld.
    pub fn may_hide_paths(&self, who: &Who, dataset: &str) -> bool {
        let ours = format!("{}/", super::dataset_resource(dataset));
        self.path_denials(who, Action::Read).any(|r| {
            let start = r.literal_start();
            start.starts_with(&ours) || ours.starts_with(start)
        })
    }

    /// The resources naming paths (`…/files/…`) of the denies of `action`
    /// that apply to `who`: what they cover is hidden.
    fn path_denials<'a>(&'a self, who: &'a Who, action: Action) -> impl Iterator<Item = &'a Glob> {
        self.statements
            .iter()
            .filter(move |s| {
                s.effect == Effect::Deny && s.actions & action.bit() != 0 && s.applies_to(who)
            })
            .flat_map(|s| s.resources.iter())
            .filter(|r| r.text.contains("/files/"))
    }

    /// Whether a deny whose resource names a path (`…/files/…`) covers one
    /// of `paths`: what such a statement denies reading is hidden, not
    /// merely unreadable.
    pub fn denies_path(&self, who: &Who, action: Action, paths: &[String]) -> bool {
        self.path_denials(who, action)
            .any(|r| paths.iter().any(|p| r.matches(p)))
    }

    /// The Unix principals (`user:NAME`, `group:NAME`, as written) of the
    /// allows of `action` that can name something of `dataset`: a Unix
    /// caller holding none of them is allowed nothing there. None when
    /// one of those allows is for everyone or names users or groups by a
    /// wildcard (then every caller may be).
    pub fn unix_principals(&self, action: Action, dataset: &str) -> Option<Vec<String>> {
        let ours = super::dataset_resource(dataset);
        let inside = format!("{ours}/");
        // The dataset itself, or a pattern whose text before its first
        // star agrees with a name inside it.
        let names = |g: &Glob| {
            let lit = g.literal_start();
            g.matches(&ours)
                || lit.starts_with(&inside)
                || (g.rest.is_some() && inside.starts_with(lit))
        };
        let mut out = Vec::new();
        for s in &self.statements {
            if s.effect != Effect::Allow
                || s.actions & action.bit() == 0
                || !s.resources.iter().any(names)
            {
                continue;
            }
            for p in s.principals.as_ref()? {
                let unix = p.text.starts_with("user:") || p.text.starts_with("group:");
                if p.text == "*" || (unix && p.rest.is_some()) {
                    return None;
                }
                if unix && !out.contains(&p.text) {
                    out.push(p.text.clone());
                }
            }
        }
        Some(out)
    }

    /// Whether every Unix caller that holds one of `principals` (None:
    /// every caller), whatever other users and groups it holds, is allowed
    /// `action` on the resource named by `aliases`: an allow applies to
    /// each of them, and no deny could apply to any Unix caller.
    pub fn allows_every(
        &self,
        principals: Option<&[String]>,
        action: Action,
        aliases: &[String],
    ) -> bool {
        let r = Target { aliases };
        let unix_deny = self.about(action, &r, Effect::Deny).iter().any(|s| {
            s.principals.as_ref().is_none_or(|ps| {
                ps.iter().any(|p| {
                    p.text == "*" || p.text.starts_with("user:") || p.text.starts_with("group:")
                })
            })
        });
        if unix_deny {
            return false;
        }
        let allows = self.about(action, &r, Effect::Allow);
        // For everyone: only a statement every caller matches.
        let everyone = |s: &&Statement| {
            s.principals.as_ref().is_none_or(|ps| {
                ps.iter().any(|p| {
                    ["*", "user:", "group:"].iter().any(|k| {
                        p.text
                            .strip_prefix(k)
                            .is_some_and(|r| r.bytes().all(|b| b == b'*'))
                    })
                })
            })
        };
        match principals {
            None => allows.iter().any(everyone),
            Some(ps) => ps.iter().all(|p| {
                allows.iter().any(|s| {
                    s.principals
                        .as_ref()
                        .is_none_or(|g| g.iter().any(|x| x.matches(p)))
                })
            }),
        }
    }

    /// Every resource pattern of every statement, once.
    pub fn patterns(&self) -> Vec<Glob> {
        let mut out: Vec<Glob> = self
            .statements
            .iter()
            .flat_map(|s| s.resources.iter().cloned())
            .collect();
        out.sort_by(|a, b| a.text.cmp(&b.text));
        out.dedup_by(|a, b| a.text == b.text);
        out
    }

    /// Refuses everything: what a mount enforces when the policy in the
    /// store cannot be trusted.
    pub fn deny_all() -> Policy {
        Policy {
            statements: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.statements.len()
    }

    pub fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }
}

/// Where statement `name` begins in `text` (its `name:` line), for errors
/// found after parsing; (1, 1) if it cannot be told.
fn statement_position(text: &str, name: &str) -> (usize, usize) {
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start().trim_start_matches("- ").trim_start();
        if let Some(v) = t.strip_prefix("name:") {
            let v = v.trim().trim_matches(['"', '\'']);
            if v == name {
                return (i + 1, line.len() - line.trim_start().len() + 1);
            }
        }
    }
    (1, 1)
}

/// A pattern where `*` matches any run of characters (`/` included, as in
/// IAM resource patterns), split at its stars once, each part between two
/// stars with its searcher built.
#[derive(Clone, Debug)]
pub struct Glob {
    pub text: String,
    first: String,
    /// None: no star (the text must equal the pattern).
    rest: Option<(Vec<memchr::memmem::Finder<'static>>, String)>,
}

impl Glob {
    pub fn new(pattern: &str) -> Glob {
        let mut parts: Vec<&str> = pattern.split('*').collect();
        let first = parts.remove(0).to_string();
        let rest = parts.pop().map(|last| {
            let middle = parts
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| memchr::memmem::Finder::new(p.as_bytes()).into_owned())
                .collect();
            (middle, last.to_string())
        });
        Glob {
            text: pattern.to_string(),
            first,
            rest,
        }
    }

    /// The text before the first `*`.
    pub fn literal_start(&self) -> &str {
        &self.first
    }

    /// Whether `t` matches: it starts with the first part, ends with the
    /// last, and holds the others in order between them (the leftmost
    /// place of each is as good as any, as only `*` is special).
    pub fn matches(&self, t: &str) -> bool {
        let Some((middle, last)) = &self.rest else {
            return t == self.first;
        };
        let t = t.as_bytes();
        if t.len() < self.first.len() + last.len()
            || !t.starts_with(self.first.as_bytes())
            || !t.ends_with(last.as_bytes())
        {
            return false;
        }
        let mut rest = &t[self.first.len()..t.len() - last.len()];
        for finder in middle {
            match finder.find(rest) {
                Some(i) => rest = &rest[i + finder.needle().len()..],
                None => return false,
            }
        }
        true
    }
}

/// Several globs matched at once: one automaton for all of them (a
/// regular expression per glob, `*` as any run of bytes), or each in turn
/// where they do not fit one.
#[derive(Clone, Debug)]
pub enum GlobSet {
    Empty,
    Automaton(regex_automata::meta::Regex),
    Each(Vec<Glob>),
}

impl GlobSet {
    pub fn new(globs: &[Glob]) -> GlobSet {
        if globs.is_empty() {
            return GlobSet::Empty;
        }
        let regexes: Vec<String> = globs
            .iter()
            .map(|g| {
                let parts: Vec<String> = g.text.split('*').map(regex_syntax::escape).collect();
                format!(r"(?s:\A{}\z)", parts.join(".*"))
            })
            .collect();
        match regex_automata::meta::Regex::new_many(&regexes) {
            Ok(r) => GlobSet::Automaton(r),
            Err(_) => GlobSet::Each(globs.to_vec()),
        }
    }

    /// Whether some glob of the set matches `t`.
    pub fn matches(&self, t: &str) -> bool {
        match self {
            GlobSet::Empty => false,
            GlobSet::Automaton(r) => r.is_match(t),
            GlobSet::Each(globs) => globs.iter().any(|g| g.matches(t)),
        }
    }
}

/// Whether `text` matches `pattern` (see `Glob`).
pub fn glob(pattern: &str, text: &str) -> bool {
    Glob::new(pattern).matches(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = r#"
policies:
  - name: admins
    effect: allow
    principals: ["group:admins"]
    actions: ["dataset:*"]
    resources: ["*"]
  - name: analysts_read_published
    effect: allow
    principals: ["group:analysts", "key:dashboard"]
    actions: ["dataset:read", "dataset:versions"]
    resources: ["datasets/weather/versions/*"]
  - name: no_raw_pii
    effect: deny
    principals: ["group:analysts"]
    actions: ["dataset:read"]
    resources: ["datasets/weather/versions/*/files/raw/pii/*"]
  - name: pipeline_commits
    effect: allow
    principals: ["token:ci-pipeline"]
    actions: ["dataset:commit", "dataset:tag"]
    resources: ["datasets/weather"]
"#;

    fn who(ps: &[&str]) -> Who {
        Who {
            principals: ps.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn res(s: &str) -> Vec<String> {
        vec![s.to_string()]
    }

    /// The definition, by recursion: what `Glob` must agree with.
    fn reference(p: &[u8], t: &[u8]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some((b'*', rest)) => (0..=t.len()).any(|i| reference(rest, &t[i..])),
            Some((c, rest)) => t.first() == Some(c) && reference(rest, &t[1..]),
        }
    }

    proptest::proptest! {
        #[test]
        fn globs_agree_with_the_definition(p in "[ab*/]{0,8}", t in "[ab/]{0,10}") {
            proptest::prop_assert_eq!(glob(&p, &t), reference(p.as_bytes(), t.as_bytes()));
        }

        #[test]
        fn a_set_matches_where_one_of_its_globs_does(
            ps in proptest::collection::vec(r"[ab.(*/\\]{0,8}", 0..5),
            t in r"[ab./(\\\n]{0,10}",
        ) {
            let globs: Vec<Glob> = ps.iter().map(|p| Glob::new(p)).collect();
            let each = ps.iter().any(|p| reference(p.as_bytes(), t.as_bytes()));
            let set = GlobSet::new(&globs);
            proptest::prop_assert!(matches!(set, GlobSet::Automaton(_) | GlobSet::Empty));
            proptest::prop_assert_eq!(set.matches(&t), each);
        }
    }

    #[test]
    fn globs_match_runs_of_any_characters() {
        assert!(glob("datasets/*", "datasets/w/versions/v1/files/a/b"));
        assert!(glob("datasets/*/versions/v1", "datasets/w/versions/v1"));
        assert!(!glob("datasets/*/versions/v1", "datasets/w/versions/v12"));
        assert!(glob("a*b*c", "aXbYbZc"));
        assert!(!glob("a*b*c", "aXbYbZ"));
        assert!(glob("*", ""));
        assert!(glob("x/*", "x/"));
        assert!(!glob("x/*", "x"));
        assert!(glob("datasets/*", ALL_DATASETS));
        assert!(!glob("datasets/weather", ALL_DATASETS));
    }

    #[test]
    fn deny_wins_and_nothing_is_allowed_by_default() {
        let p = Policy::parse(SEED).unwrap();
        let analyst = who(&["user:ann", "group:analysts"]);
        let ok = p.decide(
            &analyst,
            Action::Read,
            &res("datasets/weather/versions/v3/files/a.csv"),
        );
        assert_eq!(
            ok.by,
            Some(("analysts_read_published".into(), Effect::Allow))
        );
        let pii = p.decide(
            &analyst,
            Action::Read,
            &res("datasets/weather/versions/v3/files/raw/pii/x.csv"),
        );
        assert!(!pii.allowed);
        assert_eq!(pii.by, Some(("no_raw_pii".into(), Effect::Deny)));
        assert!(p.denies_path(
            &analyst,
            Action::Read,
            &res("datasets/weather/versions/v3/files/raw/pii/")
        ));
        assert!(!p.denies_path(
            &analyst,
            Action::Read,
            &res("datasets/weather/versions/v3/files/raw/")
        ));
        // Listing versions is allowed, committing is not (by default).
        assert!(
            p.decide(
                &analyst,
                Action::Versions,
                &res("datasets/weather/versions/v3")
            )
            .allowed
        );
        let c = p.decide(&analyst, Action::Commit, &res("datasets/weather"));
        assert_eq!(
            c,
            Decision {
                allowed: false,
                by: None
            }
        );
        assert!(
            p.decide(
                &who(&["token:ci-pipeline"]),
                Action::Commit,
                &res("datasets/weather")
            )
            .allowed
        );
        assert!(
            !p.decide(
                &who(&["token:ci-pipeline"]),
                Action::Commit,
                &res("datasets/other")
            )
            .allowed
        );
        // A tag names a version too: any alias that matches counts.
        let tagged = vec![
            "datasets/weather/versions/v3".into(),
            "datasets/weather/versions/q1".into(),
        ];
        let only_tag = Policy::parse(
            "policies:\n  - {name: a, effect: allow, principals: ['user:root'], actions: ['dataset:admin'], resources: ['*']}\n  - {name: q, effect: allow, actions: ['dataset:versions'], resources: ['datasets/weather/versions/q1']}\n",
        )
        .unwrap();
        assert!(only_tag.decide(&analyst, Action::Versions, &tagged).allowed);
        assert!(
            !only_tag
                .decide(&analyst, Action::Versions, &tagged[..1])
                .allowed
        );
        // for_who keeps the same answers.
        let mine = p.for_who(&analyst);
        assert!(mine.len() < p.len());
        assert_eq!(
            mine.decide(
                &analyst,
                Action::Read,
                &res("datasets/weather/versions/v3/files/raw/pii/x")
            ),
            pii
        );
    }

    fn refused(text: &str) -> (usize, usize, String) {
        match Policy::parse(text).unwrap_err() {
            Error::Policy {
                line,
                column,
                message,
            } => (line, column, message),
            e => panic!("{e}"),
        }
    }

    #[test]
    fn mistakes_are_refused_with_their_position() {
        let bad_action = SEED.replace("\"dataset:tag\"", "\"dataset:tagg\"");
        let (line, column, msg) = refused(&bad_action);
        assert_eq!(line, 21, "{msg}");
        assert!(column > 10, "{column}");
        assert!(msg.contains("unknown action \"dataset:tagg\""), "{msg}");
        let (line, _, msg) = refused(&SEED.replace("effect: deny", "effect: maybe"));
        assert_eq!(line, 14, "{msg}");
        let (line, _, msg) =
            refused(&SEED.replace("    resources: [\"*\"]", "    resource: [\"*\"]"));
        assert_eq!(line, 7, "{msg}");
        assert!(msg.contains("resource"), "{msg}");
        let (line, _, _) = refused("policies:\n  - name: [unclosed\n");
        assert!(line >= 2);
        let (_, _, msg) =
            refused(&SEED.replace("group:analysts\", \"key", "team:analysts\", \"key"));
        assert!(msg.contains("unknown principal"), "{msg}");
        let (line, _, msg) = refused(&SEED.replace(
            "actions: [\"dataset:commit\", \"dataset:tag\"]",
            "actions: []",
        ));
        assert_eq!(line, 18, "{msg}");
        assert!(msg.contains("actions is empty"), "{msg}");
        let (_, _, msg) = refused(&SEED.replace("name: no_raw_pii", "name: admins"));
        assert!(msg.contains("two statements"), "{msg}");
    }

    #[test]
    fn a_policy_that_locks_out_every_admin_is_refused() {
        let none = SEED.replace("actions: [\"dataset:*\"]", "actions: [\"dataset:read\"]");
        assert!(refused(&none).2.contains("lock out every admin"));
        let narrow = SEED.replace("resources: [\"*\"]", "resources: [\"datasets/weather\"]");
        assert!(refused(&narrow).2.contains("lock out"));
        let denied = format!(
            "{SEED}  - name: nobody\n    effect: deny\n    actions: [\"dataset:admin\"]\n    resources: [\"*\"]\n"
        );
        assert!(refused(&denied).2.contains("lock out"));
        // Denying one admin group leaves another.
        let other = format!(
            "{SEED}  - name: ops\n    effect: allow\n    principals: [\"user:ops\"]\n    actions: [\"dataset:admin\"]\n    resources: [\"datasets/*\"]\n  - name: not_admins\n    effect: deny\n    principals: [\"group:admins\"]\n    actions: [\"dataset:admin\"]\n    resources: [\"*\"]\n"
        );
        Policy::parse(&other).unwrap();
    }

    #[test]
    fn hostile_yaml_is_refused_not_expanded() {
        let bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\npolicies: []\n";
        assert!(Policy::parse(bomb).is_err());
        let deep = format!("policies: {}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(Policy::parse(&deep).is_err());
        assert!(Policy::parse(&"#".repeat(MAX_POLICY_BYTES + 1)).is_err());
    }
}
