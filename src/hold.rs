//! Ordering points for tests (feature `failpoints`; nothing in a release):
//! `FAILPOINTS="NAME=return(PATH)"` holds whoever reaches `hold(NAME)`
//! there until the file PATH exists. It first creates `PATH.held`, so a
//! test waits for that, does what must happen meanwhile, then creates
//! PATH: events ordered by conditions, never by sleeps.

/// Holds the caller at `name` while a test asks for it (see above).
pub fn hold(name: &str) {
    #[cfg(feature = "failpoints")]
    fail::eval(name, |arg| {
        let Some(release) = arg.map(std::path::PathBuf::from) else {
            return;
        };
        let mut held = release.clone().into_os_string();
        held.push(".held");
        let _ = std::fs::write(held, b"");
        while !release.exists() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    });
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}
