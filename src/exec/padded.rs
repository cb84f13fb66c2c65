//! A value alone on its cache line(s).

/// Keeps `T` on cache lines of its own, so that threads writing it do not invalidate the lines
/// of the fields next to it (false sharing). 128 bytes: two 64-byte lines, since x86 prefetches
/// lines in adjacent pairs (crossbeam-utils' `CachePadded` makes the same choice).
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}
