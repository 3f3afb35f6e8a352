//! `.detafs/`: control files. Contents are generated when a file is opened and
//! served with direct I/O and zero TTL, so readers never see stale status.

use super::{Attr, DirEntry, Handle, MountFs, Opened};
use crate::error::{Error, FsError, Result};
use crate::snapshot::Kind;
use crate::snapshot::Mtime;
use crate::snapshot::Record;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ino::Ino;
use super::ino::files::{
    BASE, CANCEL, CHECKOUT, COMMIT, HEALTH, LAST_COMMIT, LAST_ERROR, LOG, PROGRESS, REFRESH,
    RESTORE, STATUS, UNDO,
};
use super::orders::{Due, Order, Process};

/// `.detafs/`'s state.
pub(super) struct Control {
    pub(super) last_error: Mutex<String>,
    /// The log entry of the last commit made through this mount.
    pub(super) last_commit: Mutex<Vec<u8>>,
    /// Commits through this mount asked for: the one running, those
    /// waiting for their turn.
    pub(super) committing: Mutex<Vec<UnderWay>>,
    /// The number of the next commit asked for (`.detafs/progress`'s `id`).
    next_commit: std::sync::atomic::AtomicU64,
    /// Processes that cancelled their commits before the kernel let any
    /// reach the daemon (it lets one write to `.detafs/commit` in at a
    /// time): a commit they ask for is withdrawn when it comes.
    withdrawn: Mutex<Vec<Process>>,
    /// Control files' content as last sized, by inode (`attr`).
    pub(super) texts: Mutex<HashMap<u64, SizedText>>,
    /// Requests carried out in order (`orders.rs`).
    pub(super) sequence: super::orders::Sequence,
}

impl Control {
    /// Control of a mount whose held work runs on `store`'s pool.
    pub(super) fn new(store: Arc<crate::store::Store>) -> Result<Control> {
        Ok(Control {
            last_error: Mutex::default(),
            last_commit: Mutex::default(),
            committing: Mutex::default(),
            next_commit: Default::default(),
            withdrawn: Mutex::default(),
            texts: Mutex::default(),
            sequence: super::orders::Sequence::start(move |job| store.runtime().spawn_work(job))
                .map_err(|e| Error::io("starting the control files' thread", e))?,
        })
    }
}

/// A control file's content, and when it was made.
pub(super) type SizedText = (Instant, Arc<Vec<u8>>);

/// How long a control file's content, once made, is what `stat` and
/// reads see.
const SIZED_TEXT_LIFE: Duration = Duration::from_secs(1);

const FILES: [(&[u8], u64); 13] = [
    (b"commit", COMMIT),
    (b"status", STATUS),
    (b"log", LOG),
    (b"health", HEALTH),
    (b"last-error", LAST_ERROR),
    (b"last-commit", LAST_COMMIT),
    (b"restore", RESTORE),
    (b"checkout", CHECKOUT),
    (b"progress", PROGRESS),
    (b"base", BASE),
    (b"cancel", CANCEL),
    (b"refresh", REFRESH),
    (b"undo", UNDO),
];

pub(super) fn is_control(ino: u64) -> bool {
    matches!(Ino::of(ino), Ino::ControlFile(_))
}

pub(super) fn entries() -> Vec<DirEntry> {
    FILES
        .iter()
        .map(|(name, ino)| DirEntry {
            ino: *ino,
            kind: Kind::File,
            name: name.to_vec(),
        })
        .collect()
}

pub(super) fn lookup(fs: &MountFs, name: &[u8]) -> Result<Attr> {
    let (_, ino) = FILES
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| super::not_found(name))?;
    attr(fs, *ino)
}

