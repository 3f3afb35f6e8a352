//! `versions/TAG`: a symlink to `vN` for each tag of the dataset. Tags never
//! move or go, so each keeps the inode it got when first seen.

use crate::error::Result;
use crate::fs::{Attr, DirEntry, FIRST_VERSION_INO, IMMUTABLE_TTL, Ino, not_found, version_name};
use crate::snapshot::Kind;
use crate::snapshot::Mtime;
use std::collections::HashMap;

use crate::fs::ino::FIRST_TAG_INO;

/// Tags a mount shows; more are left out (and logged): their inodes lie
/// below versions' (`ino.rs`).
const MAX_TAGS: usize = crate::limits::to_usize(FIRST_VERSION_INO - FIRST_TAG_INO);

/// Tags seen so far, in the order seen (the index is in the inode: `Ino::Tag`).
#[derive(Default)]
pub(in crate::fs) struct TagTable {
    tags: Vec<(String, u64, Mtime)>,
    by_name: HashMap<String, usize>,
    by_version: HashMap<u64, Vec<String>>,
}

impl TagTable {
    pub(in crate::fs) fn tags_of(&self, version: u64) -> Vec<String> {
        self.by_version.get(&version).cloned().unwrap_or_default()
    }

    pub(in crate::fs) fn version_of(&self, tag: &str) -> Option<u64> {
        self.by_name.get(tag).map(|&i| self.tags[i].1)
    }
}

/// Where a listing of `versions/` resumes after entry `e` (the offset the
/// kernel hands back): a place of its own that entries added later, tags
/// or versions, do not move, so a listing read in several requests while
/// they come neither repeats nor skips an entry. `.` and `..` are 1 and 2,
/// `latest` 3, tags follow in the order seen, versions by number.
pub(in crate::fs) fn versions_offset(e: &DirEntry) -> u64 {
    match e.name.as_slice() {
        b"." => 1,
        b".." => 2,
        name => match Ino::of(e.ino) {
            Ino::Latest => 3,
            Ino::Tag(index) => 4 + index as u64,
            _ => 4 + MAX_TAGS as u64 + version_name(name).unwrap_or(0),
        },
    }
}

impl super::Versions {
    /// Reads tags made elsewhere (one listing of the store; bodies once).
    /// Returns the versions that gained a tag.
    pub(in crate::fs) fn refresh_tags(&self) -> Result<Vec<u64>> {
        let tags = self.repo.tags(&self.dataset)?;
        let mut tagged = Vec::new();
        let mut table = self.tags.write();
        for t in tags {
            if table.by_name.contains_key(&t.tag) {
                continue;
            }
            if table.tags.len() >= MAX_TAGS {
                tracing::warn!(
                    "{} has more than {MAX_TAGS} tags; versions/ shows the first",
                    self.dataset
                );
                break;
            }
            let index = table.tags.len();
            table.by_name.insert(t.tag.clone(), index);
            table
                .by_version
                .entry(t.version)
                .or_default()
                .push(t.tag.clone());
            tagged.push(t.version);
            table
                .tags
                .push((t.tag, t.version, Mtime::of_rfc3339(&t.time)));
        }
        Ok(tagged)
    }

    fn tag_at(&self, ino: u64) -> Option<(String, u64, Mtime)> {
        let Ino::Tag(index) = Ino::of(ino) else {
            return None;
        };
        let tag = self.tags.read().tags.get(index).cloned();
        // A tag of an expired version names nothing.
        tag.filter(|(_, version, _)| self.serves(*version))
    }

    /// Whether `version` is among the versions served (not expired).
    fn serves(&self, version: u64) -> bool {
        self.records
            .read()
            .binary_search_by_key(&version, |r| r.version)
            .is_ok()
    }

    /// The names of the tags of `versions`.
    pub(in crate::fs) fn tag_names_of(&self, versions: &[u64]) -> Vec<Vec<u8>> {
        let table = self.tags.read();
        versions
            .iter()
            .flat_map(|v| table.tags_of(*v))
            .map(String::into_bytes)
            .collect()
    }

    /// The symlink `versions/TAG`, if there is such a tag.
    pub(in crate::fs) fn lookup_tag(&self, name: &[u8]) -> Option<Attr> {
        let table = self.tags.read();
        let index = *table.by_name.get(std::str::from_utf8(name).ok()?)?;
        drop(table);
        self.tag_attr(Ino::tag(index)).ok()
    }

    pub(in crate::fs) fn tag_attr(&self, ino: u64) -> Result<Attr> {
        let (_, version, mtime) = self.tag_at(ino).ok_or_else(|| not_found(b"tag"))?;
        Ok(self.version_link(ino, version, mtime, IMMUTABLE_TTL))
    }

    pub(in crate::fs) fn tag_target(&self, ino: u64) -> Result<Vec<u8>> {
        let (_, version, _) = self.tag_at(ino).ok_or_else(|| not_found(b"tag"))?;
        Ok(format!("v{version}").into_bytes())
    }

    /// `versions/`' entries for tags, in the order seen.
    pub(in crate::fs) fn list_tags(&self) -> Vec<DirEntry> {
        let tags = self.tags.read().tags.clone();
        tags.iter()
            .enumerate()
            .filter(|(_, (_, version, _))| self.serves(*version))
            .map(|(i, (name, _, _))| DirEntry {
                ino: Ino::tag(i),
                kind: Kind::Symlink,
                name: name.clone().into_bytes(),
            })
            .collect()
    }
}
