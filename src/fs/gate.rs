//! The store's access policy at the mount: who a request comes from (its
//! uid and the groups its process runs with), and what they may see, read
//! and commit. Without a policy in the store there is no gate and nothing
//! here runs. With one, a version or path a caller may not see answers as
//! a name that does not exist, everywhere: lookups, listings, `latest`,
//! tags and `.detafs/log`.

use super::versions::Versions;
use super::{Attr, Ino, Listing, version_name};
use crate::access::caller::{self, UnixId};
use crate::access::policy::{Glob, GlobSet};
use crate::access::{self, Action, Policy, Who};
use crate::error::{Error, Result};
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::snapshot::Kind;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

/// Who a request comes from, as the kernel tells it.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

/// How long a process's groups are taken as read from /proc.
const CALLER_LIFE: Duration = Duration::from_secs(1);
/// Callers remembered at once; more and the table starts again.
const MAX_CALLERS: usize = 4096;
/// Folders whose entries' judgement is remembered at once.
const MAX_JUDGED: usize = 100_000;

/// The policy in force, with what it decided lately.
pub(super) struct InForce {
    version: u64,
    policy: Policy,
    /// Who may search `versions/` (`Reach`), as the names in the policy
    /// resolve now.
    reach: RwLock<Arc<Reach>>,
    /// Every resource pattern of the policy.
    patterns: Vec<Glob>,
    /// By version: the patterns that match a path in it but not the
    /// version itself, so can tell its paths apart (`MountFs::name_ttl`).
    telling: Mutex<HashMap<u64, Arc<GlobSet>>>,
    /// When a caller's look at a version was last written to the trail, by
    /// (uid, pid, version): the kernel asks again at every path through it.
    noted: Mutex<HashMap<(u32, u32, u64), Instant>>,
    /// The statements that can apply, by principals: most requests of a
    /// caller then weigh a few statements, not all of them.
    narrowed: Mutex<HashMap<Who, Arc<Policy>>>,
    /// By version folder: whether a pattern tells an entry of it apart
    /// (`any_told_apart`); emptied when tags change.
    judged: Mutex<HashMap<u64, bool>>,
}

/// What the daemon tells the kernel to drop (the fuse adapter does it).
pub trait KernelCache: Send + Sync {
    /// The entry for (folder, name), and what is below it.
    fn forget_name(&self, parent: u64, name: &[u8]);
    /// An inode's attributes and pages (a directory's listing).
    fn forget_listing(&self, ino: u64);
    /// Returns once what was told before reached the kernel (or a second
    /// passed: the kernel may be waiting for this very thread).
    fn settle(&self);
    /// A policy came: `versions/`'s own connection, where the kernel opens
    /// files without asking, is detached (the main connection judges).
    fn versions_judged(&self);
}

/// Principals by (pid, uid, gid), with when they were read.
pub(super) type Callers = HashMap<(u32, u32, u32), (Instant, Who)>;

/// The Unix callers that may search `versions/`: those the policy allows
/// to see some version (`Policy::unix_principals`), when the kernel can
/// tell them apart by `versions/`'s owner, group and mode alone (at most
/// one user besides root and one group: owner and group may search,
/// others only list). The kernel then checks them itself, so a version
/// every one of them sees alike can keep its name in the kernel's cache,
/// shared by all users, with no leak to the others: they may list
/// `versions/` and find it empty, but look up no name in it, the same
/// answer whether it exists or not. Root passes any mode: it holds the
/// store's keys anyway.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Reach {
    /// `versions/`'s owner, group and mode; None: as without a policy
    /// (everyone may search it).
    owner: Option<(u32, u32, u16)>,
    /// Who may search it, as principals (their callers hold them).
    principals: Vec<String>,
}

