//! A daemon's log file: appended, each line timed, rotated by size (one
//! older file kept), and a message that repeats within a minute counted
//! instead of written again, so a program looping on a failing call cannot
//! fill the disk.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use tracing_subscriber::fmt::MakeWriter;

/// Tells a daemon the file it logs to (set by `mount --daemon`).
pub const DAEMON_LOG_ENV: &str = "DETAFS_DAEMON_LOG";
/// Size at which the log is rotated (bytes; default 16 MiB).
pub const LOG_MAX_ENV: &str = "DETAFS_LOG_MAX_BYTES";
const DEFAULT_MAX: u64 = 16 << 20;
/// A message is written at most once per this; repeats are counted.
const REPEAT_WINDOW: Duration = Duration::from_secs(60);
/// Distinct messages remembered for counting.
const REMEMBERED: usize = 4096;

pub struct LogFile {
    state: Mutex<State>,
}

struct State {
    path: PathBuf,
    file: File,
    size: u64,
    max: u64,
    seen: HashMap<Vec<u8>, Seen>,
    /// The daemon's stdout and stderr are this file (`mount --daemon`).
    stdio: bool,
}

struct Seen {
    written: Instant,
    repeats: u64,
}

impl LogFile {
    pub fn open(path: &Path, max: u64, stdio: bool) -> std::io::Result<LogFile> {
        let file = open_append(path)?;
        Ok(LogFile {
            state: Mutex::new(State {
                path: path.to_path_buf(),
                size: file.metadata()?.len(),
                file,
                max: max.max(4096),
                seen: HashMap::new(),
                stdio,
            }),
        })
    }

    /// The daemon's log when it is one (`DAEMON_LOG_ENV` set).
    pub fn from_env() -> Option<LogFile> {
        let path = std::env::var_os(DAEMON_LOG_ENV)?;
        let max = std::env::var(LOG_MAX_ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(DEFAULT_MAX);
        LogFile::open(Path::new(&path), max, true).ok()
    }

    /// Writes the counts of messages repeated since they were last written
    /// (at exit, so none is lost).
    pub fn flush_repeats(&self) {
        let mut st = self.state.lock();
        let counted: Vec<(Vec<u8>, u64)> = st
            .seen
            .iter_mut()
            .filter(|(_, s)| s.repeats > 0)
            .map(|(m, s)| (m.clone(), std::mem::take(&mut s.repeats)))
            .collect();
        for (message, repeats) in counted {
            st.write_line(&message, repeats);
        }
    }

    fn event(&self, message: &[u8]) {
        let mut st = self.state.lock();
        let now = Instant::now();
        if let Some(seen) = st.seen.get_mut(message) {
            if now.duration_since(seen.written) < REPEAT_WINDOW {
                seen.repeats += 1;
                return;
            }
            let repeats = std::mem::take(&mut seen.repeats);
            seen.written = now;
            st.write_line(message, repeats);
            return;
        }
        if st.seen.len() >= REMEMBERED {
            drop(st);
            self.flush_repeats();
            st = self.state.lock();
            st.seen.clear();
        }
        st.seen.insert(
            message.to_vec(),
            Seen {
                written: now,
                repeats: 0,
            },
        );
        st.write_line(message, 0);
    }
}

impl State {
    /// One line: time, the message, how often it came since last written.
    fn write_line(&mut self, message: &[u8], repeats: u64) {
        let message = message.strip_suffix(b"\n").unwrap_or(message);
        let mut line =
            format!("{} ", humantime::format_rfc3339_seconds(SystemTime::now())).into_bytes();
        line.extend_from_slice(message);
        if repeats > 0 {
            line.extend_from_slice(format!(" [and {repeats} more times]").as_bytes());
        }
        line.push(b'\n');
        if self.size + line.len() as u64 > self.max {
            self.rotate();
        }
        if self.file.write_all(&line).is_ok() {
            self.size += line.len() as u64;
        }
    }

    /// `log` becomes `log.1` (replacing it) and a new `log` is begun; a
    /// daemon's stdout and stderr (a panic's message) follow it.
    fn rotate(&mut self) {
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        if std::fs::rename(&self.path, &old).is_err() {
            return;
        }
        if let Ok(file) = open_append(&self.path) {
            if self.stdio {
                let _ = nix::unistd::dup2_stdout(&file);
                let _ = nix::unistd::dup2_stderr(&file);
            }
            self.file = file;
            self.size = 0;
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// One event's text, handed to the log when the formatter is done with it.
pub struct EventWriter<'a> {
    log: &'a LogFile,
    buf: Vec<u8>,
}

impl Write for EventWriter<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter<'_> {
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            self.log.event(&self.buf);
        }
    }
}

impl<'a> MakeWriter<'a> for LogFile {
    type Writer = EventWriter<'a>;

    fn make_writer(&'a self) -> EventWriter<'a> {
        EventWriter {
            log: self,
            buf: Vec::new(),
        }
    }
}

/// This process's daemon log, once `install` found one.
static DAEMON_LOG: std::sync::OnceLock<LogFile> = std::sync::OnceLock::new();

/// Makes this process log to its daemon log, if it is a daemon; returns
/// whether it is.
pub fn install() -> bool {
    LogFile::from_env().is_some_and(|log| DAEMON_LOG.set(log).is_ok())
}

/// Counts of repeated messages, written before the daemon exits.
pub fn flush() {
    if let Some(log) = DAEMON_LOG.get() {
        log.flush_repeats();
    }
}

/// The subscriber's writer for the daemon log.
pub struct ToDaemonLog;

impl<'a> MakeWriter<'a> for ToDaemonLog {
    type Writer = EventWriter<'a>;

    fn make_writer(&'a self) -> EventWriter<'a> {
        DAEMON_LOG
            .get()
            .expect("installed before the subscriber")
            .make_writer()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_event(log: &LogFile, text: &str) {
        let mut w = log.make_writer();
        w.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn a_repeated_message_is_counted_and_the_file_rotates_at_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mount.log");
        let log = LogFile::open(&path, 8192, false).unwrap();
        for _ in 0..10_000 {
            log_event(&log, "ERROR read: the store is unreachable\n");
        }
        log.flush_repeats();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.ends_with("ERROR read: the store is unreachable [and 9999 more times]\n"));

        // Distinct messages: the file never passes its size, one older kept.
        for i in 0..10_000 {
            log_event(&log, &format!("WARN message {i}\n"));
        }
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size <= 8192, "{size}");
        let older = std::fs::read_to_string(dir.path().join("mount.log.1")).unwrap();
        assert!(older.len() <= 8192 && older.contains("WARN message"));
        let newest = std::fs::read_to_string(&path).unwrap();
        assert!(newest.trim_end().ends_with("WARN message 9999"), "{newest}");
    }
}
