//! One server's row of figures (`ServeRow`, what a child prints as JSON), and how a server
//! fills it in from what its streams saw and what the process spent.

use super::closed_loop::{percentiles, Served};
use super::usage::Usage;
use serde::{Deserialize, Serialize};

/// One server's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServeRow {
    /// Who served and how.
    pub runtime: String,
    /// Closed-loop clients.
    pub clients: usize,
    /// Threads the server was given.
    pub threads: usize,
    /// Requests answered in the timed seconds.
    pub requests: u64,
    /// Requests a second.
    pub throughput_per_s: f64,
    /// Latency of one request: median and 99th percentile.
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// The process's peak resident memory, and its growth while serving.
    pub peak_rss_bytes: u64,
    pub rss_growth_bytes: u64,
    /// graphsched: the executor's memory budget, and the most its runs reserved at once.
    pub budget_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
    /// Every client's first answer equal, bit for bit, to the whole model's.
    pub bitwise_equal: bool,
    /// The priority client, when one ran: its model, how it was served, its requests, their
    /// latencies (median, 99th percentile), and its first answer checked like the others'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_runtime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_throughput_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_p50_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_p99_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_bitwise_equal: Option<bool>,
    /// graphsched: how long a request waited to enter the budget, on average (the priority
    /// client's apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_wait_ns_mean: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_budget_wait_ns_mean: Option<u64>,
    /// While serving, per request answered (the priority client's included): the process's
    /// CPU time (every thread's, user and system), context switches (voluntary: a thread
    /// blocked; involuntary: it was preempted) and minor page faults, from `getrusage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns_per_request: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voluntary_switches_per_request: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub involuntary_switches_per_request: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor_faults_per_request: Option<f64>,
}

/// A row of what `served` saw; the server fills in the rest (its check, its budget, the
/// priority stream, what the process spent).
pub(super) fn row(
    runtime: String,
    clients: usize,
    threads: usize,
    seconds: f64,
    served: &mut Served,
    rss: (u64, u64),
) -> ServeRow {
    let requests = served.latencies.len() as u64;
    let (p50_ns, p99_ns) = percentiles(&mut served.latencies);
    ServeRow {
        runtime,
        clients,
        threads,
        requests,
        throughput_per_s: requests as f64 / seconds,
        p50_ns,
        p99_ns,
        peak_rss_bytes: rss.1,
        rss_growth_bytes: rss.0,
        budget_bytes: None,
        peak_reserved_bytes: None,
        bitwise_equal: false,
        priority_model: None,
        priority_runtime: None,
        priority_requests: None,
        priority_throughput_per_s: None,
        priority_p50_ns: None,
        priority_p99_ns: None,
        priority_bitwise_equal: None,
        budget_wait_ns_mean: None,
        priority_budget_wait_ns_mean: None,
        cpu_ns_per_request: None,
        voluntary_switches_per_request: None,
        involuntary_switches_per_request: None,
        minor_faults_per_request: None,
    }
}

/// Fills in the priority stream's figures.
pub(super) fn add_priority(
    row: &mut ServeRow,
    model: &str,
    runtime: String,
    seconds: f64,
    served: &mut Served,
    equal: bool,
) {
    let (p50, p99) = percentiles(&mut served.latencies);
    row.priority_model = Some(model.to_string());
    row.priority_runtime = Some(runtime);
    row.priority_requests = Some(served.latencies.len() as u64);
    row.priority_throughput_per_s = Some(served.latencies.len() as f64 / seconds);
    row.priority_p50_ns = Some(p50);
    row.priority_p99_ns = Some(p99);
    row.priority_bitwise_equal = Some(equal);
}

/// Fills in what serving `requests` requests (every stream's) spent.
pub(super) fn add_usage(row: &mut ServeRow, spent: Usage, requests: u64) {
    if spent == Usage::default() || requests == 0 {
        return;
    }
    let per = |x: u64| Some(x as f64 / requests as f64);
    row.cpu_ns_per_request = per(spent.cpu_ns);
    row.voluntary_switches_per_request = per(spent.voluntary);
    row.involuntary_switches_per_request = per(spent.involuntary);
    row.minor_faults_per_request = per(spent.minor_faults);
}
