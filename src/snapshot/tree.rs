//! Directory trees: one object per directory, so an unchanged subtree is shared
//! between versions. Encoded as JSON (docs/format.md); a tree's id is the
//! SHA-256 of that JSON.

use crate::error::{Error, Result};
use crate::id::{BlobId, PackId};
use crate::limits;
use crate::store::pack::{self, BlobRef};
use serde::{Deserialize, Serialize};

/// Loads trees by reference (through the caches).
pub trait TreeSource {
    fn tree(&self, r: &BlobRef) -> crate::error::Result<std::sync::Arc<Tree>>;
}

/// Stores new trees.
pub trait TreeSink {
    fn put_tree(&mut self, tree: &Tree) -> crate::error::Result<BlobRef>;
}

/// Modification time: seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Mtime(pub i64, pub u32);

impl Mtime {
    /// A time as `stat` gives it: seconds and nanoseconds (0 to 999999999
    /// from any kernel; anything else reads as 0).
    pub fn of_stat(secs: i64, nsec: i64) -> Mtime {
        Mtime(secs, u32::try_from(nsec).unwrap_or(0))
    }

    /// An RFC 3339 time of a record or tag (the epoch if it is not one:
    /// both are checked when decoded).
    pub fn of_rfc3339(time: &str) -> Mtime {
        let t = humantime::parse_rfc3339(time).unwrap_or(std::time::UNIX_EPOCH);
        let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Mtime(d.as_secs() as i64, d.subsec_nanos())
    }

    /// The time now.
    pub fn now() -> Mtime {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Mtime(d.as_secs() as i64, d.subsec_nanos())
    }

    /// Whether detafs stores this time (`limits::MIN_TIME` to `MAX_TIME`).
    pub fn storable(self) -> bool {
        (limits::MIN_TIME..=limits::MAX_TIME).contains(&self.0) && self.1 < 1_000_000_000
    }
}

/// What an entry is, whatever holds it (a version's tree, a staging
/// row, the mount): the one file-kind type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device node: no data.
    Special(Special),
}

/// What a special entry is: kept with its mode and device number, as tar
/// keeps them, never opened for data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Special {
    Fifo,
    Socket,
    Char,
    Block,
}

impl Special {
    /// The kind of a `st_mode`'s file type bits, if they name one.
    pub fn of_mode(mode: u32) -> Option<Special> {
        match mode & libc::S_IFMT {
            libc::S_IFIFO => Some(Special::Fifo),
            libc::S_IFSOCK => Some(Special::Socket),
            libc::S_IFCHR => Some(Special::Char),
            libc::S_IFBLK => Some(Special::Block),
            _ => None,
        }
    }

    /// Its file type bits (`S_IFIFO`, ...).
    pub fn file_type(self) -> u32 {
        match self {
            Special::Fifo => libc::S_IFIFO,
            Special::Socket => libc::S_IFSOCK,
            Special::Char => libc::S_IFCHR,
            Special::Block => libc::S_IFBLK,
        }
    }

    /// Only devices have a device number.
    pub fn has_rdev(self) -> bool {
        matches!(self, Special::Char | Special::Block)
    }
}

/// Every node's `atime` is its access time where it is not the mtime
/// (`Node::atime_apart`); format 2 only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    File {
        mode: u32,
        mtime: Mtime,
        size: u64,
        chunks: Vec<BlobRef>,
        atime: Option<Mtime>,
        link: Option<Link>,
        /// Its bytes were erased (`detafs erase`): no chunks, size 0, and
        /// every reader answers with `Error::Erased`.
        erased: bool,
    },
    Dir {
        mode: u32,
        mtime: Mtime,
        tree: BlobRef,
        atime: Option<Mtime>,
        /// Some entry below is one of several names of a file (format 2).
        links: bool,
    },
    Symlink {
        mtime: Mtime,
        target: Vec<u8>,
        atime: Option<Mtime>,
        link: Option<Link>,
    },
    /// A FIFO, socket or device node (format 2 only).
    Special {
        kind: Special,
        mode: u32,
        mtime: Mtime,
        rdev: u64,
        atime: Option<Mtime>,
        link: Option<Link>,
    },
}

/// One of several names of a file in a version (a hard link; format 2):
/// every entry of its `group` in the version is that file, and there are
/// `names` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub group: u64,
    pub names: u32,
}

impl Node {
    /// What it is.
    pub fn kind(&self) -> Kind {
        match self {
            Node::File { .. } => Kind::File,
            Node::Dir { .. } => Kind::Dir,
            Node::Symlink { .. } => Kind::Symlink,
            Node::Special { kind, .. } => Kind::Special(*kind),
        }
    }

