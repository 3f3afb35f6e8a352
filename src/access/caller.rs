//! Unix callers as principals: `user:NAME` and `group:NAME` for the
//! primary and every supplementary group (a number where the name is
//! unknown), as the kernel would check them.

use super::Who;

/// Asks the C library for a name by id: `lookup(buf, len)` fills a
/// passwd/group entry and returns its name pointer (null if none).
fn name_of(lookup: impl Fn(&mut [libc::c_char]) -> Option<*const libc::c_char>) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let ptr = lookup(&mut buf)?;
    // SAFETY: the pointer is into `buf`, NUL-terminated by the C library.
    Some(
        unsafe { std::ffi::CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned(),
    )
}

pub fn user_name(uid: u32) -> Option<String> {
    name_of(|buf| {
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found = std::ptr::null_mut();
        // SAFETY: valid pointers and length for the call.
        let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) };
        (rc == 0 && !found.is_null()).then_some(pw.pw_name as *const _)
    })
}

pub fn group_name(gid: u32) -> Option<String> {
    name_of(|buf| {
        let mut gr: libc::group = unsafe { std::mem::zeroed() };
        let mut found = std::ptr::null_mut();
        // SAFETY: valid pointers and length for the call.
        let rc = unsafe { libc::getgrgid_r(gid, &mut gr, buf.as_mut_ptr(), buf.len(), &mut found) };
        (rc == 0 && !found.is_null()).then_some(gr.gr_name as *const _)
    })
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
    let (uid, gid) = passwd_by_name(name)?;
    let c = std::ffi::CString::new(name).ok()?;
    let mut groups = vec![0 as libc::gid_t; 1024];
    let mut n = groups.len() as libc::c_int;
    // SAFETY: `groups` holds `n` entries; getgrouplist writes at most that.
    if unsafe { libc::getgrouplist(c.as_ptr(), gid, groups.as_mut_ptr(), &mut n) } < 0 {
        return None;
    }
    groups.truncate(n.max(0) as usize);
    Some((uid, gid, groups))
}

/// A uid or gid, as the kernel checks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UnixId {
    User(u32),
    Group(u32),
}

/// An entry of a C library database by name: `get(name, buf)` fills one
/// from `buf` and returns what is wanted of it.
fn by_name<T>(
    name: &str,
    get: impl FnOnce(&std::ffi::CStr, &mut [libc::c_char]) -> Option<T>,
) -> Option<T> {
    let c = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    get(&c, &mut buf)
}

/// A user's uid and primary gid by name.
fn passwd_by_name(name: &str) -> Option<(u32, u32)> {
    by_name(name, |c, buf| {
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found = std::ptr::null_mut();
        // SAFETY: valid pointers and length for the call.
        let rc = unsafe {
            libc::getpwnam_r(c.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut found)
        };
        (rc == 0 && !found.is_null()).then_some((pw.pw_uid, pw.pw_gid))
    })
}

fn gid_by_name(name: &str) -> Option<u32> {
    by_name(name, |c, buf| {
        let mut gr: libc::group = unsafe { std::mem::zeroed() };
        let mut found = std::ptr::null_mut();
        // SAFETY: valid pointers and length for the call.
        let rc = unsafe {
            libc::getgrnam_r(c.as_ptr(), &mut gr, buf.as_mut_ptr(), buf.len(), &mut found)
        };
        (rc == 0 && !found.is_null()).then_some(gr.gr_gid)
    })
}

/// The id whose callers hold principal `p` (`user:NAME` or `group:NAME`,
/// as a policy writes it), if any. A number stands for itself only where
/// it has no name: a caller with a name holds the name (`unix_who`).
pub fn unix_id(p: &str) -> Option<UnixId> {
    let numbered = |n: &str, named: fn(u32) -> Option<String>| {
        n.parse::<u32>().ok().filter(|&id| named(id).is_none())
    };
    if let Some(n) = p.strip_prefix("user:") {
        passwd_by_name(n)
            .map(|(uid, _)| uid)
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

/// The principals of whoever runs this process.
pub fn current_who() -> Who {
    // SAFETY: plain system calls; getgroups with 0 only counts.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) }.max(0);
    let mut groups = vec![0 as libc::gid_t; n as usize];
    let n = unsafe { libc::getgroups(n, groups.as_mut_ptr()) }.max(0);
    groups.truncate(n as usize);
    unix_who(uid, gid, &groups)
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
