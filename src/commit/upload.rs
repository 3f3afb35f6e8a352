//! Uploads: a file's bytes stored ahead of a commit (the gateway's chunked
//! alternative to a body over its limit). The chunks go into packs as a
//! commit's do, and so does a one-entry tree naming them (a file of any
//! size has a chunk list of any length, which a tree holds as a version's
//! does); `uploads/ID.json` (sealed like records) names that tree, for
//! which dataset and path, and when. A commit names uploads; one older than
//! a commit may take (gc may since have collected its packs) is refused.

use super::sink::Sink;
use crate::error::{Error, Result};
use crate::limits;
use crate::progress::Quiet;
use crate::relpath::RelPath;
use crate::repo::Repo;
use crate::snapshot::tree::{Entry, Node, Tree};
use crate::snapshot::tree::{TreeSink, TreeSource};
use crate::store::keys;
use crate::store::pack::BlobRef;
use crate::store::sealed_file::Sealing;
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upload {
    pub id: String,
    pub dataset: String,
    pub path: String,
    pub size: u64,
    /// A tree of one entry, `file`, the upload's bytes.
    pub tree: BlobRef,
    /// RFC 3339, UTC.
    pub time: String,
    /// The newest gc note when it was stored (`Repo::gc_mark`): it may
    /// reuse blobs a later gc deleted, so a commit after one refuses it.
    #[serde(default)]
    pub gc_mark: Option<String>,
    /// Whose it is (`pending::owner` of the caller that stored it): only
    /// they commit or copy it. (None: stored before uploads had owners.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// An upload as a commit takes it.
pub struct Loaded {
    pub path: String,
    pub size: u64,
    pub chunks: Vec<BlobRef>,
}

/// The name of the one entry of an upload's tree.
const ENTRY: &[u8] = b"file";

/// Stores the bytes of local file `file` as an upload for `path` of `dataset`.
pub fn store_upload(
    repo: &Repo,
    dataset: &str,
    path: &RelPath,
    file: &Path,
    owner: &str,
) -> Result<Upload> {
    repo.check_dataset(dataset)?;
    let mut scanner = Sink::new(repo, &Quiet)?;
    let (chunks, size) = scanner.chunk_prefix(file, &Sealing::Plain, u64::MAX)?;
    record(repo, scanner, (dataset, path, owner), chunks, size)
}

/// An upload for `path` of `dataset` of a file of a version (its `chunks`
/// and `size`): a copy that reads no bytes. Its chunks are a version's,
/// so it is as young as an upload stored now.
pub fn store_chunks(
    repo: &Repo,
    dataset: &str,
    path: &RelPath,
    chunks: Vec<BlobRef>,
    size: u64,
    owner: &str,
) -> Result<Upload> {
    repo.check_dataset(dataset)?;
    let scanner = Sink::new(repo, &Quiet)?;
    record(repo, scanner, (dataset, path, owner), chunks, size)
}

/// A patch's ranges (see `repo::changes::Patch`): where each lies in the
/// new file, its length, and where its bytes are in the patch's file.
type Ranges = Vec<(u64, u64, u64)>;

/// The ranges of the patch in file `patch` for a file of `base` bytes made
/// `size` long: in order, apart, within `size`, and giving every byte
/// beyond `base`.
fn patch_ranges(patch: &Path, base: u64, size: u64) -> Result<Ranges> {
    use std::io::Read;
    let io = |e| Error::io(patch.display(), e);
    let mut from = std::io::BufReader::new(std::fs::File::open(patch).map_err(io)?);
    let (mut ranges, mut end, mut beyond, mut in_file) = (Vec::new(), 0u64, 0u64, 0u64);
    let bad = |why: String| Error::InvalidInput(format!("a patch's ranges must {why}"));
    loop {
        let mut head = [0u8; 16];
        match from.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(io(e)),
        }
        let at = u64::from_be_bytes(head[..8].try_into().expect("8 bytes"));
        let len = u64::from_be_bytes(head[8..].try_into().expect("8 bytes"));
        if at < end || at.checked_add(len).is_none_or(|e| e > size) {
            return Err(bad(format!(
                "be in order, apart, and within its {size} bytes"
            )));
        }
        in_file += 16;
        let skipped =
            std::io::copy(&mut (&mut from).take(len), &mut std::io::sink()).map_err(io)?;
        if skipped != len {
            return Err(bad("hold the bytes they announce".into()));
        }
        ranges.push((at, len, in_file));
        in_file += len;
        end = at + len;
        beyond += end.saturating_sub(at.max(base));
    }
    if beyond != size.saturating_sub(base) {
        return Err(bad(format!(
            "give every byte beyond the {base} of the file they patch"
        )));
    }
    Ok(ranges)
}

