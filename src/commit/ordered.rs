//! A pool of threads applying one function to a stream of jobs, handing
//! the results back in the order the jobs went in. A commit runs two: one
//! hashes chunks, one encodes them (compress, seal), so that reading and
//! chunking, hashing and encoding overlap on all the cores while what is
//! stored stays exactly what one core would store.
//!
//! At most `depth` jobs are in flight, which bounds memory to a few jobs.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::{Arc, mpsc};

/// A job's result, or the panic of the thread that ran it.
type Outcome<R> = std::thread::Result<R>;

pub struct Ordered<J, R> {
    jobs: mpsc::Sender<(u64, J)>,
    done: mpsc::Receiver<(u64, Outcome<R>)>,
    depth: usize,
    /// Sequence numbers: of the next job, and of the next result due.
    sent: u64,
    due: u64,
    /// Results that finished ahead of an older one.
    early: BTreeMap<u64, Outcome<R>>,
}

impl<J: Send + 'static, R: Send + 'static> Ordered<J, R> {
    /// Starts `threads` threads named `name` running `f`. They inherit the
    /// caller's scheduling priority (a commit through the mount runs at
    /// nice 10), and end when the pool is dropped.
    pub fn start(
        name: &str,
        threads: usize,
        depth: usize,
        f: impl Fn(J) -> R + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let (jobs, inbox) = mpsc::channel::<(u64, J)>();
        let (outbox, done) = mpsc::channel();
        let inbox = Arc::new(Mutex::new(inbox));
        let f = Arc::new(f);
        for _ in 0..threads.max(1) {
            let (inbox, outbox, f) = (inbox.clone(), outbox.clone(), f.clone());
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    loop {
                        let job = inbox.lock().recv();
                        let Ok((seq, job)) = job else { break };
                        // A panic goes to the caller with the job's place: a
                        // result that never came would be waited for forever.
                        let outcome =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(job)));
                        if outbox.send((seq, outcome)).is_err() {
                            break;
                        }
                    }
                })?;
        }
        Ok(Ordered {
            jobs,
            done,
            depth: depth.max(1),
            sent: 0,
            due: 0,
            early: BTreeMap::new(),
        })
    }

    /// Jobs sent whose results have not been handed back.
    pub fn in_flight(&self) -> usize {
        crate::limits::to_usize(self.sent - self.due)
    }

    /// Queues a job; returns the results finished meanwhile, in order
    /// (waiting for the oldest when `depth` are in flight).
    pub fn submit(&mut self, job: J) -> Vec<R> {
        let mut out = Vec::new();
        if self.in_flight() >= self.depth {
            out.extend(self.next(true));
        }
        out.extend(std::iter::from_fn(|| self.next(false)));
        // The threads only stop when this side hangs up or one panics;
        // then `next` reports it.
        let _ = self.jobs.send((self.sent, job));
        self.sent += 1;
        out
    }

    /// Waits for the oldest result not yet handed back, if any is in flight.
    pub fn wait_next(&mut self) -> Option<R> {
        self.next(true)
    }

    /// Waits for everything in flight.
    pub fn drain(&mut self) -> Vec<R> {
        std::iter::from_fn(|| self.next(true)).collect()
    }

    /// The result due next: waited for if `wait`, else only if it is done.
    fn next(&mut self, wait: bool) -> Option<R> {
        if self.due == self.sent {
            return None;
        }
        while !self.early.contains_key(&self.due) {
            let (seq, r) = if wait {
                self.done
                    .recv()
                    .expect("the worker threads are gone (they could not start)")
            } else {
                self.done.try_recv().ok()?
            };
            self.early.insert(seq, r);
        }
        let r = self.early.remove(&self.due).expect("checked above");
        self.due += 1;
        Some(r.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order_whatever_finishes_first() {
        let mut pool = Ordered::start("test", 3, 5, |i: u32| {
            // Later jobs often finish first.
            if i.is_multiple_of(3) {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            i * 2
        })
        .unwrap();
        let mut back = Vec::new();
        for i in 0..100u32 {
            back.extend(pool.submit(i));
            assert!(pool.in_flight() <= 5);
        }
        back.extend(pool.drain());
        assert_eq!(pool.in_flight(), 0);
        assert_eq!(back, (0..100).map(|i| i * 2).collect::<Vec<_>>());
        assert!(pool.drain().is_empty());
    }

    #[test]
    fn a_panic_in_a_worker_reaches_the_caller_and_nothing_hangs() {
        let mut pool = Ordered::start("test", 2, 4, |i: u32| {
            assert!(i != 3, "job 3 fails");
            i
        })
        .unwrap();
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut back = Vec::new();
            for i in 0..10 {
                back.extend(pool.submit(i));
            }
            back.extend(pool.drain());
            back
        }));
        assert!(run.is_err(), "the panic came back");
    }
}
