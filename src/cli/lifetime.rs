//! A mount's lifetime as commands see it: one lifetime for its two kernel
//! connections. `detafs umount` detaches both or neither (it looks for
//! processes using either before detaching one) and returns once the
//! daemon has let go of everything it held; a mount whose daemon is gone
//! is detached where it is found (`detafs mount`, `detafs umount`); a
//! daemon that still holds staging after its mount was detached lazily
//! is named, with the processes that keep it.

use anyhow::{Context, bail};
use detafs::procs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A mount's daemon as its pid file (beside its marker) tells it: its pid
/// and the device of its main connection.
pub(super) struct Daemon {
    pub pid: u32,
    dev: u64,
}

/// The pid file of the mount whose marker is `marker`.
fn pid_file(marker: &Path) -> PathBuf {
    let name = marker.file_name().unwrap_or_default().to_string_lossy();
    marker.with_file_name(format!("pid-{name}"))
}

/// Written by a daemon once its mount at `mp` is live.
pub(super) fn write_pid(marker: &Path, mp: &Path) {
    let dev = procs::mount_dev(mp).unwrap_or(0);
    let _ = std::fs::write(pid_file(marker), format!("{} {dev}\n", std::process::id()));
}

/// Removed by a daemon as it ends.
pub(super) fn remove_pid(marker: &Path) {
    let _ = std::fs::remove_file(pid_file(marker));
}

/// The daemon the pid file beside `marker` names, if it still runs.
pub(super) fn daemon(marker: &Path) -> Option<Daemon> {
    let text = std::fs::read_to_string(pid_file(marker)).ok()?;
    let mut words = text.split_whitespace();
    let pid: u32 = words.next()?.parse().ok()?;
    let dev: u64 = words.next()?.parse().ok()?;
    procs::running(pid).then_some(Daemon { pid, dev })
}

/// Is `path` a mount whose daemon is gone? Its connection answers
/// ENOTCONN. Asked by a read of its health, which every open and read
/// reaches the daemon for (a stat may be answered from the kernel's
/// cache), and which a live daemon answers from memory.
pub(super) fn dead(path: &Path) -> bool {
    matches!(
        std::fs::read(path.join(".detafs/health")),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN)
    )
}

/// Detaches a mount whose daemon is gone, with what is mounted inside it.
pub(super) fn detach_dead(at: &Path) -> anyhow::Result<()> {
    fusermount(at, &["-u", "-z"])
}

/// Whether a file system is mounted at `path`.
pub(super) fn is_mounted(path: &Path) -> bool {
    let Ok(canon) = std::fs::canonicalize(path) else {
        return false;
    };
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| Path::new(&m.replace("\\040", " ")) == canon)
}

/// `detafs umount MNT`: both connections are detached, or neither.
pub fn umount(mountpoint: &Path, lazy: bool) -> anyhow::Result<()> {
    let mp = mountpoint.display();
    if dead(mountpoint) {
        detach_dead(mountpoint)?;
        eprintln!("{mp} had lost its daemon: detached");
        return Ok(());
    }
    if !is_mounted(mountpoint) {
        bail!("{mp} is not mounted");
    }
    let pid = health_pid(mountpoint);
    if lazy {
        // Detached from the tree now, with versions/ inside it; the daemon
        // serves whoever is still inside until the last one leaves.
        fusermount(mountpoint, &["-u", "-z"])?;
        if let Some(pid) = pid {
            eprintln!(
                "{mp} detached; its daemon (pid {pid}) ends once nothing inside uses it, and holds the dataset's staging until then"
            );
        }
        return Ok(());
    }
    let versions = mountpoint.join("versions");
    let apart = is_mounted(&versions);
    let devs: Vec<u64> = [mountpoint, &versions]
        .into_iter()
        .filter_map(procs::mount_dev)
        .collect();
    let using = procs::users_of(&devs, pid);
    if !using.is_empty() {
        bail!(
            "cannot unmount {mp}: in use by {} (a working folder, an open file); nothing was detached. Leave it and try again, or detach it now with `detafs umount --lazy {mp}`",
            using.join(", ")
        );
    }
    // versions/ on a connection of its own is mounted inside: it goes
    // first (the outer mount is busy while it is there).
    if apart {
        fusermount(&versions, &["-u"])?;
    }
    fusermount(mountpoint, &["-u"]).map_err(|e| match apart {
        // A user this command could not see (another user's process).
        true => e.context(format!(
            "versions/ was detached and is served by the main connection from now on; {mp} stays mounted"
        )),
        false => e,
    })?;
    if let Some(pid) = pid {
        wait_for_exit(pid, mountpoint);
    }
    Ok(())
}

/// The daemon's pid, as its health says.
fn health_pid(mp: &Path) -> Option<u32> {
    let text = std::fs::read(mp.join(".detafs/health")).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
    v["pid"].as_u64().and_then(|p| u32::try_from(p).ok())
}

/// Returns once daemon `pid` has ended (it let go of staging and its
/// files), or says it has not within a minute.
fn wait_for_exit(pid: u32, mp: &Path) {
    if !procs::wait_for_end(pid, Duration::from_secs(60)) {
        eprintln!(
            "{} is unmounted, but its daemon (pid {pid}) has not ended yet",
            mp.display()
        );
    }
}

pub(super) fn fusermount(at: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("fusermount3")
        .args(args)
        .arg(at)
        .output()
        .context("cannot run fusermount3 (install fuse3)")?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let hint = match said.contains("busy") {
            true => format!(
                "; something inside still uses it (a shell's working folder, an open file; `fuser -vm {}` lists them): leave it and try again, or detach it now with `detafs umount --lazy {}`",
                at.display(),
                at.display()
            ),
            false => String::new(),
        };
        bail!("cannot unmount {}: {}{hint}", at.display(), said.trim());
    }
    Ok(())
}

/// Why staging at `dir` is held with no live mount to go through: a
/// daemon whose mount was detached lazily, and what keeps it.
pub(super) fn held(marker: &Path, name: &str) -> anyhow::Error {
    let at = std::fs::read_to_string(marker).unwrap_or_default();
    match daemon(marker) {
        Some(d) => {
            let using = procs::users_of(&[d.dev], Some(d.pid));
            anyhow::anyhow!(
                "staging of {name} is held by the detafs daemon (pid {}) of the mount that was at {at}, detached lazily: it ends once nothing inside uses it ({}), or stop it with `kill {}`",
                d.pid,
                match using.is_empty() {
                    true => "no process found inside: it may be another user's".to_string(),
                    false => format!("in use by {}", using.join(", ")),
                },
                d.pid
            )
        }
        None => anyhow::Error::new(detafs::Error::StagingBusy(name.to_string())),
    }
}
