//! Version inodes: allocated when the kernel first sees an entry, counted
//! as the kernel counts its references, dropped when it forgets them, so
//! memory follows what the kernel caches. The kernel may keep a million of
//! them (it forgets only under memory pressure), so each holds only its
//! place (its folder's inode and its index in that folder's tree) and its
//! attributes, about a hundred bytes; what else it is (chunks, a symlink's
//! target, its path) is read from its folder's tree when needed.

use super::Versions;
use crate::cache::budget::Part;
use crate::error::{Error, FsError, Result};
use crate::fs::{Attr, FIRST_VERSION_INO, IMMUTABLE_TTL, VERSIONS, is_staging};
use crate::snapshot::tree::TreeSource;
use crate::snapshot::{Mtime, Node};
use crate::store::pack::BlobRef;
use std::collections::HashMap;
use std::mem::size_of;

/// A version inode, materialised: what it stands for.
pub(in crate::fs) struct VEntry {
    pub(in crate::fs) version: u64,
    pub(in crate::fs) node: Node,
    /// The tree of the directory holding it (none for `vN`): its small
    /// files are read together.
    pub(in crate::fs) parent_tree: Option<BlobRef>,
}

/// A version inode as kept: its place, its attributes, the kernel's count
/// (64 bytes).
pub(in crate::fs) struct Held {
    /// Entries kept for its folder's children (their places name its slot,
    /// so the slot is reused only when none is left).
    children: u32,
    /// The kernel forgot it; the slot waits for its children to go.
    forgotten: bool,
    /// Its folder's slot (`ROOTS` for `vN`) and its index in that folder's
    /// tree (the version number for `vN`).
    place: Packed,
    /// Its size; a special entry's device number (its size is 0).
    size: u64,
    mtime_s: i64,
    version: u32,
    lookups: u32,
    mtime_ns: u32,
    mode: u16,
    kind: crate::fs::Kind,
}

/// A place packed in 8 bytes (a million inodes are kept): its folder's
/// slot and its index in that folder's tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Packed(u64);

impl Packed {
    fn new(folder_slot: u32, index: u32) -> Packed {
        Packed(u64::from(folder_slot) << 32 | u64::from(index))
    }

    /// Its folder's slot, and its index there.
    fn parts(self) -> (u32, u32) {
        split(self.0)
    }
}

/// What a version folder's inode holds beyond a file's (kept apart, by
/// slot: folders are few, and a file's slot is 8 bytes smaller for it): its
/// tree, and the slot (plus one; 0 for none) of each of its entries the
/// kernel holds, by index in the tree. Four bytes per entry, where a map by
/// place cost about forty (a million files walked twice: 100 MiB of the
/// daemon's peak).
struct Folder {
    tree: BlobRef,
    slots: Vec<u32>,
}

/// The folder "slot" of `versions/vN`.
const ROOTS: u32 = u32::MAX;
/// The folder "slot" of an entry whose folder the kernel had forgotten.
const UNHELD: u32 = u32::MAX - 1;

/// The two 32-bit halves of `n`, high first.
fn split(n: u64) -> (u32, u32) {
    let [a, b, c, d, e, f, g, h] = n.to_be_bytes();
    (
        u32::from_be_bytes([a, b, c, d]),
        u32::from_be_bytes([e, f, g, h]),
    )
}

/// Version inodes the kernel holds, in slots reused once the kernel forgot
/// their inode, with an index by place so each entry keeps its number while
/// it is held. An inode number is `FIRST_VERSION_INO` + generation << 32 +
/// slot: a reused slot gets a new generation, so a number is never given to
/// two entries (a listing kept from before answers as stale, not as another
/// file).
#[derive(Default)]
pub(in crate::fs) struct VersionInodes {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The slot of each `versions/vN` the kernel holds, by N.
    roots: HashMap<u32, u32>,
    /// Atimes of the few entries whose atime is not their mtime, by slot
    /// (kept here, not in every `Held`).
    atimes: HashMap<u32, Mtime>,
    /// Files with several names in their version: one slot for all, found
    /// by (version, link group); a slot's key, its number of names, and
    /// its node (a name that differs from it, in a hostile or merged tree,
    /// gets an inode of its own: never another name's bytes).
    by_link: HashMap<(u32, u64), u32>,
    links: HashMap<u32, ((u32, u64), u32, Node)>,
    live: usize,
    /// Folders' trees and children, by slot.
    folders: HashMap<u32, Folder>,
    /// Bytes the folders' `Folder`s take (for the memory budget).
    folder_bytes: usize,
}

