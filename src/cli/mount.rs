//! `detafs mount`, `detafs umount`, and committing staging from the CLI.

use super::lifetime::{self, is_mounted};
use anyhow::{Context, bail};
use detafs::Error;
use detafs::access::trail::Trail;
use detafs::commit::CommitMeta;
use detafs::fs::{MountFs, MountOptions};
use detafs::fuse::{SessionOptions, serve};
use detafs::repo::Repo;
use detafs::snapshot::Record;
use detafs::staging::{Staging, staging_dir};
use std::collections::HashSet;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Written next to a staging area while a mount serves it, so `detafs commit`
/// from another shell can commit through the mount instead.
const MOUNT_FILE: &str = "mounted-at";
/// A read-only mount's marker: this, then a hash of its mount point.
const RO_MOUNT_FILE: &str = "mounted-ro-";

#[derive(clap::Args)]
pub struct MountArgs {
    /// Dataset name.
    pub name: String,
    /// Directory to mount it on.
    pub mountpoint: PathBuf,
    /// Detach once the mount is ready (prints the daemon's pid).
    #[arg(long)]
    pub daemon: bool,
    /// Let other users access the mount (needs user_allow_other for non-root).
    #[arg(long)]
    pub allow_other: bool,
    /// No staging/: versions only.
    #[arg(long)]
    pub read_only: bool,
    /// Mount even on a folder that holds files (hidden while mounted).
    #[arg(long)]
    pub nonempty: bool,
    /// How often to look for versions committed elsewhere.
    #[arg(long, default_value = "2s")]
    pub poll_interval: humantime::Duration,
}

pub(super) fn staging_root(repo: &Repo, root: &Path, name: &str) -> anyhow::Result<PathBuf> {
    Ok(staging_dir(root, repo, name)?)
}

/// Refuses to delete a dataset this host mounts (read-write or read-only)
/// or whose staging holds changes a deletion would hide.
pub fn check_unused(repo: &Repo, staging_base: &Path, name: &str) -> anyhow::Result<()> {
    repo.check_dataset(name)?;
    let dir = staging_root(repo, staging_base, name)?;
    // Markers of mounts that are still live (a killed daemon leaves one).
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        if file != MOUNT_FILE && !file.starts_with(RO_MOUNT_FILE) {
            continue;
        }
        let Ok(at) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        if is_mounted(Path::new(&at)) {
            bail!("dataset {name} is mounted at {at}: unmount it first (detafs umount {at})");
        }
    }
    match open_staging(repo, staging_base, name)? {
        Owner::Mount(at) => bail!(
            "dataset {name} is mounted at {}: unmount it first",
            at.display()
        ),
        Owner::Here(st) if !st.status(repo)?.is_empty() => bail!(
            "staging of {name} holds changes (detafs status {name}): commit them, or discard them with detafs restore {name}"
        ),
        Owner::Here(_) => Ok(()),
    }
}

/// One read-write mount per dataset on a host (it owns staging): a second
/// is refused with where the first one is. One whose daemon is gone is
/// detached; one detached lazily whose daemon still runs is named.
fn refuse_second_mount(dir: &Path, name: &str) -> anyhow::Result<()> {
    let marker = dir.join(MOUNT_FILE);
    let Ok(at) = std::fs::read_to_string(&marker) else {
        return Ok(());
    };
    let at_path = Path::new(&at);
    if lifetime::dead(at_path) {
        lifetime::detach_dead(at_path)?;
        eprintln!("detached {at}, a mount of {name} whose daemon is gone");
        return Ok(());
    }
    if is_mounted(at_path) {
        bail!(
            "dataset {name} is already mounted read-write at {at} (one read-write mount per dataset on a host: it owns staging); use that mount, or mount this one with --read-only"
        );
    }
    match lifetime::daemon(&marker) {
        Some(_) => Err(lifetime::held(&marker, name)),
        None => Ok(()),
    }
}