/// Stores as an upload for `path` of `dataset` the file of `base` made
/// `size` bytes long with the patch in file `patch` laid on it, reading
/// and cutting again only around what the patch changes: a chunk of
/// `base` whose bytes and the byte after them the patch leaves, and that
/// does not end the file unless the file keeps its size, is kept as it is
/// (a content-defined cut depends on nothing else), so a few MiB changed
/// of a large file cost a few MiB.
pub fn store_patched(
    repo: &Repo,
    (dataset, path, owner): (&str, &RelPath, &str),
    base: &[BlobRef],
    patch: &Path,
    size: u64,
) -> Result<Upload> {
    repo.check_dataset(dataset)?;
    let starts: Vec<u64> = base
        .iter()
        .scan(0, |at, c| {
            let start = *at;
            *at += c.data_size();
            Some(start)
        })
        .collect();
    let base_size: u64 = base.iter().map(BlobRef::data_size).sum();
    let ranges = patch_ranges(patch, base_size, size)?;
    let dirty = |a: u64, b: u64| {
        let i = ranges.partition_point(|&(at, len, _)| at + len <= a);
        ranges.get(i).is_some_and(|&(at, _, _)| at < b)
    };
    let kept = |k: usize| {
        let (a, e) = (starts[k], starts[k] + base[k].data_size());
        e <= size && !dirty(a, e + 1) && (size == base_size || (e < base_size && e < size))
    };
    let file = std::fs::File::open(patch).map_err(|e| Error::io(patch.display(), e))?;
    let mut scanner = Sink::new(repo, &Quiet)?;
    let (mut chunks, mut pos, mut k) = (Vec::new(), 0u64, 0usize);
    while pos < size {
        while k < base.len() && starts[k] == pos && kept(k) {
            chunks.push(base[k]);
            pos += base[k].data_size();
            k += 1;
        }
        if pos >= size {
            break;
        }
        let source = Overlay {
            repo,
            base,
            starts: &starts,
            ranges: &ranges,
            file: &file,
            pos,
            held: None,
        };
        let from = pos;
        let (cut, len) = scanner.chunk_until(source, size - pos, |c| {
            starts.binary_search(&(from + c)).is_ok_and(kept)
        })?;
        if len == 0 {
            return Err(Error::InvalidInput(format!(
                "a patch leaves bytes from {pos} unknown"
            )));
        }
        chunks.extend(cut);
        pos += len;
        k = starts.partition_point(|&s| s < pos);
    }
    record(repo, scanner, (dataset, path, owner), chunks, size)
}

/// A file of `base`'s chunks with a patch's ranges laid on it, read from
/// `pos` on: each chunk of `base` it reads is read from the store once.
struct Overlay<'a> {
    repo: &'a Repo,
    base: &'a [BlobRef],
    starts: &'a [u64],
    ranges: &'a Ranges,
    file: &'a std::fs::File,
    pos: u64,
    /// The chunk of `base` read last: its index and bytes.
    held: Option<(usize, Vec<u8>)>,
}