/// A control file's attributes. Its size is that of the content an open
/// now would give, so tools that read as many bytes as `stat` says (pandas,
/// DuckDB) get all of it; content is made again at each open.
pub(super) fn attr(fs: &MountFs, ino: u64) -> Result<Attr> {
    let size = match ino {
        COMMIT | RESTORE | CHECKOUT | CANCEL | REFRESH | UNDO => 0,
        // Their size would tell how many versions there are, seen or not:
        // each caller's content is made at its open. (A shut mount, where
        // the kernel reads without opening, tells everyone alike that it
        // is shut: there health is one text, sized.)
        LOG if fs.gated() => 0,
        HEALTH if fs.gated() && !fs.opens_skipped() => 0,
        _ => fresh_text(fs, ino)?.len() as u64,
    };
    // Where the kernel keeps control files' pages (`unopened.rs`), it drops
    // them when the mtime moves: there it moves at every look.
    let mtime = match ino {
        LOG | LAST_COMMIT if !fs.opens_skipped() => fs.latest_time(),
        _ => Mtime::now(),
    };
    Ok(Attr {
        ino,
        kind: Kind::File,
        size,
        // Committing and the staged paths are the mount owner's alone; the
        // history and health are for every reader of the mount. The commit
        // file reads back what its handle's last write committed.
        // Under a policy, it decides who may (`open`), not the owner's modes.
        perm: match (ino, fs.gated()) {
            (COMMIT, false) => 0o600,
            (COMMIT, true) => 0o666,
            // Readable too: a read of the handle a request was written
            // through carries it out and says how it went (`orders.rs`).
            (RESTORE | CHECKOUT | CANCEL | REFRESH | UNDO, false) => 0o600,
            (RESTORE | CHECKOUT | CANCEL | REFRESH | UNDO, true) => 0o666,
            (STATUS | LAST_ERROR | PROGRESS, false) => 0o400,
            _ => 0o444,
        },
        nlink: 1,
        uid: fs.opts.uid,
        gid: fs.opts.gid,
        mtime,
        atime: mtime,
        ctime: mtime,
        rdev: 0,
        ttl: Duration::ZERO,
    })
}

/// A control file's content as made within the last second, else made
/// now: so a lookup, `stat`, open, `fstat` and read in a row agree
/// (health's figures change from one second to the next). Status is
/// always exact (made again whenever staging changed); a commit through
/// the mount forgets the rest (`forget_texts`).
fn fresh_text(fs: &MountFs, ino: u64) -> Result<Arc<Vec<u8>>> {
    if matches!(ino, STATUS | PROGRESS | BASE) {
        return Ok(Arc::new(content(fs, ino)?));
    }
    if let Some((at, text)) = fs.control.texts.lock().get(&ino)
        && at.elapsed() < SIZED_TEXT_LIFE
    {
        return Ok(text.clone());
    }
    let text = Arc::new(content(fs, ino)?);
    fs.control
        .texts
        .lock()
        .insert(ino, (Instant::now(), text.clone()));
    Ok(text)
}

/// What a read of a control file the kernel opened without asking sees
/// (`unopened.rs`): what an open for reading would hold now.
/// Under a policy (one set after the mount started: it refuses
/// everything) only the health is read.
pub(super) fn text_now(fs: &MountFs, ino: u64) -> Result<Arc<Vec<u8>>> {
    match ino {
        HEALTH => fresh_text(fs, ino),
        _ if fs.gated() => Err(shut_out()),
        COMMIT | RESTORE | CHECKOUT => Ok(Arc::default()),
        _ => fresh_text(fs, ino),
    }
}

/// After a commit through the mount: `last-commit`, `last-error` and the
/// log are read anew.
fn forget_texts(fs: &MountFs) {
    fs.control.texts.lock().clear();
}

fn content(fs: &MountFs, ino: u64) -> Result<Vec<u8>> {
    Ok(match ino {
        STATUS => status(fs)?,
        LOG => log(fs),
        HEALTH => health(fs, None),
        LAST_ERROR => fs.control.last_error.lock().clone().into_bytes(),
        LAST_COMMIT => fs.control.last_commit.lock().clone(),
        PROGRESS => progress(fs),
        BASE => base(fs)?,
        _ => Vec::new(),
    })
}

