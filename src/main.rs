//! The `detafs` command line.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    // Before any thread starts: everything detafs creates is private.
    detafs::private::restrict_umask();
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // A daemon's log file gets plain text, not terminal colour codes.
        .with_ansi(std::io::stderr().is_terminal())
        // fuser's own warnings are about operations left to their default
        // (answered ENOSYS) and an unmount that already happened: noise for
        // users; DETAFS_LOG=fuser=warn shows them.
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DETAFS_LOG")
                .unwrap_or_else(|_| "warn,fuser=error".into()),
        )
        .without_time()
        .with_target(false)
        .init();
    // Test builds only (feature `failpoints`): a release binary has no
    // failpoints and ignores FAILPOINTS.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    cli::run()
}