#[derive(Default)]
struct Slot {
    generation: u32,
    held: Option<Held>,
}

/// Generations stay below this, so inode numbers stay below `STAGING_BIT`.
const GENERATIONS: u32 = 1 << 28;

/// The bytes a folder's `Folder` takes.
fn folder_bytes(f: &Folder) -> usize {
    size_of::<(u32, Folder)>() + 8 + f.slots.capacity() * size_of::<u32>()
}

impl VersionInodes {
    /// About the bytes the table takes (what the memory budget counts).
    fn bytes(&self) -> usize {
        self.slots.capacity() * size_of::<Slot>()
            + self.free.capacity() * size_of::<u32>()
            + self.folder_bytes
            + (self.roots.len() + self.atimes.len() + self.by_link.len()) * 32
            + self.links.len() * (32 + size_of::<Node>())
    }

    /// The slot of `ino`, if `ino` is its current inode number.
    fn slot(&self, ino: u64) -> Option<u32> {
        let n = ino.checked_sub(FIRST_VERSION_INO)?;
        let (generation, slot) = split(n);
        (self.slots.get(slot as usize)?.generation == generation).then_some(slot)
    }

    /// The tree of folder inode `ino`, if the kernel holds it.
    fn tree_of(&self, ino: u64) -> Option<BlobRef> {
        self.get(ino)?;
        Some(self.folders.get(&self.slot(ino)?)?.tree)
    }

    /// The inode number of folder slot `folder` of a place, if it is one
    /// (not `UNHELD`).
    fn folder_ino(&self, folder: u32) -> Option<u64> {
        ((folder as usize) < self.slots.len()).then(|| self.ino(folder))
    }

    fn ino(&self, slot: u32) -> u64 {
        FIRST_VERSION_INO + ((self.slots[slot as usize].generation as u64) << 32) + slot as u64
    }

    /// The files the kernel holds, whose pages it may keep.
    pub(in crate::fs) fn held_files(&self) -> Vec<u64> {
        (0..self.slots.len())
            .filter(|&slot| {
                self.slots[slot]
                    .held
                    .as_ref()
                    .is_some_and(|h| !h.forgotten && matches!(h.kind, crate::fs::Kind::File))
            })
            .map(|slot| self.ino(u32::try_from(slot).expect("slots fit in 32 bits")))
            .collect()
    }

    fn get(&self, ino: u64) -> Option<&Held> {
        let slot = self.slot(ino)?;
        self.slots[slot as usize]
            .held
            .as_ref()
            .filter(|h| !h.forgotten)
    }

    fn get_mut(&mut self, ino: u64) -> Option<&mut Held> {
        let slot = self.slot(ino)?;
        self.slots[slot as usize]
            .held
            .as_mut()
            .filter(|h| !h.forgotten)
    }

    /// The slot held at `place`, if any.
    fn at_place(&self, place: Packed) -> Option<u32> {
        let (folder, index) = place.parts();
        if folder == ROOTS {
            return self.roots.get(&index).copied();
        }
        let f = self.folders.get(&folder)?;
        f.slots.get(index as usize)?.checked_sub(1)
    }

    /// Records `slot` (or none) as held at `place`.
    fn set_place(&mut self, place: Packed, slot: Option<u32>) {
        let (folder, index) = place.parts();
        if folder == ROOTS {
            match slot {
                Some(s) => self.roots.insert(index, s),
                None => self.roots.remove(&index),
            };
            return;
        }
        let Some(f) = self.folders.get_mut(&folder) else {
            return;
        };
        let i = index as usize;
        if f.slots.len() <= i {
            let had = f.slots.capacity();
            f.slots.resize(i + 1, 0);
            self.folder_bytes += (f.slots.capacity() - had) * size_of::<u32>();
        }
        f.slots[i] = slot.map_or(0, |s| s + 1);
    }

