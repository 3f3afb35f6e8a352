//! Staged files through FUSE passthrough: once a staged file has its own
//! local copy, the kernel reads and writes that copy itself, with no
//! round trip to the daemon (Linux 6.9+, a daemon with CAP_SYS_ADMIN).
//!
//! The kernel does a file's I/O one way at a time: a passthrough open of
//! an inode that is open through the daemon (or the reverse) fails with
//! EIO, and one backing file per inode at a time. So each open of a staged
//! file takes the way of the opens of it still open; passthrough where
//! none is open through the daemon. While an inode is open through a copy
//! that staging no longer holds there (a restore or checkout replaced it),
//! it cannot be opened again until those handles close (EBUSY). Writes
//! that pass through are not seen here: `staging::Writes::direct` tells a
//! commit that the copy may change under it.

use crate::error::{Error, FsError, Result};
use crate::staging::Direct;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// The ways a staged inode is open, and the copy the opens that pass
/// through use (its device and inode number).
#[derive(Default, Clone, Copy)]
struct Ways {
    daemon: u32,
    through: u32,
    copy: Option<(u64, u64)>,
}

/// An open handle of a staged file: its inode, whether it passes through,
/// and if it writes so, what tells a commit.
struct Open {
    node: u64,
    through: bool,
    _direct: Option<Direct>,
}

#[derive(Default)]
pub(super) struct Passthrough {
    /// The kernel agreed to passthrough and backing files can be opened.
    on: AtomicBool,
    handles: Mutex<HashMap<u64, Open>>,
    ways: Mutex<HashMap<u64, Ways>>,
}

impl Passthrough {
    pub(super) fn enable(&self) {
        self.on.store(true, Ordering::Relaxed);
    }

    pub(super) fn enabled(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Chooses how a new open of staged inode `node` does its I/O (`copy`:
    /// the identity of its local copy, if it has one) and counts it;
    /// `bind` then names its handle, or `unchoose` takes it back if the
    /// open fails. Busy where the kernel would refuse any way: the inode is
    /// open through another file than the one this open would read.
    pub(super) fn choose(&self, node: u64, copy: Option<(u64, u64)>) -> Result<bool> {
        let mut ways = self.ways.lock();
        let w = ways.entry(node).or_default();
        if w.through > 0 && w.copy != copy {
            return Err(Error::fs(
                FsError::Busy,
                "a staged file that was restored or checked out while still open: \
                 it opens again once those programs close it",
            ));
        }
        let through = copy.is_some() && self.enabled() && w.daemon == 0;
        match through {
            true => {
                w.through += 1;
                w.copy = copy;
            }
            false => w.daemon += 1,
        }
        Ok(through)
    }

    pub(super) fn unchoose(&self, node: u64, through: bool) {
        let mut ways = self.ways.lock();
        if let Some(w) = ways.get_mut(&node) {
            match through {
                true => w.through = w.through.saturating_sub(1),
                false => w.daemon = w.daemon.saturating_sub(1),
            }
            if w.through == 0 && w.daemon == 0 {
                ways.remove(&node);
            }
        }
    }

    pub(super) fn bind(&self, fh: u64, node: u64, through: bool, direct: Option<Direct>) {
        let open = Open {
            node,
            through,
            _direct: direct,
        };
        self.handles.lock().insert(fh, open);
    }

    /// Handle `fh` closed.
    pub(super) fn release(&self, fh: u64) {
        let gone = self.handles.lock().remove(&fh);
        if let Some(o) = gone {
            self.unchoose(o.node, o.through);
        }
    }

    /// The kernel would not take the backing file of handle `fh` (say a
    /// daemon without CAP_SYS_ADMIN): it goes through the daemon, and so
    /// does every later open.
    pub(super) fn refused(&self, fh: u64) {
        self.on.store(false, Ordering::Relaxed);
        let mut handles = self.handles.lock();
        if let Some(o) = handles.get_mut(&fh)
            && o.through
        {
            o.through = false;
            o._direct = None;
            let mut ways = self.ways.lock();
            let w = ways.entry(o.node).or_default();
            w.through = w.through.saturating_sub(1);
            w.daemon += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inode_is_open_one_way_at_a_time() {
        let p = Passthrough::default();
        let (copy, other) = (Some((1, 70)), Some((1, 71)));
        assert!(!p.choose(7, copy).unwrap(), "off until the kernel agrees");
        p.unchoose(7, false);
        p.enable();
        // Open through the daemon (no local copy yet): later opens too.
        assert!(!p.choose(7, None).unwrap());
        p.bind(1, 7, false, None);
        assert!(!p.choose(7, copy).unwrap());
        p.bind(2, 7, false, None);
        p.release(1);
        p.release(2);
        // Nothing open: the next open with a copy passes through, and so
        // do the ones while it is open.
        assert!(p.choose(7, copy).unwrap());
        p.bind(3, 7, true, None);
        assert!(p.choose(7, copy).unwrap());
        p.bind(4, 7, true, None);
        // While it is open through that copy, neither another copy nor
        // no copy (the kernel keeps one backing file per inode) opens.
        assert!(p.choose(7, other).is_err());
        assert!(p.choose(7, None).is_err());
        p.release(3);
        p.release(4);
        assert!(p.choose(7, other).unwrap());
        p.bind(6, 7, true, None);
        // Another inode is its own.
        assert!(!p.choose(8, None).unwrap());
        p.bind(5, 8, false, None);
        // A refused backing file turns passthrough off for later opens.
        p.refused(6);
        assert!(!p.choose(9, copy).unwrap());
    }
}