impl Reach {
    fn of(policy: &Policy, dataset: &str, daemon_gid: u32) -> Reach {
        let ids: Option<Vec<UnixId>> = policy
            .unix_principals(Action::Versions, dataset)
            .map(|ps| ps.iter().filter_map(|p| caller::unix_id(p)).collect());
        let Some(mut ids) = ids else {
            return Reach {
                owner: None,
                principals: Vec::new(),
            };
        };
        ids.sort();
        ids.dedup();
        let users: Vec<u32> = ids
            .iter()
            .filter_map(|id| match *id {
                UnixId::User(u) if u != 0 => Some(u),
                _ => None,
            })
            .collect();
        let groups: Vec<u32> = ids
            .iter()
            .filter_map(|id| match *id {
                UnixId::Group(g) => Some(g),
                UnixId::User(_) => None,
            })
            .collect();
        // Without a user of its own, root owns it (root passes any mode),
        // so a daemon user in the readers' group is let in like the others.
        let owner = match (&users[..], &groups[..]) {
            ([], []) => Some((0, daemon_gid, 0o444)),
            ([u], []) => Some((*u, daemon_gid, 0o544)),
            ([], [g]) => Some((0, *g, 0o454)),
            ([u], [g]) => Some((*u, *g, 0o554)),
            _ => None,
        };
        let principals = match owner {
            None => Vec::new(),
            Some(_) => ids.iter().map(|&id| caller::principal(id)).collect(),
        };
        Reach { owner, principals }
    }
}

impl InForce {
    fn new(version: u64, policy: Policy, dataset: &str, daemon_gid: u32) -> InForce {
        InForce {
            version,
            reach: RwLock::new(Arc::new(Reach::of(&policy, dataset, daemon_gid))),
            patterns: policy.patterns(),
            policy,
            narrowed: Mutex::default(),
            judged: Mutex::default(),
            telling: Mutex::default(),
            noted: Mutex::default(),
        }
    }
}

/// A folder of a version.
struct Folder {
    version: u64,
    /// Its path inside the version (the root for the version's own folder).
    path: RelPath,
    /// The version's resource names (`access::version_resources`).
    versions: Vec<String>,
}

impl Folder {
    /// The path of entry `name` (a tree's entry: a valid name).
    fn child(&self, name: &[u8]) -> Option<RelPath> {
        self.path.join(name).ok()
    }
}

/// The mount's gate: the policy in force for its dataset, the callers'
/// principals, and where decisions are written.
pub(super) struct Gate {
    dataset: String,
    /// The daemon's group (`Reach`).
    daemon_gid: u32,
    in_force: RwLock<Option<Arc<InForce>>>,
    callers: Mutex<Callers>,
    /// Where access decisions are written, if anywhere.
    trail: Option<crate::access::trail::Trail>,
}

/// One caller's view under the policy in force.
pub struct Judge<'a> {
    gate: &'a Gate,
    versions: &'a Versions,
    repo: &'a Repo,
    policy: Arc<Policy>,
    who: Who,
    caller: Caller,
}

/// The version of the gate that refuses everything (`Gate::shut`).
const SHUT: u64 = u64::MAX;

impl Gate {
    pub(super) fn new(dataset: &str, daemon_gid: u32) -> Gate {
        Gate {
            dataset: dataset.to_string(),
            daemon_gid,
            in_force: RwLock::default(),
            callers: Mutex::default(),
            trail: None,
        }
    }

    /// Writes access decisions to `trail`.
    pub(super) fn write_to(&mut self, trail: crate::access::trail::Trail) {
        self.trail = Some(trail);
    }

    /// Decisions not yet in the trail's file.
    pub(super) fn unwritten(&self) -> usize {
        self.trail.as_ref().map_or(0, |t| t.unwritten())
    }

    /// Writes what the trail holds to its file.
    pub(super) fn flush(&self) {
        if let Some(t) = &self.trail {
            t.flush();
        }
    }

    /// Runs `f` with whether no policy is in force, no policy coming in
    /// meanwhile (`unopened.rs`: the kernel's choice to open files itself).
    pub(super) fn while_none<T>(&self, f: impl FnOnce(bool) -> T) -> T {
        let in_force = self.in_force.write();
        f(in_force.is_none())
    }