pub fn mount(repo: Repo, staging_base: &Path, args: &MountArgs) -> anyhow::Result<()> {
    let mp = &args.mountpoint;
    if lifetime::dead(mp) {
        lifetime::detach_dead(mp)?;
        eprintln!("detached {}, a mount whose daemon is gone", mp.display());
    }
    let meta = match std::fs::metadata(mp) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "mount point {} does not exist: create it first (mkdir -p {})",
            mp.display(),
            mp.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("mount point {}", mp.display())),
    };
    if !meta.is_dir() {
        bail!("mount point {} is not a directory", mp.display());
    }
    if is_mounted(mp) {
        bail!("{} is already a mount point", mp.display());
    }
    // A mount over files hides them until it ends: only when asked for.
    if !args.nonempty
        && std::fs::read_dir(mp)
            .with_context(|| format!("mount point {}", mp.display()))?
            .next()
            .is_some()
    {
        bail!(
            "mount point {} is not empty: its files would be hidden while mounted (use an empty folder, or --nonempty)",
            mp.display()
        );
    }
    repo.check_dataset(&args.name)?;
    if !args.read_only {
        // Commits through this mount rely on conditional create.
        repo.check_store(true)?;
    }
    let dir = staging_root(&repo, staging_base, &args.name)?;
    if !args.read_only {
        refuse_second_mount(&dir, &args.name)?;
    }
    if args.daemon {
        return daemonize(&repo, staging_base, args);
    }
    let staging = if args.read_only {
        None
    } else {
        match Staging::open(&repo, &dir, &args.name) {
            Err(Error::StagingBusy(_)) => {
                refuse_second_mount(&dir, &args.name)?;
                return Err(lifetime::held(&dir.join(MOUNT_FILE), &args.name));
            }
            other => Some(other?),
        }
    };
    let files = mount_files(&dir, args)?;
    let opts = MountOptions {
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        log: std::env::var_os(super::log::DAEMON_LOG_ENV).map(PathBuf::from),
    };
    let trail = Trail::open(&files.audit, AUDIT_TRAIL_BYTES)?;
    let fs = Arc::new(MountFs::new(repo, &args.name, staging, opts)?.with_trail(trail));
    let session = SessionOptions {
        allow_other: args.allow_other,
        fs_name: format!("detafs:{}", args.name),
        poll_interval: args.poll_interval.into(),
    };
    let marker = files.marker;
    let absolute = std::path::absolute(mp)?;
    let served = serve(fs.clone(), mp, &session, || {
        let _ = std::fs::write(&marker, absolute.as_os_str().as_encoded_bytes());
        lifetime::write_pid(&marker, mp);
        eprintln!("mounted {} at {}", args.name, mp.display());
    })
    .map_err(|e| {
        let denied = e.kind() == std::io::ErrorKind::PermissionDenied;
        let hint = if denied && !nix::unistd::geteuid().is_root() {
            "; on this host only root may mount FUSE file systems (/dev/fuse is root-only, \
             or fusermount3 is not allowed for you): ask an administrator, or read without \
             a mount (detafs ls, cat, export; Python's detafs:// paths, docs/python.md)"
        } else {
            ""
        };
        anyhow::Error::new(e).context(format!("cannot mount at {}{hint}", mp.display()))
    });
    fs.flush_trail();
    super::log::flush();
    let _ = std::fs::remove_file(&marker);
    lifetime::remove_pid(&marker);
    served?;
    Ok(())
}

/// A daemon's own files beside the dataset's staging area.
struct MountFiles {
    /// Its mount point, while it is live: how commands find it.
    marker: PathBuf,
    log: PathBuf,
    /// Its access decisions, one JSON line each (under a policy).
    audit: PathBuf,
}

/// Where a mount's bound audit trail goes once it reaches this size (the
/// file before it is kept as `audit.jsonl.1`).
const AUDIT_TRAIL_BYTES: u64 = 64 << 20;

/// The read-write mount's files (one per dataset), or each read-only
/// mount's, named for its mount point.
fn mount_files(dir: &Path, args: &MountArgs) -> anyhow::Result<MountFiles> {
    std::fs::create_dir_all(dir)?;
    if !args.read_only {
        return Ok(MountFiles {
            marker: dir.join(MOUNT_FILE),
            log: dir.join("mount.log"),
            audit: dir.join("audit.jsonl"),
        });
    }
    let at = std::path::absolute(&args.mountpoint)?;
    let place = detafs::id::digest_hex(at.as_os_str().as_encoded_bytes());
    let place = &place[..16];
    Ok(MountFiles {
        marker: dir.join(format!("{RO_MOUNT_FILE}{place}")),
        log: dir.join(format!("mount-ro-{place}.log")),
        audit: dir.join(format!("audit-ro-{place}.jsonl")),
    })
}

