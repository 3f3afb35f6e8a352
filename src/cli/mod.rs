//! Argument parsing and user-facing output. The library never prints; this
//! module turns its results and errors into text and exit codes.

mod audit;
mod diff;
mod fstab;
mod keys;
mod lifetime;
pub mod log;
mod mount;
mod policy;
mod remote;
mod retention;
use retention::On;
mod serve;
mod show;
mod trash;

use anyhow::Context;
use clap::{Parser, Subcommand};
use detafs::access::{Action, dataset_resource, policy::ALL_DATASETS};
use detafs::commit::{self, CommitMeta};
use detafs::escape::line;
use detafs::progress::Progress;
use detafs::repo::{self, Options, Repo};
use detafs::{Error, gc, read, verify};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;

/// Where `--help` lists the options every command takes.
const GLOBAL: &str = "Global options";

/// Exit codes beyond 0 (success), 1 (error) and 2 (usage).
const EXIT_CONFLICT: u8 = 3;
const EXIT_NOTHING: u8 = 4;
/// Refused: by the policy, a gateway, or the mount (EACCES).
const EXIT_DENIED: u8 = 5;

#[derive(Parser)]
#[command(
    name = "detafs",
    version,
    about = "Versioned datasets in an object store",
    after_help = "Exit codes: 0 success, 1 error, 2 usage, 3 commit conflict, 4 nothing to commit, 5 denied (policy check).\n\
                  Examples: detafs dataset create weather; detafs mount weather ~/weather --daemon;\n\
                  detafs commit weather -m \"add May\"; detafs log weather; detafs cat weather latest~1 data.csv"
)]
struct Cli {
    /// Store location: a path, file://, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX
    /// or az://CONTAINER/PREFIX (credentials from the usual AWS_*, GOOGLE_*,
    /// AZURE_* variables). Default: an embedded store under the user's data
    /// directory.
    #[arg(long, global = true, env = "DETAFS_STORE", help_heading = GLOBAL)]
    store: Option<String>,
    /// Directory for the local index and object cache.
    #[arg(long, global = true, env = "DETAFS_CACHE", help_heading = GLOBAL)]
    cache_dir: Option<PathBuf>,
    /// Where staged (uncommitted) changes live. Default: under the user's data directory.
    #[arg(long, global = true, env = "DETAFS_STAGING", help_heading = GLOBAL)]
    staging_dir: Option<PathBuf>,
    /// Bound on the on-disk object cache, e.g. 512MiB or 2GB.
    #[arg(long, global = true, default_value = "1GiB", help_heading = GLOBAL)]
    cache_size: bytesize::ByteSize,
    /// Memory budget for what a process keeps to answer without the store,
    /// e.g. 2GiB (default: an eighth of the machine's memory, 64 MiB to
    /// 4 GiB): decoded trees, a mount's listings and inodes, and the
    /// verified file bytes `detafs serve` keeps (a mount keeps those in
    /// the kernel's page cache instead).
    #[arg(long, global = true, env = "DETAFS_CACHE_MEMORY", help_heading = GLOBAL)]
    cache_memory: Option<bytesize::ByteSize>,
    /// How long one operation on a remote store may keep retrying through
    /// failures before it gives up, e.g. 30s or 5m.
    #[arg(
        long,
        global = true,
        env = "DETAFS_STORE_TIMEOUT",
        default_value = "60s",
        help_heading = GLOBAL,
        value_parser = parse_store_timeout
    )]
    store_timeout: humantime::Duration,
    /// Key file of an encrypted store. Default: the one `init` wrote for
    /// it under ~/.config/detafs/keys/.
    #[arg(long, global = true, env = "DETAFS_KEY_FILE", help_heading = GLOBAL)]
    key_file: Option<PathBuf>,
    /// File whose first line is the passphrase of an encrypted store
    /// (or set DETAFS_PASSWORD; else it is asked on the terminal).
    #[arg(long, global = true, env = "DETAFS_PASSWORD_FILE", help_heading = GLOBAL)]
    password_file: Option<PathBuf>,
    /// S3 server-side encryption asked of every upload and checked in its
    /// answer: aes256, kms or kms:KEY_ID (a service that does not apply it
    /// is refused at the first write).
    #[arg(long, global = true, env = "DETAFS_SSE", help_heading = GLOBAL, value_parser = parse_sse)]
    sse: Option<detafs::store::sse::Sse>,
    /// S3 Object Lock in compliance mode: every object detafs never
    /// rewrites is locked this long from its upload (e.g. 365d), and no
    /// version younger than that is expired or erased. The bucket must
    /// have Object Lock enabled (checked before the first write).
    #[arg(long, global = true, env = "DETAFS_OBJECT_LOCK", help_heading = GLOBAL)]
    object_lock: Option<humantime::Duration>,
    /// With --store https://GATEWAY: a file whose first line is the API
    /// key to present (`detafs apikey create` printed it).
    #[arg(long, global = true, env = "DETAFS_API_KEY_FILE", help_heading = GLOBAL)]
    api_key_file: Option<PathBuf>,
    /// With --store https://GATEWAY: a file whose first line is a bearer
    /// token (a JWT), read again at each request.
    #[arg(long, global = true, env = "DETAFS_TOKEN_FILE", help_heading = GLOBAL)]
    token_file: Option<PathBuf>,
    /// With --store https://GATEWAY: the gateway's certificate (PEM), for
    /// one the system does not trust (its self-signed one).
    #[arg(long, global = true, env = "DETAFS_CA_CERT", help_heading = GLOBAL)]
    ca_cert: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// `gc --grace`: a usage error (exit 2) below the safe minimum.
fn parse_grace(s: &str) -> Result<humantime::Duration, String> {
    let grace: humantime::Duration = s.parse().map_err(|e| format!("{e}"))?;
    if std::time::Duration::from(grace) < detafs::store::grace::min_grace() {
        return Err(format!(
            "a grace of {grace} could delete objects of a commit still running; gc needs at least {}",
            humantime::format_duration(detafs::store::grace::min_grace())
        ));
    }
    Ok(grace)
}

/// `--store-timeout`: at most `MAX_STORE_TIMEOUT` (a usage error, exit 2).
fn parse_store_timeout(s: &str) -> Result<humantime::Duration, String> {
    let timeout: humantime::Duration = s.parse().map_err(|e| format!("{e}"))?;
    if std::time::Duration::from(timeout) > MAX_STORE_TIMEOUT {
        return Err(format!(
            "{timeout} is longer than the {} allowed",
            humantime::format_duration(MAX_STORE_TIMEOUT)
        ));
    }
    Ok(timeout)
}

