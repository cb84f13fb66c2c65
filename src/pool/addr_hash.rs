//! A hasher for block addresses, which are already well spread: a multiply and a fold instead
//! of SipHash, on the path of every acquire and release.

use std::hash::Hasher;

/// Hashes block addresses: multiply, then fold the high bits down, since addresses share their
/// low bits (alignment) and the table indexes by low bits.
#[derive(Default)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ b as u64);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        let h = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 32);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