    /// Lets go of slot `slot` (forgotten, no children left), then of its
    /// folder's if that was the folder's last child and the folder is
    /// forgotten too.
    fn release(&mut self, mut slot: u32) {
        loop {
            let s = &mut self.slots[slot as usize];
            let Some(h) = s.held.take() else {
                return;
            };
            if let Some(f) = self.folders.remove(&slot) {
                self.folder_bytes -= folder_bytes(&f);
            }
            s.generation = (s.generation + 1) % GENERATIONS;
            self.free.push(slot);
            self.atimes.remove(&slot);
            self.links.remove(&slot);
            let (folder, _) = h.place.parts();
            let Some(f) = self
                .slots
                .get_mut(folder as usize)
                .and_then(|f| f.held.as_mut())
            else {
                return;
            };
            f.children -= 1;
            if !(f.forgotten && f.children == 0) {
                return;
            }
            slot = folder;
        }
    }
}

impl Versions {
    /// The inode of entry `index` of version directory `parent` (of `vN`
    /// when `parent` is `VERSIONS`: index N), allocated if new.
    /// `looked_up`: it is for a lookup reply, counted here under the same
    /// lock as a `forget`, so the two never race.
    pub(in crate::fs) fn version_child(
        &self,
        place: (u64, u64),
        version: u64,
        node: &Node,
        looked_up: bool,
    ) -> u64 {
        let mut t = self.inodes.lock();
        let folder = match place.0 {
            VERSIONS => ROOTS,
            ino => t.slot(ino).unwrap_or(UNHELD),
        };
        // Far fewer entries than 2^32 fit in a folder (limits::MAX_TREE_BYTES).
        let index = u32::try_from(place.1).expect("an entry index of a folder");
        let key = Packed::new(folder, index);
        // An entry of a folder forgotten meanwhile gets an inode of its own,
        // never shared by place (its reads fail: the folder is gone).
        // Every name of a file in a link group is that file's inode.
        let version = u32::try_from(version).expect("versions end at limits::MAX_VERSION");
        let link = node.link().map(|l| ((version, l.group), l.names));
        let tree = match node {
            Node::Dir { tree, .. } => Some(tree),
            _ => None,
        };
        let existing = match folder {
            UNHELD => None,
            _ => t.at_place(key),
        }
        // A folder shown anew at the same place (another tree: through a
        // gateway, under another policy) is another folder.
        .filter(|&slot| {
            t.slots[slot as usize]
                .held
                .as_ref()
                .is_none_or(|_| t.folders.get(&slot).map(|f| &f.tree) == tree)
        })
        .or_else(|| {
            let (k, _) = link?;
            let slot = *t.by_link.get(&k)?;
            t.links.get(&slot)?.2.same(node).then_some(slot)
        });
        let slot = match existing {
            Some(slot) => slot,
            None => {
                let (kind, mode, folder_of) = match node {
                    // An erased file: only root opens it, and its reads fail.
                    Node::File { erased: true, .. } => (crate::fs::Kind::File, 0, None),
                    Node::File { mode, .. } => (crate::fs::Kind::File, *mode, None),
                    Node::Dir { mode, tree, .. } => (
                        crate::fs::Kind::Dir,
                        *mode,
                        Some(Folder {
                            tree: *tree,
                            slots: Vec::new(),
                        }),
                    ),
                    Node::Symlink { .. } => (crate::fs::Kind::Symlink, 0o777, None),
                    Node::Special { kind, mode, .. } => {
                        (crate::fs::Kind::Special(*kind), *mode, None)
                    }
                };
                let mtime = node.mtime();
                let held = Held {
                    children: 0,
                    forgotten: false,
                    place: key,
                    size: match node {
                        Node::Special { rdev, .. } => *rdev,
                        // A byte, so that the kernel asks for it and is
                        // answered ENODATA (a file of size 0 it reads as
                        // empty without asking).
                        n if n.is_erased() => 1,
                        _ => node.size(),
                    },
                    mtime_s: mtime.0,
                    version,
                    lookups: 0,
                    mtime_ns: mtime.1,
                    mode: (mode & 0o7777) as u16,
                    kind,
                };
                let slot = match t.free.pop() {
                    Some(slot) => {
                        t.slots[slot as usize].held = Some(held);
                        slot
                    }
                    None => {
                        t.slots.push(Slot {
                            generation: 0,
                            held: Some(held),
                        });
                        u32::try_from(t.slots.len() - 1).expect("fewer than 2^32 inodes held")
                    }
                };
                if folder != UNHELD {
                    t.set_place(key, Some(slot));
                }
                if node.atime() != mtime {
                    t.atimes.insert(slot, node.atime());
                }
                if let Some((k, names)) = link {
                    // The first name seen stands for the group.
                    t.by_link.entry(k).or_insert(slot);
                    t.links.insert(slot, (k, names, node.clone()));
                }
                t.live += 1;
                if let Some(f) = folder_of {
                    t.folder_bytes += folder_bytes(&f);
                    t.folders.insert(slot, f);
                }
                self.repo.budget().holds(Part::Inodes, t.bytes());
                if let Some(f) = t
                    .slots
                    .get_mut(folder as usize)
                    .and_then(|f| f.held.as_mut())
                {
                    f.children += 1;
                }
                slot
            }
        };
        let ino = t.ino(slot);
        if looked_up && let Some(h) = t.get_mut(ino) {
            h.lookups += 1;
        }
        ino
    }