impl std::io::Read for Overlay<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let pos = self.pos;
        let i = self.ranges.partition_point(|&(at, len, _)| at + len <= pos);
        let n = match self.ranges.get(i) {
            Some(&(at, len, in_file)) if at <= pos => {
                let n = crate::limits::to_usize((buf.len() as u64).min(at + len - pos));
                self.file
                    .read_exact_at(&mut buf[..n], in_file + (pos - at))?;
                n
            }
            next => {
                let k = self.starts.partition_point(|&s| s <= pos).saturating_sub(1);
                let Some(chunk) = self.base.get(k) else {
                    return Ok(0);
                };
                if self.held.as_ref().is_none_or(|(j, _)| *j != k) {
                    let mut data = Vec::with_capacity(crate::limits::to_usize(chunk.data_size()));
                    crate::read::read_file(self.repo, std::slice::from_ref(chunk), &mut data)
                        .map_err(std::io::Error::other)?;
                    self.held = Some((k, data));
                }
                let (_, data) = self.held.as_ref().expect("read above");
                let from = crate::limits::to_usize(pos - self.starts[k]);
                let mut end = data.len();
                if let Some(&(at, _, _)) = next {
                    end = end.min(crate::limits::to_usize(at - self.starts[k]));
                }
                let n = (end - from).min(buf.len());
                buf[..n].copy_from_slice(&data[from..from + n]);
                n
            }
        };
        self.pos += n as u64;
        Ok(n)
    }
}

/// Upload `id` of `dataset` again, for `path`: the same bytes, as old as
/// the upload copied (its chunks are only as safe from gc as it is).
pub fn copy_upload(
    repo: &Repo,
    dataset: &str,
    id: &str,
    path: &RelPath,
    owner: &str,
) -> Result<Upload> {
    let mut up = manifest(repo, id, owner)?;
    check(repo, dataset, &up)?;
    up.id = hex::encode(rand::random::<[u8; 16]>());
    up.path = path.to_string();
    create(repo, &up)?;
    Ok(up)
}

/// The upload of `chunks` for `path` of `dataset` by `owner`: their
/// one-entry tree, through `scanner`, and its manifest.
fn record(
    repo: &Repo,
    scanner: Sink,
    (dataset, path, owner): (&str, &RelPath, &str),
    chunks: Vec<BlobRef>,
    size: u64,
) -> Result<Upload> {
    let node = Node::File {
        mode: 0o644,
        mtime: Default::default(), // a commit gives the file its time
        size,
        chunks,
        atime: None,
        link: None,
        erased: false,
    };
    let tree = Tree::new(vec![Entry {
        name: ENTRY.to_vec(),
        node,
    }]);
    record_tree(repo, scanner, (dataset, path, owner), tree, size)
}

/// An upload of `tree` (`size` bytes in all) through `scanner`, and its
/// manifest.
fn record_tree(
    repo: &Repo,
    mut scanner: Sink,
    (dataset, path, owner): (&str, &RelPath, &str),
    tree: Tree,
    size: u64,
) -> Result<Upload> {
    let now = std::time::SystemTime::now();
    let tree = scanner.put_tree(&tree)?;
    let gc_mark = scanner.gc_mark.clone();
    scanner.finish()?;
    let up = Upload {
        id: hex::encode(rand::random::<[u8; 16]>()),
        dataset: dataset.to_string(),
        path: path.to_string(),
        size,
        tree,
        time: humantime::format_rfc3339_seconds(now).to_string(),
        gc_mark,
        owner: Some(owner.to_string()),
    };
    create(repo, &up)?;
    Ok(up)
}

/// Creates `up`'s manifest (its id is fresh: a taken one is refused).
fn create(repo: &Repo, up: &Upload) -> Result<()> {
    let body = serde_json::to_vec(up).expect("serializable");
    match repo
        .store()
        .put_create(&keys::upload(&up.id), body.into())?
    {
        true => Ok(()),
        false => Err(Error::InvalidInput("upload id taken; upload again".into())),
    }
}

/// The upload `id` of `dataset`, checked: it decodes, its tree holds one
/// file of its size, and it is young enough to commit.
pub fn load_upload(repo: &Repo, dataset: &str, id: &str, owner: &str) -> Result<Loaded> {
    let up = manifest(repo, id, owner)?;
    let chunks = check(repo, dataset, &up)?;
    Ok(Loaded {
        path: up.path,
        size: up.size,
        chunks,
    })
}

