//! `--serve`: many requests at once, as a server meets them. N closed-loop clients each send
//! requests back to back for T seconds; each configuration runs in a process of its own (its
//! peak RSS its own), and every client's first answer is checked bit for bit.
//!
//! - graphsched: the clusters it chose for the thread count (`--partition`), one executor and
//!   one pool for every client, the executor's memory budget set to one request's bound times
//!   the threads (what graphsched admits: the values between clusters; the clusters' internal
//!   values come from the same pool through the `OrtAllocator`, outside the budget, as one
//!   block a cluster's run with ONNX Runtime's memory pattern);
//! - ONNX Runtime: one session of the whole model shared by every client (concurrent `Run`),
//!   with one intra-op thread, and with the threads as intra-op threads.
//!
//! With a priority stream (`--priority-model`), one more closed-loop client sends another
//! model's requests: to graphsched at `GS_PRIORITY_HIGH`, on the same executor and pool (that
//! model's own clusters; the budget has room for its request besides the others'); to ONNX Runtime as a
//! second session, with one intra-op thread and with the threads (it has no priorities: which
//! setting serves it best is measured, not guessed). Its latencies are reported apart.
//!
//! Here: the servers and the jobs that measure them, what a child is asked to serve, and
//! `serve`, which hands it to its server (`graphsched`, `ort`); the clients' loop, the rows and
//! what the process spends have a file each.

mod closed_loop;
mod graphsched;
mod ort;
mod row;
mod usage;

pub use row::ServeRow;

use crate::manifest::Manifest;
use std::path::Path;

/// Who serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// graphsched over its clusters, under a memory budget.
    Graphsched,
    /// One ONNX Runtime session, one intra-op thread, shared by every client.
    OrtShared,
    /// One ONNX Runtime session with the threads as intra-op threads, shared.
    OrtIntra,
}

impl Server {
    /// Every server, by the name its child process is given.
    pub const ALL: [(&'static str, Server); 3] = [
        ("gs", Server::Graphsched),
        ("ort-shared", Server::OrtShared),
        ("ort-intra", Server::OrtIntra),
    ];

    /// The server a child-process name stands for.
    pub fn parse(key: &str) -> Option<Server> {
        Server::ALL.iter().find(|(k, _)| *k == key).map(|(_, s)| *s)
    }

    /// The name a child process is given.
    pub fn key(self) -> &'static str {
        Server::ALL.iter().find(|(_, s)| *s == self).map_or("gs", |(k, _)| *k)
    }
}

/// One server to measure, in a child process of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub server: Server,
    /// With the priority client.
    pub priority: bool,
    /// ONNX Runtime, with the priority client: its session's intra-op threads (graphsched: 0).
    pub priority_intra: usize,
}

/// The servers to measure: every server without a priority client; with `priority`, then
/// graphsched with it, and ONNX Runtime's two sessions with its second session on one intra-op
/// thread and on `threads` (the rows without it are what the priority client costs the others).
pub fn jobs(priority: bool, threads: usize) -> Vec<Job> {
    let mut jobs: Vec<Job> = Server::ALL
        .iter()
        .map(|&(_, server)| Job {
            server,
            priority: false,
            priority_intra: 0,
        })
        .collect();
    if priority {
        jobs.push(Job {
            server: Server::Graphsched,
            priority: true,
            priority_intra: 0,
        });
        let mut intra = vec![1, threads.max(1)];
        intra.dedup();
        for server in [Server::OrtShared, Server::OrtIntra] {
            for &priority_intra in &intra {
                jobs.push(Job {
                    server,
                    priority: true,
                    priority_intra,
                });
            }
        }
    }
    jobs
}

/// The priority stream a child serves besides the clients.
pub struct Priority<'m> {
    /// The model its requests run (its prepared directory, partitioned too).
    pub manifest: &'m Manifest,
    /// ONNX Runtime: the second session's intra-op threads.
    pub ort_intra_threads: usize,
}

/// How much a server is asked to serve, and with what.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Closed-loop clients (the priority client apart).
    pub clients: usize,
    /// Seconds measured.
    pub seconds: f64,
    /// The server's threads.
    pub threads: usize,
    /// graphsched's memory budget in bytes (0: none); by default one request's need (what it
    /// holds in the pool at its peak, measured alone) times the threads, and the priority
    /// model's need besides.
    pub budget: Option<u64>,
}

/// In a child process: serves `load` (and the `priority` client) with `server`.
pub fn serve(
    manifest: &Manifest,
    library: &Path,
    server: Server,
    load: Load,
    priority: Option<Priority<'_>>,
) -> Result<ServeRow, String> {
    if load.clients == 0 {
        return Err("--clients must be at least 1".into());
    }
    match server {
        Server::Graphsched => graphsched::serve_graphsched(manifest, library, load, priority),
        Server::OrtShared | Server::OrtIntra => ort::serve_ort(manifest, library, server, load, priority),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_priority_model_the_servers_are_as_before_and_with_one_each_runs_both_ways() {
        let keys = |jobs: &[Job]| -> Vec<(&str, bool, usize)> {
            jobs.iter()
                .map(|j| (j.server.key(), j.priority, j.priority_intra))
                .collect()
        };
        let plain = vec![("gs", false, 0), ("ort-shared", false, 0), ("ort-intra", false, 0)];
        assert_eq!(keys(&jobs(false, 2)), plain);
        let mut with = plain.clone();
        with.extend([
            ("gs", true, 0),
            ("ort-shared", true, 1),
            ("ort-shared", true, 2),
            ("ort-intra", true, 1),
            ("ort-intra", true, 2),
        ]);
        assert_eq!(keys(&jobs(true, 2)), with);
        // One thread: the second session's one setting once.
        let one = jobs(true, 1);
        assert_eq!(one.len(), 3 + 1 + 2);
        for (k, _) in Server::ALL {
            assert_eq!(Server::parse(Server::parse(k).unwrap().key()), Server::parse(k));
        }
    }
}