    /// A FIFO, socket or device as `lstat` described it, if it is one.
    pub fn special_of(
        meta: &std::fs::Metadata,
        mtime: Mtime,
        atime: Option<Mtime>,
    ) -> Option<Node> {
        use std::os::unix::fs::MetadataExt;
        let kind = Special::of_mode(meta.mode())?;
        Some(Node::Special {
            kind,
            mode: meta.mode() & 0o7777,
            mtime,
            rdev: if kind.has_rdev() { meta.rdev() } else { 0 },
            atime: Node::atime_apart(atime, mtime),
            link: None,
        })
    }

    /// How a node holds access time `atime`: only where it is not `mtime`,
    /// so that one state has one encoding (and one tree id).
    pub fn atime_apart(atime: Option<Mtime>, mtime: Mtime) -> Option<Mtime> {
        atime.filter(|a| *a != mtime)
    }

    /// The node without its place in a link group.
    pub fn without_link(&self) -> Node {
        let mut n = self.clone();
        match &mut n {
            Node::File { link, .. } | Node::Symlink { link, .. } | Node::Special { link, .. } => {
                *link = None
            }
            Node::Dir { links, .. } => *links = false,
        }
        n
    }

    /// The node as one of several names of a file (a folder: as holding
    /// such names below it).
    pub fn with_link(mut self, new: Option<Link>) -> Node {
        match &mut self {
            Node::File { link, .. } | Node::Symlink { link, .. } | Node::Special { link, .. } => {
                *link = new
            }
            Node::Dir { links, .. } => *links = new.is_some(),
        }
        self
    }

    /// Its place in a link group, if it has more names in its version.
    pub fn link(&self) -> Option<Link> {
        match self {
            Node::File { link, .. } | Node::Symlink { link, .. } | Node::Special { link, .. } => {
                *link
            }
            Node::Dir { .. } => None,
        }
    }

    /// The access time (the mtime unless one was kept apart).
    pub fn atime(&self) -> Mtime {
        match self {
            Node::File { atime, .. }
            | Node::Dir { atime, .. }
            | Node::Symlink { atime, .. }
            | Node::Special { atime, .. } => atime.unwrap_or(self.mtime()),
        }
    }

    /// Equal as content and metadata, wherever the blobs happen to be
    /// stored. Link groups do not count: names come and go as entries.
    pub fn same(&self, other: &Node) -> bool {
        match (self, other) {
            (
                Node::File {
                    mode,
                    mtime,
                    size,
                    chunks,
                    atime,
                    ..
                },
                Node::File {
                    mode: m2,
                    mtime: t2,
                    size: s2,
                    chunks: c2,
                    atime: a2,
                    ..
                },
            ) => {
                mode == m2
                    && mtime == t2
                    && atime == a2
                    && size == s2
                    && chunks.len() == c2.len()
                    && chunks.iter().zip(c2).all(|(a, b)| a.id == b.id)
            }
            (
                Node::Dir {
                    mode,
                    mtime,
                    tree,
                    atime,
                    ..
                },
                Node::Dir {
                    mode: m2,
                    mtime: t2,
                    tree: tr2,
                    atime: a2,
                    ..
                },
            ) => mode == m2 && mtime == t2 && atime == a2 && tree.id == tr2.id,
            (a, b) => a.without_link() == b.without_link(),
        }
    }

    /// How this node compares with `other` at the same path: the same,
    /// different only in its times (a file regenerated with the same
    /// bytes), or different.
    pub fn likeness(&self, other: &Node) -> Likeness {
        if self.same(other) {
            Likeness::Same
        } else if self.without_times().same(&other.without_times()) {
            Likeness::TimeOnly
        } else {
            Likeness::Different
        }
    }

    fn without_times(&self) -> Node {
        let mut n = self.clone();
        match &mut n {
            Node::File { mtime, atime, .. }
            | Node::Dir { mtime, atime, .. }
            | Node::Symlink { mtime, atime, .. }
            | Node::Special { mtime, atime, .. } => {
                *mtime = Mtime(0, 0);
                *atime = None;
            }
        }
        n
    }

