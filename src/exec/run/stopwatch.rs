//! A run's wall time, cheaply. `Instant::now` is a `clock_gettime` call: 30-40 ns on a virtual
//! machine, and a run reads the time twice, which on a one-node graph is a sixth of what the
//! whole run costs. The CPU's time-stamp counter reads in about a third of that.
//!
//! **The model.** Where the counter ticks at one constant rate on every core (x86-64 with an
//! invariant TSC, which Linux has chosen as its clock source, so it found the cores' counters in
//! step), a run's start and end are counter readings, turned into nanoseconds at a rate measured
//! against `Instant`. The first run anchors both clocks; the first run at least
//! [`CALIBRATION_TICKS`] later measures the rate from how far each moved, and runs measure it
//! again each time the span since the anchor has doubled, up to [`REFINE_TICKS`], so that the
//! reads' own jitter weighs less and less. Each pair of readings is bracketed: an `Instant` read
//! between two counter reads close together (a thread preempted between them tries again), so
//! a pause cannot skew the rate. Until the rate is known, and wherever the counter is not known
//! to be steady, runs read `Instant`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Counter ticks between the anchor and the first measurement of the rate: about 1 ms at 2 GHz,
/// so that a bracket's width (below [`BRACKET_TICKS`]) is at most 2e-3 of it. Runs until then
/// read `Instant` twice, 60-80 ns on a virtual machine: soon, so that a process's short runs
/// rarely pay it.
const CALIBRATION_TICKS: u64 = 1 << 21;
/// The rate is measured again at twice the span each time, up to this many ticks (about 3 s at
/// 3 GHz), where a bracket's width is below 1e-5 of the span.
const REFINE_TICKS: u64 = 1 << 33;
/// The widest bracket (counter reads around an `Instant` read) that is kept: about 2 us at 2 GHz,
/// where an undisturbed one is about 100 ticks.
const BRACKET_TICKS: u64 = 1 << 12;

/// A run's start: a counter reading, or an `Instant` where the counter is not used (yet).
#[derive(Clone, Copy)]
pub(in crate::exec) enum Stopwatch {
    Ticks(u64),
    Clock(Instant),
}

impl Stopwatch {
    pub(crate) fn start() -> Stopwatch {
        let Some(c) = counter() else {
            return Stopwatch::Clock(Instant::now());
        };
        let mut ticks = read_ticks();
        if ticks.wrapping_sub(c.anchor.1) >= c.next.load(Ordering::Relaxed) {
            c.calibrate();
            // What the calibration took is not the timed span's.
            ticks = read_ticks();
        }
        match c.rate() {
            0 => Stopwatch::Clock(Instant::now()),
            _ => Stopwatch::Ticks(ticks),
        }
    }

    /// Nanoseconds since [`start`](Self::start).
    pub(crate) fn elapsed_ns(self) -> u64 {
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
    /// An `Instant` and the counter's value when it was read (bracketed).
    anchor: (Instant, u64),
    /// Nanoseconds per tick << RATE_SHIFT; 0 until measured. Relaxed: a thread that reads 0 uses
    /// `Instant` for that run, and any value it reads is a good rate.
    rate: AtomicU64,
    /// Ticks since the anchor at which the rate is measured next (`u64::MAX`: no more).
    next: AtomicU64,
}

impl Counter {
    fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Measures the rate over the span since the anchor, if it is time to (`next`).
    #[cold]
    #[inline(never)]
    fn calibrate(&self) {
        let due = self.next.load(Ordering::Relaxed);
        let Some((now, ticks)) = bracketed() else {
            return; // preempted each time: the next run tries again
        };
        let span = ticks.wrapping_sub(self.anchor.1);
        // Below `due`: another thread measured meanwhile, or this core's counter lags the
        // anchor's by a few ticks (the span wrapped).
        if span < due || span > u64::MAX / 2 {
            return;
        }
        let after = if span >= REFINE_TICKS { u64::MAX } else { span * 2 };
        // One thread measures at each point; the others keep the rate they see.
        if self
            .next
            .compare_exchange(due, after, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let ns = now.saturating_duration_since(self.anchor.0).as_nanos();
        let rate = ((ns << RATE_SHIFT) / span as u128).min(u64::MAX as u128) as u64;
        self.rate.store(rate.max(1), Ordering::Relaxed);
    }
}

fn counter() -> Option<&'static Counter> {
    static COUNTER: OnceLock<Option<Counter>> = OnceLock::new();
    COUNTER
        .get_or_init(|| {
            let anchor = steady_counter().then(bracketed).flatten()?;
            Some(Counter {
                anchor,
                rate: AtomicU64::new(0),
                next: AtomicU64::new(CALIBRATION_TICKS),
            })
        })
        .as_ref()
}

/// An `Instant` and the counter's value when it was read: the middle of two counter reads at
/// most [`BRACKET_TICKS`] apart around it. None if a few tries were all wider (the thread was
/// preempted or the machine paused it each time).
fn bracketed() -> Option<(Instant, u64)> {
    (0..4).find_map(|_| {
        let before = read_ticks();
        let now = Instant::now();
        let width = read_ticks().wrapping_sub(before);
        (width <= BRACKET_TICKS).then_some((now, before + width / 2))
    })
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
    // A safe function in newer Rust, unsafe in the oldest the crate supports.
    #[allow(unused_unsafe)]
    // SAFETY: CPUID exists on every x86-64 CPU; leaves above the highest one it reports are not
    // read.
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
    use std::time::Duration;

    /// Whichever clock it uses, a stopwatch measures a sleep as `Instant` does: between the
    /// time from a read just after its start to a read just before its end, and the time from
    /// a read just before its start to a read just after its end (a loaded machine only widens
    /// that interval), give or take the rate's error.
    #[test]
    fn a_stopwatch_agrees_with_instant() {
        // Where the counter is used, its first reading anchors it; past 2^21 ticks a run
        // measures its rate.
        let _ = Stopwatch::start();
        std::thread::sleep(Duration::from_millis(40));
        for _ in 0..3 {
            let outer = Instant::now();
            let watch = Stopwatch::start();
            let inner = Instant::now();
            std::thread::sleep(Duration::from_millis(5));
            let inner_ns = inner.elapsed().as_nanos() as u64;
            let measured = watch.elapsed_ns();
            let outer_ns = outer.elapsed().as_nanos() as u64;
            assert!(
                measured >= inner_ns - inner_ns / 100,
                "{measured} ns, at least {inner_ns} expected"
            );
            assert!(
                measured <= outer_ns + outer_ns / 100,
                "{measured} ns, at most {outer_ns} expected"
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
