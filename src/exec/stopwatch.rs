//! A run's wall time, cheaply. `Instant::now` is a `clock_gettime` call: 30-40 ns on a virtual
//! machine, and a run reads the time twice, which on a one-node graph is a sixth of what the
//! whole run costs. The CPU's time-stamp counter reads in about a third of that.
//!
//! **The model.** Where the counter ticks at one constant rate on every core (x86-64 with an
//! invariant TSC, which Linux has chosen as its clock source, so it found the cores' counters in
//! step), a run's start and end are counter readings, turned into nanoseconds at a rate measured
//! against `Instant` once per process: the first reading anchors both clocks, and the first
//! reading at least [`CALIBRATION_TICKS`] later fixes the rate from how far each moved. Until
//! then, and wherever the counter is not known to be steady, runs read `Instant`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Counter ticks between the anchor and the reading that fixes the rate: over 10 ms at up to
/// 3 GHz, long enough that the two `Instant` readings' own cost and jitter are below 1e-5 of it.
const CALIBRATION_TICKS: u64 = 1 << 25;

/// A run's start: a counter reading, or an `Instant` where the counter is not used (yet).
#[derive(Clone, Copy)]
pub(super) enum Stopwatch {
    Ticks(u64),
    Clock(Instant),
}

impl Stopwatch {
    pub fn start() -> Stopwatch {
        match counter() {
            Some(c) if c.rate() != 0 => Stopwatch::Ticks(read_ticks()),
            Some(c) => {
                c.calibrate();
                Stopwatch::Clock(Instant::now())
            }
            None => Stopwatch::Clock(Instant::now()),
        }
    }

    /// Nanoseconds since [`start`](Self::start).
    pub fn elapsed_ns(self) -> u64 {
        match self {
            Stopwatch::Clock(at) => at.elapsed().as_nanos() as u64,
            Stopwatch::Ticks(at) => {
                let rate = counter().map_or(0, Counter::rate);
                // A core whose counter lags the start's by a few ticks reads as 0, not as years.
                let ticks = read_ticks().saturating_sub(at);
                ((ticks as u128 * rate as u128) >> RATE_SHIFT) as u64
            }
        }
    }
}

/// The rate is nanoseconds per tick in fixed point, with this many fraction bits.
const RATE_SHIFT: u32 = 32;

/// The time-stamp counter and its rate, where it is steady.
struct Counter {
    anchor: (Instant, u64),
    /// Nanoseconds per tick << RATE_SHIFT; 0 until calibrated. Relaxed: a thread that reads 0
    /// uses `Instant` for that run, and the value never changes once set.
    rate: AtomicU64,
}

impl Counter {
    fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Fixes the rate if the counter has gone far enough since the anchor.
    #[cold]
    fn calibrate(&self) {
        let ticks = read_ticks().wrapping_sub(self.anchor.1);
        if !(CALIBRATION_TICKS..u64::MAX / 2).contains(&ticks) {
            return;
        }
        let ns = self.anchor.0.elapsed().as_nanos();
        let rate = ((ns << RATE_SHIFT) / ticks as u128).min(u64::MAX as u128) as u64;
        // Two threads may both calibrate: either rate is good.
        self.rate.store(rate.max(1), Ordering::Relaxed);
    }
}

fn counter() -> Option<&'static Counter> {
    static COUNTER: OnceLock<Option<Counter>> = OnceLock::new();
    COUNTER
        .get_or_init(|| {
            steady_counter().then(|| Counter {
                anchor: (Instant::now(), read_ticks()),
                rate: AtomicU64::new(0),
            })
        })
        .as_ref()
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn read_ticks() -> u64 {
    // SAFETY: RDTSC exists on every x86-64 CPU and only reads the counter.
    unsafe { std::arch::x86_64::_rdtsc() }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn read_ticks() -> u64 {
    0
}

/// Whether the counter is steady: an invariant TSC (CPUID 0x8000_0007, EDX bit 8), and Linux
/// keeps time with it (it drops the TSC as clock source when it finds the cores out of step).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn steady_counter() -> bool {
    use std::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86-64 CPU; leaves above the highest one it reports are not
    // read. (A safe function in newer Rust, unsafe in the oldest the crate supports.)
    #[allow(unused_unsafe)]
    let invariant = unsafe { __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0 };
    let source = std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    invariant && source.is_ok_and(|s| s.trim() == "tsc")
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn steady_counter() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whichever clock it uses, a stopwatch measures a sleep as an `Instant` does, within a
    /// tolerance the machine's load cannot break (it only lengthens both).
    #[test]
    fn a_stopwatch_agrees_with_instant() {
        // Past calibration where the counter is used: its first reading anchors it.
        let _ = Stopwatch::start();
        std::thread::sleep(std::time::Duration::from_millis(40));
        for _ in 0..3 {
            let (watch, clock) = (Stopwatch::start(), Instant::now());
            std::thread::sleep(std::time::Duration::from_millis(5));
            let (measured, reference) = (watch.elapsed_ns(), clock.elapsed().as_nanos() as u64);
            assert!(measured >= 5_000_000, "{measured} ns for a sleep of 5 ms");
            // The stopwatch starts before and reads after the reference: it may see more, by
            // the rate's error (1e-5) and the time between the readings, never 10% less.
            assert!(measured * 10 >= reference * 9, "{measured} ns against {reference}");
            assert!(
                measured <= reference + reference / 10 + 1_000_000,
                "{measured} ns against {reference}"
            );
        }
        if steady_counter() {
            assert!(
                counter().is_some_and(|c| c.rate() != 0),
                "the counter was not calibrated"
            );
        }
    }
}
