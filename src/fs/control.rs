//! `.detafs/`: control files. Contents are generated when a file is opened and
//! served with direct I/O and zero TTL, so readers never see stale status.

use super::{Attr, DirEntry, FileKind, Handle, MountFs, Opened, lock};
use crate::error::{Error, FsError, Result};
use crate::snapshot::Mtime;
use std::sync::Arc;
use std::time::Duration;

const COMMIT: u64 = 5;
const STATUS: u64 = 6;
const LOG: u64 = 7;
const HEALTH: u64 = 8;
const LAST_ERROR: u64 = 9;

const FILES: [(&[u8], u64); 5] = [
    (b"commit", COMMIT),
    (b"status", STATUS),
    (b"log", LOG),
    (b"health", HEALTH),
    (b"last-error", LAST_ERROR),
];

pub(super) fn is_control(ino: u64) -> bool {
    (COMMIT..=LAST_ERROR).contains(&ino)
}

pub(super) fn entries() -> Vec<DirEntry> {
    FILES
        .iter()
        .map(|(name, ino)| DirEntry {
            ino: *ino,
            kind: FileKind::File,
            name: name.to_vec(),
        })
        .collect()
}

pub(super) fn lookup(fs: &MountFs, name: &[u8]) -> Result<Attr> {
    FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, ino)| attr(fs, *ino))
        .ok_or_else(|| super::not_found(name))
}

pub(super) fn attr(fs: &MountFs, ino: u64) -> Attr {
    Attr {
        ino,
        kind: FileKind::File,
        size: 0,
        // Committing and the staged paths are the mount owner's alone; the
        // history and health are for every reader of the mount.
        perm: match ino {
            COMMIT => 0o200,
            STATUS | LAST_ERROR => 0o400,
            _ => 0o444,
        },
        nlink: 1,
        uid: fs.opts.uid,
        gid: fs.opts.gid,
        mtime: Mtime(0, 0),
        ttl: Duration::ZERO,
    }
}

pub(super) fn open(fs: &MountFs, ino: u64, writing: bool, uid: u32) -> Result<Opened> {
    // The kernel checks the modes above (default_permissions); checked here
    // too, so the core holds without it.
    if matches!(ino, COMMIT | STATUS | LAST_ERROR) && uid != fs.opts.uid && uid != 0 {
        return Err(Error::fs(
            FsError::Denied,
            "only the mount's owner may commit or see staged changes",
        ));
    }
    let handle = match (ino, writing) {
        (COMMIT, true) => Handle::Commit,
        (COMMIT, false) => Handle::Text(Arc::new(vec![])),
        (_, true) => {
            return Err(Error::fs(
                FsError::NotPermitted,
                ".detafs/ files are read-only",
            ));
        }
        (STATUS, _) => Handle::Text(Arc::new(status(fs)?)),
        (LOG, _) => Handle::Text(Arc::new(log(fs)?)),
        (HEALTH, _) => Handle::Text(Arc::new(health(fs))),
        _ => Handle::Text(Arc::new(lock(&fs.last_error).clone().into_bytes())),
    };
    Ok(Opened {
        fh: fs.add_handle(handle),
        keep_cache: false,
        direct_io: true,
    })
}

/// `echo MESSAGE > .detafs/commit`: returns once the version is durable.
pub(super) fn commit(fs: &MountFs, data: &[u8], uid: u32) -> Result<()> {
    let message = String::from_utf8_lossy(data);
    match fs.commit_staging(&message, uid) {
        Ok(record) => {
            tracing::info!("committed v{} ({})", record.version, record.message);
            lock(&fs.last_error).clear();
            Ok(())
        }
        Err(e) => {
            tracing::warn!("commit failed: {e}");
            // One line, whatever names the error quotes.
            *lock(&fs.last_error) = format!("{}\n", crate::escape::line(e.to_string().as_bytes()));
            Err(e)
        }
    }
}

fn status(fs: &MountFs) -> Result<Vec<u8>> {
    let st = fs.staging()?;
    let mut out = String::new();
    // Paths are escaped by `status`: one change, one line.
    for (tag, path) in st.status(&fs.repo)? {
        out.push_str(&format!("{tag} {path}\n"));
    }
    Ok(out.into_bytes())
}

fn log(fs: &MountFs) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for r in fs.versions.read().unwrap_or_else(|p| p.into_inner()).iter() {
        let line = r.log_entry();
        out.extend(serde_json::to_vec(&line).expect("serializable"));
        out.push(b'\n');
    }
    Ok(out)
}

/// From what the store answered lately (the poll asks it every few
/// seconds), so reading health never waits on an unreachable store.
fn health(fs: &MountFs) -> Vec<u8> {
    let store = fs.repo.store.health();
    let body = serde_json::json!({
        "status": if store.reachable { "ok" } else { "degraded" },
        "store": fs.repo.store.url(),
        "store_reachable": store.reachable,
        "store_error": store.error,
        "store_failing_for_secs": store.failing_for_secs,
        "store_last_ok_secs_ago": store.last_ok_secs_ago,
        "store_latency_ms": store.latency_ms,
        "dataset": fs.dataset,
        "versions": fs.versions.read().unwrap_or_else(|p| p.into_inner()).len(),
        "version_inodes": fs.version_inodes(),
        "cache_bytes": fs.repo.disk.used_bytes(),
        "staging": fs.staging.is_some(),
    });
    let mut v = serde_json::to_vec_pretty(&body).expect("serializable");
    v.push(b'\n');
    v
}
