//! Reading versions: file contents (streamed, verified) and whole-tree export.

use crate::error::{Error, Result};
use crate::repo::Repo;
use crate::snapshot::diff::TreeSource;
use crate::snapshot::{Mtime, Node};
use crate::store::pack::{self, BlobRef};
use filetime::FileTime;
use indicatif::ProgressBar;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Largest single range read; also bounds memory to a few times this.
const RUN_BYTES: u64 = 8 << 20;

/// Streams a file's chunks to `out`, every chunk verified. One thread fetches
/// ahead while this one writes, so reading and writing overlap.
pub fn read_file(repo: &Repo, chunks: &[BlobRef], out: &mut dyn Write) -> Result<()> {
    let runs = pack::runs(chunks, RUN_BYTES);
    let write = |out: &mut dyn Write, data: Vec<bytes::Bytes>| -> Result<()> {
        for chunk in data {
            out.write_all(&chunk).map_err(|e| Error::io("output", e))?;
        }
        Ok(())
    };
    if let [run] = runs[..] {
        // Small files: one read, no helper thread.
        return write(out, repo.read_chunks(run)?);
    }
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel(2);
        s.spawn(move || {
            for run in runs {
                let res = repo.read_chunks(run);
                let failed = res.is_err();
                if tx.send(res).is_err() || failed {
                    break;
                }
            }
        });
        for res in rx {
            write(out, res?)?;
        }
        Ok(())
    })
}

fn set_mtime(path: &Path, m: Mtime, symlink: bool) -> Result<()> {
    let t = FileTime::from_unix_time(m.0, m.1);
    let res = if symlink {
        filetime::set_symlink_file_times(path, t, t)
    } else {
        filetime::set_file_times(path, t, t)
    };
    res.map_err(|e| Error::io(path.display(), e))
}

/// Writes a version's tree under `dest` (which must be absent or empty):
/// contents, modes and mtimes, byte for byte.
pub fn export(repo: &Repo, root: &BlobRef, dest: &Path, progress: &ProgressBar) -> Result<()> {
    match std::fs::read_dir(dest) {
        Ok(mut it) => {
            if it.next().is_some() {
                return Err(Error::InvalidInput(format!(
                    "{} is not empty; export needs an empty or new directory",
                    dest.display()
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dest).map_err(|e| Error::io(dest.display(), e))?
        }
        Err(e) => return Err(Error::io(dest.display(), e)),
    }
    export_tree(repo, root, dest, progress)
}

fn export_tree(repo: &Repo, tree: &BlobRef, dir: &Path, progress: &ProgressBar) -> Result<()> {
    let tree = repo.tree(tree)?;
    let mut files = Vec::new();
    for entry in &tree.entries {
        let path = dir.join(OsStr::from_bytes(&entry.name));
        match &entry.node {
            file @ Node::File { .. } => files.push((path, file)),
            Node::Dir { mode, mtime, tree } => {
                std::fs::create_dir(&path).map_err(|e| Error::io(path.display(), e))?;
                export_tree(repo, tree, &path, progress)?;
                finish(&path, *mode, *mtime)?;
            }
            Node::Symlink { mtime, target } => {
                std::os::unix::fs::symlink(OsStr::from_bytes(target), &path)
                    .map_err(|e| Error::io(path.display(), e))?;
                set_mtime(&path, *mtime, true)?;
            }
        }
    }
    export_files(repo, &files, progress)
}

/// Writes a directory's files in batches whose chunks are fetched together:
/// files committed together lie back to back in a pack, so a batch of small
/// files costs one range read, not one per file.
fn export_files(repo: &Repo, files: &[(PathBuf, &Node)], progress: &ProgressBar) -> Result<()> {
    let create =
        |path: &Path| std::fs::File::create(path).map_err(|e| Error::io(path.display(), e));
    let mut rest = files;
    while let Some((first, _)) = rest.first() {
        let mut n = 0;
        let mut bytes = 0;
        while let Some((_, node)) = rest.get(n)
            && (n == 0 || bytes + node.size() <= RUN_BYTES)
        {
            bytes += node.size();
            n += 1;
        }
        let (batch, tail) = rest.split_at(n);
        rest = tail;
        if bytes > RUN_BYTES {
            // One large file: streamed.
            let mut f = create(first)?;
            read_file(repo, chunks_of(batch[0].1), &mut f).map_err(|e| match e {
                Error::Io { source, .. } => Error::io(first.display(), source),
                other => other,
            })?;
        } else {
            // Fetched in store order, written in name order.
            let mut refs: Vec<BlobRef> = batch
                .iter()
                .flat_map(|(_, n)| chunks_of(n))
                .copied()
                .collect();
            refs.sort_by_key(|r| (r.pack, r.offset));
            refs.dedup();
            let mut data = HashMap::with_capacity(refs.len());
            for run in pack::runs(&refs, RUN_BYTES) {
                data.extend(run.iter().map(|r| r.id).zip(repo.read_chunks(run)?));
            }
            for (path, node) in batch {
                let mut f = create(path)?;
                for r in chunks_of(node) {
                    f.write_all(&data[&r.id])
                        .map_err(|e| Error::io(path.display(), e))?;
                }
            }
        }
        for (path, node) in batch {
            if let Node::File { mode, mtime, .. } = node {
                finish(path, *mode, *mtime)?;
            }
            progress.inc(node.size());
        }
    }
    Ok(())
}

fn chunks_of(node: &Node) -> &[BlobRef] {
    match node {
        Node::File { chunks, .. } => chunks,
        _ => &[],
    }
}

/// Sets a written file's or directory's mode and mtime.
fn finish(path: &Path, mode: u32, mtime: Mtime) -> Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(path.display(), e))?;
    set_mtime(path, mtime, false)
}

/// Total bytes of regular files under a tree (for progress bars).
pub fn tree_size(repo: &Repo, tree: &BlobRef) -> Result<u64> {
    let mut total = 0;
    for e in &repo.tree(tree)?.entries {
        total += match &e.node {
            Node::Dir { tree, .. } => tree_size(repo, tree)?,
            n => n.size(),
        };
    }
    Ok(total)
}