/// Upload `id`'s manifest, as stored, if `owner` stored it (another's
/// is as one that does not exist).
fn manifest(repo: &Repo, id: &str, owner: &str) -> Result<Upload> {
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::InvalidInput(format!("bad upload id {id:?}")));
    }
    let bytes = repo
        .store()
        .get(&keys::upload(id))?
        .ok_or_else(|| Error::InvalidInput(format!("no upload {id}")))?;
    let up: Upload = serde_json::from_slice(&bytes)
        .map_err(|e| Error::malformed(keys::upload(id), e.to_string()))?;
    if up.id != id {
        return Err(Error::malformed(
            keys::upload(id),
            "upload does not hold together",
        ));
    }
    if up.owner.as_deref().is_some_and(|o| o != owner) {
        return Err(Error::InvalidInput(format!("no upload {id}")));
    }
    Ok(up)
}

/// `up`'s chunks, if it is of `dataset`, young enough to commit and holds
/// together.
fn check(repo: &Repo, dataset: &str, up: &Upload) -> Result<Vec<BlobRef>> {
    check_age(repo, dataset, up)?;
    let id = &up.id;
    // The tree is read (and its references checked) as a version's is.
    let tree = repo.tree(&up.tree)?;
    let (chunks, size) = entry(&tree, ENTRY).ok_or_else(|| match tree.get(b"0") {
        Some(_) => Error::InvalidInput(format!(
            "upload {id} is a bundle: a commit names its files by their place (\"part\")"
        )),
        None => torn(id),
    })?;
    match size == up.size {
        true => Ok(chunks),
        false => Err(torn(id)),
    }
}

/// Whether `up` is of `dataset` and young enough to commit (no gc may
/// have collected what it reuses).
fn check_age(repo: &Repo, dataset: &str, up: &Upload) -> Result<()> {
    let id = &up.id;
    if up.dataset != dataset {
        return Err(Error::InvalidInput(format!(
            "upload {id} is for dataset {}",
            up.dataset
        )));
    }
    let age = humantime::parse_rfc3339(&up.time)
        .ok()
        .and_then(|t| t.elapsed().ok())
        .ok_or_else(|| Error::malformed(keys::upload(id), "bad time"))?;
    if age + repo.store().deadline() > crate::store::grace::MAX_COMMIT_AGE {
        return Err(Error::InvalidInput(format!(
            "upload {id} is older than {} and may have been collected: upload it again",
            humantime::format_duration(crate::store::grace::MAX_COMMIT_AGE)
        )));
    }
    if up.gc_mark != repo.gc_mark()? {
        return Err(Error::InvalidInput(format!(
            "a gc ran since upload {id} was stored and may have deleted data it reuses: upload it again"
        )));
    }
    Ok(())
}

fn torn(id: &str) -> Error {
    Error::malformed(keys::upload(id), "upload does not hold together")
}

/// File `name` of an upload's tree: its chunks and size, if they hold
/// together (every chunk within a chunk's bounds, summing to the size).
fn entry(tree: &Tree, name: &[u8]) -> Option<(Vec<BlobRef>, u64)> {
    let Some(Node::File { size, chunks, .. }) = tree.get(name) else {
        return None;
    };
    let sum: u64 = chunks.iter().map(BlobRef::data_size).sum();
    let bounded = chunks
        .iter()
        .all(|c| c.size > 0 && u64::from(c.size) <= limits::MAX_CHUNK);
    (sum == *size && bounded).then(|| (chunks.clone(), *size))
}

/// Most files one bundle holds.
pub const MAX_PARTS: u64 = 100_000;

