//! The two knobs of a run, the window and the memory limit, traded off on the simulator.
//!
//! The seed design tunes them by hand: raise the window run by run while watching wall time and
//! peak memory, stop at the knee, size the limit from the overlapping lifetimes. [`sweep`] does
//! the same on the virtual clock, which takes milliseconds a point: every window from 1 to twice
//! the threads, against memory limits from the max-live bound up to none. The points no other
//! point beats on both time and memory form the Pareto front ([`pareto_front`]); the knee
//! ([`knee`]) is the front's point with the least memory among those within
//! [`KNEE_TOLERANCE`] of the fastest: past it, memory grows and time barely moves.

use graphsched::sim::{simulate, SimOptions};
use graphsched::{ErrorKind, Graph, Policy};
use serde::Serialize;

/// Memory limits tried, as multiples of the max-live bound; no limit is tried too.
pub const LIMIT_STEPS: [f64; 5] = [1.0, 1.1, 1.25, 1.5, 2.0];

/// A point within this share of the fastest point's makespan counts as fast as it.
pub const KNEE_TOLERANCE: f64 = 0.05;

/// One setting of the two knobs and what it gives.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    /// Most nodes in flight (windows at or above the threads do not cap anything).
    pub window: usize,
    /// Most bytes of values live at once; 0: no limit.
    pub memory_limit_bytes: u64,
    /// Simulated makespan.
    pub sim_makespan_ns: u64,
    /// Simulated peak of live bytes.
    pub sim_peak_bytes: u64,
    /// A real run's wall time, for confirmed points.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real_wall_ns: Option<u64>,
    /// A real run's peak live bytes, for confirmed points.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real_peak_bytes: Option<u64>,
}

impl Point {
    /// Whether `self` is at least as good as `other` on both counts and better on one.
    pub fn dominates(&self, other: &Point) -> bool {
        let no_worse = self.sim_makespan_ns <= other.sim_makespan_ns && self.sim_peak_bytes <= other.sim_peak_bytes;
        no_worse && (self.sim_makespan_ns < other.sim_makespan_ns || self.sim_peak_bytes < other.sim_peak_bytes)
    }
}

/// A sweep: every feasible point, the front and the knee.
#[derive(Clone, Debug, Serialize)]
pub struct Sweep {
    /// Threads simulated.
    pub threads: usize,
    /// Every feasible point, windows ascending, then limits ascending (none last).
    pub points: Vec<Point>,
    /// Indices into `points` of the Pareto front, least memory first.
    pub front: Vec<usize>,
    /// Index into `points` of the knee (on the front).
    pub knee: usize,
    /// Settings the simulator could not finish: a limit below what some node needs at once.
    pub infeasible: Vec<(usize, u64)>,
}

/// The limits tried for a graph whose max-live bound is `max_live_bytes`, ascending, 0 (none)
/// last.
pub fn limits(max_live_bytes: u64) -> Vec<u64> {
    let mut limits: Vec<u64> = LIMIT_STEPS
        .iter()
        .map(|f| (max_live_bytes as f64 * f).ceil() as u64)
        .filter(|&limit| limit > 0)
        .collect();
    limits.dedup();
    limits.push(0);
    limits
}

/// Simulates `graph` on `threads` threads at every window from 1 to `2 * threads` and every
/// limit of [`limits`], with the runs' default policy.
pub fn sweep(graph: &Graph, threads: usize, max_live_bytes: u64) -> graphsched::Result<Sweep> {
    let mut points = Vec::new();
    let mut infeasible = Vec::new();
    for window in 1..=2 * threads.max(1) {
        for &limit in &limits(max_live_bytes) {
            let options = SimOptions {
                threads,
                policy: Policy::default(),
                window,
                memory_limit_bytes: limit,
            };
            match simulate(graph, &options) {
                Ok(r) => points.push(Point {
                    window,
                    memory_limit_bytes: limit,
                    sim_makespan_ns: r.makespan_ns,
                    sim_peak_bytes: r.peak_live_bytes,
                    real_wall_ns: None,
                    real_peak_bytes: None,
                }),
                Err(e) if e.kind() == ErrorKind::MemoryLimit => infeasible.push((window, limit)),
                Err(e) => return Err(e),
            }
        }
    }
    let front = pareto_front(&points);
    let knee = knee(&points, &front);
    Ok(Sweep {
        threads,
        points,
        front,
        knee,
        infeasible,
    })
}

/// The points no other point dominates, least memory first; of points with the same outcome,
/// only the first (the smallest window, then the tightest limit).
pub fn pareto_front(points: &[Point]) -> Vec<usize> {
    let mut front: Vec<usize> = (0..points.len())
        .filter(|&i| !points.iter().any(|p| p.dominates(&points[i])))
        .collect();
    let outcome = |i: usize| (points[i].sim_peak_bytes, points[i].sim_makespan_ns);
    front.sort_by_key(|&i| (outcome(i), i));
    front.dedup_by_key(|i| outcome(*i));
    front
}

/// The front's point with the least memory whose makespan is within [`KNEE_TOLERANCE`] of the
/// fastest point's. `front` must not be empty.
pub fn knee(points: &[Point], front: &[usize]) -> usize {
    let fastest = front.iter().map(|&i| points[i].sim_makespan_ns).min().unwrap_or(0);
    let fast_enough = (fastest as f64 * (1.0 + KNEE_TOLERANCE)) as u64;
    front
        .iter()
        .copied()
        .filter(|&i| points[i].sim_makespan_ns <= fast_enough)
        .min_by_key(|&i| (points[i].sim_peak_bytes, i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(window: usize, makespan: u64, peak: u64) -> Point {
        Point {
            window,
            memory_limit_bytes: 0,
            sim_makespan_ns: makespan,
            sim_peak_bytes: peak,
            real_wall_ns: None,
            real_peak_bytes: None,
        }
    }

    #[test]
    fn the_front_keeps_what_nothing_beats_and_one_of_each_outcome() {
        let points = vec![
            point(1, 100, 10), // front: least memory
            point(2, 60, 20),  // front
            point(3, 60, 20),  // same outcome as 2: left out
            point(4, 70, 30),  // dominated by 2
            point(5, 50, 40),  // front: fastest
            point(6, 50, 45),  // dominated by 5
        ];
        assert_eq!(pareto_front(&points), [0, 1, 4]);
    }

    #[test]
    fn the_knee_is_the_least_memory_within_the_tolerance_of_the_fastest() {
        let points = vec![point(1, 100, 10), point(2, 52, 20), point(3, 50, 40)];
        let front = pareto_front(&points);
        assert_eq!(
            knee(&points, &front),
            1,
            "52 is within 5% of 50 and needs half the memory"
        );
        let points = vec![point(1, 100, 10), point(2, 60, 20), point(3, 50, 40)];
        assert_eq!(knee(&points, &pareto_front(&points)), 2, "60 is not within 5% of 50");
    }

    #[test]
    fn limits_rise_from_the_bound_and_end_with_none() {
        assert_eq!(limits(1000), [1000, 1100, 1250, 1500, 2000, 0]);
        assert_eq!(limits(0), [0], "no bound, no limit to try");
    }
}
