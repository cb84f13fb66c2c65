//! A run's per-node counters (`pending`): one `AtomicU32` per node, each on a cache line of its
//! own where a small graph runs on two threads or more. (A value's count of readers lives in its
//! slot, on the line its readers take its address from: `RunState::refs`.)
//!
//! Packed in order, sixteen neighbours share each 64-byte line: the values or nodes of one
//! layer of a graph, which its threads finish together. Each decrement then takes the line from
//! the thread that decremented a neighbour a moment before, though no two of them touch the same
//! counter (false sharing): on two threads, forced onto the executor, these two locked
//! decrements were 45% of a node's time in the layered benchmark (`perf annotate`, 2026-12-05).
//! So in a run on two threads or more, up to [`PADDED_UP_TO`] counters each get a line (64
//! bytes; 64 KiB at most an array), and an access costs one shift more. Otherwise they stay
//! packed. A run on one thread (its caller, or an executor of one) shares nothing, and wants its
//! working set small: padded, the layered benchmark ran 10% slower there (its counters alone no
//! longer fit in L1 beside the slots). A larger graph's threads work far apart in it (a thief
//! takes the oldest task), and a thread going through consecutive nodes wants their counters on
//! the lines it already holds; padded, a million nodes would also take 64 MB an array.

use std::sync::atomic::AtomicU32;

/// The most counters an array gives a line each (module docs).
const PADDED_UP_TO: usize = 1024;

/// `u32` counters in a 64-byte line: `1 << LINE_SHIFT`.
const LINE_SHIFT: u32 = 4;

/// `len` counters, packed or each on its own line (module docs).
pub(in crate::exec) struct Counters {
    cells: Box<[AtomicU32]>,
    /// Counter `i` is at `cells[i << shift]`: `LINE_SHIFT` padded, 0 packed.
    shift: u32,
}

impl Counters {
    /// `len` counters, all 0, packed.
    pub(in crate::exec) fn new(len: usize) -> Self {
        Counters {
            cells: (0..len).map(|_| AtomicU32::new(0)).collect(),
            shift: 0,
        }
    }

    /// Lays the counters out for a run on two threads or more (`parallel`) or on one (module
    /// docs): new ones, all 0, if the layout changes, else these as they are.
    pub(in crate::exec) fn fit(&mut self, parallel: bool) {
        let len = self.len();
        let shift = if parallel && len <= PADDED_UP_TO { LINE_SHIFT } else { 0 };
        if shift != self.shift {
            self.cells = (0..len << shift).map(|_| AtomicU32::new(0)).collect();
            self.shift = shift;
        }
    }

    /// How many counters there are.
    fn len(&self) -> usize {
        self.cells.len() >> self.shift
    }

    /// The counters as a run reads them: a copy of the slice and the layout, so that an access
    /// is one load less than through `&Counters`.
    pub(in crate::exec) fn view(&self) -> CountersView<'_> {
        CountersView {
            cells: &self.cells,
            shift: self.shift,
        }
    }

    /// Sets counter `i` to `starts[i]` for each `i` (the counters `starts` does not reach keep
    /// their values).
    pub(in crate::exec) fn reset(&mut self, starts: &[u32]) {
        let starts = &starts[..starts.len().min(self.len())];
        if self.shift == 0 {
            // Packed: a plain copy, as each run of a large graph makes it.
            for (cell, &start) in self.cells.iter_mut().zip(starts) {
                *cell.get_mut() = start;
            }
            return;
        }
        for (line, &start) in self.cells.chunks_exact_mut(1 << LINE_SHIFT).zip(starts) {
            *line[0].get_mut() = start;
        }
    }
}

/// A run's access to [`Counters`].
#[derive(Clone, Copy)]
pub(in crate::exec) struct CountersView<'a> {
    cells: &'a [AtomicU32],
    shift: u32,
}

impl<'a> CountersView<'a> {
    /// Counter `i`.
    #[inline(always)]
    pub(in crate::exec) fn at(self, i: u32) -> &'a AtomicU32 {
        &self.cells[(i as usize) << self.shift]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn small_arrays_of_parallel_runs_give_each_counter_a_line_and_others_pack_them() {
        for (len, parallel) in [0, 1, 15, 16, 17, 300, PADDED_UP_TO, PADDED_UP_TO + 1, 5000]
            .into_iter()
            .flat_map(|len| [(len, false), (len, true)])
        {
            let mut c = Counters::new(len);
            c.fit(parallel);
            let v = c.view();
            let base = c.cells.as_ptr() as usize;
            let gap = if parallel && len <= PADDED_UP_TO { 64 } else { 4 };
            assert_eq!(c.cells.len(), len * gap / 4);
            for i in 1..len as u32 {
                // Counters 64 bytes apart can never share a 64-byte line.
                assert_eq!(v.at(i) as *const _ as usize - v.at(i - 1) as *const _ as usize, gap);
            }
            if len > 0 {
                assert_eq!(v.at(0) as *const _ as usize, base);
            }
        }
    }

    #[test]
    fn reset_sets_each_counter_from_its_start() {
        for (len, parallel) in [(300, false), (300, true), (PADDED_UP_TO + 3, true)] {
            let mut c = Counters::new(len);
            c.fit(parallel);
            let starts: Vec<u32> = (0..len as u32).map(|i| i * 7 + 1).collect();
            c.reset(&starts);
            let v = c.view();
            assert!((0..len as u32).all(|i| v.at(i).load(Ordering::Relaxed) == i * 7 + 1));
            v.at(5).fetch_sub(1, Ordering::Relaxed);
            assert_eq!(
                (v.at(5).load(Ordering::Relaxed), v.at(4).load(Ordering::Relaxed)),
                (35, 29)
            );
            // Fewer starts than counters: the rest keep their values.
            c.reset(&[0; 4]);
            assert_eq!(c.view().at(4).load(Ordering::Relaxed), 29);
            // The same layout again keeps the counters; another one starts them over.
            c.fit(parallel);
            assert_eq!(c.view().at(4).load(Ordering::Relaxed), 29);
            c.fit(!parallel);
            let moved = len <= PADDED_UP_TO;
            assert_eq!(c.view().at(4).load(Ordering::Relaxed), if moved { 0 } else { 29 });
        }
    }
}