/// Stores a bundle in local file `file` as one upload of `dataset` by
/// `owner`: one request, one manifest and a few packs for many small
/// files. The file is the number of files (8 bytes, big-endian), each
/// one's length (8 bytes each), then their bytes laid end to end. A
/// commit names each file by the upload and its place (`load_part`).
pub fn store_bundle(repo: &Repo, (dataset, owner): (&str, &str), file: &Path) -> Result<Upload> {
    use std::io::Read;
    let io = |e| Error::io(file.display(), e);
    let bad = |why: String| Error::InvalidInput(format!("a bundle: {why}"));
    let mut head = std::io::BufReader::new(std::fs::File::open(file).map_err(io)?);
    let mut word = [0u8; 8];
    head.read_exact(&mut word)
        .map_err(|_| bad("no count".into()))?;
    let n = u64::from_be_bytes(word);
    if n == 0 || n > MAX_PARTS {
        return Err(bad(format!("1 to {MAX_PARTS} files, not {n}")));
    }
    let mut parts = Vec::with_capacity(limits::to_usize(n));
    for _ in 0..n {
        head.read_exact(&mut word)
            .map_err(|_| bad("fewer lengths than files".into()))?;
        parts.push(u64::from_be_bytes(word));
    }
    let start = 8 * (n + 1);
    let len = std::fs::metadata(file).map_err(io)?.len();
    if parts.iter().try_fold(0u64, |a, &p| a.checked_add(p)) != Some(len - start) {
        return Err(bad(format!(
            "its lengths do not add up to its {} bytes",
            len - start
        )));
    }
    store_parts(repo, (dataset, owner), file, start, &parts)
}

/// `store_bundle`'s files: `parts` long each, laid end to end in `file`
/// from `start` on.
fn store_parts(
    repo: &Repo,
    (dataset, owner): (&str, &str),
    file: &Path,
    start: u64,
    parts: &[u64],
) -> Result<Upload> {
    use std::io::{Read, Seek};
    repo.check_dataset(dataset)?;
    let io = |e| Error::io(file.display(), e);
    let mut from = std::fs::File::open(file).map_err(io)?;
    let mut scanner = Sink::new(repo, &Quiet)?;
    let mut entries = Vec::with_capacity(parts.len());
    let (mut at, mut total) = (start, 0u64);
    for (i, &len) in parts.iter().enumerate() {
        from.seek(std::io::SeekFrom::Start(at)).map_err(io)?;
        let (chunks, got) = scanner.chunk_until((&mut from).take(len), len, |_| false)?;
        if got != len {
            return Err(Error::InvalidInput(format!(
                "a bundle's part {i} announces {len} bytes and holds {got}"
            )));
        }
        let node = Node::File {
            mode: 0o644,
            mtime: Default::default(),
            size: len,
            chunks,
            atime: None,
            link: None,
            erased: false,
        };
        entries.push(Entry {
            name: i.to_string().into_bytes(),
            node,
        });
        at += len;
        total += len;
    }
    let whole = (dataset, &RelPath::root(), owner);
    record_tree(repo, scanner, whole, Tree::new(entries), total)
}

