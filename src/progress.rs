//! How long operations report their progress. The library only counts;
//! the CLI draws (nothing below `cli/` prints or draws bars).

/// Receives the progress of an export, a commit, a verify or a gc.
pub trait Progress: Sync {
    /// The total amount of work (bytes), once it is known.
    fn set_total(&self, _total: u64) {}
    /// `done` more bytes were handled.
    fn advance(&self, _done: u64) {}
    /// Whoever watches asked to stop: an operation that can still stop
    /// without a trace (a commit before its record) does.
    fn cancelled(&self) -> bool {
        false
    }
}

/// Progress nobody watches.
pub struct Quiet;

impl Progress for Quiet {}

/// Progress kept in counters for another thread to read (a mount's
/// `.detafs/progress`).
#[derive(Default)]
pub struct Counters {
    total: std::sync::atomic::AtomicU64,
    done: std::sync::atomic::AtomicU64,
    cancelled: std::sync::atomic::AtomicBool,
}

impl Counters {
    /// Asks the operation to stop (`Progress::cancelled`).
    pub fn cancel(&self) {
        self.cancelled
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// (done, total) bytes so far.
    pub fn read(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.done.load(Relaxed), self.total.load(Relaxed))
    }
}

impl Progress for Counters {
    fn set_total(&self, total: u64) {
        self.total
            .store(total, std::sync::atomic::Ordering::Relaxed);
    }

    fn advance(&self, done: u64) {
        self.done
            .fetch_add(done, std::sync::atomic::Ordering::Relaxed);
    }

    fn cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::Relaxed)
    }
}