    /// Equal file content (chunk ids), ignoring metadata.
    pub fn same_data(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::File { chunks: a, .. }, Node::File { chunks: b, .. }) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.id == y.id)
            }
            (Node::Dir { tree: a, .. }, Node::Dir { tree: b, .. }) => a.id == b.id,
            (a, b) => a.without_link() == b.without_link(),
        }
    }

    pub fn is_dir(&self) -> bool {
        matches!(self, Node::Dir { .. })
    }

    pub fn is_erased(&self) -> bool {
        matches!(self, Node::File { erased: true, .. })
    }

    /// The one rule every reader of a file's bytes goes through (mount,
    /// CLI, gateway, S3, Python): an erased file (`detafs erase`) is an
    /// error of its own, never an empty file. `at` names it (`v3`, path).
    pub fn readable(self, at: impl FnOnce() -> (String, String)) -> crate::error::Result<Node> {
        if self.is_erased() {
            let (version, path) = at();
            return Err(crate::error::Error::Erased { version, path });
        }
        Ok(self)
    }

    pub fn size(&self) -> u64 {
        match self {
            Node::File { size, .. } => *size,
            Node::Symlink { target, .. } => target.len() as u64,
            Node::Dir { .. } | Node::Special { .. } => 0,
        }
    }

    pub fn mtime(&self) -> Mtime {
        match self {
            Node::File { mtime, .. }
            | Node::Dir { mtime, .. }
            | Node::Symlink { mtime, .. }
            | Node::Special { mtime, .. } => *mtime,
        }
    }
}

/// `Node::likeness`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Likeness {
    Same,
    TimeOnly,
    Different,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// File names are bytes: non-UTF-8 names round-trip.
    pub name: Vec<u8>,
    pub node: Node,
}

/// An HTTP ETag for a file's content: its chunks' ids, hashed (the
/// gateway sends it; a host reading through the gateway checks it).
pub fn etag(chunks: &[BlobRef]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for c in chunks {
        h.update(c.id.as_bytes());
    }
    format!("\"{}\"", &hex::encode(h.finalize())[..32])
}

/// The files of one chunk among `entries`, in their order, each with its
/// chunk: a folder's small files laid end to end, as the gateway serves
/// ranges of them and a host reading through it reads them.
pub fn small_files(entries: &[Entry]) -> Vec<(&Entry, BlobRef)> {
    entries
        .iter()
        .filter_map(|e| match &e.node {
            Node::File { chunks, .. } if chunks.len() == 1 => Some((e, chunks[0])),
            _ => None,
        })
        .collect()
}

/// One directory's entries, sorted by name bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    pub entries: Vec<Entry>,
}

impl Tree {
    /// Its entries by name.
    pub fn by_name(&self) -> std::collections::BTreeMap<Vec<u8>, Node> {
        self.entries
            .iter()
            .map(|e| (e.name.clone(), e.node.clone()))
            .collect()
    }

    pub fn new(mut entries: Vec<Entry>) -> Tree {
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Tree { entries }
    }

    /// About the bytes it takes in memory: its entries, their names, chunk
    /// lists and targets (what the memory budget counts of it).
    pub fn bytes(&self) -> usize {
        use std::mem::size_of;
        let heap = |e: &Entry| match &e.node {
            Node::File { chunks, .. } => chunks.len() * size_of::<BlobRef>(),
            Node::Symlink { target, .. } => target.len(),
            _ => 0,
        };
        size_of::<Tree>()
            + self
                .entries
                .iter()
                .map(|e| size_of::<Entry>() + e.name.len() + heap(e))
                .sum::<usize>()
    }

    /// Whether an entry in it or below is one of several names of a file.
    pub fn has_links(&self) -> bool {
        self.entries
            .iter()
            .any(|e| e.node.link().is_some() || matches!(e.node, Node::Dir { links: true, .. }))
    }

    pub fn get(&self, name: &[u8]) -> Option<&Node> {
        self.entries
            .binary_search_by(|e| e.name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.entries[i].node)
    }

    /// Canonical JSON; its SHA-256 is the tree's id.
    pub fn encode(&self) -> Vec<u8> {
        let mut packs: Vec<PackId> = Vec::new();
        let mut pack_index = |p: PackId| match packs.iter().position(|&x| x == p) {
            Some(i) => i,
            None => {
                packs.push(p);
                packs.len() - 1
            }
        };
        let mut wire_ref = |r: &BlobRef| WireRef::new(r, pack_index(r.pack));
        let entries = self
            .entries
            .iter()
            .map(|e| {
                let name = Bytes::from(e.name.clone());
                match &e.node {
                    Node::File {
                        mode,
                        mtime,
                        size,
                        chunks,
                        atime,
                        link,
                        erased,
                    } => WireEntry::File {
                        name,
                        mode: *mode,
                        mtime: *mtime,
                        size: *size,
                        chunks: chunks.iter().map(&mut wire_ref).collect(),
                        atime: *atime,
                        link: link.map(WireLink::from),
                        erased: *erased,
                    },
                    Node::Dir {
                        mode,
                        mtime,
                        tree,
                        atime,
                        links,
                    } => WireEntry::Dir {
                        name,
                        mode: *mode,
                        mtime: *mtime,
                        tree: wire_ref(tree),
                        atime: *atime,
                        links: *links,
                    },
                    Node::Symlink {
                        mtime,
                        target,
                        atime,
                        link,
                    } => WireEntry::Symlink {
                        name,
                        mtime: *mtime,
                        target: Bytes::from(target.clone()),
                        atime: *atime,
                        link: link.map(WireLink::from),
                    },
                    Node::Special {
                        kind,
                        mode,
                        mtime,
                        rdev,
                        atime,
                        link,
                    } => WireEntry::Special {
                        name,
                        kind: *kind,
                        mode: *mode,
                        mtime: *mtime,
                        rdev: *rdev,
                        atime: *atime,
                        link: link.map(WireLink::from),
                    },
                }
            })
            .collect();
        serde_json::to_vec(&WireTree { packs, entries }).expect("serializable")
    }