/// Part `part` of bundle upload `id` (`store_bundle`), as `load_upload`
/// takes a whole upload.
pub fn load_part(repo: &Repo, dataset: &str, id: &str, part: u32, owner: &str) -> Result<Loaded> {
    let up = manifest(repo, id, owner)?;
    check_age(repo, dataset, &up)?;
    let tree = repo.tree(&up.tree)?;
    let (chunks, size) = entry(&tree, part.to_string().as_bytes())
        .ok_or_else(|| Error::InvalidInput(format!("upload {id} has no part {part}")))?;
    Ok(Loaded {
        path: up.path,
        size,
        chunks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::chunker;
    use crate::snapshot::chunker::tests::pseudo_random as noise;
    use proptest::prelude::*;

    fn repo(dir: &Path) -> Repo {
        let opts = crate::repo::Options {
            store: None,
            cache_dir: Some(dir.join("cache")),
            cache_size: 64 << 20,
            cache_memory: None,
            store_timeout: std::time::Duration::from_secs(10),
            key_file: None,
            passphrase: None,
            sse: None,
            object_lock: None,
            runtime: crate::runtime::Runtime::new().unwrap(),
        };
        let repo = Repo::open_own(&dir.join("store"), Some(&dir.join("key")), &opts).unwrap();
        repo.create_dataset("ds").unwrap();
        repo
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// A patched upload holds the patched bytes, cut as the whole
        /// file would be: the same chunks as an upload of it whole.
        #[test]
        fn a_patch_is_stored_as_the_whole_file_would_be(
            len in 0usize..1_200_000,
            edits in proptest::collection::vec((0.0f64..1.0, 1usize..200_000), 0..4),
            new_len in proptest::option::of(0usize..1_400_000),
            seed in any::<u64>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let repo = repo(dir.path());
            let old = noise(len, seed);
            let old_file = dir.path().join("old");
            std::fs::write(&old_file, &old).unwrap();
            let path = RelPath::parse("f").unwrap();
            let base = store_upload(&repo, "ds", &path, &old_file, "me").unwrap();
            let base = load_upload(&repo, "ds", &base.id, "me").unwrap().chunks;
            // The new file: edits laid on the old, made `size` long; the
            // patch: the ranges edited, and whatever lies beyond the old.
            let size = new_len.unwrap_or(len);
            let mut new = old.clone();
            new.resize(size, 0);
            let mut marks = vec![false; size];
            for (i, &(at, n)) in edits.iter().enumerate() {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let at = (at * size as f64) as usize;
                let end = (at + n).min(size);
                new[at..end].copy_from_slice(&noise(end - at, seed ^ (i as u64 + 7)));
                marks[at..end].iter_mut().for_each(|m| *m = true);
            }
            marks[len.min(size)..].iter_mut().for_each(|m| *m = true);
            let mut patch = Vec::new();
            let mut i = 0;
            while i < size {
                if !marks[i] { i += 1; continue; }
                let start = i;
                while i < size && marks[i] { i += 1; }
                patch.extend((start as u64).to_be_bytes());
                patch.extend(((i - start) as u64).to_be_bytes());
                patch.extend(&new[start..i]);
            }
            let patch_file = dir.path().join("patch");
            std::fs::write(&patch_file, &patch).unwrap();
            let up = store_patched(&repo, ("ds", &path, "me"), &base, &patch_file, size as u64).unwrap();
            let got = load_upload(&repo, "ds", &up.id, "me").unwrap();
            let mut bytes = Vec::new();
            crate::read::read_file(&repo, &got.chunks, &mut bytes).unwrap();
            prop_assert!(bytes == new, "the patched bytes");
            let sizes: Vec<usize> = got.chunks.iter().map(|c| crate::limits::to_usize(c.data_size())).collect();
            let whole: Vec<usize> = chunker::chunks(&new[..], u64::MAX, repo.codec().chunker_seed())
                .map(|c| c.unwrap().len())
                .collect();
            prop_assert_eq!(sizes, whole);
        }
    }

    #[test]
    fn a_patch_that_leaves_bytes_unknown_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let repo = repo(dir.path());
        let old_file = dir.path().join("old");
        std::fs::write(&old_file, noise(100_000, 1)).unwrap();
        let path = RelPath::parse("f").unwrap();
        let base = store_upload(&repo, "ds", &path, &old_file, "me").unwrap();
        let base = load_upload(&repo, "ds", &base.id, "me").unwrap().chunks;
        let patch_file = dir.path().join("patch");
        for patch in [
            // Longer, the tail not given.
            vec![],
            // Out of order.
            [
                &10u64.to_be_bytes()[..],
                &1u64.to_be_bytes(),
                b"a",
                &5u64.to_be_bytes(),
                &1u64.to_be_bytes(),
                b"b",
            ]
            .concat(),
            // Fewer bytes than announced.
            [&10u64.to_be_bytes()[..], &9u64.to_be_bytes(), b"abc"].concat(),
        ] {
            std::fs::write(&patch_file, &patch).unwrap();
            let size = if patch.is_empty() { 100_010 } else { 100_000 };
            let e =
                store_patched(&repo, ("ds", &path, "me"), &base, &patch_file, size).unwrap_err();
            assert!(matches!(e, Error::InvalidInput(_)), "{e}");
        }
    }
}