fn parse_sse(s: &str) -> Result<detafs::store::sse::Sse, String> {
    detafs::store::sse::Sse::parse(s).map_err(|e| e.to_string())
}

#[derive(Subcommand)]
enum Command {
    /// Create the store (idempotent): encrypted (AES-256) unless --plaintext,
    /// with a new key file to back up.
    #[command(
        after_help = "Examples:\n  DETAFS_STORE=s3://team-data/detafs detafs init\n  detafs init --passphrase   (also a passphrase slot, for other hosts)\nExit codes: 0 created or already a store, 1 error (e.g. the service ignores conditional create)."
    )]
    Init {
        /// An unencrypted store (format 1), for public data.
        #[arg(long)]
        plaintext: bool,
        /// Add a passphrase slot too (DETAFS_NEW_PASSWORD, or asked twice).
        #[arg(long, conflicts_with = "plaintext")]
        passphrase: bool,
    },
    /// The key slots of an encrypted store: what may open it.
    #[command(subcommand)]
    Key(KeyCmd),
    /// Create or list datasets.
    #[command(subcommand)]
    Dataset(DatasetCmd),
    /// Serve the HTTPS gateway (REST API for commits and reads, API keys,
    /// the store's policy) on this store.
    #[command(
        after_help = "Examples:\n  detafs serve --listen 127.0.0.1:8443   (a self-signed certificate, made on first start)\n  detafs serve --tls-cert cert.pem --tls-key key.pem\nExit codes: 0 stopped by SIGINT/SIGTERM, 1 error."
    )]
    Serve(serve::ServeArgs),
    /// API keys for the gateway, kept (as hashes) in the store.
    #[command(subcommand)]
    Apikey(ApikeyCmd),
    /// The store's access policy: who may see, read, commit and tag which
    /// versions (checked by mounts with --allow-other and the gateway).
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// Record the next version of a dataset: DIR's contents with --from,
    /// otherwise the dataset's staging area (through its mount if one is up).
    #[command(
        after_help = "Examples:\n  detafs commit weather --from ./data -m \"first readings\"\n  detafs commit weather -m \"add May\"   (staging, through its mount if one is up)\nExit codes: 0 committed (prints the version), 1 error, 3 conflict (nothing committed), 4 nothing to commit."
    )]
    Commit {
        /// Dataset name.
        name: String,
        /// Directory whose contents become the new version.
        #[arg(long)]
        from: Option<PathBuf>,
        /// Commit message.
        #[arg(short, long)]
        message: String,
        /// Author recorded in the version (default: the current user).
        #[arg(long)]
        author: Option<String>,
        /// Record no time-only change (`T`): a file with the same bytes
        /// and mode keeps the time the latest version has.
        #[arg(long)]
        content_only: bool,
    },
    /// Name a version (immutable: a tag never moves), or list the tags.
    #[command(
        after_help = "Examples:\n  detafs tag weather v2 2024-q1\n  detafs tag weather latest release-3\n  detafs tag weather            (lists the tags)\nExit codes: 0 tagged, 1 error (the tag exists, a bad name, no such version)."
    )]
    Tag {
        /// Dataset name.
        name: String,
        /// The version to name: v3, 3, latest, latest~1, another tag.
        #[arg(requires = "tag")]
        version: Option<String>,
        /// The new tag: letters, digits, '-', '_', '.'; not starting with 'v'.
        tag: Option<String>,
        /// The list as one JSON array: tag, version.
        #[arg(long, conflicts_with = "version")]
        json: bool,
    },
    /// Show a dataset's history, newest first (`-- PATH`: only the
    /// versions that changed that file or folder).
    #[command(
        after_help = "Examples:\n  detafs log weather | head\n  detafs log weather --json\n  detafs log weather -- tables/weather.csv\nExit codes: 0, 1 error."
    )]
    Log {
        /// Dataset name.
        name: String,
        /// A path given without `--` (refused, with the `--` form).
        #[arg(hide = true)]
        stray: Option<String>,
        /// One JSON array, for scripts.
        #[arg(long)]
        json: bool,
        /// A path inside the dataset, after `--`: each version that changed
        /// it, with what happened to it (A, M, D, T; sizes; renames).
        #[arg(last = true)]
        path: Option<String>,
    },
    /// List a directory (or show a file) of a version.
    #[command(
        after_help = "Examples:\n  detafs ls weather latest~1 tables\n  detafs ls weather v3 --json\nExit codes: 0, 1 error."
    )]
    Ls {
        /// Dataset name.
        name: String,
        /// The version: v3, 3, latest, a tag, each with ~N for N versions back.
        version: String,
        /// Path inside the version (default: its root).
        path: Option<String>,
        /// One JSON array: name, type, mode, size, mtime (and target, rdev).
        #[arg(long)]
        json: bool,
    },
    /// Print a file of a version to stdout.
    #[command(
        after_help = "Example: detafs cat weather 2024-q1 tables/weather.csv > old.csv\nExit codes: 0, 1 error."
    )]
    Cat {
        /// Dataset name.
        name: String,
        /// The version: v3, 3, latest, a tag, each with ~N for N versions back.
        version: String,
        /// Path inside the version.
        path: String,
    },
    /// Show what changed between two versions, or a version and staging.
    #[command(
        after_help = "Examples:\n  detafs diff weather v1 latest --stat\n  detafs diff weather latest staging -u\n  detafs diff weather 2024-q1 v7 -u | patch -p1 -d ./restore\nExit codes: 0, 1 error."
    )]
    Diff {
        /// Dataset name.
        name: String,
        /// Older side: v3, 3, latest, latest~1, a tag, or staging.
        from: String,
        /// Newer side, the same forms.
        to: String,
        #[command(flatten)]
        format: diff::Asked,
        /// Leave out time-only changes (`T`).
        #[arg(long)]
        content_only: bool,
    },
    /// Write a version's files to a new or empty directory.
    #[command(
        after_help = "Example: detafs export weather 2024-q1 ./restore\nExit codes: 0 exported, 1 error."
    )]
    Export {
        /// Dataset name.
        name: String,
        /// The version: v3, 3, latest, a tag, each with ~N for N versions back.
        version: String,
        /// New or empty directory to write into.
        dir: PathBuf,
        /// Keep setuid/setgid bits (root only; cleared by default).
        #[arg(long)]
        preserve_setid: bool,
    },
    /// A dataset's history as the store holds it: every version (author,
    /// time, message, parent), tag and policy change, each hash chain checked.
    #[command(
        after_help = "Examples:\n  detafs audit weather\n  detafs audit weather --json\nExit codes: 0 every chain holds, 1 a break (listed) or an error."
    )]
    Audit {
        /// Dataset name.
        name: String,
        /// One JSON object: dataset, ok, versions, tags, policy, problems.
        #[arg(long)]
        json: bool,
    },
    /// Audit the store: hash chain, every object present and intact.
    #[command(
        after_help = "Examples:\n  detafs verify\n  detafs verify weather\nExit codes: 0 no problem found, 1 problems (listed) or an error."
    )]
    Verify {
        /// Only this dataset (default: all, and report garbage).
        name: Option<String>,
        /// One JSON object: versions, objects, problems, garbage.
        #[arg(long)]
        json: bool,
    },
    /// Retention rules of a dataset: set, show, and the lifecycle log.
    #[command(subcommand)]
    Retention(retention::RetentionCmd),
    /// Expire versions: those named, or those the retention rules do not
    /// keep (the newest, held and too young versions always stay). An
    /// expired version is gone from every listing; its record stays in
    /// the chain, and gc deletes its data after the grace.
    #[command(
        after_help = "Examples:\n  detafs forget weather --dry-run\n  detafs forget weather v3 v4\nExit codes: 0, 1 error (nothing expired), 5 denied (needs dataset:forget)."
    )]
    Forget(retention::ForgetArgs),
    /// Put a legal hold on a version (never expired or erased until
    /// released), or list the holds.
    #[command(
        after_help = "Examples:\n  detafs hold weather v12 --reason \"case 2026-114\"\n  detafs hold weather\nExit codes: 0, 1 error, 5 denied (needs dataset:hold)."
    )]
    Hold(retention::HoldArgs),
    /// Erase a file's (or a folder's files') bytes from every version that
    /// holds it, or from a version on: the versions stay, the path is
    /// marked erased (reading it fails), and its bytes leave the store
    /// where no other file or version uses them.
    #[command(
        after_help = "Examples:\n  detafs erase weather people/jane.csv --reason \"GDPR art. 17, request 2026-88\"\n  detafs erase weather people/ --from v12 --reason \"...\" --dry-run\nExit codes: 0, 1 error (nothing erased: a held or too young version, no such path), 5 denied (needs dataset:erase)."
    )]
    Erase(retention::EraseArgs),
    /// The compliance report: what is kept under which rules and holds,
    /// what was expired and erased, by whom and when, where the data
    /// lives, and who may read each version under the policy in force.
    #[command(
        after_help = "Examples:\n  detafs report weather\n  detafs report weather --json\nExit codes: 0, 1 error, 5 denied (needs dataset:admin)."
    )]
    Report(retention::ReportArgs),
    /// Move a dataset's old versions to the store's colder tier: the data
    /// only they reach, pack by pack (copied, checked, then deleted here).
    /// Reads find it there by themselves.
    #[command(
        after_help = "Examples:\n  detafs tier weather --older-than 180d --keep-last 10 --cold-store s3://archive/weather\n  detafs tier weather --older-than 90d --dry-run\nExit codes: 0, 1 error, 5 denied (needs dataset:retention)."
    )]
    Tier(retention::TierArgs),
    /// Release a legal hold.
    #[command(
        after_help = "Example: detafs release weather v12 --reason \"case closed\"\nExit codes: 0, 1 error, 5 denied (needs dataset:hold)."
    )]
    Release(retention::ReleaseArgs),
    /// Delete objects no version reaches, older than the grace period.
    #[command(after_help = "Example: detafs gc --dry-run\nExit codes: 0, 1 error.")]
    Gc {
        /// Spare unreachable objects younger than this, e.g. 24h or 2d; at
        /// least 13h, so no commit still running here or on another host
        /// loses objects.
        #[arg(long, default_value = "24h", value_parser = parse_grace)]
        grace: humantime::Duration,
        /// List what would be deleted, delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Rebuild the local index from the store.
    #[command(after_help = "Example: detafs reindex\nExit codes: 0, 1 error.")]
    Reindex,
    /// Mount a dataset: versions/ read-only, staging/ writable, .detafs/ control files.
    #[command(
        after_help = "Examples:\n  detafs mount weather ~/weather --daemon\n  detafs mount weather ~/weather-ro --read-only --daemon\nExit codes: 0 mounted (and, in the foreground, unmounted cleanly), 1 error."
    )]
    Mount(mount::MountArgs),
    /// Unmount a detafs mount (also a stale one whose daemon was killed).
    #[command(
        after_help = "Examples:\n  detafs umount ~/weather\n  detafs umount --lazy ~/weather   (while a shell is still inside)\nExit codes: 0 unmounted, 1 error."
    )]
    Umount {
        /// Where it is mounted.
        mountpoint: PathBuf,
        /// Detach it now even while something inside uses it; the daemon
        /// ends once nothing does.
        #[arg(long)]
        lazy: bool,
    },
    /// Discard staged changes: PATHs (default: all) become as in the version
    /// staging is based on (through its mount if one is up).
    #[command(
        after_help = "What a restore or checkout replaces is kept in the trash (detafs trash NAME).\nExamples:\n  detafs restore weather               (discard every staged change)\n  detafs restore weather tables/a.csv\n  detafs restore weather --undo        (bring back what the last restore or checkout replaced)\n  detafs restore weather --undo 4      (entry 4 of detafs trash weather)\nExit codes: 0, 1 error (nothing changed)."
    )]
    Restore {
        /// Dataset name.
        name: String,
        /// Paths inside the dataset, e.g. data/x.csv (default: everything).
        paths: Vec<String>,
        /// Bring back what the last restore or checkout replaced, or trash
        /// entry ENTRY; what is there now goes to the trash in turn.
        #[arg(long, value_name = "ENTRY", num_args = 0..=1, conflicts_with = "paths")]
        undo: Option<Option<u64>>,
    },
    /// List what restores and checkouts replaced, which `detafs restore
    /// NAME --undo` brings back; set how long and how much is kept.
    #[command(
        after_help = "Kept per dataset on this host, in its staging folder; the newest entry stays whatever its size until it is older than --keep.\nExamples:\n  detafs trash weather\n  detafs trash weather --keep 30days --max-size 5GiB\n  detafs trash weather --json\nExit codes: 0, 1 error, 2 usage."
    )]
    Trash(trash::TrashArgs),
    /// Make staged PATHs (default: all) as in VERSION, e.g. to commit a revert.
    #[command(
        after_help = "Examples:\n  detafs checkout weather v1 && detafs commit weather -m \"revert to v1\"\n  detafs checkout weather latest~1 tables/a.csv\nExit codes: 0, 1 error (nothing changed)."
    )]
    Checkout {
        /// Dataset name.
        name: String,
        /// v3, 3, latest, a tag, each with ~N for N versions back.
        version: String,
        /// Paths inside the dataset (default: everything).
        paths: Vec<String>,
    },
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  detafs completions bash > ~/.local/share/bash-completion/completions/detafs\n  detafs completions zsh > ~/.zfunc/_detafs\n  detafs completions fish > ~/.config/fish/completions/detafs.fish\nExit codes: 0, 2 usage (an unknown shell)."
    )]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write man pages (detafs.1 and one per command) into a folder.
    #[command(
        after_help = "Example: detafs man ~/.local/share/man/man1 && man detafs-commit\nExit codes: 0, 1 error."
    )]
    Man {
        /// The folder (created if missing), e.g. ~/.local/share/man/man1.
        dir: PathBuf,
    },
    /// Show staged changes of a dataset (like `git status --porcelain`).
    #[command(
        after_help = "Examples:\n  detafs status weather\n  detafs status weather --json\nExit codes: 0, 1 error."
    )]
    Status(StatusArgs),
}

