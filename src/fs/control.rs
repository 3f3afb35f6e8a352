//! `.detafs/`: control files. Contents are generated when a file is opened and
//! served with direct I/O and zero TTL, so readers never see stale status.
//! `Control` keeps what they show of their own (the last commit and error,
//! the commits under way, the texts as last sized) and reads the rest
//! through `Seen`; a request written to one is read here and carried out
//! by the mount (`MountFs::carry_out`: it spans the namespaces).

use super::ino::Ino;
use super::ino::files::{
    BASE, CANCEL, CHECKOUT, COMMIT, HEALTH, LAST_COMMIT, LAST_ERROR, LOG, PROGRESS, REFRESH,
    RESTORE, STATUS, UNDO,
};
use super::orders::{Order, Process, Sequence};
use super::overlay::StagingArea;
use super::versions::Versions;
use super::{Attr, Caller, DirEntry, Handle, Judge};
use crate::error::{Error, FsError, Result};
use crate::repo::Repo;
use crate::snapshot::{Kind, Mtime, Record};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `.detafs/`'s state.
pub(super) struct Control {
    last_error: Mutex<String>,
    /// The log entry of the last commit made through this mount.
    last_commit: Mutex<Vec<u8>>,
    /// Commits through this mount asked for: the one running, those
    /// waiting for their turn.
    committing: Mutex<Vec<UnderWay>>,
    /// The number of the next commit asked for (`.detafs/progress`'s `id`).
    next_commit: std::sync::atomic::AtomicU64,
    /// Processes that cancelled their commits before the kernel let any
    /// reach the daemon (it lets one write to `.detafs/commit` in at a
    /// time): a commit they ask for is withdrawn when it comes.
    withdrawn: Mutex<Vec<Process>>,
    /// Control files' content as last sized, by inode (`attr`).
    texts: Mutex<HashMap<u64, SizedText>>,
    /// Requests carried out in order (`orders.rs`).
    pub(super) sequence: Sequence,
}

/// What the control files read of the mount beyond their own state.
pub(super) struct Seen<'a> {
    pub(super) repo: &'a Repo,
    pub(super) versions: &'a Versions,
    pub(super) staging: &'a StagingArea,
    pub(super) dataset: &'a str,
    /// The mount's owner (uid, gid).
    pub(super) owner: (u32, u32),
    /// Whether a policy is in force.
    pub(super) gated: bool,
    /// Whether the kernel opens files without asking (`unopened.rs`).
    pub(super) opens_skipped: bool,
    /// The time of the log: the newest version's, as the caller may see.
    pub(super) latest_time: Mtime,
    /// The mount's health, as a caller under a policy (`judge`) sees it:
    /// it spans every namespace, so the mount makes it (`health.rs`).
    pub(super) health: &'a dyn Fn(Option<&Judge>) -> Vec<u8>,
}

