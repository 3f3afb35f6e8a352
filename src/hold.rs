//! Failure and ordering points for tests (feature `failpoints`; nothing in
//! a release). `FAILPOINTS="NAME=panic"` crashes whoever reaches
//! `hold(NAME)` (the crash tests); `FAILPOINTS="NAME=return(PATH)"` holds
//! it there until the file PATH exists. It first creates `PATH.held`, so a
//! test waits for that, does what must happen meanwhile, then creates
//! PATH: events ordered by conditions, never by sleeps.

/// Holds the caller at `name` while a test asks for it (see above). With
/// `return(each:PATH)` every pass takes a release of its own: the holder
/// deletes PATH as it goes on, so the next one to come is held again.
pub fn hold(name: &str) {
    #[cfg(feature = "failpoints")]
    fail::eval(name, |arg| {
        let Some(arg) = arg else {
            return;
        };
        let (each, release) = match arg.strip_prefix("each:") {
            Some(path) => (true, std::path::PathBuf::from(path)),
            None => (false, std::path::PathBuf::from(arg)),
        };
        let mut held = release.clone().into_os_string();
        held.push(".held");
        loop {
            // Again each round: a holder that went on removed it.
            let _ = std::fs::write(&held, b"");
            let released = match each {
                true => std::fs::remove_file(&release).is_ok(),
                false => release.exists(),
            };
            if released {
                if each {
                    let _ = std::fs::remove_file(&held);
                }
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    });
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}

/// Whether a test build is asked to fail at `name`
/// (`FAILPOINTS="NAME=return(fail)"`): a store that fails at that step,
/// for the crash tests, or a kernel feature taken away. Never in a release.
pub fn failing(name: &str) -> bool {
    #[cfg(feature = "failpoints")]
    return fail::eval(name, |arg| arg.as_deref() == Some("fail")).unwrap_or(false);
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = name;
        false
    }
}

/// Runs `job` now, or in a test build asking to hold `name`, on a thread
/// of its own once `hold(name)` lets it go (the caller must not wait:
/// the kernel's request thread).
pub fn later(name: &str, job: impl FnOnce() + Send + 'static) {
    #[cfg(feature = "failpoints")]
    if fail::list().iter().any(|(n, _)| n == name) {
        let name = name.to_string();
        std::thread::spawn(move || {
            hold(&name);
            job()
        });
        return;
    }
    let _ = name;
    job()
}

/// `default`, or in a test build (feature `failpoints`) the duration the
/// environment variable `var` gives: tests shorten waits that exist for
/// clocks and other hosts (a gc's grace, the stat cache's racy window).
pub fn test_duration(var: &str, default: std::time::Duration) -> std::time::Duration {
    #[cfg(feature = "failpoints")]
    if let Some(d) = std::env::var(var)
        .ok()
        .and_then(|v| humantime::parse_duration(&v).ok())
    {
        return d;
    }
    let _ = var;
    default
}
