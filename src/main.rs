//! The `detafs` command line.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    // Multi-MiB read buffers are allocated and freed on many threads: keep
    // them out of per-thread heaps (which glibc does not give back), so the
    // mount's memory stays near what its caches hold.
    // SAFETY: called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 4);
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DETAFS_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .without_time()
        .with_target(false)
        .init();
    let _failpoints = fail::FailScenario::setup();
    cli::run()
}
