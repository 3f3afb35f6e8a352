//! An in-memory LRU map bounded by the total weight of its values (the
//! entries of trees or listings it holds), not by their number: a cache of
//! a few huge folders and one of many small ones take about the same memory.

use lru::LruCache;
use std::hash::Hash;

pub struct WeighedLru<K: Hash + Eq, V> {
    lru: LruCache<K, (V, usize)>,
    weight: usize,
    max: usize,
}

impl<K: Hash + Eq, V> WeighedLru<K, V> {
    pub fn new(max: usize) -> Self {
        WeighedLru {
            lru: LruCache::unbounded(),
            weight: 0,
            max,
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
        while self.weight > self.max && self.lru.len() > 1 {
            match self.lru.pop_lru() {
                Some((_, (_, w))) => self.weight -= w,
                None => break,
            }
        }
    }

    pub fn remove(&mut self, k: &K) {
        if let Some((_, w)) = self.lru.pop(k) {
            self.weight -= w;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_weight_stays_bounded_and_the_newest_stays() {
        let mut c = WeighedLru::new(10);
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
    }
}