pub(super) fn open(
    fs: &MountFs,
    ino: u64,
    writing: bool,
    caller: &super::Caller,
    judge: Option<&super::Judge>,
) -> Result<Opened> {
    let uid = caller.uid;
    // The kernel checks the modes above (default_permissions); checked here
    // too, so the core holds without it. Under a policy, it decides.
    let staged = matches!(
        ino,
        COMMIT
            | STATUS
            | LAST_ERROR
            | RESTORE
            | CHECKOUT
            | PROGRESS
            | BASE
            | LAST_COMMIT
            | CANCEL
            | REFRESH
            | UNDO
    );
    match judge {
        Some(j) if staged && !j.may_commit() => {
            return Err(Error::fs(
                FsError::Denied,
                format!("the policy does not let you commit to {}", fs.dataset),
            ));
        }
        Some(j) if matches!(ino, LOG | HEALTH) && !writing => {
            let text = match ino {
                LOG => j.log(),
                _ => health(fs, Some(j)),
            };
            return Ok(Opened {
                fh: fs.add_handle(Handle::Text(Arc::new(text))),
                keep_cache: false,
                direct_io: true,
                flush: false,
                backing: None,
            });
        }
        Some(_) => {}
        None if staged && ino != BASE && ino != LAST_COMMIT && uid != fs.opts.uid && uid != 0 => {
            return Err(Error::fs(
                FsError::Denied,
                "only the mount's owner may commit, change or see staged changes",
            ));
        }
        None => {}
    }
    let handle = match (ino, writing) {
        (COMMIT, true) => Handle::Commit(Arc::default()),
        (RESTORE | CHECKOUT | CANCEL | REFRESH | UNDO, true) => {
            return Ok(Opened {
                // Under a policy, the request is judged as its writer sees.
                fh: fs.add_handle(Handle::Order(
                    ino,
                    Arc::new(super::orders::Order::opened_by(caller.pid)),
                    judge.is_some().then_some(*caller),
                )),
                // Its writer's closes are checked (`orders.rs`).
                keep_cache: false,
                direct_io: true,
                flush: true,
                backing: None,
            });
        }
        (RESTORE | CHECKOUT | CANCEL | REFRESH | UNDO, false) => Handle::Text(Arc::default()),
        (_, true) => {
            return Err(Error::fs(
                FsError::NotPermitted,
                ".detafs/ files are read-only",
            ));
        }
        _ => Handle::Text(fresh_text(fs, ino)?),
    };
    Ok(Opened {
        fh: fs.add_handle(handle),
        keep_cache: false,
        direct_io: true,
        flush: false,
        backing: None,
    })
}

/// `echo MESSAGE > .detafs/commit` by process `pid`: returns once the
/// version is durable.
pub(super) fn commit(fs: &MountFs, data: &[u8], uid: u32, pid: u32) -> Result<Record> {
    let message = String::from_utf8_lossy(data);
    match fs.commit_staging(&message, uid, pid) {
        Ok(record) => {
            tracing::info!("committed v{} ({})", record.version, record.message);
            fs.control.last_error.lock().clear();
            *fs.control.last_commit.lock() = record.log_line(false);
            forget_texts(fs);
            Ok(record)
        }
        Err(e) => failed(fs, e),
    }
}

/// A request at the end of its open (`orders.rs`), carried out:
/// `.detafs/last-error` then says why it failed, or nothing.
pub(super) fn carry_out(
    fs: &MountFs,
    ino: u64,
    due: Due,
    caller: Option<&super::Caller>,
) -> Result<()> {
    let res = match due {
        Due::Nothing => return Ok(()),
        Due::Void(why) => Err(Error::InvalidInput(why)),
        Due::Act(text, writer) => order(fs, ino, &text, writer, caller),
    };
    match res {
        Ok(()) => {
            fs.control.last_error.lock().clear();
            forget_texts(fs);
            Ok(())
        }
        Err(e) => failed(fs, e),
    }
}