/// A request written to `.detafs/refresh`, `undo`, `restore` or
/// `checkout`: what the mount carries out.
pub(super) enum Request<'a> {
    /// Show what changed beside the mount now.
    Refresh,
    /// Put back an entry of the trash (None: the newest).
    Undo(Option<u64>),
    /// Make `paths` of staging as in `version` (None: the base version).
    Checkout {
        version: Option<&'a str>,
        paths: Vec<&'a str>,
    },
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
            sequence: Sequence::start(move |job| store.runtime().spawn_work(job))
                .map_err(|e| Error::io("starting the control files' thread", e))?,
        })
    }

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

    pub(super) fn lookup(&self, s: &Seen, name: &[u8]) -> Result<Attr> {
        let (_, ino) = FILES
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| super::not_found(name))?;
        self.attr(s, *ino)
    }

    /// A control file's attributes. Its size is that of the content an open
    /// now would give, so tools that read as many bytes as `stat` says (pandas,
    /// DuckDB) get all of it; content is made again at each open.
    pub(super) fn attr(&self, s: &Seen, ino: u64) -> Result<Attr> {
        let size = match ino {
            COMMIT | RESTORE | CHECKOUT | CANCEL | REFRESH | UNDO => 0,
            // Their size would tell how many versions there are, seen or not:
            // each caller's content is made at its open. (A shut mount, where
            // the kernel reads without opening, tells everyone alike that it
            // is shut: there health is one text, sized.)
            LOG if s.gated => 0,
            HEALTH if s.gated && !s.opens_skipped => 0,
            _ => self.fresh_text(s, ino)?.len() as u64,
        };
        // Where the kernel keeps control files' pages (`unopened.rs`), it drops
        // them when the mtime moves: there it moves at every look.
        let mtime = match ino {
            LOG | LAST_COMMIT if !s.opens_skipped => s.latest_time,
            _ => Mtime::now(),
        };
        // Committing and the staged paths are the mount owner's alone; the
        // history and health are for every reader of the mount. The commit
        // file reads back what its handle's last write committed.
        // Under a policy, it decides who may (`open`), not the owner's modes.
        let perm = match (ino, s.gated) {
            (COMMIT, false) => 0o600,
            (COMMIT, true) => 0o666,
            // Readable too: a read of the handle a request was written
            // through carries it out and says how it went (`orders.rs`).
            (RESTORE | CHECKOUT | CANCEL | REFRESH | UNDO, false) => 0o600,
            (RESTORE | CHECKOUT | CANCEL | REFRESH | UNDO, true) => 0o666,
            (STATUS | LAST_ERROR | PROGRESS, false) => 0o400,
            _ => 0o444,
        };
        Ok(Attr::made_up(
            ino,
            Kind::File,
            size,
            perm,
            1,
            s.owner,
            mtime,
            Duration::ZERO,
        ))
    }

    /// A control file's content as made within the last second, else made
    /// now: so a lookup, `stat`, open, `fstat` and read in a row agree
    /// (health's figures change from one second to the next). Status is
    /// always exact (made again whenever staging changed); a commit through
    /// the mount forgets the rest (`forget_texts`).
    fn fresh_text(&self, s: &Seen, ino: u64) -> Result<Arc<Vec<u8>>> {
        if matches!(ino, STATUS | PROGRESS | BASE) {
            return Ok(Arc::new(self.content(s, ino)?));
        }
        if let Some((at, text)) = self.texts.lock().get(&ino)
            && at.elapsed() < SIZED_TEXT_LIFE
        {
            return Ok(text.clone());
        }
        let text = Arc::new(self.content(s, ino)?);
        self.texts
            .lock()
            .insert(ino, (Instant::now(), text.clone()));
        Ok(text)
    }

    /// What a read of a control file the kernel opened without asking sees
    /// (`unopened.rs`): what an open for reading would hold now.
    /// Under a policy (one set after the mount started: it refuses
    /// everything) only the health is read.
    pub(super) fn text_now(&self, s: &Seen, ino: u64) -> Result<Arc<Vec<u8>>> {
        match ino {
            HEALTH => self.fresh_text(s, ino),
            _ if s.gated => Err(shut_out()),
            COMMIT | RESTORE | CHECKOUT => Ok(Arc::default()),
            _ => self.fresh_text(s, ino),
        }
    }

    /// After a commit through the mount: `last-commit`, `last-error` and the
    /// log are read anew.
    fn forget_texts(&self) {
        self.texts.lock().clear();
    }

    fn content(&self, s: &Seen, ino: u64) -> Result<Vec<u8>> {
        Ok(match ino {
            STATUS => status(s.staging)?,
            LOG => log(s),
            HEALTH => (s.health)(None),
            LAST_ERROR => self.last_error.lock().clone().into_bytes(),
            LAST_COMMIT => self.last_commit.lock().clone(),
            PROGRESS => self.progress(),
            BASE => base(s.staging)?,
            _ => Vec::new(),
        })
    }

    /// The handle an open of control file `ino` by `caller` gets (under a
    /// policy, `judge` decides what it may do).
    pub(super) fn open(
        &self,
        s: &Seen,
        ino: u64,
        writing: bool,
        caller: &Caller,
        judge: Option<&Judge>,
    ) -> Result<Handle> {
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
                    format!("the policy does not let you commit to {}", s.dataset),
                ));
            }
            Some(j) if matches!(ino, LOG | HEALTH) && !writing => {
                let text = match ino {
                    LOG => j.log(),
                    _ => (s.health)(Some(j)),
                };
                return Ok(Handle::Text(Arc::new(text)));
            }
            Some(_) => {}
            None if staged && ino != BASE && ino != LAST_COMMIT && uid != s.owner.0 && uid != 0 => {
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
                // Under a policy, the request is judged as its writer sees.
                return Ok(Handle::Order(
                    ino,
                    Arc::new(Order::opened_by(caller.pid)),
                    judge.is_some().then_some(*caller),
                ));
            }
            (RESTORE | CHECKOUT | CANCEL | REFRESH | UNDO, false) => Handle::Text(Arc::default()),
            (_, true) => {
                return Err(Error::fs(
                    FsError::NotPermitted,
                    ".detafs/ files are read-only",
                ));
            }
            _ => Handle::Text(self.fresh_text(s, ino)?),
        };
        Ok(handle)
    }

    /// A commit through the mount landed.
    pub(super) fn committed(&self, record: &Record) {
        tracing::info!("committed v{} ({})", record.version, record.message);
        self.last_error.lock().clear();
        *self.last_commit.lock() = record.log_line(false);
        self.forget_texts();
    }

    /// A commit (or request) through the mount failed with `e`:
    /// `.detafs/last-error` says why.
    pub(super) fn failed<T>(&self, e: Error) -> Result<T> {
        tracing::warn!("{e}");
        // One line, whatever names the error quotes.
        *self.last_error.lock() = format!("{}\n", crate::escape::line(e.to_string().as_bytes()));
        self.forget_texts();
        Err(e)
    }

    /// How a request went: `.detafs/last-error` says why it failed, or
    /// nothing.
    pub(super) fn outcome(&self, res: Result<()>) -> Result<()> {
        match res {
            Ok(()) => {
                self.last_error.lock().clear();
                self.forget_texts();
                Ok(())
            }
            Err(e) => self.failed(e),
        }
    }

    /// A request written to control file `ino` by `process`, read: a
    /// cancel is carried out here (it touches the commits under way
    /// alone); the others are the mount's to carry out.
    pub(super) fn request<'t>(
        &self,
        ino: u64,
        data: &'t [u8],
        process: Option<Process>,
    ) -> Result<Option<Request<'t>>> {
        match ino {
            CANCEL => return self.cancel(data, process).map(|()| None),
            // A change made beside the mount (`detafs commit --from`, `tag`):
            // shown when the writer's close returns, not a poll later.
            REFRESH => return Ok(Some(Request::Refresh)),
            UNDO => return Ok(Some(Request::Undo(undo_entry(data)?))),
            _ => {}
        }
        let text = std::str::from_utf8(data)
            .map_err(|_| Error::InvalidInput("paths must be UTF-8".into()))?;
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let version = match ino {
            CHECKOUT => Some(lines.next().ok_or_else(|| {
                Error::InvalidInput(
                    "write a version, then the paths to check out (none: all)".into(),
                )
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
        Ok(Some(Request::Checkout { version, paths }))
    }

    /// `.detafs/cancel`: a request names the commits it cancels: the number
    /// `.detafs/progress` gives one (`id`), or, for any other text, those
    /// asked for by the process that writes it (Ctrl-C of `detafs commit`).
    /// Each stops if it has not reached its record yet (its writer gets
    /// ECANCELED, staging stays as it was); one still waiting for its turn is
    /// withdrawn; past its record it completes. No other commit is touched.
    fn cancel(&self, text: &[u8], process: Option<Process>) -> Result<()> {
        let named = std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok());
        let committing = self.committing.lock();
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
                let mut withdrawn = self.withdrawn.lock();
                withdrawn.retain(|w| super::orders::process_of(w.0) == Some(*w));
                withdrawn.push(p);
                Ok(())
            }
            (None, None) => Err(Error::InvalidInput(
                "write the id .detafs/progress gives the commit to cancel".into(),
            )),
        }
    }

    /// A commit asked for by thread `pid` (0: unknown), waiting for its
    /// turn; cancelled already if its process withdrew it (`cancel`).
    pub(super) fn asked(
        &self,
        meta: &crate::commit::CommitMeta,
        pid: u32,
        progress: Arc<crate::progress::Counters>,
    ) -> Told<'_> {
        let process = super::orders::process_of(pid);
        let mut withdrawn = self.withdrawn.lock();
        if let Some(at) = withdrawn.iter().position(|w| Some(*w) == process) {
            withdrawn.remove(at);
            progress.cancel();
        }
        drop(withdrawn);
        let id = self
            .next_commit
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        self.committing.lock().push(UnderWay {
            id,
            process,
            message: meta.message.to_string(),
            author: meta.author.to_string(),
            started: Instant::now(),
            running: false,
            progress,
        });
        Told { control: self, id }
    }

    /// One JSON line: whether a commit is under way, and how far it got
    /// (bytes of staged copies read of those to read).
    fn progress(&self) -> Vec<u8> {
        let committing = self.committing.lock();
        let waiting = committing.iter().filter(|c| !c.running).count();
        // Processes whose commit will be withdrawn when it comes (`cancel`).
        let withdrawn = self.withdrawn.lock().len();
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
    control: &'a Control,
    id: u64,
}

