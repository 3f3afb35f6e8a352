//! The `detafs` command line.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
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
