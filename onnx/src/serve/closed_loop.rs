//! The clients' closed loop: streams of clients sending requests back to back for the timed
//! seconds, what each stream saw (latencies, first answers), and its percentiles.

use crate::measure::median;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One request's answer: every output's bytes.
pub(super) type Answer = Vec<Vec<u8>>;

/// Answers one request of a client (`request(client, check)`), its output bytes when `check`.
pub(super) type Request<'a> = &'a (dyn Fn(usize, bool) -> Result<Option<Answer>, String> + Sync);

/// What one stream of clients saw: every request's latency, and each client's first answer.
#[derive(Debug, Default)]
pub(super) struct Served {
    pub(super) latencies: Vec<u64>,
    pub(super) answers: Vec<Answer>,
}

/// Streams of closed-loop clients, all at once: `(clients, request)` each, every client
/// sending requests back to back until `seconds` pass. What each stream saw, in order.
pub(super) fn closed_loop(seconds: f64, streams: &[(usize, Request<'_>)]) -> Result<Vec<Served>, String> {
    let stop = AtomicBool::new(false);
    let served: Vec<Mutex<Served>> = streams.iter().map(|_| Mutex::new(Served::default())).collect();
    let failure = Mutex::new(None);
    std::thread::scope(|s| {
        for (&(clients, request), served) in streams.iter().zip(&served) {
            for c in 0..clients {
                let (stop, failure) = (&stop, &failure);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    let mut first = true;
                    while !stop.load(Ordering::Relaxed) {
                        let start = Instant::now();
                        match request(c, first) {
                            Ok(out) => {
                                mine.push(start.elapsed().as_nanos() as u64);
                                if let Some(out) = out {
                                    served.lock().unwrap().answers.push(out);
                                }
                            }
                            Err(e) => {
                                *failure.lock().unwrap() = Some(e);
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                        first = false;
                    }
                    served.lock().unwrap().latencies.extend(mine);
                });
            }
        }
        // Until the time is up, or a failed request stopped the clients.
        let end = Instant::now() + Duration::from_secs_f64(seconds);
        while !stop.load(Ordering::Relaxed) {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(10)));
        }
        stop.store(true, Ordering::Relaxed);
    });
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(e);
    }
    Ok(served.into_iter().map(|s| s.into_inner().unwrap()).collect())
}

/// p50 and p99 of `xs`.
pub(super) fn percentiles(xs: &mut [u64]) -> (u64, u64) {
    xs.sort_unstable();
    let p99 = xs
        .get((xs.len() * 99 / 100).min(xs.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0);
    (median(xs), p99)
}

/// Every answer `served` checked equals `want` (and there is one).
pub(super) fn all_equal(served: &Served, want: &Answer) -> bool {
    !served.answers.is_empty() && served.answers.iter().all(|a| a == want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::row::{add_priority, add_usage, row, ServeRow};
    use crate::serve::usage::Usage;

    #[test]
    fn percentiles_are_the_median_and_the_99th() {
        assert_eq!(percentiles(&mut [5, 1, 3, 2, 4]), (3, 5));
    }

    #[test]
    fn each_stream_keeps_its_own_latencies_and_first_answers() {
        // Two clients of 1 ms requests, one priority client of 3 ms: every client checks its
        // first answer only, and the streams' latencies stay apart.
        let slow = |c: usize, keep: bool| -> Result<Option<Answer>, String> {
            std::thread::sleep(Duration::from_millis(1));
            Ok(keep.then(|| vec![vec![c as u8]]))
        };
        let urgent = |_: usize, keep: bool| -> Result<Option<Answer>, String> {
            std::thread::sleep(Duration::from_millis(3));
            Ok(keep.then(|| vec![vec![9]]))
        };
        let mut served = closed_loop(0.2, &[(2, &slow), (1, &urgent)]).unwrap();
        assert_eq!(served.len(), 2);
        let mut firsts = served[0].answers.clone();
        firsts.sort();
        assert_eq!(firsts, vec![vec![vec![0]], vec![vec![1]]]);
        assert_eq!(served[1].answers, vec![vec![vec![9]]]);
        assert!(served[0].latencies.len() > served[1].latencies.len());
        assert!(served[1].latencies.iter().all(|&ns| ns >= 3_000_000));
        let mut row = row("x".into(), 2, 2, 0.2, &mut served[0], (0, 0));
        assert!(!row.bitwise_equal, "set by the server from its reference");
        assert!(row.priority_p99_ns.is_none());
        let text = serde_json::to_string(&row).unwrap();
        assert!(
            !text.contains("priority"),
            "rows without a priority client print as before: {text}"
        );
        let n = served[1].latencies.len() as u64;
        add_priority(&mut row, "cls", "high".into(), 0.2, &mut served[1], true);
        assert_eq!(row.priority_requests, Some(n));
        assert!(row.priority_p50_ns.unwrap() >= 3_000_000);
        assert!(row.priority_p99_ns >= row.priority_p50_ns);
        assert!(row.p50_ns < row.priority_p50_ns.unwrap(), "the streams were not mixed");
        let before = Usage::now();
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let spent = Usage::now().since(before);
        if cfg!(target_os = "linux") {
            assert!(spent.cpu_ns >= 10_000_000, "20 ms of spinning is CPU time: {spent:?}");
        }
        add_usage(&mut row, spent, 4);
        assert_eq!(row.cpu_ns_per_request, Some(spent.cpu_ns as f64 / 4.0));
        let back: ServeRow = serde_json::from_str(&serde_json::to_string(&row).unwrap()).unwrap();
        assert_eq!(back.priority_p99_ns, row.priority_p99_ns);
        assert_eq!(back.priority_model.as_deref(), Some("cls"));
    }

    #[test]
    fn a_failing_request_stops_every_stream_and_is_reported() {
        let fine = |_: usize, _: bool| -> Result<Option<Answer>, String> {
            std::thread::sleep(Duration::from_millis(1));
            Ok(None)
        };
        let fails = |_: usize, _: bool| -> Result<Option<Answer>, String> { Err("broken".into()) };
        let start = Instant::now();
        assert_eq!(closed_loop(5.0, &[(2, &fine), (1, &fails)]).unwrap_err(), "broken");
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "no need to serve the time out"
        );
    }
}