/// A read of a request's handle: the request written since the last
/// read is carried out now, in order with the others (`orders.rs`), and
/// the read answers `done` or fails as it did, once the kernel was told
/// what changed; with nothing written since, the read finds the end.
pub(super) fn read_order(
    fs: &Arc<MountFs>,
    ino: u64,
    order: Arc<Order>,
    caller: Option<super::Caller>,
) -> Result<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let job_fs = fs.clone();
    fs.control.sequence.queue(move || {
        let res = match order.take() {
            Due::Nothing => Ok(false),
            due => carry_out(&job_fs, ino, due, caller.as_ref()).map(|()| true),
        };
        let _ = tx.send(res);
    });
    let acted = rx
        .recv()
        .map_err(|_| Error::InvalidInput("the request was not carried out".into()))??;
    if !acted {
        return Ok(Vec::new());
    }
    fs.settle_kernel();
    Ok(b"done\n".to_vec())
}

/// A request to `.detafs/restore` (paths, one per line; `.` for all) or
/// `.detafs/checkout` (a version, then paths; none for all): those paths of
/// staging become as in the base version, or in that version.
fn order(
    fs: &MountFs,
    ino: u64,
    data: &[u8],
    process: Option<Process>,
    caller: Option<&super::Caller>,
) -> Result<()> {
    match ino {
        CANCEL => return cancel(fs, data, process),
        // A change made beside the mount (`detafs commit --from`, `tag`):
        // shown when the writer's close returns, not a poll later.
        REFRESH => return fs.poll(),
        UNDO => return fs.undo(undo_entry(data)?),
        _ => {}
    }
    let text =
        std::str::from_utf8(data).map_err(|_| Error::InvalidInput("paths must be UTF-8".into()))?;
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let version = match ino {
        CHECKOUT => Some(lines.next().ok_or_else(|| {
            Error::InvalidInput("write a version, then the paths to check out (none: all)".into())
        })?),
        _ => None,
    };
    let mut paths: Vec<&str> = lines.collect();
    if paths.is_empty() {
        if ino == RESTORE {
            return Err(Error::InvalidInput(
                "write the paths to restore, one per line, or . for all".into(),
            ));
        }
        paths.push(".");
    }
    fs.checkout(version, &paths, caller)
}

/// A request to `.detafs/undo`: empty for the newest entry of the
/// trash, or an entry's number (`detafs trash NAME`).
fn undo_entry(data: &[u8]) -> Result<Option<u64>> {
    let text = std::str::from_utf8(data).unwrap_or("?").trim();
    match text {
        "" => Ok(None),
        n => n.parse().map(Some).map_err(|_| {
            Error::InvalidInput(format!(
                "write nothing (the last restore or checkout) or an entry of detafs trash to .detafs/undo, not {}",
                crate::escape::line(text.as_bytes())
            ))
        }),
    }
}

/// A commit (or restore) through the mount failed with `e`:
/// `.detafs/last-error` says why.
pub(super) fn failed<T>(fs: &MountFs, e: Error) -> Result<T> {
    tracing::warn!("{e}");
    // One line, whatever names the error quotes.
    *fs.control.last_error.lock() = format!("{}\n", crate::escape::line(e.to_string().as_bytes()));
    forget_texts(fs);
    Err(e)
}

/// `.detafs/status`: one change, one line, escaped (`escape::unescape`
/// reads it back).
fn status(fs: &MountFs) -> Result<Vec<u8>> {
    let (_, lines) = fs.staging.status()?;
    let mut out = String::new();
    for (tag, path) in lines.iter() {
        out.push_str(&format!("{tag} {}\n", crate::escape::line(path)));
    }
    Ok(out.into_bytes())
}

/// `.detafs/cancel`: a request names the commits it cancels: the number
/// `.detafs/progress` gives one (`id`), or, for any other text, those
/// asked for by the process that writes it (Ctrl-C of `detafs commit`).
/// Each stops if it has not reached its record yet (its writer gets
/// ECANCELED, staging stays as it was); one still waiting for its turn is
/// withdrawn; past its record it completes. No other commit is touched.
fn cancel(fs: &MountFs, text: &[u8], process: Option<Process>) -> Result<()> {
    let named = std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok());
    let committing = fs.control.committing.lock();
    let mut hit = committing
        .iter()
        .filter(|c| match named {
            Some(id) => c.id == id,
            None => process.is_some() && c.process == process,
        })
        .peekable();
    if hit.peek().is_some() {
        hit.for_each(|c| c.progress.cancel());
        return Ok(());
    }
    match (named, process) {
        (Some(id), _) => Err(Error::InvalidInput(format!(
            "no commit {id} is under way through this mount"
        ))),
        // Its commit may still wait in the kernel behind another one.
        (None, Some(p)) => {
            let mut withdrawn = fs.control.withdrawn.lock();
            withdrawn.retain(|w| super::orders::process_of(w.0) == Some(*w));
            withdrawn.push(p);
            Ok(())
        }
        (None, None) => Err(Error::InvalidInput(
            "write the id .detafs/progress gives the commit to cancel".into(),
        )),
    }
}