#[derive(clap::Args)]
struct StatusArgs {
    /// Dataset name.
    name: String,
    /// One JSON array: status (A, M, D, T, C), path.
    #[arg(long)]
    json: bool,
    /// Leave out time-only changes (`T`).
    #[arg(long)]
    content_only: bool,
}

#[derive(Subcommand)]
enum DatasetCmd {
    /// Create an empty dataset.
    #[command(
        after_help = "Example: detafs dataset create weather\nExit codes: 0 created, 1 error (it exists, a bad name)."
    )]
    Create {
        /// Dataset name: letters, digits, '-', '_', '.'.
        name: String,
    },
    /// List datasets.
    #[command(after_help = "Example: detafs dataset list --json\nExit codes: 0, 1 error.")]
    List {
        /// One JSON array: name, versions, latest version and its time,
        /// tags, bytes the dataset added to the store.
        #[arg(long)]
        json: bool,
    },
    /// Delete a dataset: hidden at once on every host, its data kept until
    /// gc (after its grace) removes it; its name stays taken.
    #[command(
        after_help = "Example: detafs dataset delete scratch\nRefused while this host mounts it or its staging holds changes (detafs restore NAME).\nExit codes: 0 deleted, 1 error."
    )]
    Delete {
        /// Dataset name.
        name: String,
    },
    /// Rename a dataset: every version and tag, under the new name.
    #[command(
        after_help = "Example: detafs dataset rename scratch weather-2024\nThe old name is deleted (detafs dataset undelete brings it back) and stays taken. Refused while this host mounts it or its staging holds changes.\nExit codes: 0 renamed, 1 error (the new name exists, a bad name)."
    )]
    Rename {
        /// Current name.
        name: String,
        /// New name.
        new_name: String,
    },
    /// Bring back a deleted dataset, before gc removes its versions.
    #[command(after_help = "Example: detafs dataset undelete scratch\nExit codes: 0, 1 error.")]
    Undelete {
        /// Dataset name.
        name: String,
    },
}

