//! The library's error type. The CLI adds context and maps kinds to exit
//! codes; the FUSE adapter maps them to errno values (`FsError`).

use crate::id::{BlobId, PackId};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One flat enum, not grouped by who must act: each edge decides by the
/// variant itself (the CLI's exit codes, the gateway's statuses, errno),
/// and they group the variants differently, so groups would spare none of
/// them a match.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The object store failed (`store::failed` makes these: its client's
    /// errors stay inside `store/`).
    #[error("object store: {key}: {source}")]
    Store {
        key: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("local index: {0}")]
    Index(#[from] rusqlite::Error),
    #[error("{0}")]
    InvalidInput(String),
    #[error("policy, line {line} column {column}: {message}; nothing was changed")]
    Policy {
        line: usize,
        column: usize,
        message: String,
    },
    /// The store's policy does not allow it.
    #[error("not allowed: {0}")]
    Forbidden(String),
    #[error(
        "{0} is not a detafs store: it has no marker detafs.json (if it was a store, it was deleted or moved away)"
    )]
    NotAStore(String),
    #[error(
        "the store at {0} is gone: its marker detafs.json is missing (was the folder or bucket deleted or moved?); nothing was written there"
    )]
    StoreGone(String),
    #[error(
        "the {what} at {path} was written by a newer detafs (schema {found}; this one knows up to {current})"
    )]
    SchemaTooNew {
        what: &'static str,
        path: String,
        found: u32,
        current: u32,
    },
    #[error(
        "store {url} uses format {found}, newer than this detafs understands ({supported}); upgrade detafs"
    )]
    FormatTooNew {
        url: String,
        found: u32,
        supported: u32,
    },
    #[error(
        "store {url} does not honour conditional create ({detail}); detafs cannot commit safely on it and refuses to use it"
    )]
    UnsafeStore { url: String, detail: String },
    #[error(
        "store {0} is encrypted, and neither a key file nor a passphrase that opens it was given"
    )]
    Locked(String),
    #[error(
        "store {url} says it is in the clear (format 1), but {why}: its marker detafs.json was changed; nothing was read or written (put back the marker with \"format\": 2 and its sealing, or ask whoever can write the store)"
    )]
    Downgraded { url: String, why: String },
    #[error("the key file or passphrase given does not open store {0}; nothing was changed")]
    WrongKey(String),
    #[error("no key slot {0}")]
    NoKeySlot(String),
    #[error(
        "{path} is owned by uid {owner}, not by this user (uid {me}): detafs keeps private data in it and will not use another user's folder"
    )]
    NotOwned { path: String, owner: u32, me: u32 },
    #[error("no dataset named {0:?}")]
    NoDataset(String),
    #[error("dataset {0:?} already exists")]
    DatasetExists(String),
    #[error(
        "dataset {name:?} was deleted ({when}); it can be undeleted until gc removes it, and its name stays taken"
    )]
    DatasetDeleted { name: String, when: String },
    #[error("dataset {dataset:?} has no version {version}")]
    NoVersion { dataset: String, version: String },
    #[error("{path}: no such file or directory in {version}")]
    NoPath { version: String, path: String },
    #[error(
        "{path} in {version} was erased: its bytes are gone from the store (`detafs audit` says when, by whom and why)"
    )]
    Erased { version: String, path: String },
    #[error("{kind} object {id} is missing from the store (pack {pack})")]
    Missing {
        kind: &'static str,
        id: BlobId,
        pack: PackId,
    },
    #[error("{kind} object {id} is corrupt (pack {pack}): {detail}")]
    Corrupt {
        kind: &'static str,
        id: BlobId,
        pack: PackId,
        detail: String,
    },
    #[error("malformed {what}: {detail}")]
    Malformed { what: String, detail: String },
    #[error(
        "the history of {dataset} is damaged at v{version} ({why}): the versions before it are served, none after it, and nothing can be committed onto it; `detafs verify {dataset}` tells more"
    )]
    DamagedHistory {
        dataset: String,
        version: u64,
        why: String,
    },
    #[error(
        "conflict: v{winner} was committed meanwhile and also changed {}; nothing was committed{}",
        shown(paths),
        if *staged { staged_hint(*winner) } else { String::new() }
    )]
    Conflict {
        winner: u64,
        paths: Vec<Vec<u8>>,
        /// Staging was moved onto the winner, keeping our version of `paths`.
        staged: bool,
    },
    #[error(
        "unresolved conflict with v{winner}: {} unchanged since the conflict; for each, keep yours (touch it), take theirs (copy it from versions/v{winner}/) or edit it, then commit again",
        shown(paths)
    )]
    Unresolved { winner: u64, paths: Vec<Vec<u8>> },
    #[error(
        "the commit was cancelled before it was recorded: nothing was committed, staging is as it was"
    )]
    Cancelled,
    #[error("nothing to commit: the content equals v{0}")]
    NothingToCommit(u64),
    #[error(
        "gc ran while this commit was made and may have deleted data it reuses; nothing was committed: commit again"
    )]
    CollectedMeanwhile,
    /// Refused where nothing may wait (`crate::nowait`); the caller runs
    /// the request again where it may.
    #[error("this request must wait, and was asked where nothing may")]
    WouldBlock,
    #[error(
        "the commit ran longer than {} (gc's safety window), so some of its objects may have been collected; nothing was committed: commit again, or in smaller parts",
        humantime::format_duration(*.0)
    )]
    CommitTooLong(std::time::Duration),
    #[error("gave up claiming a version number after {0} attempts")]
    TooManyRetries(u32),
    /// A file-system operation that cannot be done as asked (mapped to an errno by the mount).
    #[error("{path}: {kind}")]
    Fs { kind: FsError, path: String },
    #[error(
        "staging of {0:?} is in use by another detafs process (a mount or a commit); try again or commit through that mount"
    )]
    StagingBusy(String),
}

