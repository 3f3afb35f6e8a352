//! Staged copies a commit made redundant are removed in the background, so
//! a commit returns once its version and staging's rows are durable (20,000
//! small copies take longer to unlink than to commit). A copy-up of such a
//! row reuses its file name, so it claims the name first: a sweep never
//! removes a copy made after it began. A sweep cut short by a crash leaves
//! files no row refers to; opening staging removes them.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

pub struct Sweeper {
    data: PathBuf,
    /// Copies still to remove, by row id.
    doomed: Arc<Mutex<HashSet<u64>>>,
    worker: std::cell::RefCell<Option<JoinHandle<()>>>,
}

impl Sweeper {
    /// Sweeps staged copies in `data` (`data/<id>`).
    pub fn new(data: PathBuf) -> Self {
        Sweeper {
            data,
            doomed: Arc::default(),
            worker: Default::default(),
        }
    }

    /// Removes the copies of `ids`, whose rows no longer need them durably.
    pub fn sweep(&self, ids: Vec<u64>) {
        if ids.is_empty() {
            return;
        }
        self.doomed.lock().extend(&ids);
        let previous = self.worker.borrow_mut().take();
        let (doomed, data, todo) = (self.doomed.clone(), self.data.clone(), ids.clone());
        let spawned = std::thread::Builder::new()
            .name("detafs-sweep".into())
            .spawn(move || {
                if let Some(p) = previous {
                    let _ = p.join();
                }
                remove(&doomed, &data, todo);
            });
        match spawned {
            Ok(handle) => *self.worker.borrow_mut() = Some(handle),
            Err(_) => remove(&self.doomed, &self.data, ids),
        }
    }

    /// Called before row `id` gets a new staged copy: a sweep still due to
    /// remove its old one leaves the name alone.
    pub fn claim(&self, id: u64) {
        self.doomed.lock().remove(&id);
    }
}

fn remove(doomed: &Mutex<HashSet<u64>>, data: &std::path::Path, ids: Vec<u64>) {
    for id in ids {
        // Held across the unlink: a claim waits for it, never loses to it.
        let mut doomed = doomed.lock();
        if doomed.remove(&id) {
            let _ = std::fs::remove_file(data.join(id.to_string()));
        }
    }
}

impl Drop for Sweeper {
    /// Staging's lock is released after this: whoever opens it next finds
    /// no sweep still running.
    fn drop(&mut self) {
        if let Some(worker) = self.worker.get_mut().take() {
            let _ = worker.join();
        }
    }
}
