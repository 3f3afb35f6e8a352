//! Requests written to `.detafs/restore`, `checkout`, `cancel` and
//! `refresh`: where a request ends, and in which order requests are
//! carried out.
//!
//! A request is the whole text written through one open. It is carried
//! out once, at the end of that open as the kernel defines it: its last
//! close (RELEASE), which no inherited copy, `dup` or child process can
//! send early (FLUSH comes at every close of every copy). A close at the
//! exit of a process killed by a signal or failing (a non-zero exit
//! status) voids the request: a writer that died mid-way never has its
//! truncated request carried out. A program that wants the outcome reads
//! the handle it wrote through: that read is the end the writer states,
//! carries the request out and answers with how it went (the CLI does so).
//!
//! The kernel answers a close before it sends RELEASE, and sends RELEASE
//! in the background, so a loaded kernel may pass the next command's
//! requests to the daemon first. The daemon orders them itself: from the
//! FLUSH of a close by the thread that opened the handle, with a request
//! written (a close the shell waits for), every request the mount
//! receives waits (held, taking no worker) until that handle's RELEASE
//! comes and the request is carried out, so the shell's next command sees
//! its result. A child closing the copy it inherited holds nothing; work
//! on the request's own handle is not held (a write after a close goes on
//! with the request); and nothing waits for a RELEASE longer than
//! `release_wait`: an opener's close that was not the last (a child still
//! holds a copy) delays what comes next by at most that. Requests are
//! carried out one at a time on a thread of their own, in the order the
//! kernel sent them, with the closes' checks of their writers.

use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// Longest time requests wait after the close of a request's handle for
/// the kernel to send its RELEASE.
fn release_wait() -> Duration {
    crate::hold::test_duration("DETAFS_TEST_RELEASE_WAIT", Duration::from_secs(1))
}

/// Most bytes a request may hold.
pub(super) const MAX_ORDER: usize = 1 << 20;

/// A request being written through one open handle.
#[derive(Default)]
pub(super) struct Order {
    state: Mutex<State>,
    /// The thread that opened it (0: unknown).
    opener: u32,
}

#[derive(Default)]
struct State {
    text: Vec<u8>,
    /// Why it will never be carried out, once that is known.
    void: Option<String>,
    /// Carried out already (by a read of its handle).
    taken: bool,
    /// The process that wrote it, if known.
    writer: Option<Process>,
}

/// What to do with a request at the end of its open.
pub(super) enum Due {
    /// Nothing was written (or it was taken by a read): nothing to do.
    Nothing,
    /// Carry out this text, written by this process.
    Act(Vec<u8>, Option<Process>),
    /// Refused: why.
    Void(String),
}

impl Order {
    /// A request opened by thread `pid`.
    pub(super) fn opened_by(pid: u32) -> Order {
        Order {
            opener: pid,
            ..Order::default()
        }
    }

    /// A write through the handle by process `pid`: kept with what came
    /// before it.
    pub(super) fn write(&self, data: &[u8], pid: u32) -> Result<usize> {
        let writer = process_of(pid);
        let mut s = self.state.lock();
        s.writer = s.writer.or(writer);
        if s.text.len() + data.len() > MAX_ORDER {
            s.void = Some(format!("the request is over {MAX_ORDER} bytes"));
            return Err(Error::InvalidInput(format!(
                "a request to a control file holds at most {MAX_ORDER} bytes"
            )));
        }
        // A request written after its handle was read is a new one.
        if s.taken {
            s.taken = false;
            s.text.clear();
        }
        s.text.extend_from_slice(data);
        Ok(data.len())
    }

    /// A close of one copy of the handle, by process `pid` (0: unknown):
    /// if that process is dying of a signal or failing, the request written
    /// so far is void.
    pub(super) fn closed_by(&self, pid: u32) {
        if self.state.lock().text.is_empty() {
            return;
        }
        if let Some(why) = ended_badly(pid) {
            self.state.lock().void.get_or_insert(why);
        }
    }

    /// The request as it stands, taken: it is not carried out again.
    pub(super) fn take(&self) -> Due {
        let mut s = self.state.lock();
        let text = std::mem::take(&mut s.text);
        if let Some(why) = s.void.take() {
            s.taken = true;
            return Due::Void(why);
        }
        match text.is_empty() {
            true => Due::Nothing,
            false => {
                s.taken = true;
                Due::Act(text, s.writer)
            }
        }
    }

    /// Whether a close by thread `pid` may be the request's end: the
    /// thread that opened it closes it with a request written. (A child
    /// that inherited a copy closes it at its exit; the opener still
    /// holds one, so that is not the end.)
    pub(super) fn may_end_at_close_by(&self, pid: u32) -> bool {
        pid == self.opener && !self.state.lock().text.is_empty()
    }
}

