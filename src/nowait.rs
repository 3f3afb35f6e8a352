//! The kernel's request thread must never wait: not on the store, the disk,
//! staging's database, nor a lock held across any of them. The mount's
//! adapter runs each request there first through `attempt`; while it runs,
//! every call that could wait checks here (`check`) and fails with
//! `Error::WouldBlock` instead, and the adapter hands the request to a
//! worker, which runs it again. So a request answered on that thread is
//! one that could not wait: by construction, not by a predicate kept
//! beside the code it describes.
//!
//! A request attempted so must change nothing before it could fail so
//! (or undo it): it may run twice.

use crate::error::{Error, Result};
use std::cell::Cell;

thread_local! {
    static NO_WAIT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` where nothing may wait (see above).
pub fn attempt<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            NO_WAIT.set(self.0);
        }
    }
    let _reset = Reset(NO_WAIT.replace(true));
    f()
}

/// Called before anything that may wait.
pub fn check() -> Result<()> {
    match NO_WAIT.get() {
        true => Err(Error::WouldBlock),
        false => Ok(()),
    }
}

/// Whether waiting is refused on this thread now.
pub fn refused() -> bool {
    NO_WAIT.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_calls_inside_an_attempt_are_refused() {
        assert!(check().is_ok());
        let inner = attempt(|| {
            assert!(refused());
            check()
        });
        assert!(matches!(inner, Err(Error::WouldBlock)));
        assert!(check().is_ok(), "reset after the attempt");
    }
}
