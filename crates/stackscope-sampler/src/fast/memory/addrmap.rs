//! Maps keyed by addresses in the target (and by thread ids), hashed cheaply.
//!
//! The reader looks up every frame's code object in a map each sample; the standard SipHash
//! is built to resist keys chosen by an attacker and costs several times more than a
//! multiply. Addresses are not chosen to collide (and a collision only costs speed), so a
//! Fibonacci multiply spreads them well enough.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

pub(crate) type AddrMap<V> = HashMap<usize, V, BuildHasherDefault<AddrHasher>>;

/// The same, keyed by thread ids (looked up for every thread, every sample).
pub(crate) type TidMap<V> = HashMap<u64, V, BuildHasherDefault<AddrHasher>>;

/// The same, keyed by process ids (looked up for every process, every sample).
pub(crate) type PidMap<V> = HashMap<u32, V, BuildHasherDefault<AddrHasher>>;

#[derive(Default)]
pub(crate) struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.write_usize(n as usize);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_usize(n as usize);
    }

    fn write_usize(&mut self, n: usize) {
        // The low bits of an object's address are always zero (8-byte alignment): fold the
        // high half of the product down so that the table's low bits vary.
        let x = (n as u64 ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_addresses_spread_over_the_table() {
        let mut map: AddrMap<usize> = AddrMap::default();
        for i in 0..10_000usize {
            map.insert(0x7f00_0000_0000 + i * 64, i);
        }
        for i in 0..10_000usize {
            assert_eq!(map.get(&(0x7f00_0000_0000 + i * 64)), Some(&i));
        }
        let distinct_low: std::collections::HashSet<u64> = (0..1024usize)
            .map(|i| {
                let mut h = AddrHasher::default();
                h.write_usize(0x5555_0000 + i * 16);
                h.finish() & 1023
            })
            .collect();
        assert!(distinct_low.len() > 500, "{}", distinct_low.len());
    }
}
