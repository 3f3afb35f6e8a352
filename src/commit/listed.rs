//! A file a scan listed: how it is opened for reading and how its stat is
//! keyed in the index's stat cache (the scan and the small-file reader
//! both take them from here).

use crate::cache::index::StatKey;
use crate::error::{Error, Result};
use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What the stat cache compares: a file changed if any of these did.
pub(super) fn stat_key(m: &Metadata) -> StatKey {
    StatKey {
        size: m.size(),
        mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        ino: m.ino(),
    }
}

/// Opens a file the scan listed as a regular file, for reading. Not
/// following a symlink, and without waiting for a writer: a file swapped
/// meanwhile for a symlink or a FIFO is an error, not a read of something
/// else or a commit that hangs.
pub(super) fn open_listed(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::io(path.display(), e))?;
    match file.metadata() {
        Ok(m) if m.is_file() => Ok(file),
        Ok(_) => Err(Error::InvalidInput(format!(
            "{} is no longer a regular file; nothing was committed (commit again)",
            path.display()
        ))),
        Err(e) => Err(Error::io(path.display(), e)),
    }
}
