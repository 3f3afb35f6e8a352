//! Inode numbers: laid out and decoded here alone.
//!
//! ```text
//!   1            the root            2  versions/
//!   3            .detafs/            4  versions/latest
//!   5 ..= 17     .detafs/ files (control.rs)
//!   2^16 .. 2^20 versions/TAG, numbered in the order tags are seen (tags.rs)
//!   2^20 ..      below versions/: versions/vN and what it holds, a slot and
//!                its generation (inodes.rs)
//!   bit 62 set   staging/: a staging row's id
//! ```

pub const ROOT: u64 = 1;
pub const VERSIONS: u64 = 2;
pub(super) const CONTROL: u64 = 3;
pub(super) const LATEST: u64 = 4;
pub(super) const FIRST_CONTROL_FILE: u64 = files::COMMIT;
pub(super) const LAST_CONTROL_FILE: u64 = files::UNDO;

/// `.detafs/`'s files, one number each (control.rs says what each does).
pub(super) mod files {
    pub(in crate::fs) const COMMIT: u64 = 5;
    pub(in crate::fs) const STATUS: u64 = 6;
    pub(in crate::fs) const LOG: u64 = 7;
    pub(in crate::fs) const HEALTH: u64 = 8;
    pub(in crate::fs) const LAST_ERROR: u64 = 9;
    pub(in crate::fs) const LAST_COMMIT: u64 = 10;
    pub(in crate::fs) const RESTORE: u64 = 11;
    pub(in crate::fs) const CHECKOUT: u64 = 12;
    pub(in crate::fs) const PROGRESS: u64 = 13;
    pub(in crate::fs) const BASE: u64 = 14;
    pub(in crate::fs) const CANCEL: u64 = 15;
    pub(in crate::fs) const REFRESH: u64 = 16;
    pub(in crate::fs) const UNDO: u64 = 17;
}
pub(super) const FIRST_TAG_INO: u64 = 1 << 16;
pub(super) const FIRST_VERSION_INO: u64 = 1 << 20;
const STAGING_BIT: u64 = 1 << 62;

/// What an inode number stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ino {
    Root,
    Versions,
    Control,
    Latest,
    /// A file of `.detafs/` (its inode number).
    ControlFile(u64),
    /// `versions/TAG`: the tag's index in the order seen.
    Tag(usize),
    /// `versions/vN` or something in it (its inode number).
    Version(u64),
    /// A staging row (its id).
    Staged(u64),
    /// A number never handed out.
    Unknown,
}

impl Ino {
    pub(super) fn of(ino: u64) -> Ino {
        match ino {
            i if i & STAGING_BIT != 0 => Ino::Staged(i & !STAGING_BIT),
            ROOT => Ino::Root,
            VERSIONS => Ino::Versions,
            CONTROL => Ino::Control,
            LATEST => Ino::Latest,
            FIRST_CONTROL_FILE..=LAST_CONTROL_FILE => Ino::ControlFile(ino),
            FIRST_TAG_INO..FIRST_VERSION_INO => {
                Ino::Tag(crate::limits::to_usize(ino - FIRST_TAG_INO))
            }
            FIRST_VERSION_INO.. => Ino::Version(ino),
            _ => Ino::Unknown,
        }
    }

    /// Staging row `id`'s inode number.
    pub(super) fn staged(id: u64) -> u64 {
        id | STAGING_BIT
    }

    /// The inode number of the tag seen `index`-th.
    pub(super) fn tag(index: usize) -> u64 {
        FIRST_TAG_INO + index as u64
    }
}

/// Whether `ino` is a staging row's.
pub(super) fn is_staging(ino: u64) -> bool {
    matches!(Ino::of(ino), Ino::Staged(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_number_decodes_to_what_it_was_made_for() {
        assert_eq!(Ino::of(ROOT), Ino::Root);
        assert_eq!(Ino::of(LATEST), Ino::Latest);
        assert_eq!(Ino::of(9), Ino::ControlFile(9));
        assert_eq!(Ino::of(Ino::tag(7)), Ino::Tag(7));
        assert_eq!(
            Ino::of(FIRST_VERSION_INO + 5),
            Ino::Version(FIRST_VERSION_INO + 5)
        );
        assert_eq!(Ino::of(Ino::staged(42)), Ino::Staged(42));
        assert_eq!(Ino::of(0), Ino::Unknown);
        assert_eq!(Ino::of(18), Ino::Unknown);
        assert_eq!(Ino::of(FIRST_TAG_INO - 1), Ino::Unknown);
    }
}
