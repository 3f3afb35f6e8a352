//! The `detafs` command line.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    // Before any thread starts: everything detafs creates is private.
    detafs::private::restrict_umask();
    use std::io::IsTerminal;
    // fuser's own warnings are about operations left to their default
    // (answered ENOSYS) and an unmount that already happened: noise for
    // users; DETAFS_LOG=fuser=warn shows them.
    let filter = tracing_subscriber::EnvFilter::try_from_env("DETAFS_LOG")
        .unwrap_or_else(|_| "warn,fuser=error".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .without_time()
        .with_target(false);
    if cli::log::install() {
        // A daemon: its own file, timed, rotated, repeats counted.
        logs.with_writer(cli::log::ToDaemonLog)
            .with_ansi(false)
            .init();
    } else {
        logs.with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .init();
    }
    // Test builds only (feature `failpoints`): a release binary has no
    // failpoints and ignores FAILPOINTS.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    // The program's one runtime: the store, the gateway client, the mount
    // and the gateway all run on it.
    match detafs::runtime::Runtime::new() {
        Ok(rt) => cli::run(rt),
        Err(e) => {
            eprintln!("detafs: {e}");
            ExitCode::from(1)
        }
    }
}
