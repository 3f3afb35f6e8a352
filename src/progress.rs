//! How long operations report their progress. The library only counts;
//! the CLI draws (nothing below `cli/` prints or draws bars).

/// Receives the progress of an export, a commit, a verify or a gc.
pub trait Progress: Sync {
    /// The total amount of work (bytes), once it is known.
    fn set_total(&self, _total: u64) {}
    /// `done` more bytes were handled.
    fn advance(&self, _done: u64) {}
}

/// Progress nobody watches.
pub struct Quiet;

impl Progress for Quiet {}