    /// The kernel was handed `ino` in a READDIRPLUS entry.
    pub fn remember(&self, ino: u64) {
        if let Some(h) = self.inodes.lock().get_mut(ino) {
            h.lookups += 1;
        }
    }

    /// The kernel dropped `n` of its references to `ino`: at none, the
    /// inode is let go.
    pub fn forget(&self, ino: u64, n: u64) {
        let parent = {
            let mut t = self.inodes.lock();
            let Some(h) = t.get_mut(ino) else {
                return;
            };
            h.lookups = h
                .lookups
                .saturating_sub(u32::try_from(n).unwrap_or(u32::MAX));
            if h.lookups > 0 {
                return;
            }
            h.forgotten = true;
            let (place, children) = (h.place, h.children);
            let slot = t.slot(ino).expect("held");
            // Unless a folder shown anew took the place meanwhile.
            if t.at_place(place) == Some(slot) {
                t.set_place(place, None);
            }
            if let Some(k) = t.links.get(&slot).map(|l| l.0)
                && t.by_link.get(&k) == Some(&slot)
            {
                t.by_link.remove(&k);
            }
            t.live -= 1;
            let parent = match place.parts().0 {
                ROOTS => Some(VERSIONS),
                folder => t.folder_ino(folder),
            };
            if children == 0 {
                t.release(slot);
            }
            self.repo.budget().holds(Part::Inodes, t.bytes());
            parent
        };
        // Its folder's kept listing names it: the next one is built anew.
        if let Some(parent) = parent {
            self.listings.lock().remove(&parent);
        }
    }

    /// Whether a version inode is still allocated (a kept listing may name
    /// one the kernel has since forgotten: the caller looks its name up again).
    pub fn is_live(&self, ino: u64) -> bool {
        ino < FIRST_VERSION_INO || is_staging(ino) || self.inodes.lock().get(ino).is_some()
    }

    /// Version inodes in memory (for `.detafs/health`).
    pub fn version_inodes(&self) -> usize {
        self.inodes.lock().live
    }

    /// A version inode's attributes, from memory alone.
    pub(in crate::fs) fn version_attr(&self, ino: u64) -> Result<Attr> {
        let t = self.inodes.lock();
        let h = t.get(ino).ok_or_else(|| gone(ino))?;
        let special = matches!(h.kind, crate::fs::Kind::Special(_));
        let mtime = Mtime(h.mtime_s, h.mtime_ns);
        let slot = t.slot(ino);
        let atime = slot.and_then(|s| t.atimes.get(&s));
        let names = slot.and_then(|s| t.links.get(&s)).map_or(1, |l| l.1);
        Ok(Attr {
            ino,
            kind: h.kind,
            size: if special { 0 } else { h.size },
            perm: h.mode,
            // A version keeps no count of a folder's subfolders: 1, as
            // btrfs answers, tells find and fts not to rely on it.
            nlink: if h.kind == crate::fs::Kind::Dir {
                1
            } else {
                names
            },
            uid: self.owner.0,
            gid: self.owner.1,
            mtime,
            atime: atime.copied().unwrap_or(mtime),
            ctime: mtime,
            rdev: if special { h.size } else { 0 },
            ttl: IMMUTABLE_TTL,
        })
    }

