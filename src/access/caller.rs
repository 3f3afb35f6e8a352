//! Unix callers as principals: `user:NAME` and `group:NAME` for the
//! primary and every supplementary group (a number where the name is
//! unknown), as the kernel would check them.

use super::Who;

use nix::unistd::{Gid, Group, Uid, User};

pub fn user_name(uid: u32) -> Option<String> {
    User::from_uid(Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}

pub fn group_name(gid: u32) -> Option<String> {
    Group::from_gid(Gid::from_raw(gid))
        .ok()
        .flatten()
        .map(|g| g.name)
}

/// The user running this process, for a record's author: the login name,
/// else `uid:N`.
pub fn current_user() -> String {
    author(Uid::current().as_raw())
}

/// The login name of `uid` as a record's author, else `uid:N`.
pub fn author(uid: u32) -> String {
    user_name(uid).unwrap_or_else(|| format!("uid:{uid}"))
}

/// The supplementary groups process `pid` runs with, from /proc (what the
/// kernel checks, whatever the group database says).
pub fn process_groups(pid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Groups:"))?;
    line.split_whitespace().map(|g| g.parse().ok()).collect()
}

/// A user's uid, primary gid and groups from the databases, for
/// `policy check USER` (there is no process to ask).
pub fn user_by_name(name: &str) -> Option<(u32, u32, Vec<u32>)> {
    let user = User::from_name(name).ok().flatten()?;
    let c = std::ffi::CString::new(name).ok()?;
    let groups = nix::unistd::getgrouplist(&c, user.gid).ok()?;
    Some((
        user.uid.as_raw(),
        user.gid.as_raw(),
        groups.into_iter().map(Gid::as_raw).collect(),
    ))
}

/// A uid or gid, as the kernel checks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UnixId {
    User(u32),
    Group(u32),
}

/// A user's uid by name.
fn uid_by_name(name: &str) -> Option<u32> {
    User::from_name(name).ok().flatten().map(|u| u.uid.as_raw())
}

fn gid_by_name(name: &str) -> Option<u32> {
    Group::from_name(name)
        .ok()
        .flatten()
        .map(|g| g.gid.as_raw())
}

/// The id whose callers hold principal `p` (`user:NAME` or `group:NAME`,
/// as a policy writes it), if any. A number stands for itself only where
/// it has no name: a caller with a name holds the name (`unix_who`).
pub fn unix_id(p: &str) -> Option<UnixId> {
    let numbered = |n: &str, named: fn(u32) -> Option<String>| {
        n.parse::<u32>().ok().filter(|&id| named(id).is_none())
    };
    if let Some(n) = p.strip_prefix("user:") {
        uid_by_name(n)
            .or_else(|| numbered(n, user_name))
            .map(UnixId::User)
    } else if let Some(n) = p.strip_prefix("group:") {
        gid_by_name(n)
            .or_else(|| numbered(n, group_name))
            .map(UnixId::Group)
    } else {
        None
    }
}

/// The principal a caller holds for a uid or gid: `user:NAME`,
/// `group:NAME`, a number where the id has no name.
pub fn principal(id: UnixId) -> String {
    match id {
        UnixId::User(u) => format!("user:{}", user_name(u).unwrap_or_else(|| u.to_string())),
        UnixId::Group(g) => format!("group:{}", group_name(g).unwrap_or_else(|| g.to_string())),
    }
}

/// The principals of a Unix caller.
pub fn unix_who(uid: u32, gid: u32, groups: &[u32]) -> Who {
    let mut principals = vec![principal(UnixId::User(uid))];
    let mut gids = vec![gid];
    gids.extend(groups.iter().copied().filter(|g| *g != gid));
    for g in gids {
        let p = principal(UnixId::Group(g));
        if !principals.contains(&p) {
            principals.push(p);
        }
    }
    Who { principals }
}

/// Who acts: the principals a decision is made for, and the name a
/// record keeps as its author.
pub struct Actor {
    pub who: Who,
    pub name: String,
}

impl Actor {
    /// Whoever runs this process.
    pub fn current() -> Actor {
        Actor {
            who: current_who(),
            name: current_user(),
        }
    }
}

/// The principals of whoever runs this process.
pub fn current_who() -> Who {
    let groups: Vec<u32> = nix::unistd::getgroups()
        .unwrap_or_default()
        .into_iter()
        .map(Gid::as_raw)
        .collect();
    unix_who(Uid::current().as_raw(), Gid::current().as_raw(), &groups)
}

/// `policy check`'s USER: a principal (`key:NAME`, `group:G`, ...), or a
/// login name, which stands for the user and all of their groups.
pub fn named_who(user: &str) -> Who {
    if user.contains(':') || user == "*" {
        return Who {
            principals: vec![user.to_string()],
        };
    }
    match user_by_name(user) {
        Some((uid, gid, groups)) => unix_who(uid, gid, &groups),
        None => Who {
            principals: vec![format!("user:{user}")],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_user_root_in_group_root() {
        let who = unix_who(0, 0, &[0]);
        assert_eq!(who.principals, ["user:root", "group:root"]);
        // Ids without names stay numbers.
        let who = unix_who(4_000_000, 4_000_001, &[4_000_002]);
        assert_eq!(
            who.principals,
            ["user:4000000", "group:4000001", "group:4000002"]
        );
        assert_eq!(named_who("root").principals[0], "user:root");
        assert_eq!(named_who("key:dash").principals, ["key:dash"]);
        assert!(process_groups(std::process::id()).is_some());
        assert_eq!(unix_id("user:root"), Some(UnixId::User(0)));
        assert_eq!(unix_id("group:root"), Some(UnixId::Group(0)));
        assert_eq!(unix_id("user:4000000"), Some(UnixId::User(4_000_000)));
        // A number that has a name is held by no one: callers hold the name.
        assert_eq!(unix_id("user:0"), None);
        assert_eq!(unix_id("group:no-such-group-here"), None);
        assert_eq!(unix_id("key:dash"), None);
    }
}