#[derive(Subcommand)]
enum ApikeyCmd {
    /// Make a key (printed once; only its hash is kept).
    #[command(
        after_help = "Examples:\n  detafs apikey create dashboard --scopes read\n  detafs apikey create pipeline --scopes read,commit,tag\nScopes: read (dataset:read, dataset:versions), commit, tag, create, admin, or actions.\nExit codes: 0, 1 error."
    )]
    Create {
        /// The key's name: how it is listed and revoked.
        name: String,
        /// What it may do, comma-separated: read (dataset:read and
        /// dataset:versions), commit, tag, create, admin (every action), or
        /// actions by name (dataset:read, dataset:versions, dataset:commit,
        /// dataset:tag, dataset:create, dataset:admin).
        #[arg(long, required = true, value_delimiter = ',')]
        scopes: Vec<String>,
        /// Also an S3 key for `serve --s3-listen`: printed as the two lines
        /// of an AWS credentials file (an encrypted store only: its secret
        /// is kept, sealed, to check signatures).
        #[arg(long)]
        s3: bool,
    },
    /// List the keys (names, scopes; never secrets).
    #[command(
        after_help = "Examples:\n  detafs apikey list\n  detafs apikey list --json\nExit codes: 0, 1 error."
    )]
    List {
        /// One JSON array: name, created, author, scopes, revoked.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key: every gateway refuses it within seconds.
    #[command(after_help = "Example: detafs apikey revoke dashboard\nExit codes: 0, 1 error.")]
    Revoke {
        /// The key's name, as `apikey list` shows it.
        name: String,
    },
}

#[derive(Subcommand)]
enum PolicyCmd {
    /// Print the policy in force (or an earlier one).
    #[command(
        after_help = "Examples:\n  detafs policy show\n  detafs policy show --version 2\nExit codes: 0, 1 error."
    )]
    Show {
        /// A policy version, as `policy log` lists them.
        #[arg(long)]
        version: Option<u64>,
    },
    /// Set a new policy from a YAML file (needs dataset:admin once a policy
    /// is set; refused with its line and column if it does not check).
    #[command(
        after_help = "Example: detafs policy set policy.yaml -m \"analysts read published versions\"\nExit codes: 0 set (prints its version), 1 error (nothing changed)."
    )]
    Set {
        /// The policy, in YAML (docs/access.md).
        file: PathBuf,
        /// Why it changed, kept in the policy's history.
        #[arg(short, long, default_value = "")]
        message: String,
    },
    /// The policy's history, newest first (hash-chained in the store).
    #[command(
        after_help = "Examples:\n  detafs policy log\n  detafs policy log --json\nExit codes: 0, 1 error."
    )]
    Log {
        /// One JSON array: version, time, author, message, parent, hash.
        #[arg(long)]
        json: bool,
    },
    /// Whether USER may do ACTION on RESOURCE, and which statement decides.
    #[command(
        after_help = "Examples:\n  detafs policy check ann dataset:read datasets/weather/versions/v3/files/raw/a.csv\n  detafs policy check key:dashboard dataset:versions datasets/weather/versions/v3\nUSER: a login name (with all of its groups) or a principal (user:, group:, key:, token:).\nExit codes: 0 allowed, 5 denied, 1 error."
    )]
    Check {
        /// A login name (with all of its groups) or a principal: user:NAME,
        /// group:NAME, key:NAME, token:SUBJECT.
        user: String,
        /// dataset:read, dataset:versions, dataset:commit, dataset:tag,
        /// dataset:create or dataset:admin.
        action: String,
        /// What it acts on: datasets/NAME, datasets/NAME/versions/vN, or
        /// datasets/NAME/versions/vN/files/PATH.
        resource: String,
    },
}