    /// Parses and validates a tree: everything a reader relies on (names,
    /// modes, times, sizes, references) is checked here, once.
    pub fn decode(bytes: &[u8]) -> Result<Tree> {
        let bad = |detail: String| Error::malformed("tree", detail);
        let wire: WireTree =
            serde_json::from_slice(bytes).map_err(|e| Error::malformed("tree", e))?;
        let pack = |i: usize| {
            wire.packs
                .get(i)
                .copied()
                .ok_or_else(|| Error::malformed("tree", format!("pack index {i} out of range")))
        };
        let blob = |w: &WireRef, max_len: u64| -> Result<BlobRef> {
            let (id, pack_index, offset, len, size) = w.parts();
            let r = BlobRef {
                id,
                pack: pack(pack_index)?,
                offset,
                len,
                size,
            };
            // At least the encoding byte and one byte of payload, after the
            // pack's magic, within the bound for its kind.
            if r.offset < pack::MAGIC.len() as u64
                || r.offset.checked_add(r.len as u64).is_none()
                || !(2..=max_len).contains(&(r.len as u64))
            {
                return Err(bad(format!(
                    "reference to {} at {}+{} is out of bounds",
                    r.id.short(),
                    r.offset,
                    r.len
                )));
            }
            Ok(r)
        };
        let mut entries = Vec::with_capacity(wire.entries.len());
        for w in &wire.entries {
            let (name, node) = match w {
                WireEntry::File {
                    name,
                    mode,
                    mtime,
                    size,
                    chunks,
                    atime,
                    link,
                    erased,
                } => {
                    if *erased && (!chunks.is_empty() || *size != 0) {
                        return Err(bad(format!("{:?}: erased, but with content", name.lossy())));
                    }
                    let chunks = chunks
                        .iter()
                        .map(|c| blob(c, limits::MAX_CHUNK + limits::BLOB_OVERHEAD))
                        .collect::<Result<Vec<_>>>()?;
                    if let Some(c) = chunks
                        .iter()
                        .find(|c| c.size == 0 || u64::from(c.size) > limits::MAX_CHUNK)
                    {
                        return Err(bad(format!(
                            "{:?}: chunk {} of {} bytes",
                            name.lossy(),
                            c.id.short(),
                            c.size
                        )));
                    }
                    // Chunk sizes say where each byte of the file is.
                    let sum: u64 = chunks.iter().map(BlobRef::data_size).sum();
                    if sum != *size {
                        return Err(bad(format!(
                            "{:?}: size {size} but its chunks hold {sum} bytes",
                            name.lossy()
                        )));
                    }
                    (
                        name,
                        Node::File {
                            mode: *mode,
                            mtime: *mtime,
                            size: *size,
                            chunks,
                            atime: *atime,
                            link: link.map(Link::from),
                            erased: *erased,
                        },
                    )
                }
                WireEntry::Dir {
                    name,
                    mode,
                    mtime,
                    tree,
                    atime,
                    links,
                } => (
                    name,
                    Node::Dir {
                        mode: *mode,
                        mtime: *mtime,
                        tree: blob(tree, limits::MAX_TREE_LEN)?,
                        atime: *atime,
                        links: *links,
                    },
                ),
                WireEntry::Symlink {
                    name,
                    mtime,
                    target,
                    atime,
                    link,
                } => (
                    name,
                    Node::Symlink {
                        mtime: *mtime,
                        target: target.clone().into_vec(),
                        atime: *atime,
                        link: link.map(Link::from),
                    },
                ),
                WireEntry::Special {
                    name,
                    kind,
                    mode,
                    mtime,
                    rdev,
                    atime,
                    link,
                } => (
                    name,
                    Node::Special {
                        kind: *kind,
                        mode: *mode,
                        mtime: *mtime,
                        rdev: *rdev,
                        atime: *atime,
                        link: link.map(Link::from),
                    },
                ),
            };
            let name = name.clone().into_vec();
            check_name(&name).map_err(bad)?;
            check_node(&node)
                .map_err(|e| bad(format!("{:?}: {e}", String::from_utf8_lossy(&name))))?;
            entries.push(Entry { name, node });
        }
        if !entries.windows(2).all(|w| w[0].name < w[1].name) {
            return Err(Error::malformed("tree", "entries not sorted or not unique"));
        }
        Ok(Tree { entries })
    }
}

