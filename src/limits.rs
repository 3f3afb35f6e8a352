//! Bounds on what detafs accepts from a store (docs/security.md). Objects in
//! a store may have been written by anyone with bucket credentials, so every
//! decoder checks these before it allocates or walks, and a version that
//! breaks one is refused with an error naming it, never half served.

/// `n` as a `usize`: detafs builds for 64-bit targets only (`lib.rs`),
/// where no `u64` is truncated.
#[allow(clippy::cast_possible_truncation)]
pub const fn to_usize(n: u64) -> usize {
    n as usize
}

/// Largest data chunk (the chunker's maximum). Chunks are stored raw, so
/// their encoded length is this plus the encoding byte.
pub const MAX_CHUNK: u64 = 256 << 10;

/// A size as the CLI takes it (`2GiB`, `512MB`, bytes), as environment
/// variable `var` gives it: None if it is not set.
pub fn env_size(var: &str) -> crate::error::Result<Option<u64>> {
    match std::env::var(var) {
        Err(_) => Ok(None),
        Ok(text) => text
            .trim()
            .parse::<bytesize::ByteSize>()
            .map(|b| Some(b.as_u64()))
            .map_err(|e| crate::error::Error::InvalidInput(format!("{var}={text:?}: {e}"))),
    }
}

/// The smallest memory cache a reader may be given (a few runs of chunks).
pub const MIN_CACHE_MEMORY: u64 = 16 << 20;

/// Verified chunks kept in memory by default (`repo::Options::cache_memory`):
/// an eighth of the machine's memory, from 64 MiB to 4 GiB.
pub fn cache_memory() -> u64 {
    use nix::unistd::{SysconfVar, sysconf};
    let value = |v| {
        sysconf(v)
            .ok()
            .flatten()
            .and_then(|n| u64::try_from(n).ok())
    };
    let total =
        value(SysconfVar::_PHYS_PAGES).unwrap_or(0) * value(SysconfVar::PAGE_SIZE).unwrap_or(0);
    (total / 8).clamp(64 << 20, 4 << 30)
}
/// Highest version number: the mount numbers a version's inodes in 32 bits,
/// and no dataset comes near 4 billion commits. A record beyond it is no
/// version (`keys::record_number`, `Record::decode`).
pub const MAX_VERSION: u64 = u32::MAX as u64;
/// Largest tree, decoded (about a million entries in one directory).
pub const MAX_TREE_BYTES: u64 = 256 << 20;
/// What encoding adds to a blob's data at most: its encoding byte, and in
/// a sealed store an inner encoding byte, a 12-byte nonce and a 16-byte tag
/// (`store::seal` checks this against its own sizes when it compiles).
pub const BLOB_OVERHEAD: u64 = 2 + 12 + 16;
/// Largest tree as stored: the largest decoded one, raw, with its encoding.
pub const MAX_TREE_LEN: u64 = MAX_TREE_BYTES + BLOB_OVERHEAD;
/// A plaintext store's tree inflates at most this many times its stored
/// size (a decompression bomb inflates thousands of times). Its writers
/// store a tree that compresses better raw (`Codec::tree_bound`).
pub const MAX_TREE_RATIO: u64 = 64;
/// Largest record, marker or dataset object.
pub const MAX_SMALL_OBJECT: u64 = 1 << 20;
/// Largest pack read whole (an erasure rewriting one): packs are cut at
/// 16 MiB, plus at most one blob past it, a tree's at most.
pub const MAX_PACK: u64 = (16 << 20) + MAX_TREE_LEN;
/// Directory levels in a version or in staging.
pub const MAX_DEPTH: usize = 1024;
/// Paths a walk of a version (export, diff, status) may visit, counting each
/// use of a shared subtree: far above any real dataset, far below what a
/// few shared trees can expand to (41 trees can name 2^40 paths).
pub const MAX_PATHS: u64 = 10_000_000;
/// Most names of one file in staging, as ext4's limit.
pub const LINK_MAX: u32 = 65_000;
/// Longest file name, as on Linux.
pub const MAX_NAME: usize = 255;
/// Longest symlink target, as PATH_MAX.
pub const MAX_TARGET: usize = 4096;
/// Times from 0001-01-01 to 9999-12-31 (what RFC 3339 and the tools can show).
pub const MIN_TIME: i64 = -62_135_596_800;
pub const MAX_TIME: i64 = 253_402_300_799;
/// Longest author and commit message.
pub const MAX_MESSAGE: usize = 64 << 10;
pub const MAX_AUTHOR: usize = 256;

/// Largest decoded size of a tree stored in `encoded_len` bytes when
/// nothing authenticated says its size.
pub fn tree_ratio_bound(encoded_len: u32) -> u64 {
    (encoded_len as u64)
        .saturating_mul(MAX_TREE_RATIO)
        .clamp(1 << 20, MAX_TREE_BYTES)
}

/// A name datasets and tags may have: 1 to 100 letters, digits, '-', '_'
/// and '.', not starting with '.' (a key part and a file name as it is).
pub fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// A dataset name as `plain_name`, else an error saying the rule.
pub fn validate_name(name: &str) -> crate::error::Result<()> {
    if plain_name(name) {
        Ok(())
    } else {
        Err(crate::error::Error::InvalidInput(format!(
            "invalid dataset name {name:?}: use letters, digits, '-', '_' and '.', not starting with '.'"
        )))
    }
}