#[derive(Subcommand)]
enum KeyCmd {
    /// List the key slots (the one this host's key file opens names it).
    #[command(
        after_help = "Examples:\n  detafs key list\n  detafs key list --json\nExit codes: 0, 1 error."
    )]
    List {
        /// One JSON array: id, kind, created, by, key_file (this host's, or null).
        #[arg(long)]
        json: bool,
    },
    /// Add a slot: a new key file, or a passphrase.
    #[command(
        after_help = "Examples:\n  detafs key add --file ~/weather-host2.key\n  DETAFS_NEW_PASSWORD=... detafs key add --passphrase\nExit codes: 0 added, 1 error."
    )]
    Add {
        /// Write a new key file here (0600; never over an existing file).
        #[arg(long)]
        file: Option<PathBuf>,
        /// A new passphrase (DETAFS_NEW_PASSWORD, or asked twice).
        #[arg(long, conflicts_with = "file")]
        passphrase: bool,
    },
    /// Remove a slot: its key file or passphrase opens the store no more.
    #[command(
        after_help = "Example: detafs key remove 3f2a9c01d4e5b6a7\nExit codes: 0 removed, 1 error (no such slot, the last one)."
    )]
    Remove {
        /// Slot id, as `key list` shows it.
        id: String,
    },
}

/// The error and its causes on one line, each cause said once: library
/// errors already quote their source, which the chain lists again.
fn report(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// The command line this process runs, as `detafs` would be given it (a
/// mount helper's translated): what a daemon is started with again.
static ARGS: std::sync::OnceLock<Vec<std::ffi::OsString>> = std::sync::OnceLock::new();

pub(super) fn args() -> &'static [std::ffi::OsString] {
    ARGS.get().map_or(&[], Vec::as_slice)
}

/// Runs the command line, its work on `rt` (the program's runtime).
pub fn run(rt: std::sync::Arc<detafs::runtime::Runtime>) -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let argv = match argv.first().is_some_and(|a| fstab::is_helper(a)) {
        // mount(8)'s helper for an fstab line (`fstab.rs`).
        true => match fstab::command_line(&argv) {
            Ok(Some(line)) => line,
            Ok(None) => return ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(1);
            }
        },
        false => argv,
    };
    let cli = Cli::parse_from(ARGS.get_or_init(|| argv));
    if !matches!(cli.command, Command::Mount { .. } | Command::Serve { .. }) {
        // `detafs log | head` ends quietly, as other Unix tools do, rather
        // than failing on a write to a closed pipe. (Not for a daemon: its
        // sockets' errors are handled where they happen; a client that
        // hangs up on the gateway must not end it.)
        detafs::sys::default_sigpipe();
    }
    let local = (
        cli.staging_dir
            .clone()
            .unwrap_or_else(mount::default_staging),
        cli.cache_dir.clone().unwrap_or_else(repo::default_cache),
    );
    match execute(cli, rt) {
        Ok(code) => code,
        Err(err) => {
            let full = err
                .chain()
                .any(|c| c.downcast_ref::<Error>().is_some_and(Error::is_disk_full));
            let through_mount = err.downcast_ref::<mount::ThroughMount>().map(|t| t.errno);
            let code = match (err.downcast_ref::<Error>(), through_mount) {
                _ if err.downcast_ref::<mount::Interrupted>().is_some() => 130,
                (Some(Error::Conflict { .. } | Error::Unresolved { .. }), _) => EXIT_CONFLICT,
                (_, Some(libc::EBUSY)) => EXIT_CONFLICT,
                (Some(Error::NothingToCommit(_)), _) | (_, Some(libc::ENODATA)) => EXIT_NOTHING,
                (Some(Error::Forbidden(_)), _) | (_, Some(libc::EACCES)) => EXIT_DENIED,
                _ => 1,
            };
            let advice = match full {
                true => format!(
                    "; a local disk is full: free space where detafs keeps staged files ({}) and its cache ({}), or move them with --staging-dir and --cache-dir",
                    local.0.display(),
                    local.1.display()
                ),
                false => err
                    .chain()
                    .find_map(|c| c.downcast_ref::<Error>())
                    .map_or(String::new(), advice),
            };
            eprintln!("detafs: {}{advice}", line(report(&err).as_bytes()));
            ExitCode::from(code)
        }
    }
}

/// What to do about an error of the library, said after it (the library
/// says what happened; the commands to run are the CLI's).
fn advice(err: &Error) -> String {
    match err {
        Error::NotAStore(_) => "; `detafs init` makes a new, empty one".into(),
        Error::StoreGone(_) => "; put it back, point --store at where it is now, or make a new, empty store there with `detafs init`".into(),
        Error::Locked(_) => "; give its key file (--key-file, DETAFS_KEY_FILE) or a passphrase (DETAFS_PASSWORD, --password-file)".into(),
        Error::NoDataset(_) => " (see `detafs dataset list`)".into(),
        Error::NoKeySlot(_) => " (see `detafs key list`)".into(),
        Error::NotOwned { .. } => {
            "; remove it or choose another (--cache-dir, --staging-dir; DETAFS_CACHE, DETAFS_STAGING)".into()
        }
        Error::DatasetDeleted { name, .. } => {
            format!("; `detafs dataset undelete {name}` brings it back")
        }
        _ => String::new(),
    }
}

/// A progress bar on stderr, drawn for the library's `Progress`; cleared
/// when dropped.
struct Bar(ProgressBar);

impl Progress for Bar {
    fn set_total(&self, total: u64) {
        self.0.set_length(total);
    }