/// A name as a directory entry may carry it (also what staging accepts).
pub fn check_name(name: &[u8]) -> std::result::Result<(), String> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(format!(
            "bad entry name {:?}",
            String::from_utf8_lossy(name)
        ));
    }
    if name.len() > limits::MAX_NAME {
        return Err(format!("entry name of {} bytes is too long", name.len()));
    }
    Ok(())
}

/// Modes, times and targets in the ranges detafs writes.
pub fn check_node(node: &Node) -> std::result::Result<(), String> {
    let mode = match node {
        Node::File { mode, .. } | Node::Dir { mode, .. } | Node::Special { mode, .. } => *mode,
        Node::Symlink { .. } => 0,
    };
    if let Node::Special { kind, rdev, .. } = node
        && !kind.has_rdev()
        && *rdev != 0
    {
        return Err(format!("a {kind:?} with device number {rdev}"));
    }
    if mode > 0o7777 {
        return Err(format!("mode {mode:#o} has bits beyond 0o7777"));
    }
    if let Some(l) = node.link()
        && l.names < 2
    {
        return Err(format!("a link group of {} names", l.names));
    }
    for (what, t) in [("mtime", node.mtime()), ("atime", node.atime())] {
        if !t.storable() {
            return Err(format!("{what} {}.{} is out of range", t.0, t.1));
        }
    }
    if let Node::Symlink { target, .. } = node
        && (target.is_empty() || target.len() > limits::MAX_TARGET || target.contains(&0))
    {
        return Err(format!("bad symlink target of {} bytes", target.len()));
    }
    Ok(())
}

#[derive(Serialize, Deserialize)]
struct WireTree {
    packs: Vec<PackId>,
    entries: Vec<WireEntry>,
}

/// `[blob id, index into packs, offset, length]`, and the data size after
/// them where it is not `length - 1` (a raw blob's, as every format 1
/// chunk is: format 1 trees are unchanged).
#[derive(Serialize)]
#[serde(untagged)]
enum WireRef {
    Raw(BlobId, usize, u64, u32),
    Sized(BlobId, usize, u64, u32, u32),
}

/// Read as the array it is, four or five long (serde's untagged enums
/// buffer every value first: a tree's references took most of its decoding).
impl<'de> Deserialize<'de> for WireRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Seq;
        impl<'de> serde::de::Visitor<'de> for Seq {
            type Value = WireRef;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("[id, pack, offset, length] or [id, pack, offset, length, size]")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> std::result::Result<WireRef, A::Error> {
                use serde::de::Error;
                let short = |n| A::Error::invalid_length(n, &self);
                let id = a.next_element()?.ok_or_else(|| short(0))?;
                let pack = a.next_element()?.ok_or_else(|| short(1))?;
                let offset = a.next_element()?.ok_or_else(|| short(2))?;
                let len = a.next_element()?.ok_or_else(|| short(3))?;
                let r = match a.next_element()? {
                    None => WireRef::Raw(id, pack, offset, len),
                    Some(size) => WireRef::Sized(id, pack, offset, len, size),
                };
                match a.next_element::<serde::de::IgnoredAny>()? {
                    None => Ok(r),
                    Some(_) => Err(A::Error::invalid_length(6, &self)),
                }
            }
        }
        d.deserialize_seq(Seq)
    }
}

impl WireRef {
    fn new(r: &BlobRef, pack: usize) -> WireRef {
        if r.size == BlobRef::raw_size(r.len) {
            WireRef::Raw(r.id, pack, r.offset, r.len)
        } else {
            WireRef::Sized(r.id, pack, r.offset, r.len, r.size)
        }
    }