    /// Reads the policy in force (at start and at every poll); returns
    /// whether it changed. One that cannot be trusted (a broken history, a
    /// newest policy that does not parse) shuts the gate on everything; a
    /// store that cannot be reached keeps the policy last read.
    /// `opens_skipped` says whether the kernel opens files without asking
    /// (then no policy can come in: `unopened.rs`); `coming` runs under the
    /// gate's lock when one does.
    pub(super) fn refresh(
        &self,
        repo: &Repo,
        opens_skipped: &dyn Fn() -> bool,
        coming: &dyn Fn(),
    ) -> Result<bool> {
        let current = self.in_force.read().clone();
        let shut = current.as_ref().is_some_and(|g| g.version == SHUT);
        let next = match repo.current_policy() {
            Ok(None) => return Ok(false),
            Ok(Some((v, _))) if current.as_ref().is_some_and(|g| g.version == v) => {
                return Ok(false);
            }
            Ok(Some(_)) if shut && opens_skipped() => return Ok(false),
            Ok(Some((v, policy))) => InForce::new(v, policy, &self.dataset, self.daemon_gid),
            Err(Error::Malformed { .. }) if shut => return Ok(false),
            Err(e @ Error::Malformed { .. }) => {
                tracing::error!("{e}: every request is refused until the policy is mended");
                self.shut()
            }
            Err(e) => return Err(e),
        };
        let mut in_force = self.in_force.write();
        // Checked under the lock `skip_opens` takes: where the kernel opens
        // files without asking, no open could apply a policy (`unopened.rs`).
        if next.version != SHUT {
            coming();
        }
        let next = if next.version != SHUT && opens_skipped() {
            tracing::error!(
                "an access policy was set after this mount started: every request is refused until it is mounted again"
            );
            self.shut()
        } else {
            if next.version != SHUT {
                tracing::info!("policy v{} in force", next.version);
            }
            next
        };
        *in_force = Some(Arc::new(next));
        Ok(true)
    }

    /// The policy in force, for `.detafs/health`: its version, "shut"
    /// (everything is refused: see the daemon's log), or none.
    pub(super) fn policy_in_force(&self) -> serde_json::Value {
        match self.in_force.read().as_ref() {
            Some(g) if g.version == SHUT => "shut".into(),
            Some(g) => g.version.into(),
            None => serde_json::Value::Null,
        }
    }

    /// A policy that refuses everything.
    fn shut(&self) -> InForce {
        InForce::new(SHUT, Policy::deny_all(), &self.dataset, self.daemon_gid)
    }

    /// Resolves the policy's users and groups again (they may have been
    /// made or removed since); returns whether who may search `versions/`
    /// changed.
    pub(super) fn refresh_reach(&self) -> bool {
        let Some(gate) = self.in_force.read().clone() else {
            return false;
        };
        let now = Reach::of(&gate.policy, &self.dataset, self.daemon_gid);
        let mut reach = gate.reach.write();
        if **reach == now {
            return false;
        }
        *reach = Arc::new(now);
        true
    }

    /// `versions/`'s owner, group and mode under the policy in force
    /// (`Reach`); None: as without a policy.
    pub(super) fn versions_owner(&self) -> Option<(u32, u32, u16)> {
        let gate = self.in_force.read().clone()?;
        let reach = gate.reach.read().clone();
        reach.owner
    }

    /// Whether every caller that may search `versions/` sees `version`:
    /// then its name may stay in the kernel's cache.
    fn seen_alike(&self, versions: &Versions, gate: &InForce, version: u64) -> bool {
        let reach = gate.reach.read().clone();
        let tags = versions.tags.read().tags_of(version);
        let aliases = access::version_resources(&self.dataset, version, &tags);
        let who = reach.owner.is_some().then_some(&reach.principals[..]);
        gate.policy.allows_every(who, Action::Versions, &aliases)
    }