    /// The version an inode belongs to.
    pub(in crate::fs) fn version_entry_version(&self, ino: u64) -> Result<u64> {
        let t = self.inodes.lock();
        Ok(t.get(ino).ok_or_else(|| gone(ino))?.version as u64)
    }

    /// A version folder's tree.
    pub(in crate::fs) fn version_dir_tree(&self, ino: u64) -> Result<BlobRef> {
        let t = self.inodes.lock();
        t.get(ino).ok_or_else(|| gone(ino))?;
        t.tree_of(ino)
            .ok_or_else(|| Error::fs(FsError::NotDir, format!("inode {ino}")))
    }

    /// Where `ino`'s entry is read from.
    fn version_place(&self, ino: u64) -> Result<Place> {
        let t = self.inodes.lock();
        let h = t.get(ino).ok_or_else(|| gone(ino))?;
        let (folder, index) = h.place.parts();
        if folder == ROOTS {
            let tree = t.tree_of(ino).ok_or_else(|| gone(ino))?;
            return Ok(Place::Root {
                version: h.version as u64,
                tree,
            });
        }
        // The kernel holds a folder while it holds anything in it (an
        // entry made after its folder was forgotten has none: gone).
        let folder = t.folder_ino(folder).ok_or_else(|| gone(ino))?;
        Ok(Place::In {
            version: h.version as u64,
            folder,
            folder_tree: t.tree_of(folder).ok_or_else(|| gone(folder))?,
            index: index as usize,
        })
    }

    /// What a version inode stands for, its node read from its folder's tree.
    pub(in crate::fs) fn version_entry(&self, ino: u64) -> Result<VEntry> {
        match self.version_place(ino)? {
            Place::Root { version, tree } => Ok(VEntry {
                version,
                node: Node::Dir {
                    mode: 0o555,
                    mtime: self.commit_time(version),
                    tree,
                    atime: None,
                    links: false,
                },
                parent_tree: None,
            }),
            Place::In {
                version,
                folder_tree,
                index,
                ..
            } => {
                let tree = self.version_tree(version, ino, &folder_tree)?;
                let node = tree.entries.get(index).ok_or_else(|| gone(ino))?;
                Ok(VEntry {
                    version,
                    node: node.node.clone(),
                    parent_tree: Some(folder_tree),
                })
            }
        }
    }

    /// `versions/`-relative path of a version inode, for messages.
    pub(in crate::fs) fn version_path(&self, ino: u64) -> String {
        self.version_path_or_wait(ino)
            .unwrap_or_else(|_| "?".into())
    }

    /// `version_path`, unless a tree it needs must be waited for where
    /// nothing may wait (`crate::nowait`): a policy decides by this path.
    pub(in crate::fs) fn version_path_or_wait(&self, mut ino: u64) -> Result<String> {
        let mut names = Vec::new();
        loop {
            match self.version_place(ino) {
                Ok(Place::Root { version, .. }) => {
                    names.push(format!("v{version}"));
                    break;
                }
                Ok(Place::In {
                    folder,
                    folder_tree,
                    index,
                    ..
                }) => {
                    let tree = match self.repo.tree(&folder_tree) {
                        Err(Error::WouldBlock) => return Err(Error::WouldBlock),
                        other => other.ok(),
                    };
                    let name = tree
                        .and_then(|t| t.entries.get(index).map(|e| crate::fs::name_str(&e.name)));
                    names.push(name.unwrap_or_else(|| "?".into()));
                    ino = folder;
                }
                Err(_) => {
                    names.push("?".into());
                    break;
                }
            }
        }
        names.reverse();
        Ok(names.join("/"))
    }
}

enum Place {
    /// `versions/vN`.
    Root { version: u64, tree: BlobRef },
    /// Entry `index` of the tree of `folder`.
    In {
        version: u64,
        folder: u64,
        folder_tree: BlobRef,
        index: usize,
    },
}

fn gone(ino: u64) -> Error {
    Error::fs(FsError::NotFound, format!("inode {ino}"))
}