/// Why a file-system operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("directory not empty")]
    NotEmpty,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("invalid argument")]
    Invalid,
    #[error("file name too long")]
    NameTooLong,
    #[error("read-only file system")]
    ReadOnly,
    #[error("operation not permitted")]
    NotPermitted,
    #[error("operation not supported")]
    Unsupported,
    #[error("permission denied")]
    Denied,
    #[error("too many links")]
    TooManyLinks,
    #[error("busy")]
    Busy,
    /// An inode the kernel names that is gone (ESTALE: the kernel looks
    /// the name up again and retries a path's system call).
    #[error("stale file handle")]
    Stale,
}

impl Error {
    /// A local disk (staging's, the cache's) is full: ENOSPC for the
    /// writer, not EIO, so it can free space and try again.
    pub fn is_disk_full(&self) -> bool {
        match self {
            Error::Io { source, .. } => source.raw_os_error() == Some(libc::ENOSPC),
            Error::Index(rusqlite::Error::SqliteFailure(f, _)) => {
                f.code == rusqlite::ErrorCode::DiskFull
            }
            _ => false,
        }
    }

    pub fn fs(kind: FsError, path: impl std::fmt::Display) -> Self {
        Error::Fs {
            kind,
            path: path.to_string(),
        }
    }

    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_string(),
            source,
        }
    }

    pub fn malformed(what: impl std::fmt::Display, detail: impl std::fmt::Display) -> Self {
        Error::Malformed {
            what: what.to_string(),
            detail: detail.to_string(),
        }
    }
}

/// How a staged commit's conflict is resolved (docs/semantics.md).
fn staged_hint(winner: u64) -> String {
    format!(
        ". Staging now stands on v{winner} with your version of those paths (status shows them as C): compare each with versions/v{winner}/, then keep yours (touch it), take theirs (copy it) or edit it, and commit again"
    )
}

/// Paths in a message, one line each, comma-separated.
fn shown(paths: &[Vec<u8>]) -> String {
    paths
        .iter()
        .map(|p| crate::escape::line(p).into_owned())
        .collect::<Vec<_>>()
        .join(", ")
}
