//! Reading versions: file contents (streamed, verified) and whole-tree export;
//! `chunks.rs` keeps verified chunks in memory for readers that come back
//! (the mount, the gateway).

pub mod chunks;

use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::repo::Repo;
use crate::snapshot::tree::TreeSource;
use crate::snapshot::walk;
use crate::snapshot::{Mtime, Node, Special};
use crate::store::pack::{self, BlobRef};
use filetime::FileTime;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Largest single range read; also bounds memory to a few times this.
const RUN_BYTES: u64 = 8 << 20;

/// Streams a file's chunks to `out`, every chunk verified. `FETCHERS`
/// threads fetch and verify runs ahead (run i on thread i mod
/// `FETCHERS`) while this one writes them in order, so reading, verifying
/// and writing overlap on all the cores.
pub fn read_file(repo: &Repo, chunks: &[BlobRef], out: &mut dyn Write) -> Result<()> {
    let runs = pack::runs(chunks, RUN_BYTES);
    let write = |out: &mut dyn Write, data: Vec<bytes::Bytes>| -> Result<()> {
        for chunk in data {
            out.write_all(&chunk)
                .map_err(|e| Error::io("standard output", e))?;
        }
        Ok(())
    };
    if let [run] = runs[..] {
        // Small files: one read, no helper thread.
        return write(out, repo.read_chunks(run)?);
    }
    let fetchers = FETCHERS.min(runs.len());
    std::thread::scope(|s| {
        let receivers: Vec<_> = (0..fetchers)
            .map(|k| {
                let (tx, rx) = std::sync::mpsc::sync_channel(0);
                let mine = runs.iter().skip(k).step_by(fetchers);
                s.spawn(move || {
                    for run in mine {
                        let res = repo.read_chunks(run);
                        let failed = res.is_err();
                        if tx.send(res).is_err() || failed {
                            break;
                        }
                    }
                });
                rx
            })
            .collect();
        for i in 0..runs.len() {
            // A fetcher stops at its first error, which it sent first.
            let res = receivers[i % fetchers]
                .recv()
                .expect("a fetcher sends each of its runs or an error");
            write(out, res?)?;
        }
        Ok(())
    })
}

/// Threads fetching one file's runs, one per core of this machine kind;
/// each holds one run until the writer takes it.
const FETCHERS: usize = 2;
/// Threads writing an export's files.
const WRITERS: usize = 2;

/// Gives `path` the atime and mtime of `node`: of `path` itself, never of
/// what it points to, and without opening it (opening a FIFO would wait
/// for a writer).
fn set_times(path: &Path, node: &Node) -> Result<()> {
    let t = |m: Mtime| FileTime::from_unix_time(m.0, m.1);
    filetime::set_symlink_file_times(path, t(node.atime()), t(node.mtime()))
        .map_err(|e| Error::io(path.display(), e))
}

/// How `export` treats what could be dangerous to recreate.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportOptions {
    /// Keep setuid and setgid bits (cleared by default, as `tar` does for
    /// other users' archives: a committed setuid binary must not become a
    /// root shell when root exports it).
    pub preserve_setid: bool,
}