    /// What was weighed of folders' entries is weighed again (a version
    /// or tag came or went).
    pub(super) fn forget_judged(&self) {
        if let Some(gate) = self.in_force.read().as_ref() {
            gate.judged.lock().clear();
        }
    }

    /// Whether a policy is in force (then entries are not cached by the
    /// kernel: its caches are shared by every user of the mount).
    pub(super) fn gated(&self) -> bool {
        self.in_force.read().is_some()
    }

    /// How long the kernel may keep the name `name` in folder `parent`
    /// (whose attributes are `a`). Its name cache serves every user alike,
    /// so under a policy a name whose answer can differ between users gets
    /// none: `staging`, the entries of `versions/` but the versions every
    /// caller that may search it sees (`Reach`), and paths inside a version
    /// that a pattern tells apart from the version itself. Other names in a
    /// version are reached only through the version's own entry, and are
    /// seen by whoever sees it: they keep their lifetime.
    pub(super) fn name_ttl(
        &self,
        versions: &Versions,
        parent: u64,
        name: &[u8],
        a: &Attr,
    ) -> Duration {
        let Some(gate) = self.in_force.read().clone() else {
            return a.ttl;
        };
        let per_user = match Ino::of(parent) {
            Ino::Root => name == b"staging",
            Ino::Versions => {
                !version_name(name).is_some_and(|v| self.seen_alike(versions, &gate, v))
            }
            Ino::Version(_) => self
                .folder(versions, parent)
                .ok()
                .flatten()
                .is_none_or(|f| self.told_apart(&gate, &f, name, a.kind == Kind::Dir)),
            Ino::Control | Ino::Staged(_) => false,
            Ino::Latest | Ino::Tag(_) | Ino::ControlFile(_) | Ino::Unknown => false,
        };
        if per_user { Duration::ZERO } else { a.ttl }
    }

    /// A version folder (or file), as names in it are decided: found once
    /// for a whole listing.
    /// None where it cannot be found (judged as hidden); an error only if
    /// finding it must wait where nothing may.
    fn folder(&self, versions: &Versions, ino: u64) -> Result<Option<Folder>> {
        let Ok(version) = versions.version_entry_version(ino) else {
            return Ok(None);
        };
        let full = versions.version_path_or_wait(ino)?;
        let Ok(path) = RelPath::parse(full.split_once('/').map_or("", |(_, p)| p)) else {
            return Ok(None);
        };
        let tags = versions.tags.read().tags_of(version);
        Ok(Some(Folder {
            version,
            path,
            versions: access::version_resources(&self.dataset, version, &tags),
        }))
    }

    /// The policy's name of `path` in version `version` (as the trail
    /// says it).
    fn file_resource(&self, version: u64, path: &str) -> String {
        let v = access::version_resource(&self.dataset, &format!("v{version}"));
        access::file_resource(&v, path)
    }

    /// Whether a pattern of the policy can tell entry `name` of folder `f`
    /// apart from its version.
    fn told_apart(&self, gate: &InForce, f: &Folder, name: &[u8], dir: bool) -> bool {
        let ours = format!("{}/", crate::access::dataset_resource(&self.dataset));
        let telling = gate
            .telling
            .lock()
            .entry(f.version)
            .or_insert_with(|| {
                // Patterns that can name a path of this dataset (a literal
                // start that agrees with it), and not the version itself.
                let telling: Vec<Glob> = gate
                    .patterns
                    .iter()
                    .filter(|p| {
                        let literal = p.literal_start();
                        (literal.starts_with(&ours) || ours.starts_with(literal))
                            && (p.text.contains('*') || p.text.contains("/files/"))
                            && !f.versions.iter().any(|v| p.matches(v))
                    })
                    .cloned()
                    .collect();
                Arc::new(GlobSet::new(&telling))
            })
            .clone();
        if matches!(*telling, GlobSet::Empty) {
            return false;
        }
        // Its own names only: a folder above it told apart is asked for
        // each caller, and it is reached only through that folder.
        let Some(child) = f.child(name) else {
            return true;
        };
        let slash = if dir { "/" } else { "" };
        f.versions
            .iter()
            .filter(|v| v.contains("/versions/"))
            .map(|v| access::file_resource(v, &format!("{child}{slash}")))
            .any(|p| telling.matches(&p))
    }