/// Starts the mount as a detached child and returns once it is live.
fn daemonize(repo: &Repo, staging_base: &Path, args: &MountArgs) -> anyhow::Result<()> {
    let log_path = mount_files(&staging_root(repo, staging_base, &args.name)?, args)?.log;
    // Appended: an earlier mount's messages stay (README.md says where).
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)?;
    let start = log.metadata()?.len();
    let argv: Vec<&std::ffi::OsString> =
        super::args().iter().filter(|a| *a != "--daemon").collect();
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.args(&argv[1..])
        .env(super::log::DAEMON_LOG_ENV, &log_path)
        .envs(super::keys::prompted().map(|p| ("DETAFS_PASSWORD", p)))
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    detafs::sys::in_new_session(&mut cmd);
    let mut child = cmd.spawn()?;
    // Only what this daemon wrote: the log is appended to.
    let ours = || {
        let log = std::fs::read(&log_path).unwrap_or_default();
        String::from_utf8_lossy(
            log.get(detafs::limits::to_usize(start)..)
                .unwrap_or_default(),
        )
        .into_owned()
    };
    loop {
        // Ready once it says so (`serve`'s `ready`): its connections are
        // all mounted (versions/ on its own is mounted inside the first).
        if ours().contains(&format!("mounted {} at ", args.name)) && is_mounted(&args.mountpoint) {
            println!(
                "mounted {} at {} (pid {}, log {})",
                args.name,
                args.mountpoint.display(),
                child.id(),
                log_path.display()
            );
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("mount daemon exited ({status}): {}", ours().trim());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A commit through a mount failed; its errno tells the exit code (EBUSY: a
/// conflict, ENODATA: nothing to commit), as without a mount.
#[derive(Debug)]
pub struct ThroughMount {
    mount: PathBuf,
    pub errno: i32,
    reason: String,
}

impl std::fmt::Display for ThroughMount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "commit through the mount at {} failed: {}",
            self.mount.display(),
            self.reason
        )
    }
}

impl std::error::Error for ThroughMount {}

/// `detafs commit NAME -m MSG` without `--from`: commits staging, through
/// the mount when one is serving it.
pub fn commit_staging(
    repo: &Repo,
    staging_base: &Path,
    name: &str,
    meta: &CommitMeta,
    author_given: bool,
    progress: &dyn detafs::progress::Progress,
) -> anyhow::Result<Record> {
    meta.check()?;
    repo.check_dataset(name)?;
    match open_staging(repo, staging_base, name)? {
        Owner::Here(st) => Ok(detafs::commit::staged::commit_staging(
            repo,
            meta,
            || Ok(&*st),
            HashSet::new,
            progress,
        )?),
        Owner::Mount(mp) => {
            if meta.content_only {
                return Err(Error::InvalidInput(format!(
                    "--content-only cannot be asked of a commit through the mount at {}: commit its staging with `detafs commit {name} --from {}/staging --content-only`, or restore the time-only files (`detafs status {name}` lists them as T)",
                    mp.display(),
                    mp.display()
                ))
                .into());
            }
            if author_given {
                return Err(Error::InvalidInput(format!(
                    "--author cannot be set for a commit through the mount at {}: it records the user who commits",
                    mp.display()
                ))
                .into());
            }
            // Read and write: the handle reads back the version its write made.
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(mp.join(".detafs/commit"))
                .with_context(|| format!("cannot reach the mount at {}", mp.display()))?;
            let done = std::sync::atomic::AtomicBool::new(false);
            // Ctrl-C asks the daemon to cancel (the write waits on it); a
            // second one ends this process at once.
            let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
            use signal_hook::{consts::SIGINT, flag};
            let hooks = [
                flag::register_conditional_shutdown(SIGINT, 130, interrupted.clone())?,
                flag::register(SIGINT, interrupted.clone())?,
            ];
            let written = std::thread::scope(|s| {
                s.spawn(|| watch_progress(&mp, &done, progress));
                // The write waits in the kernel until the daemon answers; a
                // thread there would run the handler only after it. So it
                // is written on a thread that blocks SIGINT, and the signal
                // comes to one that can act on it.
                let writer = s.spawn(|| {
                    block_sigint();
                    let written = f.write_all(meta.message.as_bytes());
                    done.store(true, std::sync::atomic::Ordering::Relaxed);
                    written
                });
                cancel_on(&mp, &done, &interrupted);
                writer.join().expect("the commit's writer does not panic")
            });
            for id in hooks {
                signal_hook::low_level::unregister(id);
            }
            let interrupted = interrupted.load(std::sync::atomic::Ordering::Relaxed);
            if let Err(e) = written {
                if interrupted && e.raw_os_error() == Some(libc::ECANCELED) {
                    return Err(Interrupted(format!(
                        "interrupted: the commit through the mount at {} was cancelled before it was recorded; nothing was committed, staging is as it was",
                        mp.display()
                    ))
                    .into());
                }
                let reason =
                    std::fs::read_to_string(mp.join(".detafs/last-error")).unwrap_or_default();
                let reason = reason.trim();
                return Err(ThroughMount {
                    mount: mp,
                    errno: e.raw_os_error().unwrap_or(0),
                    reason: if reason.is_empty() {
                        e.to_string()
                    } else {
                        reason.to_string()
                    },
                }
                .into());
            }
            let mut made = String::new();
            f.seek(std::io::SeekFrom::Start(0))
                .and_then(|_| f.read_to_string(&mut made))
                .with_context(|| format!("cannot read back the commit at {}", mp.display()))?;
            let version = serde_json::from_str::<serde_json::Value>(&made)
                .ok()
                .and_then(|e| e["version"].as_u64())
                .with_context(|| {
                    format!(
                        "the mount at {} did not say which version it made",
                        mp.display()
                    )
                })?;
            if interrupted {
                // Ctrl-C came past the point of no return: say what landed.
                eprintln!(
                    "detafs: interrupted too late to cancel: v{version} was committed (detafs log {name})"
                );
            }
            repo.sync(name)?
                .into_iter()
                .find(|r| r.version == version)
                .with_context(|| format!("v{version} is not in the store"))
        }
    }
}

