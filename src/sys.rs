//! The system calls that no safe wrapper (std, nix) covers: the only
//! `unsafe` code of detafs, each call with why it is sound. Everything else
//! reaches the system through std or nix.

#![allow(unsafe_code)]

use std::os::unix::process::CommandExt;

/// The mount daemon allocates and frees multi-MiB read buffers on many
/// threads: keep them out of per-thread heaps (which glibc does not give
/// back), so its memory stays near what its caches hold; and let the heap
/// grow in large steps, not a page (one mprotect) at a time. Must run
/// before any thread starts, so before the store (and its runtime) is
/// opened.
pub fn tune_allocator() {
    // SAFETY: mallopt only adjusts allocator parameters, before any other
    // thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 4);
        libc::mallopt(libc::M_TOP_PAD, 4 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 8 << 20);
    }
}

/// Starts `cmd`'s child in a session of its own (setsid), detached from
/// this process's terminal.
pub fn in_new_session(cmd: &mut std::process::Command) {
    // SAFETY: the hook runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: setsid is one, and the closure
    // allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()?;
            Ok(())
        });
    }
}

/// Gives SIGPIPE its default action back (Rust ignores it), so that
/// `detafs log | head` ends quietly as other Unix tools do.
pub fn default_sigpipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: SIG_DFL installs no handler, so no code of ours runs on the
    // signal; nothing else of the process relies on SIGPIPE being ignored
    // (a CLI command, not a daemon).
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

/// Lowers the calling thread's priority to nice `nice` (on Linux the nice
/// value is per thread; threads it starts inherit it). Best effort.
pub fn lower_thread_priority(nice: i32) {
    let tid = nix::unistd::gettid().as_raw();
    // SAFETY: setpriority takes plain integers and no pointers; a thread
    // may set its own nice value.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
    }
}