impl Told<'_> {
    /// Its turn came.
    pub(super) fn running(&self) {
        if let Some(c) = self
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
        self.control.committing.lock().retain(|c| c.id != self.id);
    }
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

/// `.detafs/status`: one change, one line, escaped (`escape::unescape`
/// reads it back).
fn status(staging: &StagingArea) -> Result<Vec<u8>> {
    let (_, lines) = staging.status()?;
    let mut out = String::new();
    for (tag, path) in lines.iter() {
        out.push_str(&format!("{tag} {}\n", crate::escape::line(path)));
    }
    Ok(out.into_bytes())
}

/// The version staging is built on, `vN` (`none` before the first
/// commit, or without staging), read from staging itself: exact where
/// health's `staging_version` may be a second old.
fn base(staging: &StagingArea) -> Result<Vec<u8>> {
    let version = match staging.present() {
        true => staging.lock()?.base_version()?,
        false => 0,
    };
    Ok(match version {
        0 => b"none\n".to_vec(),
        v => format!("v{v}\n").into_bytes(),
    })
}

/// Oldest first, one JSON line per version, as a log file grows.
fn log(s: &Seen) -> Vec<u8> {
    let withheld = s.repo.figures_withheld(s.dataset);
    let versions = s.versions.records.read();
    versions.iter().flat_map(|r| r.log_line(withheld)).collect()
}

/// The refusal of a read where a policy came after the kernel's choice.
pub(super) fn shut_out() -> Error {
    Error::fs(
        FsError::Denied,
        "an access policy was set after this mount started: mount it again to read under it",
    )
}