    fn advance(&self, done: u64) {
        self.0.inc(done);
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

fn bar(len: u64, what: &str) -> Bar {
    let pb = ProgressBar::with_draw_target(Some(len), indicatif::ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template(
            "{msg:>10} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    Bar(pb)
}

fn options(cli: &Cli, rt: &std::sync::Arc<detafs::runtime::Runtime>) -> Options {
    Options {
        runtime: rt.clone(),
        store: cli.store.clone(),
        cache_dir: cli.cache_dir.clone(),
        cache_size: cli.cache_size.as_u64(),
        cache_memory: cli.cache_memory.map(|m| m.as_u64()),
        store_timeout: cli.store_timeout.into(),
        key_file: cli.key_file.clone(),
        passphrase: Some(keys::passphrase_source(cli.password_file.clone())),
        sse: cli.sse.clone(),
        object_lock: cli.object_lock.map(Into::into),
    }
}

/// Longest `--store-timeout`: a commit's record create must land well
/// within `detafs::store::grace::MAX_COMMIT_AGE` of its first upload.
const MAX_STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Runs the command on the store, or through the gateway `--store` names.
fn execute(cli: Cli, rt: std::sync::Arc<detafs::runtime::Runtime>) -> anyhow::Result<ExitCode> {
    match cli
        .store
        .as_deref()
        .filter(|s| detafs::remote::is_gateway(s))
    {
        Some(store) => {
            let opts = detafs::remote::Options {
                api_key_file: cli.api_key_file.clone(),
                token_file: cli.token_file.clone(),
                ca_cert: cli.ca_cert.clone(),
            };
            let here = remote::Here {
                opts: options(&cli, &rt),
                staging: cli
                    .staging_dir
                    .clone()
                    .unwrap_or_else(mount::default_staging),
            };
            remote::execute(cli.command, store, &opts, &here)
        }
        None => on_store(cli, &rt),
    }
}

fn on_store(cli: Cli, rt: &std::sync::Arc<detafs::runtime::Runtime>) -> anyhow::Result<ExitCode> {
    let opts = options(&cli, rt);
    let staging = cli
        .staging_dir
        .clone()
        .unwrap_or_else(mount::default_staging);
    let open = || open_store(&opts);
    match cli.command {
        Command::Init {
            plaintext,
            passphrase,
        } => {
            let sealing = match (plaintext, passphrase) {
                (true, _) => keys::Sealing::Plaintext,
                (false, false) => keys::Sealing::KeyFile,
                (false, true) => keys::Sealing::KeyFileAndPassphrase,
            };
            let (url, created, key_file) = keys::init(&opts, sealing)?;
            println!(
                "{} store at {url}",
                if created { "created" } else { "already a" }
            );
            if let Some(k) = key_file {
                keys::tell_key_file(&k);
            }
        }
        Command::Serve(args) => serve::serve(open()?, args)?,
        Command::Apikey(cmd) => apikey_cmd(cmd, &open)?,
        Command::Policy(cmd) => return policy_cmd(cmd, &open),
        Command::Key(cmd) => key_cmd(cmd, &opts, &open)?,
        Command::Dataset(cmd) => dataset_cmd(cmd, &opts, &staging, &open)?,
        Command::Commit {
            name,
            from,
            message,
            author,
            content_only,
        } => {
            let repo = open()?;
            let author_given = author.is_some();
            let meta = CommitMeta {
                dataset: &name,
                message: &message,
                author: &author.unwrap_or_else(detafs::access::caller::current_user),
                content_only,
            };
            let record = commit_cmd(&repo, &staging, &meta, from, author_given)?;
            println!("v{}", record.version);
        }
        Command::Log {
            name,
            stray: Some(path),
            ..
        } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            cmd.error(
                clap::error::ErrorKind::UnknownArgument,
                format!("a path follows `--` in `log`: detafs log {name} -- {path}",),
            )
            .exit()
        }
        Command::Log {
            name, json, path, ..
        } => show::log(&open()?, &name, json, path.as_deref())?,
        Command::Tag {
            name,
            version,
            tag,
            json,
        } => tag_cmd(&open()?, &staging, &name, version.zip(tag), json)?,
        Command::Ls {
            name,
            version,
            path,
            json,
        } => show::ls(
            &open()?,
            &name,
            &version,
            path.as_deref().unwrap_or(""),
            json,
        )?,
        Command::Cat {
            name,
            version,
            path,
        } => show::cat(&open()?, &name, &version, &path)?,
        Command::Diff {
            name,
            from,
            to,
            format,
            content_only,
        } => {
            let format = format.format();
            diff::diff(&open()?, &staging, &name, &from, &to, format, content_only)?
        }
        Command::Export {
            name,
            version,
            dir,
            preserve_setid,
        } => export_cmd(&open, &name, &version, &dir, preserve_setid)?,
        Command::Audit { name, json } => {
            if !audit::audit(&open()?, &name, json)? {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Verify { name, json } => return verify_cmd(&open()?, name.as_deref(), json),
        Command::Retention(cmd) => retention::retention_cmd(&On::Store(&open()?, &staging), cmd)?,
        Command::Forget(args) => retention::forget(&On::Store(&open()?, &staging), &args)?,
        Command::Hold(args) => retention::hold(&On::Store(&open()?, &staging), &args)?,
        Command::Release(args) => retention::release(&On::Store(&open()?, &staging), &args)?,
        Command::Erase(args) => retention::erase(&On::Store(&open()?, &staging), &args)?,
        Command::Report(args) => retention::report(&On::Store(&open()?, &staging), &args)?,
        Command::Tier(args) => retention::tier(&open()?, &args)?,
        Command::Gc { grace, dry_run } => gc_cmd(&open()?, grace.into(), dry_run)?,
        Command::Mount(args) => {
            detafs::sys::tune_allocator();
            mount::mount(open()?, &staging, &args)?;
        }
        Command::Umount { mountpoint, lazy } => lifetime::umount(&mountpoint, lazy)?,
        Command::Restore {
            name,
            undo: Some(entry),
            ..
        } => trash::undo(&open()?, &staging, &name, entry)?,
        Command::Restore { name, paths, .. } => {
            mount::checkout(&open()?, &staging, &name, None, &paths)?;
        }
        Command::Trash(args) => trash::trash(&open()?, &staging, &args)?,
        Command::Checkout {
            name,
            version,
            paths,
        } => mount::checkout(&open()?, &staging, &name, Some(&version), &paths)?,
        Command::Status(args) => status_cmd(&open()?, &staging, &args)?,
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "detafs", &mut std::io::stdout());
        }
        Command::Man { dir } => man(&dir)?,
        Command::Reindex => reindex(&open)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// How `execute` opens the store (once a command needs it).
type Open<'a> = &'a dyn Fn() -> anyhow::Result<Repo>;

fn apikey_cmd(cmd: ApikeyCmd, open: Open) -> anyhow::Result<()> {
    match cmd {
        ApikeyCmd::Create { name, scopes, s3 } => {
            let repo = open()?;
            policy::require(&repo, Action::Admin, ALL_DATASETS)?;
            serve::create(&repo, &name, &scopes, s3)?
        }
        ApikeyCmd::List { json } => serve::list(&open()?, json)?,
        ApikeyCmd::Revoke { name } => {
            let repo = open()?;
            policy::require(&repo, Action::Admin, ALL_DATASETS)?;
            let k = repo.revoke_api_key(&name)?;
            println!("revoked {}", k.name);
        }
    }
    Ok(())
}

fn policy_cmd(cmd: PolicyCmd, open: Open) -> anyhow::Result<ExitCode> {
    match cmd {
        PolicyCmd::Show { version } => policy::show(&open()?, version)?,
        PolicyCmd::Set { file, message } => policy::set(&open()?, &file, &message)?,
        PolicyCmd::Log { json } => policy::log(&open()?, json)?,
        PolicyCmd::Check {
            user,
            action,
            resource,
        } => {
            if !policy::check(&open()?, &user, &action, &resource)? {
                return Ok(ExitCode::from(EXIT_DENIED));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn key_cmd(cmd: KeyCmd, opts: &Options, open: Open) -> anyhow::Result<()> {
    match cmd {
        KeyCmd::List { json } => keys::list(&open()?, opts, json),
        KeyCmd::Add { file, passphrase } => keys::add(&open()?, opts, file.as_deref(), passphrase),
        KeyCmd::Remove { id } => keys::remove(&open()?, &id),
    }
}

fn dataset_cmd(
    cmd: DatasetCmd,
    opts: &Options,
    staging: &std::path::Path,
    open: Open,
) -> anyhow::Result<()> {
    let admin = |name: &str| -> anyhow::Result<Repo> {
        let repo = open()?;
        policy::require(&repo, Action::Admin, &dataset_resource(name))?;
        Ok(repo)
    };
    match cmd {
        DatasetCmd::Create { name } => {
            detafs::limits::validate_name(&name)?;
            let repo = match Repo::open(opts) {
                Ok(repo) => announce(repo),
                // The first dataset of a new local store creates the store,
                // as it does for the embedded default one.
                Err(Error::NotAStore(at)) if is_local(opts) && repo::had_store_at(opts, &at) => {
                    return Err(Error::StoreGone(at).into());
                }
                Err(Error::NotAStore(_)) if is_local(opts) => {
                    let (url, _, key_file) = keys::init(opts, keys::Sealing::KeyFile)?;
                    eprintln!("created store at {url}");
                    if let Some(k) = key_file {
                        keys::tell_key_file(&k);
                    }
                    open()?
                }
                other => other.context("cannot open the store")?,
            };
            policy::require(&repo, Action::Create, &dataset_resource(&name))?;
            repo.create_dataset(&name)?;
            println!("created dataset {name}");
        }
        DatasetCmd::List { json } => show::datasets(&open()?, json)?,
        DatasetCmd::Delete { name } => {
            let repo = admin(&name)?;
            mount::check_unused(&repo, staging, &name)?;
            let d = repo.delete_dataset(&name, &detafs::access::caller::current_user())?;
            println!("deleted dataset {name} at {}", d.time);
        }
        DatasetCmd::Rename { name, new_name } => {
            let repo = admin(&name)?;
            mount::check_unused(&repo, staging, &name)?;
            repo.rename_dataset(&name, &new_name, &detafs::access::caller::current_user())?;
            println!("renamed dataset {name} to {new_name}");
        }
        DatasetCmd::Undelete { name } => {
            admin(&name)?.undelete_dataset(&name)?;
            println!("undeleted dataset {name}");
        }
    }
    Ok(())
}

/// `commit`: of a folder (`--from`), else of staging (through the mount
/// if one is up).
fn commit_cmd(
    repo: &Repo,
    staging: &std::path::Path,
    meta: &CommitMeta,
    from: Option<PathBuf>,
    author_given: bool,
) -> anyhow::Result<detafs::snapshot::Record> {
    let name = meta.dataset;
    policy::require(repo, Action::Commit, &dataset_resource(name))?;
    let Some(from) = from else {
        // Sized once the commit knows what it reads.
        let pb = bar(0, "commit");
        let record = mount::commit_staging(repo, staging, name, meta, author_given, &pb);
        drop(pb);
        return record;
    };
    let pb = bar(0, "commit");
    // Sized beside the commit, and only when the bar is drawn: a walk of a
    // million files costs seconds.
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let (shown, dir) = (pb.0.clone(), from.clone());
        std::thread::spawn(move || shown.set_length(dir_size(&dir)));
    }
    let record = commit::commit_dir(repo, meta, &from, &pb);
    drop(pb);
    let record = record?;
    mount::tell_mount(repo, staging, name);
    Ok(record)
}

/// `tag NAME VERSION TAG` makes a tag; `tag NAME` lists them.
fn tag_cmd(
    repo: &Repo,
    staging: &std::path::Path,
    name: &str,
    new: Option<(String, String)>,
    json: bool,
) -> anyhow::Result<()> {
    if let Some((version, tag)) = new {
        policy::require(repo, Action::Tag, &dataset_resource(name))?;
        let author = detafs::access::caller::current_user();
        let t = repo.create_tag(name, &version, &tag, &author)?;
        mount::tell_mount(repo, staging, name);
        println!("{} v{}", t.tag, t.version);
        return Ok(());
    }
    repo.check_dataset(name)?;
    let tags: Vec<(String, u64)> = repo
        .tags(name)?
        .into_iter()
        .map(|t| (t.tag, t.version))
        .collect();
    print_tags(tags, json)
}

/// `tag NAME`'s list, in tag-name order (from a store, or as a gateway
/// listed the versions' tags).
fn print_tags(mut tags: Vec<(String, u64)>, json: bool) -> anyhow::Result<()> {
    tags.sort();
    if json {
        let rows: Vec<_> = tags
            .iter()
            .map(|(tag, version)| serde_json::json!({"tag": tag, "version": version}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    for (tag, version) in tags.iter().filter(|_| !json) {
        println!("{tag} v{version}");
    }
    Ok(())
}

/// `man DIR`: a page per command.
fn man(dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    clap_mangen::generate_to(<Cli as clap::CommandFactory>::command(), dir)
        .with_context(|| format!("cannot write man pages into {}", dir.display()))?;
    eprintln!("wrote man pages into {} (man detafs)", dir.display());
    Ok(())
}

/// `reindex`: the local index made again from the store.
fn reindex(open: Open) -> anyhow::Result<()> {
    repo::reset_local_state(open()?).context("cannot reset the local index")?;
    let repo = open()?;
    let mut versions = 0;
    for ds in repo.datasets()? {
        for r in repo.sync(&ds)? {
            repo.index_tree(&r.tree)?;
            versions += 1;
        }
    }
    eprintln!("reindexed {versions} versions");
    Ok(())
}

/// `export`: a version's tree written into `dir`.
fn export_cmd(
    open: Open,
    name: &str,
    version: &str,
    dir: &std::path::Path,
    preserve_setid: bool,
) -> anyhow::Result<()> {
    if preserve_setid && !nix::unistd::geteuid().is_root() {
        return Err(Error::InvalidInput(
            "--preserve-setid needs root: only root may recreate setuid and setgid files".into(),
        )
        .into());
    }
    let repo = open()?;
    let record = repo.version(name, version)?;
    let pb = bar(0, "export");
    let opts = read::ExportOptions { preserve_setid };
    read::export(&repo, &record.tree, dir, opts, &pb)?;
    drop(pb);
    eprintln!("exported {name} v{} to {}", record.version, dir.display());
    Ok(())
}

/// `verify`: exit 1 if it found a problem.
fn verify_cmd(repo: &Repo, name: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let pb = bar(0, "verify");
    let report = verify::verify(repo, name, &pb)?;
    drop(pb);
    let failed = ExitCode::from(u8::from(!report.problems.is_empty()));
    if json {
        let out = serde_json::json!({
            "versions": report.versions,
            "expired": report.expired,
            "tiers": {
                "store": {"packs": report.hot.0, "bytes": report.hot.1},
                "cold": {"packs": report.cold.0, "bytes": report.cold.1},
            },
            "erased": report.erased_count,
            "erased_samples": report.erased,
            "objects": report.blobs,
            "problems": report.problems.iter().map(audit::problem_json).collect::<Vec<_>>(),
            "garbage": report.garbage.iter().map(|g| serde_json::json!({
                "key": line(g.key.as_bytes()), "size": g.size,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(failed);
    }
    // Paths and keys in problems are escaped by verify.
    for p in &report.problems {
        println!("{p}");
    }
    if report.cold.0 > 0 {
        println!(
            "tiers: {} packs ({} bytes) at the store, {} packs ({} bytes) in its colder tier",
            report.hot.0, report.hot.1, report.cold.0, report.cold.1
        );
    }
    if report.erased_count > 0 {
        println!(
            "erased (on purpose, `detafs audit` says why): {} files, e.g. {}",
            report.erased_count,
            report.erased.join(", ")
        );
    }
    for g in &report.garbage {
        let key = line(g.key.as_bytes());
        println!("garbage: {key} ({} bytes, unreachable)", g.size);
    }
    eprintln!(
        "checked {} versions ({} expired: their records only), {} objects: {} problems, {} garbage objects",
        report.versions,
        report.expired,
        report.blobs,
        report.problems.len(),
        report.garbage.len()
    );
    Ok(failed)
}

fn gc_cmd(repo: &Repo, grace: std::time::Duration, dry_run: bool) -> anyhow::Result<()> {
    policy::require(repo, Action::Admin, ALL_DATASETS)?;
    let pb = bar(0, "gc");
    let report = gc::gc(repo, grace, dry_run, &pb)?;
    drop(pb);
    let doomed = &report.doomed;
    let bytes: u64 = doomed.iter().map(|l| l.size).sum();
    let did = if dry_run { "would delete" } else { "deleted" };
    for l in doomed {
        println!("{did} {}", line(l.key.as_bytes()));
    }
    for l in &report.doomed_cold {
        println!("{did} {} (colder tier)", line(l.key.as_bytes()));
    }
    eprintln!("{did} {} unreachable objects ({bytes} bytes)", doomed.len());
    if let Some(until) = report.young_until {
        let young: u64 = report.young.iter().map(|l| l.size).sum();
        let until = humantime::format_rfc3339_seconds(until);
        eprintln!(
            "kept {} unreachable objects ({young} bytes) younger than the grace: \
             a commit still running or interrupted; deletable after {until}",
            report.young.len()
        );
    }
    Ok(())
}

fn status_cmd(repo: &Repo, staging: &std::path::Path, args: &StatusArgs) -> anyhow::Result<()> {
    let json = args.json;
    let mut changes = mount::status(repo, staging, &args.name)?;
    if args.content_only {
        changes.retain(|(tag, _)| *tag != 'T');
    }
    if json {
        let rows: Vec<_> = changes
            .iter()
            .map(|(tag, path)| serde_json::json!({"status": tag, "path": line(path)}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    for (tag, path) in changes.iter().filter(|_| !json) {
        println!("{tag} {}", line(path));
    }
    Ok(())
}

/// Opens the store (the embedded default one is made on first use).
fn open_store(opts: &Options) -> anyhow::Result<Repo> {
    Ok(announce(Repo::open(opts).context("cannot open the store")?))
}

/// The first command on a new machine creates the embedded store and its
/// key file: say so once, with what to back up.
fn announce(repo: Repo) -> Repo {
    if let Some(key_file) = repo.created_key_file() {
        eprintln!(
            "created the embedded store at {}",
            repo::default_store().display()
        );
        keys::tell_key_file(key_file);
    }
    repo
}

/// A store in a local folder (a path or file://), not a service.
fn is_local(opts: &Options) -> bool {
    opts.store
        .as_deref()
        .is_none_or(|u| !u.contains("://") || u.starts_with("file://"))
}

/// Bytes under a directory, for the progress bar (0 if unreadable: the commit
/// itself reports errors).
fn dir_size(dir: &std::path::Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}