    /// Whether a pattern tells some entry of listing `l` of folder `ino`
    /// (`f`) apart from its version: weighed once per folder and policy.
    fn any_told_apart(&self, gate: &InForce, ino: u64, f: &Folder, l: &Listing) -> bool {
        if let Some(&any) = gate.judged.lock().get(&ino) {
            return any;
        }
        let any = l[2..]
            .iter()
            .any(|(e, _)| self.told_apart(gate, f, &e.name, e.kind == Kind::Dir));
        let mut judged = gate.judged.lock();
        if judged.len() >= MAX_JUDGED {
            judged.clear();
        }
        judged.insert(ino, any);
        any
    }

    /// The principals of a caller: its user and the groups its process
    /// holds (read from /proc, kept a second).
    fn who(&self, c: &Caller) -> Result<Who> {
        let key = (c.pid, c.uid, c.gid);
        if let Some((at, who)) = self.callers.lock().get(&key)
            && at.elapsed() < CALLER_LIFE
        {
            return Ok(who.clone());
        }
        // Reads /proc and the user and group databases.
        crate::nowait::check()?;
        // A process gone already: its primary group alone.
        let groups = access::caller::process_groups(c.pid).unwrap_or_default();
        let who = access::caller::unix_who(c.uid, c.gid, &groups);
        let mut callers = self.callers.lock();
        if callers.len() >= MAX_CALLERS {
            callers.clear();
        }
        callers.insert(key, (Instant::now(), who.clone()));
        Ok(who)
    }

    /// The caller's view, if a policy is in force.
    pub(super) fn judge<'a>(
        &'a self,
        versions: &'a Versions,
        repo: &'a Repo,
        c: &Caller,
    ) -> Result<Option<Judge<'a>>> {
        let Some(gate) = self.in_force.read().clone() else {
            return Ok(None);
        };
        let who = self.who(c)?;
        let policy = {
            let mut narrowed = gate.narrowed.lock();
            if narrowed.len() >= MAX_CALLERS {
                narrowed.clear();
            }
            narrowed
                .entry(who.clone())
                .or_insert_with(|| Arc::new(gate.policy.for_who(&who)))
                .clone()
        };
        Ok(Some(Judge {
            gate: self,
            versions,
            repo,
            policy,
            who,
            caller: *c,
        }))
    }
}