/// A commit the user interrupted (Ctrl-C), cancelled: exit 130, as a shell
/// gives a command ended by SIGINT.
#[derive(Debug)]
pub struct Interrupted(String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// Blocks SIGINT for the calling thread (others of the process take it).
fn block_sigint() {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None);
}

/// Once `interrupted` (Ctrl-C), asks the mount at `mp` to cancel its commit
/// (`.detafs/cancel`), until `done`.
fn cancel_on(
    mp: &Path,
    done: &std::sync::atomic::AtomicBool,
    interrupted: &std::sync::atomic::AtomicBool,
) {
    use std::sync::atomic::Ordering::Relaxed;
    while !done.load(Relaxed) {
        if interrupted.load(Relaxed) {
            if let Err(e) = request(mp, "cancel", b"cancel\n") {
                eprintln!("detafs: could not ask the mount to cancel: {e}");
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Tells `progress` what the mount at `mp` says of its commit under way
/// (`.detafs/progress`), until `done`.
fn watch_progress(
    mp: &Path,
    done: &std::sync::atomic::AtomicBool,
    progress: &dyn detafs::progress::Progress,
) {
    let file = mp.join(".detafs/progress");
    let mut told = 0;
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(200));
        let Ok(text) = std::fs::read(&file) else {
            return;
        };
        let Ok(now) = serde_json::from_slice::<serde_json::Value>(&text) else {
            return;
        };
        if let (Some(bytes), Some(total)) =
            (now["bytes_done"].as_u64(), now["bytes_total"].as_u64())
        {
            progress.set_total(total);
            progress.advance(bytes.saturating_sub(told));
            told = told.max(bytes);
        }
    }
}

/// `detafs restore` (`version` None: as the base version) and `detafs
/// checkout`: staged `paths` (none: all) become as in that version; through
/// the mount's control file when one is serving staging.
pub fn checkout(
    repo: &Repo,
    staging_base: &Path,
    name: &str,
    version: Option<&str>,
    paths: &[String],
) -> anyhow::Result<()> {
    repo.check_dataset(name)?;
    let all = [".".to_string()];
    let paths = if paths.is_empty() { &all[..] } else { paths };
    match open_staging(repo, staging_base, name)? {
        Owner::Here(st) => {
            let names = paths
                .iter()
                .map(|p| detafs::staging::path_names(p))
                .collect::<detafs::Result<Vec<_>>>()?;
            let record = match version {
                Some(spec) => repo.version(name, spec)?,
                None => {
                    let base = st.base_version()?;
                    repo.sync(name)?
                        .into_iter()
                        .find(|r| r.version == base)
                        .ok_or_else(|| {
                            Error::InvalidInput("staging has no version to restore from".into())
                        })?
                }
            };
            let what = match version {
                Some(_) => format!("checkout v{}", record.version),
                None => "restore".into(),
            };
            st.checkout(repo, &record.tree, &names, &what)?;
            Ok(())
        }
        Owner::Mount(mp) => {
            let (file, order) = match version {
                Some(v) => ("checkout", format!("{v}\n{}\n", paths.join("\n"))),
                None => ("restore", format!("{}\n", paths.join("\n"))),
            };
            ask(&mp, file, order.as_bytes())
        }
    }
}

/// A request through the mount at `mp`'s control file `file`, its
/// refusal told with the mount's reason.
pub(super) fn ask(mp: &Path, file: &str, text: &[u8]) -> anyhow::Result<()> {
    request(mp, file, text).map_err(|e| {
        let reason = std::fs::read_to_string(mp.join(".detafs/last-error")).unwrap_or_default();
        anyhow::anyhow!(
            "{file} through the mount at {} failed: {}",
            mp.display(),
            match reason.trim() {
                "" => e.to_string(),
                r => r.to_string(),
            }
        )
    })
}

/// After a change to dataset `name` made beside a running read-write mount
/// of it (`commit --from`, `tag`): the mount shows it when this returns
/// (`.detafs/refresh`), not one poll later. Best effort: a mount that
/// cannot be told finds it at its next poll.
pub fn tell_mount(repo: &Repo, staging_base: &Path, name: &str) {
    let Ok(dir) = staging_root(repo, staging_base, name) else {
        return;
    };
    let Ok(at) = std::fs::read_to_string(dir.join(MOUNT_FILE)) else {
        return;
    };
    if !is_mounted(Path::new(&at)) {
        return;
    }
    if let Err(e) = request(Path::new(&at), "refresh", b"refresh\n") {
        eprintln!("detafs: the mount at {at} shows this at its next poll ({e})");
    }
}

/// Writes `text` to control file `.detafs/FILE` of the mount at `mp` as
/// one request, then reads the handle back: the read is the request's
/// stated end, carries it out and fails as it did (docs/semantics.md).
fn request(mp: &Path, file: &str, text: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(mp.join(".detafs").join(file))?;
    f.write_all(text)?;
    let mut answer = String::new();
    f.read_to_string(&mut answer)?;
    Ok(())
}

/// Paths changed in staging (`detafs status NAME`), not escaped.
pub fn status(
    repo: &Repo,
    staging_base: &Path,
    name: &str,
) -> anyhow::Result<Vec<(char, Vec<u8>)>> {
    repo.check_dataset(name)?;
    match open_staging(repo, staging_base, name)? {
        Owner::Here(st) => Ok(st.status(repo)?),
        Owner::Mount(mp) => Ok(mount_status(&mp)?),
    }
}

/// `.detafs/status` of the mount at `mp`, read back.
pub fn mount_status(mp: &Path) -> anyhow::Result<Vec<(char, Vec<u8>)>> {
    let file = mp.join(".detafs/status");
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    text.lines()
        .map(|l| {
            let tag = l.chars().next();
            let path = l.get(2..).and_then(detafs::escape::unescape);
            tag.zip(path)
                .with_context(|| format!("{} has a line it never writes: {l:?}", file.display()))
        })
        .collect()
}

/// A dataset's staging as a command finds it: this process owns it now, or
/// a mount serves it (commands go through its control files).
pub enum Owner {
    Here(Box<Staging>),
    Mount(PathBuf),
}

pub fn open_staging(repo: &Repo, staging_base: &Path, name: &str) -> anyhow::Result<Owner> {
    let dir = staging_root(repo, staging_base, name)?;
    match Staging::open(repo, &dir, name) {
        Ok(st) => Ok(Owner::Here(Box::new(st))),
        Err(Error::StagingBusy(_)) => {
            let marker = dir.join(MOUNT_FILE);
            match std::fs::read_to_string(&marker).map(PathBuf::from) {
                Ok(at) if is_mounted(&at) && !lifetime::dead(&at) => Ok(Owner::Mount(at)),
                _ => Err(lifetime::held(&marker, name)),
            }
        }
        Err(e) => Err(e.into()),
    }
}

pub fn default_staging() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("detafs/staging")
}
