//! The program's one tokio runtime and its pool for blocking work. The
//! program builds it once (the command line in `main`, the Python module
//! once per process, each test its own) and hands it to the store, the
//! gateway client, the mount and the gateway; sync code crosses into async
//! code here alone (`block_on`).

use crate::error::{Error, Result};
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// Blocking work run at once on the pool (`spawn_work`); more waits its turn.
const WORK_PERMITS: usize = 16;

pub struct Runtime {
    rt: tokio::runtime::Runtime,
    work: Arc<Semaphore>,
}

impl Runtime {
    pub fn new() -> Result<Arc<Runtime>> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            // The work's own blocking store calls need threads beside it.
            .max_blocking_threads(WORK_PERMITS + 4)
            // Tree walks recurse up to `limits::MAX_DEPTH` levels.
            .thread_stack_size(8 << 20)
            .enable_all()
            .build()
            .map_err(|e| Error::io("tokio runtime", e))?;
        Ok(Arc::new(Runtime {
            rt,
            work: Arc::new(Semaphore::new(WORK_PERMITS)),
        }))
    }

    /// Runs a future to completion from sync code.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Runs a future in the background; its handle says how it ended.
    pub fn spawn<F>(&self, f: F) -> JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.rt.spawn(f)
    }

    /// Runs blocking work (which may itself wait on the store) on the
    /// blocking pool, at most `WORK_PERMITS` at once. Past that the work
    /// waits its turn in a queue (first come, first served): the caller,
    /// the kernel's request loop, never runs it or waits for it.
    pub fn spawn_work(&self, work: impl FnOnce() + Send + 'static) {
        // A free permit: straight to the pool (one thread hop, not two).
        let Err(work) = self.try_spawn_work(work) else {
            return;
        };
        let permits = self.work.clone();
        self.rt.spawn(async move {
            // The semaphore is never closed, so acquiring only waits.
            let Ok(permit) = permits.acquire_owned().await else {
                return;
            };
            let _ = tokio::task::spawn_blocking(move || {
                work();
                drop(permit);
            })
            .await;
        });
    }

    /// Runs blocking work for async code (the gateway) on the blocking
    /// pool, within the same bound as `spawn_work`: the pool keeps threads
    /// for the store's own blocking calls, which the work waits on.
    pub async fn work<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> std::result::Result<T, tokio::task::JoinError> {
        let permit = self
            .work
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        tokio::task::spawn_blocking(move || {
            let done = work();
            drop(permit);
            done
        })
        .await
    }

    /// Like `spawn_work`, but hands the work back instead of running it here
    /// when the pool is full: for work that may be skipped (read-ahead).
    pub fn try_spawn_work<W: FnOnce() + Send + 'static>(&self, work: W) -> Result<(), W> {
        match self.work.clone().try_acquire_owned() {
            Ok(permit) => {
                self.rt.spawn_blocking(move || {
                    work();
                    drop(permit);
                });
                Ok(())
            }
            Err(_) => Err(work),
        }
    }
}
