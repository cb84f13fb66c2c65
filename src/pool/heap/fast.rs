//! The fast paths of a heap: an acquire or a release by its owner that the heap serves at
//! once, as one thread's pair of a block does (a kernel's scratch). Each makes no call and
//! cannot panic, so the function it is inlined into (`Pool::acquire`, `Pool::release`) saves
//! few registers; at the first condition it does not meet, it returns having changed nothing,
//! and the caller takes the full path out of line (`Heap::acquire`, `Heap::take_back`). A
//! 64-byte pair went from 1.4-1.6x glibc's time to 1.3x (`cargo bench -p graphsched-workloads
//! --bench pool`).

use super::{block_for, Heap};
use crate::pool::out_table::Out;
use crate::pool::slab::Classes;
use crate::pool::Pool;

impl Heap {
    /// An acquire of `nbytes` (as for [`acquire`](Self::acquire)) that the heap serves at
    /// once: its lock taken under the bias, a block in the bin of its size, its record's front
    /// slot free. None, having changed nothing, when one of these fails: the caller takes
    /// [`acquire`](Self::acquire). It makes no call and cannot panic, so the function it is
    /// inlined into need not save registers for it. The caller checked that no memory checker
    /// watches. (A block held long in the front slot sends every acquire to the full path, as
    /// fast as before there was a fast path.)
    #[inline]
    pub(in crate::pool) fn acquire_hit(&self, pool: &Pool, classes: &Classes, nbytes: usize) -> Option<usize> {
        let (block, class) = block_for(pool, classes, nbytes);
        let mut st = self.try_own(true)?;
        let out = Out {
            block,
            requested: nbytes,
            class,
        };
        let addr = match st.out.front_free(&self.shared) {
            true => st.pop_free(block, class),
            false => None,
        };
        let Some(addr) = addr else {
            // The full path counts this call.
            self.lock.uncount();
            return None;
        };
        st.out.fill_front(&self.shared, addr, out);
        st.count_out(pool, nbytes, true);
        Some(addr)
    }

    /// A release of `addr` (16-byte aligned) by the heap's owner that the heap takes back at
    /// once: its lock taken under the bias, the block's entry in its record's front slot, room
    /// in the bin of its size. False, having changed nothing, otherwise:
    /// the caller takes [`take_back`](Self::take_back). As [`acquire_hit`](Self::acquire_hit):
    /// no call, no panic, no memory checker.
    #[inline]
    pub(in crate::pool) fn release_hit(&self, addr: usize) -> bool {
        let Some(mut st) = self.try_own(false) else {
            return false;
        };
        let Some(out) = st.out.in_front(&self.shared, addr) else {
            return false;
        };
        if !st.push_free(addr, out) {
            return false;
        }
        st.out.clear_front(&self.shared);
        st.count_back(out);
        true
    }
}