    /// (id, pack index, offset, length, size).
    fn parts(&self) -> (BlobId, usize, u64, u32, u32) {
        match *self {
            WireRef::Raw(id, p, o, l) => (id, p, o, l, BlobRef::raw_size(l)),
            WireRef::Sized(id, p, o, l, s) => (id, p, o, l, s),
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum WireEntry {
    File {
        name: Bytes,
        mode: u32,
        mtime: Mtime,
        size: u64,
        chunks: Vec<WireRef>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        atime: Option<Mtime>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        link: Option<WireLink>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        erased: bool,
    },
    Dir {
        name: Bytes,
        mode: u32,
        mtime: Mtime,
        tree: WireRef,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        atime: Option<Mtime>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        links: bool,
    },
    Symlink {
        name: Bytes,
        mtime: Mtime,
        target: Bytes,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        atime: Option<Mtime>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        link: Option<WireLink>,
    },
    Special {
        name: Bytes,
        kind: Special,
        mode: u32,
        mtime: Mtime,
        rdev: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        atime: Option<Mtime>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        link: Option<WireLink>,
    },
}

/// Every field an entry of any kind has, as read: a flat struct is read
/// as it comes, where an internally tagged enum is buffered whole first
/// (most of a tree's decoding time went there).
#[derive(Deserialize)]
struct FlatEntry {
    #[serde(rename = "type")]
    ty: EntryType,
    name: Bytes,
    mode: Option<u32>,
    mtime: Mtime,
    size: Option<u64>,
    chunks: Option<Vec<WireRef>>,
    tree: Option<WireRef>,
    target: Option<Bytes>,
    #[serde(rename = "kind")]
    special: Option<Special>,
    rdev: Option<u64>,
    #[serde(default)]
    atime: Option<Mtime>,
    #[serde(default)]
    link: Option<WireLink>,
    #[serde(default)]
    links: bool,
    #[serde(default)]
    erased: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum EntryType {
    File,
    Dir,
    Symlink,
    Special,
}

impl<'de> Deserialize<'de> for WireEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error;
        let f = FlatEntry::deserialize(d)?;
        fn need<T, E: Error>(v: Option<T>, field: &'static str) -> std::result::Result<T, E> {
            v.ok_or_else(|| E::missing_field(field))
        }
        Ok(match f.ty {
            EntryType::File => WireEntry::File {
                name: f.name,
                mode: need(f.mode, "mode")?,
                mtime: f.mtime,
                size: need(f.size, "size")?,
                chunks: need(f.chunks, "chunks")?,
                atime: f.atime,
                link: f.link,
                erased: f.erased,
            },
            EntryType::Dir => WireEntry::Dir {
                name: f.name,
                mode: need(f.mode, "mode")?,
                mtime: f.mtime,
                tree: need(f.tree, "tree")?,
                atime: f.atime,
                links: f.links,
            },
            EntryType::Symlink => WireEntry::Symlink {
                name: f.name,
                mtime: f.mtime,
                target: need(f.target, "target")?,
                atime: f.atime,
                link: f.link,
            },
            EntryType::Special => WireEntry::Special {
                name: f.name,
                kind: need(f.special, "kind")?,
                mode: need(f.mode, "mode")?,
                mtime: f.mtime,
                rdev: need(f.rdev, "rdev")?,
                atime: f.atime,
                link: f.link,
            },
        })
    }
}

/// `[group, names]`.
#[derive(Clone, Copy, Serialize, Deserialize)]
struct WireLink(u64, u32);

impl From<Link> for WireLink {
    fn from(l: Link) -> WireLink {
        WireLink(l.group, l.names)
    }
}

impl From<WireLink> for Link {
    fn from(w: WireLink) -> Link {
        Link {
            group: w.0,
            names: w.1,
        }
    }
}

/// Bytes as a JSON string when they are UTF-8, else as an array of numbers.
#[derive(Clone, Serialize)]
#[serde(untagged)]
enum Bytes {
    Utf8(String),
    Raw(Vec<u8>),
}

/// A string or an array of numbers, read as it comes (not buffered first,
/// as serde's untagged enums are).
impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Either;
        impl<'de> serde::de::Visitor<'de> for Either {
            type Value = Bytes;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an array of bytes")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<Bytes, E> {
                Ok(Bytes::Utf8(s.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> std::result::Result<Bytes, E> {
                Ok(Bytes::Utf8(s))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> std::result::Result<Bytes, A::Error> {
                let mut v = Vec::with_capacity(a.size_hint().unwrap_or(0).min(4096));
                while let Some(b) = a.next_element::<u8>()? {
                    v.push(b);
                }
                Ok(Bytes::Raw(v))
            }
        }
        d.deserialize_any(Either)
    }
}

impl Bytes {
    fn lossy(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Bytes::Utf8(s) => s.into(),
            Bytes::Raw(v) => String::from_utf8_lossy(v),
        }
    }
    fn from(v: Vec<u8>) -> Bytes {
        match String::from_utf8(v) {
            Ok(s) => Bytes::Utf8(s),
            Err(e) => Bytes::Raw(e.into_bytes()),
        }
    }
    fn into_vec(self) -> Vec<u8> {
        match self {
            Bytes::Utf8(s) => s.into_bytes(),
            Bytes::Raw(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn blob(n: u8, pack: u8) -> BlobRef {
        BlobRef {
            id: BlobId::of(&[n]),
            pack: PackId::from_bytes([pack; 32]),
            offset: 8 + n as u64,
            len: 100,
            size: 99,
        }
    }

    fn node_strategy() -> impl Strategy<Value = Node> {
        prop_oneof![
            (
                0u32..0o7777,
                limits::MIN_TIME..=limits::MAX_TIME,
                0u32..1_000_000_000,
                prop::collection::vec((any::<u8>(), 0u8..3), 0..5),
                prop::option::of(limits::MIN_TIME..=limits::MAX_TIME),
            )
                .prop_map(|(mode, s, ns, c, a)| {
                    let chunks: Vec<BlobRef> = c.into_iter().map(|(n, p)| blob(n, p)).collect();
                    Node::File {
                        mode,
                        mtime: Mtime(s, ns),
                        size: chunks.iter().map(BlobRef::data_size).sum(),
                        chunks,
                        atime: Node::atime_apart(a.map(|a| Mtime(a, 1)), Mtime(s, ns)),
                        link: (mode % 3 == 0).then_some(Link {
                            group: u64::from(mode) << 40,
                            names: 2 + mode % 5,
                        }),
                        erased: false,
                    }
                }),
            (0u32..0o777, any::<u8>()).prop_map(|(mode, n)| Node::Dir {
                mode,
                mtime: Mtime(1, 2),
                tree: blob(n, 9),
                atime: Some(Mtime(3, 4)),
                links: n % 2 == 0,
            }),
            prop::collection::vec(1u8..=255, 1..20).prop_map(|target| Node::Symlink {
                mtime: Mtime(-5, 0),
                target,
                atime: None,
                link: None,
            }),
            (0u32..0o7777, any::<u64>(), 0usize..4).prop_map(|(mode, rdev, k)| {
                let kind = [
                    Special::Fifo,
                    Special::Socket,
                    Special::Char,
                    Special::Block,
                ][k];
                Node::Special {
                    kind,
                    mode,
                    mtime: Mtime(7, 8),
                    rdev: if kind.has_rdev() { rdev } else { 0 },
                    atime: None,
                    link: Some(Link {
                        group: rdev,
                        names: 3,
                    }),
                }
            }),
        ]
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(
            items in prop::collection::btree_map(
                prop::collection::vec(any::<u8>().prop_filter("no slash or NUL", |b| *b != b'/' && *b != 0), 1..12)
                    .prop_filter("not dot names", |n| n != b"." && n != b".."),
                node_strategy(), 0..20)
        ) {
            let tree = Tree::new(items.into_iter().map(|(name, node)| Entry { name, node }).collect());
            let bytes = tree.encode();
            let back = Tree::decode(&bytes).unwrap();
            prop_assert_eq!(&back, &tree);
            // Canonical: encoding again gives the same id.
            prop_assert_eq!(BlobId::of(&back.encode()), BlobId::of(&bytes));
        }
    }

    /// A folder's tree as the commit encodes it: `n` entries named by their
    /// number, padded to `name_len` bytes, each `node`.
    fn folder_tree(n: usize, name_len: usize, node: &Node) -> Vec<u8> {
        let entries = (0..n)
            .map(|i| Entry {
                name: format!("{i:0>name_len$}").into_bytes(),
                node: node.clone(),
            })
            .collect();
        Tree::new(entries).encode()
    }

    fn file_of(chunks: Vec<BlobRef>) -> Node {
        Node::File {
            mode: 0o644,
            mtime: Mtime(1_700_000_000, 0),
            size: chunks.iter().map(BlobRef::data_size).sum(),
            chunks,
            atime: None,
            link: None,
            erased: false,
        }
    }

    /// Stores `tree` as a commit does, in each format, and reads it back as
    /// every reader does.
    fn stored_and_read_back(tree: &[u8]) {
        use crate::store::codec::Codec;
        use crate::store::pack::BlobKind;
        let key = crate::store::seal::MasterKey::random();
        let keys = crate::store::seal::Keys::derive(&key, "store");
        for codec in [Codec::Plain, Codec::Sealed(std::sync::Arc::new(keys))] {
            let id = codec.blob_id(tree);
            let encoded = codec.encode_blob(BlobKind::Tree, &id, tree);
            let r = BlobRef {
                id,
                pack: crate::id::PackId::from_bytes([1; 32]),
                offset: 8,
                len: u32::try_from(encoded.len()).unwrap(),
                size: u32::try_from(tree.len()).unwrap(),
            };
            let back = codec.decode_blob(&r, BlobKind::Tree, encoded.into());
            assert_eq!(back.unwrap(), tree, "{} bytes", tree.len());
            Tree::decode(tree).unwrap();
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Whatever a writer stores, every reader accepts: folders of any
        /// size and name length, of empty or one-byte files (what
        /// compresses best), in both formats.
        #[test]
        fn every_tree_the_writer_stores_the_reader_accepts(
            n in prop_oneof![0usize..100, 100usize..30_000, 30_000usize..120_000],
            name_len in 1usize..=255,
            one_byte in any::<bool>(),
        ) {
            let chunks = match one_byte {
                true => vec![BlobRef { len: 2, size: 1, ..blob(1, 1) }],
                false => vec![],
            };
            stored_and_read_back(&folder_tree(n, name_len, &file_of(chunks)));
        }
    }

    #[test]
    fn a_folder_of_a_million_empty_files_is_stored_and_read_back() {
        let tree = folder_tree(1_000_000, 7, &file_of(vec![]));
        assert!(tree.len() as u64 <= limits::MAX_TREE_BYTES);
        stored_and_read_back(&tree);
    }

    /// What a hostile store writer may put in a tree, each refused on decode.
    #[test]
    fn rejects_what_readers_could_trip_on() {
        let chunk = |len: u32| format!(r#"["{}",0,8,{len}]"#, BlobId::of(b"x"));
        let file = |fields: &str| {
            format!(
                r#"{{"packs":["{}"],"entries":[{{"type":"file",{fields}}}]}}"#,
                BlobId::of(b"p")
            )
        };
        let ok = file(&format!(
            r#""name":"a","mode":420,"mtime":[0,0],"size":9,"chunks":[{}]"#,
            chunk(10)
        ));
        assert!(Tree::decode(ok.as_bytes()).is_ok(), "{ok}");
        for (why, bad) in [
            (
                "size disagrees with chunks",
                file(&format!(
                    r#""name":"a","mode":420,"mtime":[0,0],"size":99,"chunks":[{}]"#,
                    chunk(10)
                )),
            ),
            (
                "zero-length chunk",
                file(&format!(
                    r#""name":"a","mode":420,"mtime":[0,0],"size":0,"chunks":[{}]"#,
                    chunk(1)
                )),
            ),
            (
                "oversized chunk",
                file(&format!(
                    r#""name":"a","mode":420,"mtime":[0,0],"size":16777215,"chunks":[{}]"#,
                    chunk(16777216)
                )),
            ),
            (
                "mode beyond 0o7777",
                file(r#""name":"a","mode":4294967295,"mtime":[0,0],"size":0,"chunks":[]"#),
            ),
            (
                "mtime i64::MAX",
                file(
                    r#""name":"a","mode":420,"mtime":[9223372036854775807,0],"size":0,"chunks":[]"#,
                ),
            ),
            (
                "nanoseconds past a second",
                file(r#""name":"a","mode":420,"mtime":[0,1000000000],"size":0,"chunks":[]"#),
            ),
            (
                "NUL in a name",
                file(r#""name":"a\u0000b","mode":420,"mtime":[0,0],"size":0,"chunks":[]"#),
            ),
            (
                "NUL in a raw name",
                file(r#""name":[97,0],"mode":420,"mtime":[0,0],"size":0,"chunks":[]"#),
            ),
            (
                "dot-dot",
                file(r#""name":"..","mode":420,"mtime":[0,0],"size":0,"chunks":[]"#),
            ),
        ] {
            assert!(
                Tree::decode(bad.as_bytes()).is_err(),
                "{why} accepted: {bad}"
            );
        }
    }

    #[test]
    fn rejects_unsorted_and_bad_names() {
        let t = br#"{"packs":[],"entries":[{"type":"symlink","name":"b","mtime":[0,0],"target":"x"},{"type":"symlink","name":"a","mtime":[0,0],"target":"x"}]}"#;
        assert!(Tree::decode(t).is_err());
        let t = br#"{"packs":[],"entries":[{"type":"symlink","name":"a/b","mtime":[0,0],"target":"x"}]}"#;
        assert!(Tree::decode(t).is_err());
        let t = br#"{"packs":[],"entries":[{"type":"file","name":"a","mode":420,"mtime":[0,0],"size":1,"chunks":[["0000000000000000000000000000000000000000000000000000000000000000",3,8,1]]}]}"#;
        assert!(Tree::decode(t).is_err());
    }
}