/// Writes a version's tree under `dest` (which must be absent or empty):
/// contents, modes and mtimes, byte for byte. Ownership is not restored:
/// files belong to whoever exports. A version beyond the limits of
/// `snapshot::walk` is refused before anything is written.
pub fn export(
    repo: &Repo,
    root: &BlobRef,
    dest: &Path,
    opts: ExportOptions,
    progress: &dyn Progress,
) -> Result<()> {
    progress.set_total(walk::expansion(repo, root)?.bytes);
    match std::fs::read_dir(dest) {
        Ok(mut it) => {
            if it.next().is_some() {
                return Err(Error::InvalidInput(format!(
                    "{} is not empty; export needs an empty or new directory",
                    dest.display()
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o777 & !crate::private::user_umask())
            .create(dest)
            .map_err(|e| Error::io(dest.display(), e))?,
        Err(e) => return Err(Error::io(dest.display(), e)),
    }
    let mode = |m: u32| if opts.preserve_setid { m } else { m & !0o6000 };
    // The trees are walked here, depth first without recursion, making
    // folders, symlinks and special files; files go in batches to workers.
    // Hard links are made once every file is written, then each folder's
    // mode and mtime are set, deepest first (its mode may forbid writing,
    // and each name made in it moves its mtime).
    let mut fills = vec![(*root, dest.to_path_buf())];
    let mut folders: Vec<(PathBuf, u32, Node)> = Vec::new();
    // The first name exported of each link group: its other names are
    // made links to it. A name that differs from the first (a hostile or
    // merged tree) is written as a file of its own.
    let mut firsts: HashMap<u64, (PathBuf, Node)> = HashMap::new();
    let mut links = Vec::new();
    let failed: parking_lot::Mutex<Option<Error>> = parking_lot::Mutex::new(None);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<FileJob>>(WRITERS);
    let rx = parking_lot::Mutex::new(rx);
    std::thread::scope(|s| -> Result<()> {
        // Dropped when the walk ends or fails, which ends the workers.
        let tx = tx;
        for _ in 0..WRITERS {
            let (rx, failed) = (&rx, &failed);
            s.spawn(move || {
                loop {
                    // The lock is let go before the batch is written.
                    let batch = rx.lock().recv();
                    let Ok(batch) = batch else { break };
                    // After a failure, batches are drained, not written.
                    if has_failed(failed) {
                        continue;
                    }
                    if let Err(e) = write_batch(repo, &batch, progress) {
                        failed.lock().get_or_insert(e);
                    }
                }
            });
        }
        while let Some((tree, dir)) = fills.pop() {
            if has_failed(&failed) {
                break;
            }
            let tree = repo.tree(&tree)?;
            let mut files = Vec::new();
            for entry in &tree.entries {
                // Names are validated on decode (no '/', '.', '..' or NUL), so
                // every path stays under `dest`.
                let path = dir.join(OsStr::from_bytes(&entry.name));
                let group = entry.node.link().map(|l| l.group);
                if let Some((first, _)) = group
                    .and_then(|g| firsts.get(&g))
                    .filter(|(_, node)| node.same(&entry.node))
                {
                    links.push((first.clone(), path));
                    continue;
                }
                let made = match &entry.node {
                    // Its bytes are gone: nothing to write (`ls` marks it).
                    Node::File { erased: true, .. } => false,
                    Node::File { mode: m, .. } => {
                        files.push((path.clone(), entry.node.clone(), mode(*m)));
                        true
                    }
                    Node::Dir { mode: m, tree, .. } => {
                        std::fs::create_dir(&path).map_err(|e| Error::io(path.display(), e))?;
                        folders.push((path.clone(), *m, entry.node.clone()));
                        fills.push((*tree, path.clone()));
                        true
                    }
                    Node::Symlink { target, .. } => {
                        std::os::unix::fs::symlink(OsStr::from_bytes(target), &path)
                            .map_err(|e| Error::io(path.display(), e))?;
                        set_times(&path, &entry.node)?;
                        true
                    }
                    Node::Special {
                        kind,
                        mode: m,
                        rdev,
                        ..
                    } => {
                        // mknod applies the umask: the mode is set after.
                        let made = make_special(&path, *kind, mode(*m), *rdev)?;
                        if made {
                            finish(&path, mode(*m), &entry.node)?;
                        }
                        made
                    }
                };
                if let (Some(g), true) = (group, made) {
                    firsts.entry(g).or_insert((path, entry.node.clone()));
                }
            }
            for batch in batches(files) {
                if tx.send(batch).is_err() {
                    break; // the workers are gone: a panic, reported below
                }
            }
        }
        Ok(())
    })?;
    if let Some(e) = failed.into_inner() {
        return Err(e);
    }
    for (first, path) in links {
        std::fs::hard_link(&first, &path).map_err(|e| Error::io(path.display(), e))?;
    }
    for (path, m, node) in folders.iter().rev() {
        finish(path, mode(*m), node)?;
    }
    Ok(())
}

/// Recreates a FIFO, socket or device node at `path` with `mode`; false
/// (and a warning) for a device when the caller may not make one: only
/// root may, and the rest of the export goes on without it.
fn make_special(path: &Path, kind: Special, mode: u32, rdev: u64) -> Result<bool> {
    use nix::sys::stat::{Mode, SFlag, mknod};
    let made = mknod(
        path,
        SFlag::from_bits_retain(kind.file_type()),
        Mode::from_bits_retain(mode),
        rdev,
    );
    if let Err(e) = made {
        let e = std::io::Error::from(e);
        if kind.has_rdev() && e.raw_os_error() == Some(libc::EPERM) {
            tracing::warn!(
                "{}: not recreated (a device node; only root may make one)",
                path.display()
            );
            return Ok(false);
        }
        return Err(Error::io(path.display(), e));
    }
    Ok(true)
}

fn has_failed(failed: &parking_lot::Mutex<Option<Error>>) -> bool {
    failed.lock().is_some()
}

/// A file to write: where, what, and its mode.
type FileJob = (PathBuf, Node, u32);

/// A directory's files in batches whose chunks are fetched together: files
/// committed together lie back to back in a pack, so a batch of small files
/// costs one range read, not one per file. A large file is a batch alone.
fn batches(files: Vec<FileJob>) -> Vec<Vec<FileJob>> {
    let mut out: Vec<Vec<FileJob>> = Vec::new();
    let mut bytes = 0;
    for file in files {
        let size = file.1.size();
        match out.last_mut() {
            Some(batch) if bytes + size <= RUN_BYTES => batch.push(file),
            _ => {
                bytes = 0;
                out.push(vec![file]);
            }
        }
        bytes += size;
    }
    out
}

/// Writes a batch of files: each a new file, never one that is there (nor
/// a symlink's target), then its mode and mtime.
fn write_batch(repo: &Repo, batch: &[FileJob], progress: &dyn Progress) -> Result<()> {
    let create = |path: &Path| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| Error::io(path.display(), e))
    };
    let streamed = batch.iter().map(|(_, n, _)| n.size()).sum::<u64>() > RUN_BYTES;
    if let ([(path, node, _)], true) = (batch, streamed) {
        // One large file: streamed, its progress told as it is written.
        let mut f = Counted {
            out: create(path)?,
            progress,
        };
        read_file(repo, chunks_of(node), &mut f).map_err(|e| match e {
            Error::Io { source, .. } => Error::io(path.display(), source),
            other => other,
        })?;
    } else {
        // Fetched in store order, written in name order.
        let mut refs: Vec<BlobRef> = batch
            .iter()
            .flat_map(|(_, n, _)| chunks_of(n))
            .copied()
            .collect();
        refs.sort_by_key(|r| (r.pack, r.offset));
        refs.dedup();
        let mut data = HashMap::with_capacity(refs.len());
        for run in pack::runs(&refs, RUN_BYTES) {
            data.extend(run.iter().map(|r| r.id).zip(repo.read_chunks(run)?));
        }
        for (path, node, _) in batch {
            let mut f = create(path)?;
            for r in chunks_of(node) {
                f.write_all(&data[&r.id])
                    .map_err(|e| Error::io(path.display(), e))?;
            }
        }
    }
    for (path, node, mode) in batch {
        finish(path, *mode, node)?;
        if !streamed {
            progress.advance(node.size());
        }
    }
    Ok(())
}

/// A file being written that tells `progress` of each write.
struct Counted<'p, W> {
    out: W,
    progress: &'p dyn Progress,
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.progress.advance(n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

fn chunks_of(node: &Node) -> &[BlobRef] {
    match node {
        Node::File { chunks, .. } => chunks,
        _ => &[],
    }
}

/// Sets a written file's or directory's mode and mtime.
fn finish(path: &Path, mode: u32, node: &Node) -> Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(path.display(), e))?;
    set_times(path, node)
}
