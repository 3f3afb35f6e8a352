//! Buffers of whole runs (a pack's range, read and opened in place),
//! handed back when the last reader of their chunks lets go and given to
//! the next read. Without it a sequential reader's 4–8 MiB buffers are
//! each fresh pages the kernel maps, zeroes and unmaps again (a seventh
//! of a mount's CPU for a first read: docs/benchmarks.md).

use bytes::Bytes;
use parking_lot::Mutex;

/// Most bytes of idle buffers kept (what the CLI's readers of one file
/// hold at once: three 8 MiB runs).
const KEPT_BYTES: usize = 32 << 20;
/// Smaller buffers come from the heap, which reuses them by itself.
const SMALLEST: usize = 256 << 10;
/// Capacities are rounded up to this, so runs of a little more or less
/// than their bound fit each other's buffers.
const STEP: usize = 1 << 20;

/// Idle buffers, handed back.
struct Pool(Mutex<Vec<Vec<u8>>>);

/// The process's pool, for every read of a run.
static POOL: Pool = Pool::new();

/// An empty buffer for `len` bytes: one handed back, if one fits.
pub fn take(len: usize) -> Vec<u8> {
    POOL.take(len)
}

/// `buf` as shared bytes whose buffer comes back to `take` once the last
/// slice of it is dropped.
pub fn shared(buf: Vec<u8>) -> Bytes {
    POOL.shared(buf)
}

impl Pool {
    const fn new() -> Pool {
        Pool(Mutex::new(Vec::new()))
    }

    fn take(&self, len: usize) -> Vec<u8> {
        if len < SMALLEST {
            return Vec::with_capacity(len);
        }
        // Not one much larger than asked: a cache weighs what it keeps by
        // its bytes, not its buffer's capacity.
        let most = 2 * len.max(STEP);
        let mut idle = self.0.lock();
        if let Some(i) = idle
            .iter()
            .position(|b| (len..=most).contains(&b.capacity()))
        {
            let mut buf = idle.swap_remove(i);
            buf.clear();
            return buf;
        }
        drop(idle);
        Vec::with_capacity(len.div_ceil(STEP) * STEP)
    }

    fn shared(&'static self, buf: Vec<u8>) -> Bytes {
        match buf.capacity() < SMALLEST {
            true => Bytes::from(buf),
            false => Bytes::from_owner(HandedBack(buf, self)),
        }
    }
}

struct HandedBack(Vec<u8>, &'static Pool);

impl AsRef<[u8]> for HandedBack {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for HandedBack {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        let mut idle = self.1.0.lock();
        let held: usize = idle.iter().map(Vec::capacity).sum();
        if held + buf.capacity() <= KEPT_BYTES {
            idle.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_once_its_last_slice_is_dropped() {
        static POOL: Pool = Pool::new();
        let (take, shared) = (|len| POOL.take(len), |buf| POOL.shared(buf));
        let mut buf = take(3 << 20);
        buf.extend_from_slice(&vec![7; 3 << 20]);
        let at = buf.as_ptr();
        let bytes = shared(buf);
        let slice = bytes.slice(10..20);
        drop(bytes);
        // Still in use: a new buffer is another.
        let other = take(3 << 20);
        assert_ne!(other.as_ptr(), at);
        drop(slice);
        let again = take(3 << 20);
        assert_eq!((again.as_ptr(), again.len()), (at, 0));
        // A small read never takes a buffer many times its size.
        drop(again);
        drop(other);
        let big = shared(take(16 << 20));
        drop(big);
        assert!(take(300 << 10).capacity() < 4 << 20);
    }
}