/// A commit through the mount, from when it is asked for to its end, for
/// `.detafs/progress` and `.detafs/cancel`.
pub(super) struct UnderWay {
    id: u64,
    /// The process that asked for it, if known.
    process: Option<Process>,
    message: String,
    author: String,
    started: Instant,
    /// Its turn came (one commit runs at a time).
    running: bool,
    progress: Arc<crate::progress::Counters>,
}

/// Removes its commit from `.detafs/progress` when it ends, however it ends.
pub(super) struct Told<'a> {
    fs: &'a MountFs,
    id: u64,
}

impl UnderWay {
    /// A commit asked for by thread `pid` (0: unknown), waiting for its
    /// turn; cancelled already if its process withdrew it (`cancel`).
    pub(super) fn asked<'a>(
        fs: &'a MountFs,
        meta: &crate::commit::CommitMeta,
        pid: u32,
        progress: Arc<crate::progress::Counters>,
    ) -> Told<'a> {
        let process = super::orders::process_of(pid);
        let mut withdrawn = fs.control.withdrawn.lock();
        if let Some(at) = withdrawn.iter().position(|w| Some(*w) == process) {
            withdrawn.remove(at);
            progress.cancel();
        }
        drop(withdrawn);
        let id = fs
            .control
            .next_commit
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        fs.control.committing.lock().push(UnderWay {
            id,
            process,
            message: meta.message.to_string(),
            author: meta.author.to_string(),
            started: Instant::now(),
            running: false,
            progress,
        });
        Told { fs, id }
    }
}

impl Told<'_> {
    /// Its turn came.
    pub(super) fn running(&self) {
        if let Some(c) = self
            .fs
            .control
            .committing
            .lock()
            .iter_mut()
            .find(|c| c.id == self.id)
        {
            c.running = true;
            c.started = Instant::now();
        }
    }
}

impl Drop for Told<'_> {
    fn drop(&mut self) {
        self.fs
            .control
            .committing
            .lock()
            .retain(|c| c.id != self.id);
    }
}

/// One JSON line: whether a commit is under way, and how far it got
/// (bytes of staged copies read of those to read).
fn progress(fs: &MountFs) -> Vec<u8> {
    let committing = fs.control.committing.lock();
    let waiting = committing.iter().filter(|c| !c.running).count();
    // Processes whose commit will be withdrawn when it comes (`cancel`).
    let withdrawn = fs.control.withdrawn.lock().len();
    let body = match committing.iter().find(|c| c.running) {
        None if waiting + withdrawn == 0 => serde_json::json!({"committing": false}),
        None => {
            serde_json::json!({"committing": false, "waiting": waiting, "withdrawn": withdrawn})
        }
        Some(c) => {
            let (done, total) = c.progress.read();
            let done = done.min(total);
            serde_json::json!({
                "committing": true,
                // What `.detafs/cancel` names it by.
                "id": c.id,
                // Commits asked for after it, waiting for their turn.
                "waiting": waiting,
                "withdrawn": withdrawn,
                "message": c.message,
                "author": c.author,
                "elapsed_secs": c.started.elapsed().as_secs_f64(),
                "bytes_done": done,
                "bytes_total": total,
                "percent": if total == 0 { 0.0 } else { (done as f64 * 1000.0 / total as f64).round() / 10.0 },
                // Asked to stop (`.detafs/cancel`): it stops before its record.
                "cancelling": crate::progress::Progress::cancelled(&*c.progress),
            })
        }
    };
    let mut v = serde_json::to_vec(&body).expect("serializable");
    v.push(b'\n');
    v
}

