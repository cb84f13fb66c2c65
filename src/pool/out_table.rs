//! A heap's record of the blocks it handed out: the newest few in a short array that a release
//! scans first (most programs give back what they took last: scratch, temporaries), the rest in
//! a hash map. A release of a recent block costs a few compares instead of a hash probe.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::addr_hash::AddrHasher;

const RECENT: usize = 8;

/// What a heap knows of a block it has out.
#[derive(Clone, Copy, Default)]
pub(super) struct Out {
    /// Bytes of the block (its class or grain size).
    pub block: usize,
    /// Bytes the caller asked for.
    pub requested: usize,
    /// Its slab class index + 1; 0 for a block of the large arena.
    pub class: u8,
}

#[derive(Default)]
pub(super) struct OutTable {
    recent: [(usize, Out); RECENT],
    len: usize,
    older: HashMap<usize, Out, BuildHasherDefault<AddrHasher>>,
}

impl OutTable {
    #[inline]
    pub fn insert(&mut self, addr: usize, out: Out) {
        if self.len == RECENT {
            // The oldest entry moves to the map.
            let (old, o) = self.recent[0];
            self.older.insert(old, o);
            self.recent.copy_within(1.., 0);
            self.len -= 1;
        }
        self.recent[self.len] = (addr, out);
        self.len += 1;
    }

    /// Removes the entry of `addr`, if there is one.
    #[inline]
    pub fn remove(&mut self, addr: usize) -> Option<Out> {
        // The newest, the usual case, without a search.
        if let Some(&(a, out)) = self.recent[..self.len].last() {
            if a == addr {
                self.len -= 1;
                return Some(out);
            }
        }
        // Newest first.
        if let Some(i) = self.recent[..self.len].iter().rposition(|&(a, _)| a == addr) {
            let out = self.recent[i].1;
            // The newest (the usual case) moves nothing: no call to memmove.
            if i + 1 < self.len {
                self.recent.copy_within(i + 1..self.len, i);
            }
            self.len -= 1;
            return Some(out);
        }
        if self.older.is_empty() {
            return None;
        }
        self.older.remove(&addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_back_once_whether_recent_or_older() {
        let mut t = OutTable::default();
        let out = |n| Out {
            block: n,
            requested: n,
            class: 0,
        };
        for a in 1..=20 {
            t.insert(a * 64, out(a));
        }
        // Out of order: some from the map, some from the array.
        for a in [3, 20, 1, 15, 9, 19, 2] {
            assert_eq!(t.remove(a * 64).map(|o| o.block), Some(a));
            assert!(t.remove(a * 64).is_none(), "removed once");
        }
        t.insert(3 * 64, out(33));
        assert_eq!(t.remove(3 * 64).map(|o| o.block), Some(33));
        let left: Vec<usize> = (1..=20).filter(|a| t.remove(a * 64).is_some()).collect();
        assert_eq!(left, vec![4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 16, 17, 18]);
        assert!(t.remove(7).is_none(), "never inserted");
    }
}
