//! One memory budget for what a process keeps to answer without the store:
//! decoded trees, a mount's version inodes and kept listings, verified
//! chunks. Each part says what it holds, in bytes reckoned from its own
//! types' sizes; the parts that can let go (trees, listings) keep within
//! what the others leave of the budget, down to a floor they need to work
//! at all. The version inodes cannot let go (the kernel decides what it
//! holds): they are counted, and the rest makes room for them.

use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What holds memory under the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Trees,
    Listings,
    Inodes,
    Chunks,
}

const PARTS: usize = 4;

/// The least a part that lets go keeps, however tight the budget: a few
/// folders' trees or listings, so a walk still finds its folder in memory.
const FLOOR: usize = 4 << 20;

pub struct Budget {
    total: usize,
    held: [AtomicUsize; PARTS],
}

/// What `.detafs/health` and the gateway's health tell of the budget, and
/// the process's resident memory now and at its peak beside it.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct BudgetReport {
    pub budget: usize,
    pub trees: usize,
    pub listings: usize,
    pub inodes: usize,
    pub chunks: usize,
    pub resident: Option<u64>,
    pub peak: Option<u64>,
}

impl Budget {
    pub fn new(total: usize) -> Budget {
        Budget {
            total,
            held: Default::default(),
        }
    }

    /// `part` now holds `bytes`.
    pub fn holds(&self, part: Part, bytes: usize) {
        self.held[part as usize].store(bytes, Ordering::Relaxed);
    }

    /// What `part` may hold: the budget less what the other parts hold,
    /// and never less than the floor.
    pub fn room(&self, part: Part) -> usize {
        let others: usize = (0..PARTS)
            .filter(|&i| i != part as usize)
            .map(|i| self.held[i].load(Ordering::Relaxed))
            .sum();
        self.total.saturating_sub(others).max(FLOOR)
    }

    pub fn report(&self) -> BudgetReport {
        let held = |p: Part| self.held[p as usize].load(Ordering::Relaxed);
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        BudgetReport {
            budget: self.total,
            trees: held(Part::Trees),
            listings: held(Part::Listings),
            inodes: held(Part::Inodes),
            chunks: held(Part::Chunks),
            resident: status_bytes(&status, "VmRSS:"),
            peak: status_bytes(&status, "VmHWM:"),
        }
    }
}

/// A `/proc/PID/status` figure given in kB, in bytes.
fn status_bytes(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find_map(|l| l.strip_prefix(field))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_has_what_the_others_leave_and_never_less_than_the_floor() {
        let b = Budget::new(100 << 20);
        assert_eq!(b.room(Part::Trees), 100 << 20);
        b.holds(Part::Inodes, 60 << 20);
        b.holds(Part::Chunks, 16 << 20);
        assert_eq!(b.room(Part::Trees), 24 << 20);
        // What a part holds itself does not count against it.
        b.holds(Part::Trees, 24 << 20);
        assert_eq!(b.room(Part::Trees), 24 << 20);
        assert_eq!(b.room(Part::Listings), FLOOR);
        b.holds(Part::Inodes, 200 << 20);
        assert_eq!(b.room(Part::Trees), FLOOR);
        let r = b.report();
        assert_eq!(
            (r.budget, r.trees, r.listings, r.inodes, r.chunks),
            (100 << 20, 24 << 20, 0, 200 << 20, 16 << 20)
        );
        // This process's memory, as the kernel counts it.
        let (resident, peak) = (r.resident.unwrap(), r.peak.unwrap());
        assert!(resident > 0 && peak >= resident, "{r:?}");
        assert_eq!(
            status_bytes("VmRSS:\t  1234 kB\n", "VmRSS:"),
            Some(1234 * 1024)
        );
    }
}