/// Why a close by process `pid` must void the request it ends, if it
/// must: the process is exiting, killed by a signal or with a failure
/// status. Read from `/proc/PID/stat` while the process waits for the
/// close's answer, so it is there. A process that cannot be read (another
/// PID namespace; its exit status hidden from this daemon) is taken as
/// closing normally.
fn ended_badly(pid: u32) -> Option<String> {
    if pid == 0 {
        return None;
    }
    let status = exit_status(&crate::procs::Stat::of(pid)?)?;
    match (status & 0x7f, status >> 8) {
        (0, 0) => None,
        (0, code) => Some(format!(
            "a process that held it (pid {pid}) exited with status {code} before the request was closed: nothing was done"
        )),
        (signal, _) => Some(format!(
            "a process that held it (pid {pid}) was killed by signal {signal} before the request was closed: nothing was done"
        )),
    }
}

/// A process: its id and its start time (so a reused id is another).
pub(super) type Process = (u32, u64);

/// The process (thread group) thread `pid` belongs to (0: unknown).
pub(super) fn process_of(pid: u32) -> Option<Process> {
    if pid == 0 {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let tgid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|t| t.trim().parse().ok())?;
    // Field 22: when the process started.
    Some((tgid, crate::procs::Stat::of(tgid)?.number(22)?))
}

/// The exit status (as `waitpid` gives it) of the process whose state is
/// `stat`, if it is exiting (`PF_EXITING`): flags are field 9, the exit
/// code field 52.
fn exit_status(stat: &crate::procs::Stat) -> Option<u64> {
    const PF_EXITING: u64 = 0x4;
    let (flags, code) = (stat.number(9)?, stat.number(52)?);
    (flags & PF_EXITING != 0).then_some(code)
}

pub(super) type Job = Box<dyn FnOnce() + Send>;

/// Where held work goes once it may run (the mount's worker pool).
type Run = Arc<dyn Fn(Job) + Send + Sync>;

/// The thread that carries out requests and checks closes, in the order
/// the kernel sent them; the barrier that holds later requests; and the
/// thread that gives up a RELEASE not come in time.
pub(super) struct Sequence {
    jobs: Mutex<mpsc::Sender<Job>>,
    /// RELEASEs awaited, each with when to give it up: in the order they
    /// were awaited, which is the order of their deadlines.
    deadlines: Mutex<mpsc::Sender<(Instant, u64, u64)>>,
    barrier: Arc<Mutex<Barrier>>,
    run: Run,
}

#[derive(Default)]
struct Barrier {
    /// Requests released by the kernel and not carried out yet.
    pending: usize,
    /// Handles closed with a request written, whose RELEASE has not come
    /// (each with the turn it was closed in).
    awaited: Vec<(u64, u64)>,
    turn: u64,
    /// Work for requests that came meanwhile, run once nothing is
    /// pending or awaited.
    held: Vec<Job>,
}

impl Barrier {
    fn up(&self) -> bool {
        self.pending > 0 || !self.awaited.is_empty()
    }

    /// The held work, if the barrier is down.
    fn let_go(&mut self) -> Vec<Job> {
        match self.up() {
            true => Vec::new(),
            false => std::mem::take(&mut self.held),
        }
    }

    /// Stops awaiting what `which` picks: the held work, if that let the
    /// barrier down.
    fn stop_awaiting(&mut self, which: impl Fn(&(u64, u64)) -> bool) -> Vec<Job> {
        let before = self.awaited.len();
        self.awaited.retain(|a| !which(a));
        match self.awaited.len() == before {
            true => Vec::new(),
            false => self.let_go(),
        }
    }
}

impl Sequence {
    /// Starts the sequence's threads (at the mount's start: the kernel's
    /// request thread, which queues, never runs a job itself); held work
    /// goes to `run` once it may run.
    pub(super) fn start(run: impl Fn(Job) + Send + Sync + 'static) -> std::io::Result<Sequence> {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || rx.into_iter().for_each(|job| job()))?;
        let run: Run = Arc::new(run);
        let barrier = Arc::new(Mutex::new(Barrier::default()));
        let (due_tx, due_rx) = mpsc::channel::<(Instant, u64, u64)>();
        let (b, r) = (barrier.clone(), run.clone());
        std::thread::Builder::new()
            .name("release-wait".into())
            .spawn(move || {
                for (deadline, fh, turn) in due_rx {
                    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
                    let held = b.lock().stop_awaiting(|&a| a == (fh, turn));
                    held.into_iter().for_each(|job| r(job));
                }
            })?;
        Ok(Sequence {
            jobs: Mutex::new(tx),
            deadlines: Mutex::new(due_tx),
            barrier,
            run,
        })
    }

    /// Runs `job` on the sequence's thread after the jobs queued before it.
    pub(super) fn queue(&self, job: impl FnOnce() + Send + 'static) {
        // The thread runs as long as the sender lives (as long as this).
        let _ = self.jobs.lock().send(Box::new(job));
    }

