//! Local state is private to its owner: the embedded store, the cache and
//! staging hold the bytes of files of every mode, so their folders are 0700
//! and their files 0600, whatever the umask (docs/security.md).

use crate::error::{Error, Result};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::OnceLock;

static USER_UMASK: OnceLock<u32> = OnceLock::new();

/// Makes every file and folder this process creates private (umask 077) and
/// remembers the user's umask for what is meant to be shared (an export).
/// Called once, before any thread starts.
pub fn restrict_umask() {
    use nix::sys::stat::{Mode, umask};
    let old = umask(Mode::from_bits_truncate(0o077));
    let _ = USER_UMASK.set(old.bits());
}

/// The umask the user had before `restrict_umask` (022 if it never ran).
pub fn user_umask() -> u32 {
    USER_UMASK.get().copied().unwrap_or(0o022)
}

/// Creates a folder and its missing parents, each 0700.
pub fn create_dir(path: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| Error::io(path.display(), e))
}

/// Creates a private folder if missing; an existing one that others can
/// reach is tightened to 0700. One owned by another user is refused: its
/// owner could plant a symlink where detafs writes.
pub fn ensure_dir(path: &Path) -> Result<()> {
    create_dir(path)?;
    tighten(path)
}

/// Tightens an existing folder of this user's to 0700 (see `ensure_dir`);
/// refuses one another user owns.
pub fn tighten(path: &Path) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path.display(), e))?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(Error::NotOwned {
            path: path.display().to_string(),
            owner: meta.uid(),
            me,
        });
    }
    if meta.mode() & 0o077 == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| Error::io(path.display(), e))
}

/// Creates (or truncates) a private file, 0600. A symlink planted in its
/// place is refused, never followed.
pub fn create_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Opens a private file (0600 when made) for appending, as `create_file`
/// without following a symlink.
pub fn append_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}