/// The version staging is built on, `vN` (`none` before the first
/// commit, or without staging), read from staging itself: exact where
/// health's `staging_version` may be a second old.
fn base(fs: &MountFs) -> Result<Vec<u8>> {
    let version = match fs.staging.present() {
        true => fs.staging.lock()?.base_version()?,
        false => 0,
    };
    Ok(match version {
        0 => b"none\n".to_vec(),
        v => format!("v{v}\n").into_bytes(),
    })
}

/// Oldest first, one JSON line per version, as a log file grows.
fn log(fs: &MountFs) -> Vec<u8> {
    let withheld = fs.repo.figures_withheld(&fs.dataset);
    let versions = fs.versions.records.read();
    versions.iter().flat_map(|r| r.log_line(withheld)).collect()
}

/// From what the store answered lately (the poll asks it every few
/// seconds), so reading health never waits on an unreachable store.
/// `.detafs/health`; under a policy, as `judge`'s caller sees the dataset
/// (the versions it may see, counted).
fn health(fs: &MountFs, judge: Option<&super::Judge>) -> Vec<u8> {
    let store = fs.repo.health();
    let versions = fs.versions.records.read();
    let seen = match judge {
        Some(j) => versions
            .iter()
            .filter(|r| j.sees_version(r.version))
            .count(),
        None => versions.len(),
    };
    drop(versions);
    let body = serde_json::json!({
        "status": match (fs.repo.store().is_gone(), store.reachable) {
            (true, _) => "gone",
            (false, true) if fs.repo.damage(&fs.dataset).is_some() => "damaged",
            (false, true) => "ok",
            (false, false) => "degraded",
        },
        "store_gone": fs.repo.store().is_gone(),
        "store": fs.repo.location(),
        "store_reachable": store.reachable,
        "store_error": store.error,
        "store_failing_for_secs": store.failing_for_secs,
        "store_last_ok_secs_ago": store.last_ok_secs_ago,
        "store_latency_ms": store.latency_ms,
        "dataset": fs.dataset,
        // The daemon's process (`detafs umount` waits for it to end).
        "pid": std::process::id(),
        "log": fs.opts.log,
        "versions": seen,
        // The first version record that did not check out (none after it
        // is served): `detafs verify` tells more.
        "damaged": fs.repo.damage(&fs.dataset).map(|d| format!("v{}: {}", d.version, d.why)),
        "version_inodes": fs.versions.version_inodes(),
        // What the daemon keeps in memory, within one budget (`--cache-memory`).
        "memory": fs.repo.budget().report(),
        // Access decisions not yet in the audit trail's file.
        "trail_unwritten": fs.trail_unwritten(),
        "cache_bytes": fs.repo.disk().used_bytes(),
        "staging": fs.staging.present(),
        // What restores and checkouts replaced, kept for `--undo`.
        "trash": fs.staging.trash(),
        // Whether the kernel opens files without asking (read-only, no policy).
        "opens_skipped": fs.opens_skipped(),
        // Whether versions/ has a kernel connection of its own (read-write
        // mounts without a policy), where the kernel opens its files itself.
        "versions_connection": if fs.versions_apart() { "own" } else { "shared" },
        // Whether staged files' reads and writes go straight to their
        // copies (FUSE passthrough) or through the daemon.
        "staged_io": fs.staged_io(),
        // Where packs this mount read came from besides the store, if any
        // (`detafs verify` counts what lives where).
        "cold_tier": fs.repo().store().cold_known(),
        // Requests the kernel sent so far, by kind (all connections).
        "requests": fs.requests().to_json(),
        "policy": fs.policy_in_force(),
        // The version staging is built on (what `.detafs/status` compares with).
        "staging_version": fs.staging.base_now(),
    });
    let mut v = serde_json::to_vec_pretty(&body).expect("serializable");
    v.push(b'\n');
    v
}

/// The refusal of a read where a policy came after the kernel's choice.
pub(super) fn shut_out() -> Error {
    Error::fs(
        FsError::Denied,
        "an access policy was set after this mount started: mount it again to read under it",
    )
}
