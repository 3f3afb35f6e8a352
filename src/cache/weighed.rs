//! An in-memory LRU map bounded by the total weight of its values (the
//! bytes of the trees or listings it holds), not by their number: a cache
//! of a few huge folders and one of many small ones take about the same
//! memory. It keeps within its own bound and within what the memory budget
//! leaves it (`budget.rs`), and tells the budget what it holds.

use super::budget::{Budget, Part};
use lru::LruCache;
use std::hash::Hash;
use std::sync::Arc;

pub struct WeighedLru<K: Hash + Eq, V> {
    lru: LruCache<K, (V, usize)>,
    weight: usize,
    max: usize,
    budget: Arc<Budget>,
    part: Part,
}

impl<K: Hash + Eq, V> WeighedLru<K, V> {
    pub fn new(max: usize, budget: Arc<Budget>, part: Part) -> Self {
        WeighedLru {
            lru: LruCache::unbounded(),
            weight: 0,
            max,
            budget,
            part,
        }
    }

    pub fn get(&mut self, k: &K) -> Option<&V> {
        self.lru.get(k).map(|(v, _)| v)
    }

    pub fn contains(&self, k: &K) -> bool {
        self.lru.contains(k)
    }

    /// Keeps `v`, dropping the least recently used values while the total
    /// weight is over the bound (`v` itself stays, however heavy).
    pub fn put(&mut self, k: K, v: V, weight: usize) {
        self.weight += weight;
        if let Some((_, old)) = self.lru.put(k, (v, weight)) {
            self.weight -= old;
        }
        let bound = self.max.min(self.budget.room(self.part));
        while self.weight > bound && self.lru.len() > 1 {
            match self.lru.pop_lru() {
                Some((_, (_, w))) => self.weight -= w,
                None => break,
            }
        }
        self.budget.holds(self.part, self.weight);
    }

    pub fn remove(&mut self, k: &K) {
        if let Some((_, w)) = self.lru.pop(k) {
            self.weight -= w;
            self.budget.holds(self.part, self.weight);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_weight_stays_bounded_and_the_newest_stays() {
        let budget = Arc::new(Budget::new(1 << 30));
        let mut c = WeighedLru::new(10, budget.clone(), Part::Trees);
        c.put(1, "a", 4);
        c.put(2, "b", 4);
        assert!(c.get(&1).is_some()); // 2 is now the least recent
        c.put(3, "c", 4);
        assert!(c.contains(&1) && c.contains(&3) && !c.contains(&2));
        c.put(4, "huge", 50);
        assert!(c.contains(&4) && !c.contains(&1) && !c.contains(&3));
        c.remove(&4);
        c.put(5, "e", 10);
        assert!(c.contains(&5));
        assert_eq!(budget.report().trees, 10);
    }

    #[test]
    fn it_makes_room_for_what_the_budget_counts_elsewhere() {
        let mib = 1 << 20;
        let budget = Arc::new(Budget::new(64 * mib));
        let mut c = WeighedLru::new(32 * mib, budget.clone(), Part::Listings);
        for k in 0..8 {
            c.put(k, (), 4 * mib);
        }
        assert_eq!(budget.report().listings, 32 * mib);
        // The inodes grow: the listings keep within what is left.
        budget.holds(Part::Inodes, 52 * mib);
        c.put(8, (), 4 * mib);
        assert_eq!(budget.report().listings, 12 * mib);
        assert!(c.contains(&8) && !c.contains(&5));
    }
}
