//! Processes as `/proc` tells them: their state (`Stat`), whether one
//! still runs and waiting for its end, and which use a mount (as `fuser
//! -m` finds them, so that a mount's two connections are detached both or
//! neither).

use std::path::Path;

/// The device number of the mount at `at`, from `/proc/self/mountinfo`
/// (no request to the mount itself, which may be this process's).
pub fn mount_dev(at: &Path) -> Option<u64> {
    let at = std::path::absolute(at).ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().rev().find_map(|l| {
        let fields: Vec<&str> = l.split(' ').collect();
        let point = fields.get(4)?.replace("\\040", " ");
        if Path::new(&point) != at {
            return None;
        }
        let (major, minor) = fields.get(2)?.split_once(':')?;
        Some(nix::sys::stat::makedev(
            major.parse().ok()?,
            minor.parse().ok()?,
        ))
    })
}

/// Processes (as `pid (command)`) with a working or root folder, an open
/// file or a mapped file on devices `devs`, this one and `except` aside.
/// Another user's processes are seen by root only.
pub fn users_of(devs: &[u64], except: Option<u32>) -> Vec<String> {
    let me = std::process::id();
    let on = |p: &Path| dev_of(p).is_some_and(|d| devs.contains(&d));
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me || Some(pid) == except {
            continue;
        }
        let proc = entry.path();
        let listed = |d: &str| {
            std::fs::read_dir(proc.join(d))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
        };
        let uses = on(&proc.join("cwd"))
            || on(&proc.join("root"))
            || listed("fd").any(|l| on(&l))
            || listed("map_files").any(|l| on(&l));
        if uses {
            let comm = std::fs::read_to_string(proc.join("comm")).unwrap_or_default();
            found.push(format!("{pid} ({})", comm.trim()));
        }
    }
    found
}

/// The device of what `/proc` link `link` names, from the kernel's cached
/// attributes (`AT_STATX_DONT_SYNC`): no request reaches a FUSE daemon,
/// which may be paused, or be this process.
fn dev_of(link: &Path) -> Option<u64> {
    use rustix::fs::{AtFlags, CWD, StatxFlags, statx};
    let st = statx(CWD, link, AtFlags::STATX_DONT_SYNC, StatxFlags::empty()).ok()?;
    Some(nix::sys::stat::makedev(
        st.stx_dev_major.into(),
        st.stx_dev_minor.into(),
    ))
}

/// `/proc/PID/stat`, read once: its fields from the third (the state) on.
/// The command name before them is in parentheses and may hold anything,
/// spaces and parentheses included: the fields follow its last `)`.
pub struct Stat(Vec<String>);

impl Stat {
    pub fn of(pid: u32) -> Option<Stat> {
        Stat::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    pub fn parse(text: &str) -> Option<Stat> {
        let rest = &text[text.rfind(')')? + 1..];
        Some(Stat(
            rest.split_ascii_whitespace().map(str::to_string).collect(),
        ))
    }

    /// Field `n` as proc(5) numbers them (from 3).
    pub fn field(&self, n: usize) -> Option<&str> {
        self.0.get(n.checked_sub(3)?).map(String::as_str)
    }

    pub fn number(&self, n: usize) -> Option<u64> {
        self.field(n)?.parse().ok()
    }
}

/// Whether process `pid` runs: it exists and is not a zombie (which has
/// let go of everything it held).
pub fn running(pid: u32) -> bool {
    Stat::of(pid)
        .and_then(|s| s.field(3).map(|state| !matches!(state, "Z" | "X")))
        .unwrap_or(false)
}

/// Waits until process `pid` has ended, at most `limit`; whether it has.
/// (A pidfd is readable once it has: no polling.)
pub fn wait_for_end(pid: u32, limit: std::time::Duration) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::process::{Pid, PidfdFlags, pidfd_open};
    let Some(fd) = Pid::from_raw(pid as i32).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok())
    else {
        return !running(pid);
    };
    let timeout = Timespec::try_from(limit).unwrap_or(Timespec {
        tv_sec: 60,
        tv_nsec: 0,
    });
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    loop {
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) => return !running(pid),
            Ok(_) => return true,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return !running(pid),
        }
    }
}