    /// Handle `fh` was closed with a request written: later requests are
    /// held until its RELEASE (`raise`), its writer going on (`goes_on`)
    /// or `release_wait` passing. (The kernel's request thread.)
    pub(super) fn await_release(&self, fh: u64) {
        let turn = {
            let mut b = self.barrier.lock();
            b.turn += 1;
            let turn = b.turn;
            b.awaited.retain(|&(h, _)| h != fh);
            b.awaited.push((fh, turn));
            turn
        };
        let deadline = Instant::now() + release_wait();
        // The thread lives as long as the receiver (as long as this).
        let _ = self.deadlines.lock().send((deadline, fh, turn));
    }

    /// Handle `fh` is written or read again: its close was not the end of
    /// its request.
    pub(super) fn goes_on(&self, fh: u64) {
        let held = self.barrier.lock().stop_awaiting(|&(h, _)| h == fh);
        self.run_all(held);
    }

    /// The RELEASE of `fh`, a request's handle: later requests are held
    /// until `lower` is called for it. (The kernel's request thread: no
    /// waiting.)
    pub(super) fn raise(&self, fh: u64) {
        let mut b = self.barrier.lock();
        b.pending += 1;
        b.awaited.retain(|&(h, _)| h != fh);
    }

    /// The request `raise` was called for is carried out: the held work
    /// runs once no request is pending or awaited.
    pub(super) fn lower(&self) {
        let held = {
            let mut b = self.barrier.lock();
            b.pending -= 1;
            b.let_go()
        };
        self.run_all(held);
    }

    fn run_all(&self, held: Vec<Job>) {
        held.into_iter().for_each(|job| (self.run)(job));
    }

    /// `job` back to run now, or None: held until the requests released
    /// or closed before it are carried out. (The kernel's request thread:
    /// no waiting.)
    pub(super) fn after_pending(&self, job: Job) -> Option<Job> {
        let mut b = self.barrier.lock();
        match b.up() {
            false => Some(job),
            true => {
                b.held.push(job);
                None
            }
        }
    }

    /// Whether a request released or closed is not carried out yet.
    pub(super) fn pending(&self) -> bool {
        self.barrier.lock().up()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(flags: u64, code: u64) -> String {
        let mut fields = vec!["0".to_string(); 50];
        fields[0] = "S".into();
        fields[9 - 3] = flags.to_string();
        fields[52 - 3] = code.to_string();
        format!("42 (a (b) c) {}", fields.join(" "))
    }

    #[test]
    fn a_close_at_a_killed_or_failed_exit_is_told_apart() {
        let status = |text: &str| exit_status(&crate::procs::Stat::parse(text)?);
        assert_eq!(status(&stat(0x4, 9)), Some(9));
        assert_eq!(status(&stat(0x4 | 0x400, 0)), Some(0));
        assert_eq!(status(&stat(0x400000, 9)), None, "not exiting");
        assert_eq!(status("garbage"), None);
    }

    #[test]
    fn held_work_runs_once_the_release_comes_or_its_wait_passes() {
        let (tx, rx) = mpsc::channel();
        let seq = Sequence::start(move |job: Job| {
            let _ = tx.send(job);
        })
        .unwrap();
        let held = |seq: &Sequence| seq.after_pending(Box::new(|| ())).is_none();
        // Closed with a request written: later work waits for its RELEASE
        // and for the request to be carried out.
        seq.await_release(7);
        assert!(held(&seq));
        seq.raise(7);
        assert!(rx.try_recv().is_err());
        seq.lower();
        assert!(rx.try_recv().is_ok());
        // Written through again: that close was not the end.
        seq.await_release(8);
        assert!(held(&seq));
        seq.goes_on(8);
        assert!(rx.try_recv().is_ok());
        // No RELEASE comes: the work goes once the wait has passed (the
        // give-up of handle 8's wait, due first, lets nothing go).
        seq.await_release(9);
        assert!(held(&seq));
        assert!(rx.recv_timeout(Duration::from_secs(60)).is_ok());
        assert!(!seq.pending());
    }

    #[test]
    fn a_request_is_taken_once_and_a_void_one_never() {
        let o = Order::default();
        o.write(b"v1\n", 0).unwrap();
        o.write(b"a.csv\n", 0).unwrap();
        assert!(matches!(o.take(), Due::Act(t, None) if t == b"v1\na.csv\n"));
        assert!(matches!(o.take(), Due::Nothing));
        let void = Order::default();
        void.write(b"v1\n", 0).unwrap();
        void.state.lock().void = Some("killed".into());
        assert!(matches!(void.take(), Due::Void(_)));
        assert!(matches!(void.take(), Due::Nothing));
    }
}