impl Judge<'_> {
    /// Writes a decision to the daemon's audit trail.
    fn note(&self, action: Action, resource: &str, d: &access::Decision) {
        if let Some(trail) = &self.gate.trail {
            trail.record(serde_json::json!({
                "uid": self.caller.uid,
                "pid": self.caller.pid,
                "principals": self.who.principals,
                "action": action.name(),
                "resource": resource,
                "allowed": d.allowed,
                "by": d.by.as_ref().map(|b| b.0.clone()),
            }));
        }
    }

    fn in_force(&self) -> Option<Arc<InForce>> {
        self.gate.in_force.read().clone()
    }

    /// Whether this process's look at `version` is the first in a second
    /// (a refusal is always written; an allowance once a second).
    fn first_look(&self, version: u64) -> bool {
        let Some(gate) = self.in_force() else {
            return true;
        };
        let mut noted = gate.noted.lock();
        let key = (self.caller.uid, self.caller.pid, version);
        if noted.get(&key).is_some_and(|t| t.elapsed() < CALLER_LIFE) {
            return false;
        }
        if noted.len() >= MAX_CALLERS {
            noted.clear();
        }
        noted.insert(key, Instant::now());
        true
    }

    fn version_resources(&self, version: u64) -> Vec<String> {
        let tags = self.versions.tags.read().tags_of(version);
        access::version_resources(&self.gate.dataset, version, &tags)
    }

    /// Whether `path` of version `version` exists for this caller
    /// (`Policy::sees_path`; a folder or a file alike).
    pub fn sees_version_path(&self, version: u64, path: &RelPath) -> bool {
        let versions = self.version_resources(version);
        [false, true]
            .into_iter()
            .all(|dir| self.policy.sees_path(&self.who, &versions, path, dir))
    }

    pub fn sees_version(&self, version: u64) -> bool {
        self.version_decision(version).allowed
    }

    fn version_decision(&self, version: u64) -> access::Decision {
        let r = self.version_resources(version);
        self.policy.decide(&self.who, Action::Versions, &r)
    }

    /// Whether a path of a version (`a/b`) shows: its version may be seen,
    /// and no deny of reading names a path that covers it.
    fn sees_path(&self, f: &Folder, path: &RelPath, dir: bool) -> bool {
        self.policy.sees_path(&self.who, &f.versions, path, dir)
    }

    fn commit_decision(&self) -> (access::Decision, String) {
        let r = access::dataset_resource(&self.gate.dataset);
        let d = self
            .policy
            .decide(&self.who, Action::Commit, std::slice::from_ref(&r));
        (d, r)
    }

    /// Whether the caller may commit (and see staging), written to the trail.
    pub fn may_commit(&self) -> bool {
        let (d, r) = self.commit_decision();
        self.note(Action::Commit, &r, &d);
        d.allowed
    }

    /// The newest version this caller may see: `latest`'s target.
    pub fn latest(&self) -> Option<u64> {
        let versions: Vec<u64> = {
            let v = self.versions.records.read();
            v.iter().rev().map(|r| r.version).collect()
        };
        versions.into_iter().find(|&v| self.sees_version(v))
    }

    /// Whether entry `name` of folder `parent`, of kind `kind`, shows. A
    /// version seen or not, and a path hidden, go to the audit trail.
    pub fn sees_entry(&self, parent: u64, name: &[u8], kind: Kind) -> Result<bool> {
        self.sees(parent, name, kind, true)
    }

    fn sees(&self, parent: u64, name: &[u8], kind: Kind, noted: bool) -> Result<bool> {
        Ok(match Ino::of(parent) {
            Ino::Staged(_) => true,
            Ino::Root if name == b"staging" => {
                let (d, r) = self.commit_decision();
                if noted && !d.allowed {
                    self.note(Action::Commit, &r, &d);
                }
                d.allowed
            }
            Ino::Root | Ino::Control => true,
            Ino::Versions => {
                if name == b"latest" {
                    return Ok(self.latest().is_some());
                }
                let version = version_name(name).or_else(|| {
                    let tags = self.versions.tags.read();
                    std::str::from_utf8(name)
                        .ok()
                        .and_then(|t| tags.version_of(t))
                });
                let Some(v) = version else { return Ok(false) };
                let d = self.version_decision(v);
                if noted && (!d.allowed || self.first_look(v)) {
                    let r = crate::access::version_resource(&self.gate.dataset, &format!("v{v}"));
                    self.note(Action::Versions, &r, &d);
                }
                d.allowed
            }
            _ => match (self.gate.folder(self.versions, parent)?, self.in_force()) {
                (Some(f), Some(g)) => {
                    // A name no pattern tells apart shows as its version does.
                    if self.gate.told_apart(&g, &f, name, kind == Kind::Dir) {
                        self.sees_in(&f, name, kind, noted)
                    } else {
                        self.sees_version(f.version)
                    }
                }
                _ => false,
            },
        })
    }

    /// Whether entry `name` of version folder `f` shows.
    fn sees_in(&self, f: &Folder, name: &[u8], kind: Kind, noted: bool) -> bool {
        let Some(path) = f.child(name) else {
            return false;
        };
        let shown = self.sees_path(f, &path, kind == Kind::Dir);
        if noted && !shown {
            let r = self.gate.file_resource(f.version, &path.to_string());
            let d = access::Decision {
                allowed: false,
                by: None,
            };
            self.note(Action::Versions, &r, &d);
        }
        shown
    }

    /// Whether a version's file may be opened (`dataset:read`).
    pub fn may_read(&self, ino: u64) -> Result<bool> {
        // A file's place is found as a folder's is (its path, its version).
        let Some(f) = self
            .gate
            .folder(self.versions, ino)?
            .filter(|f| !f.path.is_root())
        else {
            return Ok(false);
        };
        let mut all = access::path_resources(&f.versions, &f.path, false);
        all.extend(f.versions.iter().cloned());
        let d = self.policy.decide(&self.who, Action::Read, &all);
        let r = self.gate.file_resource(f.version, &f.path.to_string());
        self.note(Action::Read, &r, &d);
        Ok(d.allowed)
    }

    /// A listing without what this caller may not see (one line in the
    /// trail for the listing, not one per entry), each entry with the
    /// lifetime the kernel may keep its name for (`MountFs::name_ttl`);
    /// and whether every caller that may reach it sees it alike (a folder
    /// of a version they all see, no entry a pattern tells apart).
    pub fn filter(&self, dir: u64, listing: Listing) -> Result<(Listing, bool)> {
        let folder = match Ino::of(dir) {
            Ino::Version(_) => self.gate.folder(self.versions, dir)?,
            _ => None,
        };
        let gate = self.in_force();
        // A folder of a version every caller that may reach it sees, with
        // no entry a pattern tells apart: the listing as it is, for all.
        if let (Some(f), Some(g)) = (&folder, &gate)
            && self.gate.seen_alike(self.versions, g, f.version)
            && !self.gate.any_told_apart(g, dir, f, &listing)
            && self.sees_version(f.version)
        {
            return Ok((listing, true));
        }
        // Names no pattern tells apart show as their version does: weighed once.
        let version_seen = folder.as_ref().map(|f| self.sees_version(f.version));
        let mut kept = Vec::with_capacity(listing.len());
        for (e, a) in listing.iter() {
            let mut a = a.clone();
            if e.name != b"." && e.name != b".." {
                let shown = match (&folder, &gate, version_seen) {
                    (Some(f), Some(g), Some(seen)) => {
                        if self.gate.told_apart(g, f, &e.name, e.kind == Kind::Dir) {
                            a.ttl = Duration::ZERO;
                            self.sees_in(f, &e.name, e.kind, false)
                        } else {
                            seen
                        }
                    }
                    _ => {
                        a.ttl = self.gate.name_ttl(self.versions, dir, &e.name, &a);
                        self.sees(dir, &e.name, e.kind, false)?
                    }
                };
                if !shown {
                    continue;
                }
            }
            kept.push((e.clone(), a));
        }
        let hidden = listing.len() - kept.len();
        if let Some(trail) = &self.gate.trail
            && hidden > 0
        {
            trail.record(serde_json::json!({
                "uid": self.caller.uid,
                "pid": self.caller.pid,
                "principals": self.who.principals,
                "action": "list",
                "resource": format!("inode {dir}"),
                "shown": kept.len() - 2,
                "hidden": hidden,
            }));
        }
        Ok((Arc::new(kept), false))
    }

    /// `.detafs/log` as this caller may see it.
    /// Whether the policy may hide paths of the dataset from the caller
    /// (a version's figures are then withheld: `Record::log_entry_seen`).
    fn hides_paths(&self) -> bool {
        self.policy.may_hide_paths(&self.who, &self.gate.dataset)
            || self.repo.figures_withheld(&self.gate.dataset)
    }

    pub fn log(&self) -> Vec<u8> {
        let versions = self.versions.records.read().clone();
        versions
            .iter()
            .filter(|r| self.sees_version(r.version))
            .flat_map(|r| r.log_line(self.hides_paths()))
            .collect()
    }
}
