//! The `detafs` command line.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    // Before any thread starts: everything detafs creates is private.
    detafs::private::restrict_umask();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DETAFS_LOG")
                .unwrap_or_else(|_| "warn".into()),
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
